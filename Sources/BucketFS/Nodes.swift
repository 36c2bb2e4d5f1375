import Foundation
import FuseKit
import StorageModel

/// One inode. Guarded by `BucketFileSystem.lock` (every field).
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

    /// Names in UTF-8 byte order (the bucket's order), for stable readdir offsets.
    var sortedNames: [String] { children.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
}

/// A file's local content while it is open for writing (or created and not yet uploaded).
final class StagedFile: @unchecked Sendable {
    let fd: Int32
    let path: String
    /// ifGenerationMatch for the next upload: the generation read, 0 for a new object.
    var baseGeneration: Int64
    var dirty: Bool
    var size: Int64
    /// Writable metadata the upload carries (xattrs and mtime set before close go here).
    var metadata: WritableMetadata
    var openHandles = 0
    /// Set once this content could not be uploaded and went to lost+found (a lost race, a
    /// refusal, or the last background attempt): every later flush, fsync and close of it reports
    /// this, because the kernel also flushes when a forked child closes its inherited copy of the
    /// descriptor and that first answer reaches nobody.
    var failed: Errno?
    /// A sidecar names this stage's object (written before it first became dirty).
    var recorded = false
    /// Background upload attempts are under way (after a failed flush/fsync/close).
    var retrying = false
    var retryTask: Task<Void, Never>?
    /// Serialises uploads of this file.
    let uploadLock = AsyncLock()

    init(fd: Int32, path: String, baseGeneration: Int64, dirty: Bool, size: Int64, metadata: WritableMetadata) {
        self.fd = fd
        self.path = path
        self.baseGeneration = baseGeneration
        self.dirty = dirty
        self.size = size
        self.metadata = metadata
    }

    func close() {
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

    init(ino: UInt64, writable: Bool, info: ObjectInfo?, path: String, stream: ReadStream?) {
        self.ino = ino
        self.writable = writable
        self.generation = info?.generation ?? 0
        self.size = info?.size ?? 0
        self.path = path
        self.stream = stream
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
