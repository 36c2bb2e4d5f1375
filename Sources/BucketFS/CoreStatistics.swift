import Foundation

/// Which cache answered (or could not answer) a question.
public enum CacheKind: String, Sendable, CaseIterable {
    /// A file's or directory's metadata (stat, xattrs) within `--metadata-ttl`.
    case attributes
    /// A directory's children within `--metadata-ttl` (lookups and readdir).
    case listing
}

/// Hit and miss counts of the core's caches, since the mount started. Thread-safe.
public final class CacheCounters: @unchecked Sendable {
    private let lock = NSLock()
    private var hits: [CacheKind: Int] = [:]
    private var misses: [CacheKind: Int] = [:]

    public init() {}

    public func count(_ kind: CacheKind, hit: Bool) {
        lock.withLock {
            if hit { hits[kind, default: 0] += 1 } else { misses[kind, default: 0] += 1 }
        }
    }

    public func snapshot() -> (hits: [CacheKind: Int], misses: [CacheKind: Int]) {
        lock.withLock { (hits, misses) }
    }
}

/// A snapshot of what the core holds, for the metrics endpoint.
public struct CoreStatistics: Sendable, Equatable {
    /// Inodes in the table (the kernel holds them, or something local or a cached listing does).
    public var inodes = 0
    /// What `--max-cached-entries` bounds (the objects whose info or name in a cached listing is
    /// held, fresh or not, each once), and that bound.
    public var cachedEntries = 0
    public var maxCachedEntries = 0
    /// Files and directories whose metadata is cached and fresh.
    public var cachedAttributes = 0
    /// Directories whose listing is cached and fresh, and the names those listings hold.
    public var cachedListings = 0
    public var cachedListingEntries = 0
    /// Open file handles.
    public var openFiles = 0
    /// Bytes reserved for what is fetched ahead of readers (the `--read-ahead-mb` budget in use).
    public var readAheadBytes = 0
    /// Files with local content (open for writing or created here), and those not yet uploaded.
    public var stagedFiles = 0
    public var dirtyFiles = 0
    /// Bytes of content not yet in the bucket (the dirty files' sizes).
    public var pendingBytes: Int64 = 0
    /// Write-back: files waiting for their upload, and uploads under way.
    public var queuedUploads = 0
    public var uploadingFiles = 0
    /// Upload attempts that failed since the mount started, in every mode (each then retried,
    /// and kept in lost+found if it never succeeds).
    public var failedUploads = 0
    /// Errors writing to the cache directory, by errno name (`ENOSPC`, `EDQUOT`, …).
    public var cacheErrors: [String: Int] = [:]
    /// Files kept in `CACHE_DIR/lost+found/` for the user to recover.
    public var lostAndFoundEntries = 0
    public var hits: [CacheKind: Int] = [:]
    public var misses: [CacheKind: Int] = [:]
    /// Walk-ahead downloads asked for a second time because the first ran long, and those whose
    /// second answer came first (`Hedge`).
    public var walkHedges = 0
    public var walkHedgesWon = 0
    /// The read cache's counts (`--read-cache-dir`); nil when it is off.
    public var readCache: ReadCache.Counts?
    /// List pages by how they were asked for, name ranges, and whether the store honours them.
    public var listing = RangeListingCounts()

    public init() {}
}

extension BucketFileSystem {
    /// What the core holds now, for the metrics endpoint. O(inodes), under the superblock's lock once; it only
    /// reads (files fetched ahead of a walk and never opened leave the budget when the walk-ahead's
    /// own sweep drops them, at most `walkAheadTTL` and a moment after they were fetched).
    public func statistics() -> CoreStatistics {
        var s = CoreStatistics()
        superblock.statistics(into: &s)
        s.readAheadBytes = readBudget.inUse
        (s.walkHedges, s.walkHedgesWon) = readPath.hedge.counts
        s.listing = rangeListing.snapshot
        s.readCache = readPath.readCache?.snapshot
        (s.queuedUploads, s.uploadingFiles, _) = uploads.counts
        (s.failedUploads, s.cacheErrors) = uploadCounters.snapshot
        // Each kept file has a JSON sidecar naming its object: count the data files (not the
        // sidecars, nor the hidden temporary file Foundation writes a sidecar through).
        let kept = (try? FileManager.default.contentsOfDirectory(atPath: staging.lostAndFound)) ?? []
        s.lostAndFoundEntries = kept.filter { !$0.hasSuffix(".json") && !$0.hasPrefix(".") }.count
        (s.hits, s.misses) = cacheCounters.snapshot()
        return s
    }
}
