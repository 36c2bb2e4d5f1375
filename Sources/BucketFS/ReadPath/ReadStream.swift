import Foundation
import FuseKit
import Logging
import StorageModel

/// Reads of one open file that is not staged here (docs/SEMANTICS.md §6), pinned to the generation opened.
///
/// A sequential reader gets the next parts fetched in the background, several ranged requests at
/// once, parts growing from `firstPart` to `maxPart`; each part's memory is reserved in the
/// mount's `ReadBudget`, and what does not fit is read on demand instead. A read elsewhere (a
/// seek) cancels the parts and reads just what was asked. Every piece, fetched ahead or on demand,
/// goes through `ContentCheck`: the read that completes the object fails if its checksum differs.
/// With `streams == 0` (a local store) every read goes straight to the store, and with a local
/// file (the embedded bucket's blob of this generation) straight to that file. With the read
/// cache (`ReadCache`), a generation whose file there is complete is read from that file, and one
/// whose file is filling has what this stream reads written into it.
final class ReadStream: @unchecked Sendable {
    /// From the mount's options (`MountConfig`, where their defaults are).
    struct Tuning: Sendable {
        var firstPart: Int
        var maxPart: Int
        /// Parts in flight or unread ahead of the reader at first; 0 reads on demand only.
        var streams: Int
        /// The most parts in flight a reader that keeps waiting for bytes on their way grows to
        /// (docs/SEMANTICS.md §3.6, "a link of slow streams").
        var maxStreams: Int
        /// How far apart in order the requests of one sequential reader may arrive (the kernel's
        /// read-ahead sends that much at once).
        var reorder: Int64
        /// The most bytes held ahead of a sequential reader with `streams` parts in flight,
        /// fetched or on their way: twice the streams' largest parts, so parts that landed do not
        /// stop the next ones going.
        func window(_ streams: Int) -> Int { 2 * max(1, streams) * maxPart }

        init(_ config: MountConfig) {
            firstPart = config.readPartFirst
            maxPart = config.readPartMax
            streams = config.readStreams
            maxStreams = config.readStreams == 0 ? 0 : max(config.readStreams, config.readStreamsMax)
            reorder = Int64(config.kernelReadAhead)
        }
    }

    let path: String
    let generation: Int64
    let size: Int64
    private let tuning: Tuning
    private let budget: ReadBudget
    private let pool: BufferPool
    private let fetch: @Sendable (Range<Int64>) async throws -> Data
    /// One streamed request for a part: its bytes handed over in order as they arrive.
    typealias StreamFetch = @Sendable (Range<Int64>, @escaping @Sendable (Data) throws -> Void) async throws -> Void
    private let streamFetch: StreamFetch
    private let logger: Logger
    /// The generation's bytes as a file on this machine (closed by `close()`).
    private var localFile: Int32?
    /// The generation's checked file in the read cache: reads go to it until one finds it
    /// changed (then to the bucket, as if it were not there).
    private var cached: CachedFile?
    /// The generation's read-cache file being filled: what the parts and on-demand reads bring
    /// is written into it.
    private let fill: CacheFill?

    private final class Part {
        let range: Range<Int64>
        let bytes: PartBuffer
        var reserved: Int
        /// Times the part's fill was started again after it broke.
        var refills = 0
        /// Bytes another part owns (the walk-ahead's, `seed`): given back to it when the stream
        /// is done with them, never cancelled here.
        let giveBack: (@Sendable () -> Void)?
        init(_ range: Range<Int64>, _ bytes: PartBuffer, reserved: Int, giveBack: (@Sendable () -> Void)? = nil) {
            self.range = range
            self.bytes = bytes
            self.reserved = reserved
            self.giveBack = giveBack
        }
    }

    // Guarded by `lock`.
    private let lock = NSLock()
    /// Contiguous parts in order, from the one being read on.
    private var parts: [Part] = []
    private var nextPartSize: Int
    /// Parts in flight at once ahead of this sequential reader now: `tuning.streams` at first,
    /// twice as many each time the reader waits for bytes of a part it has not waited in before
    /// (the link's streams, not the reader, are the limit), up to `tuning.maxStreams`; back to the
    /// first count after a seek.
    private var streams: Int
    /// Where the part the stream count last grew at starts (once a part).
    private var grewAt: Int64 = -1
    /// Parts the reader has moved into in order: how far ahead to fetch.
    private var streak = 0
    /// Where the part the reader is in starts.
    private var currentPart: Int64 = 0
    private var lastEnd: Int64 = 0
    /// Bytes served in order from 0 (walk-ahead starts once a file was read whole), and ranges
    /// served past them (the kernel's read-ahead requests of one window arrive in any order),
    /// merged in as the bytes before them are served.
    private var inOrderTo: Int64 = 0
    private var servedAhead: [Range<Int64>] = []
    private var check: ContentCheck?
    private var corrupt: StorageError?
    private var closed = false
    /// Shared parts dropped: handed back to their owner once `lock` is released
    /// (`flushGiveBacks`), never under it.
    private var giveBacks: [@Sendable () -> Void] = []

