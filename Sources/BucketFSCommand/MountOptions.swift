import ArgumentParser
import BucketFS
import Foundation
import GCSStore

// The options of `bucketfs mount`, in the groups `--help` shows (mount, caching, Cloud Storage,
// logging and metrics). `Mount` reads them through the forwarding properties at the end. Their
// defaults are `MountConfig.defaults` (and `GCSStore.Tuning()` for the connection options), so a
// default is written once.

struct MountBehaviourOptions: ParsableArguments {
    @Flag(name: .customLong("read-only"), help: "Refuse every change with EROFS.") var readOnly = false
    @Option(name: .customLong("at"), help: "Show the bucket as it was at TIME, read-only: an RFC 3339 time (2026-11-20T10:00:00Z) or a duration back from now (90m, 2h, 3d). Needs a bucket that keeps old versions (docs/RESTORE.md). Default: now, live.")
    var at: String?
    @Option(help: "Owner of every file (default: the caller).") var uid: UInt32?
    @Option(help: "Group of every file (default: the caller's).") var gid: UInt32?
    @Option(name: .customLong("file-mode"), help: "Permission bits of files, octal.") var fileMode: String = String(MountConfig.defaults.fileMode, radix: 8)
    @Option(name: .customLong("dir-mode"), help: "Permission bits of directories, octal.") var dirMode: String = String(MountConfig.defaults.dirMode, radix: 8)
    @Flag(name: .customLong("allow-other"), help: "Let other users see the mount (needs user_allow_other for non-root).")
    var allowOther = false
    @Option(name: .customLong("posix-metadata"),
            help: "on: modes, owners and symbolic links are kept in gsutil's/gcloud's goog-reserved-posix-* and goog-reserved-file-is-symlink keys; off: every file shows --file-mode/--dir-mode/--uid/--gid and none of those keys is read or written.")
    var posixMetadata: OnOff = MountConfig.defaults.posixMetadata ? .on : .off
    @Flag(name: .customLong("write-back"), help: "close returns once the data is staged; uploads run in the background in the order files were closed (fsync and unmount still wait; a failed upload is retried, then kept in CACHE_DIR/lost+found and logged). Off: close reports the upload.")
    var writeBack = false
    @Option(name: .customLong("upload-concurrency"), help: "With --write-back: uploads under way at once.")
    var uploadConcurrency: Int = MountConfig.defaults.uploadConcurrency
    @Option(name: .customLong("write-back-delay"), help: "With --write-back: seconds from a close to the start of its upload, so that the xattrs, times and rename a tool sets right after close (rsync) join it.")
    var writeBackDelay: Double = MountConfig.defaults.writeBackDelay
    @Option(name: .customLong("write-back-max-files"), help: "With --write-back: files waiting for their upload at most; a close that finds the queue full waits until an upload starts.")
    var writeBackMaxFiles: Int = MountConfig.defaults.writeBackMaxFiles
    @Option(name: .customLong("write-back-max-mb"), help: "With --write-back: MiB of data waiting for upload at most; a close that finds the queue full waits until an upload starts.")
    var writeBackMaxMB: Int = Int(MountConfig.defaults.writeBackMaxBytes >> 20)
    @Option(name: .customLong("stream-uploads"), help: "on: a new file written in order from its start begins its one resumable upload while it is written (once --stream-upload-mb MiB are written), and close sends only the rest; a seek back, a truncate, another writer, a rename or changed metadata before close cancels it and the file is uploaded whole at close. Off with --write-back, and on a store that cannot stream.")
    var streamUploads: OnOff = MountConfig.defaults.streamUploads ? .on : .off
    @Option(name: .customLong("stream-upload-mb"), help: "With --stream-uploads on: MiB written in order before the upload starts, and MiB sent per request while the file is written.")
    var streamUploadMB: Int = Int(MountConfig.defaults.streamUploadChunk >> 20)
    @Flag(help: "Stay in the foreground (logs go to standard error); for systemd units and debugging.")
    var foreground = false
    @Flag(name: .customLong("allow-shared-files"), help: SharedFiles.help)
    var allowSharedFiles = false
    @Flag(name: .customLong("allow-non-empty"), help: "Mount over a directory that has entries (hidden while mounted); refused without it.")
    var allowNonEmpty = false
}

