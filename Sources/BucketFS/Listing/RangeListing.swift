import Foundation
import StorageModel

/// Lists one directory's pages, several name ranges at once (docs/SEMANTICS.md §6).
///
/// The first page is asked for as usual. When it is not the last, the rest of the directory
/// is cut into ranges (`startOffset`/`endOffset`) by what that page showed (`NameSplits`), and
/// up to `concurrency` ranges are listed at once; a range that comes back full is cut again
/// (or followed by its page token when little is left of it). Each page is handed on as it
/// arrives, in the order the answers come, not the bucket's: the caller keeps each name once
/// (a prefix listed by two ranges, an item listed again where a range restarted) and orders
/// them (`ListingBuild`). A cut never falls inside a subdirectory's run of names (it moves to
/// the subdirectory's prefix, which every server lists then).
///
/// A store that has no offsets (Firebase's v0 API, `ObjectStore.boundsListsByOffsets`) is walked
/// from its first listing; a server that ignores them is found out by its first ranged answer,
/// which holds a name outside its range: that listing, and every later one of this mount, walks
/// the page tokens one after another.
///
/// Memory: no page is kept here once handed on, and no more than `concurrency` requests are in
/// flight: a listing holds at most that many answers at once, whatever the directory's size.
final class RangeListing: @unchecked Sendable {
    let concurrency: Int
    private let lock = NSLock()
    /// GUARDED_BY(lock): false once the store answered a range with a name outside it.
    private var rangesWork = true
    /// GUARDED_BY(lock): pages by how they were asked for, ranges listed, cuts made.
    private var counts = RangeListingCounts()

    /// GUARDED_BY(lock): told each ranged request as it is asked for, in the order asked (the
    /// order the tasks that send them start in is the scheduler's).
    private var askedObserver: (@Sendable (ListRequest) -> Void)?

    init(concurrency: Int) { self.concurrency = max(1, concurrency) }

    /// Watches the ranged requests as they are asked for (tests).
    func observeAsked(_ observer: @escaping @Sendable (ListRequest) -> Void) { lock.withLock { askedObserver = observer } }

    var snapshot: RangeListingCounts {
        lock.withLock { var c = counts; c.rangesWork = rangesWork; return c }
    }

    /// Every page of `request`'s listing, each handed to `take` as it arrives (`request.pageToken`
    /// and the offsets are set here). A page may repeat names another one gave (at a range's
    /// edge, or when a store that ignores the offsets is found out and the listing walks).
    func list(_ request: ListRequest, from store: any ObjectStore, each take: (ListPage) throws -> Void) async throws {
        let first = try await store.list(request)
        count { $0.walkedPages += 1 }
        guard let next = first.nextPageToken else { return try take(first) }
        // A local store answers at once: ranges would only add work.
        if concurrency > 1, !store.isLocal, store.boundsListsByOffsets, lock.withLock({ rangesWork }) {
            let samples = Self.keys(of: first)
            if let last = samples.last {
                let start = Self.restStart(after: last, in: first)
                try take(first)
                do {
                    return try await ranged(request, samples: samples, last: last, start: start, from: store, each: take)
                } catch is RangeIgnored {
                    lock.withLock { rangesWork = false }
                }
                return try await walk(request, after: next, from: store, each: take)
            }
        }
        try take(first)
        try await walk(request, after: next, from: store, each: take)
    }

    private func count(_ change: (inout RangeListingCounts) -> Void) { lock.withLock { change(&counts) } }

    /// The page tokens, one after another.
    private func walk(_ request: ListRequest, after token: String, from store: any ObjectStore,
                      each take: (ListPage) throws -> Void) async throws {
        var r = request
        r.pageToken = token
        while r.pageToken != nil {
            let page = try await store.list(r)
            count { $0.walkedPages += 1 }
            r.pageToken = page.nextPageToken
            try take(page)
        }
    }

    // MARK: - ranges

    private struct Range {
        /// Where the range starts (inclusive).
        var start: String
        var end: String?
        var token: String?
    }

    private struct RangeIgnored: Error {}

    private struct Answer {
        var range: Range
        var page: ListPage
    }

