import CFuse
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One mount of a `FuseFileSystem` through the libfuse3 low-level API.
///
///     let session = FuseSession(filesystem: fs, mountpoint: "/mnt/x", options: ["fsname=x", "ro"])
///     try session.mount()                  // the kernel mount exists when this returns
///     try session.installSignalHandlers()  // SIGINT/SIGTERM/SIGHUP end `run()`
///     session.run()                        // blocks; returns after unmount, a signal or `exit()`
///
/// `run()` serves requests on up to `maxThreads` libfuse threads. Each request is copied out of C
/// memory, handed to the filesystem on its own Task, and answered exactly once. At most
/// `maxInFlight` requests run at a time; further libfuse threads wait. After the loop ends
/// `run()` waits briefly for running requests, stops all replies, unmounts and frees the session.
public final class FuseSession: @unchecked Sendable {
    /// When the kernel uses readdirplus (directory listings with attributes).
    public enum ReaddirPlus: Sendable {
        /// Always (FUSE_CAP_READDIRPLUS without _AUTO): `ls -l` costs no lookups.
        case always
        /// The kernel decides per directory (FUSE_CAP_READDIRPLUS_AUTO).
        case auto
        /// Plain readdir only.
        case off
    }

    public let target: MountTarget
    /// The target as libfuse names it: the directory, or `/dev/fd/N`.
    public var mountpoint: String { target.libfuseMountpoint }
    public let options: [String]
    public let maxThreads: Int
    /// Whether the kernel may read files the filesystem names itself (FUSE passthrough,
    /// `FuseFileSystemBase.passthroughFile`), where it offers that.
    public let passthrough: Bool

    private let context: RequestContext
    private let lock = NSLock()
    // Guarded by `lock`.
    private var session: OpaquePointer?  // struct fuse_session *
    private var state: State = .idle
    private var signalsInstalled = false

    private enum State { case idle, mounted, running, stopping, finished }

    /// - Parameters:
    ///   - options: mount options as for `-o`, e.g. "fsname=bucketfs", "subtype=bucketfs",
    ///     "allow_other", "default_permissions", "ro". An unknown option makes `mount()` throw EINVAL.
    ///   - maxThreads: libfuse worker threads.
    ///   - maxInFlight: requests handed to the filesystem at once.
    ///   - logger: one line per problem (never per request).
    public convenience init(filesystem: any FuseFileSystemBase, mountpoint: String, options: [String] = [],
                            maxThreads: Int = 8, maxInFlight: Int = 64, readdirplus: ReaddirPlus = .always,
                            logger: @escaping @Sendable (String) -> Void = { _ in }) {
        self.init(filesystem: filesystem, target: .directory(mountpoint), options: options, maxThreads: maxThreads,
                  maxInFlight: maxInFlight, readdirplus: readdirplus, logger: logger)
    }

    /// A session on `target`: a directory it mounts, or a pre-mounted FUSE descriptor it only serves.
    public init(filesystem: any FuseFileSystemBase, target: MountTarget, options: [String] = [],
                maxThreads: Int = 8, maxInFlight: Int = 64, readdirplus: ReaddirPlus = .always, passthrough: Bool = false,
                logger: @escaping @Sendable (String) -> Void = { _ in }) {
        self.target = target
        self.passthrough = passthrough
        self.options = options
        self.maxThreads = max(1, maxThreads)
        context = RequestContext(filesystem: filesystem, maxInFlight: max(1, maxInFlight),
                                 readdirplus: readdirplus, passthrough: passthrough, logger: logger)
    }

    deinit {
        if let se = session {
            context.gate.close()
            if signalsInstalled { cfuse_remove_signal_handlers() }
            fuse_session_unmount(se)
            fuse_session_destroy(se)
        }
    }

    /// Called once the kernel's INIT handshake is processed (on a libfuse thread, from `run()`);
    /// requests are answered from then on. Set it before `run()`.
    public var onReady: (@Sendable () -> Void)? {
        get { context.onReady }
        set { context.onReady = newValue }
    }

    /// The kernel mount exists (between a successful `mount()` and the end of `run()`).
    public var isMounted: Bool { lock.withLock { state == .mounted || state == .running } }

    /// The INIT handshake is done: the mount answers requests.
    public var isReady: Bool { context.isReady }

    /// The flags of the INIT reply the kernel was sent (0 before it; one session per process).
    public var initReplyFlags: UInt32 { UInt32(cfuse_init_reply_flags()) }

