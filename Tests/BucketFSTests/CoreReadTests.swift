@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Listing, lookup, stat, TTL and reads (docs/SEMANTICS.md §3, §6).
@Suite struct CoreReadTests {
    // MARK: listing

    @Test func rootAndNestedDirectoriesFromPrefixes() async throws {
        let h = Harness()
        h.store.put("top.txt", "t")
        h.store.put("docs/a.md", "a")
        h.store.put("docs/deep/b.md", "b")
        h.store.put("docs/deep/deeper/c.md", "c")
        #expect(try await h.names("") == ["docs", "top.txt"])
        #expect(try await h.names("docs") == ["a.md", "deep"])
        #expect(try await h.names("docs/deep") == ["b.md", "deeper"])
        #expect(try await h.names("docs/deep/deeper") == ["c.md"])
        let entries = try await h.readdirAll(Harness.root)
        #expect(entries.first { $0.name == "docs" }?.entry.attributes.type == .directory)
        #expect(entries.first { $0.name == "top.txt" }?.entry.attributes.type == .regular)
        #expect(try await h.lookup("docs/deep").attributes.type == .directory)
        #expect(try await h.lookup("docs/deep/b.md").attributes.type == .regular)
    }

    @Test func placeholderMakesAnEmptyDirectoryAndCarriesItsXattrs() async throws {
        let h = Harness()
        h.store.put("empty/", Data(), custom: ["owner": "ann"])
        h.store.put("file", "x")
        #expect(try await h.names("") == ["empty", "file"])
        #expect(try await h.names("empty") == [])
        let ino = try await h.ino("empty")
        #expect(try await h.fs.listxattr(ino: ino) == ["user.owner"])
        #expect(try await h.xattr(ino, "user.owner") == "ann")
        // Also without a listing of the parent (a fresh mount, lookup by name).
        let h2 = Harness(store: h.store)
        let e = try await h2.lookup("empty")
        #expect(e.attributes.type == .directory)
        #expect(try await h2.xattr(e.attributes.ino, "user.owner") == "ann")
    }

    @Test func unrepresentableNamesNeverAppear() async throws {
        let h = Harness()
        let long = String(repeating: "x", count: 256)
        // NUL: a C string would end there, so `ok\0evil` would reach the kernel as a second `ok`.
        for n in ["ok", "a//b", "d/./e", "d/../f", "./g", "../h", "cr\rname", "lf\nname", long, "dir/" + long,
                  "d/fine", "w//", "ok\u{0}evil", "n\u{0}/x"] {
            h.store.put(n, "1")
        }
        let root = try await h.names("")
        #expect(!root.contains { $0.contains("\n") || $0.contains("\r") || $0.utf8.count > 255 })
        #expect(!root.contains("."))
        #expect(!root.contains(".."))
        #expect(!root.contains(""))
        #expect(root.contains("ok"))
        #expect(try await h.names("d") == ["fine"])
        // `a//b`, `w//` and `dir/<256 bytes>` make `a`, `w` and `dir` exist as directories (their
        // prefixes are real); nothing inside them is shown.
        #expect(root == ["a", "d", "dir", "ok", "w"])
        #expect(try await h.names("a") == [])
        #expect(try await h.names("w") == [])
        #expect(try await h.names("dir") == [])
        // Lookups of such names fail cleanly.
        await #expect(throws: Errno.EINVAL) { try await h.fs.lookup(parent: Harness.root, name: "lf\nname") }
        await #expect(throws: Errno.ENAMETOOLONG) { try await h.fs.lookup(parent: Harness.root, name: long) }
    }

    @Test func objectAndPrefixOfTheSameNameShowOnlyTheDirectory() async throws {
        let h = Harness()
        h.store.put("a", "file bytes")
        h.store.put("a/inner", "x")
        let entries = try await h.readdirAll(Harness.root)
        #expect(entries.map(\.name) == ["a"])
        #expect(entries[0].entry.attributes.type == .directory)
        // And by lookup on a fresh mount (no listing).
        let h2 = Harness(store: h.store)
        #expect(try await h2.lookup("a").attributes.type == .directory)
        #expect(try await h2.names("a") == ["inner"])
    }

