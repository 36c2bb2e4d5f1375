import Foundation
import StorageModel

/// Small files fetched ahead of a process reading a directory's files whole, one after another
/// (docs/SEMANTICS.md §3.6). Which file comes next is learnt from the opens themselves: `tar` and
/// `restic` open a directory's files in the order it lists them (restic two at a time), `borg`
/// in inode-number order. Each file read whole is placed in both orders (`noteRead`).
///
/// Nothing is guessed on one file: an incremental backup reads only the files that changed, and
/// their neighbours are not what it reads next — though it may open them all (borg opens every
/// file to fstat it, and reads only the changed ones), so the evidence is what is read, not what
/// is opened. A walk is evident once `evidenceSteps` files read whole in a row each came at most
/// `walkStep` places after the furthest before it in one order (three neighbouring files: `tar`
/// of a directory; never two changed files). From then on, once a file has been read whole, the
/// next small files in that order are downloaded before they are opened — each a whole object,
/// pinned to the generation listed, its memory reserved in the mount's `ReadBudget`: `probe`
/// files in flight at first, twice as many with each guess read whole, up to the limit
/// (`--walk-ahead`, as wide as the connections). The window refills as each fetch lands, not as
/// the reader moves: files that landed and wait for their open leave their connection to the
/// next file (up to `reach` files ahead of the reader: the width, plus `waitingWindows` limits
/// that landed, within `waitingMiB` MiB per unit of the limit), so the connections stay busy while the reader works through a batch that
/// landed together. Two to eight readers taking the files in turn are one walk: a file read
/// behind the furthest that was opened before it is another reader's (`Track.lastSeq`), however
/// far behind (one waiting for a file read on demand while the other reads ten fetched ahead).
/// Readers that each take a run of files (a data loader's workers) read far apart: the place of
/// each of up to `readers` is kept (`Track.cursors`), and a read of the very next file after one
/// is that reader's step, never a start over.
/// As soon as a guess goes unread (an open passes it, it is closed unread, or it waits out
/// `ttl`), the walk stops being guessed for: the directory needs twice the evidence (up to a
/// window) before the next.
///
/// An open of the same generation is served from those bytes, whether they are in or still on
/// their way (one request per file, overlapped). A file already opened in the same walk (since
/// the reader last started over) is not fetched ahead again. Bytes that an open took (or that a
/// stream read whole, `keep`) stay a little for the next open of the same generation — `borg` reads with `posix_fadvise(DONTNEED)`, which empties
/// the page cache behind it — at most `keepIdle` files no handle reads, the oldest going first,
/// all within the budget. Files not opened within `ttl`, passed over by the walk, or of another
/// generation are dropped.
final class WalkAhead: @unchecked Sendable {
    private let budget: ReadBudget
    private let pool: BufferPool
    private let ttl: Double
    /// The mount's one clock: entries and opens are timed in its calendar seconds, and the sweep
    /// waits on it.
    private let clock: BucketClock
    /// The most files fetched ahead of one walk (`--walk-ahead`), and the most kept for a reopen
    /// that no handle reads.
    private let limit: Int
    private let keepIdle: Int
    private let lock = NSLock()
    private var entries: [String: Entry] = [:]
    private var tracks: [String: Track] = [:]
    private var queues: [String: Queue] = [:]
    private var nextID: UInt64 = 0
    /// Files opened for reading lately (path → generation, when, the count of opens then): not
    /// fetched ahead again in the same walk.
    private var opened: [String: (generation: Int64, at: Double, seq: UInt64)] = [:]
    private var opens: UInt64 = 0
    /// A sweep is scheduled (one at a time, while anything waits).
    private var sweeping = false

