import Foundation
import FuseKit

/// An open directory: a snapshot of names so offsets stay stable across readdir calls. The
/// snapshot holds its nodes (pinned in the table until `releasedir`) and the attributes they had
/// when their metadata came (`ShownAttributes`), so it keeps answering while the cache evicts.
final class DirHandle: @unchecked Sendable {
    let ino: UInt64
    /// GUARDED_BY(Superblock.lock), by construction: reachable only through `Held`.
    fileprivate var state = DirHandleState()
    /// What the kernel was told at opendir it may do with the entries (`Superblock.openDirectory`).
    let caching: DirectoryCaching
    init(ino: UInt64, caching: DirectoryCaching = .none) { self.ino = ino; self.caching = caching }
}

extension Held {
    /// `d`'s snapshot and pass, while the superblock's lock is held.
    subscript(d: DirHandle) -> DirHandleState {
        _read { yield d.state }
        nonmutating _modify { yield &d.state }
    }
}

/// An open directory's snapshot and readdir pass (GUARDED_BY(Superblock.lock)).
struct DirHandleState {
    var entries: [SnapshotEntry]?
    /// The readdir pass under way (docs/SEMANTICS.md §6): from the snapshot taken at offset 0 to
    /// the answer that says the end, a snapshot taken again (rewinddir) or releasedir. Nil when
    /// none is (or the TTL is 0).
    var pass: ReaddirPass?
    /// The snapshot came from a listing of names only (`Listing.namesOnly`).
    var namesOnly = false
}

/// A readdir pass: the listing it holds (`Listing.serial`) and when its listing began, so that
/// at its end the metadata that arrived since lives the TTL from then.
struct ReaddirPass {
    let serial: UInt64
    let start: Double
}

/// One entry of a directory snapshot (and of a listing being applied, `ListingBuild`): the node,
/// pinned, and what its attributes were when its metadata came, kept apart from the metadata
/// cache, whose bound may evict the node's own before readdir reaches it. 48 bytes: no name (the
/// node's path has it) and no metadata object.
struct SnapshotEntry {
    let node: Node
    /// nil: none known then (a file listed by name only, a directory's placeholder not read).
    var shown: ShownAttributes?
}

/// The attributes `StatMapper` derived from an object's metadata (the number and the link count
/// aside), in 37 bytes: what a readdirplus entry needs once the metadata itself is gone.
struct ShownAttributes {
    let size: UInt64
    let mtime: Double
    let ctime: Double
    let permissions: UInt32
    let uid: UInt32
    let gid: UInt32
    let type: FileType

    init(_ a: FileAttributes) {
        size = a.size
        mtime = a.mtime
        ctime = a.ctime
        permissions = a.permissions
        uid = a.uid
        gid = a.gid
        type = a.type
    }

    func attributes(ino: UInt64) -> FileAttributes {
        FileAttributes(ino: ino, type: type, size: size, permissions: permissions, nlink: 1,
                       uid: uid, gid: gid, atime: mtime, mtime: mtime, ctime: ctime)
    }
}
