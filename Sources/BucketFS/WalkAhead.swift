import Foundation
import StorageModel

/// Small files fetched ahead of a tree walk. tar, rsync, restic and `cp -r` read a directory's
/// files whole, one after another, in the order the directory lists them: once a file has been
/// read whole, the next few small files of its directory in listing order are downloaded before
/// they are opened — each a whole object, pinned to the generation listed, its memory reserved in
/// the mount's `ReadBudget`. An open of the same generation takes the bytes over (one request per
/// file, overlapped); any other generation drops them. Files not opened within `ttl`, or passed
/// over by the walk, are dropped.
final class WalkAhead: @unchecked Sendable {
    struct Candidate {
        let path: String
        let info: ObjectInfo
    }

    private struct Entry {
        let generation: Int64
        let reserved: Int
        let bytes: PartBuffer
        let started: Double
        let directory: String
    }

    private let budget: ReadBudget
    private let pool: BufferPool
    private let ttl: Double
    private let now: @Sendable () -> Double
    private let lock = NSLock()
    private var entries: [String: Entry] = [:]
    /// A sweep is scheduled (one at a time, while anything waits).
    private var sweeping = false

    init(budget: ReadBudget, pool: BufferPool, ttl: Double, now: @escaping @Sendable () -> Double) {
        self.budget = budget
        self.pool = pool
        self.ttl = ttl
        self.now = now
    }

    /// Paths fetched ahead and not yet opened (tests, statistics).
    var pending: [String] { lock.withLock { Array(entries.keys) } }

    /// Starts fetching the candidates not fetched yet (in order, while the budget takes them),
    /// and drops what was fetched in `directory` for names no longer in the window.
    func prefetch(_ window: [Candidate], in directory: String,
                  fetch: @escaping @Sendable (Candidate) async throws -> Data) {
        sweep()
        let keep = Set(window.map(\.path))
        let dropped: [Entry] = lock.withLock {
            let gone = entries.filter { $0.value.directory == directory && !keep.contains($0.key) }
            for k in gone.keys { entries[k] = nil }
            return Array(gone.values)
        }
        dropped.forEach(drop)
        for c in window {
            let size = Int(c.info.size)
            let started: Bool = lock.withLock {
                guard entries[c.path] == nil else { return false }
                guard budget.reserve(size, for: self) else { return false }
                entries[c.path] = Entry(generation: c.info.generation, reserved: size,
                                        bytes: PartBuffer(capacity: size, pool: pool) { buf in try buf.append(try await fetch(c)) }, started: now(), directory: directory)
                return true
            }
            if !started, lock.withLock({ entries[c.path] == nil }) { break }  // the budget is full
        }
        scheduleSweep()
    }

    /// Sweeps once `ttl` has passed, again while anything is left.
    private func scheduleSweep() {
        let start = lock.withLock { () -> Bool in
            guard !sweeping, !entries.isEmpty else { return false }
            sweeping = true
            return true
        }
        guard start else { return }
        Task.detached { [weak self, ttl] in
            try? await Task.sleep(for: .milliseconds(Int64(ttl * 1000) + 100))
            guard let self else { return }
            self.sweep()
            self.lock.withLock { self.sweeping = false }
            self.scheduleSweep()
        }
    }

    /// The bytes fetched ahead for this generation of `path` (in flight or done) and the budget
    /// reserved for them, now owned by the caller; nil when there are none. Bytes of another
    /// generation, or a fetch that failed, are dropped.
    func take(_ path: String, generation: Int64) -> (bytes: PartBuffer, reserved: Int)? {
        guard let e = lock.withLock({ entries.removeValue(forKey: path) }) else { return nil }
        if e.generation == generation, !e.bytes.hasFailed {
            return (e.bytes, e.reserved)
        }
        drop(e)
        return nil
    }

    /// INVARIANT: the budget holds at least what the files fetched ahead reserved (a file just
    /// taken or dropped has left `entries` and gives its reservation back a moment later).
    func invariantViolations() -> [String] {
        lock.withLock {
            let reserved = entries.values.reduce(0) { $0 + $1.reserved }
            let held = budget.reserved(by: self)
            return held >= reserved ? [] : ["the walk-ahead's files reserved \(reserved) bytes, the budget holds \(held) for them"]
        }
    }

    /// Drops what waited longer than `ttl` to be opened.
    func sweep() {
        let t = now()
        let old: [Entry] = lock.withLock {
            let old = entries.filter { t - $0.value.started > ttl }
            for k in old.keys { entries[k] = nil }
            return Array(old.values)
        }
        old.forEach(drop)
    }

    /// Drops everything (unmount).
    func dropAll() {
        let all: [Entry] = lock.withLock {
            defer { entries = [:] }
            return Array(entries.values)
        }
        all.forEach(drop)
    }

    private func drop(_ e: Entry) {
        e.bytes.cancel()
        budget.release(e.reserved, for: self)
    }
}
