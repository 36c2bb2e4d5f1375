import Foundation
import StorageModel

/// Google's retry strategy for Cloud Storage: jittered exponential backoff on 408, 429, 5xx,
/// resets and timeouts, for idempotent calls only, within a deadline per call.
public struct RetryPolicy: Sendable, Equatable {
    /// Overall time one store call may take, retries included.
    public var deadline: Duration
    /// Time one HTTP exchange may take.
    public var requestTimeout: Duration
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    public var multiplier: Double
    /// At most this many attempts of one call (nil: as many as its deadline allows). A call that
    /// runs out of them ends with its last attempt's error, still transient: a caller with a
    /// deadline of its own (a store request waiting for a Firebase Auth token) may try again.
    public var maxAttempts: Int?
    /// Waits out each pause (`delay(beforeRetry:random:)`): real time, unless a test injects its own
    /// clock. Not part of equality: two policies with the same timings are the same policy.
    public var clock: BucketClock

    public init(deadline: Duration = .seconds(60), requestTimeout: Duration = .seconds(30),
                initialBackoff: Duration = .milliseconds(100), maxBackoff: Duration = .seconds(5), multiplier: Double = 2,
                maxAttempts: Int? = nil, clock: BucketClock = .real) {
        self.deadline = deadline
        self.requestTimeout = requestTimeout
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.multiplier = multiplier
        self.maxAttempts = maxAttempts
        self.clock = clock
    }

    public static func == (a: RetryPolicy, b: RetryPolicy) -> Bool {
        a.deadline == b.deadline && a.requestTimeout == b.requestTimeout && a.initialBackoff == b.initialBackoff
            && a.maxBackoff == b.maxBackoff && a.multiplier == b.multiplier && a.maxAttempts == b.maxAttempts
    }

    /// Waits `pause` on `clock`; a cancelled wait is `StorageError.cancelled`.
    public func pause(_ pause: Duration) async throws {
        do { try await clock.sleep(for: pause) } catch { throw StorageError.cancelled }
    }

    /// The pause before retry number `retry` (1-based): `initial × multiplier^(retry-1)`, capped at
    /// `maxBackoff`, then scaled by a jitter factor in 0.5…1 (`random` is in 0…1).
    public func delay(beforeRetry retry: Int, random: Double) -> Duration {
        let initial = Self.seconds(initialBackoff)
        let base = min(Self.seconds(maxBackoff), initial * pow(multiplier, Double(max(retry - 1, 0))))
        let jittered = base * (0.5 + 0.5 * min(max(random, 0), 1))
        return .nanoseconds(Int64(jittered * 1e9))
    }

    /// Statuses worth retrying for an idempotent call.
    public static func isRetryable(status: Int) -> Bool {
        status == 408 || status == 429 || (500...599).contains(status)
    }

    /// Whether a write is safe to repeat: guarded by a generation or metageneration precondition.
    public static func isGuarded(_ p: Preconditions) -> Bool {
        p.ifGenerationMatch != nil || p.ifMetagenerationMatch != nil
    }

    static func seconds(_ d: Duration) -> Double {
        let c = d.components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}
