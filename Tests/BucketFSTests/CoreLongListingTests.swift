@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// Caches that outlive the work that filled them (docs/SEMANTICS.md §6): a readdir pass over a
/// listing of names only (firebase://) that takes longer than the TTL lists the directory once;
/// what it filled lives the TTL from its end, so `getfattr -d` right after costs nothing; once
/// expired, the metadata of many siblings is read again at once, never one GET at a time. Each
/// request takes time on the harness's clock (`SlowNamesOnlyStore`): no test waits for a TTL.
@Suite struct CoreLongListingTests {
    static let ttl = 5.0
    static let page = 100

    /// 400 files in `d/`, pages of 100, a mount over a slow names-only store.
    func harness(files: Int = 400) -> (Harness, SlowNamesOnlyStore) {
        var slow: SlowNamesOnlyStore!
        let h = Harness(checkEvery: 97, { $0.listPageSize = Self.page; $0.metadataTTL = Self.ttl }) { m in
            let s = SlowNamesOnlyStore(inner: m)
            slow = s
            return s
        }
        slow.clock = h.clock
        for i in 0..<files { _ = h.store.put(String(format: "d/f%04d", i), "x") }
        return (h, slow)
    }

    /// `ls -l` as the kernel sends it: opendir, readdir in small answers (a 4 KiB buffer of
    /// readdirplus entries holds about 25), a lookup of each entry whose attributes the answer
    /// left out (ls's lstat), until the answer that says the end, releasedir. Returns each name's
    /// size and inode, and how many list requests the first readdir made.
    func lsL(_ h: Harness, _ d: UInt64) async throws -> (sizes: [String: UInt64], inos: [String: UInt64], firstLists: Int) {
        let fh = try await h.fs.opendir(ino: d)
        var offset: UInt64 = 0
        var sizes: [String: UInt64] = [:], inos: [String: UInt64] = [:]
        var firstLists = -1
        while true {
            let part = try await h.fs.readdir(ino: d, fh: fh, offset: offset, limit: 25)
            if firstLists < 0 { firstLists = h.store.count("list") }
            if part.isEmpty { break }
            // `ls -l DIR` stats DIR/name: the kernel looks DIR up again once its entry expired.
            _ = try await h.fs.lookup(parent: Harness.root, name: "d")
            for e in part {
                var a = e.entry.attributes
                if !e.attributesKnown { a = try await h.fs.lookup(parent: d, name: e.name).attributes }
                sizes[e.name] = a.size
                inos[e.name] = a.ino
            }
            offset = part.last!.offset
        }
        h.fs.releasedir(ino: d, fh: fh)
        return (sizes, inos, firstLists)
    }

    /// `getfattr -d` on every file: the kernel's lookup (its entry expired), getattr, listxattr.
    func getfattr(_ h: Harness, _ d: UInt64, _ names: [String]) async throws -> [String: UInt64] {
        var sizes: [String: UInt64] = [:]
        for name in names {
            let e = try await h.fs.lookup(parent: d, name: name)
            _ = try await h.fs.getattr(ino: e.attributes.ino)
            _ = try await h.fs.listxattr(ino: e.attributes.ino)
            sizes[name] = e.attributes.size
        }
        return sizes
    }

