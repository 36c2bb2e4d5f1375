import Foundation

/// An open directory: a snapshot of names so offsets stay stable across readdir calls. The
/// snapshot holds its nodes (pinned in the table until `releasedir`) and the metadata they had
/// when it was taken, so it keeps answering while the cache evicts.
final class DirHandle: @unchecked Sendable {
    let ino: UInt64
    /// GUARDED_BY(Superblock.lock)
    var entries: [SnapshotEntry]?
    init(ino: UInt64) { self.ino = ino }
}

struct SnapshotEntry {
    let name: String
    let node: Node
    let box: InfoBox?
}
