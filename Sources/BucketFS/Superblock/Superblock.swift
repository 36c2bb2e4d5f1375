import Foundation
import FuseKit
import StorageModel

/// The mount's names and numbers (mountpoint-s3's superblock): the inode table, the path index,
/// the index of files created here and not uploaded yet, the bounded metadata cache's order, the
/// open handles that pin nodes, and the one lock that guards them, every field of every `Node`
/// (its listing included), every field of every `StagedFile` (except its file's bytes) and
/// `DirHandle.entries`.
///
/// Everything here is synchronous and short: no `await`, no store request under the lock (local
/// file work is: a sidecar rewritten when a staged file's path changes). The filesystem above
/// (`BucketFileSystem`) does the async work (store requests, uploads, reads) and hands its
/// results to one of the methods below, each of which reads or changes the tables in one
/// critical section, keeping the invariants (`invariantViolations`). Methods named `…Locked` are
/// private and expect the lock held.
///
/// Per-file state of the other parts (a staged file's upload state, the upload part's) is guarded
/// by this lock too: those parts change it in `withStage(of:_:)` / `withStage(_:_:)`, whose
/// closures touch only the `StagedFile` they are handed, never a table or a `Node`.
final class Superblock: @unchecked Sendable {
    static let rootIno: UInt64 = 1

    private let lock = NSLock()
    private var nodes: [UInt64: Node] = [:]
    /// (path, is a directory) → inode, so a path keeps its number while the kernel holds it. The
    /// key shares the node's path string (no second copy).
    private var byPath: [PathKey: UInt64] = [:]
    /// Files created here and not yet uploaded, by directory path: listings of that directory
    /// include them (an index, so a listing never scans every inode).
    private var pendingNew: [String: Set<UInt64>] = [:]
    /// The bounded metadata cache's queue and counts (CacheOrder.swift).
    private var cache = CacheOrder()
    private var handles: [UInt64: Handle] = [:]
    private var dirHandles: [UInt64: DirHandle] = [:]
    private var nextFh: UInt64 = 1
    /// The mount is ending (unmount, SIGTERM): no new background upload attempts.
    private var shuttingDown = false
    /// Counts changes of nodes' metadata and presence (each node keeps the count of its last
    /// one, `Node.infoSeq`), so that a read of the bucket applies only what nothing here changed
    /// since it began (`readBegins`).
    private var changes: UInt64 = 0

    private let config: MountConfig
    private let stat: StatMapper
    /// Sidecars name a staged file's object: rewritten when its path changes.
    private let staging: StagingArea
    private let counters: CacheCounters
    private let hiddenLog: WarnOnce

    init(config: MountConfig, stat: StatMapper, staging: StagingArea, counters: CacheCounters, hiddenLog: WarnOnce) {
        self.config = config
        self.stat = stat
        self.staging = staging
        self.counters = counters
        self.hiddenLog = hiddenLog
        let root = Node(ino: Self.rootIno, path: "", type: .directory)
        root.lookups = 1
        nodes[Self.rootIno] = root
        byPath[PathKey(path: "", isDirectory: true)] = Self.rootIno
    }

    private var now: Double { config.now() }
    private var ttl: Double { config.metadataTTL }

    @inline(__always)
    private func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: - nodes

    func node(_ ino: UInt64) -> Node? { locked { nodes[ino] } }

    func path(of n: Node) -> String { locked { n.path } }
    func objectName(of n: Node) -> String { locked { n.objectName } }
    func childPrefix(of n: Node) -> String { locked { n.childPrefix } }
    func isRemoved(_ n: Node) -> Bool { locked { n.removed } }

    /// The file's local content, if it has any.
    func stage(of n: Node) -> StagedFile? { locked { n.staged } }

    /// What the upload part may know of a node while it changes the node's stage.
    struct StageContext {
        let path: String
        let removed: Bool
        let shuttingDown: Bool
    }

    /// Runs `body` with `n`'s stage (or `stage`, one the caller holds) under the lock (nil,
    /// without running it, when there is none). `body` may change the stage's fields only.
    func withStage<T, E: Error>(of n: Node, stage: StagedFile? = nil,
                                _ body: (StagedFile, StageContext) throws(E) -> T) throws(E) -> T? {
        try locked { () throws(E) -> T? in
            guard let s = stage ?? n.staged else { return nil }
            return try body(s, StageContext(path: n.path, removed: n.removed, shuttingDown: shuttingDown))
        }
    }

