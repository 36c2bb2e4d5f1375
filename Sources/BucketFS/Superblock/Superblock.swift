import Foundation
import FuseKit
import StorageModel

/// The mount's names and numbers (mountpoint-s3's superblock), and the one lock that owns them.
/// Its state is held by parts, one file each, each with a small API:
///
/// | part | holds |
/// |---|---|
/// | `InodeTable` | the nodes by number, the path index, inode numbering |
/// | `MetadataCache` | the bounded cache's order and counts, the change count |
/// | `PendingNewIndex` | the files created here and not uploaded yet, by directory |
/// | `HandleTable` | the open file and directory handles |
/// | `NegativeCache` | names found missing, directories where one was |
///
/// The lock owns the parts, every changing field of every `Node` (`NodeState`, its listing
/// included) and of every `StagedFile` (`StageState`): they are reachable only through `Held`,
/// the proof that the lock is held, which only `locked` makes and which cannot leave its closure
/// (a noncopyable value, borrowed). Code without it does not compile (docs/ARCHITECTURE.md,
/// "The superblock's lock"). The superblock's methods are spread over the files of this folder by
/// concern: this one (nodes, stages, the lock), `Superblock+Attributes.swift`,
/// `Superblock+Coordination.swift` (what the parts do together, on `Held`),
/// `Superblock+Listings.swift`, `Superblock+ListingBuild.swift`, `Superblock+Handles.swift`,
/// `Superblock+Namespace.swift`, `Superblock+Writes.swift` and `Superblock+Invariants.swift`.
///
/// Everything here is synchronous and short: no `await`, no store request, no disk I/O and no
/// logging under the lock. What must be written, removed or logged because of a change is handed
/// back to the caller (the stage a deletion discards, the stages whose sidecar must name a new
/// path, the names a listing hid). The filesystem above (`BucketFileSystem`) does the async work
/// and hands its results to one of these methods, each of which reads or changes the parts in one
/// critical section, keeping the invariants (`invariantViolations`), which debug builds check at
/// each release of the lock when `MountConfig.checksInvariantsAtUnlock` is set (the core's tests).
final class Superblock: @unchecked Sendable {
    static let rootIno: UInt64 = InodeTable.rootIno

    private let lock = NSLock()
    // The parts, owned by `lock`: reachable only through `Held` (below). One stored property
    // each, so that two parts can be in use at once (Swift checks exclusive access per property).
    fileprivate var table = InodeTable()
    fileprivate var cache = MetadataCache()
    fileprivate var pending = PendingNewIndex()
    fileprivate var handles = HandleTable()
    fileprivate var negative = NegativeCache()
    /// The listings being applied page by page (`ListingBuild`), which pin the nodes they made.
    fileprivate var listingBuilds: [ObjectIdentifier: ListingBuild] = [:]
    /// The last `Listing.serial` given.
    fileprivate var lastListingSerial: UInt64 = 0
    /// The mount is ending (unmount, SIGTERM): no new background upload attempts.
    fileprivate var shuttingDown = false

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

    /// Runs `body` with the lock held, and the proof of it. In debug builds with
    /// `MountConfig.checksInvariantsAtUnlock`, the invariants are checked before the lock is
    /// released, and a broken one is reported with the place of the section that broke it.
    @inline(__always)
    func locked<T, E: Error>(file: StaticString = #fileID, line: UInt = #line,
                             _ body: (borrowing Held) throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer {
            #if DEBUG
            if config.checksInvariantsAtUnlock { checkAtUnlock(file: file, line: line) }
            #endif
            lock.unlock()
        }
        let held = Held(sb: self)
        return try body(held)
    }

    #if DEBUG
    private func checkAtUnlock(file: StaticString, line: UInt) {
        let bad = Held(sb: self).invariantViolations()
        guard !bad.isEmpty else { return }
        config.brokenInvariant(bad, "\(file):\(line)")
    }
    #endif

    // MARK: - nodes

    func node(_ ino: UInt64) -> Node? { locked { h in h.table[ino] } }

    func path(of n: Node) -> String { locked { h in h[n].path } }
    func objectName(of n: Node) -> String { locked { h in h[n].objectName(n.type) } }
    func childPrefix(of n: Node) -> String { locked { h in h[n].childPrefix } }

    // MARK: - stages

    /// The file's local content, if it has any.
    func stage(of n: Node) -> StagedFile? { locked { h in h[n].staged } }

    /// What the upload part may know of a node while it changes the node's stage.
    struct StageContext {
        /// The stage itself (its fields are the closure's `inout` argument).
        let stage: StagedFile
        let path: String
        let removed: Bool
        let shuttingDown: Bool
    }

