import Foundation
import StorageModel

/// Where a resumable upload stands, for both APIs' sessions (`GCSStore`'s and `FirebaseStore`'s):
/// the bytes the server holds, the deadline (it restarts whenever the server holds more), the
/// retries since the last progress, and the sessions started over.
package struct ResumableProgress {
    package let policy: RetryPolicy
    /// Until when the upload may go on without progress.
    package private(set) var end: BucketClock.Instant
    /// Bytes the server holds (as far as this side knows).
    package private(set) var offset: Int64 = 0
    private var retries = 0
    /// Faults in a row with no more bytes persisted before the upload fails, however fast each
    /// comes (a link that resets every request after sending some bytes).
    package static let retriesWithoutProgress = 12
    private var restarts = 0

    package init(policy: RetryPolicy) {
        self.policy = policy
        end = policy.clock.now + policy.deadline
    }

    /// The server holds `persisted` bytes: more than before restarts the deadline, the retries
    /// and the operation's deadline (docs/SEMANTICS.md §5.2).
    package mutating func persisted(_ persisted: Int64) {
        if persisted > offset {
            end = policy.clock.now + policy.deadline
            retries = 0
            OperationContext.moved()
        }
        offset = persisted
    }

    /// A request that failed had sent `bytes` of its body: the link moves, so the wait for the
    /// server restarts (the retries do not: only bytes the server holds reset them).
    package mutating func sent(_ bytes: Int64) {
        if bytes > 0 { end = policy.clock.now + policy.deadline }
    }

    /// An answer that moved nothing counts as a retry.
    package mutating func noProgress() { retries += 1 }

    /// The session is gone: the next one starts from byte 0, a bounded number of times (three).
    package mutating func sessionLost(_ name: String) throws {
        restarts += 1
        guard restarts <= 3 else { throw StorageError.retryLimitExceeded(message: "upload of \(name): session lost \(restarts) times") }
        offset = 0
    }

    /// After the transient fault `e`: the policy's pause before the session is asked what it
    /// holds, or `retryLimitExceeded` when that pause would end past the deadline.
    package mutating func pause(after e: StorageError, name: String, size: Int64) throws -> Duration {
        retries += 1
        let pause = policy.delay(beforeRetry: retries, random: Double.random(in: 0...1))
        if policy.clock.now + pause >= end || retries > Self.retriesWithoutProgress {
            throw StorageError.retryLimitExceeded(message: "upload of \(name) stuck at byte \(offset) of \(size): \(e)")
        }
        return pause
    }
}