    /// Runs `body` with `s` under the lock. `body` may change the stage's fields only.
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
            kept.pins += 1
            return kept
        }
    }

    /// `n`'s local content, pinned as `installStage` pins it; nil when it has none.
    func pinStage(of n: Node) -> StagedFile? {
        locked {
            n.staged?.pins += 1
            return n.staged
        }
    }

    /// Gives back a pin taken by `installStage` or `pinStage` (the caller then drops the stage if
    /// it is idle).
    func unpin(_ s: StagedFile) { locked { s.pins -= 1 } }

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
            return nodes.values.compactMap { n in n.staged.map { (n, $0) } }
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
            guard ino != Self.rootIno, let n = nodes[ino] else { return }
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
        locked { nodes[ino]?.lookups += 1 }
    }

    /// `n`'s attributes; `shown` when the cache evicted its metadata after the operation read it.
    func attributes(of n: Node, shown: ObjectInfo? = nil) -> FileAttributes {
        locked { stat.attributes(n, info: n.info ?? shown, now: now) }
    }

    /// lookup with no I/O: from a fresh listing of the parent (a miss there is ENOENT).
    func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? {
        locked {
            guard let p = nodes[parent], p.type == .directory, let l = p.listing, l.expiry > now else { return nil }
            counters.count(.listing, hit: true)
            guard let n = childLocked(l, name) else {
                // Names the rules refuse get their logged error from the async path.
                return name.utf8.count <= StoragePath.maxSegmentBytes && !name.contains("/") ? .failure(.ENOENT) : nil
            }
            // Its metadata was evicted: the async path reads it again.
            if lacksInfoLocked(n) { return nil }
            n.lookups += 1
            return .success(stat.entry(n, now: now))
        }
    }

    /// getattr with no I/O: nil when the metadata must be read first.
    func cachedAttributes(ino: UInt64) -> (FileAttributes, Double)? {
        locked {
            guard let n = nodes[ino], !needsRefreshLocked(n) else { return nil }
            counters.count(.attributes, hit: true)
            return (stat.attributes(n, now: now), ttl)
        }
    }

    /// What xattrs are answered from: a staged file's pending metadata, else the object's.
    struct XattrSource {
        let isDirectory: Bool
        let stagedMetadata: WritableMetadata?
        let info: ObjectInfo?
    }

    /// `n`'s xattr source, with `shown` when the cache evicted its metadata after it was read.
    func xattrSource(_ n: Node, shown: ObjectInfo?) -> XattrSource {
        locked { XattrSource(isDirectory: n.type == .directory, stagedMetadata: n.staged?.metadata, info: n.info ?? shown) }
    }

    /// getxattr and listxattr with no I/O: nil when the metadata must be read first.
    func cachedXattrSource(ino: UInt64) -> XattrSource? {
        locked {
            guard let n = nodes[ino], !needsRefreshLocked(n) else { return nil }
            counters.count(.attributes, hit: true)
            return XattrSource(isDirectory: n.type == .directory, stagedMetadata: n.staged?.metadata, info: n.info)
        }
    }

    // MARK: - the metadata cache

    /// Caches metadata just read for `n` (fresh for the TTL; nil: known absent, a directory without
    /// placeholder), within the bound, and returns it for the caller to answer with even if the
    /// bound evicts it at once. `alongWith` runs in the same critical section (the upload part's
    /// change of `n`'s stage that goes with it).
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
    func readBegins() -> UInt64 { locked { changes } }

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
        locked {
            n.infoExpiry = 0
            if parentListing, let parent = parentLocked(n) { dropListingLocked(parent) }
        }
    }

    /// A stat or a listing that began at `since` found `n`'s object missing. False (and nothing
    /// changes) when `n` changed here after that: the read knows less than the node.
    @discardableResult
    func markGone(_ n: Node, since: UInt64 = .max) -> Bool {
        locked {
            guard n.infoSeq <= since else { return false }
            markGoneLocked(n)
            return true
        }
    }

    /// The cached metadata of `n`, and whether it shows attributes that need metadata the cache
    /// evicted (then it must be read again before it is shown).
    func cachedInfo(_ n: Node) -> (lacks: Bool, info: ObjectInfo?) {
        locked { (lacksInfoLocked(n), n.info) }
    }

    /// `n`'s cached metadata (or `fallback`) and its path.
    func infoAndPath(_ n: Node, fallback: ObjectInfo? = nil) -> (info: ObjectInfo?, path: String) {
        locked { (n.info ?? fallback, n.path) }
    }

    /// What a refresh of `n` must do: whether it is needed (TTL passed, or `force`), `n`'s path,
    /// the parent to list again instead of a GET (a file whose directory's listing expired too),
    /// and the metadata it has now.
    func refreshPlan(_ n: Node, force: Bool) -> (need: Bool, path: String, relist: Node?, box: InfoBox?) {
        locked {
            let parent = parentLocked(n)
            return (needsRefreshLocked(n, force: force), n.path,
                    !force && n.type == .regular && parent.map(shouldRelistLocked) == true ? parent : nil, n.box)
        }
    }

    /// Whether listing `l` names `n`, and `n`'s metadata now.
    func isListed(_ n: Node, in l: Listing) -> (listed: Bool, box: InfoBox?) {
        locked { (l.children[n.name] == n.ino, n.box) }
    }

    // MARK: - listings

    /// Whether a directory's listing should be refreshed by listing it again (rather than a
    /// request per name): it was listed before and has expired.
    func shouldRelist(_ dir: Node) -> Bool { locked { shouldRelistLocked(dir) } }

    /// `dir`'s listing while it is fresh.
    func freshListing(_ dir: Node) -> Listing? {
        locked { dir.listing.flatMap { $0.expiry > now ? $0 : nil } }
    }

    /// A child of a listing, if it is a live node.
    func child(_ l: Listing, _ name: String) -> Node? { locked { childLocked(l, name) } }

    /// Applies a listing of `dir` read at `t`: binds every child (directories win over files of
    /// the same name, which are kept aside), adds the files created here and not uploaded yet,
    /// caches the listing (unless it is larger than the whole cache) and every file's metadata,
    /// and the directory's placeholder. With `handle`, that directory handle's snapshot is taken
    /// from it at once, before anything can be evicted. Returns the listing (fresh even with a
    /// TTL of 0, for the caller that asked).
    func applyListing(_ dir: Node, prefix: String, dirs: [String], files: [(name: String, info: ObjectInfo)],
                      placeholder: ObjectInfo?, subdirectoryPlaceholders: [String: ObjectInfo] = [:],
                      at t: Double, since: UInt64 = .max, into handle: DirHandle?) -> Listing {
        locked {
            // Directories that hold files created here and not uploaded yet exist before the
            // bucket has anything under them.
            let pendingDirs = pendingDirectoriesLocked(in: dir.path).subtracting(dirs)
            let dirs = dirs + pendingDirs.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            var children: [String: UInt64] = [:]
            children.reserveCapacity(dirs.count + files.count)
            var hidden: [String: ObjectInfo] = [:]
            for name in dirs {
                let n = nodeLocked(path: prefix + name, type: .directory)
                children[name] = n.ino
                // Its placeholder, when the listing brought it (a hint: none proves nothing).
                if let ph = subdirectoryPlaceholders[name], n.infoSeq <= since {
                    setInfoLocked(n, ph, expiry: t + ttl)
                }
            }
            for (name, info) in files {
                if children[name] != nil {
                    hidden[name] = info
                    hiddenLog.warn("'\(prefix + name)' is both an object and a prefix: the directory is shown; the object stays reachable through `bucketfs cat/stat`", key: "clash:" + prefix + name)
                    continue
                }
                // The object's name is the node's path: a new node shares that string.
                let n = nodeLocked(path: info.name, type: .regular)
                n.presence = .present
                children[name] = n.ino
            }
            // Files created here and not yet uploaded stay visible (even when this directory had
            // no listing yet when they were created).
            for n in pendingFilesLocked(in: dir.path) where children[n.name] == nil {
                children[n.name] = n.ino
            }
            var listing = Listing(children: children, expiry: t + ttl)
            listing.hiddenFiles = hidden
            // The listing is queued before the metadata it brings, so under pressure it goes
            // first: the files' metadata answers stat and getxattr without it, not it without
            // them. One larger than the whole cache is answered from but not kept.
            listing.fileOrder = files.map { $0.name }
            if children.count <= config.maxCachedEntries, isTabledLocked(dir) {
                setListingLocked(dir, listing)
            } else {
                dropListingLocked(dir)
            }
            for (name, info) in files {
                guard let ino = children[name], let n = nodes[ino], n.type == .regular else { continue }
                keepListedInfoLocked(n, info, expiry: t + ttl, since: since)
            }
            if dir.ino != Self.rootIno, dir.infoSeq <= since {
                setInfoLocked(dir, placeholder, expiry: t + ttl)
            }
            if let handle { snapshotLocked(handle, listing) }
            trimCacheLocked()
            return listing
        }
    }

    /// A file created here and not uploaded yet at `path`, if there is one (it answers a lookup
    /// before the bucket has it).
    func pendingNewFile(at path: String) -> Node? {
        locked {
            guard let ino = byPath[PathKey(path: path, isDirectory: false)], let n = nodes[ino], let s = n.staged,
                  s.createdHere, !n.removed else { return nil }
            return n
        }
    }

    /// Binds what a lookup of `path` found at `t`: a directory when the one-item listing of
    /// `path/` has anything (or files created here are below it), else the object `info`, else
    /// ENOENT.
    func bindLookedUp(_ path: String, listed: ListPage, info: ObjectInfo?, at t: Double, since: UInt64 = .max) throws(Errno) -> Node {
        try locked { () throws(Errno) -> Node in
            defer { trimCacheLocked() }
            if !listed.items.isEmpty || !listed.prefixes.isEmpty || hasPendingFilesLocked(below: path) {
                let n = nodeLocked(path: path, type: .directory)
                n.presence = .present
                let ph = listed.items.first.flatMap { $0.name == path + "/" ? $0 : nil }
                if n.infoSeq <= since { setInfoLocked(n, ph, expiry: t + ttl) }
                return n
            }
            guard let info else { throw .ENOENT }
            let n = nodeLocked(path: info.name == path ? info.name : path, type: .regular)
            n.presence = .present
            keepListedInfoLocked(n, info, expiry: t + ttl, since: since)
            return n
        }
    }

    /// Drops `dir`'s cached listing (the next lookup or readdir asks the bucket).
    func dropListing(_ dir: Node) { locked { dropListingLocked(dir) } }

    /// Whether files created here and not uploaded yet are in the directory `path` or below.
    func hasPendingFiles(below path: String) -> Bool { locked { hasPendingFilesLocked(below: path) } }

    // MARK: - directory handles

    func openDirectory(_ ino: UInt64) -> UInt64 {
        locked {
            let fh = nextFh
            nextFh += 1
            dirHandles[fh] = DirHandle(ino: ino)
            return fh
        }
    }

    /// The directory handle `fh`, and whether it needs a snapshot before answering from `offset`.
    func directoryHandle(_ fh: UInt64, offset: UInt64) -> (DirHandle, needsSnapshot: Bool)? {
        locked {
            guard let h = dirHandles[fh] else { return nil }
            return (h, offset == 0 || h.entries == nil)
        }
    }

    /// Takes `h`'s snapshot from `dir`'s cached listing when it is fresh and every child's
    /// metadata is cached too (an evicted child would have nothing to show); false otherwise.
    func snapshotFromCache(_ dir: Node, into h: DirHandle) -> Bool {
        locked {
            guard let l = dir.listing, l.expiry > now,
                  !l.children.values.contains(where: { nodes[$0].map(lacksFileInfoLocked) ?? true }) else { return false }
            snapshotLocked(h, l)
            return true
        }
    }

    /// Entries of `h`'s snapshot after `offset`, at most `limit`.
    func entries(_ h: DirHandle, after offset: UInt64, limit: Int) -> [DirectoryEntry] {
        locked {
            let entries = h.entries ?? []
            var out: [DirectoryEntry] = []
            var i = Int(offset)
            while i < entries.count, out.count < limit {
                let e = entries[i]
                // A directory whose placeholder is not known yet: its name only, and the kernel's
                // lookup reads the placeholder before its attributes are shown.
                let known = e.box != nil || !placeholderUnknownLocked(e.node)
                out.append(DirectoryEntry(name: e.name, offset: UInt64(i + 1),
                                          entry: stat.entry(e.node, info: e.node.info ?? e.box?.info, now: now),
                                          attributesKnown: known))
                i += 1
            }
            return out
        }
    }

    /// Closes a directory handle; returns how many entries its snapshot held.
    func releaseDirectory(_ fh: UInt64) -> Int {
        locked {
            guard let h = dirHandles.removeValue(forKey: fh) else { return 0 }
            let count = h.entries?.count ?? 0
            unpinLocked(h)
            return count
        }
    }

    // MARK: - file handles

    func handle(_ fh: UInt64) -> Handle? { locked { handles[fh] } }

    func keepsCache(_ fh: UInt64) -> Bool { locked { handles[fh]?.keepCache ?? false } }
    func usesDirectIO(_ fh: UInt64) -> Bool { locked { handles[fh]?.directIO ?? false } }

    /// Whether a new handle on `n` bypasses the kernel's page cache. A write-only handle does when
    /// nothing else has the file open: its writes then reach the stage file with one copy fewer and
    /// no page cache of the mount's own (bench-writes.sh section 3, README "Writes"). Any handle opened while such a one is open does too, so that no reader keeps pages
    /// the direct writes would leave stale. A handle opened while another file handle with cached
    /// pages is open keeps the page cache, which keeps the two coherent.
    private func directIOLocked(_ n: Node, writeOnly: Bool) -> Bool {
        let others = handles.values.filter { $0.ino == n.ino }
        return others.contains { $0.directIO } || (writeOnly && others.isEmpty)
    }

    /// Whether `n` is known to be gone (a stat saw 404, or unlinked) and not being written here.
    func isGoneAndNotStaged(_ n: Node) -> Bool { locked { n.removed && n.staged == nil } }

    /// For a read of a file not staged here: its path and the metadata to read (the cached one,
    /// or `seen`, what the open read).
    func readTarget(_ n: Node, seen: ObjectInfo?) -> (path: String, info: ObjectInfo)? {
        locked { n.staged == nil ? (n.info ?? seen).map { (n.path, $0) } : nil }
    }

    /// Opens `n`: a handle on the metadata it has now (or `seen`), keeping its stage if it has
    /// one, with reads of the generation opened made by `makeStream` (a file not staged, opened
    /// for reading). Close-to-open: pages cached for the generation opened last stay; any other
    /// generation (or local content being written) drops them. Returns the handle's number.
    func openFile(_ n: Node, writable: Bool, writeOnly: Bool = false, seen: ObjectInfo?, pinned: StagedFile? = nil,
                  makeStream: (_ path: String, _ info: ObjectInfo) -> ReadStream) -> (fh: UInt64, handle: Handle) {
        locked {
            // A handle keeps the file's local content while it is open (read through it too): the
            // pin its open took (for writing), else the one it takes now.
            let stage: StagedFile?
            if let pinned {
                pinned.pins -= 1
                stage = pinned
            } else {
                stage = n.staged
            }
            stage?.openHandles += 1
            let info = n.info ?? (stage == nil ? seen : nil)
            let stream = writable || stage != nil ? nil : info.map { makeStream(n.path, $0) }
            let h = Handle(ino: n.ino, writable: writable, info: info, path: n.path, stream: stream, stage: stage)
            if !writable, stage == nil, let g = info?.generation {
                h.keepCache = n.cachedGeneration == g
                n.cachedGeneration = g
            } else {
                n.cachedGeneration = nil
            }
            h.directIO = directIOLocked(n, writeOnly: writeOnly)
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            return (fh, h)
        }
    }

    /// Whether a handle open for writing keeps `s` (its close will upload it).
    func isOpenForWriting(_ s: StagedFile) -> Bool {
        locked { handles.values.contains { $0.writable && $0.stage === s } }
    }

    /// Closes a file handle (release); nil when there is none.
    func closeFile(_ fh: UInt64) -> Handle? { locked { handles.removeValue(forKey: fh) } }

    /// A new file created here at `path` in `p` (named `name`) with local content `staged`, open
    /// through a new handle. Returns its entry, the handle's number, and the local content the
    /// name had before (a file created here earlier), which the caller discards.
    func created(_ path: String, in p: Node, name: String, staged: StagedFile, writeOnly: Bool) -> (FuseEntry, UInt64, replaced: StagedFile?) {
        locked {
            let n = nodeLocked(path: path, type: .regular)
            n.presence = .present
            clearInfoLocked(n)
            let replaced = n.staged
            n.staged = staged
            staged.openHandles = 1
            n.lookups += 1
            addChildLocked(p, name, n.ino)
            notePendingLocked(n)
            let h = Handle(ino: n.ino, writable: true, info: nil, path: path, stream: nil, stage: staged)
            h.directIO = directIOLocked(n, writeOnly: writeOnly)
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            return (stat.entry(n, now: now), fh, replaced)
        }
    }

    /// Where `n` stands in its directory's walk orders (`WalkAhead.Order`): its index in the
    /// listing's file order and in inode-number order, and the directory's path; nil when the
    /// directory has no listing or the listing does not name `n`.
    func walkPosition(of n: Node) -> WalkAhead.Position? {
        locked {
            guard let d = parentLocked(n), d.listing != nil, let listed = listedIndexLocked(d, n.name) else { return nil }
            let byIno = inodeOrderLocked(d)
            guard let inode = inodeIndexLocked(byIno, n.ino) else { return nil }
            return WalkAhead.Position(directory: StoragePath.parent(n.path) ?? "", listing: listed, inode: inode)
        }
    }

    /// The next small files after `n` in its directory's `order` (the listing's order, or
    /// inode-number order: what `borg` sorts a directory by): regular, listed, not written here,
    /// of 1 byte to `maxSize` (at most `limit` of them), each with its index in that order.
    func walkWindow(after n: Node, order: WalkAhead.Order, limit: Int, maxSize: Int64) -> [WalkAhead.Candidate] {
        locked {
            guard limit > 0, let d = parentLocked(n), let l = d.listing else { return [] }
            let names: ArraySlice<String>
            let start: Int
            switch order {
            case .listing:
                guard let i = listedIndexLocked(d, n.name) else { return [] }
                start = i + 1
                names = l.fileOrder[start...]
            case .inode:
                let byIno = inodeOrderLocked(d)
                guard let i = inodeIndexLocked(byIno, n.ino) else { return [] }
                start = i + 1
                names = byIno[start...].map(\.name)[...]
            }
            var window: [WalkAhead.Candidate] = []
            for (k, next) in names.prefix(limit * 4).enumerated() {
                guard let c = childLocked(l, next), c.type == .regular, c.staged == nil, let info = c.info,
                      info.size > 0, info.size <= maxSize else { continue }
                window.append(WalkAhead.Candidate(path: c.path, info: info, position: start + k))
                if window.count == limit { break }
            }
            return window
        }
    }

    /// `name`'s index in `d`'s listing's file order (binary search: a listing's files come in
    /// the bucket's UTF-8 byte order).
    private func listedIndexLocked(_ d: Node, _ name: String) -> Int? {
        guard let order = d.listing?.fileOrder else { return nil }
        var lo = 0, hi = order.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if order[mid].utf8.lexicographicallyPrecedes(name.utf8) { lo = mid + 1 } else { hi = mid }
        }
        return lo < order.count && order[lo] == name ? lo : nil
    }

    /// `d`'s listed files by inode number, made once per listing (when a walk first asks).
    private func inodeOrderLocked(_ d: Node) -> [(ino: UInt64, name: String)] {
        guard let l = d.listing else { return [] }
        if let made = l.inodeOrder { return made }
        let made = l.fileOrder.compactMap { name in l.children[name].map { (ino: $0, name: name) } }.sorted { $0.ino < $1.ino }
        d.listing?.inodeOrder = made
        return made
    }

    private func inodeIndexLocked(_ byIno: [(ino: UInt64, name: String)], _ ino: UInt64) -> Int? {
        var lo = 0, hi = byIno.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if byIno[mid].ino < ino { lo = mid + 1 } else { hi = mid }
        }
        return lo < byIno.count && byIno[lo].ino == ino ? lo : nil
    }

    // MARK: - namespace changes

    /// A directory made here at `path` in `p` (named `name`), with the placeholder `info`:
    /// known empty, held by the kernel.
    func madeDirectory(_ path: String, in p: Node, name: String, info: ObjectInfo) -> FuseEntry {
        locked {
            let n = nodeLocked(path: path, type: .directory)
            n.presence = .present
            setInfoLocked(n, info, expiry: now + ttl)
            setListingLocked(n, Listing(children: [:], expiry: now + ttl))
            n.lookups += 1
            addChildLocked(p, name, n.ino)
            trimCacheLocked()
            return stat.entry(n, now: now)
        }
    }

    /// An object uploaded whole here at `path` in `p` (named `name`), with its metadata `info`
    /// (a symbolic link): held by the kernel.
    func madeObject(_ path: String, in p: Node, name: String, info: ObjectInfo) -> FuseEntry {
        locked {
            let n = nodeLocked(path: path, type: .regular)
            n.presence = .present
            setInfoLocked(n, info, expiry: now + ttl)
            n.lookups += 1
            addChildLocked(p, name, n.ino)
            trimCacheLocked()
            return stat.entry(n, now: now)
        }
    }

    /// The file `n` (named `name` in `p`) was deleted through this mount: it leaves the index
    /// and its directory's listing, and `discard` is handed its local content (which goes
    /// nowhere).
    func unlinked(_ n: Node, from p: Node, name: String, discard: (StagedFile, _ path: String) -> Void) {
        locked {
            n.presence = .unlinked
            clearInfoLocked(n)
            if let s = n.staged { discard(s, n.path) }
            removeChildLocked(p, name)
            unindexLocked(n)
            dropIfUnusedLocked(n)
        }
    }

    /// The directory at `path`, if this mount knows it and it was not removed (a prefix-only
    /// directory whose last object just went is still removable).
    func knownDirectory(at path: String) -> Node? {
        locked { byPath[PathKey(path: path, isDirectory: true)].flatMap { nodes[$0] }.flatMap { $0.removed ? nil : $0 } }
    }

    /// The directory `n` (named `name` in `p`) was removed through this mount; a file of the same
    /// name it hid shows at once.
    func removedDirectory(_ n: Node, from p: Node, name: String) {
        locked {
            n.presence = .unlinked
            clearInfoLocked(n)
            dropListingLocked(n)
            removeChildLocked(p, name)
            unindexLocked(n)
            uncoverLocked(p, name)
            dropIfUnusedLocked(n)
        }
    }

    /// The file `src` now lives at `dstPath` (its object was copied there, or it is created
    /// here); `dst`, the file that was there, is unlinked and `discard` is handed its local
    /// content. The moved file's metadata is read again at its next use.
    func movedFile(_ src: Node, to dstPath: String, replacing dst: Node?, discard: (StagedFile, _ path: String) -> Void) {
        locked {
            if let dst, dst !== src {
                dst.presence = .unlinked
                if let s = dst.staged { discard(s, dst.path) }
                unindexLocked(dst)
            }
            unindexLocked(src)
            src.path = dstPath
            if isTabledLocked(src) { bindPathLocked(src) }
            if let s = src.staged, s.recorded { staging.record(s, object: dstPath) }
            if src.staged?.createdHere == true { notePendingLocked(src) }
            src.infoExpiry = 0
            if src.staged?.createdHere == true { clearInfoLocked(src) }
        }
    }

    /// After a file's rename copied its object: its local content's next upload replaces the copy
    /// (the metadata read since the copy).
    func rebaseStage(of n: Node) {
        locked { if let s = n.staged, let i = n.info { s.origin = .generation(i.generation) } }
    }

    /// Every known node at `srcPath` or below moves to `dstPath` (their objects were copied:
    /// `copied` maps each new object name to the generation it was copied from and the copy's
    /// metadata). Live nodes only: a removed directory's inode may still carry the same path.
    func movedDirectory(from srcPath: String, to dstPath: String, copied: [String: (from: Int64, to: ObjectInfo)]) {
        locked {
            let srcPrefix = srcPath + "/"
            let moved = nodes.values.filter {
                ($0.path == srcPath || $0.path.hasPrefix(srcPrefix)) && !$0.removed && byPath[key($0)] == $0.ino
            }
            for n in moved { byPath.removeValue(forKey: key(n)) }
            for n in moved {
                n.path = dstPath + n.path.dropFirst(srcPath.count)
                n.infoExpiry = 0
                if let c = copied[n.objectName] {
                    // What is there now is the copy (the generation a later unlink or upload
                    // must name).
                    if let s = n.staged, case .generation(let g) = s.origin, c.from == g { s.origin = .generation(c.to.generation) }
                    setInfoLocked(n, c.to, expiry: now + ttl)
                }
                if let s = n.staged, s.recorded { staging.record(s, object: n.path) }
                if n.staged?.createdHere == true { notePendingLocked(n) }
                bindPathLocked(n)
            }
            // Once every node has its new path (dropping a listing may drop children it held).
            for n in moved { dropListingLocked(n) }
            trimCacheLocked()
        }
    }

    /// A directory rename stopped part way: cached listings under both prefixes are dropped
    /// (what moved and what did not is read again).
    func invalidate(prefixes: [String]) {
        locked {
            for prefix in prefixes {
                for n in nodes.values where n.path.hasPrefix(prefix) || prefix.hasPrefix(n.childPrefix) {
                    dropListingLocked(n)
                    n.infoExpiry = 0
                }
            }
        }
    }

    /// After a rename of `name` in `p` to `newName` in `np` (at `dstPath`): the old name leaves
    /// `p`'s listing (a file a renamed directory hid shows at once), the new one joins `np`'s.
    func renamed(from p: Node, _ name: String, to np: Node, _ newName: String, at dstPath: String, isDirectory: Bool) {
        locked {
            removeChildLocked(p, name)
            if isDirectory { uncoverLocked(p, name) }
            if let ino = byPath[PathKey(path: dstPath, isDirectory: isDirectory)] {
                addChildLocked(np, newName, ino)
            }
            trimCacheLocked()
        }
    }

    // MARK: - statistics

    func statistics(into s: inout CoreStatistics) {
        locked {
            let t = now
            s.inodes = nodes.count
            s.cachedEntries = cache.entries
            s.maxCachedEntries = config.maxCachedEntries
            for n in nodes.values {
                if n.info != nil, n.infoExpiry > t { s.cachedAttributes += 1 }
                if let l = n.listing, l.expiry > t { s.cachedListings += 1; s.cachedListingEntries += l.children.count }
                if let st = n.staged {
                    s.stagedFiles += 1
                    if st.state.unsaved { s.dirtyFiles += 1; s.pendingBytes += st.size }
                }
            }
            s.openFiles = handles.count
        }
    }

    /// The streams of the open handles (invariant checks of the read side).
    func openStreams() -> [ReadStream] { locked { handles.values.compactMap(\.stream) } }

    // MARK: - the inode table (private)

    private func key(_ n: Node) -> PathKey { PathKey(path: n.path, isDirectory: n.type == .directory) }

    /// Returns the inode for a path and type, creating it if needed. Pass a path string that lives
    /// on anyway (a listed object's name) so the node shares it.
    private func nodeLocked(path: String, type: FileType) -> Node {
        let key = PathKey(path: path, isDirectory: type == .directory)
        if let ino = byPath[key], let n = nodes[ino] { return n }
        let n = Node(ino: inodeNumberLocked(for: key), path: path, type: type)
        nodes[n.ino] = n
        byPath[key] = n.ino
        return n
    }

    /// Inode numbers come from the path: a 64-bit hash of type and path, probed past numbers in
    /// use. A path the kernel forgot and the table dropped gets its old number back when it is
    /// seen again, so numbers stay stable for the life of the mount (SPEC §3) without keeping
    /// every path ever seen. Only a collision with a live number (a path unlinked or renamed
    /// while the kernel still holds its node) moves a path to another number.
    private func inodeNumberLocked(for key: PathKey) -> UInt64 {
        var h: UInt64 = key.isDirectory ? 0x84222325_cbf29ce4 : 0xcbf29ce4_84222325
        for b in key.path.utf8 { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }  // FNV-1a
        func mix(_ x: UInt64) -> UInt64 {  // SplitMix64's finalizer: spreads the bits
            var z = x &+ 0x9e37_79b9_7f4a_7c15
            z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
            z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
            return (z ^ (z >> 31)) & 0x7fff_ffff_ffff_ffff
        }
        var ino = mix(h)
        while ino <= Self.rootIno || nodes[ino] != nil { ino = mix(ino) }
        return ino
    }

    /// Binds `n`'s path to `n` in the path index. A node bound there before (an object a rename
    /// replaced, or a directory that was gone from the bucket) is unlinked, and its listing goes:
    /// a path names one node.
    private func bindPathLocked(_ n: Node) {
        let k = key(n)
        if let old = byPath[k], old != n.ino, let o = nodes[old] {
            o.presence = .unlinked
            dropListingLocked(o)
        }
        byPath[k] = n.ino
    }

    /// `n` leaves the path index (when its path is bound to it).
    private func unindexLocked(_ n: Node) {
        if byPath[key(n)] == n.ino { byPath.removeValue(forKey: key(n)) }
    }

    /// Whether `n` is the node the table holds for its number (dropped nodes may still be held by
    /// an operation under way; they count for nothing).
    private func isTabledLocked(_ n: Node) -> Bool { nodes[n.ino] === n }

    /// A child of a listing, if it is a live node.
    private func childLocked(_ l: Listing, _ name: String) -> Node? {
        guard let ino = l.children[name], let n = nodes[ino], !n.removed else { return nil }
        return n
    }

    /// The directory holding `n`, when known.
    private func parentLocked(_ n: Node) -> Node? {
        StoragePath.parent(n.path).flatMap { byPath[PathKey(path: $0, isDirectory: true)] }.flatMap { nodes[$0] }
    }

    /// A stat or a listing found `n`'s object missing. A node this mount already unlinked stays
    /// so (it left the path index).
    private func markGoneLocked(_ n: Node) {
        if n.presence == .present { n.presence = .gone }
        changes += 1
        n.infoSeq = changes
    }

    /// Whether `n`'s metadata must be read before it is shown: its TTL has passed (or `force`).
    /// A staged file keeps its metadata unless forced (rename and 412 retries must re-read).
    private func needsRefreshLocked(_ n: Node, force: Bool = false) -> Bool {
        if n.ino == Self.rootIno || n.removed { return false }
        if n.staged != nil && !force { return false }
        return force || n.infoExpiry <= now
    }

    /// Whether a directory's listing should be refreshed by listing it again (rather than a
    /// request per name): it was listed before and has expired. With a TTL of 0 every question
    /// is a request of its own, so a single GET is cheaper.
    private func shouldRelistLocked(_ dir: Node) -> Bool {
        ttl > 0 && dir.listing.map { $0.expiry <= now } == true
    }

    /// Metadata a listing or a lookup brought for a file: cached, unless the file has unsaved
    /// content here (whose metadata stays until its upload), whose expiry only moves.
    private func keepListedInfoLocked(_ n: Node, _ info: ObjectInfo, expiry: Double, since: UInt64) {
        // Metadata set here after the read began (an upload that ended meanwhile) is newer.
        if n.infoSeq > since { return }
        if !(n.staged?.state.unsaved ?? false) {
            setInfoLocked(n, info, expiry: expiry)
        } else {
            n.infoExpiry = expiry
        }
    }

    /// After the directory `name` left `p`, a file of the same name that it hid (the directory
    /// wins) shows at once.
    private func uncoverLocked(_ p: Node, _ name: String) {
        guard let info = p.listing?.hiddenFiles.removeValue(forKey: name) else { return }
        let f = nodeLocked(path: info.name, type: .regular)
        f.presence = .present
        setInfoLocked(f, info, expiry: now + ttl)
        addChildLocked(p, name, f.ino)
    }

    // MARK: - files created here (private)

    /// Records a file created here and not yet uploaded, so listings of its directory show it.
    private func notePendingLocked(_ n: Node) {
        pendingNew[StoragePath.parent(n.path) ?? "", default: []].insert(n.ino)
    }

    /// The files created here and not uploaded yet directly in the directory `dirPath` ("": the
    /// root). Entries that no longer are (uploaded, unlinked, moved) leave the index.
    private func pendingFilesLocked(in dirPath: String) -> [Node] {
        guard let inos = pendingNew[dirPath] else { return [] }
        var live: [Node] = []
        for ino in inos {
            if let n = nodes[ino], n.type == .regular, !n.removed, n.staged?.createdHere == true,
               (StoragePath.parent(n.path) ?? "") == dirPath {
                live.append(n)
            } else {
                pendingNew[dirPath]?.remove(ino)
            }
        }
        if live.isEmpty { pendingNew[dirPath] = nil }
        return live
    }

    /// The names, in `dirPath`, of the directories below which files were created here and not
    /// uploaded yet: they exist even while the bucket has nothing under them (their last object
    /// was deleted, or they were only ever a prefix).
    private func pendingDirectoriesLocked(in dirPath: String) -> Set<String> {
        let prefix = dirPath.isEmpty ? "" : dirPath + "/"
        var names = Set<String>()
        for key in Array(pendingNew.keys) where key.count > prefix.count && key.hasPrefix(prefix) {
            guard !pendingFilesLocked(in: key).isEmpty else { continue }
            names.insert(String(key.dropFirst(prefix.count).prefix { $0 != "/" }))
        }
        return names
    }

    /// Whether files created here and not uploaded yet are in the directory `path` or below it.
    private func hasPendingFilesLocked(below path: String) -> Bool {
        if !pendingFilesLocked(in: path).isEmpty { return true }
        return Array(pendingNew.keys).contains { $0.hasPrefix(path + "/") && !pendingFilesLocked(in: $0).isEmpty }
    }

    // MARK: - the bounded cache (private)
    //
    // The bound on cached metadata (issue 9: memory bounded by an option, not by the bucket).
    //
    // What is counted: each node whose `info` is cached is one entry, each name in a cached
    // directory listing is one entry. When the count passes `MountConfig.maxCachedEntries`, the
    // oldest cached things go first (FIFO by when they were filled, O(1) amortized: a queue of
    // tickets, never a scan of the nodes). An evicted info is read again at its next use (GET, or
    // the directory's listing when that one expired too); an evicted listing is listed again at
    // the next readdir (lookups meanwhile ask per name).
    //
    // Never evicted: the info of a file with local content (staged, dirty, or created here) or
    // with an open handle. A readdir snapshot holds its own references, so an open directory
    // keeps answering whatever is evicted.
    //
    // Nodes themselves: a node stays in the table (number bound to its path) while the kernel
    // holds it (`lookups` > 0), it has local content or an open handle, an open directory
    // snapshot holds it, or a cached listing of its parent names it. Once none of these holds, it
    // is dropped (`dropIfUnusedLocked`), with its cached state; the path gets its number back if
    // it is seen again.

    /// Caches `info` for `n` (nil: known absent, a directory without placeholder) until
    /// `expiry`. The caller calls `trimCacheLocked()` when done adding.
    private func setInfoLocked(_ n: Node, _ info: ObjectInfo?, expiry: Double) {
        n.infoExpiry = expiry
        changes += 1
        n.infoSeq = changes
        guard let info else {
            clearInfoLocked(n)
            return
        }
        if n.box == nil, isTabledLocked(n) { cache.infos += 1 }
        n.box = InfoBox(info)
        if isTabledLocked(n) { n.infoTicket = cache.push(n.ino, listing: false) }
    }

    /// Forgets `n`'s info (removed, or new content).
    private func clearInfoLocked(_ n: Node, evicted: Bool = false) {
        if !evicted {
            changes += 1
            n.infoSeq = changes
        }
        if n.box != nil, isTabledLocked(n) { cache.infos -= 1 }
        n.box = nil
        n.infoTicket = 0
    }

    /// Caches a directory's listing, replacing the one it had: children of the old listing that
    /// the new one no longer names may be dropped.
    private func setListingLocked(_ dir: Node, _ listing: Listing) {
        let old = dir.listing
        if old != nil {
            cache.listings -= 1
            cache.listedNames -= old!.children.count
        }
        dir.listing = listing
        cache.listings += 1
        cache.listedNames += listing.children.count
        dir.listingTicket = cache.push(dir.ino, listing: true)
        if let old {
            for (name, ino) in old.children where listing.children[name] != ino {
                if let c = nodes[ino] { dropIfUnusedLocked(c) }
            }
        }
    }

    /// Forgets a directory's listing (the next readdir lists it again); its children that
    /// nothing else holds are dropped.
    private func dropListingLocked(_ dir: Node) {
        guard let old = dir.listing else { return }
        cache.listings -= 1
        cache.listedNames -= old.children.count
        dir.listing = nil
        dir.listingTicket = 0
        for ino in old.children.values {
            if let c = nodes[ino] { dropIfUnusedLocked(c) }
        }
    }

    /// A name added to a cached listing (create, mkdir, rename), if `p` has one.
    private func addChildLocked(_ p: Node, _ name: String, _ ino: UInt64) {
        guard p.listing != nil else { return }
        if p.listing!.children.updateValue(ino, forKey: name) == nil { cache.listedNames += 1 }
    }

    /// A name gone from a cached listing (unlink, rmdir, rename).
    private func removeChildLocked(_ p: Node, _ name: String) {
        guard p.listing != nil else { return }
        if p.listing!.children.removeValue(forKey: name) != nil { cache.listedNames -= 1 }
    }

    /// Evicts the oldest cached infos and listings until the count is within
    /// `maxCachedEntries`. Pinned infos (local content, open handles) go to the back of the
    /// queue. Each ticket is looked at at most once per call.
    private func trimCacheLocked() {
        let limit = config.maxCachedEntries
        var openInos: Set<UInt64>? = nil
        var budget = cache.queued
        while cache.entries > limit, budget > 0, let t = cache.popFront() {
            budget -= 1
            guard let n = nodes[t.ino] else { continue }
            if t.listing {
                guard n.listing != nil, n.listingTicket == t.number else { continue }
                dropListingLocked(n)
            } else {
                guard n.box != nil, n.infoTicket == t.number else { continue }
                if openInos == nil { openInos = Set(handles.values.map(\.ino)) }
                if n.staged != nil || openInos!.contains(n.ino) {
                    n.infoTicket = cache.push(n.ino, listing: false)
                    continue
                }
                evictInfoLocked(n)
            }
        }
        cache.compactIfNeeded { t in
            guard let n = nodes[t.ino] else { return false }
            return t.listing ? n.listingTicket == t.number : n.infoTicket == t.number
        }
    }

    /// Drops `n`'s cached info: its next use reads it again.
    private func evictInfoLocked(_ n: Node) {
        // Not a change of what is known: a read that began before may fill it again.
        clearInfoLocked(n, evicted: true)
        n.infoExpiry = 0
    }

    /// Whether `n` shows attributes that need its info, and the info is not cached: a file not
    /// staged here whose info was evicted (a directory's attributes need none).
    private func lacksInfoLocked(_ n: Node) -> Bool {
        lacksFileInfoLocked(n) || placeholderUnknownLocked(n)
    }

    /// A file not staged here whose info was evicted.
    private func lacksFileInfoLocked(_ n: Node) -> Bool {
        n.type == .regular && n.box == nil && n.staged == nil && !n.removed
    }

    /// A directory whose attributes come from its placeholder (POSIX metadata on) and whose
    /// placeholder was never read (a listing names child directories without their
    /// placeholders) or was evicted: a prefix-only directory read as such has an expiry.
    private func placeholderUnknownLocked(_ n: Node) -> Bool {
        config.posixMetadata && n.type == .directory && n.ino != Self.rootIno && n.box == nil
            && n.infoExpiry == 0 && !n.removed
    }

    /// Drops `n` from the table when nothing holds it any more: the kernel forgot it, it has no
    /// local content, handle or snapshot, and no cached listing of its parent names it. Its
    /// cached state goes with it (a listing, its children in turn).
    private func dropIfUnusedLocked(_ n: Node) {
        guard n.ino != Self.rootIno, n.lookups == 0, n.staged == nil, n.snapshotPins == 0,
              isTabledLocked(n) else { return }
        if handles.values.contains(where: { $0.ino == n.ino }) || dirHandles.values.contains(where: { $0.ino == n.ino }) {
            return
        }
        // (A node found gone stays while a listing names it: within its TTL the listing answers
        // as it did, whether or not the kernel forgot the node meanwhile.)
        if n.presence != .unlinked, let parent = parentLocked(n), parent.listing?.children[n.name] == n.ino { return }
        dropListingLocked(n)
        // The info stays on the object (uncounted) for an operation under way that holds it;
        // `attachLocked` counts it again should that operation hand the node to the kernel.
        if n.box != nil { cache.infos -= 1 }
        n.infoTicket = 0
        nodes.removeValue(forKey: n.ino)
        unindexLocked(n)
    }

    /// The node to hand to the kernel for `n`, which an operation under way holds: `n` itself,
    /// put back in the table if it was dropped meanwhile, or the node its path is bound to now.
    private func attachLocked(_ n: Node) -> Node {
        if isTabledLocked(n) { return n }
        if n.presence != .unlinked {
            if let ino = byPath[key(n)], let bound = nodes[ino] { return bound }
            byPath[key(n)] = n.ino
        }
        nodes[n.ino] = n
        if n.box != nil {
            cache.infos += 1
            n.infoTicket = cache.push(n.ino, listing: false)
        }
        return n
    }

    // MARK: - snapshots (private)

    /// Takes a directory handle's snapshot of `l`: each child node (pinned in the table, so the
    /// numbers it hands out stay valid) with the metadata it has now (evictions do not change it).
    private func snapshotLocked(_ h: DirHandle, _ l: Listing) {
        var entries: [SnapshotEntry] = []
        entries.reserveCapacity(l.children.count)
        for name in l.sortedNames {
            guard let n = nodes[l.children[name]!] else { continue }
            n.snapshotPins += 1
            entries.append(SnapshotEntry(name: name, node: n, box: n.box))
        }
        unpinLocked(h)
        h.entries = entries
    }

    /// Releases a snapshot's nodes: those nothing else holds now leave the table.
    private func unpinLocked(_ h: DirHandle) {
        guard let entries = h.entries else { return }
        h.entries = nil
        for e in entries {
            e.node.snapshotPins -= 1
            if e.node.snapshotPins == 0, e.node.lookups == 0 { dropIfUnusedLocked(e.node) }
        }
    }
}

