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
/// range's edge): each name is kept once, where it first came, and the entries are put in the
/// bucket's order at the end. The nodes it made are pinned (`Node.snapshotPins`, counted by the
/// invariants as this build's) so that no eviction drops them before the listing names them.
///
/// Memory: per file, its entry (the node and the attributes its page showed, 48 bytes) and its
/// number in `given`; no name (the node's path has it) and no copy of its metadata, which the
/// cache holds within its bound and may evict while the pages still come. The entries become
/// the snapshot of the directory handle that asked (`Superblock.finishListing`).
/// What changes lives in its `ListingBuildState`, which only the superblock's lock hands out.
final class ListingBuild: @unchecked Sendable {
    let dir: Node
    let prefix: String
    /// The superblock's change count when the listing began (`Superblock.readBegins`).
    let since: UInt64
    /// When it began: a readdir pass that takes its snapshot from it began then.
    let began: Double
    /// GUARDED_BY(Superblock.lock), by construction: reachable only through `Held`.
    fileprivate var state: ListingBuildState
    /// The listing's place in the eviction order, taken when it began: before the metadata its
    /// pages bring, so that under pressure it goes first (`CacheOrder.reserve`).
    let place: UInt64

    init(dir: Node, prefix: String, since: UInt64, began: Double, place: UInt64) {
        self.dir = dir
        self.prefix = prefix
        self.since = since
        self.began = began
        self.place = place
        state = ListingBuildState(mark: since)
    }
}

extension Held {
    /// `b`'s fields that change, while the superblock's lock is held.
    subscript(b: ListingBuild) -> ListingBuildState {
        _read { yield b.state }
        nonmutating _modify { yield &b.state }
    }

    /// The file `path` (in `b`'s directory) when it is one of the listing's files.
    func givenFile(_ path: String, of b: ListingBuild) -> Node? {
        table.bound(path, isDirectory: false, self).flatMap { self[b].given.contains($0.ino) ? $0 : nil }
    }
}

/// What a listing being applied gathers as its pages arrive (GUARDED_BY(Superblock.lock)).
struct ListingBuildState {
    /// The change count after this build last applied a page: changes after it are other
    /// operations' (those made by applying a page are this listing's own, and correct nothing).
    var mark: UInt64
    /// What changed in the directory since the listing began, by path, made by other operations
    /// (`RecentChanges`); nil once more changed than it keeps (the listing shows what it read).
    var changed: [String: RecentChanges.Kind]? = [:]
    /// The files so far as they came, each once, pinned (some may have been hidden or have left
    /// since: `given` says which still count).
    var files: [SnapshotEntry] = []
    /// Where each page's files begin in `files` (each page's are in the bucket's order; the
    /// pages, in the order their answers came).
    var pageStarts: [Int] = []
    /// The numbers of the files in `files` that the listing shows (a file hidden by a directory
    /// of its name leaves it).
    var given: Set<UInt64> = []
    /// The subdirectories' names, in the order they came, and as a set.
    var dirs: [String] = []
    var dirNames: Set<String> = []
    var subdirectoryPlaceholders: [String: ObjectInfo] = [:]
    /// Files hidden by a directory of the same name (`Listing.hiddenFiles`).
    var hidden: [String: ObjectInfo?] = [:]
    /// How many names the listing showed (set when it ends).
    var shown = 0
}