    /// Creates the libfuse session and mounts it (a pre-mounted descriptor is taken as it is).
    /// Throws ENOENT/ENOTDIR for a bad mount point, EBADF for a descriptor that is not an open
    /// FUSE device, EINVAL for options libfuse refuses, EIO when the mount itself fails.
    public func mount() throws(Errno) {
        lock.lock()
        defer { lock.unlock() }
        guard state == .idle else { throw .EBUSY }
        switch target {
        case .directory(let path):
            var st = stat()
            if lstat(path, &st) != 0 { throw Errno(errno) }
            if st.st_mode & S_IFMT != S_IFDIR { throw .ENOTDIR }
        case .fileDescriptor:
            if target.descriptorProblem() != nil { throw .EBADF }
        }

        var arguments = ["fusekit"]
        if !options.isEmpty { arguments += ["-o", options.joined(separator: ",")] }
        let argv = arguments.map { strdup($0) }
        defer { argv.forEach { free($0) } }
        var ops = FuseOperations.table
        let userdata = Unmanaged.passUnretained(context).toOpaque()
        let se = argv.withUnsafeBufferPointer { buf in
            cfuse_session_new(Int32(buf.count), buf.baseAddress, &ops, userdata)
        }
        guard let se else { throw .EINVAL }
        guard fuse_session_mount(se, mountpoint) == 0 else {
            fuse_session_destroy(se)
            throw .EIO
        }
        // The INIT reply amended (`cfuse_io_install`): parallel lookups always, passthrough if asked.
        let rc = cfuse_io_install(se, passthrough ? 1 : 0)
        if rc != 0 {
            context.log("libfuse took no custom io (\(Errno(-rc))): lookups of one directory wait for each other\(passthrough ? ", and every read comes through the filesystem" : "")")
        }
        session = se
        state = .mounted
    }

    /// SIGINT, SIGTERM and SIGHUP end `run()` (which then unmounts); SIGPIPE is ignored.
    /// Process-wide: install for one session at a time. Removed again when `run()` ends.
    public func installSignalHandlers() throws(Errno) {
        lock.lock()
        defer { lock.unlock() }
        guard let se = session, state == .mounted || state == .running else { throw .EINVAL }
        guard cfuse_set_signal_handlers(se) == 0 else { throw Errno(errno) }
        signalsInstalled = true
    }

    /// Serves requests until the file system is unmounted (by anyone), a handled signal arrives,
    /// or `exit()` is called; then unmounts and frees the session. Returns libfuse's result:
    /// 0, -errno, or the signal number that ended the loop.
    @discardableResult
    public func run() -> Int32 {
        let se: OpaquePointer? = lock.withLock {
            guard state == .mounted else { return nil }
            state = .running
            return session
        }
        guard let se else {
            context.log("FuseSession.run() without a mount")
            return -EINVAL
        }
        let result = cfuse_session_loop_mt(se, UInt32(maxThreads), UInt32(maxThreads))
        lock.withLock { state = .stopping }
        if result < 0 { context.log("fuse loop ended: \(Errno(-result))") }
        teardown(se)
        return result
    }

    /// Ends `run()`: flags the session as exited, wakes the loop thread (when the signal handlers
    /// are installed) and, if the loop is still running after that, unmounts a directory lazily so
    /// the kernel closes the connection (libfuse's `fuse_session_exit` alone only acts on the next
    /// request). A pre-mounted target is never unmounted here: its loop ends at the next request.
    /// Safe from any thread except the ones serving requests; returns without waiting for `run()`.
    public func exit() {
        let se: OpaquePointer? = lock.withLock { state == .running || state == .mounted ? session : nil }
        guard let se else { return }
        fuse_session_exit(se)
        if cfuse_wake_loop() == 1 {
            let deadline = Date().addingTimeInterval(1)
            while Date() < deadline {
                if lock.withLock({ state != .running }) { return }
                usleep(10_000)
            }
        }
        if let path = target.directory { Self.unmountLazily(path, log: context.log) }
    }

    private func teardown(_ se: OpaquePointer) {
        // Let requests already handed to the filesystem answer (the kernel may be gone: harmless),
        // cancelled so that cooperative filesystems stop early.
        context.inFlight.cancelAll()
        let deadline = Date().addingTimeInterval(2)
        while context.inFlight.count > 0 && Date() < deadline { usleep(5_000) }
        let abandoned = context.inFlight.count
        if abandoned > 0 { context.log("\(abandoned) request(s) still running at unmount; their replies are dropped") }
        context.gate.close()
        lock.lock()
        if signalsInstalled { cfuse_remove_signal_handlers(); signalsInstalled = false }
        fuse_session_unmount(se)
        fuse_session_destroy(se)
        session = nil
        state = .finished
        lock.unlock()
    }

    /// MNT_DETACH as root, else `fusermount3 -u -z`.
    static func unmountLazily(_ path: String, log: (String) -> Void) {
        if geteuid() == 0 {
            if umount2(path, Int32(MNT_DETACH)) != 0 && errno != EINVAL {
                log("umount \(path): \(Errno(errno))")
            }
            return
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/fusermount3") {
            p.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        }
        p.arguments = ["-u", "-z", "-q", path]
        do {
            try p.run()
            p.waitUntilExit()
        } catch {
            log("fusermount3 -u -z \(path): \(error)")
        }
    }
}
