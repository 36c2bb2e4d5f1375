import Foundation

/// The Apple SDK's `StorageObservableTask`: a task whose changes of status are observed. Each
/// observer runs on the Storage's `callbackQueue` for every event of its status, and at once
/// when the task is already there; the handle it returns removes it.
open class StorageObservableTask: StorageTask, @unchecked Sendable {
    /// Guarded by `stateLock`.
    private var handlers: [StorageTaskStatus: [String: (StorageTaskSnapshot) -> Void]] = [:]
    private var statusOfHandle: [String: StorageTaskStatus] = [:]

    @discardableResult
    open func observe(_ status: StorageTaskStatus, handler: @escaping (StorageTaskSnapshot) -> Void) -> String {
        guard status != .unknown else {
            fatalError("Invalid observer status requested, use one of: Pause, Resume, Progress, Complete, or Failure")
        }
        let handle = UUID().uuidString
        let snapshot = stateLock.withLock { () -> StorageTaskSnapshot in
            handlers[status, default: [:]][handle] = handler
            statusOfHandle[handle] = status
            return snapshotUnderLock()
        }
        let now: Bool
        switch status {
        case .pause: now = [.pausing, .paused].contains(snapshot.state)
        case .resume: now = [.resuming, .running].contains(snapshot.state)
        case .progress: now = [.running, .progress].contains(snapshot.state)
        case .success: now = snapshot.state == .success
        case .failure: now = [.failed, .failing, .cancelled].contains(snapshot.state)
        case .unknown: now = false
        }
        if now {
            let h = UncheckedValue(handler)
            reference.storage.callbackQueue.async { h.value(snapshot) }
        }
        return handle
    }

    open func removeObserver(withHandle handle: String) {
        stateLock.withLock {
            if let status = statusOfHandle.removeValue(forKey: handle) { handlers[status]?[handle] = nil }
        }
    }

    open func removeAllObservers(for status: StorageTaskStatus) {
        stateLock.withLock {
            for handle in (handlers[status] ?? [:]).keys { statusOfHandle[handle] = nil }
            handlers[status] = [:]
        }
    }

    open func removeAllObservers() {
        stateLock.withLock {
            handlers = [:]
            statusOfHandle = [:]
        }
    }

    /// Calls `status`'s observers with `snapshot` on the callback queue.
    func fire(_ status: StorageTaskStatus, _ snapshot: StorageTaskSnapshot) {
        let called = stateLock.withLock { Array((handlers[status] ?? [:]).values) }
        let queue = reference.storage.callbackQueue
        for h in called {
            let box = UncheckedValue(h)
            queue.async { box.value(snapshot) }
        }
    }

    /// Moves to `state` under the lock, if `allowed` holds for the state it is in, and returns the
    /// snapshot to fire (nil when it was not allowed).
    func move(to state: TaskState, if allowed: (TaskState) -> Bool,
              _ change: () -> Void = {}) -> StorageTaskSnapshot? {
        stateLock.withLock {
            guard allowed(self.state) else { return nil }
            self.state = state
            change()
            return snapshotUnderLock()
        }
    }

    /// Guarded by `stateLock`: the run driving the task and its number. A resume starts a new run
    /// once the one before has ended; an older run stops at its next check (`run != mine`).
    var runner: Task<Void, Never>?
    var run = 0

    /// A new run of `drive` (given its number), after `previous` has ended.
    func startRun(after previous: Task<Void, Never>?, _ drive: @escaping (Int) async -> Void) {
        let box = UncheckedValue(drive)
        stateLock.withLock {
            run += 1
            let mine = run
            runner = Task {
                await previous?.value
                await box.value(mine)
            }
        }
    }

    /// Fires the final status, then forgets every observer (as the SDK does).
    func finish(_ status: StorageTaskStatus, _ snapshot: StorageTaskSnapshot) {
        fire(status, snapshot)
        removeAllObservers()
    }
}
