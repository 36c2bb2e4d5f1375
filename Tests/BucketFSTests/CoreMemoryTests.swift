import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// Memory bounded by an option, not by the bucket: cached metadata stays within
/// `maxCachedEntries`, evicted metadata is read again when needed, numbers the kernel holds stay
/// bound to their paths, forgotten inodes leave the table, and what is in use is never evicted.
@Suite struct CoreMemoryTests {
    /// Objects `dir/f000`… with size i and custom key k = "v<i>".
    func fill(_ h: Harness, _ dir: String, _ count: Int) {
        for i in 0..<count {
            h.store.put(String(format: "\(dir)/f%03d", i), Data(repeating: 0x61, count: i), custom: ["k": "v\(i)"])
        }
    }

    /// readdir as the kernel's readdirplus does it: every entry it is handed counts as a lookup.
    func readdirPlus(_ h: Harness, _ ino: UInt64, chunk: Int = 4096) async throws -> [DirectoryEntry] {
        let fh = try await h.fs.opendir(ino: ino)
        defer { h.fs.releasedir(ino: ino, fh: fh) }
        var out: [DirectoryEntry] = []
        while true {
            let part = try await h.fs.readdir(ino: ino, fh: fh, offset: out.last?.offset ?? 0, limit: chunk)
            if part.isEmpty { break }
            for e in part { h.fs.noteLookup(ino: e.entry.attributes.ino) }
            out += part
        }
        return out
    }

    @Test func listingMoreThanTheBoundKeepsTheCacheWithinIt() async throws {
        let h = Harness { $0.maxCachedEntries = 50 }
        fill(h, "d", 300)
        let d = try await h.ino("d")
        let listed = try await readdirPlus(h, d)
        #expect(listed.count == 300)
        // Every entry showed its own size, though most of it was evicted before readdir ended.
        #expect(listed.allSatisfy { $0.entry.attributes.size == UInt64(Int($0.name.dropFirst())!) })
        let s = h.fs.statistics()
        #expect(s.cachedEntries <= 50, "\(s.cachedEntries) cached entries, bound 50")
        #expect(s.maxCachedEntries == 50)
        // The kernel holds every entry: their numbers stay (root, d and 300 files).
        #expect(s.inodes == 302)
        // A second directory: still within the bound.
        fill(h, "e", 120)
        _ = try await readdirPlus(h, try await h.ino("e"))
        #expect(h.fs.statistics().cachedEntries <= 50)
    }

    /// The store, watched: at each list request, what the mount's cache holds then (the pages
    /// before it were applied).
    final class PageWatch: ForwardingStore, @unchecked Sendable {
        let inner: MemoryStore
        private let lock = NSLock()
        private var held: (@Sendable () -> Int)?
        private(set) var highest = 0
        private(set) var pages = 0
        init(_ inner: MemoryStore) { self.inner = inner }
        func watch(_ cached: @escaping @Sendable () -> Int) { lock.withLock { held = cached } }
        func list(_ request: ListRequest) async throws -> ListPage {
            let now = lock.withLock { held }?() ?? 0
            lock.withLock {
                highest = max(highest, now)
                if request.maxResults > 2 { pages += 1 }
            }
            return try await inner.list(request)
        }
    }

    @Test func theBoundHoldsWhileAListingIsReadAndEveryEntryKeepsItsAttributes() async throws {
        let store = MemoryStore()
        let watch = PageWatch(store)
        let h = Harness(store: store, checkEvery: 50, { $0.maxCachedEntries = 40; $0.listPageSize = 25 }, through: { _ in watch })
        let core = h.core
        watch.watch { core.statistics().cachedEntries }
        fill(h, "d", 400)
        let d = try await h.ino("d")
        store.resetCounts()
        let listed = try await readdirPlus(h, d, chunk: 33)
        // Every name, in order, each with its own size, though the cache held at most 40 of
        // their metadata at any time.
        #expect(listed.map(\.name) == (0..<400).map { String(format: "f%03d", $0) })
        #expect(listed.allSatisfy { $0.attributesKnown && $0.entry.attributes.size == UInt64(Int($0.name.dropFirst())!) })
        #expect(Set(listed.map(\.entry.attributes.ino)).count == 400)
        #expect(watch.pages >= 16, "\(watch.pages) pages")
        #expect(watch.highest <= 40, "the cache held \(watch.highest) entries between two pages, bound 40")
        #expect(h.fs.statistics().cachedEntries <= 40)
        // The attributes came with the pages: no request per file.
        #expect(store.count("get") == 0, "\(store.counts)")
        #expect(store.count("list") < 100, "the list pages only, far fewer than a request a file: \(store.counts)")
        // The kernel holds every entry (readdirplus): their nodes stay, with their numbers.
        #expect(h.fs.statistics().inodes == 402)
        let again = try await h.fs.lookup(parent: d, name: "f123")
        #expect(again.attributes.ino == listed[123].entry.attributes.ino)
        #expect(again.attributes.size == 123)
    }