    private func flushGiveBacks() {
        let due = lock.withLock {
            defer { giveBacks = [] }
            return giveBacks
        }
        for g in due { g() }
    }

    /// The complete cache file this stream reads from, while it does.
    var cachedFile: CachedFile? { lock.withLock { cached } }

    /// `file` was found changed (and dropped): this stream reads from the bucket from now on.
    func stopReading(_ file: CachedFile) {
        lock.withLock { if cached === file { cached = nil } }
    }

    /// A jump of more than this behind the parts, or a part beyond them, is a seek.
    private static let slack: Int64 = 4 << 20

    init(path: String, info: ObjectInfo, tuning: Tuning, budget: ReadBudget, pool: BufferPool, logger: Logger,
         localFile: Int32? = nil, cached: CachedFile? = nil, fill: CacheFill? = nil, stream: @escaping StreamFetch,
         fetch: @escaping @Sendable (Range<Int64>) async throws -> Data) {
        self.localFile = localFile
        self.cached = cached
        self.fill = fill
        self.logger = logger
        streamFetch = stream
        self.path = path
        generation = info.generation
        size = info.size
        self.tuning = tuning
        self.budget = budget
        self.pool = pool
        self.fetch = fetch
        nextPartSize = tuning.firstPart
        streams = tuning.streams
        check = ContentCheck(info)
    }

    /// Parts in flight at once ahead of the reader now (tests, statistics).
    var currentStreams: Int { lock.withLock { streams } }

    /// Starts with the whole object fetched (or being fetched) by the walk-ahead, which keeps
    /// the bytes and their reservation: `giveBack` when this stream is done with them.
    func seed(_ data: PartBuffer, giveBack: @escaping @Sendable () -> Void) {
        lock.withLock {
            parts = [Part(0..<size, data, reserved: 0, giveBack: giveBack)]
        }
    }

    /// At close, a stream that was read whole and whose one part holds the whole object offers
    /// it here (the walk-ahead keeps it for the next open of the generation); true when taken,
    /// with the reservation moved from this stream.
    var keepWhole: (@Sendable (_ bytes: PartBuffer, _ reserved: Int, _ holder: AnyObject) -> Bool)?

    /// Bytes reserved for parts now (statistics and tests).
    var reservedBytes: Int { lock.withLock { parts.reduce(0) { $0 + $1.reserved } } }
    /// The byte ranges of the parts held now (tests).
    var partRanges: [Range<Int64>] { lock.withLock { parts.map(\.range) } }

    /// INVARIANT: the parts are contiguous, in order, within the object, and what they reserved
    /// is what the budget holds for this stream (none once closed).
    func invariantViolations() -> [String] {
        lock.withLock {
            var bad: [String] = []
            for (a, b) in zip(parts, parts.dropFirst()) where a.range.upperBound != b.range.lowerBound {
                bad.append("'\(path)': parts \(a.range) and \(b.range) are not contiguous")
            }
            if let last = parts.last, last.range.upperBound > size { bad.append("'\(path)': part \(last.range) is past the end (\(size))") }
            let reserved = parts.reduce(0) { $0 + $1.reserved }
            let held = budget.reserved(by: self)
            if reserved != held { bad.append("'\(path)': its parts reserved \(reserved) bytes, the budget holds \(held) for it") }
            if closed, !parts.isEmpty { bad.append("'\(path)': closed with \(parts.count) parts") }
            return bad
        }
    }

