import Foundation
import StorageModel

/// Directories this mount emptied lately (docs/SEMANTICS.md §3.2, "A directory emptied here"):
/// the parent of each name it unlinked or renamed away, for the metadata TTL after. A prefix-only
/// directory stops existing in the bucket when its last object goes; the mount keeps it for that
/// long, as a cached listing keeps any entry, whether or not the kernel still holds it: a lookup
/// finds it (`kept`), empty. Once the TTL has passed it is gone the same way: a lookup answers
/// ENOENT from the bucket, and so does an opendir of it whose listing comes back empty, with no
/// placeholder (`expired`), so a kernel that still holds its entry sees what one that dropped it
/// sees (at opendir: glibc reads a readdir's ENOENT as the directory's end, an empty `ls`).
final class EmptiedDirectories: @unchecked Sendable {
    private let lock = NSLock()
    /// Directory path (no trailing `/`) → until when it is kept (the mount's clock, seconds).
    private var until: [String: Double] = [:]
    private let clock: BucketClock
    private let ttl: Double
    /// False on a bucket with a hierarchical namespace, whose folders stay when emptied.
    private let enabled: Bool

    init(clock: BucketClock, ttl: Double, enabled: Bool = true) {
        self.clock = clock
        self.ttl = ttl
        self.enabled = enabled
    }

    /// `directory` had a name removed through this mount just now (the root is never emptied away).
    func note(_ directory: String) {
        guard enabled, !directory.isEmpty else { return }
        let now = clock.seconds
        lock.withLock {
            if until.count > 10_000 { until = until.filter { now - $0.value < ttl } }
            until[directory] = now + ttl
        }
    }

    /// Whether `directory` is kept now: emptied here within the TTL.
    func kept(_ directory: String) -> Bool {
        let now = clock.seconds
        return lock.withLock { (until[directory] ?? 0) > now }
    }

    /// Whether `directory` was emptied here and its TTL has passed (and nothing showed it since).
    func expired(_ directory: String) -> Bool {
        let now = clock.seconds
        return lock.withLock { until[directory].map { $0 <= now } ?? false }
    }

    /// The bucket shows `directory` again (a listing with entries, a placeholder), or it was
    /// removed or renamed away here: no longer this type's business.
    func forget(_ directory: String) {
        _ = lock.withLock { until.removeValue(forKey: directory) }
    }
}
