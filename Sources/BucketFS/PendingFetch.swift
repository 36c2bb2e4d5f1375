import Foundation
import StorageModel

/// The bytes of one background fetch, awaited by any number of readers. A reader whose Task is
/// cancelled (an interrupted FUSE request) stops waiting at once; the fetch itself runs until it
/// ends or `cancel()` stops it.
final class PendingFetch: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<Data, any Error>?
    private var waiters: [UInt64: CheckedContinuation<Result<Data, any Error>, Never>] = [:]
    private var nextWaiter: UInt64 = 0
    private var task: Task<Void, Never>?

    init(_ work: @escaping @Sendable () async throws -> Data) {
        let t = Task { [weak self] in
            let r: Result<Data, any Error>
            do { r = .success(try await work()) } catch { r = .failure(error) }
            self?.finish(r)
        }
        lock.withLock { task = t }
    }

    /// Already fetched bytes (a whole small object handed over from a walk-ahead).
    init(done data: Data) {
        result = .success(data)
    }

    private func finish(_ r: Result<Data, any Error>) {
        let ws: [CheckedContinuation<Result<Data, any Error>, Never>] = lock.withLock {
            guard result == nil else { return [] }
            result = r
            task = nil
            defer { waiters = [:] }
            return Array(waiters.values)
        }
        for w in ws { w.resume(returning: r) }
    }

    /// The fetched bytes, if the fetch has ended well.
    var ready: Data? { lock.withLock { try? result?.get() } }
    var isFinished: Bool { lock.withLock { result != nil } }

    func value() async throws -> Data {
        if let r = lock.withLock({ result }) { return try r.get() }
        let id: UInt64 = lock.withLock {
            nextWaiter += 1
            return nextWaiter
        }
        let r = await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Result<Data, any Error>, Never>) in
                lock.lock()
                if let r = result {
                    lock.unlock()
                    c.resume(returning: r)
                } else if Task.isCancelled {
                    lock.unlock()
                    c.resume(returning: .failure(StorageError.cancelled))
                } else {
                    waiters[id] = c
                    lock.unlock()
                }
            }
        } onCancel: {
            let c = lock.withLock { waiters.removeValue(forKey: id) }
            c?.resume(returning: .failure(StorageError.cancelled))
        }
        return try r.get()
    }

    /// Stops the fetch (its waiters get its error); bytes already fetched stay.
    func cancel() {
        let t = lock.withLock { task }
        t?.cancel()
    }
}