    /// A read this close behind the furthest is never a start over (two readers, a step or two
    /// out of order); an open this far past a guess passes it, when one reader reads.
    static let reorderSlack = 2
    /// The most readers at once a walk is recognised with (restic reads two files at a time,
    /// `rsync`, `tar` and borg one; parallel copiers up to eight): their reads land up to this
    /// many places apart.
    static let readers = 8
    /// The furthest a walk's next read may land after the furthest before it: the next file, or
    /// one past a file or two it does not open (a link, a fifo); with readers behind the
    /// furthest (`spread`), one past the furthest any of them could be on.
    static func walkStep(spread: Int) -> Int { 1 + min(max(spread, reorderSlack), readers) }
    /// How far past a guess an open passes it: further with readers behind the furthest.
    static func passing(spread: Int) -> Int { min(max(spread, reorderSlack), readers) }
    /// Steps in a row that make a walk evident at first (three opens of neighbouring files).
    static let evidenceSteps = 2
    /// Files guessed when a walk becomes evident; doubled by each guess an open takes.
    static let probe = 2
    /// How many limits' worth of files that landed may wait for the reader while `width` more
    /// are fetched: the window stays full through a reader's pauses (a batch that landed
    /// together, tar writing its archive, borg chunking a large file it met halfway through the
    /// directory), and a reader that stops costs at most this much more. Counted in files
    /// (`waitingWindows` limits) and in bytes (`waitingMiB` MiB per unit of the limit), whichever
    /// comes first: 256 files of 32 KiB at the default limit of 16, or 64 files of 1 MiB.
    static let waitingWindows = 16
    static let waitingMiB = 4
    /// The most opened files and directories remembered (the oldest are forgotten first).
    static let rememberedOpens = 4096
    static let rememberedDirectories = 256

    init(budget: ReadBudget, pool: BufferPool, ttl: Double, limit: Int = 8, clock: BucketClock) {
        self.budget = budget
        self.pool = pool
        self.ttl = ttl
        self.limit = limit
        keepIdle = max(2 * limit, 4)
        self.clock = clock
    }

    private func now() -> Double { clock.seconds }

    /// Paths fetched ahead and not yet opened (tests, statistics).
    var pending: [String] { lock.withLock { entries.filter { !$0.value.taken }.map(\.key) } }
    /// Paths whose bytes are kept for the next open (tests).
    var kept: [String] { lock.withLock { entries.filter { $0.value.taken }.map(\.key) } }
    /// Files fetched ahead that were opened / dropped unopened, in `directory` (tests).
    func outcomes(in directory: String) -> (hits: Int, misses: Int) {
        lock.withLock { tracks[directory].map { ($0.hits, $0.misses) } ?? (0, 0) }
    }

    // MARK: - learning the order

    /// An open for reading of `path` at `generation`, at `position` in its directory: not fetched
    /// ahead again; guesses it went past (by more than two readers' disorder) went unread.
    func noteOpen(_ path: String, generation: Int64, at position: Position) {
        let t = now()
        let passed: [Entry] = lock.withLock {
            if opened.count >= Self.rememberedOpens {
                for (k, _) in opened.sorted(by: { $0.value.at < $1.value.at }).prefix(Self.rememberedOpens / 4) { opened[k] = nil }
            }
            opens += 1
            opened[path] = (generation, t, opens)
            let track = tracks[position.directory]
            let spread = track?.spread ?? [:]
            // What an open passes, in each order (worked out once per open): the files between
            // the reader nearest behind it and it. With several readers walking apart, an open
            // more than one place past the nearest is one starting a run of its own (a data
            // loader's worker), and the files behind it are theirs: none passed.
            var passes: [Order: Range<Int>] = [:]
            for o in Order.allCases {
                let behind = Self.passing(spread: spread[o] ?? 0)
                let upTo = position[o] - behind
                guard let track, let from = track.cursors[o]?.map(\.at).filter({ $0 < position[o] }).max() else {
                    passes[o] = Int.min..<max(Int.min, upTo)
                    continue
                }
                let starting = track.recentReaders(o) >= 2 && position[o] - from > 1
                passes[o] = starting ? 0..<0 : (from - behind + 1)..<max(from - behind + 1, upTo)
            }
            func passed(_ at: Int, _ o: Order) -> Bool { passes[o]?.contains(at) ?? false }
            let gone = entries.filter { k, e in
                guard !e.taken, e.directory == position.directory, let o = e.order else { return false }
                return k != path && passed(e.position, o)
            }
            for k in gone.keys { entries[k] = nil }
            if !gone.isEmpty { missedLocked(position.directory, gone.count) }
            if var q = queues[position.directory] {
                // Files waiting that the reader went past are not started.
                q.waiting = q.waiting.filter { !passed($0.position, q.order) }
                queues[position.directory] = q
            }
            return Array(gone.values)
        }
        passed.forEach(drop)
    }

