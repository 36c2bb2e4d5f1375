import ArgumentParser
import BucketFS
import CloudHTTP
import Foundation
import FuseKit
import GCSStore
import Logging
import StorageModel

struct Mount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount SOURCE (gs://BUCKET[/PREFIX], firebase://BUCKET[/PREFIX], file://DIR or DIR) at MOUNTPOINT. Returns once the mount answers.",
        discussion: """
            Examples:
              bucketfs mount gs://my-bucket ~/bucket --key-file ~/key.json
              bucketfs login firebase://my-app.firebasestorage.app --api-key KEY --email you@example.com
              bucketfs mount firebase://my-app.firebasestorage.app/users/UID ~/storage
              bucketfs mount ~/local-bucket ~/mnt
            """)

    @Argument(help: "gs://BUCKET[/PREFIX], firebase://BUCKET[/PREFIX] (after bucketfs login), file://DIR or a directory (the embedded bucket, created if missing)")
    var source: String
    @Argument var mountpoint: String
    @OptionGroup(title: "Mount") var behaviour: MountBehaviourOptions
    @OptionGroup(title: "Caching and writes") var caching: CachingOptions
    @OptionGroup(title: "Caching and writes") var contentTypes: ContentTypeOptions
    @OptionGroup(title: "Timeouts and retries") var faults: FaultOptions
    @OptionGroup(title: "Cloud Storage") var gcs: GCSOptions
    @OptionGroup(title: "Firebase") var firebase: FirebaseOptions
    @OptionGroup(title: "Logging and metrics") var log: LogOptions
    @OptionGroup(title: "Logging and metrics") var monitoring: MonitoringOptions
    /// What the gcsfuse command line gave that changes nothing here, logged once (GCSFuse).
    @Option(name: .customLong("compat-note"), help: .hidden) var compatNotes: [String] = []

    func validate() throws {
        if target.isPreMounted {
            // The process that mounted the descriptor waits for this one: no second process, and
            // no path to name a cache directory after (every pod's would be /dev/fd/3).
            guard foreground else {
                throw ValidationError("a \(target) target is served in the foreground: add --foreground (the process that mounted it starts bucketfs and waits for it)")
            }
            guard cacheDir != nil else {
                throw ValidationError("a \(target) target needs --cache-dir (gcsfuse's --temp-dir): the directory for staged writes and lost+found, one per mount")
            }
            guard !writeBack else {
                throw ValidationError("--write-back is refused for a \(target) target: its cache directory goes with the pod, and so would the data that close reported saved (docs/KUBERNETES.md, \"What a pod's end can lose\")")
            }
        }
        if let at = behaviour.at {
            do { _ = try PointInTime(parsing: at, now: BucketClock.real.date) } catch { throw ValidationError("--at: \(error)") }
            // Said at once, before any login or request: the v0 API lists live objects only.
            if let parsed = try? Source.parse(source, splitLocal: false), case .firebase = parsed {
                throw ValidationError(KeptPast.none(source: parsed.display))
            }
        }
        guard UInt32(fileMode, radix: 8) != nil, UInt32(dirMode, radix: 8) != nil else {
            throw ValidationError("--file-mode and --dir-mode take octal permission bits, e.g. 644")
        }
        guard (1...1000).contains(listPageSize) else { throw ValidationError("--list-page-size must be 1…1000") }
        guard (1...256).contains(listConcurrency) else { throw ValidationError("--list-concurrency must be 1…256") }
        guard uploadChunkMB >= 0 else { throw ValidationError("--upload-chunk-mb must be ≥ 0 (0: the whole file in one request)") }
        guard uploadConcurrency >= 1 else { throw ValidationError("--upload-concurrency must be ≥ 1") }
        guard streamUploadMB >= 1, streamUploadMB <= 1024 else { throw ValidationError("--stream-upload-mb must be between 1 and 1024") }
        guard writeBackDelay >= 0, writeBackDelay <= 3600 else { throw ValidationError("--write-back-delay must be between 0 and 3600 seconds") }
        guard writeBackMaxFiles >= 1, writeBackMaxMB >= 1 else { throw ValidationError("--write-back-max-files and --write-back-max-mb must be at least 1") }
        guard metadataTTL >= 0 else { throw ValidationError("--metadata-ttl must be ≥ 0") }
        guard maxCachedEntries >= 1 else { throw ValidationError("--max-cached-entries must be ≥ 1") }
        guard opTimeout > 0, idleTimeout > 0 else { throw ValidationError("--op-timeout and --idle-timeout must be > 0") }
        guard uploadRetries >= 0, retryBackoffMax >= 0, failureTTL >= 0 else {
            throw ValidationError("--upload-retries, --retry-backoff-max and --failure-ttl must be ≥ 0")
        }
    }

    var mountpointPath: String { URL(fileURLWithPath: mountpoint).standardizedFileURL.path }

    /// The mount point: a directory, or a FUSE descriptor a parent mounted (`/dev/fd/N`).
    var target: MountTarget {
        MountTarget.descriptorNumber(mountpoint).map { .fileDescriptor($0) } ?? .directory(mountpointPath)
    }

    /// `--cache-dir`, else one directory per mount point that a later mount finds again.
    var cacheDirectory: String {
        cacheDir.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            ?? StagingArea.defaultDirectory(forMountPoint: mountpointPath)
    }

    /// Where a failed mount's messages go: the terminal, as JSON with `--log-format json`.
    var report: FailureReport { FailureReport(format: log.logFormat) }

    func run() async throws {
        if let problem = target.isPreMounted ? target.descriptorProblem()
            : MountPointCheck.problem(mountpointPath, allowNonEmpty: behaviour.allowNonEmpty) {
            report.say(problem)
            throw ExitCode(1)
        }
        if !monitoring.sourceChecked {
            try await checkSource()
            try checkLocalFiles()
        }
        if foreground { try await runForeground() } else { try startBackground() }
    }

    /// Re-runs this command with --foreground in a new session, then waits until the mount answers.
    func startBackground() throws {
        // A cache directory in use is refused here, on the terminal, before a process starts
        // (whose refusal would only reach the log file the other mount may be writing).
        if let refusal = CacheDirectoryLock.refusal(cacheDirectory) {
            report.say(refusal)
            throw ExitCode(1)
        }
        do { try StagingArea.prepare(cacheDirectory) } catch {
            report.say("\(error)")
            throw ExitCode(1)
        }
        if let problem = CacheDirectoryRoom.writeProblem(cacheDirectory) {
            report.say(problem)
            throw ExitCode(1)
        }
        if let warning = CacheDirectoryRoom.warning(cacheDirectory) { report.say(warning, level: .warning) }
        if let display = try? Source.parse(source, splitLocal: false).display {
            for line in CacheDirectoryRegistry.elsewhere(source: display, own: cacheDirectory) { report.say(line, level: .error) }
        }
        let logPath = logFile ?? cacheDirectory + "/bucketfs.log"
        let logFD = open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard logFD >= 0 else {
            report.say("cannot write the log file \(logPath) (--log-file; by default CACHE_DIR/bucketfs.log): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        close(logFD)
        // A token given with --id-token or --token reaches the mount process through its
        // environment, never its arguments (its process title is readable by every user).
        let now = Date()
        let (rest, secrets) = SecretArguments.extract(PastMount.pinned(effectiveArguments, now: now))
        var args = [CommandLine.arguments[0]] + rest
        args += ["--foreground", "--source-checked"]
        if cacheDir == nil { args += ["--cache-dir", cacheDirectory] }
        let logStart = (try? FileManager.default.attributesOfItem(atPath: logPath)[.size] as? NSNumber)?.intValue ?? 0
        var environment = ProcessInfo.processInfo.environment
        environment.merge(secrets) { $1 }
        // Mounts already at the mount point (another process may mount it meanwhile): only a new
        // one is this mount's.
        let point = MountPointCheck.resolved(mountpointPath)
        let before = Set(MountPointCheck.mounts(at: point).map(\.id))
        let pid = try Daemon.spawn(executable: "/proc/self/exe", arguments: args, environment: environment, logPath: logPath)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if MountPointCheck.mounts(at: point).contains(where: { $0.type == "fuse.bucketfs" && !before.contains($0.id) }) {
                var st = statvfs()
                if statvfs(mountpointPath, &st) == 0 {
                    if let at = behaviour.at, let moment = try? PointInTime(parsing: at, now: now) {
                        print("\(mountpointPath) shows \(source) as it was at \(moment), read-only")
                    }
                    return
                }
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                let tail = Daemon.tail(logPath, from: logStart)
                report.say("mount failed (see \(logPath)); its last lines follow")
                FileHandle.standardError.write(Data((tail + "\n").utf8))
                throw ExitCode(1)
            }
            usleep(50_000)
        }
        kill(pid, SIGTERM)
        report.say("the mount did not answer within 30 s (see \(logPath))")
        throw ExitCode(1)
    }

    func runForeground() async throws {
        // Large allocations (a list page, its decoded arrays, the inode tables) always get their
        // own mappings, returned to the system when freed. glibc's default raises its mmap
        // threshold after the first large free (up to 32 MiB), after which such buffers come
        // from the heap and their freed pages stay resident (Scripts/bench-walk.sh's memory
        // column after `ls -l` of 100,000 objects shows the difference).
        _ = setMallocOption(mallocMmapThreshold, 128 << 10)
        // Every staged file keeps its descriptor until its upload; with --write-back a thousand
        // files may wait at once: the soft limit on descriptors goes up to the hard one.
        var files = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files) == 0, files.rlim_cur < files.rlim_max {
            files.rlim_cur = files.rlim_max
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files)
        }
        let logger = log.bootstrap(file: logFile)
        for note in compatNotes { logger.notice("\(note)") }
        let parsed = try Source.parse(source, splitLocal: false)
        var store: any ObjectStore
        var storageAddress: String?
        var counting: (any ConnectionCounting)?
        do {
            var tuning = GCSStore.Tuning()
            tuning.idleTimeout = .milliseconds(Int64(idleTimeout * 1000))
            tuning.maxConnectionsPerHost = max(1, maxConnections)
            tuning.chunkSize = uploadChunkMB > 0 ? uploadChunkMB << 20 : nil
            store = try openStore(parsed, gcs: gcs, firebase: firebase, logger: logger, prefixMount: true, tuning: tuning,
                                  deadline: .milliseconds(Int64(opTimeout * 1000)), runningMount: true)
            counting = store as? any ConnectionCounting
            storageAddress = StorageAddress.of(store, gcs: gcs, environment: ProcessInfo.processInfo.environment)
            if case .gcs(let bucket, _) = parsed, let check = try? CredentialCheck.resolve(gcs, environment: ProcessInfo.processInfo.environment) {
                // Who the mount goes as, once, without secrets (docs/CREDENTIALS.md).
                check.logNotices(logger, mounting: true)
                let described = await check.described(store as? GCSStore, environment: ProcessInfo.processInfo.environment)
                logger.notice("gs://\(bucket): \(described)")
                if let g = store as? GCSStore,
                   let left = await g.staticTokenTimeLeft(check.found.source, environment: ProcessInfo.processInfo.environment, timeout: .seconds(3)) {
                    logger.notice("--token / GOOGLE_OAUTH_ACCESS_TOKEN: \(left)")
                }
            }
            let gcs = store as? GCSStore
            // (First: `--metrics-address` bootstraps the metrics, and a connection made before
            // would be counted nowhere: the layout's request may open the one the mount keeps.)
            store = try instrument(store)
            // The bucket's layout, once (gs:// only: the embedded bucket and Firebase's are flat).
            if let gcs { try await gcs.learnLayout(timeout: SourceCheck.probeTimeout) }
            logger.info("\(BucketLayout.describe(gcs?.layout ?? .flat))")
            if let at = behaviour.at { store = try await PastMount.view(store, at: at, source: parsed.display, logger: logger) }
        } catch let e as PastMount.Refusal {
            logger.critical("cannot mount \(source): \(e)")
            throw ExitCode(1)
        } catch {
            logger.critical("cannot open \(source): \(error)")
            throw ExitCode(1)
        }
        var config = MountConfig()
        config.readOnly = readOnly
        config.pastMoment = (store as? PastStore)?.moment
        switch parsed {
        case .gcs(_, let path), .firebase(_, let path, _): config.rootIsPrefix = !path.isEmpty
        case .embedded: config.rootIsPrefix = false
        }
        if let uid { config.uid = uid }
        if let gid { config.gid = gid }
        config.fileMode = UInt32(fileMode, radix: 8) ?? MountConfig.defaults.fileMode
        config.dirMode = UInt32(dirMode, radix: 8) ?? MountConfig.defaults.dirMode
        config.posixMetadata = posixMetadata
        config.metadataTTL = metadataTTL
        config.storageAddress = storageAddress
        config.listPageSize = listPageSize
        config.listConcurrency = listConcurrency
        config.readAheadBudget = max(0, readAheadMB) << 20
        config.directReads = directIO
        config.readStreams = max(0, readStreams)
        // A reader waiting on the link grows to as many streams as the connections allow (docs/SEMANTICS.md §3.6).
        config.readStreamsMax = max(config.readStreams, maxConnections)
        config.readPartMax = max(1, readPartMB) << 20
        config.readPartFirst = min(config.readPartFirst, config.readPartMax)
        config.kernelReadAhead = (kernelReadAheadKB > 0 ? kernelReadAheadKB : 128) << 10
        // As wide as the connections allow, no wider (docs/SEMANTICS.md §3.6).
        config.walkAheadFiles = min(max(0, walkAheadFiles), max(1, maxConnections))
        config.walkHedge = max(0, walkHedge)
        config.maxCachedEntries = maxCachedEntries
        config.cacheDirectory = cacheDirectory
        // On with a directory or a bound (docs/SEMANTICS.md §3.6, "The read cache").
        if readCacheDir != nil || readCacheMB != nil {
            config.readCacheDirectory = readCacheDir.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? cacheDirectory + "/read-cache"
            config.readCacheBytes = Int64(max(0, readCacheMB ?? Int(MountConfig.defaults.readCacheBytes >> 20))) << 20
        }
        config.operationTimeout = opTimeout
        config.uploadRetries = uploadRetries
        config.retryBackoffMax = retryBackoffMax
        config.writeBack = writeBack
        config.uploadConcurrency = uploadConcurrency
        config.writeBackDelay = writeBackDelay
        config.writeBackMaxFiles = writeBackMaxFiles
        config.writeBackMaxBytes = Int64(writeBackMaxMB) << 20
        config.streamUploads = streamUploads
        config.streamUploadStart = Int64(streamUploadMB) << 20
        config.streamUploadChunk = Int64(streamUploadMB) << 20
        config.failureTTL = failureTTL
        config.contentTypes = contentTypes.policy
        let core: BucketFileSystem
        do {
            core = try BucketFileSystem(store: store, config: config, logger: logger)
        } catch {
            logger.critical("\(error)")
            throw ExitCode(1)
        }
        if let warning = CacheDirectoryRoom.warning(cacheDirectory) { logger.warning("\(warning)") }
        // What an earlier run of this cache directory left (its complete files are uploaded in
        // the background while the mount serves), and what runs of this source left in other
        // cache directories; then this one is recorded for later mounts and `recover`.
        let recoverCommand = "bucketfs recover \(cacheDirectory)"
        let settling = Task { await core.settleRecovered(recoverCommand: recoverCommand) }
        for line in CacheDirectoryRegistry.elsewhere(source: parsed.display, own: cacheDirectory) { logger.error("\(line)") }
        // A pre-mounted target is a pod's: it writes nothing outside its cache directory (no
        // state directory; docs/KUBERNETES.md, "A pod's life").
        if !target.isPreMounted, let problem = CacheDirectoryRegistry.record(.init(source: parsed.display, cacheDirectory: cacheDirectory,
                                                                                     mountPoint: mountpointPath)) {
            logger.warning("\(problem)")
        }
        Recover.recordSource(parsed.display, access: RecordedAccess.of(parsed, gcs: gcs), in: cacheDirectory)
        let fs = try await startMetrics(core, source: parsed.display, logger: logger)
        var options = ["fsname=bucketfs:" + source, "subtype=bucketfs", "default_permissions"]
        if allowOther { options.append("allow_other") }
        if readOnly { options.append("ro") }
        // Computed once, before the mount exists: URL(fileURLWithPath:) stats its path, and a
        // stat of the mount point before the loop runs would wait for ever on the kernel's INIT.
        let target = self.target
        let point = target.description
        let session = try FuseMounter.mount(filesystem: fs, target: target, options: options,
                                            passthrough: config.readCacheDirectory != nil && !noKernelReads, logger: logger)
        if let past = store as? PastStore {
            logger.notice("mounted \(source) at \(point) as it was at \(PointInTime(date: past.moment)), read-only")
        } else {
            logger.notice("mounted \(source) at \(point)")
        }
        if let directory = target.directory {
            KernelReadAhead.apply(kilobytes: kernelReadAheadKB, mountpoint: directory, logger: logger)
        } else {
            logger.info("\(point) was mounted by its parent: the kernel's read-ahead for it is the parent's to set (read_ahead_kb)")
        }
        let summaries = UploadSummary.every(minutes: monitoring.logSummaryMinutes, core, logger: logger, clock: config.clock)
        // systemd (Type=notify): READY=1 once the mount answers, STATUS= while it serves,
        // STOPPING=1 when the unmount begins.
        let notifier = ServiceNotifier()
        if let directory = target.directory {
            notifier?.readyWhenAnswering(directory, status: "mounted \(source) at \(point)", logger: logger)
        } else if let notifier {
            session.onReady = { notifier.send("READY=1\nSTATUS=serving \(source) at \(point)") }
        }
        let statuses = notifier?.statusEvery(.seconds(10), core, clock: config.clock)
        await FuseMounter.run(session)
        summaries.cancel()
        statuses?.cancel()
        notifier?.send("STOPPING=1\nSTATUS=unmounted; finishing \(core.statistics().dirtyFiles) upload(s)")
        logger.notice("unmounted \(point)")
        // Unsaved files (an upload in flight, or waiting for its next attempt): attempts under
        // way end, then one more try each, all within one bound; what fails goes to lost+found,
        // logged. A second SIGTERM/SIGINT/SIGHUP does not cut this short (SIGKILL does; the next
        // mount then finds the stage files and keeps their data in lost+found).
        for sig in [SIGTERM, SIGINT, SIGHUP] { signal(sig, SIG_IGN) }
        // What an earlier run left and the recovery has not settled yet stays as stage files,
        // for the next mount or `recover` (logged).
        settling.cancel()
        await settling.value
        await core.shutdown(within: .milliseconds(Int64(opTimeout * 1000)))
        if let counting { logger.notice("connections made: \(counting.connections)") }
        UploadSummary.log(core, logger: logger, when: "at unmount")
        logger.notice("exiting: every staged file is uploaded or kept in lost+found")
    }
}

struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unmount a bucketfs mount (fusermount3 -u).")
    @Argument var mountpoint: String
    @Flag(name: .shortAndLong, help: "Lazy unmount, even when busy.") var lazy = false

    func run() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        if !FileManager.default.fileExists(atPath: "/bin/fusermount3") { p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3") }
        p.arguments = (lazy ? ["-uz"] : ["-u"]) + [mountpoint]
        try p.run()
        p.waitUntilExit()
        if p.terminationStatus != 0 { throw ExitCode(p.terminationStatus) }
    }
}

/// Background start: a child in a new session with standard streams on a log file.
enum Daemon {
    static func spawn(executable: String, arguments: [String], environment: [String: String], logPath: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setflags(&attr, Int16(0x80))  // POSIX_SPAWN_SETSID (glibc)
        var pid: pid_t = 0
        let cargs = arguments.map { strdup($0) } + [nil]
        let cenv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { cargs.forEach { free($0) }; cenv.forEach { free($0) } }
        let rc = posix_spawn(&pid, executable, &actions, &attr, cargs, cenv)
        guard rc == 0 else { throw ValidationErrorText("cannot start the mount process: \(String(cString: strerror(rc)))") }
        return pid
    }

    /// The last lines this mount's process wrote to its log (written from `offset` on).
    static func tail(_ path: String, from offset: Int, lines: Int = 10) -> String {
        guard let h = FileHandle(forReadingAtPath: path) else { return "" }
        defer { try? h.close() }
        try? h.seek(toOffset: UInt64(offset))
        let text = String(decoding: h.readDataToEndOfFile(), as: UTF8.self)
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }
}

/// glibc's `mallopt` (malloc.h is not part of the Glibc module) and its `M_MMAP_THRESHOLD`.
@_silgen_name("mallopt")
private func setMallocOption(_ param: Int32, _ value: Int32) -> Int32
private let mallocMmapThreshold: Int32 = -3
