import Foundation

// The contract between FuseKit (libfuse3 low-level API) and a filesystem. FuseKit calls these
// methods, each on its own Task, and sends exactly one reply per request: the returned value, or
// the thrown Errno. A filesystem never sees libfuse types.

/// An errno value as a small typed error.
public struct Errno: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(_ raw: Int32) { rawValue = raw }
    public var description: String { String(cString: strerror(rawValue)) + " (\(rawValue))" }

    public static let EPERM = Errno(1), ENOENT = Errno(2), EIO = Errno(5), EBADF = Errno(9),
        EAGAIN = Errno(11), ENOMEM = Errno(12), EACCES = Errno(13), EBUSY = Errno(16), EEXIST = Errno(17),
        EXDEV = Errno(18), ENOTDIR = Errno(20), EISDIR = Errno(21), EINVAL = Errno(22), EFBIG = Errno(27),
        ENOSPC = Errno(28), EROFS = Errno(30), ERANGE = Errno(34), ENAMETOOLONG = Errno(36),
        ENOSYS = Errno(38), ENOTEMPTY = Errno(39), ENODATA = Errno(61), E2BIG = Errno(7),
        ENOTSUP = Errno(95), ESTALE = Errno(116), ETIMEDOUT = Errno(110), EILSEQ = Errno(84),
        EINTR = Errno(4), ECANCELED = Errno(125)
}

public enum FileType: Sendable, Equatable { case regular, directory, symlink }

/// Who made a request (libfuse's `fuse_req_ctx`): FuseKit sets it for the Task that answers the
/// request, so a filesystem that records owners (create, mkdir, symlink) reads it there. nil
/// outside a request (tests set it with `FuseCaller.$current.withValue`).
public struct FuseCaller: Sendable, Equatable {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    public init(uid: UInt32, gid: UInt32, pid: Int32 = 0) { self.uid = uid; self.gid = gid; self.pid = pid }
    @TaskLocal public static var current: FuseCaller?
}

/// What `stat` shows. Times are seconds since the epoch.
public struct FileAttributes: Sendable, Equatable {
    public var ino: UInt64
    public var type: FileType
    public var size: UInt64
    /// Permission bits only (e.g. 0o644); the file type bits come from `type`.
    public var permissions: UInt32
    public var nlink: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var atime: Double
    public var mtime: Double
    public var ctime: Double
    /// 512-byte blocks.
    public var blocks: UInt64 { (size + 511) / 512 }

    public init(ino: UInt64, type: FileType, size: UInt64, permissions: UInt32, nlink: UInt32,
                uid: UInt32, gid: UInt32, atime: Double, mtime: Double, ctime: Double) {
        self.ino = ino; self.type = type; self.size = size; self.permissions = permissions
        self.nlink = nlink; self.uid = uid; self.gid = gid; self.atime = atime; self.mtime = mtime; self.ctime = ctime
    }
}

/// A lookup answer. Each returned entry counts as one kernel lookup of `attributes.ino`
/// (undone by `forget`).
public struct FuseEntry: Sendable, Equatable {
    public var attributes: FileAttributes
    public var entryTimeout: Double
    public var attrTimeout: Double
    public init(attributes: FileAttributes, entryTimeout: Double, attrTimeout: Double) {
        self.attributes = attributes; self.entryTimeout = entryTimeout; self.attrTimeout = attrTimeout
    }
}

/// One directory entry of readdir / readdirplus. `offset` is the cookie of the entry after it:
/// nonzero (0 means "from the start") and below `Int64.max - 2` (FuseKit shifts the cookies by 2
/// to put `.` and `..` first; the filesystem never returns `.` or `..` itself).
public struct DirectoryEntry: Sendable, Equatable {
    public var name: String
    public var offset: UInt64
    /// Full entry for readdirplus; for plain readdir only ino and type are used. Returning it
    /// does not count as a lookup: FuseKit calls `noteLookup(ino:)` for each readdirplus entry
    /// that fitted in the reply buffer.
    public var entry: FuseEntry
    /// False: the filesystem cannot vouch for `entry`'s attributes yet (it would have to read
    /// them first). readdirplus then sends the entry's name and number only (no lookup counted),
    /// and the kernel looks the name up before it uses its attributes.
    public var attributesKnown: Bool
    public init(name: String, offset: UInt64, entry: FuseEntry, attributesKnown: Bool = true) {
        self.name = name; self.offset = offset; self.entry = entry; self.attributesKnown = attributesKnown
    }
}

