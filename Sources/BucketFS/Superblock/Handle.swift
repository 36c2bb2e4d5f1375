import Foundation
import StorageModel

/// An open file handle. Nothing in it changes once it is made.
final class Handle: Sendable {
    let ino: UInt64
    let writable: Bool
    /// Reads of a file not staged here are pinned to this generation.
    let generation: Int64
    let size: Int64
    let path: String
    /// Reads of the generation opened (nil for a file opened for writing or created here).
    let stream: ReadStream?
    /// The kernel may keep its cached pages: the same generation was opened for reading before
    /// (`PageCachePolicy`).
    let keepCache: Bool
    /// The kernel bypasses its page cache for this handle (`PageCachePolicy`).
    let directIO: Bool
    /// The local content this handle keeps (counted in its `openHandles`): the file's stage when
    /// the handle was opened for writing, or for reading while the file had one.
    let stage: StagedFile?

    init(ino: UInt64, writable: Bool, info: ObjectInfo?, path: String, stream: ReadStream?, stage: StagedFile?,
         keepCache: Bool = false, directIO: Bool = false) {
        self.keepCache = keepCache
        self.directIO = directIO
        self.ino = ino
        self.writable = writable
        self.generation = info?.generation ?? 0
        self.size = info?.size ?? 0
        self.path = path
        self.stream = stream
        self.stage = stage
    }
}
