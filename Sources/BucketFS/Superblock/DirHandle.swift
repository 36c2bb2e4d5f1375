import Foundation

/// An open directory: a snapshot of names so offsets stay stable across readdir calls. The
/// snapshot holds its nodes (pinned in the table until `releasedir`) and the metadata they had
/// when it was taken, so it keeps answering while the cache evicts.
final class DirHandle: @unchecked Sendable {
    let ino: UInt64
    /// GUARDED_BY(Superblock.lock)
    var entries: [SnapshotEntry]?
    /// The readdir pass under way (docs/SEMANTICS.md §6): from the snapshot taken at offset 0 to
    /// the answer that says the end, a snapshot taken again (rewinddir) or releasedir. Nil when
    /// none is (or the TTL is 0). GUARDED_BY(Superblock.lock)
    var pass: ReaddirPass?
    /// The snapshot came from a listing of names only (`Listing.namesOnly`). GUARDED_BY(Superblock.lock)
    var namesOnly = false
    init(ino: UInt64) { self.ino = ino }
}

/// A readdir pass: the listing it holds (`Listing.serial`) and when its listing began, so that
/// at its end the metadata that arrived since lives the TTL from then.
struct ReaddirPass {
    let serial: UInt64
    let start: Double
}

struct SnapshotEntry {
    let name: String
    let node: Node
    let box: InfoBox?
}