    @Test func anEvictedFileIsReadAgainWithTheRightData() async throws {
        let h = Harness { $0.maxCachedEntries = 10 }
        fill(h, "d", 30)
        let d = try await h.ino("d")
        let listed = try await readdirPlus(h, d)
        let first = listed[0].entry.attributes.ino, last = listed[29].entry.attributes.ino
        // The newest infos are cached, the oldest were evicted: no answer without a request.
        #expect(h.fs.cachedGetattr(ino: last)?.0.size == 29)
        #expect(h.fs.cachedGetattr(ino: first) == nil)
        #expect(h.fs.cachedGetxattr(ino: first, name: "user.k") == nil)
        h.store.resetCounts()
        let (attrs, _) = try await h.fs.getattr(ino: listed[5].entry.attributes.ino)
        #expect(attrs.size == 5)
        #expect(h.store.count("get") == 1, "an evicted file costs one GET: \(h.store.counts)")
        #expect(try await h.xattr(listed[5].entry.attributes.ino, "user.k") == "v5")
        #expect(try await h.xattr(first, "user.k") == "v0")
        #expect(h.store.count("get") == 2, "\(h.store.counts)")
        // A name looked up again finds the same number, with its metadata.
        let e = try await h.fs.lookup(parent: d, name: "f007")
        #expect(e.attributes.ino == listed[7].entry.attributes.ino)
        #expect(e.attributes.size == 7)
        #expect(h.fs.statistics().cachedEntries <= 10)
    }

