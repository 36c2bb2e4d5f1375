import Foundation
import StorageModel

/// Work that must answer within a time, whatever it waits for: `run` returns the work's result,
/// or throws `late()` once `limit` has passed. The work runs in a task of its own, cancelled when
/// it is late, but not waited for — work it shares with others (a token refresh other callers
/// wait for) goes on. (A task group cannot do this: it waits for every child, even cancelled ones,
/// and a child waiting for a shared refresh does not end when cancelled.)
public enum Bounded {
    /// `clock`: the one `limit` is kept on.
    public static func run<T: Sendable>(_ limit: Duration, clock: BucketClock, late: @escaping @Sendable () -> StorageError,
                                        _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        let once = ResumeOnce<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
                once.set(c)
                let task = Task {
                    do { once.resume(.success(try await work())) } catch { once.resume(.failure(error)) }
                }
                once.onLate = { task.cancel() }
                Task {
                    try? await clock.sleep(for: limit)
                    once.resume(.failure(late()))
                }
            }
        } onCancel: {
            once.resume(.failure(StorageError.cancelled))
        }
    }
}

/// A continuation resumed exactly once, by whichever comes first.
private final class ResumeOnce<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var early: Result<T, any Error>?
    private var done = false
    private var _onLate: (@Sendable () -> Void)?

    var onLate: (@Sendable () -> Void)? {
        get { lock.withLock { _onLate } }
        set {
            let runNow = lock.withLock { () -> Bool in
                _onLate = newValue
                return done
            }
            if runNow { newValue?() }
        }
    }

    func set(_ c: CheckedContinuation<T, any Error>) {
        let pending: Result<T, any Error>? = lock.withLock {
            if let early { return early }
            continuation = c
            return nil
        }
        if let pending { c.resume(with: pending) }
    }

    func resume(_ r: Result<T, any Error>) {
        let (c, cancel): (CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?) = lock.withLock {
            guard !done else { return (nil, nil) }
            done = true
            if let continuation {
                self.continuation = nil
                return (continuation, _onLate)
            }
            early = r
            return (nil, _onLate)
        }
        c?.resume(with: r)
        if case .failure = r { cancel?() }
    }
}
