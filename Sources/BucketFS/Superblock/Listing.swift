import Foundation
import StorageModel

/// The children of a directory as of one listing (plus changes made through this mount). A value
/// held by its directory's `Node`, so GUARDED_BY(Superblock.lock) with it.
struct Listing {
    /// name → child inode.
    var children: [String: UInt64]
    var expiry: Double
    /// Files hidden by a directory of the same name (the directory wins): shown once it goes.
    /// (nil: listed by name only, its metadata not read).
    var hiddenFiles: [String: ObjectInfo?] = [:]
    /// The files' names in the order listed (the bucket's UTF-8 byte order), as of the listing:
    /// the order a tree walk reads them in, for the walk-ahead (a hint; `children` is the truth).
    var fileOrder: [String] = []
    /// The listed files by inode number (the order `borg` reads a directory in), made from
    /// `fileOrder` when a walk first asks for it.
    var inodeOrder: [(ino: UInt64, name: String)]?

    /// How many of the next files listed by name only a stat of one such file reads the metadata
    /// of along with its own (`Superblock.statAhead`): 0 at first, then 15, 75 and
    /// `Listing.maxStatAhead` with each stat that had to read, so that `ls -l` reads many at once
    /// (the store's connections stay busy: bench-firebase.sh) and a lone stat reads one.
    var statAhead = 0
    static let maxStatAhead = 127

    /// `name`'s index in `fileOrder` (binary search: the bucket's UTF-8 byte order).
    func fileIndex(_ name: String) -> Int? {
        var lo = 0, hi = fileOrder.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if fileOrder[mid].utf8.lexicographicallyPrecedes(name.utf8) { lo = mid + 1 } else { hi = mid }
        }
        return lo < fileOrder.count && fileOrder[lo] == name ? lo : nil
    }

    /// Names in UTF-8 byte order (the bucket's order), for stable readdir offsets.
    var sortedNames: [String] { children.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
}
