import Foundation

/// The Apple SDK's `StorageTaskSnapshot`: a task as it was at one moment.
open class StorageTaskSnapshot: NSObject, @unchecked Sendable {
    public let task: StorageTask
    /// The object's metadata: what was sent while uploading, the server's once done.
    public let metadata: StorageMetadata?
    public let reference: StorageReference
    /// Bytes done of the total.
    public let progress: Progress?
    public let error: Error?
    public let status: StorageTaskStatus
    let state: TaskState

    init(task: StorageTask, state: TaskState, reference: StorageReference, progress: Progress,
         metadata: StorageMetadata? = nil, error: Error? = nil) {
        self.task = task
        self.state = state
        self.reference = reference
        self.progress = progress
        self.metadata = metadata
        self.error = error
        status = state.status
        super.init()
    }

    override open var description: String {
        switch status {
        case .resume: return "<State: Resume>"
        case .progress: return "<State: Progress, Progress: \(String(describing: progress))>"
        case .pause: return "<State: Paused>"
        case .success: return "<State: Success>"
        case .failure: return "<State: Failed, Error: \(String(describing: error))"
        case .unknown: return "<State: Unknown>"
        }
    }
}
