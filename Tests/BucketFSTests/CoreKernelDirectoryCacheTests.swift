@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The kernel's readdir cache (docs/SEMANTICS.md §6): a directory handle lets the kernel cache
/// what it reads; a later opendir lets it keep that copy only while the directory's cached
/// listing is fresh and would answer the same names, numbers and types.
@Suite struct CoreKernelDirectoryCacheTests {
    /// `d/` with three files; the TTL is the harness's 5 s.
    func harness(_ configure: (inout MountConfig) -> Void = { _ in }) -> Harness {
        let h = Harness(configure)
        for name in ["a", "b", "c"] { _ = h.store.put("d/" + name, name) }
        return h
    }

    /// One `ls` as the kernel makes it: opendir, then readdir to the end unless the kernel keeps
    /// its copy, releasedir. The caching the handle was given, and the names readdir answered
    /// (nil when the kernel answered from its copy).
    func ls(_ h: Harness, _ ino: UInt64) async throws -> (DirectoryCaching, [String]?) {
        let fh = try await h.fs.opendir(ino: ino)
        defer { h.fs.releasedir(ino: ino, fh: fh) }
        let caching = h.fs.directoryCaching(ino: ino, fh: fh)
        if caching == .keep { return (caching, nil) }
        var names: [String] = []
        var offset: UInt64 = 0
        while true {
            let part = try await h.fs.readdir(ino: ino, fh: fh, offset: offset)
            guard let last = part.last else { break }
            names += part.map(\.name)
            offset = last.offset
        }
        return (caching, names)
    }

    @Test func theKernelKeepsItsCopyWhileTheListingAnswersTheSame() async throws {
        let h = harness()
        let d = try await h.ino("d")
        let first = try await ls(h, d)
        #expect(first.0 == .fill)
        #expect(first.1 == ["a", "b", "c"])
        let lists = h.store.count("list")
        for _ in 0..<3 {
            #expect(try await ls(h, d).0 == .keep)
        }
        #expect(h.store.count("list") == lists, "kept copies ask the bucket nothing")
    }

    @Test func aChangeThroughTheMountGivesTheKernelAFreshCopy() async throws {
        let h = harness()
        let d = try await h.ino("d")
        _ = try await ls(h, d)
        #expect(try await ls(h, d).0 == .keep)
        try await h.createFile("d", "new", Data("n".utf8))
        let afterCreate = try await ls(h, d)
        #expect(afterCreate.0 == .fill)
        #expect(afterCreate.1 == ["a", "b", "c", "new"])
        #expect(try await ls(h, d).0 == .keep)
        try await h.fs.unlink(parent: d, name: "b")
        let afterUnlink = try await ls(h, d)
        #expect(afterUnlink.0 == .fill)
        #expect(afterUnlink.1 == ["a", "c", "new"])
        try await h.fs.rename(parent: d, name: "a", newParent: d, newName: "z", flags: 0)
        let afterRename = try await ls(h, d)
        #expect(afterRename.0 == .fill)
        #expect(afterRename.1 == ["c", "new", "z"])
    }

    @Test func whatTheBucketChangedShowsWhenTheListingExpires() async throws {
        let h = harness()
        let d = try await h.ino("d")
        _ = try await ls(h, d)
        _ = h.store.put("d/later", "x")
        // Within the TTL the listing answers as it did, and so may the kernel's copy.
        #expect(try await ls(h, d).0 == .keep)
        h.clock.advance(h.config.metadataTTL + 1)
        let expired = try await ls(h, d)
        #expect(expired.0 == .fill)
        #expect(expired.1 == ["a", "b", "c", "later"])
        #expect(try await ls(h, d).0 == .keep)
    }

    @Test func aKeptHandleTheKernelStillReadsFromAnswersTheSame() async throws {
        // The kernel reads through a kept handle what its copy lacks (pages it dropped).
        let h = harness()
        let d = try await h.ino("d")
        _ = try await ls(h, d)
        let fh = try await h.fs.opendir(ino: d)
        #expect(h.fs.directoryCaching(ino: d, fh: fh) == .keep)
        let part = try await h.fs.readdir(ino: d, fh: fh, offset: 1)
        h.fs.releasedir(ino: d, fh: fh)
        #expect(part.map(\.name) == ["b", "c"])
        #expect(try await ls(h, d).0 == .keep, "a kept handle's reads change nothing the kernel holds")
    }

    @Test func noCachingWithATTLOfZero() async throws {
        let h = harness { $0.metadataTTL = 0 }
        let d = try await h.ino("d")
        #expect(try await ls(h, d).0 == .none)
        #expect(try await ls(h, d).0 == .none)
    }

    @Test func aListingLargerThanTheCacheIsNeverKept() async throws {
        let h = harness { $0.maxCachedEntries = 2 }
        let d = try await h.ino("d")
        #expect(try await ls(h, d).1 == ["a", "b", "c"])
        #expect(try await ls(h, d).0 == .fill, "no cached listing vouches for the kernel's copy")
    }

    @Test func theFingerprintSeesEveryPartOfAnEntry() {
        let base: [(String, UInt64, FileType)] = [("a", 2, .regular), ("b", 3, .directory)]
        let fp = Superblock.fingerprint(base)
        #expect(Superblock.fingerprint(base.reversed()) == fp, "order is the snapshot's, not the fingerprint's")
        #expect(Superblock.fingerprint([("a", 2, .regular), ("c", 3, .directory)]) != fp)
        #expect(Superblock.fingerprint([("a", 2, .regular), ("b", 4, .directory)]) != fp)
        #expect(Superblock.fingerprint([("a", 2, .regular), ("b", 3, .regular)]) != fp)
        #expect(Superblock.fingerprint([("a", 2, .regular)]) != fp)
        #expect(Superblock.fingerprint(base + [("a", 2, .regular)]) != fp)
    }
}
