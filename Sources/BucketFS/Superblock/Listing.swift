import Foundation
import StorageModel

/// The children of a directory as of one listing (plus changes made through this mount). A value
/// held by its directory's `Node`, so GUARDED_BY(Superblock.lock) with it.
struct Listing {
    /// name → child inode.
    var children: [String: UInt64]
    var expiry: Double
    /// Files hidden by a directory of the same name (the directory wins): shown once it goes.
    var hiddenFiles: [String: ObjectInfo] = [:]
    /// The files' names in the order listed (the bucket's UTF-8 byte order), as of the listing:
    /// the order a tree walk reads them in, for the walk-ahead (a hint; `children` is the truth).
    var fileOrder: [String] = []
    /// The listed files by inode number (the order `borg` reads a directory in), made from
    /// `fileOrder` when a walk first asks for it.
    var inodeOrder: [(ino: UInt64, name: String)]?

    /// Names in UTF-8 byte order (the bucket's order), for stable readdir offsets.
    var sortedNames: [String] { children.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
}