    @Test func numbersHeldByTheKernelSurviveEvictionAndRelisting() async throws {
        let h = Harness { $0.maxCachedEntries = 20 }
        fill(h, "d", 60)
        fill(h, "e", 60)
        let d = try await h.ino("d")
        let before = Dictionary(uniqueKeysWithValues: try await readdirPlus(h, d).map { ($0.name, $0.entry.attributes.ino) })
        _ = try await readdirPlus(h, try await h.ino("e"))  // evicts all of d
        #expect(h.fs.statistics().cachedEntries <= 20)
        h.clock.advance(10)
        let again = try await readdirPlus(h, d)
        #expect(again.count == 60)
        for e in again { #expect(before[e.name] == e.entry.attributes.ino, "\(e.name) kept its number") }
        for name in ["f000", "f031", "f059"] {
            #expect(try await h.fs.lookup(parent: d, name: name).attributes.ino == before[name])
        }
    }

    @Test func forgetToZeroDropsTheNode() async throws {
        let h = Harness()
        h.store.put("a.txt", "hello")
        h.store.put("d/b.txt", "world")
        let a = try await h.ino("a.txt")  // a lookup of its own: no listing holds it
        #expect(h.fs.statistics().inodes == 2)
        h.fs.forget(ino: a, nlookup: 1)
        #expect(h.fs.statistics().inodes == 1, "a forgotten inode leaves the table")
        await #expect(throws: Errno.ENOENT) { _ = try await h.fs.getattr(ino: a) }
        // Seen again, the path gets its old number back (docs/SEMANTICS.md §3: stable for the life of the mount).
        let again = try await h.lookup("a.txt").attributes
        #expect(again.size == 5)
        #expect(again.ino == a)

        // A node a cached listing names stays until that listing goes.
        let d = try await h.ino("d")
        let listed = try await readdirPlus(h, d)
        let b = listed[0].entry.attributes.ino
        h.fs.forget(ino: b, nlookup: 1)
        #expect(try await h.fs.getattr(ino: b).0.size == 5, "still named by d's cached listing")
        h.fs.forget(ino: d, nlookup: 1)
        let s = h.fs.statistics()
        #expect(s.inodes == 2, "d and its listing's child went with it: \(s.inodes)")
        #expect(s.cachedEntries == 1, "only a.txt's metadata is left: \(s.cachedEntries)")
    }

    /// A directory the kernel forgets (memory pressure, a dropped page cache) while its parent's
    /// listing names it keeps its own fresh listing: opening its files by name right after costs
    /// no request (it cost one name probe each when the listing went with the FORGET), and the
    /// listing still goes with the cache's bound or its TTL.
    @Test func aForgottenDirectoryKeepsItsFreshListing() async throws {
        let h = Harness()
        fill(h, "d", 20)
        _ = try await readdirPlus(h, Harness.root)  // the root's listing names d
        let d = try await h.ino("d")
        let listed = try await readdirPlus(h, d)
        #expect(listed.count == 20)
        // The kernel forgets d and every file it was handed (each entry and d's own lookups).
        for e in listed { h.fs.forget(ino: e.entry.attributes.ino, nlookup: 1) }
        h.fs.forget(ino: d, nlookup: 2)
        let lists = h.store.lists.count, total = h.store.totalRequests
        // find's names, opened again by name: answered from d's listing.
        let again = try await h.fs.lookup(parent: Harness.root, name: "d").attributes.ino
        #expect(again == d)
        for i in [0, 7, 19] {
            let e = try await h.fs.lookup(parent: d, name: String(format: "f%03d", i))
            #expect(e.attributes.size == UInt64(i))
        }
        #expect(h.store.lists.count == lists, "lookups after the FORGET listed \(h.store.lists.count - lists) times")
        #expect(h.store.totalRequests == total, "no request at all")
        // The kernel's copy of d's entries went with its inode: a new handle fills one again.
        let fh = try await h.fs.opendir(ino: d)
        #expect(h.fs.directoryCaching(ino: d, fh: fh) == .fill)
        h.fs.releasedir(ino: d, fh: fh)
        // Past the TTL it is listed again, as any listing.
        h.fs.forget(ino: d, nlookup: 1)
        h.clock.advance(6)
        _ = try await h.fs.lookup(parent: d, name: "f001")
        #expect(h.store.lists.count > lists)
    }

    /// The listing a forgotten directory keeps counts against the cache's bound, and goes with
    /// it: the directory's node and its files' nodes leave the table.
    @Test func aForgottenDirectorysListingStillGoesWithTheBound() async throws {
        let h = Harness { $0.maxCachedEntries = 30 }
        fill(h, "d", 20)
        fill(h, "e", 25)
        _ = try await readdirPlus(h, Harness.root)
        let d = try await h.ino("d")
        for e in try await readdirPlus(h, d) { h.fs.forget(ino: e.entry.attributes.ino, nlookup: 1) }
        h.fs.forget(ino: d, nlookup: 2)
        #expect(h.fs.statistics().inodes >= 22, "d and its 20 files stay while d's listing does")
        // Another listing pushes d's out: its nodes, which nothing else holds, go with it.
        let e = try await h.ino("e")
        _ = try await readdirPlus(h, e)
        let s = h.fs.statistics()
        #expect(s.cachedEntries <= 30, "\(s.cachedEntries) cached entries, bound 30")
        #expect(s.inodes <= 1 + 2 + 25, "root, d and e, e's files: \(s.inodes)")
    }

    @Test func aDirHandleReadsOnWhileEvictionHappens() async throws {
        let h = Harness { $0.maxCachedEntries = 20 }
        fill(h, "d", 100)
        fill(h, "e", 100)
        let d = try await h.ino("d"), e = try await h.ino("e")
        let fh = try await h.fs.opendir(ino: d)
        var out: [DirectoryEntry] = []
        var turn = 0
        while true {
            let part = try await h.fs.readdir(ino: d, fh: fh, offset: out.last?.offset ?? 0, limit: 7)
            if part.isEmpty { break }
            out += part  // no noteLookup: only the open handle holds these nodes
            // Meanwhile: another directory listed (evicting all of d), and d's expiry passes.
            if turn % 3 == 0 { _ = try await h.readdirAll(e); h.clock.advance(6) }
            turn += 1
        }
        #expect(out.map(\.name) == (0..<100).map { String(format: "f%03d", $0) })
        #expect(out.allSatisfy { $0.entry.attributes.size == UInt64(Int($0.name.dropFirst())!) })
        // Numbers handed out are still valid while the handle is open.
        for entry in out.prefix(10) {
            #expect(try await h.fs.getattr(ino: entry.entry.attributes.ino).0.size == entry.entry.attributes.size)
        }
        #expect(h.fs.statistics().cachedEntries <= 20)
        h.fs.releasedir(ino: d, fh: fh)
    }

    @Test func aListedFileCountsOnceSoADirectoryAsLargeAsTheBoundStaysCached() async throws {
        // 10 files whose names and metadata are cached are 10 entries, not 20: with room for
        // 12, the listing and its metadata stay, and the next readdir asks nothing.
        let h = Harness { $0.maxCachedEntries = 12 }
        fill(h, "a", 10)
        let a = try await h.ino("a")
        _ = try await h.readdirAll(a)
        let s = h.fs.statistics()
        #expect(s.cachedEntries <= 12 && s.cachedEntries >= 10, "\(s.cachedEntries) cached entries")
        h.store.resetCounts()
        let entries = try await h.readdirAll(a)
        #expect(entries.count == 10)
        for e in entries {
            _ = try await h.fs.lookup(parent: a, name: e.name)
            _ = try await h.fs.getxattr(ino: e.entry.attributes.ino, name: "user.k")
        }
        #expect(h.store.counts.values.reduce(0, +) == 0, "the cached listing and metadata answer: \(h.store.counts)")
    }

    @Test func anEvictedListingIsListedAgainAtTheNextReaddir() async throws {
        // (A listed file counts once, its name and metadata together: a's 10 and the root's 2
        // fit, b's 10 more do not.)
        let h = Harness { $0.maxCachedEntries = 15 }
        fill(h, "a", 10)
        fill(h, "b", 10)
        let a = try await h.ino("a"), b = try await h.ino("b")
        _ = try await h.readdirAll(a)
        h.store.resetCounts()
        _ = try await h.readdirAll(a)
        #expect(h.store.count("list") == 0, "a fresh cached listing answers")
        _ = try await h.readdirAll(b)  // 10 more entries: a's go
        h.store.resetCounts()
        let names = try await h.readdirAll(a).map(\.name)
        #expect(names.count == 10)
        #expect(h.store.count("list") == 1, "an evicted listing is listed again: \(h.store.counts)")
    }

    @Test func aDirtyStagedFileIsNeverEvicted() async throws {
        let h = Harness { $0.maxCachedEntries = 5 }
        h.store.put("old.txt", "old content")
        h.store.put("read.txt", "being read")
        // (Before the create below: the root is listed after the name found missing there, and
        // what is put behind the mount's back after that shows after the TTL.)
        fill(h, "d", 40)
        let generation = h.store.object("old.txt")!.generation
        let old = try await h.ino("old.txt")
        let reading = try await h.ino("read.txt")
        let rfh = try await h.fs.open(ino: reading, flags: OpenFlags(O_RDONLY))
        let ofh = try await h.fs.open(ino: old, flags: OpenFlags(O_WRONLY))
        _ = try await h.fs.write(ino: old, fh: ofh, offset: 0, data: Data("NEW".utf8))
        let (entry, fh) = try await h.fs.create(parent: Harness.root, name: "new.txt", mode: 0o644, flags: OpenFlags(O_WRONLY))
        let ino = entry.attributes.ino
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("pending".utf8))
        try await h.setXattr(ino, "user.note", "kept")
        _ = try await readdirPlus(h, try await h.ino("d"))  // evicts everything it can
        #expect(h.fs.statistics().dirtyFiles == 2)
        #expect(h.fs.cachedGetattr(ino: ino)?.0.size == 7, "a file created here answers from memory")
        #expect(h.fs.cachedGetattr(ino: old)?.0.size == 11, "a file being written keeps its metadata")
        #expect(try h.fs.cachedGetxattr(ino: old, name: "user.storage.generation")?.get() == Array(String(generation).utf8))
        #expect(h.fs.cachedGetattr(ino: reading)?.0.size == 10, "an open file keeps its metadata")
        try await h.fs.release(ino: reading, fh: rfh)
        #expect(try await h.names("").contains("new.txt"))
        #expect(try await h.xattr(ino, "user.note") == "kept")
        try await h.fs.release(ino: ino, fh: fh)
        try await h.fs.release(ino: old, fh: ofh)
        #expect(h.store.data("new.txt") == Data("pending".utf8))
        #expect(h.store.object("new.txt")?.customMetadata["note"] == "kept")
        #expect(h.store.data("old.txt") == Data("NEW content".utf8))
    }
}
