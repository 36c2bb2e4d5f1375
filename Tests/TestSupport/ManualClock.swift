import Foundation
import StorageModel

/// A clock for retry pauses that the test advances: every pause waits until `advance(by:)` moves
/// the clock past its end (no real time passes), or until its task is cancelled (it then throws,
/// as `Task.sleep` does). Inject `sleeper` where a `RetrySleeper` goes.
public final class ManualClock: @unchecked Sendable {
    private struct Waiter {
        let id: Int
        let until: Duration
        let continuation: CheckedContinuation<Void, any Error>
    }
    private let lock = NSLock()
    private var now: Duration = .zero
    private var nextID = 0
    private var waiters: [Waiter] = []
    private var started: [Duration] = []

    public init() {}

    public var sleeper: RetrySleeper { RetrySleeper { [self] pause in try await sleep(for: pause) } }

    /// Pauses waiting now.
    public var sleeping: Int { lock.withLock { waiters.count } }
    /// Every pause begun so far, in order.
    public var pauses: [Duration] { lock.withLock { started } }

    /// Moves the clock on; the pauses that end by then return.
    public func advance(by d: Duration) {
        let due: [Waiter] = lock.withLock {
            now += d
            let due = waiters.filter { $0.until <= now }
            waiters.removeAll { $0.until <= now }
            return due
        }
        for w in due { w.continuation.resume() }
    }

    func sleep(for pause: Duration) async throws {
        let id: Int = lock.withLock { nextID += 1; return nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let cancelled: Bool = lock.withLock {
                    started.append(pause)
                    if Task.isCancelled { return true }
                    waiters.append(Waiter(id: id, until: now + pause, continuation: c))
                    return false
                }
                if cancelled { c.resume(throwing: CancellationError()) }
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