struct CachingOptions: ParsableArguments {
    @Option(name: .customLong("metadata-ttl"), help: "Seconds entries, attributes and listings are trusted.")
    var metadataTTL: Double = MountConfig.defaults.metadataTTL
    @Option(name: .customLong("cache-dir"), help: "Where writes are staged before upload and failed uploads are kept (CACHE_DIR/lost+found).")
    var cacheDir: String?
    @Option(name: .customLong("read-cache-dir"), help: "Keep what is read in this directory, across opens and mounts, checked, within --read-cache-mb (gs:// and firebase://; one mount per directory). Off by default; --read-cache-mb alone uses CACHE_DIR/read-cache.")
    var readCacheDir: String?
    @Option(name: .customLong("read-cache-mb"), help: "Bound on the read cache, MiB (default \(MountConfig.defaults.readCacheBytes >> 20) once it is on); the least recently used files go first.")
    var readCacheMB: Int?
    @Flag(name: .customLong("no-kernel-reads"), help: "Serve every read of the read cache's files through bucketfs, checked block by block, instead of letting the kernel read a complete, checked file itself (FUSE passthrough; Linux 6.9 or later, as root).")
    var noKernelReads = false
    @Flag(name: .customLong("direct-io"), help: "Reads of the bucket's files bypass the kernel's page cache (FOPEN_DIRECT_IO): one copy fewer and no page cache filled (large files read once: data sets, checkpoints); a re-read comes to bucketfs again. Files complete in the read cache stay the kernel's to read.")
    var directIO = false
    @Option(name: .customLong("read-ahead-mb"), help: "Memory for everything fetched ahead of readers, all open files together, MiB (0: read on demand only).")
    var readAheadMB: Int = MountConfig.defaults.readAheadBudget >> 20
    @Option(name: .customLong("read-streams"), help: "Ranged requests in flight ahead of one sequential reader at first (0: no read-ahead); a reader that keeps waiting for them gets twice as many, up to --max-connections.")
    var readStreams: Int = MountConfig.defaults.readStreams
    @Option(name: .customLong("read-part-mb"), help: "Largest ranged request of a sequential read, MiB (parts start at \(MountConfig.defaults.readPartFirst >> 20) MiB and double).")
    var readPartMB: Int = MountConfig.defaults.readPartMax >> 20
    @Option(name: .customLong("walk-ahead"), help: "The most small files (up to \(MountConfig.defaults.walkAheadMaxSize >> 20) MiB) downloaded at once ahead of a process once its reads show a walk through a directory (listing order: tar, rsync, restic; inode order: borg), at most --max-connections; and kept for a reopen (0: off).")
    var walkAheadFiles: Int = MountConfig.defaults.walkAheadFiles
    @Option(name: .customLong("walk-hedge"), help: "A small file fetched ahead of a walk whose download runs this many times the 90th percentile of the recent ones (at least \(Int(MountConfig.defaults.walkHedgeFloor * 1000)) ms) is asked for again, and the first answer wins (0: off).")
    var walkHedge: Double = MountConfig.defaults.walkHedge
    @Option(name: .customLong("max-connections"), help: "HTTP connections to Cloud Storage at once (requests beyond wait for one).")
    var maxConnections: Int = GCSStore.Tuning().maxConnectionsPerHost
    @Option(name: .customLong("upload-chunk-mb"), help: "gs:// uploads over 8 MiB go as one streamed request of a resumable session, resumed from what the server kept after a fault (0, the default); a size here sends them in requests of that many MiB instead, for servers or proxies that need it.")
    var uploadChunkMB: Int = (GCSStore.Tuning().chunkSize ?? 0) >> 20
    @Option(name: .customLong("kernel-read-ahead-kb"), help: "The kernel's read-ahead for this mount, KiB: the size of the read requests a sequential reader sends (needs root; 0 keeps the kernel's 128).")
    var kernelReadAheadKB: Int = MountConfig.defaults.kernelReadAhead >> 10
    @Option(name: .customLong("list-page-size"), help: "maxResults of each list call (1…1000).")
    var listPageSize: Int = MountConfig.defaults.listPageSize
    @Option(name: .customLong("list-concurrency"), help: "List requests in flight at once for one directory: past its first page, a listing asks for that many name ranges at once (1: one page after another).")
    var listConcurrency: Int = MountConfig.defaults.listConcurrency
    @Option(name: .customLong("max-cached-entries"),
            help: "Bound on cached metadata: each object whose metadata or name in a cached listing is held counts one, once; the oldest go first.")
    var maxCachedEntries: Int = MountConfig.defaults.maxCachedEntries
}

struct FaultOptions: ParsableArguments {
    @Option(name: .customLong("op-timeout"), help: "Seconds one filesystem operation may take, all its requests and retries included; then EIO.")
    var opTimeout: Double = MountConfig.defaults.operationTimeout
    @Option(name: .customLong("idle-timeout"), help: "Seconds a response may send nothing before it is abandoned and retried.")
    var idleTimeout: Double = GCSStore.Tuning().idleTimeout.seconds
    @Option(name: .customLong("upload-retries"), help: "Background attempts after a failed upload before its data goes to CACHE_DIR/lost+found.")
    var uploadRetries: Int = MountConfig.defaults.uploadRetries
    @Option(name: .customLong("retry-backoff-max"), help: "Longest pause between background upload attempts, seconds (pauses start at 1 s and double).")
    var retryBackoffMax: Double = MountConfig.defaults.retryBackoffMax
    @Option(name: .customLong("failure-ttl"), help: "Seconds an object or listing whose request just failed answers EIO at once.")
    var failureTTL: Double = MountConfig.defaults.failureTTL
}

