import Foundation

/// Where a task is; the observers' `StorageTaskStatus` is a coarser view of it.
enum TaskState {
    case unknown, queueing, running, resuming, progress, pausing, paused, completing, success, cancelled, failing, failed

    var status: StorageTaskStatus {
        switch self {
        case .queueing, .running, .resuming: return .resume
        case .progress: return .progress
        case .paused, .pausing: return .pause
        case .success, .completing: return .success
        case .cancelled, .failed, .failing: return .failure
        case .unknown: return .unknown
        }
    }

    /// Still moving: may be paused or go on.
    var isActive: Bool { [.unknown, .queueing, .resuming, .running, .progress].contains(self) }
    var isFinished: Bool { [.success, .cancelled, .failed].contains(self) }
}

/// The Apple SDK's `StorageTask`: the state of an upload or download, read as a snapshot.
open class StorageTask: NSObject, @unchecked Sendable {
    /// What the task is now: status, progress, metadata, error.
    public var snapshot: StorageTaskSnapshot { stateLock.withLock { snapshotUnderLock() } }

    /// Guards `state`, `progress`, `metadata` and `error` (and the subclasses' own state).
    let stateLock = NSLock()
    var state: TaskState = .unknown
    var metadata: StorageMetadata?
    var error: Error?
    let progress = Progress(totalUnitCount: 0)
    let reference: StorageReference

    init(reference: StorageReference) {
        self.reference = reference
        super.init()
    }

    func snapshotUnderLock() -> StorageTaskSnapshot {
        let p = Progress(totalUnitCount: progress.totalUnitCount)
        p.completedUnitCount = progress.completedUnitCount
        return StorageTaskSnapshot(task: self, state: state, reference: reference, progress: p, metadata: metadata, error: error)
    }
}

/// The Apple SDK's `StorageTaskManagement`: start, pause, cancel, resume. (The SDK's
/// Objective-C optional members are members with defaults that do nothing.)
public protocol StorageTaskManagement: NSObjectProtocol {
    func enqueue()
    func pause()
    func cancel()
    func resume()
}

public extension StorageTaskManagement {
    func pause() {}
    func cancel() {}
    func resume() {}
}
