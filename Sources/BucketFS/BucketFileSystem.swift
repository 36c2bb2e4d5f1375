import Foundation
import FuseKit
import Logging
import StorageModel

/// The filesystem core: a bucket as a directory tree (SPEC.md §3, §4, §6). It implements
/// FuseKit's `FuseFileSystem`, so tests drive the very entry points the kernel adapter calls,
/// with an injected store and clock and no kernel.
///
/// Locking: one lock, `lock`, guards `nodes`, `byPath`, `handles`, `dirHandles`, `nextIno`,
/// `nextFh`, `pendingNew` and every field of every `Node` and `StagedFile`. It is never held across an `await`.
/// `StagedFile.uploadLock` (async) is taken before `lock`, never while holding it.
public final class BucketFileSystem: FuseFileSystem, @unchecked Sendable {
    public static let rootIno: UInt64 = 1

    let store: any ObjectStore
    public let config: MountConfig
    let logger: Logger
    let names: NameRules
    let stat: StatMapper

    let lock = NSLock()
    var nodes: [UInt64: Node] = [:]
    /// "d:" / "f:" + path → inode, so a path keeps its number for the life of the mount.
    var byPath: [String: UInt64] = [:]
    var nextIno: UInt64 = 2
    var handles: [UInt64: Handle] = [:]
    var dirHandles: [UInt64: DirHandle] = [:]
    var nextFh: UInt64 = 1
    /// Files created here and not yet uploaded, by directory path: listings of that directory
    /// include them (an index, so a listing never scans every inode).
    var pendingNew: [String: Set<UInt64>] = [:]
    let mountTime: Double
    /// The cache directory: stage files, their sidecars, lost+found.
    let staging: StagingArea
    /// Objects and listings that just failed, answered EIO at once for a few seconds.
    let failures: RecentFailures
    /// Cache hits and misses, for the metrics endpoint (`statistics()`).
    public let cacheCounters = CacheCounters()
    /// Memory for everything fetched ahead of readers (`readAheadBudget`).
    let readBudget: ReadBudget
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
        walkAhead = WalkAhead(budget: readBudget, ttl: config.walkAheadTTL, now: config.now)
        staging.recoverOrphans()
        let root = Node(ino: Self.rootIno, path: "", type: .directory)
        root.lookups = 1
        nodes[Self.rootIno] = root
        byPath["d:"] = Self.rootIno
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
    func nodeLocked(path: String, type: FileType) -> Node {
        let key = (type == .directory ? "d:" : "f:") + path
        if let ino = byPath[key], let n = nodes[ino] { return n }
        let n = Node(ino: nextIno, path: path, type: type)
        nextIno += 1
        nodes[n.ino] = n
        byPath[key] = n.ino
        return n
    }

    func node(_ ino: UInt64) throws(Errno) -> Node {
        guard let n = locked({ nodes[ino] }) else { throw .ENOENT }
        return n
    }

    func key(_ n: Node) -> String { (n.type == .directory ? "d:" : "f:") + n.path }

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
        let n = try await resolve(p, name)
        return locked {
            n.lookups += 1
            return stat.entry(n, now: now)
        }
    }

    public func forget(ino: UInt64, nlookup: UInt64) {
        locked {
            guard ino != Self.rootIno, let n = nodes[ino] else { return }
            n.lookups = n.lookups > nlookup ? n.lookups - nlookup : 0
            // The number stays bound to its path for the life of the mount; only state is dropped.
            if n.lookups == 0, n.staged == nil { n.listing = nil }
        }
    }

    /// readdirplus entries that reached the kernel count as lookups.
    public func noteLookup(ino: UInt64) {
        locked { nodes[ino]?.lookups += 1 }
    }

    public func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        try await refreshed(n)
        return locked { (stat.attributes(n, now: now), config.metadataTTL) }
    }

    public func statfs(ino: UInt64) async throws(Errno) -> StatFS {
        var s = StatFS()
        s.nameMax = 255
        return s
    }

}
