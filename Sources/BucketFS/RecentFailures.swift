import Foundation
import FuseKit
import StorageModel

/// Objects and listings whose last request just failed after all its retries (EIO), remembered
/// for a few seconds: the kernel and tools repeat a failed read or listing at once, and each
/// repeat would otherwise wait a whole deadline again (docs/SEMANTICS.md §5: one deadline, not two).
final class RecentFailures: @unchecked Sendable {
    /// What failed.
    enum Key: Hashable {
        /// The listing of the directory with this child prefix ("" for the root).
        case listing(prefix: String)
        /// The metadata of this object (a stat, or a lookup of this path).
        case metadata(path: String)
        /// The bytes of this generation of an object.
        case bytes(path: String, generation: Int64)
    }

    private let lock = NSLock()
    private var failures: [Key: (errno: Errno, until: Double)] = [:]
    private let ttl: Double
    /// The mount's one clock: its calendar seconds.
    private let clock: BucketClock

    init(ttl: Double, clock: BucketClock) {
        self.ttl = ttl
        self.clock = clock
    }

    private func now() -> Double { clock.seconds }

    /// The error to answer at once for `key`, if it failed within the last `ttl` seconds.
    func check(_ key: Key) -> Errno? {
        lock.withLock {
            guard let f = failures[key] else { return nil }
            if f.until > now() { return f.errno }
            failures.removeValue(forKey: key)
            return nil
        }
    }

    /// Remembers a failure: EIO (the server or the network let us down) for every key, and for
    /// bytes also the server's refusals that a repeat would meet again at once, EINVAL (400) and
    /// EACCES (401, 403): the kernel splits a failed read-ahead window into page reads, each of
    /// which would otherwise ask again (docs/SEMANTICS.md §5.2). Never answers such as ENOENT or
    /// an interrupted wait.
    func note(_ key: Key, _ e: Errno) {
        guard ttl > 0 else { return }
        if case .bytes = key {
            guard e == .EIO || e == .EINVAL || e == .EACCES else { return }
        } else {
            guard e == .EIO else { return }
        }
        lock.withLock {
            if failures.count > 10_000 { failures.removeAll() }
            failures[key] = (e, now() + ttl)
        }
    }

    /// Forgets `key` (it just worked, or this mount changed it).
    func clear(_ key: Key) {
        _ = lock.withLock { failures.removeValue(forKey: key) }
    }
}