    @Test func readdirOffsetsAreStableAcrossCalls() async throws {
        let h = Harness()
        let names = (0..<50).map { String(format: "f%03d", $0) }
        for n in names { h.store.put("d/" + n, "1") }
        let ino = try await h.ino("d")
        let all = try await h.readdirAll(ino)
        #expect(all.map(\.name) == names)
        #expect(all.map(\.offset) == (1...50).map(UInt64.init))
        // A small reply buffer: 7 at a time, asking again from the last offset that fit.
        let chunked = try await h.readdirAll(ino, chunk: 7)
        #expect(chunked.map(\.name) == names)
        // A change in the bucket while the directory is open does not shift offsets of that handle.
        let fh = try await h.fs.opendir(ino: ino)
        let first = try await h.fs.readdir(ino: ino, fh: fh, offset: 0)
        h.store.put("d/a-new-first", "1")
        h.clock.advance(10)
        let again = try await h.fs.readdir(ino: ino, fh: fh, offset: 20)
        #expect(again.first?.name == first[20].name)
        #expect(again.first?.offset == 21)
        h.fs.releasedir(ino: ino, fh: fh)
    }

    @Test func inodeNumbersAreStable() async throws {
        let h = Harness()
        h.store.put("x/y/z.txt", "1")
        h.store.put("x/other", "1")
        let a = try await h.lookup("x/y/z.txt").attributes.ino
        let b = try await h.lookup("x/y/z.txt").attributes.ino
        #expect(a == b)
        let fromReaddir = try await h.readdirAll(try await h.ino("x/y")).first { $0.name == "z.txt" }?.entry.attributes.ino
        #expect(fromReaddir == a)
        h.clock.advance(60)  // past every TTL
        #expect(try await h.lookup("x/y/z.txt").attributes.ino == a)
        #expect(try await h.ino("x") != a)
        #expect(try await h.ino("x/other") != a)
        #expect(try await h.getattr(a).ino == a)
    }

    // MARK: request counting (docs/SEMANTICS.md §6)

    @Test func listingFillsAttributeAndXattrCaches() async throws {
        // 10,000 calls over 2,500 files: the invariants (O(inodes)) are checked after every 50th.
        let h = Harness(checkEvery: 50) { $0.listPageSize = 1000 }
        let names = (0..<2500).map { String(format: "file-%05d.dat", $0) }
        for (i, n) in names.enumerated() {
            h.store.put("big/" + n, Data(repeating: 1, count: i % 7), custom: ["idx": String(i), "tag": "t\(i % 3)"])
        }
        let dir = try await h.ino("big")
        h.store.resetCounts()

        let entries = try await h.readdirAll(dir, chunk: 300)
        #expect(entries.map(\.name) == names)
        for (i, n) in names.enumerated() {
            let e = try await h.fs.lookup(parent: dir, name: n)
            #expect(e.attributes.size == UInt64(i % 7))
            let (a, _) = try await h.fs.getattr(ino: e.attributes.ino)
            #expect(a.size == UInt64(i % 7))
            #expect(try await h.fs.listxattr(ino: e.attributes.ino) == ["user.idx", "user.tag"])
            #expect(try await h.xattr(e.attributes.ino, "user.idx") == String(i))
        }
        #expect(h.store.counts == ["list": 3])
        #expect(h.store.lists.allSatisfy { $0.prefix == "big/" && $0.delimiter == "/" && $0.maxResults == 1000 })
    }

    // MARK: stat

    @Test func statMapping() async throws {
        let h = Harness {
            $0.uid = 1234; $0.gid = 5678; $0.fileMode = 0o640; $0.dirMode = 0o750
        }
        let plain = h.store.put("plain.bin", Data(count: 1000))
        h.store.put("stamped.bin", Data(count: 10), custom: [XattrName.mtimeKey: "1500000000"])
        h.store.put("dir/child", "1")
        let a = try await h.lookup("plain.bin").attributes
        #expect(a.type == .regular)
        #expect(a.size == 1000)
        #expect(a.blocks == 2)
        #expect(a.mtime == plain.updated.timeIntervalSince1970)
        #expect(a.ctime == plain.updated.timeIntervalSince1970)
        #expect(a.permissions == 0o640)
        #expect(a.uid == 1234 && a.gid == 5678)
        let s = try await h.lookup("stamped.bin").attributes
        #expect(s.mtime == 1_500_000_000)
        #expect(s.ctime == h.store.object("stamped.bin")!.updated.timeIntervalSince1970)
        let d = try await h.lookup("dir").attributes
        #expect(d.type == .directory)
        #expect(d.nlink == 1)
        #expect(d.permissions == 0o750)
        #expect(d.uid == 1234 && d.gid == 5678)
        let (r, _) = try await h.fs.getattr(ino: Harness.root)
        #expect(r.type == .directory && r.nlink == 1)
        #expect(try await h.fs.statfs(ino: Harness.root).nameMax == 255)
    }

    // MARK: TTL and close-to-open

