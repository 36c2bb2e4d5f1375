import Foundation
import StorageModel

/// The bytes of one part of an object as they arrive: a fetch fills the buffer from its start
/// while readers take the ranges already there (a reader waits only for its own bytes, not for
/// the whole part). The buffer is taken once, at its final size (the part's reservation in the
/// read budget), from the mount's `BufferPool`, and given back when the last reply that points
/// into it is gone. A reader whose Task is cancelled stops waiting at once.
final class PartBuffer: @unchecked Sendable {
    let capacity: Int
    private let pool: BufferPool
    private let memory: BufferPool.Buffer
    private var base: UnsafeMutableRawPointer { memory.base }
    private let lock = NSLock()
    private var filled = 0
    private var failure: (any Error)?
    private var done = false
    private var waiters: [UInt64: (need: Int, continuation: CheckedContinuation<Void, Never>)] = [:]
    private var nextWaiter: UInt64 = 0
    private var task: Task<Void, Never>?
    private var cancelled = false

    /// Starts `fill`, which appends the part's bytes in order; it must append exactly `capacity`.
    init(capacity: Int, pool: BufferPool, fill: @escaping @Sendable (PartBuffer) async throws -> Void) {
        self.capacity = capacity
        self.pool = pool
        memory = pool.take(capacity)
        start(fill)
    }

    private func start(_ fill: @escaping @Sendable (PartBuffer) async throws -> Void) {
        let capacity = self.capacity
        let t = Task { [weak self] in
            guard let self else { return }
            do {
                try await fill(self)
                let got = self.lock.withLock { self.filled }
                if got == capacity {
                    self.finish(nil)
                } else {
                    self.lock.withLock { self.shortEnd = true }
                    self.finish(StorageError.unknown(status: 0, message: "a part ended after \(got) of \(capacity) bytes"))
                }
            } catch {
                self.finish(error)
            }
        }
        let stop = lock.withLock { () -> Bool in
            guard !done else { return false }
            task = t
            return cancelled
        }
        if stop { t.cancel() }
    }

    enum Refill { case started, alreadyFilling, no }

    /// After a fill that ended early, starts `fill` again (when `start` says so) to append the
    /// rest from where the bytes stop; the bytes already in stay, and so do the replies pointing
    /// into them. `.no` when the part was cancelled or is complete, or `start` is false.
    func refill(start: Bool, _ fill: @escaping @Sendable (PartBuffer) async throws -> Void) -> Refill {
        let result: Refill = lock.withLock {
            guard done else { return .alreadyFilling }
            guard start, failure != nil, !cancelled, filled < capacity else { return .no }
            done = false
            failure = nil
            shortEnd = false
            return .started
        }
        if result == .started { self.start(fill) }
        return result
    }

    /// The bytes in so far, in place (they never change once in).
    func withFilledBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let n = filledCount
        return try body(UnsafeRawBufferPointer(start: base, count: n))
    }

    deinit { pool.give(memory) }

    /// Appends the next bytes (called by the fill only).
    func append(_ data: Data) throws {
        let woken: [CheckedContinuation<Void, Never>] = try lock.withLock {
            guard filled + data.count <= capacity else {
                throw StorageError.unknown(status: 0, message: "a part got more than its \(capacity) bytes")
            }
            data.withUnsafeBytes { src in
                if let s = src.baseAddress, src.count > 0 { (base + filled).copyMemory(from: s, byteCount: src.count) }
            }
            filled += data.count
            if waiters.isEmpty { return [] }  // the usual case: a chunk nobody waits for yet
            let ready = waiters.filter { $0.value.need <= filled }
            for k in ready.keys { waiters[k] = nil }
            return ready.values.map(\.continuation)
        }
        for c in woken { c.resume() }
    }

    private func finish(_ error: (any Error)?) {
        let woken: [CheckedContinuation<Void, Never>] = lock.withLock {
            done = true
            failure = error
            task = nil
            defer { waiters = [:] }
            return waiters.values.map(\.continuation)
        }
        for c in woken { c.resume() }
    }

    /// Bytes in so far.
    var filledCount: Int { lock.withLock { filled } }

    /// The fill ended without error but short: a length fault of the answer, worth reading again.
    var endedShort: Bool { lock.withLock { done && failure != nil && shortEnd } }
    private var shortEnd = false

    /// Ended with every byte.
    var isComplete: Bool { lock.withLock { done && failure == nil } }
    /// Ended without every byte.
    var hasFailed: Bool { lock.withLock { done && failure != nil } }

    /// A copy of `range` (within the part), once its bytes are in. Throws the fill's error when
    /// it ended before them, `StorageError.cancelled` when the calling Task is cancelled.
    func bytes(_ range: Range<Int>) async throws -> Data {
        let need = range.upperBound
        while true {
            let state: (ready: Bool, failure: (any Error)?) = lock.withLock {
                if filled >= need { return (true, nil) }
                if done { return (false, failure ?? StorageError.unknown(status: 0, message: "a part ended early")) }
                return (false, nil)
            }
            if state.ready {
                // No copy: the Data points into this buffer and keeps it alive until the reply
                // has gone to the kernel (the bytes below `filled` never change).
                return Data(bytesNoCopy: base + range.lowerBound, count: range.count,
                            deallocator: .custom { [self] _, _ in withExtendedLifetime(self) {} })
            }
            if let f = state.failure { throw f }
            if Task.isCancelled { throw StorageError.cancelled }
            let id: UInt64 = lock.withLock {
                nextWaiter += 1
                return nextWaiter
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    lock.lock()
                    if filled >= need || done || Task.isCancelled {
                        lock.unlock()
                        c.resume()
                    } else {
                        waiters[id] = (need, c)
                        lock.unlock()
                    }
                }
            } onCancel: {
                let c = lock.withLock { waiters.removeValue(forKey: id) }
                c?.continuation.resume()
            }
        }
    }

    /// Stops the fill; readers waiting for bytes not yet in get its error.
    func cancel() {
        let t = lock.withLock {
            cancelled = true
            return task
        }
        t?.cancel()
    }
}