    /// The rest of the directory from `start` (after `last`, the first page's last key; `samples`,
    /// its keys), by ranges, each page handed to `take` once checked; throws `RangeIgnored` when
    /// an answer shows the store does not honour the offsets.
    private func ranged(_ request: ListRequest, samples: [String], last: String, start: String,
                        from store: any ObjectStore, each take: (ListPage) throws -> Void) async throws {
        // A range of a little less than a page mostly fits in one answer (a range of a page and
        // a few names would need a second request, after the first).
        let perRange = max(1, samples.count * 9 / 10)
        var queue: [Range] = []
        // The open-ended range goes first: its answer says where to cut next, and asked for
        // before its siblings it mostly comes back before them, so their slots are refilled as
        // they free up instead of all at once when the last of them comes back.
        func enqueue(_ pieces: [Range]) {
            for p in pieces {
                if p.end == nil { queue.insert(p, at: 0) } else { queue.append(p) }
            }
        }
        enqueue(Self.ranges(from: start,
                            cuts: NameSplits(samples: samples)?.cuts(after: last, before: nil, pieces: 2,
                                                                       perPiece: perRange) ?? [],
                            to: nil, in: request))
        count { $0.ranges += queue.count }
        // The open-ended last range is cut into 2 pieces, then 4, 8… up to `concurrency` each
        // time it comes back full: a directory of a few pages costs about a walk's requests.
        var tailPieces = 2
        try await withThrowingTaskGroup(of: Answer.self) { group in
            var running = 0
            while true {
                while running < concurrency, !queue.isEmpty {
                    let range = queue.removeFirst()
                    var r = request
                    r.startOffset = range.start
                    r.endOffset = range.end
                    r.pageToken = range.token
                    lock.withLock { askedObserver }?(r)
                    group.addTask { Answer(range: range, page: try await store.list(r)) }
                    running += 1
                }
                guard let answer = try await group.next() else { break }
                running -= 1
                count { $0.rangedPages += 1 }
                guard Self.holds(answer.page, answer.range) else {
                    group.cancelAll()
                    throw RangeIgnored()
                }
                let token = answer.page.nextPageToken
                // What the page says of the rest of its range is read before it is handed on.
                let keys = token == nil ? [] : Self.keys(of: answer.page)
                let restStart = keys.last.map { Self.restStart(after: $0, in: answer.page) }
                try take(answer.page)
                guard let token else { continue }
                // Full: cut what is left of it when the page's density says more than a page is
                // left; else follow the token.
                if let lastKey = keys.last, let restStart, let split = NameSplits(samples: keys) {
                    var pieces = concurrency
                    if answer.range.end == nil {
                        tailPieces = min(concurrency, tailPieces * 2)
                        pieces = tailPieces
                    }
                    let cuts = split.cuts(after: lastKey, before: answer.range.end, pieces: pieces, perPiece: perRange)
                    if !cuts.isEmpty {
                        // The rest restarts at its last key (a name there again is kept once by the caller).
                        let pieces = Self.ranges(from: restStart, cuts: cuts,
                                                 to: answer.range.end, in: request)
                        count { $0.ranges += pieces.count; $0.cuts += 1 }
                        enqueue(pieces)
                        continue
                    }
                }
                var rest = answer.range
                rest.token = token
                enqueue([rest])
            }
        }
    }

    /// [start, cut₁), [cut₁, cut₂) … [cutₙ, end): the cuts not after `start`, or not before
    /// `end`, left out. A cut inside a subdirectory's run of names (`p/sub/x`) moves to the
    /// subdirectory (`p/sub/`): whether a range that starts inside the run lists the prefix,
    /// servers differ, and one that starts at it lists it on every server.
    private static func ranges(from start: String, cuts: [String], to end: String?, in request: ListRequest) -> [Range] {
        var bounds = [start]
        for cut in cuts {
            let c = snapped(cut, request)
            if NameOrder.precedes(bounds.last!, c), end.map({ NameOrder.precedes(c, $0) }) ?? true {
                bounds.append(c)
            }
        }
        return bounds.enumerated().map { i, b in Range(start: b, end: i + 1 < bounds.count ? bounds[i + 1] : end) }
    }

    /// `cut`, or the prefix it rolls up into under `request`'s delimiter.
    private static func snapped(_ cut: String, _ request: ListRequest) -> String {
        guard let d = request.delimiter, !d.isEmpty, cut.utf8.starts(with: request.prefix.utf8) else { return cut }
        let bytes = Array(cut.utf8), delim = Array(d.utf8)
        var i = request.prefix.utf8.count
        while i + delim.count <= bytes.count {
            if Array(bytes[i..<(i + delim.count)]) == delim {
                return String(decoding: bytes[0..<(i + delim.count)], as: UTF8.self)
            }
            i += 1
        }
        return cut
    }

    /// Where the rest of a listing starts after `key`, its page's last entry: after every name
    /// a prefix rolls up, or at the item itself (listed again and kept once by the caller: the
    /// least name after an item is the item with U+0000 appended, which no server need accept).
    private static func restStart(after key: String, in page: ListPage) -> String {
        if page.prefixes.last == key, let ub = NameOrder.upperBound(ofStringsStartingWith: key) { return ub }
        return key
    }

    /// The page's names and prefixes in order (what its density is read from; the last is
    /// where the rest starts). A server may send prefixes beyond its last item (fake-gcs-server
    /// counts items only and sends prefixes on top): those after the last item are left out, so
    /// the names between are not skipped.
    private static func keys(of page: ListPage) -> [String] {
        let all = (page.items.map(\.name) + page.names + page.prefixes).sorted { NameOrder.precedes($0, $1) }
        guard let lastName = [page.items.last?.name, page.names.last].compactMap({ $0 })
            .max(by: { NameOrder.precedes($0, $1) }) else { return all }
        return all.filter { !NameOrder.precedes(lastName, $0) }
    }

    /// Whether every entry of `page` could come from objects in [start, end): a prefix may sort
    /// before `start` when `start` begins with it (some of its objects are in the range).
    private static func holds(_ page: ListPage, _ range: Range) -> Bool {
        func inRange(_ n: String) -> Bool {
            !NameOrder.precedes(n, range.start) && range.end.map { NameOrder.precedes(n, $0) } ?? true
        }
        func prefixInRange(_ p: String) -> Bool {
            (range.end.map { NameOrder.precedes(p, $0) } ?? true)
                && (!NameOrder.precedes(p, range.start) || range.start.utf8.starts(with: p.utf8))
        }
        let prefixes = Set(page.prefixes)
        return page.prefixes.allSatisfy(prefixInRange)
            && page.items.allSatisfy { inRange($0.name) || (prefixes.contains($0.name) && prefixInRange($0.name)) }
            && page.names.allSatisfy(inRange)
    }
}

/// What `RangeListing` did since the mount started, for the metrics.
public struct RangeListingCounts: Sendable, Equatable {
    /// Pages asked for by page token (a listing's first page, and every page of a walk).
    public var walkedPages = 0
    /// Pages asked for within a name range.
    public var rangedPages = 0
    /// Name ranges listed (a range followed by its page token counts once).
    public var ranges = 0
    /// Full ranges cut again.
    public var cuts = 0
    /// False once the store was found to ignore the offsets (every listing then walks).
    public var rangesWork = true
    public init() {}
}