struct MonitoringOptions: ParsableArguments {
    @Option(name: .customLong("log-file"), help: "Where the mount logs: a background mount by default CACHE_DIR/bucketfs.log; a foreground one standard error unless given (critical lines then go to both).")
    var logFile: String?
    @Option(name: .customLong("request-log"), help: "Append one line per store request to this file (tests, debugging).")
    var requestLog: String?
    @Option(name: .customLong("metrics-address"),
            help: ArgumentHelp("Serve Prometheus metrics at http://HOST:PORT/metrics (HOST defaults to 127.0.0.1). Off by default.",
                               valueName: "[HOST:]PORT"))
    var metricsAddress: String?
    @Option(name: .customLong("log-summary-minutes"),
            help: ArgumentHelp("Log a summary of the uploads (notice level) every N minutes, and at unmount; 0: at unmount only.",
                               valueName: "N"))
    var logSummaryMinutes = 60
    /// Set by a background mount on the process it starts: the source was already checked.
    @Flag(name: .customLong("source-checked"), help: .hidden) var sourceChecked = false

    func validate() throws {
        if let metricsAddress { _ = try MetricsAddress(parsing: metricsAddress) }
        if logSummaryMinutes < 0 { throw ValidationError("--log-summary-minutes takes a number of minutes, 0 or more") }
    }
}

extension Mount {
    var readOnly: Bool { behaviour.readOnly || behaviour.at != nil }
    var uid: UInt32? { behaviour.uid }
    var gid: UInt32? { behaviour.gid }
    var fileMode: String { behaviour.fileMode }
    var dirMode: String { behaviour.dirMode }
    var allowOther: Bool { behaviour.allowOther }
    var posixMetadata: Bool { behaviour.posixMetadata == .on }
    var foreground: Bool { behaviour.foreground }
    var writeBack: Bool { behaviour.writeBack }
    var uploadConcurrency: Int { behaviour.uploadConcurrency }
    var writeBackDelay: Double { behaviour.writeBackDelay }
    var writeBackMaxFiles: Int { behaviour.writeBackMaxFiles }
    var writeBackMaxMB: Int { behaviour.writeBackMaxMB }
    var streamUploads: Bool { behaviour.streamUploads == .on }
    var streamUploadMB: Int { behaviour.streamUploadMB }
    var metadataTTL: Double { caching.metadataTTL }
    var cacheDir: String? { caching.cacheDir }
    var readAheadMB: Int { caching.readAheadMB }
    var readCacheDir: String? { caching.readCacheDir }
    var readCacheMB: Int? { caching.readCacheMB }
    var noKernelReads: Bool { caching.noKernelReads }
    var directIO: Bool { caching.directIO }
    var readStreams: Int { caching.readStreams }
    var walkAheadFiles: Int { caching.walkAheadFiles }
    var walkHedge: Double { caching.walkHedge }
    var readPartMB: Int { caching.readPartMB }
    var kernelReadAheadKB: Int { caching.kernelReadAheadKB }
    var maxConnections: Int { caching.maxConnections }
    var uploadChunkMB: Int { caching.uploadChunkMB }
    var listPageSize: Int { caching.listPageSize }
    var listConcurrency: Int { caching.listConcurrency }
    var maxCachedEntries: Int { caching.maxCachedEntries }
    var opTimeout: Double { faults.opTimeout }
    var idleTimeout: Double { faults.idleTimeout }
    var uploadRetries: Int { faults.uploadRetries }
    var retryBackoffMax: Double { faults.retryBackoffMax }
    var failureTTL: Double { faults.failureTTL }
    var logFile: String? { monitoring.logFile }
    var requestLog: String? { monitoring.requestLog }
    var allowSharedFiles: Bool { behaviour.allowSharedFiles }

    /// Printed after the options by `bucketfs mount --help`.
    static let examples = """
        EXAMPLES:
          # Try it with no cloud account: an embedded bucket in a local directory
          bucketfs mount ~/bucket ~/mnt

          # A Cloud Storage (or Firebase) bucket with a service account key, read-only, with metrics
          bucketfs mount gs://my-project.firebasestorage.app /mnt/storage \\
              --key-file ~/sa.json --read-only --metrics-address 127.0.0.1:9101

          # The local emulator, in the foreground with JSON logs (as a systemd unit runs it)
          bucketfs mount gs://bucketfs-test /mnt/test --endpoint http://127.0.0.1:9023 --anonymous \\
              --foreground --log-format json --log-level info

        Unmount with `bucketfs unmount MOUNTPOINT` (or fusermount3 -u). `man bucketfs` has the rest.
        """
}

private extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// An option that is on or off (`--posix-metadata off`).
enum OnOff: String, ExpressibleByArgument, CaseIterable, Sendable {
    case on, off
}

/// The content type of objects created with none given (docs/SEMANTICS.md §4.1): `mount` and `put`.
struct ContentTypeOptions: ParsableArguments {
    @Option(name: .customLong("content-type-default"), help: "Content type of a new object whose name has no known type (or of every new object, with --no-infer-content-type).")
    var contentTypeDefault: String = ContentTypePolicy.serverDefault
    @Flag(name: .customLong("no-infer-content-type"), help: "Do not take a new object's content type from its name (/etc/mime.types); give it --content-type-default.")
    var noInfer = false

    var policy: ContentTypePolicy { ContentTypePolicy(infer: !noInfer, defaultType: contentTypeDefault) }
}
