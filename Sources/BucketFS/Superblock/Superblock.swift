import Foundation
import FuseKit
import StorageModel

/// The mount's names and numbers (mountpoint-s3's superblock), and the one lock that guards
/// them. Its state is held by parts, one file each, each with a small API:
///
/// | part | holds |
/// |---|---|
/// | `InodeTable` | the nodes by number, the path index, inode numbering |
/// | `MetadataCache` | the bounded cache's order and counts, the change count |
/// | `PendingNewIndex` | the files created here and not uploaded yet, by directory |
/// | `HandleTable` | the open file and directory handles |
/// | `NegativeCache` | names found missing, directories where one was |
///
/// The superblock's methods are the only code that changes the parts, every field of every
/// `Node` (its listing included), `DirHandle.entries` and the superblock-guarded fields of
/// `StagedFile` (through the stage's own methods, StagedFile.swift, inside `withStage` or a
/// method here). They are spread over the files of this folder by concern: this one (nodes,
/// stages, attributes, the metadata cache and the coordination between parts),
/// `Superblock+Listings.swift`, `Superblock+ListingBuild.swift`, `Superblock+Handles.swift`,
/// `Superblock+Namespace.swift`, `Superblock+Writes.swift` and `Superblock+Invariants.swift`.
///
/// Everything here is synchronous and short: no `await`, no store request, no disk I/O and no
/// logging under the lock. What must be written, removed or logged because of a change is handed
/// back to the caller (the stage a deletion discards, the stages whose sidecar must name a new
/// path, the names a listing hid). The filesystem above (`BucketFileSystem`) does the async work
/// and hands its results to one of these methods, each of which reads or changes the parts in one
/// critical section, keeping the invariants (`invariantViolations`). Methods named `…Locked`
/// expect the lock held (LOCKS_REQUIRED(lock)); every other method takes it (LOCKS_EXCLUDED(lock)).
final class Superblock: @unchecked Sendable {
    static let rootIno: UInt64 = InodeTable.rootIno

    private let lock = NSLock()
    /// GUARDED_BY(lock), as are the parts below.
    var table = InodeTable()
    var cache = MetadataCache()
    var pending = PendingNewIndex()
    var handles = HandleTable()
    var negative = NegativeCache()
    /// The listings being applied page by page (`ListingBuild`), which pin the nodes they made.
    var listingBuilds: [ObjectIdentifier: ListingBuild] = [:]
    /// The last `Listing.serial` given.
    var lastListingSerial: UInt64 = 0
    /// The mount is ending (unmount, SIGTERM): no new background upload attempts.
    /// GUARDED_BY(lock)
    var shuttingDown = false

    let config: MountConfig
    let stat: StatMapper
    /// A leaf lock of its own (taken under this one).
    let counters: CacheCounters

    init(config: MountConfig, stat: StatMapper, counters: CacheCounters) {
        self.config = config
        self.stat = stat
        self.counters = counters
    }

    /// Now, in seconds since 1970, on the mount's one clock (`MountConfig.clock`).
    var now: Double { config.clock.seconds }
    var ttl: Double { config.metadataTTL }

    @inline(__always)
    func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: - nodes

    func node(_ ino: UInt64) -> Node? { locked { table[ino] } }

    func path(of n: Node) -> String { locked { n.path } }
    func objectName(of n: Node) -> String { locked { n.objectName } }
    func childPrefix(of n: Node) -> String { locked { n.childPrefix } }

    // MARK: - stages

    /// The file's local content, if it has any.
    func stage(of n: Node) -> StagedFile? { locked { n.staged } }

    /// What the upload part may know of a node while it changes the node's stage.
    struct StageContext {
        let path: String
        let removed: Bool
        let shuttingDown: Bool
    }

    /// Runs `body` with `n`'s stage (or `stage`, one the caller holds) under the lock (nil,
    /// without running it, when there is none). `body` changes the stage only through its own
    /// methods (its fields are `private(set)`), and nothing else; it does no I/O.
    func withStage<T, E: Error>(of n: Node, stage: StagedFile? = nil,
                                _ body: (StagedFile, StageContext) throws(E) -> T) throws(E) -> T? {
        try locked { () throws(E) -> T? in
            guard let s = stage ?? n.staged else { return nil }
            return try body(s, StageContext(path: n.path, removed: n.removed, shuttingDown: shuttingDown))
        }
    }

