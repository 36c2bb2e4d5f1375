import Foundation
import FuseKit
import StorageModel

/// One inode. `ino` and `type` never change; every other field lives in its `NodeState`, which
/// only the superblock's lock hands out (`held[node]`, Superblock.swift): code that does not
/// hold the lock cannot name them (docs/ARCHITECTURE.md, "The superblock's lock").
final class Node: @unchecked Sendable {
    /// GUARDED_BY(Superblock.lock), by construction: reachable only through `Held`.
    fileprivate var state: NodeState
    /// (After `state`, whose last bytes leave room for it: a node is 104 bytes, a 112-byte block
    /// of the allocator's; docs/BENCHMARKS.md.)
    let type: FileType
    let ino: UInt64

    init(ino: UInt64, path: String, type: FileType, lookups: UInt64 = 0) {
        self.ino = ino
        self.state = NodeState(path: path)
        self.state.lookups = lookups
        self.type = type
    }
}

extension Held {
    /// `n`'s fields, while the superblock's lock is held.
    subscript(n: Node) -> NodeState {
        _read { yield n.state }
        nonmutating _modify { yield &n.state }
    }
}

/// A node's fields that change (GUARDED_BY(Superblock.lock)): changed only by the superblock's
/// methods (Superblock/), through `Held`.
struct NodeState {
    /// Object path without a trailing slash; "" for the root.
    var path: String
    /// For a file: the object. For a directory: its `dir/` placeholder, nil when prefix-only (or
    /// not cached: evicted, `infoExpiry` 0). Boxed, so a node without it costs one pointer and a
    /// readdir snapshot can share it. Set only through `setInfo` / `evict`, which
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
    /// The cache ticket of `box` (0: none): a ticket in the eviction queue that is not the
    /// node's current one is stale and skipped.
    var infoTicket: UInt64 = 0
    /// What most nodes never have (a listing, a file opened or written here), kept apart so
    /// that each of the many listed files is 80 bytes smaller (docs/BENCHMARKS.md).
    private var more: NodeMore?
    /// Open directory handles whose snapshot holds this node, and listings being applied that
    /// made it (`ListingBuild`): it stays in the table meanwhile.
    var snapshotPins: UInt32 = 0
    /// A cached listing of its directory names it (`MetadataCache`): its info, when cached, is
    /// counted once against the bound, with the name.
    var listed = false
    /// Whether the object is there, found missing, or removed through this mount.
    var presence = Presence.present

    init(path: String) { self.path = path }

    /// The object is gone: found missing, or removed through this mount.
    var removed: Bool { presence != .present }

    /// Directory listing cache (directories only). Set only through `setListing` /
    /// `dropListing`, and its names changed through the cache's `addChild` / `removeChild`.
    var listing: Listing? {
        get { more?.listing }
        _modify {
            if more == nil { more = NodeMore() }
            yield &more!.listing
        }
    }
    /// The cache ticket of `listing` (0: none).
    var listingTicket: UInt64 {
        get { more?.listingTicket ?? 0 }
        _modify {
            if more == nil { more = NodeMore() }
            yield &more!.listingTicket
        }
    }
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

    var name: String { StoragePath.lastSegment(path) }
    /// The list prefix for a directory's children.
    var childPrefix: String { path.isEmpty ? "" : path + "/" }
    /// The object that holds a node of `type`: a directory's placeholder `path/`; the root's is
    /// "" (a prefix store's `PREFIX/`; a whole bucket's root has none, `MountConfig.rootIsPrefix`).
    func objectName(_ type: FileType) -> String { type == .directory ? (path.isEmpty ? "" : path + "/") : path }
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