    /// One `ls -l` that lasts more than twice the TTL lists the directory once (⌈N/page⌉ list
    /// requests, all made by its first readdir; the directory's own lookups again ask nothing)
    /// and reads each file's metadata once; `getfattr
    /// -d` on every file right after costs no request, and still none until the TTL has passed
    /// since the `ls -l` ended.
    @Test func aPassLongerThanTheTTLListsOnceAndWhatItFilledLivesFromItsEnd() async throws {
        let (h, slow) = harness()
        let d = try await h.ino("d")
        h.store.resetCounts()
        let began = h.clock.now
        let ls = try await lsL(h, d)
        #expect(ls.sizes.count == 400 && ls.sizes.values.allSatisfy { $0 == 1 })
        #expect(h.clock.now - began > 2 * Self.ttl, "the pass took \(h.clock.now - began) s of the clock")
        #expect(ls.firstLists == 400 / Self.page, "⌈N/page⌉ list requests")
        #expect(h.store.count("list") == ls.firstLists, "listed again during the pass")
        #expect(h.store.count("get") == 400, "each file's metadata read once, nothing else: \(h.store.count("get"))")
        #expect(slow.maxInFlight > 1, "the metadata of the next files is read along")

        // Right after, and until a moment before the TTL has passed since the pass's end.
        h.store.resetCounts()
        let names = ls.sizes.keys.sorted()
        _ = try await getfattr(h, d, names)
        h.clock.advance(Self.ttl - 0.5)
        _ = try await getfattr(h, d, names)
        let again = try await lsL(h, d)
        #expect(again.sizes.count == 400)
        #expect(h.store.count("list") == 0 && h.store.count("get") == 0,
                "lists \(h.store.count("list")), GETs \(h.store.count("get")) after the pass")
    }

    /// A walk that reads each file's attributes and xattrs while its readdir pass is under way
    /// (`getfattr -R -d`, `rsync -aX`: lookup, getattr, listxattr, getxattr of each entry) reads
    /// each file's metadata once, even where a stat-ahead lasts longer than the TTL (the metadata
    /// of its first files expired before the walk reached them): what arrived during the pass
    /// lives until it ends, for every operation, not only lookups.
    @Test func attributesAndXattrsReadDuringAPassCostNothingMore() async throws {
        let (h, slow) = harness()
        slow.getCost = 0.06  // a stat-ahead of 127 files takes 7.6 s of the clock: more than the TTL
        _ = h.store.put("d/f0300", "x", custom: ["color": "blue"])
        let d = try await h.ino("d")
        h.store.resetCounts()
        let fh = try await h.fs.opendir(ino: d)
        var offset: UInt64 = 0
        var seen = 0
        while true {
            let part = try await h.fs.readdir(ino: d, fh: fh, offset: offset, limit: 25)
            if part.isEmpty { break }
            for e in part {
                let ino = try await h.fs.lookup(parent: d, name: e.name).attributes.ino
                #expect(try await h.fs.getattr(ino: ino).0.size == 1)
                let names = try await h.fs.listxattr(ino: ino)
                if e.name == "f0300" {
                    #expect(names.contains("user.color"))
                    #expect(try await h.fs.getxattr(ino: ino, name: "user.color") == Array("blue".utf8))
                }
                seen += 1
            }
            offset = part.last!.offset
        }
        h.fs.releasedir(ino: d, fh: fh)
        #expect(seen == 400)
        #expect(h.store.count("get") == 400, "each file's metadata read once: \(h.store.count("get")) GETs")
    }

    /// The hold is for what is shown, not for what is opened: a file opened during a pass, after
    /// its TTL, sees the bucket's current generation (close-to-open), while its stat still shows
    /// what the pass read and costs nothing.
    @Test func anOpenDuringAPassSeesTheCurrentGeneration() async throws {
        let (h, _) = harness()
        let d = try await h.ino("d")
        let fh = try await h.fs.opendir(ino: d)
        _ = try await h.fs.readdir(ino: d, fh: fh, offset: 0, limit: 25)  // the pass is under way
        let ino = try await h.fs.lookup(parent: d, name: "f0000").attributes.ino
        _ = h.store.put("d/f0000", "yyyy")
        h.clock.advance(Self.ttl + 1)
        h.store.resetCounts()
        #expect(try await h.fs.getattr(ino: ino).0.size == 1, "held by the pass")
        #expect(h.store.count("get") == 0)
        let f = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        let data = try await h.fs.read(ino: ino, fh: f, offset: 0, size: 100)
        try await h.fs.release(ino: ino, fh: f)
        #expect(String(decoding: data, as: UTF8.self) == "yyyy", "the open read the generation the pass had seen")
        h.fs.releasedir(ino: d, fh: fh)
    }

    /// Once the entries have expired, `getfattr -d` on every file reads each one's metadata again
    /// (it shows a change made meanwhile), many at once (the stat-ahead), with one listing of the
    /// names: never one GET at a time.
    @Test func expiredSiblingsAreReadManyAtOnce() async throws {
        let (h, slow) = harness()
        let d = try await h.ino("d")
        let ls = try await lsL(h, d)
        let names = ls.sizes.keys.sorted()
        _ = h.store.put("d/f0100", "yyyy")
        h.clock.advance(Self.ttl + 1)
        h.store.resetCounts()
        slow.resetMax()
        slow.getCost = 0.002  // all 400 within the TTL: one listing again
        let sizes = try await getfattr(h, d, names)
        #expect(sizes["f0100"] == 4, "the change shows")
        #expect(h.store.count("get") == 400, "each read once: \(h.store.count("get"))")
        #expect(h.store.count("list") <= 400 / Self.page + 2, "one listing: \(h.store.count("list"))")
        #expect(slow.maxInFlight >= 15, "at most \(slow.maxInFlight) metadata reads at once")

        // The same after an `ls -l` whose listing expired: the names listed again, the metadata
        // read many at once (not shown stale from before).
        _ = h.store.put("d/f0200", "zz")
        h.clock.advance(Self.ttl + 1)
        h.store.resetCounts()
        slow.resetMax()
        let again = try await lsL(h, d)
        #expect(again.sizes["f0200"] == 2)
        #expect(h.store.count("get") == 400)
        #expect(slow.maxInFlight >= 15, "at most \(slow.maxInFlight) metadata reads at once")
    }
}