    /// Runs `body` with `s` under the lock, as `withStage(of:)` does.
    func withStage<T, E: Error>(_ s: StagedFile, _ body: (StagedFile) throws(E) -> T) throws(E) -> T {
        try locked { () throws(E) -> T in try body(s) }
    }

    /// Gives `n` local content unless it has some already; returns the one it has now, pinned
    /// (`StagedFile.pins`: no close of another handle can take it away before the caller's
    /// handle holds it). The caller hands the pin to a handle (`openFile(pinned:)`) or gives it
    /// back (`unpin`).
    func installStage(_ s: StagedFile, on n: Node) -> StagedFile {
        locked {
            let kept = n.staged ?? s
            n.staged = kept
            kept.pinned()
            return kept
        }
    }

    /// `n`'s local content, pinned as `installStage` pins it; nil when it has none.
    func pinStage(of n: Node) -> StagedFile? {
        locked {
            n.staged?.pinned()
            return n.staged
        }
    }

    /// Gives back a pin taken by `installStage` or `pinStage` (the caller then drops the stage if
    /// it is idle).
    func unpin(_ s: StagedFile) { locked { s.unpinned() } }

    /// Takes `n`'s stage away when `idle` says so (nobody keeps it, its content is saved); the
    /// node may then leave the table. Returns the stage taken (the caller discards its file).
    func detachStage(of n: Node, if idle: (StagedFile) -> Bool) -> StagedFile? {
        locked {
            guard let s = n.staged, idle(s) else { return nil }
            n.staged = nil
            // Nothing local any more: the node may leave the table (the kernel forgot it already).
            dropIfUnusedLocked(n)
            return s
        }
    }

    /// The mount is ending: no new background attempts from now on. Returns every staged file.
    func beginShutdown() -> [(Node, StagedFile)] {
        locked {
            shuttingDown = true
            return table.nodes.values.compactMap { n in n.staged.map { (n, $0) } }
        }
    }

    // MARK: - lookups and attributes

    /// The node an operation found goes to the kernel (lookup, create of an existing name): it is
    /// put back in the table if the cache dropped it meanwhile, its lookup count rises, and its
    /// entry shows `shown` when the cache evicted the node's own metadata since.
    func lookedUp(_ found: Node, shown: ObjectInfo?) -> FuseEntry {
        locked {
            let n = attachLocked(found)
            n.lookups += 1
            return stat.entry(n, info: n.info ?? shown, now: now)
        }
    }

    func forget(ino: UInt64, nlookup: UInt64) {
        locked {
            guard ino != Self.rootIno, let n = table[ino] else { return }
            n.lookups = n.lookups > nlookup ? n.lookups - nlookup : 0
            guard n.lookups == 0 else { return }
            // The kernel no longer knows this number: its listing goes, and the node too unless
            // something else holds it.
            if n.staged == nil { dropListingLocked(n) }
            dropIfUnusedLocked(n)
        }
    }

    /// readdirplus entries that reached the kernel count as lookups.
    func noteLookup(ino: UInt64) {
        locked { table[ino]?.lookups += 1 }
    }

    /// `n`'s attributes; `shown` when the cache evicted its metadata after the operation read it.
    func attributes(of n: Node, shown: ObjectInfo? = nil) -> FileAttributes {
        locked { stat.attributes(n, info: n.info ?? shown, now: now) }
    }

    /// getattr with no I/O: nil when the metadata must be read first.
    func cachedAttributes(ino: UInt64) -> (FileAttributes, Double)? {
        locked {
            guard let n = table[ino], !needsRefreshLocked(n) else { return nil }
            counters.count(.attributes, hit: true)
            return (stat.attributes(n, now: now), ttl)
        }
    }

    /// What xattrs are answered from: a staged file's pending metadata, else the object's.
    struct XattrSource {
        let isDirectory: Bool
        /// The object's path (for properties whose default depends on the name).
        let path: String
        let stagedMetadata: WritableMetadata?
        let info: ObjectInfo?
    }

    /// `n`'s xattr source, with `shown` when the cache evicted its metadata after it was read.
    func xattrSource(_ n: Node, shown: ObjectInfo?) -> XattrSource {
        locked { XattrSource(isDirectory: n.type == .directory, path: n.path, stagedMetadata: n.staged?.metadata, info: n.info ?? shown) }
    }

    /// The content type inferred here for `n`'s object (`Node.inferredType`).
    func inferredType(of n: Node) -> String? {
        locked { n.inferredType }
    }