    /// Runs `body` with `n`'s stage (or `stage`, one the caller holds) under the lock (nil,
    /// without running it, when there is none): its fields, which only the lock hands out, and
    /// what the upload part may know of the node. `body` changes them only through the stage's
    /// own transitions (`StageState`), and does no I/O.
    func withStage<T, E: Error>(of n: Node, stage: StagedFile? = nil,
                                _ body: (inout StageState, StageContext) throws(E) -> T) throws(E) -> T? {
        try locked { (h: borrowing Held) throws(E) -> T? in
            guard let s = stage ?? h[n].staged else { return nil }
            let context = StageContext(stage: s, path: h[n].path, removed: h[n].removed, shuttingDown: h.shuttingDown)
            return try h.modify(s) { (st: inout StageState) throws(E) -> T in try body(&st, context) }
        }
    }

    /// Runs `body` with `s`'s fields under the lock, as `withStage(of:)` does.
    func withStage<T, E: Error>(_ s: StagedFile, _ body: (inout StageState) throws(E) -> T) throws(E) -> T {
        try locked { (h: borrowing Held) throws(E) -> T in try h.modify(s, body) }
    }

    /// Gives `n` local content unless it has some already; returns the one it has now, pinned
    /// (`StageState.pins`: no close of another handle can take it away before the caller's
    /// handle holds it). The caller hands the pin to a handle (`openFile(pinned:)`) or gives it
    /// back (`unpin`).
    func installStage(_ s: StagedFile, on n: Node) -> StagedFile {
        locked { h in
            let kept = h[n].staged ?? s
            h[n].staged = kept
            h[kept].pinned()
            return kept
        }
    }

    /// `n`'s local content, pinned as `installStage` pins it; nil when it has none.
    func pinStage(of n: Node) -> StagedFile? {
        locked { h in
            if let s = h[n].staged { h[s].pinned() }
            return h[n].staged
        }
    }

    /// Gives back a pin taken by `installStage` or `pinStage` (the caller then drops the stage if
    /// it is idle).
    func unpin(_ s: StagedFile) { locked { h in h[s].unpinned() } }

    /// Takes `n`'s stage away when `idle` says so (nobody keeps it, its content is saved); the
    /// node may then leave the table. Returns the stage taken (the caller discards its file).
    func detachStage(of n: Node, if idle: (StagedFile, StageState) -> Bool) -> StagedFile? {
        locked { h in
            guard let s = h[n].staged, idle(s, h[s]) else { return nil }
            h[n].staged = nil
            // Nothing local any more: the node may leave the table (the kernel forgot it already).
            h.dropIfUnused(n)
            return s
        }
    }

    /// The mount is ending: no new background attempts from now on. Returns every staged file.
    func beginShutdown() -> [(Node, StagedFile)] {
        locked { h in
            h.shuttingDown = true
            return h.table.nodes.values.compactMap { n in h[n].staged.map { (n, $0) } }
        }
    }
}

/// The proof that the superblock's lock is held: made only by `Superblock.locked`, borrowed by
/// its closure and never copied out of it (it is noncopyable). The parts, and the fields of nodes
/// and stages (`held[node]`, `held[stage]`), are reachable only through it.
struct Held: ~Copyable {
    let sb: Superblock
    fileprivate init(sb: Superblock) { self.sb = sb }

    var table: InodeTable {
        _read { yield sb.table }
        nonmutating _modify { yield &sb.table }
    }
    var cache: MetadataCache {
        _read { yield sb.cache }
        nonmutating _modify { yield &sb.cache }
    }
    var pending: PendingNewIndex {
        _read { yield sb.pending }
        nonmutating _modify { yield &sb.pending }
    }
    var handles: HandleTable {
        _read { yield sb.handles }
        nonmutating _modify { yield &sb.handles }
    }
    var negative: NegativeCache {
        _read { yield sb.negative }
        nonmutating _modify { yield &sb.negative }
    }
    var listingBuilds: [ObjectIdentifier: ListingBuild] {
        _read { yield sb.listingBuilds }
        nonmutating _modify { yield &sb.listingBuilds }
    }
    var lastListingSerial: UInt64 {
        get { sb.lastListingSerial }
        nonmutating set { sb.lastListingSerial = newValue }
    }
    var shuttingDown: Bool {
        get { sb.shuttingDown }
        nonmutating set { sb.shuttingDown = newValue }
    }

    // (Borrowed, not copied: a `MountConfig` or a `StatMapper` copied at each use costs a
    // retain and release of every reference it holds.)
    var config: MountConfig { _read { yield sb.config } }
    var stat: StatMapper { _read { yield sb.stat } }
    var counters: CacheCounters { sb.counters }
    var now: Double { sb.now }
    var ttl: Double { sb.ttl }
}
