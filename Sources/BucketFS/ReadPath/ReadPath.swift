import Foundation
import Logging
import StorageModel

/// The read path, one part (mountpoint-s3's prefetcher, gcsfuse's chain of readers): everything
/// between "these bytes of this generation, please" and the store. It owns the mount's read
/// memory (`budget`, `pool`), makes the `ReadStream` of each open file (parts fetched ahead of a
/// sequential reader, the on-demand fallback), the walk-ahead of small files, and the
/// length-checked, retried read that all of them (and the copy of a file opened for writing) go
/// through. It knows no inode, path index or handle table, and never calls the filesystem core:
/// the core asks it for streams and bytes and hands it the files to fetch ahead.
final class ReadPath: @unchecked Sendable {
    private let store: any ObjectStore
    private let config: MountConfig
    private let logger: Logger
    /// Memory for everything fetched ahead of readers (`readAheadBudget`).
    let budget: ReadBudget
    /// Read buffers kept for reuse: what one sequential reader cycles through (its `readStreams`
    /// parts ahead of it, the one it reads and one whose replies are still on their way to the
    /// kernel), within what the budget has free.
    let pool: BufferPool
    /// Small files fetched ahead of a process reading a directory's files whole in an order its
    /// opens show, and kept for the next open.
    let walkAhead: WalkAhead
    /// The walk-ahead's fetches, hedged when one runs long (`--walk-hedge`).
    let hedge: Hedge
    /// Where a file stands in its directory's walk orders, and what follows it.
    private let walkOrder: WalkOrder
    /// What was read, kept on local disk across opens and mounts (`--read-cache-dir`); nil when off.
    let readCache: ReadCache?

    init(store: any ObjectStore, config: MountConfig, logger: Logger) {
        self.store = store
        self.config = config
        self.logger = logger
        budget = ReadBudget(capacity: config.readAheadBudget)
        let budget = self.budget
        pool = BufferPool(limit: (config.readStreams + 2) * config.readPartMax, slack: 2 * config.readPartMax, clock: config.clock,
                          room: { budget.capacity - budget.inUse })
        walkAhead = WalkAhead(budget: budget, pool: pool, ttl: config.walkAheadTTL, limit: config.walkAheadFiles, clock: config.clock)
        walkOrder = WalkOrder(capacity: config.maxCachedEntries)
        hedge = Hedge(factor: config.walkHedge, floor: config.walkHedgeFloor, clock: config.clock)
        if store.isLocal, config.readCacheDirectory != nil {
            logger.notice("read cache: not used for the embedded bucket, whose reads go straight to its own files")
        }
        readCache = store.isLocal ? nil : config.readCacheDirectory.flatMap {
            ReadCache.open(directory: $0, capacity: config.readCacheBytes, logger: logger, writer: config.readCacheWriter)
        }
    }

    /// Reads of one generation of `path`: a local store's (`localFile`, its blob) on demand,
    /// one complete in the read cache from its file there, anything else with parts fetched
    /// ahead (and written into the read cache as they come).
    func stream(_ path: String, _ info: ObjectInfo, localFile: Int32? = nil) -> ReadStream {
        var tuning = ReadStream.Tuning(config)
        if store.isLocal { tuning.streams = 0 }
        let generation = info.generation
        let store = self.store
        var cached: CachedFile? = nil
        var fill: CacheFill? = nil
        if localFile == nil, let readCache {
            switch readCache.open(info) {
            case let .complete(file): cached = file
            case let .filling(f): fill = f
            case .none: break
            }
        }
        let s = ReadStream(path: path, info: info, tuning: tuning, budget: budget, pool: pool, logger: logger, localFile: localFile,
                          cached: cached, fill: fill,
                          stream: { range, deliver in
                              try await store.stream(path, generation: generation, range: range, deliver: deliver)
                          }, fetch: { [weak self] range in
                              guard let self else { throw StorageError.cancelled }
                              return try await self.fetch(path, generation: generation, range)
                          })
        // A small file read whole stays a little for the next open of this generation.
        if walks, localFile == nil, info.size > 0, info.size <= Int64(config.walkAheadMaxSize) {
            let walkAhead = self.walkAhead
            let directory = StoragePath.parent(path) ?? ""
            s.keepWhole = { bytes, reserved, holder in
                walkAhead.keep(path, generation: generation, directory: directory, bytes: bytes, reserved: reserved, from: holder)
            }
        }
        return s
    }

    /// Whether small files are fetched ahead and kept (`--walk-ahead`, never for a local store).
    var walks: Bool { config.walkAheadFiles > 0 && !store.isLocal }