    /// Records the content type inferred here for `n`'s object (nil: it was given, or replaced).
    func setInferredType(_ n: Node, _ type: String?) {
        locked { n.inferredType = type }
    }

    /// getxattr and listxattr with no I/O: nil when the metadata must be read first.
    func cachedXattrSource(ino: UInt64) -> XattrSource? {
        locked {
            guard let n = table[ino], !needsRefreshLocked(n) else { return nil }
            counters.count(.attributes, hit: true)
            return XattrSource(isDirectory: n.type == .directory, path: n.path, stagedMetadata: n.staged?.metadata, info: n.info)
        }
    }

    // MARK: - the metadata cache

    /// Caches metadata just read for `n` (fresh for the TTL; nil: known absent, a directory without
    /// placeholder), within the bound, and returns it for the caller to answer with even if the
    /// bound evicts it at once. `alongWith` runs in the same critical section (the upload part's
    /// transition of `n`'s stage that goes with it).
    @discardableResult
    func setInfo(_ n: Node, _ info: ObjectInfo?, alongWith: (() -> Void)? = nil) -> InfoBox? {
        locked {
            alongWith?()
            setInfoLocked(n, info, expiry: now + ttl)
            let box = n.box
            trimCacheLocked()
            return box
        }
    }

    /// Marks the start of a read of the bucket (a listing, a lookup, a GET): what it brings is
    /// applied with this mark, and does not overwrite metadata that changed here after it (an
    /// upload or a PATCH that ended while the read was under way knows better).
    func readBegins() -> UInt64 { locked { cache.changes } }

    /// Caches metadata a GET that began at `since` read for `n`, unless `n`'s metadata changed
    /// here after that; returns what `n` shows now.
    func setReadInfo(_ n: Node, _ info: ObjectInfo, since: UInt64) -> InfoBox? {
        locked {
            guard n.infoSeq <= since else { return n.box ?? InfoBox(info) }
            setInfoLocked(n, info, expiry: now + ttl)
            let box = n.box
            trimCacheLocked()
            return box
        }
    }

    /// `n`'s metadata is read again at its next use; with `parentListing`, its directory is
    /// listed again too (the file shows the bucket's state again).
    func expire(_ n: Node, parentListing: Bool) {
        locked { expireLocked(n, parentListing: parentListing) }
    }

    func expireLocked(_ n: Node, parentListing: Bool) {
        n.infoExpiry = 0
        if parentListing, let parent = table.parent(of: n) { dropListingLocked(parent) }
    }

    /// A stat or a listing that began at `since` found `n`'s object missing. False (and nothing
    /// changes) when `n` changed here after that: the read knows less than the node. A node this
    /// mount already unlinked stays so (it left the path index).
    @discardableResult
    func markGone(_ n: Node, since: UInt64 = .max) -> Bool {
        locked {
            guard n.infoSeq <= since else { return false }
            if n.presence == .present { n.presence = .gone }
            cache.noteChange(n)
            return true
        }
    }

    /// The cached metadata of `n`, and whether it shows attributes that need metadata the cache
    /// evicted, or that expired in a listing of names only (then it must be read again before it
    /// is shown).
    func cachedInfo(_ n: Node) -> (lacks: Bool, info: ObjectInfo?) {
        locked {
            var expired = false
            if n.type == .regular, let l = table.parent(of: n)?.listing { expired = expiredByNameLocked(n, in: l) }
            return (lacksInfoLocked(n) || expired, n.info)
        }
    }

    /// `n`'s cached metadata (or `fallback`) and its path.
    func infoAndPath(_ n: Node, fallback: ObjectInfo? = nil) -> (info: ObjectInfo?, path: String) {
        locked { (n.info ?? fallback, n.path) }
    }

    /// What a refresh of `n` must do: whether it is needed (TTL passed, or `force`), `n`'s path,
    /// the parent to list again instead of a GET (a file whose directory's listing expired too),
    /// and the metadata it has now.
    func refreshPlan(_ n: Node, force: Bool, opening: Bool = false) -> (need: Bool, path: String, relist: Node?, box: InfoBox?) {
        locked {
            let parent = table.parent(of: n)
            return (needsRefreshLocked(n, force: force, opening: opening), n.path,
                    !force && n.type == .regular && parent.map(shouldRelistLocked) == true ? parent : nil, n.box)
        }
    }