    /// `path`, at `position` in its directory, was read whole: placed in both orders (a walk
    /// becomes evident, or the reader left it); a guess read is a hit.
    func noteRead(_ path: String, at position: Position) {
        let t = now()
        lock.withLock {
            if tracks[position.directory] == nil, tracks.count >= Self.rememberedDirectories {
                for (k, _) in tracks.sorted(by: { $0.value.touched < $1.value.touched }).prefix(Self.rememberedDirectories / 4) { tracks[k] = nil }
            }
            var track = tracks[position.directory] ?? Track()
            track.touched = t
            if let e = entries[path], e.taken, !e.read, e.order != nil {
                e.read = true
                track.hits += 1
                track.streak += 1
            }
            let walked = track.walking ?? .listing
            // When this file was opened (a file whose open is forgotten counts as opened now).
            let seq = opened[path]?.seq ?? opens + 1
            for order in Order.allCases {
                let p = position[order]
                guard let last = track.last[order] else {
                    track.last[order] = p
                    track.lastSeq[order] = seq
                    track.run[order] = 0
                    continue
                }
                let spread = track.spread[order] ?? 0
                let step = Self.walkStep(spread: spread)
                var cursors = track.cursors[order] ?? [(last, track.reads)]
                // The reader this read moves on, when it is the next file of one (behind the
                // furthest, exactly the next: random reads land near earlier ones by chance).
                let reach = p > last ? step : 1
                let continued = cursors.lastIndex { $0.at < p && p - $0.at <= reach }
                if p > last {
                    if p - last <= step {
                        track.run[order] = (track.run[order] ?? 0) + 1
                    } else if !(track.recentReaders(order) >= 2 && track.walking == order) {
                        // A jump; with several readers walking, one starting a run ahead of them.
                        track.run[order] = 0
                    }
                    track.last[order] = p
                    track.lastSeq[order] = seq
                } else if p < last, seq < track.lastSeq[order] ?? 0 {
                    // Opened before the furthest was: a reader behind it (restic's second file
                    // reader, waiting for a file the first passed long ago), not a new walk.
                    track.spread[order] = max(spread, last - p)
                } else if continued != nil {
                    // Another reader's next file, behind the furthest (readers that take runs of
                    // files): not a start over. The evidence stays the furthest reader's steps.
                } else if p < last - Self.reorderSlack {
                    track.run[order] = 0
                    track.last[order] = p
                    track.lastSeq[order] = seq
                    track.spread[order] = 0
                    // A start over (`tar` run again): what the walk before opened is fair game.
                    if order == walked { track.since = opens }
                }
                if let i = continued { cursors.remove(at: i) }
                cursors.append((p, track.reads + 1))
                if cursors.count > Self.readers { cursors.removeFirst(cursors.count - Self.readers) }
                track.cursors[order] = cursors
            }
            track.reads += 1
            if let w = track.walking, (track.run[w] ?? 0) == 0 {
                // The reader left the order it walked in (a jump, or a start over).
                track.walking = nil
                track.streak = 0
                track.window = nil
            }
            if track.walking == nil {
                // Ties go to the listing's order.
                let best = Order.allCases.max { (track.run[$0] ?? 0) < (track.run[$1] ?? 0) } ?? .listing
                let order = (track.run[best] ?? 0) > (track.run[.listing] ?? 0) ? best : .listing
                if (track.run[order] ?? 0) >= track.evidence {
                    track.walking = order
                    track.streak = 0
                    track.window = nil
                }
            }
            tracks[position.directory] = track
        }
    }

