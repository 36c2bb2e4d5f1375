import Foundation
import StorageModel

/// Memory for read buffers, kept for reuse. A fresh buffer of a few MiB is a new mapping, and its
/// first touch costs a page fault per 4 KiB page: more CPU than copying the bytes into it (a
/// visible share of a sequential read's CPU, in Scripts/bench-reads.sh's CPU row).
/// A buffer used before costs none.
///
/// Buffers of `minPooled` bytes and more are handed out in power-of-two sizes, so that parts of
/// any length reuse each other's memory (pages past the bytes asked for are never touched, so
/// never resident). At most `limit` bytes wait for reuse, and no more than `room()` says (the
/// read budget not in use: buffers in use and buffers waiting stay within the budget together)
/// plus `slack`: a reader that keeps the budget full reserves its next part before the part it
/// finished is given back (a reply may still point into it), so without the slack every part of
/// a long read was fresh memory (docs/OPERATING.md "Read buffers"). What waited `idle` seconds
/// is freed. Smaller buffers come straight from malloc.
final class BufferPool: @unchecked Sendable {
    static let minPooled = 256 << 10

    struct Buffer: @unchecked Sendable {
        let base: UnsafeMutableRawPointer
        /// Bytes usable (at least those asked for).
        let capacity: Int
    }

    let limit: Int
    /// Bytes that may wait beyond the budget's room.
    let slack: Int
    private let room: @Sendable () -> Int
    private let idle: Duration
    /// The mount's one clock: when a buffer was given back, and the sweep's wait.
    private let clock: BucketClock
    private let lock = NSLock()
    /// Free buffers by size, most recently given back last.
    private var free: [Int: [(base: UnsafeMutableRawPointer, since: BucketClock.Instant)]] = [:]
    private var held = 0
    private var sweeping = false

    init(limit: Int, slack: Int = 0, idle: Duration = .seconds(10), clock: BucketClock = .real,
         room: @escaping @Sendable () -> Int = { .max }) {
        self.limit = max(0, limit)
        self.slack = max(0, slack)
        self.idle = idle
        self.clock = clock
        self.room = room
    }

    deinit {
        for list in free.values { for b in list { b.base.deallocate() } }
    }

    /// Bytes waiting for reuse (tests, statistics).
    var heldBytes: Int { lock.withLock { held } }
    /// Buffers of a pooled size that had to be fresh memory (tests, statistics).
    var freshTakes: Int { lock.withLock { fresh } }
    private var fresh = 0

    /// A buffer of at least `count` bytes; its contents are undefined.
    func take(_ count: Int) -> Buffer {
        let size = Self.sizeClass(count)
        if size >= Self.minPooled, let b = lock.withLock({ () -> UnsafeMutableRawPointer? in
            guard let b = free[size]?.popLast()?.base else { return nil }
            held -= size
            return b
        }) {
            return Buffer(base: b, capacity: size)
        }
        if size >= Self.minPooled { lock.withLock { fresh += 1 } }
        return Buffer(base: Self.allocate(size), capacity: size)
    }

    static let hugePage = 2 << 20

    /// Fresh memory; from 2 MiB up in transparent huge pages where the kernel offers them on
    /// request (a fault per 2 MiB instead of per 4 KiB on first touch).
    private static func allocate(_ size: Int) -> UnsafeMutableRawPointer {
        guard size >= hugePage else { return .allocate(byteCount: max(1, size), alignment: 16) }
        let p = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: hugePage)
        _ = madvise(p, size, MADV_HUGEPAGE)
        return p
    }

    /// Gives a buffer from `take` back; nothing may use it after.
    func give(_ b: Buffer) {
        let bound = min(limit, max(0, room()) + slack)
        let kept: Bool = lock.withLock {
            guard b.capacity >= Self.minPooled, held + b.capacity <= bound else { return false }
            free[b.capacity, default: []].append((b.base, clock.now))
            held += b.capacity
            return true
        }
        if kept { scheduleSweep() } else { b.base.deallocate() }
    }

    /// INVARIANT: the bytes counted as waiting are the buffers waiting, within the limit.
    func invariantViolations() -> [String] {
        lock.withLock {
            let sum = free.reduce(0) { $0 + $1.key * $1.value.count }
            var bad: [String] = []
            if held != sum { bad.append("the buffer pool counts \(held) bytes waiting, it holds \(sum)") }
            if held > limit { bad.append("the buffer pool holds \(held) bytes, its limit is \(limit)") }
            return bad
        }
    }

    /// Frees the buffers that waited longer than `idle` by `now` (the clock's now by default).
    func sweep(now: BucketClock.Instant? = nil) {
        let now = now ?? clock.now
        let old: [UnsafeMutableRawPointer] = lock.withLock {
            var old: [UnsafeMutableRawPointer] = []
            for (size, list) in free {
                let keep = list.filter { now - $0.since < idle }
                for b in list where now - b.since >= idle { old.append(b.base) }
                held -= (list.count - keep.count) * size
                free[size] = keep.isEmpty ? nil : keep
            }
            return old
        }
        old.forEach { $0.deallocate() }
    }

    private func scheduleSweep() {
        let start: Bool = lock.withLock {
            guard !sweeping else { return false }
            sweeping = true
            return true
        }
        guard start else { return }
        Task.detached { [weak self, idle, clock] in
            try? await clock.sleep(for: idle + .milliseconds(100))
            guard let self else { return }
            self.sweep()
            let again: Bool = self.lock.withLock {
                self.sweeping = false
                return self.held > 0
            }
            if again { self.scheduleSweep() }
        }
    }

    /// The size handed out for `count` bytes: the next power of two from `minPooled` up.
    static func sizeClass(_ count: Int) -> Int {
        guard count > minPooled / 2 else { return count }
        var size = minPooled
        while size < count { size <<= 1 }
        return size
    }
}