// MARK: - invariants

extension Superblock {
    /// The superblock's invariants that do not hold now, each described (empty when all hold).
    /// O(inodes + cached names + the eviction queue), under the lock once.
    func invariantViolations() -> [String] {
        var bad: [String] = []
        func expect(_ ok: Bool, _ what: @autoclosure () -> String) { if !ok { bad.append(what()) } }
        locked {
            // INVARIANT: the root is inode 1, a directory at "", in the table and the path index,
            // present, and held by the kernel.
            let root = nodes[Self.rootIno]
            expect(root != nil && root!.type == .directory && root!.path.isEmpty && root!.presence == .present
                   && root!.lookups >= 1 && byPath[PathKey(path: "", isDirectory: true)] == Self.rootIno,
                   "the root is not inode 1 at \"\", indexed and present")

            // One pass over the table checks what is per node; the sums are compared after it.
            var queued = Set<UInt64>()
            for t in cache.queuedTickets { queued.insert(t.number) }
            var keptBy: [ObjectIdentifier: Int] = [:]
            for h in handles.values { if let s = h.stage { keptBy[ObjectIdentifier(s), default: 0] += 1 } }
            var pins: [ObjectIdentifier: (node: Node, count: UInt32)] = [:]
            for h in dirHandles.values {
                for e in h.entries ?? [] { pins[ObjectIdentifier(e.node), default: (e.node, 0)].count += 1 }
            }
            var infos = 0, listings = 0, names = 0, unlinked = 0
            for (ino, n) in nodes {
                // INVARIANT: the table is keyed by each node's own number.
                expect(n.ino == ino, "nodes[\(ino)] holds inode \(n.ino) ('\(n.path)')")

                // INVARIANT: the path index and the inode table agree (the other half below): every
                // node in the table that is not unlinked is indexed under its path.
                if n.presence == .unlinked {
                    unlinked += 1
                } else {
                    expect(byPath[key(n)] == n.ino, "inode \(n.ino) '\(n.path)' (\(n.presence)) is not indexed under its path (the index has \(byPath[key(n)].map(String.init) ?? "nothing"))")
                }

                // INVARIANT: only directories have listings; only files have local content.
                expect(n.listing == nil || n.type == .directory, "file '\(n.path)' has a listing")
                expect(n.staged == nil || n.type == .regular, "directory '\(n.path)' has local content")

                // INVARIANT: every name in a cached listing names a node in the table, not
                // unlinked, whose path is that name in that directory.
                if let l = n.listing {
                    listings += 1
                    names += l.children.count
                    for (name, child) in l.children {
                        guard let c = nodes[child] else { bad.append("listing of '\(n.path)' names '\(name)' as inode \(child), which is not in the table"); continue }
                        expect(c.path == n.childPrefix + name,
                               "listing of '\(n.path)' names '\(name)' as inode \(child), which is '\(c.path)'")
                        expect(c.presence != .unlinked, "listing of '\(n.path)' names '\(name)', which was unlinked")
                    }
                }

                // INVARIANT: everything cached has a ticket in the eviction queue (else the bound
                // could never evict it), and nothing uncached has one.
                if n.box != nil { infos += 1 }
                expect((n.box != nil) == (n.infoTicket != 0), "'\(n.path)': info cached \(n.box != nil), ticket \(n.infoTicket)")
                expect((n.listing != nil) == (n.listingTicket != 0), "'\(n.path)': listing cached \(n.listing != nil), ticket \(n.listingTicket)")
                if n.infoTicket != 0 { expect(queued.contains(n.infoTicket), "'\(n.path)': its info's ticket is not queued") }
                if n.listingTicket != 0 { expect(queued.contains(n.listingTicket), "'\(n.path)': its listing's ticket is not queued") }

                // INVARIANT: every file created here and not yet uploaded (that a listing must show
                // until the bucket has it) is in the pending-new index under its directory.
                if n.type == .regular, n.presence != .unlinked, n.staged?.createdHere == true {
                    expect(pendingNew[StoragePath.parent(n.path) ?? ""]?.contains(n.ino) == true,
                           "'\(n.path)' was created here and is not in the pending-new index")
                }

                // INVARIANT: a node's snapshot pins count the open directory snapshots that hold it.
                if n.snapshotPins > 0, pins[ObjectIdentifier(n)] == nil {
                    bad.append("'\(n.path)' has \(n.snapshotPins) snapshot pins, no open snapshot holds it")
                }

                // INVARIANT: a stage counts the open handles that keep it (a stage nobody keeps
                // and whose content is saved is dropped).
                if let s = n.staged {
                    let kept = keptBy[ObjectIdentifier(s)] ?? 0
                    expect(s.openHandles == kept, "'\(n.path)': its stage counts \(s.openHandles) open handles, \(kept) keep it")
                }
            }

            // INVARIANT: the path index and the inode table agree: every indexed path names a node
            // in the table with that path and type, not unlinked.
            if byPath.count != nodes.count - unlinked {
                for (k, ino) in byPath {
                    guard let n = nodes[ino] else { bad.append("path '\(k.path)' names inode \(ino), which is not in the table"); continue }
                    expect(n.path == k.path && (n.type == .directory) == k.isDirectory,
                           "path '\(k.path)' (directory: \(k.isDirectory)) names inode \(ino), which is '\(n.path)' (\(n.type))")
                    expect(n.presence != .unlinked, "path '\(k.path)' names inode \(ino), which was unlinked")
                }
            }
            // (When the index has as many paths as the table has nodes not unlinked, the pass
            // above, which found each of them under its own path, has seen every path.)

            // INVARIANT: the cache's counts equal what is cached (the bound counts what is held):
            // the infos and listings of the nodes in the table, and the names those listings hold.
            expect(cache.infos == infos, "the cache counts \(cache.infos) infos, the table holds \(infos)")
            expect(cache.listings == listings, "the cache counts \(cache.listings) listings, the table holds \(listings)")
            expect(cache.listedNames == names, "the cache counts \(cache.listedNames) listed names, the listings hold \(names)")

            // INVARIANT: every open file and directory names a node in the table (the node stays
            // while it is open), and a node held by a snapshot is the one the table holds.
            for (fh, h) in handles { expect(nodes[h.ino] != nil, "file handle \(fh) names inode \(h.ino), which is not in the table") }
            for (fh, h) in dirHandles { expect(nodes[h.ino] != nil, "directory handle \(fh) names inode \(h.ino), which is not in the table") }
            for (n, count) in pins.values {
                expect(n.snapshotPins == count, "'\(n.path)' has \(n.snapshotPins) snapshot pins, \(count) snapshots hold it")
                expect(isTabledLocked(n), "'\(n.path)' is held by a snapshot but not in the table")
            }
        }
        return bad
    }
}

/// A key of the path index: a path and whether it names a directory (a file and a directory of
/// the same name are different inodes).
struct PathKey: Hashable {
    let path: String
    let isDirectory: Bool
}