public struct StatFS: Sendable, Equatable {
    public var blockSize: UInt64 = 4096
    public var blocks: UInt64 = 1 << 40
    public var blocksFree: UInt64 = 1 << 40
    public var blocksAvailable: UInt64 = 1 << 40
    public var files: UInt64 = 1 << 32
    public var filesFree: UInt64 = 1 << 32
    public var nameMax: UInt64 = 255
    public init() {}
}

/// Answer to getxattr / listxattr: the size-probe (size 0) and ERANGE logic lives in FuseKit.
public struct OpenFlags: Sendable, Equatable {
    public let rawValue: Int32
    public init(_ raw: Int32) { rawValue = raw }
    public var accessMode: Int32 { rawValue & O_ACCMODE }
    public var isWrite: Bool { accessMode != O_RDONLY }
    public var isWriteOnly: Bool { accessMode == O_WRONLY }
    public var truncate: Bool { rawValue & O_TRUNC != 0 }
    public var append: Bool { rawValue & O_APPEND != 0 }
}

/// rename(2) flags.
public struct RenameFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let noReplace = RenameFlags(rawValue: 1)  // RENAME_NOREPLACE
    public static let exchange = RenameFlags(rawValue: 2)   // RENAME_EXCHANGE
}

/// setxattr(2) flags.
public struct XattrFlags: OptionSet, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let create = XattrFlags(rawValue: 1)   // XATTR_CREATE
    public static let replace = XattrFlags(rawValue: 2)  // XATTR_REPLACE
}

/// Which attributes a setattr changes.
public struct SetAttributes: Sendable, Equatable {
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var size: UInt64?
    public var atime: Double?
    public var mtime: Double?
    public init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, size: UInt64? = nil,
                atime: Double? = nil, mtime: Double? = nil) {
        self.mode = mode; self.uid = uid; self.gid = gid; self.size = size; self.atime = atime; self.mtime = mtime
    }
}

