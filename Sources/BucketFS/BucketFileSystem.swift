import Foundation
import FuseKit
import Logging
import StorageModel

/// The filesystem core: a bucket as a directory tree (SPEC.md §3, §4, §6). It implements
/// FuseKit's `FuseFileSystem`, so tests drive the very entry points the kernel adapter calls,
/// with an injected store and clock and no kernel.
///
/// ## Locks: what each guards, and the order they are taken in
///
/// The metadata side:
/// - `lock` (NSLock, the core's one lock) guards the inode table and everything hanging off it:
///   `nodes`, `byPath`, `handles`, `dirHandles`, `nextFh`, `pendingNew`, `shuttingDown`, `cache` (the
///   eviction queue and counts of MetadataCache.swift); every field of every `Node` (including
///   its `listing`); every field of every `StagedFile` except `fd`'s bytes; `DirHandle.entries`;
///   `Handle.keepCache`. It is held for short, synchronous stretches only: never across an
///   `await`, and no store request is made under it (local file work is: `ftruncate` of a stage
///   file, the sidecar `markDirtyLocked` writes). Methods named `…Locked` expect the caller to
///   hold it.
/// - `StagedFile.uploadLock` (AsyncLock) serialises the uploads of one file, and what must not
///   overlap one (unlink, giving up, the last attempt at unmount). Taken before `lock`, never
///   while holding it; the upload itself runs with only `uploadLock` held. It is the only
///   AsyncLock, and no two are held at once.
///
/// The read side (each an NSLock private to its type, held for short synchronous stretches):
/// - `ReadStream.lock`: one open file's parts, its place in the file, its content check. Under
///   it `ReadStream` takes `ReadBudget.lock` (reserving and releasing parts), `PartBuffer.lock`
///   (cancelling or refilling a part) and `BufferPool.lock` (a new part takes its buffer; a part
///   dropped for good gives it back). Never taken under `lock`.
/// - `WalkAhead.lock`: the files fetched ahead of a walk. Under it: `ReadBudget.lock`,
///   `BufferPool.lock` and `PartBuffer.lock` (a new fetch), as under `ReadStream.lock`. Never
///   taken together with `ReadStream.lock` or `lock`.
/// - `PartBuffer.lock`: one part's bytes, waiters and fill. Nothing is taken under it (waiters
///   are resumed after it is released; a fill reports to its `ReadStream` outside it).
/// - `ReadBudget.lock`, `BufferPool.lock`: leaves. A buffer given back asks the budget for room
///   before it takes the pool's lock, not under it.
///
/// Leaves everywhere else, under which nothing is taken: the private NSLocks of `CacheCounters`,
/// `RecentFailures` and `WarnOnce` (the hidden-name log). `lock` takes `CacheCounters`,
/// `WarnOnce` and `ReadBudget` (statistics) under it. `StagingArea` has no lock of its own: its
/// `.lock` flock only keeps other mounts out of the cache directory.
///
/// So the order is: `uploadLock` → `lock` → a leaf; and `ReadStream.lock` or `WalkAhead.lock` →
/// `PartBuffer.lock` / `BufferPool.lock` / `ReadBudget.lock`. No thread-blocking lock is held
/// across an `await`.
///
/// Immutable after `init` (no lock): `store`, `config`, `logger`, `names`, `stat`, `mountTime`,
/// `staging`, `failures`, `cacheCounters`, `readBudget`, `bufferPool`, `walkAhead`, and
/// `Node.ino`/`type`, `Handle`'s `let`s.
public final class BucketFileSystem: FuseFileSystem, @unchecked Sendable {
    public static let rootIno: UInt64 = 1

    let store: any ObjectStore
    public let config: MountConfig
    let logger: Logger
    let names: NameRules
    let stat: StatMapper

    let lock = NSLock()
    var nodes: [UInt64: Node] = [:]
    /// (path, is a directory) → inode, so a path keeps its number while the kernel holds it. The
    /// key shares the node's path string (no second copy).
    var byPath: [PathKey: UInt64] = [:]
    var handles: [UInt64: Handle] = [:]
    var dirHandles: [UInt64: DirHandle] = [:]
    var nextFh: UInt64 = 1
    /// Files created here and not yet uploaded, by directory path: listings of that directory
    /// include them (an index, so a listing never scans every inode).
    var pendingNew: [String: Set<UInt64>] = [:]
    /// The bounded metadata cache's queue and counts (MetadataCache.swift).
    var cache = CacheOrder()
    /// The mount is ending (`shutdown`): no new background upload attempts start.
    var shuttingDown = false
    let mountTime: Double
    /// The cache directory: stage files, their sidecars, lost+found.
    let staging: StagingArea
    /// Objects and listings that just failed, answered EIO at once for a few seconds.
    let failures: RecentFailures
    /// Cache hits and misses, for the metrics endpoint (`statistics()`).
    public let cacheCounters = CacheCounters()
    /// Memory for everything fetched ahead of readers (`readAheadBudget`).
    let readBudget: ReadBudget
    /// Read buffers kept for reuse: what one sequential reader cycles through (its `readStreams`
    /// parts ahead of it, the one it reads and one whose replies are still on their way to the
    /// kernel), within what the budget has free.
    let bufferPool: BufferPool
    /// Small files fetched ahead of a process reading a directory's files in listing order.
    let walkAhead: WalkAhead