    /// The order to fetch ahead in for `directory`, how many fetches at once (`width`) and how
    /// far ahead of the reader (`reach`): nil until its reads show a walk (`noteRead`); then
    /// `probe` files, twice as many for each guess read since, up to the limit. Until a guess
    /// has been read, no further than the width (a false start costs `probe` files); after
    /// that, `width` fetches stay in flight however many files landed and wait for the reader,
    /// up to `waitingWindows` limits of them and `waitingMiB` MiB per unit of the limit (a
    /// reader that stops: the walk stops that far past it, within the read budget).
    ///
    /// Also nil while the last window planned still stands: the same order, width and reach,
    /// planned at most `refreshEvery` files before the reader's `position` (a window reaches
    /// sixteen limits ahead, so it need not be made again at every file read: each is a walk over
    /// hundreds of the directory's entries under the superblock's lock).
    func plan(at position: Position) -> (order: Order, width: Int, reach: Int)? {
        lock.withLock {
            guard var track = tracks[position.directory], let order = track.walking else { return nil }
            let width = min(limit, Self.probe << min(track.streak, 16))
            let reach = track.streak == 0 ? width : width + Self.waitingWindows * limit
            let p = position[order]
            if let w = track.window, w.order == order, w.width == width, w.reach == reach,
               p >= w.at - Self.readers, p < w.at + refreshEvery {
                return nil
            }
            track.window = (order, width, reach, p)
            tracks[position.directory] = track
            return (order, width, reach)
        }
    }

    /// The width a walk of `directory` fetches at now (tests); nil when none is evident.
    func width(in directory: String) -> Int? {
        lock.withLock { tracks[directory]?.walking == nil ? nil : min(limit, Self.probe << min(tracks[directory]!.streak, 16)) }
    }

    /// Files read whole between two windows of one walk at its full width: a quarter of the
    /// limit (4 at the default), every file for a limit under 4.
    private var refreshEvery: Int { max(1, limit / 4) }

    // MARK: - fetching ahead

    /// Fetches the candidates (the next files after the reader in `order`, `reach` of them) not
    /// fetched, kept or opened yet, in order, at most `width` at once: the rest wait, each
    /// started as a fetch of the directory lands, while the budget takes them.
    /// Files other readers opened already (up to `readers` of them in the window) do not count
    /// in `reach`: with several readers, the next files are theirs, and the guesses start after.
    func prefetch(_ window: [Candidate], in directory: String, order: Order, width: Int, reach: Int,
                  fetch: @escaping @Sendable (Candidate) async throws -> Data) {
        sweep()
        let t = now()
        let evicted: [Entry] = lock.withLock {
            let since = tracks[directory]?.since ?? 0
            let fresh = window.filter { c in
                guard let o = opened[c.path] else { return true }
                return !(o.generation == c.info.generation && t - o.at <= ttl && o.seq > since)
            }
            queues[directory] = Queue(order: order, waiting: within(fresh.prefix(reach), width: width), width: width, fetch: fetch)
            return startLocked(directory)
        }
        evicted.forEach { $0.bytes.cancel() }
        scheduleSweep()
    }

    /// The first of `candidates`: the first `width` whatever their size, then as many as fit in
    /// `waitingMiB` MiB per unit of the limit (the files that may land and wait for the reader).
    private func within(_ candidates: ArraySlice<Candidate>, width: Int) -> ArraySlice<Candidate> {
        var bytes: Int64 = 0
        let most = Int64(Self.waitingMiB * limit) << 20
        var end = candidates.startIndex
        for (i, c) in zip(candidates.indices, candidates) {
            if i - candidates.startIndex >= width {
                bytes += c.info.size
                if bytes > most { break }
            }
            end = i + 1
        }
        return candidates[candidates.startIndex..<end]
    }

    /// A fetch of `directory` ended (its bytes are in, or it failed): its connection goes to the
    /// next file waiting.
    private func landed(_ path: String, id: UInt64, in directory: String) {
        let evicted: [Entry] = lock.withLock {
            if let e = entries[path], e.id == id { e.fetching = false }
            return startLocked(directory)
        }
        evicted.forEach { $0.bytes.cancel() }
    }