    /// The bytes at [off, off + count) (fewer at the end), and whether this read completed a
    /// reading of the whole object in order from 0 (said once).
    func read(at off: Int64, count: Int) async throws -> (Data, whole: Bool) {
        if off >= size || count <= 0 { return (Data(), false) }
        defer { flushGiveBacks() }
        let end = min(size, off + Int64(count))
        if let fd = lock.withLock({ localFile }) {
            let data = try Self.read(fd, off..<end, path: path, pool: pool)
            try verify(data, at: off)
            return (data, noteServed(off, end))
        }
        if let cached = lock.withLock({ self.cached }) {
            // A block changed on disk is never served: the cache dropped the file, and this
            // stream reads from the bucket from here on.
            if let data = try? cached.read(off..<end, pool: pool) {
                try verify(data, at: off)
                return (data, noteServed(off, end))
            }
            stopReading(cached)
        }
        let plan = try lock.withLock { () throws -> [Part]? in
            if let corrupt { throw corrupt }
            return planLocked(off, end)
        }
        var pieces: [Data] = []
        if let plan {
            for p in plan {
                let lo = Int(max(off, p.range.lowerBound) - p.range.lowerBound)
                let hi = Int(min(end, p.range.upperBound) - p.range.lowerBound)
                while true {
                    do {
                        pieces.append(try await p.bytes.bytes(lo..<hi))
                        break
                    } catch {
                        if Task.isCancelled { throw StorageError.cancelled }
                        if let corrupt = lock.withLock({ corrupt }) { throw corrupt }
                        if refill(p, after: error) { continue }
                        lock.withLock { dropLocked { $0 === p } }
                        // A stream that broke after its first bytes more than `maxRefills` times,
                        // or a part dropped by a seek of another read: these bytes are read on
                        // demand, with retries; so is an answer that ended short. A failure before
                        // any byte already had its retries.
                        if p.bytes.filledCount == 0, !p.bytes.endedShort, (error as? StorageError) != .cancelled { throw error }
                        logger.debug("part \(p.range) of \(path): \(error); reading on demand")
                        let data = try await fetch(off..<end)
                        try verify(data, at: off)
                        fill?.write(data, at: off)
                        return (data, false)
                    }
                }
            }
        } else {
            let data = try await fetch(off..<end)
            try verify(data, at: off)
            fill?.write(data, at: off)
            pieces = [data]
        }
        let whole = noteServed(off, end)
        if pieces.count == 1 { return (pieces[0], whole) }
        var joined = Data(capacity: Int(end - off))
        for p in pieces { joined.append(p) }
        return (joined, whole)
    }

    /// A part whose stream broke after some of its bytes (or whose answer ended short) is fetched
    /// again from where its bytes stop, with one request, up to `maxRefills` times; true when the
    /// reader is to wait for it again.
    private func refill(_ p: Part, after error: any Error) -> Bool {
        guard (error as? StorageError) != .cancelled, p.bytes.filledCount > 0 || p.bytes.endedShort else { return false }
        return lock.withLock {
            guard !closed, parts.contains(where: { $0 === p }) else { return false }
            switch p.bytes.refill(start: p.refills < Self.maxRefills, fillPart(p.range)) {
            case .started:
                p.refills += 1
                logger.debug("part \(p.range) of \(path): \(error); fetching its rest from \(p.range.lowerBound + Int64(p.bytes.filledCount))")
                return true
            case .alreadyFilling: return true
            case .no: return false
            }
        }
    }

    /// How many times a broken part is fetched again before its bytes are read on demand.
    static let maxRefills = RetryBudget.partRefills

    /// A stream dropped without `close` (its filesystem went without a shutdown) still gives its
    /// local file's descriptor back.
    deinit {
        if let fd = localFile { Glibc.close(fd) }
    }

    /// Cancels what is still being fetched and gives the budget back.
    func close() {
        let whole: Part? = lock.withLock {
            guard keepWhole != nil, corrupt == nil, inOrderTo >= size, parts.count == 1, let p = parts.first, p.giveBack == nil,
                  p.range == 0..<size, p.bytes.isComplete else { return nil }
            return p
        }
        // Outside the lock: the walk-ahead's lock is never taken under this one by a keep.
        if let p = whole, let keepWhole, keepWhole(p.bytes, p.reserved, self) {
            lock.withLock {
                p.reserved = 0
                parts.removeAll { $0 === p }
            }
        }
        lock.withLock {
            if streams > tuning.streams { logger.debug("'\(path)': read with up to \(streams) streams (\(tuning.streams) at first)") }
            closed = true
            dropLocked { _ in true }
            if let fd = localFile { Glibc.close(fd) }
            localFile = nil
            cached = nil
        }
        flushGiveBacks()
    }

    /// Notes bytes served; true when they complete a reading of the whole object from 0, in
    /// whatever order the requests of a read-ahead window came.
    private func noteServed(_ off: Int64, _ end: Int64) -> Bool {
        lock.withLock {
            guard end > inOrderTo else { return false }
            guard off <= inOrderTo else {
                if servedAhead.count < Self.servedAheadRanges { servedAhead.append(off..<end) }
                return false
            }
            inOrderTo = end
            while let i = servedAhead.firstIndex(where: { $0.lowerBound <= inOrderTo }) {
                inOrderTo = max(inOrderTo, servedAhead.remove(at: i).upperBound)
            }
            return inOrderTo >= size
        }
    }

