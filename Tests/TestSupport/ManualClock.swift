import Foundation
import StorageModel

/// A `BucketClock` that the test advances: it starts at the real time of its making and moves only
/// with `advance(by:)`. Every wait on it ends when the clock has been moved past its end (no real
/// time passes), or when its task is cancelled (it then throws, as `Task.sleep` does). Inject
/// `clock` wherever a `BucketClock` goes.
public final class ManualClock: @unchecked Sendable {
    private struct Waiter {
        let id: Int
        let until: Duration
        let continuation: CheckedContinuation<Void, any Error>
    }
    private let lock = NSLock()
    private let startInstant = ContinuousClock.now
    private let startDate: Date
    private var offset: Duration = .zero
    private var nextID = 0
    private var waiters: [Waiter] = []
    private var started: [Duration] = []

    /// `date`: the calendar date the clock starts at (now by default).
    public init(date: Date = Date()) { startDate = date }

    /// The clock to inject.
    public var clock: BucketClock {
        BucketClock(now: { [self] in startInstant + lock.withLock { offset } },
                    date: { [self] in startDate.addingTimeInterval(lock.withLock { offset }.seconds) },
                    sleepUntil: { [self] end in try await sleep(until: end - startInstant) })
    }

    /// How far the clock has been moved.
    public var elapsed: Duration { lock.withLock { offset } }
    /// Now, in seconds since 1970.
    public var seconds: Double { startDate.timeIntervalSince1970 + elapsed.seconds }
    /// Waits on the clock now.
    public var sleeping: Int { lock.withLock { waiters.count } }
    /// The length of every wait begun so far, in order.
    public var pauses: [Duration] { lock.withLock { started } }

    /// Moves the clock on; the waits that end by then return.
    public func advance(by d: Duration) {
        let due: [Waiter] = lock.withLock {
            offset += d
            let due = waiters.filter { $0.until <= offset }
            waiters.removeAll { $0.until <= offset }
            return due
        }
        for w in due { w.continuation.resume() }
    }

    /// Returns once at least `count` waits are pending on the clock (a test's way of knowing that
    /// the code under test has reached its pause before advancing), or throws after `ceiling` of
    /// real time, a bound generous enough for a loaded machine: it is how long a test waits for
    /// work to arrive, not a claim about the product.
    public func waitForSleepers(_ count: Int = 1, ceiling: Duration = .seconds(60)) async throws {
        let end = ContinuousClock.now + ceiling
        while sleeping < count {
            if ContinuousClock.now > end { throw ManualClockError.noSleeper(expected: count, found: sleeping) }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    private func sleep(until end: Duration) async throws {
        let id: Int = lock.withLock { nextID += 1; return nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                enum Outcome { case cancelled, due, wait }
                let outcome: Outcome = lock.withLock {
                    started.append(max(.zero, end - offset))
                    if Task.isCancelled { return .cancelled }
                    if end <= offset { return .due }
                    waiters.append(Waiter(id: id, until: end, continuation: c))
                    return .wait
                }
                switch outcome {
                case .cancelled: c.resume(throwing: CancellationError())
                case .due: c.resume()
                case .wait: break
                }
            }
        } onCancel: {
            let w: Waiter? = lock.withLock {
                guard let i = waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return waiters.remove(at: i)
            }
            w?.continuation.resume(throwing: CancellationError())
        }
    }
}

public enum ManualClockError: Error, CustomStringConvertible {
    case noSleeper(expected: Int, found: Int)
    public var description: String {
        switch self {
        case let .noSleeper(expected, found): return "expected \(expected) waits on the manual clock, found \(found)"
        }
    }
}

extension Duration {
    /// The duration in seconds, as a Double.
    public var seconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) / 1e18
    }
}
