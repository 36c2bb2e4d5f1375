import Foundation

/// The one clock of bucketfs (docs/ARCHITECTURE.md, "One clock"): what time it is, on the
/// monotonic scale that deadlines, token lifetimes and pauses are kept in, and as a calendar date;
/// and how to wait. Real time unless a test injects a clock that it advances itself
/// (`ManualClock` in Tests/TestSupport), so a retry's pause, a token's refresh time or a queue's
/// delay is tested without waiting for it. A cancelled wait throws, as `Task.sleep` does.
///
/// Request deadlines on the wire (a connection's idle timeout, an operation's deadline while its
/// bytes move) stay on real time: they bound what a real socket does.
public struct BucketClock: Sendable {
    public typealias Instant = ContinuousClock.Instant

    private let nowBody: @Sendable () -> Instant
    private let dateBody: @Sendable () -> Date
    private let sleepBody: @Sendable (Instant) async throws -> Void

    public init(now: @escaping @Sendable () -> Instant, date: @escaping @Sendable () -> Date,
                sleepUntil: @escaping @Sendable (Instant) async throws -> Void) {
        nowBody = now
        dateBody = date
        sleepBody = sleepUntil
    }

    /// Real time.
    public static let real = BucketClock(now: { ContinuousClock.now }, date: { Date() },
                                         sleepUntil: { try await Task.sleep(until: $0, clock: .continuous) })

    /// Now, on the monotonic scale.
    public var now: Instant { nowBody() }
    /// Now, as a calendar date (a token's `expires_at`, an object's time).
    public var date: Date { dateBody() }
    /// Now, in seconds since 1970.
    public var seconds: Double { date.timeIntervalSince1970 }

    /// Waits `pause` (a negative or zero pause returns at once, unless cancelled).
    public func sleep(for pause: Duration) async throws { try await sleepBody(now + pause) }

    /// Waits until `instant`.
    public func sleep(until instant: Instant) async throws { try await sleepBody(instant) }

    /// When a calendar date falls on the monotonic scale (a token that expires at `date`).
    public func instant(at date: Date) -> Instant {
        now + .milliseconds(Int64((date.timeIntervalSince(self.date) * 1000).rounded()))
    }
}
