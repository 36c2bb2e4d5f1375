import ArgumentParser
import BucketFS
import Foundation
import FuseKit
import GCSStore
import Logging
import StorageModel

struct Mount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount SOURCE (gs://BUCKET[/PREFIX], file://DIR or DIR) at MOUNTPOINT. Returns once the mount answers.")

    @Argument(help: "gs://BUCKET[/PREFIX], file://DIR or a directory (the embedded bucket, created if missing)")
    var source: String
    @Argument var mountpoint: String
    @Flag(name: .customLong("read-only"), help: "Refuse every change with EROFS.") var readOnly = false
    @Option(help: "Owner of every file (default: the caller).") var uid: UInt32?
    @Option(help: "Group of every file (default: the caller's).") var gid: UInt32?
    @Option(name: .customLong("file-mode"), help: "Permission bits of files, octal.") var fileMode: String = "644"
    @Option(name: .customLong("dir-mode"), help: "Permission bits of directories, octal.") var dirMode: String = "755"
    @Option(name: .customLong("metadata-ttl"), help: "Seconds entries, attributes and listings are trusted.")
    var metadataTTL: Double = 5
    @Flag(name: .customLong("allow-other"), help: "Let other users see the mount (needs user_allow_other for non-root).")
    var allowOther = false
    @Flag(help: "Stay in the foreground (logs go to standard error).") var foreground = false
    @Option(name: .customLong("cache-dir"), help: "Where writes are staged before upload and failed uploads are kept.")
    var cacheDir: String?
    @Option(name: .customLong("read-ahead-mb"), help: "Largest read-ahead window per open file, MiB.")
    var readAheadMB: Int = 64
    @Option(name: .customLong("list-page-size"), help: "maxResults of each list call (1…1000).")
    var listPageSize: Int = 1000
    @Option(name: .customLong("log-file"), help: "Where a background mount logs (default: CACHE_DIR/bucketfs.log).")
    var logFile: String?
    @Option(name: .customLong("request-log"), help: "Append one line per store request to this file (tests, debugging).")
    var requestLog: String?
    @Option(name: .customLong("op-timeout"), help: "Seconds one filesystem operation may take, all its requests and retries included; then EIO.")
    var opTimeout: Double = 60
    @Option(name: .customLong("idle-timeout"), help: "Seconds a response may send nothing before it is abandoned and retried.")
    var idleTimeout: Double = 10
    @Option(name: .customLong("upload-retries"), help: "Background attempts after a failed upload before its data goes to CACHE_DIR/lost+found.")
    var uploadRetries: Int = 5
    @Option(name: .customLong("retry-backoff-max"), help: "Longest pause between background upload attempts, seconds (pauses start at 1 s and double).")
    var retryBackoffMax: Double = 30
    @Option(name: .customLong("failure-ttl"), help: "Seconds an object or listing whose request just failed answers EIO at once.")
    var failureTTL: Double = 5
    @OptionGroup var gcs: GCSOptions
    @OptionGroup var log: LogOptions

    func validate() throws {
        guard UInt32(fileMode, radix: 8) != nil, UInt32(dirMode, radix: 8) != nil else {
            throw ValidationError("--file-mode and --dir-mode take octal permission bits, e.g. 644")
        }
        guard (1...1000).contains(listPageSize) else { throw ValidationError("--list-page-size must be 1…1000") }
        guard metadataTTL >= 0 else { throw ValidationError("--metadata-ttl must be ≥ 0") }
        guard opTimeout > 0, idleTimeout > 0 else { throw ValidationError("--op-timeout and --idle-timeout must be > 0") }
        guard uploadRetries >= 0, retryBackoffMax >= 0, failureTTL >= 0 else {
            throw ValidationError("--upload-retries, --retry-backoff-max and --failure-ttl must be ≥ 0")
        }
    }

    var mountpointPath: String { URL(fileURLWithPath: mountpoint).standardizedFileURL.path }

    /// `--cache-dir`, else one directory per mount point that a later mount finds again.
    var cacheDirectory: String {
        cacheDir.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            ?? StagingArea.defaultDirectory(forMountPoint: mountpointPath)
    }

    func run() async throws {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: mountpointPath, isDirectory: &isDir), isDir.boolValue else {
            FileHandle.standardError.write(Data("bucketfs: mount point \(mountpointPath) is not a directory\n".utf8))
            throw ExitCode(1)
        }
        if foreground { try await runForeground() } else { try startBackground() }
    }

    /// Re-runs this command with --foreground in a new session, then waits until the mount answers.
    func startBackground() throws {
        do { try StagingArea.prepare(cacheDirectory) } catch {
            FileHandle.standardError.write(Data("bucketfs: \(error)\n".utf8))
            throw ExitCode(1)
        }
        let logPath = logFile ?? cacheDirectory + "/bucketfs.log"
        var args = [CommandLine.arguments[0]] + effectiveArguments
        args.append("--foreground")
        if cacheDir == nil { args += ["--cache-dir", cacheDirectory] }
        let pid = try Daemon.spawn(executable: "/proc/self/exe", arguments: args, logPath: logPath)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if Daemon.isMounted(mountpointPath) {
                var st = statvfs()
                if statvfs(mountpointPath, &st) == 0 { return }
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                let tail = (try? String(contentsOfFile: logPath, encoding: .utf8))?.split(separator: "\n").suffix(10).joined(separator: "\n") ?? ""
                FileHandle.standardError.write(Data("bucketfs: mount failed (see \(logPath)):\n\(tail)\n".utf8))
                throw ExitCode(1)
            }
            usleep(50_000)
        }
        kill(pid, SIGTERM)
        FileHandle.standardError.write(Data("bucketfs: the mount did not answer within 30 s (see \(logPath))\n".utf8))
        throw ExitCode(1)
    }

    func runForeground() async throws {
        let logger = log.bootstrap()
        let parsed = try Source.parse(source, splitLocal: false)
        var store: any ObjectStore
        do {
            var tuning = GCSStore.Tuning()
            tuning.idleTimeout = .milliseconds(Int64(idleTimeout * 1000))
            store = try openStore(parsed, gcs: gcs, logger: logger, prefixMount: true, tuning: tuning,
                                  deadline: .milliseconds(Int64(opTimeout * 1000)))
            if let requestLog { store = try RequestLogStore(store, path: requestLog) }
        } catch {
            logger.critical("cannot open \(source): \(error)")
            throw ExitCode(1)
        }
        var config = MountConfig()
        config.readOnly = readOnly
        if let uid { config.uid = uid }
        if let gid { config.gid = gid }
        config.fileMode = UInt32(fileMode, radix: 8) ?? 0o644
        config.dirMode = UInt32(dirMode, radix: 8) ?? 0o755
        config.metadataTTL = metadataTTL
        config.listPageSize = listPageSize
        config.readAheadMax = max(1, readAheadMB) << 20
        config.readAheadInitial = min(1 << 20, config.readAheadMax)
        config.cacheDirectory = cacheDirectory
        config.operationTimeout = opTimeout
        config.uploadRetries = uploadRetries
        config.retryBackoffMax = retryBackoffMax
        config.failureTTL = failureTTL
        let fs: BucketFileSystem
        do {
            fs = try BucketFileSystem(store: store, config: config, logger: logger)
        } catch {
            logger.critical("\(error)")
            throw ExitCode(1)
        }
        var options = ["fsname=bucketfs:" + source, "subtype=bucketfs", "default_permissions"]
        if allowOther { options.append("allow_other") }
        if readOnly { options.append("ro") }
        // Computed once, before the mount exists: URL(fileURLWithPath:) stats its path, and a
        // stat of the mount point before the loop runs would wait for ever on the kernel's INIT.
        let point = mountpointPath
        let session = try FuseMounter.mount(filesystem: fs, mountpoint: point, options: options, logger: logger)
        logger.notice("mounted \(source) at \(point)")
        await FuseMounter.run(session)
        logger.notice("unmounted \(point)")
        // Files still dirty (a failed upload waiting for its next attempt): one more try each,
        // bounded; what fails goes to lost+found, logged.
        await fs.shutdown(within: .milliseconds(Int64(opTimeout * 1000)))
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
    static func spawn(executable: String, arguments: [String], logPath: String) throws -> pid_t {
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
        defer { cargs.forEach { free($0) } }
        let rc = posix_spawn(&pid, executable, &actions, &attr, cargs, environ)
        guard rc == 0 else { throw ValidationErrorText("cannot start the mount process: \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Whether /proc/self/mountinfo lists a bucketfs mount at `path`.
    static func isMounted(_ path: String) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        let escaped = path.replacingOccurrences(of: " ", with: "\\040")
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ")
            if f.count > 4, f[4] == escaped, line.contains(" - fuse.bucketfs ") { return true }
        }
        return false
    }
}
