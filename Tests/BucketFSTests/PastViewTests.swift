@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The bucket as it was at a moment (`PastStore`, `PastSnapshot`) and `Restorer`, over the
/// versioned `MemoryStore`: a tree written through a live mount, then changed.
@Suite struct PastViewTests {
    /// A versioned bucket written through a mount (a directory, a file with a mode and an xattr,
    /// a symlink, a file later deleted, a directory emptied before the moment), then changed
    /// after the moment: `docs/a.txt` overwritten, `gone.txt` deleted, `new/n.txt` created.
    static func changedBucket() async throws -> (MemoryStore, Date) {
        let mem = MemoryStore(versioning: .on)
        let live = Harness(store: mem)
        _ = try await live.fs.mkdir(parent: Harness.root, name: "docs", mode: 0o750)
        let a = try await live.createFile("docs", "a.txt", Data("first".utf8))
        _ = try await live.fs.setattr(ino: a, fh: nil, changes: SetAttributes(mode: 0o600, mtime: 1_600_000_000))
        try await live.setXattr(a, "user.colour", "blue")
        _ = try await live.fs.symlink(parent: Harness.root, name: "link", target: "docs/a.txt")
        try await live.createFile("", "gone.txt", Data("bye".utf8))
        _ = try await live.fs.mkdir(parent: Harness.root, name: "early", mode: 0o755)
        try await live.createFile("early", "e.txt", Data("short-lived".utf8))
        try await live.fs.unlink(parent: try await live.ino("early"), name: "e.txt")
        try await live.fs.rmdir(parent: Harness.root, name: "early")
        await live.fs.shutdown(within: .seconds(5))
        // The moment: after every change above (the store's clock ticks one second per change).
        let page = try await mem.listVersions(ListRequest(prefix: "", delimiter: nil))
        let moment = page.versions.map { max($0.info.updated, $0.timeDeleted ?? .distantPast) }.max()!.addingTimeInterval(0.5)
        _ = try await mem.write("docs/a.txt", from: .data(Data("second, longer".utf8)), metadata: WritableMetadata(), preconditions: .none)
        try await mem.delete("gone.txt", preconditions: .none)
        _ = try await mem.write("new/n.txt", from: .data(Data("later".utf8)), metadata: WritableMetadata(), preconditions: .none)
        return (mem, moment)
    }

    static func pastMount(_ mem: MemoryStore, _ moment: Date) -> Harness {
        Harness(store: mem, view: PastStore(base: mem, listing: mem.versions!, moment: moment)) {
            $0.readOnly = true
            $0.pastMoment = moment
        }
    }

    @Test func namesShowTheGenerationLiveAtTheMoment() async throws {
        let (mem, moment) = try await Self.changedBucket()
        let h = Self.pastMount(mem, moment)
        // `early/` is among the versioned listing's prefixes (its object's versions are kept),
        // but nothing under it was live at the moment; `new/` came later.
        #expect(try await h.names("").filter { $0 != "." && $0 != ".." }.sorted() == ["docs", "gone.txt", "link"])
        #expect(try await h.readAll("docs/a.txt") == Data("first".utf8))
        #expect(try await h.readAll("gone.txt") == Data("bye".utf8))
        let a = try await h.lookup("docs/a.txt").attributes
        #expect(a.size == 5)
        #expect(a.permissions & 0o7777 == 0o600)
        #expect(a.mtime == 1_600_000_000)
        #expect(try await h.lookup("docs").attributes.permissions & 0o7777 == 0o750)
        #expect(try await h.xattr(a.ino, "user.colour") == "blue")
        #expect(try await h.fs.readlink(ino: h.ino("link")) == "docs/a.txt")
        // Reads asked for exactly the old generation.
        let old = try #require(mem.keptVersions("docs/a.txt").first)
        #expect(mem.reads.filter { $0.name == "docs/a.txt" }.allSatisfy { $0.generation == old.info.generation })
        await #expect(throws: Errno.ENOENT) { try await h.lookup("new") }
        await #expect(throws: Errno.ENOENT) { try await h.lookup("early") }
    }

