import Foundation
import FuseKit

/// Objects and listings whose last request just failed after all its retries (EIO), remembered
/// for a few seconds: the kernel and tools repeat a failed read or listing at once, and each
/// repeat would otherwise wait a whole deadline again (SPEC §5: one deadline, not two).
final class RecentFailures: @unchecked Sendable {
    private let lock = NSLock()
    private var failures: [String: (errno: Errno, until: Double)] = [:]
    private let ttl: Double
    private let now: @Sendable () -> Double

    init(ttl: Double, now: @escaping @Sendable () -> Double) {
        self.ttl = ttl
        self.now = now
    }

    /// The error to answer at once for `key`, if it failed within the last `ttl` seconds.
    func check(_ key: String) -> Errno? {
        lock.withLock {
            guard let f = failures[key] else { return nil }
            if f.until > now() { return f.errno }
            failures.removeValue(forKey: key)
            return nil
        }
    }

    /// Remembers a failure; only EIO (the server or the network let us down) is remembered, never
    /// answers such as ENOENT or an interrupted wait.
    func note(_ key: String, _ e: Errno) {
        guard e == .EIO, ttl > 0 else { return }
        lock.withLock {
            if failures.count > 10_000 { failures.removeAll() }
            failures[key] = (e, now() + ttl)
        }
    }

    /// Forgets `key` (it just worked, or this mount changed it).
    func clear(_ key: String) {
        _ = lock.withLock { failures.removeValue(forKey: key) }
    }
}