    /// Out-of-order ranges remembered past the bytes served in order (a read-ahead window of
    /// 1 MiB comes in at most 256 requests).
    static let servedAheadRanges = 256

    /// Exactly `range` of a local file, read into a pooled buffer that the reply points into;
    /// fewer bytes is a fault, never short data.
    private static func read(_ fd: Int32, _ range: Range<Int64>, path: String, pool: BufferPool) throws -> Data {
        let count = Int(range.upperBound - range.lowerBound)
        let r = LocalRead(fd, range, pool: pool)
        guard r.failure == nil, r.done == count else {
            r.giveBack()
            if let failure = r.failure { throw StorageError.unknown(status: 0, message: "read of \(path)'s file: \(Errno(failure))") }
            throw StorageError.retryLimitExceeded(message: "read \(path): asked for \(count) bytes at offset \(range.lowerBound), the file has \(r.done)")
        }
        return r.data(count: count)
    }

    // MARK: - planning (caller holds `lock`)

    /// The parts that hold [off, end), after scheduling more ahead of a sequential reader; nil
    /// when the range is to be read on demand.
    private func planLocked(_ off: Int64, _ end: Int64) -> [Part]? {
        let lo = parts.first?.range.lowerBound ?? lastEnd
        let hi = parts.last?.range.upperBound ?? lastEnd
        // The kernel's read-ahead sends a sequential reader's requests several at once, and a
        // later one may come first: within that window either way, the reader is still in order.
        let sequential = tuning.streams > 0 && off >= lo - max(Self.slack, 2 * tuning.reorder)
            && off <= hi + max(Int64(nextPartSize), tuning.reorder)
        defer { lastEnd = max(end, sequential ? lastEnd : 0) }
        guard sequential else {
            // A seek: what was fetched ahead is for another place.
            dropLocked { _ in true }
            nextPartSize = tuning.firstPart
            streams = tuning.streams
            streak = 0
            currentPart = end
            return nil
        }
        if off < lo { return nil }  // a straggler just behind the parts
        // A first read at the start that asks for a whole first part or more reads the file
        // through (a reader taking half a MiB or more at once, for which the kernel asks its
        // whole read-ahead window: `dd bs=1M`, a data loader): sequential from this request, so
        // a file of a few parts arrives in one round trip, not two (docs/SEMANTICS.md §3.6).
        if streak == 0, lastEnd == 0, parts.isEmpty, off == 0, end >= Int64(tuning.firstPart), end < size {
            streak = 1
        }
        // Parts wholly behind the reader are done with, by a margin for requests that arrive
        // out of order: the kernel may have two read-ahead windows in flight.
        let margin = max(Int64(tuning.firstPart), 2 * tuning.reorder)
        dropLocked { $0.range.upperBound + margin <= off }
        scheduleLocked(from: off, through: end)
        // The reader moving into a second part makes the read sequential (`scheduleLocked`).
        if let p = parts.first(where: { $0.range.contains(off) }), p.range.lowerBound > currentPart {
            currentPart = p.range.lowerBound
            streak += 1
            scheduleLocked(from: off)
        }
        var plan: [Part] = []
        var at = off
        for p in parts where p.range.upperBound > at && p.range.lowerBound <= at {
            plan.append(p)
            at = p.range.upperBound
            if at >= end {
                if growIfWaitingLocked(plan, until: end) { scheduleLocked(from: off) }
                return plan
            }
        }
        return nil
    }