    /// Starts the files waiting in `directory`'s queue while fewer than its width are in flight
    /// and the budget takes them (kept bytes nobody reads give way); returns the kept entries
    /// evicted for them, to cancel outside the lock (caller holds `lock`).
    private func startLocked(_ directory: String) -> [Entry] {
        guard var q = queues[directory] else { return [] }
        let t = now()
        var inFlight = entries.values.reduce(0) { $0 + ($1.fetching && $1.directory == directory ? 1 : 0) }
        let since = tracks[directory]?.since ?? 0
        var evicted: [Entry] = []
        while inFlight < q.width, let c = q.waiting.first {
            q.waiting = q.waiting.dropFirst()
            if entries[c.path] != nil { continue }
            if let o = opened[c.path], o.generation == c.info.generation, t - o.at <= ttl, o.seq > since { continue }
            let size = Int(c.info.size)
            var fits = true
            while !budget.reserve(size, for: self) {
                // Kept bytes nobody reads give way to files about to be opened.
                guard let oldest = entries.filter({ $0.value.taken && $0.value.readers == 0 })
                    .min(by: { $0.value.touched < $1.value.touched }) else { fits = false; break }
                entries[oldest.key] = nil
                evicted.append(oldest.value)
                budget.release(oldest.value.reserved, for: self)
            }
            guard fits else {
                q.waiting = []
                break
            }
            nextID += 1
            let id = nextID, fetch = q.fetch
            let bytes = PartBuffer(capacity: size, pool: pool) { [weak self] buf in
                defer { self?.landed(c.path, id: id, in: directory) }
                try buf.append(try await fetch(c))
            }
            let e = Entry(id: id, generation: c.info.generation, reserved: size, bytes: bytes,
                          directory: directory, order: q.order, position: c.position, touched: t)
            e.fetching = true
            entries[c.path] = e
            inFlight += 1
        }
        queues[directory] = q.waiting.isEmpty ? nil : q
        return evicted
    }

    /// Sweeps once `ttl` has passed, again while anything is left.
    private func scheduleSweep() {
        let start = lock.withLock { () -> Bool in
            guard !sweeping, !entries.isEmpty else { return false }
            sweeping = true
            return true
        }
        guard start else { return }
        Task.detached { [weak self, ttl, clock] in
            try? await clock.sleep(for: .milliseconds(Int64(ttl * 1000) + 100))
            guard let self else { return }
            self.sweep()
            self.lock.withLock { self.sweeping = false }
            self.scheduleSweep()
        }
    }

    // MARK: - handing bytes to readers

    /// The bytes fetched ahead (or kept) for this generation of `path`, in flight or done, for
    /// a reader to read from until it gives them back (`giveBack`); nil when there are none.
    /// The walk-ahead keeps their reservation. Bytes of another generation, or a fetch that
    /// failed, are dropped.
    func take(_ path: String, generation: Int64) -> PartBuffer? {
        let t = now()
        let (bytes, stale): (PartBuffer?, Entry?) = lock.withLock {
            guard let e = entries[path] else { return (nil, nil) }
            guard e.generation == generation, !e.bytes.hasFailed else {
                entries[path] = nil
                return (nil, e)
            }
            e.taken = true
            e.readers += 1
            e.touched = t
            return (e.bytes, nil)
        }
        if let stale { drop(stale) }
        return bytes
    }

    /// A reader is done with bytes it took: they stay for the next open, as one of the
    /// `keepIdle` files kept.
    func giveBack(_ path: String, _ bytes: PartBuffer) {
        let t = now()
        let evicted: [Entry] = lock.withLock {
            guard let e = entries[path], e.bytes === bytes else { return [] }
            e.readers -= 1
            e.touched = t
            if e.bytes.hasFailed, e.readers == 0 {
                entries[path] = nil
                return [e]
            }
            if e.order != nil, !e.read, e.readers == 0 {
                // Opened and closed unread (borg opens every file, reads the changed ones).
                entries[path] = nil
                missedLocked(e.directory, 1)
                return [e]
            }
            return trimKeptLocked()
        }
        evicted.forEach(drop)
    }

