import Foundation
import StorageModel

/// What the mount options of docs/SEMANTICS.md §3 decide for the core. The values written here are the
/// defaults, in this one place: the command line's options take theirs from `MountConfig.defaults`.
public struct MountConfig: Sendable {
    /// The defaults of every option (the command line shows them in `--help`).
    public static let defaults = MountConfig()

    public var readOnly = false
    /// The moment a mount at a moment shows (`--at`; read-only): modes show as they were then,
    /// not masked to read-only ones as a live `--read-only` mount masks them.
    public var pastMoment: Date?
    /// The mount's root is a prefix of the bucket (`gs://B/PREFIX`), whose placeholder object
    /// `PREFIX/` the store names "": the root's times, mode and xattrs live there. A whole
    /// bucket's root has no object (docs/SEMANTICS.md §3.2): its times and mode are the mount
    /// options', a change of them is accepted and kept nowhere, and its xattrs cannot be set.
    public var rootIsPrefix = false
    public var uid: UInt32 = getuid()
    public var gid: UInt32 = getgid()
    public var fileMode: UInt32 = 0o644
    public var dirMode: UInt32 = 0o755
    /// Modes, owners and symbolic links kept in gsutil's / gcloud's custom metadata keys (docs/SEMANTICS.md §3):
    /// read into `stat`, written by chmod, chown, create, mkdir and symlink. Off: every file and
    /// directory shows the options above, and none of those keys is read or written.
    public var posixMetadata = true
    /// How long entries, attributes and listings are trusted.
    public var metadataTTL: Double = 5
    /// Where the store's requests go and which setting chose it (`http://127.0.0.1:9023, set by
    /// --endpoint`), named in the log line of an operation that could not reach it
    /// (docs/SEMANTICS.md §5). Nil: not named.
    public var storageAddress: String?
    /// maxResults of each list call.
    public var listPageSize = 1000
    /// List requests in flight at once for one directory: past its first page, a listing asks
    /// for several name ranges at once (1: the pages one after another).
    public var listConcurrency = 16
    /// Objects a flat bucket's directory rename moves at once (each a copy, then the delete of
    /// its source): docs/SEMANTICS.md §3.2.
    public var renameConcurrency = 16
    /// The bound on cached metadata: files' and directories' metadata count one each, and each
    /// name in a cached directory listing one; past it the oldest are evicted (read again when
    /// next needed). Inodes the kernel holds keep their numbers whatever is evicted.
    public var maxCachedEntries = 100_000
    /// One memory budget for everything fetched ahead of readers, mount-wide (bytes): parts ahead
    /// of sequential readers and small files ahead of a tree walk.
    public var readAheadBudget = 128 << 20
    /// Parts of a sequential read start at `readPartFirst` bytes and double up to `readPartMax`.
    public var readPartFirst = 1 << 20
    public var readPartMax = 8 << 20
    /// Ranged requests in flight or unread ahead of one sequential reader, at first.
    public var readStreams = 4
    /// The most a sequential reader that keeps waiting for bytes on their way grows to (the mount
    /// sets it to its connections; docs/SEMANTICS.md §3.6).
    public var readStreamsMax = 16
    /// Reads of the bucket's files bypass the kernel's page cache (`--direct-io`; docs/SEMANTICS.md
    /// §3.6): every read comes to the read path, and no page cache is filled.
    public var directReads = false
    /// The kernel's read-ahead for the mount (bytes): it sends a sequential reader's requests
    /// for this much at once, and they may arrive in any order within it.
    public var kernelReadAhead = 1 << 20
    /// The most small files downloaded at once ahead of a process once its reads show a walk
    /// through a directory (in the listing's or inode numbers' order), and twice as many kept for
    /// a reopen (0: off). The mount caps it at the store's connections (docs/SEMANTICS.md §3.6).
    public var walkAheadFiles = 16
    /// The largest file fetched ahead of a walk (bytes).
    public var walkAheadMaxSize = 1 << 20
    /// A file fetched ahead of a walk whose download runs this many times the 90th percentile of
    /// the recent ones is asked for again, the first answer winning (0: never; docs/SEMANTICS.md §3.6).
    public var walkHedge: Double = 2
    /// The least a walk-ahead download runs before it is asked for again (seconds).
    public var walkHedgeFloor: Double = 0.02
    /// How long a file fetched ahead of a walk waits to be opened before it is dropped (seconds).
    public var walkAheadTTL: Double = 10
    /// The read cache on local disk (docs/SEMANTICS.md §3.6, "The read cache"): its directory
    /// (nil: off) and its bound in bytes.
    public var readCacheDirectory: String? = nil
    public var readCacheBytes: Int64 = 10 << 30
    /// How the read cache writes its files (tests inject a full disk).
    var readCacheWriter: CacheFill.Writer = CacheFill.pwriteAll
    /// Where written files are staged before upload, and where data of failed uploads is kept.
    public var cacheDirectory: String = NSTemporaryDirectory() + "bucketfs-cache"
    /// One deadline per filesystem operation, all its requests and retries included (seconds).
    public var operationTimeout: Double = 60
    /// How long a regular file made with mknod waits, in the default mode, for an open to write it
    /// before it is uploaded empty (seconds; docs/SEMANTICS.md §3.3, "One generation per written file").
    public var mknodUploadDelay: Double = 5
    /// How long an object or listing whose request just failed (EIO) answers EIO at once.
    public var failureTTL: Double = 5
    /// How long what the store's access rules said about creating files in a directory (and of
    /// a content type) is reused before the next create there asks again (seconds; 0: ask at
    /// every create). Only stores with rules to ask (firebase://) ask at all.
    public var createAnswerTTL: Double = 300
    /// Background attempts after a failed upload, before its data goes to lost+found.
    public var uploadRetries = 5
    /// Pauses between background upload attempts start at 1 s and double up to this (seconds).
    public var retryBackoffMax: Double = 30
    /// The core's clock (docs/ARCHITECTURE.md, "One clock"): what time it is for caches' TTLs,
    /// stat's times and the write-back delay, and how retry pauses (background uploads, reads of
    /// the wrong length) wait. Real time, or a test's `ManualClock`.
    public var clock: BucketClock = .real
    /// Write-back (docs/SEMANTICS.md §3): close returns once the data is staged; uploads run in the
    /// background in the order files were closed (UploadQueue.swift). Off: close reports the upload.
    public var writeBack = false
    /// Background uploads under way at once in write-back mode.
    public var uploadConcurrency = 8
    /// Seconds from a close to the start of its upload in write-back mode: the xattrs, times and
    /// rename a tool sets right after close (rsync's temporary name) join the upload that waits
    /// (docs/SEMANTICS.md §3.4).
    public var writeBackDelay: Double = 0.5
    /// The write-back queue's bound: files waiting for their upload, and bytes of their data;
    /// a close that finds the queue full waits until an upload starts (docs/SEMANTICS.md §3.4).
    public var writeBackMaxFiles = 10_000
    public var writeBackMaxBytes: Int64 = 4 << 30
    /// Streamed uploads (docs/SEMANTICS.md §3.3): a new file written in order from its start
    /// begins its one resumable upload once `streamUploadStart` bytes are written, and sends each
    /// `streamUploadChunk` bytes the writer adds; close sends the rest. Off with write-back, and on
    /// a store that cannot stream (the file is then uploaded whole at close). On by default, as
    /// measured (docs/SEMANTICS.md §3.3, "Why on by default").
    public var streamUploads = true
    public var streamUploadStart: Int64 = 8 << 20
    public var streamUploadChunk: Int64 = 8 << 20
    /// The type an object created here gets when nobody gives one, at its upload and again at a
    /// rename when that type was inferred here (docs/SEMANTICS.md §4.1).
    public var contentTypes = ContentTypePolicy()
    /// Debug builds only: the superblock's invariants are checked each time its lock is released,
    /// and a broken one is handed to `brokenInvariant` with the place of the critical section that
    /// broke it (docs/ARCHITECTURE.md, "The superblock's lock"). On in the core's tests; O(inodes)
    /// at each release, so off in a mount.
    public var checksInvariantsAtUnlock = false
    /// What a broken invariant found at a release of the lock does: stops the process, naming
    /// what broke and where, unless a test records it instead.
    public var brokenInvariant: @Sendable (_ violations: [String], _ at: String) -> Void = { bad, at in
        preconditionFailure("the superblock's invariants broke in the critical section at \(at): \(bad.joined(separator: "; "))")
    }

    public init() {}

    /// Where a file whose upload failed is kept for the user to recover.
    public var lostAndFound: String { cacheDirectory + "/lost+found" }
}