    /// Whether listing `l` names `n`, and `n`'s metadata now.
    func isListed(_ n: Node, in l: Listing) -> (listed: Bool, box: InfoBox?) {
        locked { (l.children[n.name] == n.ino, n.box) }
    }

    // MARK: - statistics

    func statistics(into s: inout CoreStatistics) {
        locked {
            let t = now
            s.inodes = table.count
            s.cachedEntries = cache.entries
            s.maxCachedEntries = config.maxCachedEntries
            for n in table.nodes.values {
                if n.info != nil, n.infoExpiry > t { s.cachedAttributes += 1 }
                if let l = n.listing, l.isFresh(at: t) { s.cachedListings += 1; s.cachedListingEntries += l.children.count }
                if let st = n.staged {
                    s.stagedFiles += 1
                    if st.state.unsaved { s.dirtyFiles += 1; s.pendingBytes += st.size }
                }
            }
            s.openFiles = handles.files.count
        }
    }

    // MARK: - coordination between the parts (LOCKS_REQUIRED(lock))
    //
    // Nodes leave the table when nothing holds them: a node stays (its number bound to its path)
    // while the kernel holds it (`lookups` > 0), it has local content or an open handle, an open
    // directory snapshot holds it, or a cached listing of its parent names it. Once none of these
    // holds, it is dropped (`dropIfUnusedLocked`) with its cached state; the path gets its number
    // back if it is seen again.

    /// The node for a path and type, made if needed.
    /// The node for a path and type, made if needed; the path is no longer known missing.
    func nodeLocked(path: String, type: FileType) -> Node {
        negative.forget(path)
        return table.node(path: path, type: type)
    }

    /// Binds `n`'s path to `n` in the path index; a node bound there before is unlinked and its
    /// listing goes.
    func bindPathLocked(_ n: Node) {
        negative.forget(n.path)
        if let old = table.bind(n) {
            old.presence = .unlinked
            dropListingLocked(old)
        }
    }

    /// A child of a listing, if it is a live node.
    func childLocked(_ l: Listing, _ name: String) -> Node? {
        guard let ino = l.children[name], let n = table[ino], !n.removed else { return nil }
        return n
    }

    /// Whether `n`'s metadata must be read before it is shown: its TTL has passed, and no readdir
    /// pass holds it (or `force`). An open (`opening`) is not held: close-to-open, it sees the
    /// current generation once the TTL has passed. A staged file keeps its metadata unless forced
    /// (rename and 412 retries must re-read).
    func needsRefreshLocked(_ n: Node, force: Bool = false, opening: Bool = false) -> Bool {
        if n.ino == Self.rootIno || n.removed { return false }
        if n.staged != nil && !force { return false }
        return force || (n.infoExpiry <= now && (opening || !heldByPassLocked(n)))
    }

    /// Whether a readdir pass under way over `n`'s directory holds `n`'s metadata: it arrived
    /// since the listing the pass reads began, and lives the TTL from the pass's end, for every
    /// operation but an open (lookup, getattr, xattrs), however long the pass lasts
    /// (docs/SEMANTICS.md §6).
    func heldByPassLocked(_ n: Node) -> Bool {
        guard n.infoExpiry > 0, let l = table.parent(of: n)?.listing, l.passes > 0 else { return false }
        return n.infoExpiry >= l.heldSince + ttl
    }

    /// Whether a directory's listing should be refreshed by listing it again (rather than a
    /// request per name): it was listed before and has expired (and no readdir pass holds it).
    /// With a TTL of 0 every question is a request of its own, so a single GET is cheaper.
    func shouldRelistLocked(_ dir: Node) -> Bool {
        ttl > 0 && dir.listing.map { !$0.isFresh(at: now) } == true
    }

    /// Caches `info` for `n` until `expiry` (the caller trims the cache when done adding).
    func setInfoLocked(_ n: Node, _ info: ObjectInfo?, expiry: Double) {
        cache.set(n, info, expiry: expiry, tabled: table.isTabled(n))
    }

    /// Forgets `n`'s info (removed, or new content).
    func clearInfoLocked(_ n: Node) { cache.clear(n, tabled: table.isTabled(n)) }

    /// Metadata a listing or a lookup brought for a file: cached, unless the file has unsaved
    /// content here (whose metadata stays until its upload), whose expiry only moves.
    func keepListedInfoLocked(_ n: Node, _ info: ObjectInfo, expiry: Double, since: UInt64) {
        // Metadata set here after the read began (an upload that ended meanwhile) is newer.
        if n.infoSeq > since { return }
        if !(n.staged?.state.unsaved ?? false) {
            setInfoLocked(n, info, expiry: expiry)
        } else {
            n.infoExpiry = expiry
        }
    }

