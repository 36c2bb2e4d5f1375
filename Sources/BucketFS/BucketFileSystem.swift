import Foundation
import FuseKit
import Logging
import StorageModel

/// The filesystem core: a bucket as a directory tree (docs/SEMANTICS.md §3, §4, §6). It implements
/// FuseKit's `FuseFileSystem`, so tests drive the very entry points the kernel adapter calls,
/// with an injected store and clock and no kernel.
///
/// ## The parts, and who owns what
///
/// `BucketFileSystem` owns no table: it orchestrates async work (store requests, uploads,
/// reads) over its parts and hands the results to them. `superblock` (Superblock/) owns the
/// inode table, the path index, the index of files created here, the bounded cache and the open
/// handles, under one lock; each staged file (`StagedFile`, Uploads/) owns its upload life
/// (`StageState`), changed through its own transitions under the superblock's lock
/// (`withStage`, or `held[stage]` in the superblock's methods), and the
/// upload part (BucketFileSystem+Uploads.swift) decides when; `readPath` (ReadPath/) owns the
/// read side: its buffers and budget (ReadStream, PartBuffer, ReadBudget, BufferPool, WalkAhead)
/// and every read request. docs/ARCHITECTURE.md walks a lookup, a read, a write and a close through them.
///
/// ## Locks: what each guards, and the order they are taken in
///
/// The metadata side:
/// - `Superblock.lock` (NSLock, private to the superblock) owns its parts (`table`, `cache`,
///   `pending`, `handles`, `negative`, `listingBuilds`, `lastListingSerial`, `shuttingDown`), every
///   changing field of every `Node` (`NodeState`, its `listing` included) and of every
///   `StagedFile` (`StageState`), of every open directory (`DirHandleState`: its snapshot and
///   readdir pass) and of every listing being applied (`ListingBuildState`): all reachable only
///   through `Held`, the proof `locked` hands its closure, so code that does not hold the lock
///   does not compile (a `Handle` does not change once made). It is held for short, synchronous
///   stretches only (one superblock method each): never across an `await`, and no store request, disk I/O or
///   logging is done under it.
/// - `StagedFile.sidecar` (a `Guarded`, Locks/Guarded.swift: the lock owns the value) holds what
///   the stage knows of its sidecar file (`SidecarState`: `recorded`, `recordedClosed`,
///   `discarded`, the newest target) and orders its writes. Taken with no other NSLock held (a
///   file's `uploadLock` may be), and none under it: the caller reads what the sidecar says under
///   the superblock's lock first (`StageState.sidecarTarget`) and hands it over.
/// - `StagedFile.uploadLock` (AsyncLock) serialises the uploads of one file, and what must not
///   overlap one (unlink, giving up, the last attempt at unmount). Taken before the superblock's
///   lock, never while holding it; the upload itself runs with only `uploadLock` held. It is the
///   only AsyncLock, and no two are held at once.
/// - `UploadQueue.lock` (write-back): the queue's order and counts; a leaf, taken under no other
///   lock and with none under it (its jobs take `uploadLock` after it is released).
///
/// The read side (each an NSLock private to its type, held for short synchronous stretches):
/// - `ReadStream.lock`: one open file's parts, its place in the file, its content check. Under
///   it `ReadStream` takes `ReadBudget.lock` (reserving and releasing parts), `PartBuffer.lock`
///   (cancelling or refilling a part) and `BufferPool.lock` (a new part takes its buffer; a part
///   dropped for good gives it back). Never taken under the superblock's lock.
/// - `WalkAhead.lock`: the files fetched ahead of a walk or kept for a reopen, and what each
///   directory's opens have shown of their order. Under it: `ReadBudget.lock`, `BufferPool.lock`
///   and `PartBuffer.lock` (a new fetch), as under `ReadStream.lock`. Never taken together with
///   `ReadStream.lock` (a stream gives back the walk-ahead's bytes, or offers its own at close,
///   after releasing its lock) or the superblock's lock.
/// - `PartBuffer.lock`: one part's bytes, waiters and fill. Nothing is taken under it (waiters
///   are resumed after it is released; a fill reports to its `ReadStream` outside it).
/// - `ReadBudget.lock`, `BufferPool.lock`: leaves. A buffer given back asks the budget for room
///   before it takes the pool's lock, not under it.
/// - `WalkOrder.lock`: the files by inode number of the listings walked lately. A leaf (the
///   order is made outside it); the superblock's listing comes to it as a value (`ListedFiles`),
///   so it is never taken with the superblock's lock.
/// - `Hedge.lock` (the walk-ahead's download times and hedges sent) and its `Flag`'s: leaves.
///
/// Leaves everywhere else, under which nothing is taken: the private NSLocks of `CacheCounters`,
/// `RecentFailures`, `CreateAnswers`, `WarnOnce` (the hidden-name log), `LinkTargets`,
/// `RangeListing`, `UploadCounters`, `CrashLeftovers`, `StagedFile.closeLock` and `PastStore`. The superblock's lock takes
/// `CacheCounters` under it. `StagingArea` has no lock of its own: its `.lock`
/// flock only keeps other mounts out of the cache directory.
///
/// So the order is: `uploadLock` → `sidecar`, or `uploadLock` → the superblock's lock → a leaf; and `ReadStream.lock` or
/// `WalkAhead.lock` → `PartBuffer.lock` / `BufferPool.lock` / `ReadBudget.lock`; `WalkOrder.lock`
/// and `Hedge.lock` alone. No
/// thread-blocking lock is held across an `await`.
///
/// Immutable after `init` (no lock): every stored property of `BucketFileSystem`, and
/// `Node.ino`/`type`, every field of a `Handle`.
public final class BucketFileSystem: FuseFileSystem, @unchecked Sendable {
    public static let rootIno: UInt64 = Superblock.rootIno

