import Foundation
import FuseKit
import StorageModel

/// One inode. Every field but `ino` and `type` is GUARDED_BY(Superblock.lock) and changed only
/// by the superblock's methods (Superblock/).
final class Node: @unchecked Sendable {
    let ino: UInt64
    /// Object path without a trailing slash; "" for the root.
    var path: String
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
    var listing: Listing? {
        get { more?.listing }
        _modify {
            if more == nil { more = NodeMore() }
            yield &more!.listing
        }
    }
    /// The cache tickets of `box` and `listing` (0: none): a ticket in the eviction queue that is
    /// not the node's current one is stale and skipped.
    var infoTicket: UInt64 = 0
    var listingTicket: UInt64 {
        get { more?.listingTicket ?? 0 }
        _modify {
            if more == nil { more = NodeMore() }
            yield &more!.listingTicket
        }
    }
    /// Open directory handles whose snapshot holds this node, and listings being applied that
    /// made it (`ListingBuild`): it stays in the table meanwhile.
    var snapshotPins: UInt32 = 0
    /// A cached listing of its directory names it (`MetadataCache`): its info, when cached, is
    /// counted once against the bound, with the name. In the padding after `type`: the node stays
    /// 104 bytes.
    var listed = false
    /// Whether the object is there, found missing, or removed through this mount.
    var presence = Presence.present
    /// (Next to `snapshotPins` and `presence`, so that the three share one word: a node is 104
    /// bytes, a 112-byte block of the allocator's.)
    let type: FileType
    /// The object is gone: found missing, or removed through this mount.
    var removed: Bool { presence != .present }
    /// The generation the kernel's page cache holds for this file: the one last opened for
    /// reading here (nil after an open for writing).
    var cachedGeneration: Int64? {
        get { more?.cachedGeneration }
        _modify {
            if more == nil { more = NodeMore() }
            yield &more!.cachedGeneration
        }
    }
    /// The content type this mount inferred from the file's name at its last upload, as long as
    /// nothing explicit (an xattr, a type from elsewhere) replaced it: a rename infers it again
    /// from the new name (docs/SEMANTICS.md §4.1). Nil: the type was given, or is not known here.
    var inferredType: String? {
        get { more?.inferredType }
        _modify {
            if more == nil { more = NodeMore() }
            yield &more!.inferredType
        }
    }
    /// What most nodes never have (a listing, a file opened or written here), kept apart so
    /// that each of the many listed files is 80 bytes smaller (docs/BENCHMARKS.md).
    private var more: NodeMore?

    init(ino: UInt64, path: String, type: FileType) {
        self.ino = ino
        self.path = path
        self.type = type
    }

    var name: String { StoragePath.lastSegment(path) }
    /// The object name of a directory's placeholder, or of a file.
    /// The object that holds this node: a directory's placeholder `path/`; the root's is "" (a
    /// prefix store's `PREFIX/`; a whole bucket's root has none, `MountConfig.rootIsPrefix`).
    var objectName: String { type == .directory ? (path.isEmpty ? "" : path + "/") : path }
    /// The list prefix for a directory's children.
    var childPrefix: String { path.isEmpty ? "" : path + "/" }
}

/// The fields of a `Node` that only directories with a listing and files opened or written here
/// have; GUARDED_BY(Superblock.lock) with the node.
private final class NodeMore {
    var listing: Listing?
    var listingTicket: UInt64 = 0
    var cachedGeneration: Int64?
    var inferredType: String?
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
