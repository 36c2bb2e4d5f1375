import Foundation
import StorageModel

/// A directory's listing while its pages arrive (docs/SEMANTICS.md §6): each page is applied as
/// it comes (its files' nodes made and their metadata cached, `Superblock.applyListedPage`), so
/// that no page, and no list of the whole directory's entries, waits for the last one. What it
/// gathered becomes the directory's `Listing` once the last page is in
/// (`Superblock.finishListing`); until then nothing shows it: lookups and readdir answer as
/// before the listing began.
///
/// Pages come in the order their answers arrive, not the bucket's, and may repeat a name (at a
/// range's edge): each name is kept once, where it first came, and `fileOrder` is put in the
/// bucket's order at the end. The nodes it made are pinned (`Node.snapshotPins`, counted by the
/// invariants as this build's) so that no eviction drops them before the listing names them.
/// Every field is GUARDED_BY(Superblock.lock) and changed only by the superblock.
final class ListingBuild: @unchecked Sendable {
    let dir: Node
    let prefix: String
    /// The superblock's change count when the listing began (`Superblock.readBegins`).
    let since: UInt64
    /// When it began: a readdir pass that takes its snapshot from it began then.
    let began: Double
    /// The change count after this build last applied a page: changes after it are other
    /// operations' (those made by applying a page are this listing's own, and correct nothing).
    var mark: UInt64
    /// What changed in the directory since the listing began, by path, made by other operations
    /// (`RecentChanges`); nil once more changed than it keeps (the listing shows what it read).
    var changed: [String: RecentChanges.Kind]? = [:]
    /// The files so far, name → inode (the directories are added at the end).
    var children: [String: UInt64] = [:]
    /// The subdirectories' names, in the order they came, and as a set.
    var dirs: [String] = []
    var dirNames: Set<String> = []
    var subdirectoryPlaceholders: [String: ObjectInfo] = [:]
    /// Files hidden by a directory of the same name (`Listing.hiddenFiles`).
    var hidden: [String: ObjectInfo?] = [:]
    /// The files' names as they came (`Listing.fileOrder` once sorted).
    var fileOrder: [String] = []
    /// Whether `fileOrder` is still in the bucket's order.
    var inOrder = true
    /// The nodes this build pinned (each once), unpinned when it ends.
    var pinned: [Node] = []
    /// The listing's place in the eviction order, taken when it began: before the metadata its
    /// pages bring, so that under pressure it goes first (`CacheOrder.reserve`).
    let place: UInt64

    init(dir: Node, prefix: String, since: UInt64, began: Double, place: UInt64) {
        self.dir = dir
        self.prefix = prefix
        self.since = since
        self.began = began
        self.place = place
        mark = since
    }

    /// A file name from a page, in `fileOrder`.
    func noteFile(_ name: String) {
        if inOrder, let last = fileOrder.last, !last.utf8.lexicographicallyPrecedes(name.utf8) { inOrder = false }
        fileOrder.append(name)
    }
}
