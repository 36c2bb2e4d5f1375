import Foundation
import StorageModel

/// The orders a tree walk may read a directory's files in (`WalkAhead.Order`), owned by the read
/// path: the listing's (the bucket's UTF-8 byte order, what `tar` and `rsync` follow) or
/// inode-number order (what `borg` sorts a directory by). It works from what the superblock
/// hands it of a directory (`ListedFiles`, taken under the superblock's lock) and never reaches
/// back: a file's place in both orders, and the names that follow it in one. The files by
/// inode number are made once per listing (when a walk first asks, outside every lock) and kept
/// here, for the listings of the directories walked lately.
final class WalkOrder: @unchecked Sendable {
    typealias ByInode = [(ino: UInt64, name: String)]

    /// The most names kept in inode order, over all directories (the oldest go first): no more
    /// than the metadata cache holds (`--max-cached-entries`).
    private let capacity: Int
    private let lock = NSLock()
    /// directory → the listing the order was made from, the order, when it was last used.
    private var byInode: [String: (serial: UInt64, order: ByInode, used: UInt64)] = [:]
    private var kept = 0
    private var uses: UInt64 = 0

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Where `listed.name` stands in its directory's orders; nil when the listing does not name
    /// it (or names another inode by that name).
    func position(in listed: ListedFiles) -> WalkAhead.Position? {
        guard let listing = Self.index(of: listed.name, in: listed.files),
              let inode = Self.index(of: listed.ino, in: inodeOrder(listed)) else { return nil }
        return WalkAhead.Position(directory: listed.directory, listing: listing, inode: inode)
    }

    /// The names after the file at `position` in `order` that a window of `limit` files looks
    /// through (four times as many: some are not small files), and the index of the first.
    func names(after position: WalkAhead.Position, in listed: ListedFiles, order: WalkAhead.Order,
               limit: Int) -> (start: Int, names: ArraySlice<String>) {
        let start = position[order] + 1
        switch order {
        case .listing:
            return (start, listed.files[min(start, listed.files.count)...].prefix(limit * 4))
        case .inode:
            let byIno = inodeOrder(listed)
            return (start, byIno[min(start, byIno.count)...].prefix(limit * 4).map(\.name)[...])
        }
    }

    /// `listed`'s files by inode number: the one made for its listing, or made now.
    private func inodeOrder(_ listed: ListedFiles) -> ByInode {
        let hit: ByInode? = lock.withLock {
            guard let e = byInode[listed.directory], e.serial == listed.serial else { return nil }
            uses += 1
            byInode[listed.directory]?.used = uses
            return e.order
        }
        if let hit { return hit }
        let made = listed.files.compactMap { name in listed.children[name].map { (ino: $0, name: name) } }.sorted { $0.ino < $1.ino }
        lock.withLock {
            kept -= byInode[listed.directory]?.order.count ?? 0
            uses += 1
            byInode[listed.directory] = (listed.serial, made, uses)
            kept += made.count
            while kept > capacity, byInode.count > 1,
                  let oldest = byInode.filter({ $0.key != listed.directory }).min(by: { $0.value.used < $1.value.used }) {
                kept -= oldest.value.order.count
                byInode[oldest.key] = nil
            }
        }
        return made
    }

    /// `name`'s index in `files` (binary search: a listing's files come in the bucket's UTF-8
    /// byte order).
    private static func index(of name: String, in files: [String]) -> Int? {
        var lo = 0, hi = files.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if NameOrder.precedes(files[mid], name) { lo = mid + 1 } else { hi = mid }
        }
        return lo < files.count && files[lo] == name ? lo : nil
    }

    private static func index(of ino: UInt64, in byIno: ByInode) -> Int? {
        var lo = 0, hi = byIno.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if byIno[mid].ino < ino { lo = mid + 1 } else { hi = mid }
        }
        return lo < byIno.count && byIno[lo].ino == ino ? lo : nil
    }
}