    /// An open of `path` at `generation` (in `listed`, its directory's listing): noted (not
    /// fetched ahead again; guesses it passed went unread), and handed the bytes fetched ahead
    /// (or kept) for that generation if there are any.
    func opened(_ stream: ReadStream, path: String, generation: Int64, in listed: ListedFiles?) {
        guard walks else { return }
        if let listed, let position = walkOrder.position(in: listed) {
            walkAhead.noteOpen(path, generation: generation, at: position)
        }
        guard let bytes = walkAhead.take(path, generation: generation) else { return }
        let walkAhead = self.walkAhead
        stream.seed(bytes) { walkAhead.giveBack(path, bytes) }
    }

    /// `path` (in `listed`, its directory's listing) was read whole: what it shows of the order
    /// the directory is read in (`WalkAhead.noteRead`), and, once that shows a walk, the next
    /// small files in that order fetched ahead (`WalkAhead.plan`, docs/SEMANTICS.md §3.6).
    /// `smallFiles` says which of the names that follow are small files to fetch (it asks the
    /// superblock): called only when a window is made, not while the last one stands.
    func readWhole(_ path: String, in listed: ListedFiles,
                   smallFiles: (_ names: ArraySlice<String>, _ limit: Int, _ maxSize: Int64) -> [SmallFile]) {
        guard walks, let at = walkOrder.position(in: listed) else { return }
        walkAhead.noteRead(path, at: at)
        guard let (order, width, reach) = walkAhead.plan(at: at) else { return }
        // Room for the files other readers opened already (`WalkAhead.prefetch`).
        let limit = reach + WalkAhead.readers
        let (start, names) = walkOrder.names(after: at, in: listed, order: order, limit: limit)
        let window = smallFiles(names, limit, Int64(config.walkAheadMaxSize)).map {
            WalkAhead.Candidate(path: $0.path, info: $0.info, position: start + $0.index)
        }
        walk(window, in: at.directory, order: order, width: width, reach: reach)
    }

    /// Fetches the files of `window` (the next small files of `directory` after the reader in
    /// `order`; the first `reach` not opened yet) ahead of the walk, `width` at once, each
    /// checked whole before anyone can be handed it.
    private func walk(_ window: [WalkAhead.Candidate], in directory: String, order: WalkAhead.Order, width: Int, reach: Int) {
        walkAhead.prefetch(window, in: directory, order: order, width: width, reach: reach) { [weak self] c in
            guard let self else { throw StorageError.cancelled }
            // A file the read cache holds costs no request.
            if let data = self.readCache?.whole(c.info) { return data }
            let data = try await self.hedge.run { try await self.fetch(c.path, generation: c.info.generation, 0..<c.info.size) }
            var check = ContentCheck(c.info)
            if let (expected, got) = check.add(data, at: 0) {
                throw StorageError.nonMatchingChecksum(path: "\(c.path) generation \(c.info.generation) (fetched ahead)",
                                                       expected: expected, got: got)
            }
            self.readCache?.keep(c.info, data)
            return data
        }
    }

    /// The mount ends: what was fetched ahead goes.
    func dropAll() { walkAhead.dropAll() }

    /// The read cache's checks under way end (unmount: what was read whole is kept).
    func settle() async { await readCache?.settle() }

    /// Reads exactly `range` of a generation. An answer of another length is a transport fault:
    /// retried within the operation's deadline (`RetryBudget.wrongLengthReadAttempts`), never
    /// returned as data.
    func fetch(_ path: String, generation: Int64, _ range: Range<Int64>) async throws -> Data {
        let want = Int(range.upperBound - range.lowerBound)
        let deadline = OperationContext.deadline(capping: config.clock.now + .milliseconds(Int64(config.operationTimeout * 1000)))
        var attempt = 0
        while true {
            attempt += 1
            let data = try await store.read(path, generation: generation, range: range)
            if data.count == want { return data }
            let problem = "asked for \(want) bytes at offset \(range.lowerBound) of generation \(generation), got \(data.count)"
            let pause = RetryBudget.wrongLengthReadPause(after: attempt)
            if attempt >= RetryBudget.wrongLengthReadAttempts || config.clock.now + pause >= deadline {
                throw StorageError.retryLimitExceeded(message: "read \(path): \(problem) (\(attempt) attempts)")
            }
            logger.warning("read of '\(path)': \(problem); retrying")
            do { try await config.clock.sleep(for: pause) } catch { throw StorageError.cancelled }
        }
    }

    /// What the read side's parts find wrong with their own state (tests).
    func invariantViolations() -> [String] {
        budget.invariantViolations() + pool.invariantViolations() + walkAhead.invariantViolations()
    }
}
