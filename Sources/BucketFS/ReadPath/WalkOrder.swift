import Foundation
import StorageModel

/// The orders a tree walk may read a directory's files in (`WalkAhead.Order`): the listing's
/// (the bucket's UTF-8 byte order, what `tar` and `rsync` follow) or inode-number order (what
/// `borg` sorts a directory by), computed from a directory's cached listing. The superblock calls
/// these under its lock, with the directory node whose listing they read.
enum WalkOrder {
    /// Where `n` stands in its directory `d`'s walk orders; nil when `d` has no listing or the
    /// listing does not name `n`.
    static func position(of n: Node, in d: Node) -> WalkAhead.Position? {
        guard d.listing != nil, let listed = listedIndex(d, n.name) else { return nil }
        guard let inode = inodeIndex(inodeOrder(d), n.ino) else { return nil }
        return WalkAhead.Position(directory: StoragePath.parent(n.path) ?? "", listing: listed, inode: inode)
    }

    /// The next small files after `n` in `d`'s `order`: regular, listed, not written here, of 1
    /// byte to `maxSize` (at most `limit` of them), each with its index in that order. `child`
    /// gives a listed name's live node.
    static func window(after n: Node, in d: Node, order: WalkAhead.Order, limit: Int, maxSize: Int64,
                       child: (Listing, String) -> Node?) -> [WalkAhead.Candidate] {
        guard limit > 0, let l = d.listing else { return [] }
        let names: ArraySlice<String>
        let start: Int
        switch order {
        case .listing:
            guard let i = listedIndex(d, n.name) else { return [] }
            start = i + 1
            names = l.fileOrder[start...]
        case .inode:
            let byIno = inodeOrder(d)
            guard let i = inodeIndex(byIno, n.ino) else { return [] }
            start = i + 1
            names = byIno[start...].prefix(limit * 4).map(\.name)[...]
        }
        var window: [WalkAhead.Candidate] = []
        for (k, next) in names.prefix(limit * 4).enumerated() {
            guard let c = child(l, next), c.type == .regular, c.staged == nil, let info = c.info,
                  info.size > 0, info.size <= maxSize else { continue }
            window.append(WalkAhead.Candidate(path: c.path, info: info, position: start + k))
            if window.count == limit { break }
        }
        return window
    }

    /// `name`'s index in `d`'s listing's file order (binary search: a listing's files come in the
    /// bucket's UTF-8 byte order).
    private static func listedIndex(_ d: Node, _ name: String) -> Int? {
        guard let order = d.listing?.fileOrder else { return nil }
        var lo = 0, hi = order.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if order[mid].utf8.lexicographicallyPrecedes(name.utf8) { lo = mid + 1 } else { hi = mid }
        }
        return lo < order.count && order[lo] == name ? lo : nil
    }

    /// `d`'s listed files by inode number, made once per listing (when a walk first asks) and
    /// kept in the listing.
    private static func inodeOrder(_ d: Node) -> [(ino: UInt64, name: String)] {
        guard let l = d.listing else { return [] }
        if let made = l.inodeOrder { return made }
        let made = l.fileOrder.compactMap { name in l.children[name].map { (ino: $0, name: name) } }.sorted { $0.ino < $1.ino }
        d.listing?.inodeOrder = made
        return made
    }

    private static func inodeIndex(_ byIno: [(ino: UInt64, name: String)], _ ino: UInt64) -> Int? {
        var lo = 0, hi = byIno.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if byIno[mid].ino < ino { lo = mid + 1 } else { hi = mid }
        }
        return lo < byIno.count && byIno[lo].ino == ino ? lo : nil
    }
}