/// The operations, every one a requirement with no default: what FuseKit mounts. A wrapper that
/// forwards to another filesystem (metrics, checks) conforms to this protocol alone, so one that
/// forgets an operation does not compile; a filesystem that wants the defaults conforms to
/// `FuseFileSystem` below instead. Names arrive as UTF-8 Strings (a non-UTF-8 name is refused by
/// FuseKit with EILSEQ before the filesystem sees it).
///
/// Each async method runs on its own Task; when the kernel interrupts the request (the caller got
/// a signal) that Task is cancelled: a method that notices may throw `.EINTR`.
/// Modes passed to `create`/`mkdir` are permission bits only (the kernel already applied umask).
/// `open` sees O_TRUNC itself (FUSE_CAP_ATOMIC_O_TRUNC is on).
/// If the kernel never receives an open/opendir/create/lookup reply (the request was
/// interrupted meanwhile), FuseKit undoes it: `release`/`releasedir`, and `forget(ino, 1)`.
public protocol FuseFileSystemBase: AnyObject, Sendable {
    func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry
    func forget(ino: UInt64, nlookup: UInt64)
    /// One kernel lookup of `ino` that did not come from `lookup`/`create`/`mkdir`: a readdirplus
    /// entry that fitted in the reply. Called before the reply is sent (so it always precedes the
    /// matching `forget`). `.`/`..` and entries with ino 0 are never reported. Default: nothing.
    func noteLookup(ino: UInt64)
    /// For getxattr names answered without I/O: the error to reply at once on the libfuse thread
    /// (no Task), or nil to call `getxattr`. Default: nil.
    func immediateGetxattrError(name: String) -> Errno?
    /// Runs the work of one request: FuseKit calls every async method through this, so a
    /// filesystem can give each operation one scope (a deadline, say). Default: runs `work`.
    func perform<T: Sendable>(_ work: @escaping @Sendable () async throws(Errno) -> T) async throws(Errno) -> T
    func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double)
    /// Asked as `open` is answered: whether the kernel may keep the file's cached pages (the
    /// content is what it cached before). Without it, open drops them, and waits for any page a
    /// read still has locked. Default: false.
    func keepsCache(ino: UInt64, fh: UInt64) -> Bool
    /// Asked as `open` and `create` are answered: whether the kernel bypasses its page cache for
    /// this handle (FOPEN_DIRECT_IO: every read and write reaches the filesystem, and no shared
    /// mmap). Default: false.
    func directIO(ino: UInt64, fh: UInt64) -> Bool
    /// Asked after `open` on a session with passthrough, before the open is answered: a
    /// descriptor of a local file holding exactly this handle's bytes, which the kernel may then
    /// read itself (no `read` reaches the filesystem for this handle), or nil. Only borrowed:
    /// FuseKit registers it with the kernel before this open is answered. Default: nil.
    func passthroughFile(ino: UInt64, fh: UInt64) async -> Int32?
    /// Asked as `opendir` is answered: whether the kernel caches the directory's entries for
    /// this handle, or keeps what it cached before (`DirectoryCaching`). Default: `.none`.
    func directoryCaching(ino: UInt64, fh: UInt64) -> DirectoryCaching
    /// Answers from cache with no I/O, on the libfuse thread with no Task: the result, or nil to
    /// call the async method. A returned lookup entry counts as one lookup, as `lookup`'s does.
    /// Defaults: nil.
    func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>?
    func cachedGetattr(ino: UInt64) -> (FileAttributes, Double)?
    func cachedGetxattr(ino: UInt64, name: String) -> Result<[UInt8], Errno>?
    func cachedListxattr(ino: UInt64) -> [String]?
    /// A write that needs no I/O beyond local disk (the handle already holds its content), done
    /// on the libfuse thread from the kernel's buffer with no Task and no copy: the bytes
    /// written or the error, or nil to call `write`. Default: nil.
    func immediateWrite(ino: UInt64, fh: UInt64, offset: UInt64, bytes: UnsafeRawBufferPointer) -> Result<Int, Errno>?
    /// A setattr that needs no I/O (a change that only joins content waiting to be uploaded),
    /// done on the libfuse thread: the new attributes or the error, or nil to call `setattr`.
    /// Default: nil.
    func immediateSetattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) -> Result<(FileAttributes, Double), Errno>?
    /// A release with nothing to wait for (no upload to make, no lock to wait on), done on the
    /// libfuse thread with no Task: success or the error, or nil to call `release`. Default: nil.
    func immediateRelease(ino: UInt64, fh: UInt64) -> Result<Void, Errno>?
    /// readdir with an upper bound on how many entries the kernel's buffer can take (FuseKit
    /// computes it from the buffer size), so a filesystem builds no more. Default: `readdir`.
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64, limit: Int) async throws(Errno) -> [DirectoryEntry]
    func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double)
    func opendir(ino: UInt64) async throws(Errno) -> UInt64
    /// Entries after `offset` (0 = from the start), for readdir and readdirplus alike. FuseKit
    /// stops filling when the buffer is full and asks again from the last offset that fit; an
    /// empty answer is the end of the directory. Returning fewer entries than fit is fine.
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry]
    func releasedir(ino: UInt64, fh: UInt64)
    func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64
    func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data
    func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int
    func flush(ino: UInt64, fh: UInt64) async throws(Errno)
    func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno)
    func release(ino: UInt64, fh: UInt64) async throws(Errno)
    func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64)
    func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry
    func unlink(parent: UInt64, name: String) async throws(Errno)
    func rmdir(parent: UInt64, name: String) async throws(Errno)
    func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno)
    func statfs(ino: UInt64) async throws(Errno) -> StatFS
    /// The whole value; FuseKit answers size probes and ERANGE.
    func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8]
    /// The names; FuseKit joins them with NULs and answers size probes and ERANGE.
    func listxattr(ino: UInt64) async throws(Errno) -> [String]
    /// flags: XATTR_CREATE (1) / XATTR_REPLACE (2). FuseKit answers `security.capability` itself
    /// (getxattr: ENODATA, setxattr: ENOTSUP) so writes cost no filesystem call (the kernel asks
    /// for it before every write once xattrs are implemented).
    func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno)
    func removexattr(ino: UInt64, name: String) async throws(Errno)
    /// The target of the symbolic link `ino`.
    func readlink(ino: UInt64) async throws(Errno) -> String
    /// Makes a symbolic link `name` in `parent` pointing at `target`; the entry counts as a
    /// lookup, as create's and mkdir's do.
    func symlink(parent: UInt64, name: String, target: String) async throws(Errno) -> FuseEntry
    /// A hard link to `ino` named `newName` in `newParent` (counts as a lookup).
    func link(ino: UInt64, newParent: UInt64, newName: String) async throws(Errno) -> FuseEntry
    /// A device node, FIFO or socket (`mode` carries the file type bits; `create` makes regular
    /// files). Counts as a lookup.
    func mknod(parent: UInt64, name: String, mode: UInt32, rdev: UInt64) async throws(Errno) -> FuseEntry
}