/// A store answering as `FirebaseStore` does for `namesOnly` (items by name, no placeholder
/// read) over the harness's memory store, each request taking time on the harness's clock
/// (`listCost`, `getCost` seconds), counting the metadata reads in flight at once.
final class SlowNamesOnlyStore: ForwardingStore, @unchecked Sendable {
    let inner: MemoryStore
    private let lock = NSLock()
    /// GUARDED_BY(lock)
    private var clockValue: TestClock?
    private var costs = (list: 1.0, get: 0.02)
    private var inFlight = 0
    private var maxSeen = 0

    init(inner: MemoryStore) { self.inner = inner }

    /// As v0: no `startOffset`/`endOffset`.
    var boundsListsByOffsets: Bool { false }

    var clock: TestClock? {
        get { lock.withLock { clockValue } }
        set { lock.withLock { clockValue = newValue } }
    }
    var getCost: Double {
        get { lock.withLock { costs.get } }
        set { lock.withLock { costs.get = newValue } }
    }
    var maxInFlight: Int { lock.withLock { maxSeen } }
    func resetMax() { lock.withLock { maxSeen = 0 } }

    func list(_ request: ListRequest) async throws -> ListPage {
        clock?.advance(lock.withLock { costs.list })
        var page = try await inner.list(request)
        guard request.namesOnly else { return page }
        page.names = page.items.filter { $0.name != request.prefix && !$0.name.hasSuffix("/") }.map(\.name)
        page.items = page.items.filter { $0.name.hasSuffix("/") && $0.name != request.prefix }
        page.metadataSkipped = true
        return page
    }

    func getMetadata(_ name: String) async throws -> ObjectInfo {
        lock.withLock {
            inFlight += 1
            maxSeen = max(maxSeen, inFlight)
        }
        defer { lock.withLock { inFlight -= 1 } }
        // Real time, in the double only: reads started together overlap, one after another do not.
        try await Task.sleep(for: .milliseconds(5))
        clock?.advance(lock.withLock { costs.get })
        return try await inner.getMetadata(name)
    }
}