    let store: any ObjectStore
    public let config: MountConfig
    let logger: Logger
    let names: NameRules
    let stat: StatMapper

    /// The inode table, the path index, the open handles and the metadata cache (Superblock/).
    let superblock: Superblock
    let mountTime: Double
    /// The cache directory: stage files, their sidecars, lost+found.
    let staging: StagingArea
    /// Objects and listings that just failed, answered EIO at once for a few seconds.
    let failures: RecentFailures
    /// What the store's rules said about creating files in a directory (firebase://).
    let createAnswers: CreateAnswers
    /// Cache hits and misses, for the metrics endpoint (`statistics()`).
    public let cacheCounters = CacheCounters()
    /// The read path (ReadPath/): read-ahead, the walk-ahead, their memory, and the
    /// length-checked reads everything goes through. The core asks it for streams and bytes;
    /// it never calls the core.
    let readPath: ReadPath
    var readBudget: ReadBudget { readPath.budget }
    var readBuffers: BufferPool { readPath.pool }
    var walkAhead: WalkAhead { readPath.walkAhead }
    /// Lists a directory's pages by name ranges at once (Listing/), and remembers when the
    /// store cannot.
    let rangeListing: RangeListing
    /// Symbolic links' targets read from their content, by object generation.
    let linkTargets = LinkTargets()
    /// Refusals logged once (hard links, device nodes).
    let refusalLog = WarnOnce()
    /// Identical failure lines, logged once a minute (`fail`).
    let repeatedFailures: RepeatedLines
    /// Directories emptied here lately, kept for the metadata TTL (`resolve`, `loadListing`).
    let emptied: EmptiedDirectories
    /// Lookups' relists of a directory, one at a time per directory (`resolve`).
    let relists = SharedRelists()
    /// Write-back's background uploads, in the order files were closed (UploadQueue.swift).
    let uploads: UploadQueue
    /// The unmount's bound, set by `shutdown(within:)`: no operation's deadline passes it.
    let shutdownLimit = OperationLimit()
    /// Failed upload attempts and cache-directory errors, for the metrics.
    public let uploadCounters = UploadCounters()
    /// The stage files an earlier run left unsaved (a crash), by name: `settleRecovered` moves
    /// them into lost+found and uploads the complete ones, in the background.
    let leftovers: [String]
    /// Flat-bucket directory renames that stopped part way, until they are finished
    /// (BucketFileSystem+DirectoryRename.swift); kept in the cache directory across mounts.
    let unfinishedRenames: UnfinishedRenames

