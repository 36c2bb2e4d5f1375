import Foundation
import FuseKit
import StorageModel

/// One inode. Guarded by the superblock's lock (every field but `ino` and `type`), and changed
/// only by the superblock (Superblock.swift).
final class Node: @unchecked Sendable {
    let ino: UInt64
    /// Object path without a trailing slash; "" for the root.
    var path: String
    let type: FileType
    /// For a file: the object. For a directory: its `dir/` placeholder, nil when prefix-only (or
    /// not cached: evicted, `infoExpiry` 0). Boxed, so a node without it costs one pointer and a
    /// readdir snapshot can share it. Set only through `setInfoLocked` / `evictInfoLocked`, which
    /// keep the bounded metadata cache's count (MetadataCache.swift).
    var box: InfoBox?
    var info: ObjectInfo? { box?.info }
    /// When `info` (or the absence of a placeholder) must be read again.
    var infoExpiry: Double = 0
    /// The superblock's change count when `box` (or the node's presence) last changed: a read
    /// of the bucket that began before it (a listing, a GET) knows less than the node does, and
    /// does not overwrite it (`Superblock.readBegins`).
    var infoSeq: UInt64 = 0
    /// Kernel lookup count (lookup, create, mkdir and readdirplus entries raise it; forget lowers).
    /// While it is above 0 the node stays in the table, so its number stays bound to its path.
    var lookups: UInt64 = 0
    /// Local content of a file opened for writing or created here (nil otherwise).
    var staged: StagedFile?
    /// Directory listing cache (directories only). Set only through `setListingLocked` /
    /// `dropListingLocked`, and its names changed through `addChildLocked` / `removeChildLocked`.
    var listing: Listing?
    /// The cache tickets of `box` and `listing` (0: none): a ticket in the eviction queue that is
    /// not the node's current one is stale and skipped.
    var infoTicket: UInt64 = 0
    var listingTicket: UInt64 = 0
    /// Open directory handles whose snapshot holds this node: it stays in the table meanwhile.
    var snapshotPins: UInt32 = 0
    /// Whether the object is there, found missing, or removed through this mount.
    var presence = Presence.present
    /// The object is gone: found missing, or removed through this mount.
    var removed: Bool {
        get { presence != .present }
        // `false` brings a node back (seen in a listing again, created again); `true` is an unlink.
        set { presence = newValue ? .unlinked : .present }
    }
    /// The generation the kernel's page cache holds for this file: the one last opened for
    /// reading here (nil after an open for writing).
    var cachedGeneration: Int64?

    init(ino: UInt64, path: String, type: FileType) {
        self.ino = ino
        self.path = path
        self.type = type
    }

    var name: String { StoragePath.lastSegment(path) }
    /// The object name of a directory's placeholder, or of a file.
    var objectName: String { type == .directory ? path + "/" : path }
    /// The list prefix for a directory's children.
    var childPrefix: String { path.isEmpty ? "" : path + "/" }
}

/// Whether a node's object exists, as far as this mount knows.
enum Presence: Equatable {
    /// Listed, looked up or made here.
    case present
    /// A stat or a listing found it missing (changed behind the mount's back). The node keeps its
    /// path and its place in the path index: should the object come back, it gets its number back.
    case gone
    /// Removed through this mount (unlink, rmdir, renamed over or away): the node left the path
    /// index, and lives on only while the kernel or an operation under way holds it.
    case unlinked
}

/// The children of a directory as of one listing (plus changes made through this mount).
struct Listing {
    /// name → child inode.
    var children: [String: UInt64]
    var expiry: Double
    /// Files hidden by a directory of the same name (the directory wins): shown once it goes.
    var hiddenFiles: [String: ObjectInfo] = [:]
    /// The files' names in the order listed (the bucket's UTF-8 byte order), as of the listing:
    /// the order a tree walk reads them in, for the walk-ahead (a hint; `children` is the truth).
    var fileOrder: [String] = []
    /// The listed files by inode number (the order `borg` reads a directory in), made from
    /// `fileOrder` when a walk first asks for it.
    var inodeOrder: [(ino: UInt64, name: String)]?