    /// A stream that read a small file whole hands its bytes over (their reservation with them)
    /// for the next open of the generation; false when they are not wanted (already here).
    func keep(_ path: String, generation: Int64, directory: String, bytes: PartBuffer, reserved: Int, from holder: AnyObject) -> Bool {
        let t = now()
        let (kept, evicted): (Bool, [Entry]) = lock.withLock {
            guard entries[path] == nil, bytes.isComplete else { return (false, []) }
            budget.transfer(reserved, from: holder, to: self)
            nextID += 1
            let e = Entry(id: nextID, generation: generation, reserved: reserved, bytes: bytes, directory: directory, order: nil, position: 0, touched: t)
            e.taken = true
            entries[path] = e
            return (true, trimKeptLocked())
        }
        evicted.forEach(drop)
        if kept { scheduleSweep() }
        return kept
    }

    /// Drops the oldest kept files no reader holds beyond `keepIdle` (caller holds `lock`).
    private func trimKeptLocked() -> [Entry] {
        let idle = entries.filter { $0.value.taken && $0.value.readers == 0 }
        guard idle.count > keepIdle else { return [] }
        let old = idle.sorted { $0.value.touched < $1.value.touched }.prefix(idle.count - keepIdle)
        for (k, _) in old { entries[k] = nil }
        return old.map(\.value)
    }

    /// `count` guesses in `directory` went unread: stop guessing for its walk, and ask twice the
    /// evidence (up to a window) before the next (caller holds `lock`).
    private func missedLocked(_ directory: String, _ count: Int) {
        queues[directory] = nil
        guard var track = tracks[directory] else { return }
        track.misses += count
        if track.walking != nil {
            track.walking = nil
            track.streak = 0
            track.evidence = min(max(limit, Self.evidenceSteps), 2 * track.evidence)
        }
        track.run = [:]
        tracks[directory] = track
    }

    /// INVARIANT: the budget holds at least what the files fetched ahead or kept reserved (a
    /// file just dropped has left `entries` and gives its reservation back a moment later), and
    /// no more than `keepIdle` kept files are idle.
    func invariantViolations() -> [String] {
        lock.withLock {
            var bad: [String] = []
            let reserved = entries.values.reduce(0) { $0 + $1.reserved }
            let held = budget.reserved(by: self)
            if held < reserved { bad.append("the walk-ahead's files reserved \(reserved) bytes, the budget holds \(held) for them") }
            let idle = entries.values.filter { $0.taken && $0.readers == 0 }.count
            if idle > keepIdle { bad.append("the walk-ahead keeps \(idle) files nobody reads, more than \(keepIdle)") }
            if entries.values.contains(where: { $0.readers < 0 }) { bad.append("a file fetched ahead was given back more often than taken") }
            return bad
        }
    }

    /// Drops what waited longer than `ttl` to be opened (a miss) or to be opened again. (Opens
    /// older than that are ignored where they are read, and forgotten oldest first beyond
    /// `rememberedOpens`: this runs before every window, so it stays O(files held).)
    func sweep() {
        let t = now()
        let old: [Entry] = lock.withLock {
            let old = entries.filter { $0.value.readers == 0 && t - $0.value.touched > ttl }
            var missed: [String: Int] = [:]
            for (k, e) in old {
                entries[k] = nil
                if !e.taken, e.order != nil { missed[e.directory, default: 0] += 1 }
            }
            for (d, n) in missed { missedLocked(d, n) }
            return Array(old.values)
        }
        old.forEach(drop)
    }

    /// Drops everything (unmount).
    func dropAll() {
        let all: [Entry] = lock.withLock {
            defer { entries = [:]; queues = [:] }
            return Array(entries.values)
        }
        all.forEach(drop)
    }

    private func drop(_ e: Entry) {
        // Readers still holding the bytes read on from them (or on demand if the fetch is
        // cancelled under them: a cancelled part is read again on demand).
        if e.readers == 0 { e.bytes.cancel() }
        budget.release(e.reserved, for: self)
    }
}
