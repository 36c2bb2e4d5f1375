import Foundation
import StorageModel

/// The children of a directory as of one listing (plus changes made through this mount). A value
/// held by its directory's `Node`, so GUARDED_BY(Superblock.lock) with it.
struct Listing {
    /// name → child inode.
    var children: [String: UInt64]
    /// When it must be listed again, unless a readdir pass holds it (`passes`).
    var expiry: Double
    /// Which listing this is (`Held.setListing` numbers each one it caches): a readdir
    /// pass names the listing it holds by it.
    var serial: UInt64 = 0
    /// The open readdir passes that took their snapshot from this listing and have not read it to
    /// the end (`DirHandle.pass`): while one is under way the listing does not expire, so `ls -l`
    /// of a directory that takes longer than the TTL lists it once (docs/SEMANTICS.md §6).
    var passes = 0
    /// While `passes` > 0: when the earliest of them began. Metadata of its files that arrived
    /// since then does not expire before the passes end (`Held.endPass`).
    var heldSince = 0.0
    /// Its pages carried names only (firebase://): the files' metadata was not read with it, and
    /// listing the directory again does not refresh it.
    var namesOnly = false
    /// Files hidden by a directory of the same name (the directory wins): shown once it goes.
    /// (nil: listed by name only, its metadata not read).
    var hiddenFiles: [String: ObjectInfo?] = [:]
    /// The files' names in the order listed (the bucket's UTF-8 byte order), as of the listing:
    /// the order a tree walk reads them in, for the read path's walk (`ListedFiles`; a hint,
    /// `children` is the truth).
    var fileOrder: [String] = []
    /// The fingerprint (`Superblock.fingerprint`) of the entries a handle the kernel caches from
    /// was given from this listing: the kernel may keep its copy while the listing still answers
    /// the same (docs/SEMANTICS.md §6). Nil: none given.
    var kernelCopy: Int?

    /// How many of the next files listed by name only a stat of one such file reads the metadata
    /// of along with its own (`Superblock.statAhead`): 0 at first, then 15, 75 and
    /// `Listing.maxStatAhead` with each stat that had to read, so that `ls -l` reads many at once
    /// (the store's connections stay busy: bench-firebase.sh) and a lone stat reads one.
    var statAhead = 0
    static let maxStatAhead = 127

    /// How many of the subdirectories listed after one that a readdir must list are listed with
    /// it (`Superblock.listingsAhead`): 0 at the first, then `Listing.maxListAhead`, so that a
    /// walk down a tree lists 16 directories at once and a lone `ls` of a subdirectory lists one.
    var listAhead = 0
    static let maxListAhead = 15
    /// Past this many names, no listing is made ahead of a walk into its subdirectories (finding
    /// the next ones scans the whole listing).
    static let maxNamesToListAhead = 10_000

    /// Whether it answers without listing again at `now`: within its TTL, or held by a pass.
    func isFresh(at now: Double) -> Bool { passes > 0 || expiry > now }

    /// `name`'s index in `fileOrder` (binary search: the bucket's UTF-8 byte order).
    func fileIndex(_ name: String) -> Int? {
        var lo = 0, hi = fileOrder.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if NameOrder.precedes(fileOrder[mid], name) { lo = mid + 1 } else { hi = mid }
        }
        return lo < fileOrder.count && fileOrder[lo] == name ? lo : nil
    }

    /// Names in UTF-8 byte order (the bucket's order), for stable readdir offsets.
    var sortedNames: [String] { children.keys.sorted { NameOrder.precedes($0, $1) } }
}