    /// Names in UTF-8 byte order (the bucket's order), for stable readdir offsets.
    var sortedNames: [String] { children.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
}

/// Where a staged file's content stands against the bucket (SPEC §3). Every transition is made
/// in Uploads.swift (and `markDirty` in Staging.swift), under the superblock's lock
/// (`withStage`); the stage file may be discarded only in `.clean`, `.givenUp` and `.deleted`,
/// and never while an attempt is under way.
enum UploadState: Equatable {
    /// The same bytes as the bucket's generation the file is based on: nothing to upload.
    case clean
    /// Differs from the bucket; no attempt under way or scheduled.
    case dirty
    /// An attempt is under way (holding `uploadLock`); `rewritten`: written again since it
    /// started, so still dirty after it succeeds.
    case uploading(rewritten: Bool)
    /// An attempt failed; background attempt `attempt` (of `uploadRetries`) comes after a pause.
    case waitingToRetry(attempt: Int)
    /// Could not be uploaded (a lost race, a refusal, or every attempt failed): the data is in
    /// lost+found, and every later flush, fsync and close of this content reports `error`, because
    /// the kernel also flushes when a forked child closes its inherited descriptor and that first
    /// answer reaches nobody.
    case givenUp(Errno)
    /// The user deleted (or renamed another file over) the file: its content goes nowhere.
    case deleted

    /// Content the bucket does not have yet, and that is not safe in lost+found.
    var unsaved: Bool {
        switch self {
        case .dirty, .uploading, .waitingToRetry: return true
        case .clean, .givenUp, .deleted: return false
        }
    }
}

/// What a staged file was made from.
enum StageOrigin: Equatable {
    /// Created here: not in the bucket until its first upload (`ifGenerationMatch=0`).
    case createdHere
    /// A copy of (or a truncation of) this generation; uploads replace exactly it.
    case generation(Int64)

    /// The upload precondition: 0 means "must not exist".
    var ifGenerationMatch: Int64 {
        switch self {
        case .createdHere: return 0
        case .generation(let g): return g
        }
    }
}

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

/// An open file handle.
final class Handle: @unchecked Sendable {
    let ino: UInt64
    let writable: Bool
    /// Reads of a file not staged here are pinned to this generation.
    let generation: Int64
    let size: Int64
    let path: String
    /// Reads of the generation opened (nil for a file opened for writing or created here).
    let stream: ReadStream?
    /// The kernel may keep its cached pages: the same generation was opened for reading before.
    var keepCache = false
    /// The kernel bypasses its page cache for this handle (`Superblock.openFile`).
    var directIO = false
    /// The local content this handle keeps (counted in its `openHandles`): the file's stage when
    /// the handle was opened for writing, or for reading while the file had one.
    let stage: StagedFile?

    init(ino: UInt64, writable: Bool, info: ObjectInfo?, path: String, stream: ReadStream?, stage: StagedFile?) {
        self.ino = ino
        self.writable = writable
        self.generation = info?.generation ?? 0
        self.size = info?.size ?? 0
        self.path = path
        self.stream = stream
        self.stage = stage
    }
}

/// An open directory: a snapshot of names so offsets stay stable across readdir calls. The
/// snapshot holds its nodes (pinned in the table until `releasedir`) and the metadata they had
/// when it was taken, so it keeps answering while the cache evicts.
final class DirHandle: @unchecked Sendable {
    let ino: UInt64
    var entries: [SnapshotEntry]?
    init(ino: UInt64) { self.ino = ino }
}

struct SnapshotEntry {
    let name: String
    let node: Node
    let box: InfoBox?
}

/// One cached object version (immutable), shared by its node and the readdir snapshots that
/// showed it.
final class InfoBox: Sendable {
    let info: ObjectInfo
    init(_ info: ObjectInfo) { self.info = info }
}
