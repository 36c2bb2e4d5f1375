@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Synchronization
import Testing
import TestSupport

/// A directory of more than a page is listed by name ranges at once (docs/SEMANTICS.md §6): the
/// ranges' pages merge in order with nothing lost or doubled at their edges, a range that comes
/// back full is cut again, a store that ignores the offsets is found out and walked, and memory
/// stays within its bounds.
@Suite struct CoreRangeListingTests {
    /// The memory store seen through a server's behaviour: a pause per list request (so ranges
    /// overlap), offsets ignored or not; it counts what it was asked.
    final class Server: ForwardingStore, @unchecked Sendable {
        let inner: MemoryStore
        let ignoresOffsets: Bool
        let pause: Duration
        /// A name whose page is held back (answered by the store, then kept) until `release()`,
        /// as a slow answer of a real server is: the pages before it are not waited for.
        let holding: String?
        private let lock = NSLock()
        private var held = false
        private var released = false
        private var inFlight = 0
        private(set) var maxInFlight = 0
        private(set) var ranged = 0
        private(set) var listed = 0
        init(_ inner: MemoryStore, ignoresOffsets: Bool = false, pause: Duration = .milliseconds(2), holding: String? = nil) {
            self.inner = inner
            self.ignoresOffsets = ignoresOffsets
            self.pause = pause
            self.holding = holding
        }
        /// Whether the page with `holding` is being held now.
        var isHolding: Bool { lock.withLock { held && !released } }
        func release() { lock.withLock { released = true } }
        func list(_ request: ListRequest) async throws -> ListPage {
            lock.withLock {
                inFlight += 1
                maxInFlight = max(maxInFlight, inFlight)
                // Pages of a listing (not a lookup's one-item list).
                if request.maxResults > 2 { listed += 1 }
                if request.startOffset != nil || request.endOffset != nil { ranged += 1 }
            }
            defer { lock.withLock { inFlight -= 1 } }
            try await Task.sleep(for: pause)
            var r = request
            if ignoresOffsets { r.startOffset = nil; r.endOffset = nil }
            let page = try await inner.list(r)
            if let holding, page.items.contains(where: { $0.name == holding }) || page.names.contains(holding),
               lock.withLock({ () -> Bool in
                   if held { return false }
                   held = true
                   return true
               }) {
                while !lock.withLock({ released }) { try await Task.sleep(for: .milliseconds(5)) }
            }
            return page
        }
    }

    static func sorted(_ names: [String]) -> [String] { names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }

    /// What readdir shows of `dir` (no dot entries), in order.
    func listed(_ h: Harness, _ dir: String) async throws -> [String] {
        try await h.names(dir).filter { $0 != "." && $0 != ".." }
    }

    func harness(_ store: MemoryStore, _ server: Server, pageSize: Int = 100, concurrency: Int = 8,
                 _ configure: (inout MountConfig) -> Void = { _ in }) -> Harness {
        Harness(store: store, checkEvery: 1000, {
            $0.listPageSize = pageSize
            $0.listConcurrency = concurrency
            configure(&$0)
        }, through: { _ in server })
    }