    /// Takes the cache directory (refused when it is a symlink, someone else's, or in use by
    /// another mount) and finds, by name only, the stage files an earlier run left there.
    public init(store: any ObjectStore, config: MountConfig = MountConfig(),
                logger: Logger = Logger(label: "bucketfs")) throws(CacheDirectoryError) {
        self.store = store
        self.config = config
        self.logger = logger
        self.mountTime = config.clock.seconds
        names = NameRules(logger: logger, hiddenLog: WarnOnce())
        let posixWarnings = WarnOnce()
        posixWarnings.handler = { [logger] message in logger.warning("\(message)") }
        stat = StatMapper(config: config, mountTime: mountTime, warnings: posixWarnings)
        refusalLog.handler = { [logger] message in logger.warning("\(message)") }
        staging = try StagingArea(directory: config.cacheDirectory, bucket: store.bucket, logger: logger, clock: config.clock,
                                  counters: uploadCounters)
        failures = RecentFailures(ttl: config.failureTTL, clock: config.clock)
        repeatedFailures = RepeatedLines(clock: config.clock)
        // A folder of a hierarchical bucket stays when emptied: nothing to keep showing.
        emptied = EmptiedDirectories(clock: config.clock, ttl: config.metadataTTL, enabled: store.folders == nil)
        createAnswers = CreateAnswers(ttl: config.createAnswerTTL, clock: config.clock)
        readPath = ReadPath(store: store, config: config, logger: logger)
        rangeListing = RangeListing(concurrency: config.listConcurrency)
        leftovers = staging.findLeftovers()
        unfinishedRenames = UnfinishedRenames(directory: config.cacheDirectory, logger: logger)
        superblock = Superblock(config: config, stat: stat, counters: cacheCounters)
        uploads = UploadQueue(limit: config.uploadConcurrency, delay: config.writeBackDelay,
                              maxFiles: config.writeBackMaxFiles, maxBytes: config.writeBackMaxBytes, clock: config.clock)
        uploads.start { [weak self] n, s in await self?.uploadQueued(n, s) ?? false }
    }

    /// Now, in seconds since 1970, on the mount's one clock (`MountConfig.clock`).
    var now: Double { config.clock.seconds }

    /// A fresh deadline of `--op-timeout` that restarts with each byte moved, never past the
    /// shutdown's bound once it is set.
    func operationClock() -> OperationClock {
        OperationClock(timeout: .milliseconds(Int64(config.operationTimeout * 1000)), limit: shutdownLimit)
    }

    /// Every operation from the kernel runs under one deadline (`operationTimeout`) that covers
    /// all its store requests and retries, and restarts whenever the operation moves bytes
    /// (docs/SEMANTICS.md §5.2).
    public func perform<T: Sendable>(_ work: @escaping @Sendable () async throws(Errno) -> T) async throws(Errno) -> T {
        do {
            return try await OperationContext.$clock.withValue(operationClock()) { try await work() }
        } catch let e as Errno {
            throw e
        } catch {
            throw errno(for: error)
        }
    }

    func node(_ ino: UInt64) throws(Errno) -> Node {
        guard let n = superblock.node(ino) else { throw .ENOENT }
        return n
    }

    // MARK: - errors

    /// Maps a store error to errno, logging it once with the object name and the cause.
    func fail(_ error: any Error, _ op: String, _ path: String) -> Errno {
        let e = errno(for: error)
        switch e {
        case .ENOENT: logger.debug("\(op) \(path): not found")
        // Interrupted by its caller (a signal, the kernel's interrupt): nothing went wrong.
        case .EINTR: logger.debug("\(op) '\(path)' interrupted by its caller: \(error) → \(e)")
        default:
            let line = "\(op) '\(path)' failed: \(error)\(storageNote(error)) → \(e)"
            let said = repeatedFailures.admit(line)
            if said.log {
                let omitted = said.omitted > 0 ? " (and \(said.omitted) more time(s) in the \(Int(repeatedFailures.window)) s before this, not logged)" : ""
                logger.error("\(line)\(omitted)")
            } else {
                logger.debug("\(line) (again)")
            }
        }
        return e
    }

    /// " (storage at ADDRESS, set by …)" when `error` says the store could not be reached, else "".
    func storageNote(_ error: any Error) -> String {
        Self.unreached(error) ? config.storageAddress.map { " (storage at \($0))" } ?? "" : ""
    }

    /// Whether `error` says the store could not be reached or did not answer (no HTTP status:
    /// refused, reset, timed out, retries given up), so that the log line names where it was.
    static func unreached(_ error: any Error) -> Bool {
        switch error as? StorageError {
        case .unknown(0, _)?, .retryLimitExceeded?, .timeout?: return true
        default: return false
        }
    }

    // MARK: - FuseFileSystem: names and attributes

    public func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry {
        let p = try node(parent)
        guard p.type == .directory else { throw .ENOTDIR }
        let found = try await resolve(p, name)
        let info = try await shownInfo(found)
        return superblock.lookedUp(found, shown: info)
    }

    public func forget(ino: UInt64, nlookup: UInt64) {
        superblock.forget(ino: ino, nlookup: nlookup)
    }

    /// readdirplus entries that reached the kernel count as lookups.
    public func noteLookup(ino: UInt64) {
        superblock.noteLookup(ino: ino)
    }

    public func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        let box = try await refreshed(n)
        return (superblock.attributes(of: n, shown: box?.info), config.metadataTTL)
    }

    public func statfs(ino: UInt64) async throws(Errno) -> StatFS {
        var s = StatFS()
        s.nameMax = 255
        return s
    }

}