/// `FuseFileSystemBase` with a default for every operation but `lookup`, `getattr` and the
/// two-argument `readdir`: a filesystem implements what it supports. Every default answers ENOSYS
/// (or EROFS for changes), or does nothing where there is nothing to answer (each documented with
/// its requirement above). Not for wrappers: a default would silently stand in for a forgotten
/// forward.
public protocol FuseFileSystem: FuseFileSystemBase {}

public extension FuseFileSystem {
    func keepsCache(ino: UInt64, fh: UInt64) -> Bool { false }
    func directIO(ino: UInt64, fh: UInt64) -> Bool { false }
    func passthroughFile(ino: UInt64, fh: UInt64) async -> Int32? { nil }
    func directoryCaching(ino: UInt64, fh: UInt64) -> DirectoryCaching { .none }
    func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? { nil }
    func cachedGetattr(ino: UInt64) -> (FileAttributes, Double)? { nil }
    func cachedGetxattr(ino: UInt64, name: String) -> Result<[UInt8], Errno>? { nil }
    func cachedListxattr(ino: UInt64) -> [String]? { nil }
    func immediateWrite(ino: UInt64, fh: UInt64, offset: UInt64, bytes: UnsafeRawBufferPointer) -> Result<Int, Errno>? { nil }
    func immediateSetattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) -> Result<(FileAttributes, Double), Errno>? { nil }
    func immediateRelease(ino: UInt64, fh: UInt64) -> Result<Void, Errno>? { nil }
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64, limit: Int) async throws(Errno) -> [DirectoryEntry] {
        try await readdir(ino: ino, fh: fh, offset: offset)
    }
    func perform<T: Sendable>(_ work: @escaping @Sendable () async throws(Errno) -> T) async throws(Errno) -> T {
        try await work()
    }
    func immediateGetxattrError(name: String) -> Errno? { nil }
    func forget(ino: UInt64, nlookup: UInt64) {}
    func noteLookup(ino: UInt64) {}
    func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) { throw .EROFS }
    func opendir(ino: UInt64) async throws(Errno) -> UInt64 { 0 }
    func releasedir(ino: UInt64, fh: UInt64) {}
    func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 { throw .ENOSYS }
    func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data { throw .ENOSYS }
    func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int { throw .EROFS }
    func flush(ino: UInt64, fh: UInt64) async throws(Errno) {}
    func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno) {}
    func release(ino: UInt64, fh: UInt64) async throws(Errno) {}
    func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) { throw .EROFS }
    func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry { throw .EROFS }
    func unlink(parent: UInt64, name: String) async throws(Errno) { throw .EROFS }
    func rmdir(parent: UInt64, name: String) async throws(Errno) { throw .EROFS }
    func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) { throw .EROFS }
    func statfs(ino: UInt64) async throws(Errno) -> StatFS { StatFS() }
    func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8] { throw .ENODATA }
    func listxattr(ino: UInt64) async throws(Errno) -> [String] { [] }
    func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno) { throw .ENOTSUP }
    func removexattr(ino: UInt64, name: String) async throws(Errno) { throw .ENOTSUP }
    func readlink(ino: UInt64) async throws(Errno) -> String { throw .ENOSYS }
    func symlink(parent: UInt64, name: String, target: String) async throws(Errno) -> FuseEntry { throw .EROFS }
    func link(ino: UInt64, newParent: UInt64, newName: String) async throws(Errno) -> FuseEntry { throw .EROFS }
    func mknod(parent: UInt64, name: String, mode: UInt32, rdev: UInt64) async throws(Errno) -> FuseEntry { throw .EROFS }
}
