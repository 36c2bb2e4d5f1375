/// A FIFO mutual-exclusion lock for async code (never blocks a thread). A Task cancelled while
/// it waits stops waiting at once (so an interrupted FUSE request never waits behind a stalled one).
actor AsyncLock {
    private var locked = false
    private var waiters: [(id: UInt64, continuation: CheckedContinuation<Bool, Never>)] = []
    private var nextID: UInt64 = 0

    /// Takes the lock; false when the Task was cancelled before it got it (then it is not held).
    func lock() async -> Bool {
        if !locked {
            locked = true
            return true
        }
        nextID += 1
        let id = nextID
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                if Task.isCancelled { c.resume(returning: false) } else { waiters.append((id, c)) }
            }
        } onCancel: {
            Task { await self.stopWaiting(id) }
        }
    }

    private func stopWaiting(_ id: UInt64) {
        if let i = waiters.firstIndex(where: { $0.id == id }) { waiters.remove(at: i).continuation.resume(returning: false) }
    }

    /// Hands the lock to the next waiter, or frees it.
    func unlock() {
        if waiters.isEmpty { locked = false } else { waiters.removeFirst().continuation.resume(returning: true) }
    }

    func withLock<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        guard await lock() else { throw CancellationError() }
        do {
            let r = try await body()
            unlock()
            return r
        } catch {
            unlock()
            throw error
        }
    }
}