    /// Caches a directory's listing (queued last, or in a `place` reserved for it), replacing the
    /// one it had: children of the old listing that the new one no longer names may be dropped.
    func setListingLocked(_ dir: Node, _ listing: Listing, place: UInt64? = nil) {
        var listing = listing
        lastListingSerial += 1
        listing.serial = lastListingSerial
        listing.passes = 0
        guard let old = cache.setListing(dir, listing, place: place, nodes: { self.table[$0] }) else { return }
        for (name, ino) in old.children where listing.children[name] != ino {
            if let c = table[ino] { dropIfUnusedLocked(c) }
        }
    }

    /// Forgets a directory's listing (the next readdir lists it again); its children that
    /// nothing else holds are dropped.
    func dropListingLocked(_ dir: Node) {
        guard let old = cache.dropListing(dir, nodes: { self.table[$0] }) else { return }
        for ino in old.children.values {
            if let c = table[ino] { dropIfUnusedLocked(c) }
        }
    }

    /// Evicts the oldest cached infos and listings until the count is within
    /// `maxCachedEntries`. Pinned infos (local content, open handles) go to the back of the
    /// queue. Each ticket is looked at at most once per call.
    func trimCacheLocked() {
        let limit = config.maxCachedEntries
        var openInos: Set<UInt64>? = nil
        var budget = cache.order.queued
        while cache.entries > limit, budget > 0, let t = cache.popOldest() {
            budget -= 1
            guard let n = table[t.ino] else { continue }
            if t.listing {
                guard n.listing != nil, n.listingTicket == t.number else { continue }
                dropListingLocked(n)
            } else {
                guard n.box != nil, n.infoTicket == t.number else { continue }
                if openInos == nil { openInos = handles.openFileInos }
                if n.staged != nil || openInos!.contains(n.ino) {
                    cache.requeueInfo(n)
                    continue
                }
                cache.evict(n, tabled: true)
            }
        }
        cache.compactIfNeeded { t in
            guard let n = table[t.ino] else { return false }
            return t.listing ? n.listingTicket == t.number : n.infoTicket == t.number
        }
    }

    /// Whether `n` shows attributes that need its info, and the info is not cached: a file not
    /// staged here whose info was evicted (a directory's attributes need none).
    func lacksInfoLocked(_ n: Node) -> Bool {
        lacksFileInfoLocked(n) || placeholderUnknownLocked(n)
    }

    /// A file not staged here whose info was evicted.
    func lacksFileInfoLocked(_ n: Node) -> Bool {
        n.type == .regular && n.box == nil && n.staged == nil && !n.removed
    }

    /// A directory whose attributes come from its placeholder (POSIX metadata on) and whose
    /// placeholder was never read (a listing names child directories without their
    /// placeholders) or was evicted: a prefix-only directory read as such has an expiry.
    func placeholderUnknownLocked(_ n: Node) -> Bool {
        config.posixMetadata && n.type == .directory && n.ino != Self.rootIno && n.box == nil
            && n.infoExpiry == 0 && !n.removed
    }

    /// Drops `n` from the table when nothing holds it any more: the kernel forgot it, it has no
    /// local content, handle or snapshot, and no cached listing of its parent names it. Its
    /// cached state goes with it (a listing, its children in turn).
    func dropIfUnusedLocked(_ n: Node) {
        guard n.ino != Self.rootIno, n.lookups == 0, n.staged == nil, n.snapshotPins == 0,
              table.isTabled(n), !handles.holds(n.ino) else { return }
        // (A node found gone stays while a listing names it: within its TTL the listing answers
        // as it did, whether or not the kernel forgot the node meanwhile.)
        if n.presence != .unlinked, let parent = table.parent(of: n), parent.listing?.children[n.name] == n.ino { return }
        dropListingLocked(n)
        cache.detached(n)
        table.remove(n)
    }

    /// The node to hand to the kernel for `n`, which an operation under way holds: `n` itself,
    /// put back in the table if it was dropped meanwhile, or the node its path is bound to now.
    func attachLocked(_ n: Node) -> Node {
        let (node, reinserted) = table.reattach(n)
        if reinserted { cache.attached(node) }
        return node
    }
}
