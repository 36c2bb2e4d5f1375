import Foundation
import StorageModel

/// What the store's access rules said about creating files in a directory (docs/SEMANTICS.md §3,
/// "Refused creates"), learnt by the first create there (`ObjectStore.probeCreate`) and reused
/// for `ttl` seconds, so that a create the rules refuse fails at open(2) with EACCES at the cost
/// of one request per directory and content type, not one per file.
///
/// Keyed by the directory's path and the content type the new file gets from its name: rules
/// often look at `request.resource.contentType` (`image/.*`), so `a.txt` refused does not refuse
/// `b.jpg`. A store with no rules to ask (gs://, the embedded bucket) answers nil and nothing is
/// kept. Leaf lock: nothing is taken under it.
final class CreateAnswers: @unchecked Sendable {
    struct Key: Hashable {
        /// The directory's path ("" for the root).
        var directory: String
        var contentType: String
    }

    /// At most this many answers; when full, every one is dropped (each costs one request to learn again).
    static let capacity = 4096

    private let lock = NSLock()
    private var answers: [Key: (answer: CreateAnswer, until: Double)] = [:]  // GUARDED_BY(lock)
    let ttl: Double
    /// The mount's one clock: its calendar seconds.
    private let clock: BucketClock

    init(ttl: Double, clock: BucketClock) {
        self.ttl = ttl
        self.clock = clock
    }

    private func now() -> Double { clock.seconds }

    /// The answer kept for `key`, if it was learnt within the last `ttl` seconds.
    func answer(_ key: Key) -> CreateAnswer? {
        lock.withLock {
            guard let a = answers[key] else { return nil }
            if a.until > now() { return a.answer }
            answers.removeValue(forKey: key)
            return nil
        }
    }

    func note(_ key: Key, _ answer: CreateAnswer) {
        guard ttl > 0 else { return }
        lock.withLock {
            if answers.count >= Self.capacity { answers.removeAll(keepingCapacity: true) }
            answers[key] = (answer, now() + ttl)
        }
    }

    /// Answers kept now (for tests and invariants).
    var count: Int { lock.withLock { answers.count } }
}