    /// Starts parts from the end of the last one (or `off`), and at least through `through` (a
    /// request that came ahead of the others), as long as the budget takes them. Until the reader
    /// has moved into a second part, one part at most is ahead of it (a reader of a file's first
    /// bytes costs one request). From then on the read is sequential: up to `streams` parts are
    /// in flight at once, a part that has landed no longer counting (the next read starts the
    /// next one), while the parts ahead of the reader hold at most `window` bytes.
    private func scheduleLocked(from off: Int64, through: Int64 = 0) {
        guard !closed else { return }
        // A first read a little into the file (the kernel's requests of one read(2) arriving out
        // of order) starts the first part at 0 all the same: a small file is one request.
        var next = parts.last?.range.upperBound ?? (lastEnd == 0 && off < Int64(tuning.firstPart) ? 0 : off)
        let ahead = parts.filter { $0.range.upperBound > off }
        let sequential = streak > 0
        var going = sequential ? ahead.filter { !$0.bytes.isComplete }.count : ahead.count
        var held = ahead.reduce(Int64(0)) { $0 + $1.range.upperBound - max(off, $1.range.lowerBound) }
        let allowed = sequential ? streams : min(streams, 1)
        let window = Int64(tuning.window(streams))
        while going < allowed && held < window || next < through, next < size {
            let len = Int(min(Int64(nextPartSize), size - next))
            guard budget.reserve(len, for: self, floor: tuning.firstPart) else { break }
            let range = next..<(next + Int64(len))
            parts.append(Part(range, startPart(range), reserved: len))
            next = range.upperBound
            going += 1
            held += Int64(len)
            nextPartSize = min(tuning.maxPart, nextPartSize * 2)
        }
    }

    /// A sequential reader asking for bytes of a part that have not arrived yet waits on the
    /// link: the parts ahead of it are all on their way and the reader is faster than their
    /// streams (a link whose each connection carries only so much). Twice as many parts go in
    /// flight from now on, at most once a part, up to `maxStreams`; the budget and the window
    /// still bound the bytes. True when the count grew.
    private func growIfWaitingLocked(_ plan: [Part], until end: Int64) -> Bool {
        guard streak >= 2, streams < tuning.maxStreams,
              let p = plan.first(where: { $0.range.lowerBound + Int64($0.bytes.filledCount) < min(end, $0.range.upperBound) }),
              grewAt < p.range.lowerBound else { return false }
        grewAt = p.range.lowerBound
        streams = min(tuning.maxStreams, 2 * streams)
        return true
    }

    private func dropLocked(_ which: (Part) -> Bool) {
        parts.removeAll { p in
            guard which(p) else { return false }
            if let giveBack = p.giveBack { giveBacks.append(giveBack) } else { p.bytes.cancel() }
            budget.release(p.reserved, for: self)
            p.reserved = 0
            return true
        }
    }

    private func startPart(_ range: Range<Int64>) -> PartBuffer {
        PartBuffer(capacity: Int(range.upperBound - range.lowerBound), pool: pool, fill: fillPart(range))
    }

    /// One streamed request filling a part from where its bytes stop. Its crc32c is taken as the
    /// bytes stream in (continuing the bytes already in) and added to the content check before
    /// the last bytes are let through, so a mismatch fails the reader before it has the whole
    /// object.
    private func fillPart(_ range: Range<Int64>) -> @Sendable (PartBuffer) async throws -> Void {
        let streamFetch = self.streamFetch
        let fill = self.fill
        return { [weak self] buf in
            let running = RunningCRC()
            let from = buf.withFilledBytes { bytes in
                running.add(bytes)
                return bytes.count
            }
            let owner = self
            try await streamFetch((range.lowerBound + Int64(from))..<range.upperBound) { chunk in
                let crc = running.add(chunk)
                if buf.filledCount + chunk.count == buf.capacity {
                    try owner?.verify(crc32c: crc, of: range)
                }
                let at = range.lowerBound + Int64(buf.filledCount)
                try buf.append(chunk)
                fill?.write(chunk, at: at)
            }
        }
    }

    // MARK: - checking

    private func verify(crc32c: UInt32, of range: Range<Int64>) throws {
        defer { flushGiveBacks() }
        try lock.withLock {
            if let corrupt { throw corrupt }
            guard let (expected, got) = check?.add(crc32c: crc32c, of: range) else { return }
            try failLocked(expected, got)
        }
    }

    private func failLocked(_ expected: String, _ got: String) throws {
        let e = StorageError.nonMatchingChecksum(path: "\(path) generation \(generation) (the bytes read)",
                                                 expected: expected, got: got)
        corrupt = e
        dropLocked { _ in true }
        throw e
    }

    private func verify(_ data: Data, at off: Int64) throws {
        try lock.withLock {
            if let corrupt { throw corrupt }
            guard let (expected, got) = check?.add(data, at: off) else { return }
            try failLocked(expected, got)
        }
    }
}

/// A CRC-32C taken chunk by chunk inside a `@Sendable` closure.
private final class RunningCRC: @unchecked Sendable {
    private var crc = CRC32C()
    func add(_ data: Data) -> UInt32 {
        crc.update(data)
        return crc.value
    }
    func add(_ bytes: UnsafeRawBufferPointer) {
        crc.update(bytes)
    }
}