    /// Takes the cache directory (refused when it is a symlink, someone else's, or in use by
    /// another mount) and moves what an earlier run left unsaved there into lost+found.
    public init(store: any ObjectStore, config: MountConfig = MountConfig(),
                logger: Logger = Logger(label: "bucketfs")) throws(CacheDirectoryError) {
        self.store = store
        self.config = config
        self.logger = logger
        self.mountTime = config.now()
        names = NameRules(logger: logger, hiddenLog: WarnOnce())
        stat = StatMapper(config: config, mountTime: mountTime)
        staging = try StagingArea(directory: config.cacheDirectory, bucket: store.bucket, logger: logger, now: config.now)
        failures = RecentFailures(ttl: config.failureTTL, now: config.now)
        readBudget = ReadBudget(capacity: config.readAheadBudget)
        let budget = readBudget
        bufferPool = BufferPool(limit: (config.readStreams + 2) * config.readPartMax,
                                room: { budget.capacity - budget.inUse })
        walkAhead = WalkAhead(budget: readBudget, pool: bufferPool, ttl: config.walkAheadTTL, now: config.now)
        staging.recoverOrphans()
        let root = Node(ino: Self.rootIno, path: "", type: .directory)
        root.lookups = 1
        nodes[Self.rootIno] = root
        byPath[PathKey(path: "", isDirectory: true)] = Self.rootIno
    }

    @inline(__always)
    func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    var now: Double { config.now() }

    /// Every operation from the kernel runs under one deadline (`operationTimeout`) that covers
    /// all its store requests and retries.
    public func perform<T: Sendable>(_ work: @escaping @Sendable () async throws(Errno) -> T) async throws(Errno) -> T {
        let end = ContinuousClock.now + .milliseconds(Int64(config.operationTimeout * 1000))
        do {
            return try await OperationContext.$deadline.withValue(end) { try await work() }
        } catch let e as Errno {
            throw e
        } catch {
            throw errno(for: error)
        }
    }

    // MARK: - inode table

    /// Returns the inode for a path and type, creating it if needed. Caller holds `lock`.
    /// Pass a path string that lives on anyway (a listed object's name) so the node shares it.
    func nodeLocked(path: String, type: FileType) -> Node {
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
    /// while the kernel still holds its node) moves a path to another number. Caller holds `lock`.
    func inodeNumberLocked(for key: PathKey) -> UInt64 {
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
    /// a path names one node. Caller holds `lock`.
    func bindPathLocked(_ n: Node) {
        let k = key(n)
        if let old = byPath[k], old != n.ino, let o = nodes[old] {
            o.presence = .unlinked
            dropListingLocked(o)
        }
        byPath[k] = n.ino
    }

    func node(_ ino: UInt64) throws(Errno) -> Node {
        guard let n = locked({ nodes[ino] }) else { throw .ENOENT }
        return n
    }

    func key(_ n: Node) -> PathKey { PathKey(path: n.path, isDirectory: n.type == .directory) }

    // MARK: - errors

    /// Maps a store error to errno, logging it once with the object name and the cause.
    func fail(_ error: any Error, _ op: String, _ path: String) -> Errno {
        let e = errno(for: error)
        switch e {
        case .ENOENT: logger.debug("\(op) \(path): not found")
        default: logger.error("\(op) '\(path)' failed: \(error) → \(e)")
        }
        return e
    }

    // MARK: - FuseFileSystem: names and attributes

    public func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry {
        let p = try node(parent)
        guard p.type == .directory else { throw .ENOTDIR }
        let found = try await resolve(p, name)
        let info = try await shownInfo(found)
        return locked {
            let n = attachLocked(found)
            n.lookups += 1
            return stat.entry(n, info: n.info ?? info, now: now)
        }
    }

    public func forget(ino: UInt64, nlookup: UInt64) {
        locked {
            guard ino != Self.rootIno, let n = nodes[ino] else { return }
            n.lookups = n.lookups > nlookup ? n.lookups - nlookup : 0
            guard n.lookups == 0 else { return }
            // The kernel no longer knows this number: its listing goes, and the node too unless
            // something else holds it (MetadataCache.swift).
            if n.staged == nil { dropListingLocked(n) }
            dropIfUnusedLocked(n)
        }
    }

    /// readdirplus entries that reached the kernel count as lookups.
    public func noteLookup(ino: UInt64) {
        locked { nodes[ino]?.lookups += 1 }
    }

    public func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        let box = try await refreshed(n)
        return locked { (stat.attributes(n, info: n.info ?? box?.info, now: now), config.metadataTTL) }
    }

    public func statfs(ino: UInt64) async throws(Errno) -> StatFS {
        var s = StatFS()
        s.nameMax = 255
        return s
    }

}

/// A key of `byPath`: a path and whether it names a directory (a file and a directory of the same
/// name are different inodes).
struct PathKey: Hashable {
    let path: String
    let isDirectory: Bool
}
