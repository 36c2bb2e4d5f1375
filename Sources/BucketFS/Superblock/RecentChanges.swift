import Foundation
import StorageModel

/// The paths whose state changed here lately, each with the superblock's change count when it
/// did (docs/SEMANTICS.md §6): a listing that began before a change read a bucket that did not
/// show it yet, and is corrected by it (`Superblock.applyListing`). A file whose upload ended
/// while the listing was read is neither in its pages nor waiting any more; a file unlinked or
/// renamed away meanwhile is still in them. A part of the metadata cache, guarded by the
/// superblock's lock.
///
/// INVARIANT: at most `limit` changes are kept, the newest; `since(_:)` answers nil for a mark
/// older than the oldest kept, so no change is ever missed silently.
struct RecentChanges {
    enum Kind: Equatable {
        /// The node at the path changed (made, uploaded, its metadata read or set).
        case changed
        /// The path left through this mount (unlinked, removed, renamed away, found missing).
        case left
    }

    private var ring: [(seq: UInt64, path: String, kind: Kind)?]
    private var last: UInt64 = 0
    let limit: Int

    init(limit: Int = 16_384) {
        self.limit = max(1, limit)
        ring = Array(repeating: nil, count: self.limit)
    }

    /// Records change number `seq` (counted by the caller, one higher than the last) at `path`.
    mutating func note(_ seq: UInt64, _ path: String, _ kind: Kind) {
        ring[Int(seq % UInt64(limit))] = (seq, path, kind)
        last = seq
    }

    /// The last kind of change after `mark` of each path directly in the directory `dirPath`
    /// ("" for the root); nil when changes after `mark` were forgotten already.
    func since(_ mark: UInt64, in dirPath: String) -> [String: Kind]? {
        guard mark < last else { return [:] }
        if last - mark > UInt64(limit) { return nil }
        var out: [String: Kind] = [:]
        for seq in (mark + 1)...last {
            guard let e = ring[Int(seq % UInt64(limit))], e.seq == seq else { continue }
            guard (StoragePath.parent(e.path) ?? "") == dirPath, !e.path.isEmpty else { continue }
            out[e.path] = e.kind
        }
        return out
    }
}
