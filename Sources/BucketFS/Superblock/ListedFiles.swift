import Foundation
import StorageModel

/// What the superblock hands the read path's walk of one file's directory (`WalkOrder`), taken
/// under its lock in one call: the file, and its directory's listing as of then. A value: the
/// arrays and the dictionary are the listing's own, shared until either side changes them, so
/// taking it copies nothing.
struct ListedFiles: Sendable {
    /// The directory's path ("" for the root).
    let directory: String
    /// Which listing of the directory this is (`Listing.serial`): what the walk derives from it
    /// (its files by inode number) stays good while the serial does.
    let serial: UInt64
    /// The file, by name and inode number.
    let name: String
    let ino: UInt64
    /// The listing's files in the bucket's order (`Listing.fileOrder`).
    let files: [String]
    /// name → inode number of everything the listing names (`Listing.children`).
    let children: [String: UInt64]
}

/// One small file a walk may fetch ahead (`Superblock.smallFiles`): its index among the names
/// asked about, its path and the metadata cached for it.
typealias SmallFile = (index: Int, path: String, info: ObjectInfo)