    /// Cuts follow the density of the names a page showed: a page of f0000000…f0000999 is
    /// followed by cuts a thousand names apart.
    @Test func cutsFollowTheDensityOfAPage() throws {
        let page = (0..<1000).map { String(format: "d/f%07d", $0) }
        let split = try #require(NameSplits(samples: page))
        #expect(split.cuts(after: "d/f0000999", before: nil, pieces: 4, perPiece: 1000)
                == ["d/f0001999", "d/f0002999", "d/f0003999"])
        // Within a bounded range: no more pieces than its names need.
        #expect(split.cuts(after: "d/f0000999", before: "d/f0002999", pieces: 8, perPiece: 1000) == ["d/f0001999"])
        #expect(split.cuts(after: "d/f0000999", before: "d/f0001500", pieces: 8, perPiece: 1000).isEmpty)
    }

    @Test func rangesAreListedAtOnceAndMergedInOrder() async throws {
        let store = MemoryStore()
        var names: [String] = []
        for i in 0..<3000 { names.append(String(format: "f%05d", i * 7)) }
        for n in names { store.put("d/" + n, Data()) }
        let server = Server(store)
        let h = harness(store, server)
        let got = try await listed(h, "d")
        #expect(got == names)
        #expect(server.ranged > 0, "no ranged request")
        #expect(server.maxInFlight > 1 && server.maxInFlight <= 8, "\(server.maxInFlight) list requests at once")
        // Close to the 30 pages a walk would take: the cuts were not wasted.
        #expect(server.listed < 60, "\(server.listed) list requests for 30 pages")
        let c = h.fs.statistics().listing
        #expect(c.rangesWork && c.ranges > 1 && c.rangedPages > 0)
        // And the same with one request at a time: the pages one after another, no range.
        let server1 = Server(store)
        let h1 = harness(store, server1, concurrency: 1)
        #expect(try await listed(h1, "d") == names)
        #expect(server1.ranged == 0 && server1.listed == 30)
    }

    /// Each cut of the open-ended last range asks for the new open-ended range before its
    /// bounded siblings (its answer says where to cut next), so the listing does not wait for
    /// the slowest of a wave before asking for more.
    @Test func theOpenEndedRangeIsAskedBeforeItsSiblings() async throws {
        let store = MemoryStore()
        let names = (0..<6000).map { String(format: "f%05d", $0) }
        for n in names { store.put("d/" + n, Data()) }
        let server = Server(store)
        let h = harness(store, server, concurrency: 4)
        // The ranges without a page token, (start, end), in the order the listing asked for them.
        let order = Mutex<[(start: String?, end: String?)]>([])
        h.fs.rangeListing.observeAsked { r in
            if r.pageToken == nil { order.withLock { $0.append((r.startOffset, r.endOffset)) } }
        }
        #expect(try await listed(h, "d") == names)
        let asked = order.withLock { $0 }
        let open = asked.indices.filter { asked[$0].end == nil }
        #expect(open.count >= 3, "\(asked)")
        for i in open {
            // The sibling that ends where it starts: asked after it.
            let sibling = asked.firstIndex { $0.end != nil && $0.end == asked[i].start }
            #expect(sibling.map { $0 > i } ?? false, "\(asked)")
        }
    }

    /// Cuts drawn from names like `s0001~zzzz` and `s0001/` land inside a subdirectory's run
    /// of names (`s0150/zzzz`, before its only object `s0150/zzzzzz`). The memory store, like
    /// fake-gcs-server, leaves out a prefix before startOffset, so a range starting there would
    /// lose the subdirectory: a cut moves to the subdirectory (`s0150/`), and each name shows once.
    @Test func anEdgeInsideARunOfNamesSharingAPrefixLosesAndDoublesNothing() async throws {
        let store = MemoryStore()
        var expected: [String] = []
        for i in 0..<1200 {
            let n = String(format: "s%04d", i)
            store.put("d/\(n)~zzzz", Data())
            store.put("d/\(n)/zzzzzz", Data())
            expected += [n, n + "~zzzz"]
        }
        let server = Server(store)
        let h = harness(store, server, pageSize: 50)
        let got = try await listed(h, "d")
        #expect(Set(expected).subtracting(got).sorted().prefix(10) == [], "lost")
        #expect(got.count == expected.count, "\(got.count) names shown, \(expected.count) listed")
        #expect(Set(got).count == got.count, "doubled")
        #expect(server.ranged > 10)
    }

    /// Names sparse in the first page and dense later: the range the first page's density
    /// drew holds many pages, comes back full, and is cut again.
    @Test func aRangeThatComesBackFullIsCutAgain() async throws {
        let store = MemoryStore()
        var names: [String] = []
        for i in 0..<100 { names.append(String(format: "a%04d", i * 100)) }
        for i in 0..<3000 { names.append(String(format: "a9950-%04d", i)) }
        names = Self.sorted(names)
        for n in names { store.put("d/" + n, Data()) }
        let server = Server(store)
        let h = harness(store, server, pageSize: 50)
        #expect(try await listed(h, "d") == names)
        let c = h.fs.statistics().listing
        #expect(c.cuts >= 1, "no full range was cut again: \(c)")
        // The dense run was listed by ranges of its own, not walked page by page.
        let inside = Set(store.lists.compactMap(\.startOffset).filter { $0.hasPrefix("d/a9950-") })
        #expect(inside.count >= 5, "\(inside.count) ranges started inside the dense run")
    }

    /// A server that ignores the offsets answers every range with the directory's first page: the
    /// first such answer is caught, the listing walks the pages, and the mount walks from then on.
    @Test(.timeLimit(.minutes(1))) func aStoreThatIgnoresTheOffsetsIsFoundOutAndTheListingIsExact() async throws {
        let store = MemoryStore()
        let names = (0..<1000).map { String(format: "n%04d", $0) }
        for n in names { store.put("d/" + n, Data()); store.put("e/" + n, Data()) }
        let server = Server(store, ignoresOffsets: true)
        let h = harness(store, server)
        #expect(try await listed(h, "d") == names)
        #expect(h.fs.statistics().listing.rangesWork == false)
        let rangedBefore = server.ranged
        #expect(rangedBefore > 0)
        // The next directory: walked at once, no range asked for.
        #expect(try await listed(h, "e") == names)
        #expect(server.ranged == rangedBefore)
    }


    /// A listing of `d` (2,000 files, pages of 100, 4 ranges at once) begun, whose page with the
    /// last name the server holds until `server.release()`.
    func listingHeldAtItsLastPage() async throws
        -> (names: [String], server: Server, h: Harness, dir: UInt64, listing: Task<[String], any Error>) {
        let store = MemoryStore()
        let names = (0..<2000).map { String(format: "p%05d", $0) }
        for n in names { store.put("d/" + n, Data(repeating: 1, count: 3)) }
        let server = Server(store, holding: "d/" + names.last!)
        let h = harness(store, server, pageSize: 100, concurrency: 4)
        let dir = try await h.ino("d")
        return (names, server, h, dir, Task { try await listed(h, "d") })
    }

    /// Each page is applied as it arrives (docs/SEMANTICS.md §6): while the page with the
    /// directory's last name is still on its way, every other page is nodes and cached metadata
    /// already, not a page held until the listing is whole; and the listing itself shows nothing
    /// until its last page is in, then every name once, in order.
    @Test(.timeLimit(.minutes(1))) func pagesAreAppliedAsTheyArriveNotHeldForTheLast() async throws {
        let (names, server, h, dir, listing) = try await listingHeldAtItsLastPage()
        #expect(await eventually { server.isHolding }, "the last page was never asked for")
        // All but the held page (at most 100 names) applied, while it is held.
        let applied = await eventually { h.fs.statistics().cachedAttributes >= names.count - 100 }
        let s = h.fs.statistics()
        #expect(applied, "\(s.cachedAttributes) of \(names.count) files' metadata applied while the last page is held")
        // Not shown before it is whole.
        #expect(h.core.superblock.freshListing(try #require(h.core.superblock.node(dir))) == nil)
        #expect(h.core.superblock.invariantViolations() == [])
        server.release()
        #expect(try await listing.value == names)
        #expect(h.core.superblock.invariantViolations() == [])
    }

    /// A listing applied page by page is still corrected by what changed here after it began
    /// (docs/SEMANTICS.md §6): a file unlinked after its page was applied, and one created, while
    /// the last page is held, show as they are now once the listing is whole.
    @Test(.timeLimit(.minutes(1))) func changesMadeBetweenPagesCorrectTheListing() async throws {
        let (names, server, h, dir, listing) = try await listingHeldAtItsLastPage()
        #expect(await eventually { server.isHolding && h.fs.statistics().cachedAttributes >= names.count - 100 })
        // p00005's page is applied (it is in the first page); it goes now, and a file comes.
        try await h.fs.unlink(parent: dir, name: "p00005")
        let (e, fh) = try await h.fs.create(parent: dir, name: "p00005x", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("new".utf8))
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        server.release()
        let expected = Self.sorted(names.filter { $0 != "p00005" } + ["p00005x"])
        #expect(try await listing.value == expected)
        #expect(h.core.superblock.invariantViolations() == [])
    }

    /// A file and a directory of the same name (`m` and `m/…`) in different pages: the directory
    /// wins wherever each came (the file first in a walk; in any order by ranges), shown once.
    @Test func aFileHiddenByADirectoryInALaterPageIsShownOnceAsTheDirectory() async throws {
        let store = MemoryStore()
        var names = (0..<29).map { String(format: "a%03d", $0) }
        for n in names { store.put("d/" + n, Data()) }
        // Page 3 of 10 names (a walk) ends with the file `m`; its directory starts page 4.
        store.put("d/m", Data())
        store.put("d/m/child", Data())
        let more = (0..<25).map { String(format: "z%03d", $0) }
        for n in more { store.put("d/" + n, Data()) }
        names = Self.sorted(names + ["m"] + more)
        for concurrency in [1, 8] {
            let server = Server(store)
            let h = harness(store, server, pageSize: 10, concurrency: concurrency)
            #expect(try await listed(h, "d") == names, "concurrency \(concurrency)")
            let m = try await h.lookup("d/m")
            #expect(m.attributes.type == .directory, "concurrency \(concurrency)")
            // The file is kept aside, shown once the directory goes.
            let l = h.core.superblock.freshListing(try #require(h.core.superblock.node(try await h.ino("d"))))
            #expect(l?.hiddenFiles.keys.sorted() == ["m"], "concurrency \(concurrency)")
            #expect(h.core.superblock.invariantViolations() == [])
        }
    }

    /// The metadata cache's bound holds for a listing by ranges, and requests in flight stay
    /// within `listConcurrency`.
    @Test func theMemoryBoundsHold() async throws {
        let store = MemoryStore()
        let names = (0..<4000).map { String(format: "m%06d", $0 * 13) }
        for n in names { store.put("d/" + n, Data(repeating: 1, count: 3)) }
        let server = Server(store)
        let h = harness(store, server, concurrency: 4) { $0.maxCachedEntries = 500 }
        let entries = try await h.readdirAll(try await h.ino("d"))
        #expect(entries.map(\.name).filter { $0 != "." && $0 != ".." } == names)
        let s = h.fs.statistics()
        #expect(s.cachedEntries <= 500, "\(s.cachedEntries) cached entries, bound 500")
        #expect(server.maxInFlight <= 4, "\(server.maxInFlight) in flight, bound 4")
        #expect(server.ranged > 0)
    }
}
