import Foundation
import StorageModel

/// A file's local content while it is open for writing (or created and not yet uploaded).
final class StagedFile: @unchecked Sendable {
    let fd: Int32
    let path: String
    var origin: StageOrigin
    var state: UploadState
    var size: Int64
    /// Writable metadata the upload carries (xattrs and mtime set before close go here).
    var metadata: WritableMetadata
    var openHandles = 0
    /// Operations between handing this content out and giving it to a handle (an open for
    /// writing) or back (a truncate): it stays meanwhile (`Superblock.installStage`).
    var pins = 0
    /// A sidecar names this stage's object (written before it first became dirty).
    var recorded = false
    /// The background attempts after a failed upload (until they end). Cancelling it stops the
    /// pauses between attempts, never an attempt under way.
    var retryTask: Task<Void, Never>?
    /// Serialises uploads of this file, and what must not overlap one (unlink, giving up,
    /// the last attempt at unmount).
    let uploadLock = AsyncLock()

    init(fd: Int32, path: String, origin: StageOrigin, state: UploadState, size: Int64, metadata: WritableMetadata) {
        self.fd = fd
        self.path = path
        self.origin = origin
        self.state = state
        self.size = size
        self.metadata = metadata
    }

    var createdHere: Bool { origin == .createdHere }

    private let closeLock = NSLock()
    private var closed = false

    /// A stage nobody refers to any more (its filesystem was dropped without a shutdown) gives
    /// back its descriptor; the file stays, for the next mount's recovery if it held unsaved data.
    deinit {
        if closeLock.withLock({ !closed }) { Glibc.close(fd) }
    }

    /// Closes and deletes the stage file, once (a second call does nothing: the descriptor
    /// number may belong to another file by then).
    func close() {
        let first = closeLock.withLock { () -> Bool in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        Glibc.close(fd)
        unlink(path)
    }
}