    /// One versioned listing, and one live listing that checks it (`PastListing`).
    @Test func listingsAndXattrsCostOneVersionedListingAndOneLive() async throws {
        let (mem, moment) = try await Self.changedBucket()
        let listsBefore = mem.counts["list", default: 0]
        let getsBefore = mem.counts["get", default: 0]
        let h = Self.pastMount(mem, moment)
        // ls -lR then getfattr -d of every file.
        for d in ["", "docs"] {
            for e in try await h.readdirAll(h.ino(d)) where e.name != "." && e.name != ".." {
                let path = d.isEmpty ? e.name : d + "/" + e.name
                let ino = try await h.ino(path)
                _ = try await h.fs.getattr(ino: ino)
                for x in try await h.fs.listxattr(ino: ino) where x.hasPrefix("user.") { _ = try await h.fs.getxattr(ino: ino, name: x) }
            }
        }
        #expect(mem.lists.suffix(2).map(\.delimiter) == [nil, nil])
        #expect(mem.counts["list", default: 0] - listsBefore == 2)
        #expect(mem.counts["get", default: 0] - getsBefore == 0)
    }

    @Test func everyChangeIsEROFS() async throws {
        let (mem, moment) = try await Self.changedBucket()
        let h = Self.pastMount(mem, moment)
        let writesBefore = mem.writes.count
        await #expect(throws: Errno.EROFS) { try await h.createFile("", "x", Data("x".utf8)) }
        await #expect(throws: Errno.EROFS) { try await h.fs.mkdir(parent: Harness.root, name: "d", mode: 0o755) }
        await #expect(throws: Errno.EROFS) { try await h.fs.unlink(parent: Harness.root, name: "gone.txt") }
        let a = try await h.ino("docs/a.txt")
        await #expect(throws: Errno.EROFS) { try await h.setXattr(a, "user.colour", "red") }
        // The store beneath refuses too, whoever calls it.
        let view = PastStore(base: mem, listing: mem.versions!, moment: moment)
        await #expect(throws: Errno.EROFS) {
            _ = try await view.write("x", from: .data(Data()), metadata: WritableMetadata(), preconditions: .none)
        }
        #expect(mem.writes.count == writesBefore)
    }

    @Test func pagedListingsEqualOneAnswer() throws {
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        var versions: [ObjectVersion] = []
        for (i, name) in ["a", "b/", "b/x", "b/y/z", "c/1", "c/2", "d", "d/e", "e/f/g", "f"].enumerated() {
            let info = ObjectInfo(bucket: "b", name: name, generation: Int64(i + 1), metageneration: 1, size: 1, timeCreated: t0,
                                  updated: t0, md5Hash: nil, crc32c: nil, writable: WritableMetadata())
            versions.append(ObjectVersion(info: info, timeDeleted: nil))
        }
        let snap = PastSnapshot(moment: t0.addingTimeInterval(1), scope: "", versions: versions, requests: 1)
        for prefix in ["", "b/", "c/"] {
            let whole = try snap.list(ListRequest(prefix: prefix, maxResults: 1000))
            for size in 1...3 {
                var pages = ListPage()
                var token: String?
                repeat {
                    let p = try snap.list(ListRequest(prefix: prefix, maxResults: size, pageToken: token))
                    #expect(p.items.count + p.prefixes.count <= size)
                    pages.items += p.items
                    pages.prefixes += p.prefixes
                    token = p.nextPageToken
                } while token != nil
                #expect(pages.items.map(\.name) == whole.items.map(\.name))
                #expect(pages.prefixes == whole.prefixes)
            }
        }
        #expect(try snap.list(ListRequest(prefix: "")).prefixes == ["b/", "c/", "d/", "e/"])
        #expect(try snap.list(ListRequest(prefix: "")).items.map(\.name) == ["a", "d", "f"])
        #expect(try snap.list(ListRequest(prefix: "b/")).items.map(\.name) == ["b/", "b/x"])
    }

    static func liveTree(_ mem: MemoryStore) async throws -> [String: Data] {
        var out: [String: Data] = [:]
        for v in try await mem.listVersions(ListRequest(prefix: "", delimiter: nil)).versions where v.isLive {
            out[v.info.name] = try await mem.read(v.info.name, generation: nil, range: nil)
        }
        return out
    }

    @Test func restoreMakesTheLiveBucketWhatItWas() async throws {
        let (mem, moment) = try await Self.changedBucket()
        let (past, live) = try await Restorer.load(mem.versions!, live: mem, prefix: "", moment: moment)
        let steps = Restorer.plan(past: past.entries, live: live, deleteNewer: false)
        let summary = await Restorer.run(steps, on: mem)
        #expect(summary.restored == ["docs/a.txt", "gone.txt"])
        #expect(summary.newer == ["new/n.txt"])
        #expect(summary.refused.isEmpty && summary.failed.isEmpty)
        var expected: [String: Data] = [:]
        for e in past.entries { expected[e.name] = try await mem.read(e.name, generation: e.generation, range: nil) }
        expected["new/n.txt"] = Data("later".utf8)
        #expect(try await Self.liveTree(mem) == expected)
        // Metadata (mode, mtime, xattrs) came with the copy.
        #expect(try await mem.getMetadata("docs/a.txt").writable == past.info("docs/a.txt")!.writable)
        // A second run finds everything equal.
        let (_, live2) = try await Restorer.load(mem.versions!, live: mem, prefix: "", moment: moment)
        let again = await Restorer.run(Restorer.plan(past: past.entries, live: live2, deleteNewer: false), on: mem)
        #expect(again.restored.isEmpty)
        #expect(again.equal.count == past.entries.count)
    }

    @Test func aConcurrentChangeIsRefusedAndKept() async throws {
        let (mem, moment) = try await Self.changedBucket()
        let (past, live) = try await Restorer.load(mem.versions!, live: mem, prefix: "", moment: moment)
        let steps = Restorer.plan(past: past.entries, live: live, deleteNewer: true)
        // Another client writes after the listing, before the copies.
        _ = mem.replaceBehind("docs/a.txt", Data("concurrent".utf8))
        _ = mem.put("gone.txt", Data("recreated".utf8))
        _ = mem.replaceBehind("new/n.txt", Data("edited".utf8))
        let summary = await Restorer.run(steps, on: mem)
        #expect(summary.refused == ["docs/a.txt", "gone.txt", "new/n.txt"])
        #expect(try await mem.read("docs/a.txt", generation: nil, range: nil) == Data("concurrent".utf8))
        #expect(try await mem.read("gone.txt", generation: nil, range: nil) == Data("recreated".utf8))
        #expect(try await mem.read("new/n.txt", generation: nil, range: nil) == Data("edited".utf8))
    }

    @Test func deleteRemovesNamesCreatedSinceAndKeepsThem() async throws {
        let (mem, moment) = try await Self.changedBucket()
        let (past, live) = try await Restorer.load(mem.versions!, live: mem, prefix: "", moment: moment)
        let summary = await Restorer.run(Restorer.plan(past: past.entries, live: live, deleteNewer: true), on: mem)
        #expect(summary.removed == ["new/n.txt"])
        #expect(try await Self.liveTree(mem)["new/n.txt"] == nil)
        #expect(mem.keptVersions("new/n.txt").count == 1)
    }

    @Test func aBucketThatKeepsNothingIsRefusedByName() {
        #expect(KeptPast.refusal(VersioningState(enabled: true), source: "gs://b") == nil)
        let off = KeptPast.refusal(VersioningState(enabled: false), source: "gs://b")
        #expect(off?.contains("versioning is off") == true)
        let soft = KeptPast.refusal(VersioningState(enabled: false, softDeleteRetention: 7 * 86400), source: "gs://b")
        #expect(soft?.contains("soft-delete policy keeps deleted objects for 7 days") == true)
        #expect(KeptPast.none(source: "firebase://app").contains("no versions"))
    }
}