    @Test func getattrRereadsAfterTheTTL() async throws {
        let h = Harness { $0.metadataTTL = 5 }
        h.store.put("f", "12345")
        let ino = try await h.ino("f")
        h.store.resetCounts()
        h.clock.advance(4)
        _ = try await h.fs.getattr(ino: ino)
        #expect(h.store.totalRequests == 0)
        h.store.replaceBehind("f", Data("1234567".utf8))
        h.clock.advance(2)
        let (a, _) = try await h.fs.getattr(ino: ino)
        #expect(h.store.counts == ["get": 1])
        #expect(a.size == 7)
        _ = try await h.fs.getattr(ino: ino)
        #expect(h.store.counts == ["get": 1])
    }

    @Test func closeToOpenAndPinnedGenerations() async throws {
        let h = Harness { $0.metadataTTL = 5 }
        let v1 = h.store.put("f", "version one")
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        // The first read fetches the whole (small) generation into the handle's first read-ahead part.
        #expect(try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 4) == Data("vers".utf8))
        let v2 = h.store.replaceBehind("f", Data("version two!".utf8))
        // The open handle goes on reading generation 1 whatever happens, past the TTL too.
        h.clock.advance(10)
        let d = try await h.fs.read(ino: ino, fh: fh, offset: 4, size: 4096)
        #expect(d == Data("ion one".utf8))
        #expect(h.store.reads.last?.generation == v1.generation)
        try await h.fs.release(ino: ino, fh: fh)
        // After the TTL the next open sees v2 and its reads are pinned to v2.
        #expect(try await h.readAll(ino: ino) == Data("version two!".utf8))
        #expect(h.store.reads.last?.generation == v2.generation)
        #expect(h.store.reads.allSatisfy { $0.generation != nil })
        // A handle whose generation is replaced before it fetched anything cannot read it any
        // more (no store here keeps old generations): the read fails, never shows other bytes.
        // (v2, read whole above, is kept a little for the next open of v2: that passes first.)
        h.clock.advance(11)
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.kept.isEmpty)
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.replaceBehind("f", Data("three".utf8))
        await #expect(throws: Errno.ENOENT) { try await h.fs.read(ino: ino, fh: fh2, offset: 0, size: 4096) }
        #expect(h.store.reads.last?.generation == v2.generation)
        try await h.fs.release(ino: ino, fh: fh2)
    }

    @Test func openWithinTheTTLUsesTheCachedGeneration() async throws {
        let h = Harness { $0.metadataTTL = 5 }
        let v1 = h.store.put("f", "old")
        let ino = try await h.ino("f")
        h.store.replaceBehind("f", Data("new!".utf8))
        h.clock.advance(1)
        // Within the TTL the open costs no request and pins the cached generation, which the
        // bucket no longer has: the read fails (404 → ENOENT) instead of returning other bytes.
        h.store.resetCounts()
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(h.store.totalRequests == 0)
        await #expect(throws: Errno.ENOENT) { try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 4096) }
        #expect(h.store.reads.last?.generation == v1.generation)
        try await h.fs.release(ino: ino, fh: fh)
        // After the TTL the next open sees the new generation.
        h.clock.advance(10)
        #expect(try await h.readAll(ino: ino) == Data("new!".utf8))
    }

    // MARK: reads

    @Test func sequentialReadOfALargeObjectIsFewStoreReads() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 8 << 20 }
        let content = Data.pattern(20 << 20, seed: 7)
        h.store.put("big.bin", content)
        let ino = try await h.ino("big.bin")
        h.store.resetCounts()
        let got = try await h.readAll(ino: ino, chunk: 128 << 10)
        #expect(got.count == content.count)
        #expect(got == content)
        #expect(h.store.count("read") <= 6)
        #expect(h.store.count("read") >= 1)
        #expect(h.store.totalRequests == h.store.count("read"))
    }

    @Test func randomReadsReturnTheRightBytes() async throws {
        let h = Harness { $0.readPartFirst = 4096; $0.readPartMax = 65536 }
        let content = Data.pattern(300_000, seed: 3)
        h.store.put("r.bin", content)
        let ino = try await h.ino("r.bin")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        for (off, len) in [(250_000, 10_000), (0, 100), (299_990, 100), (1000, 70_000), (1050, 10), (400_000, 10)] {
            let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(off), size: len)
            let lo = min(off, content.count), hi = min(off + len, content.count)
            #expect(d == content.subdata(in: lo..<hi), "read at \(off) of \(len)")
        }
        try await h.fs.release(ino: ino, fh: fh)
    }
}

extension Harness {
    func getattr(_ ino: UInt64) async throws(Errno) -> FileAttributes { try await fs.getattr(ino: ino).0 }
}
