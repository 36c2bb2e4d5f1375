import CFuse
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Values ↔ libfuse structs. Pure functions; tested without a kernel.

extension FileAttributes {
    /// The st_blksize every file reports: the "preferred I/O size" tools size their buffers by
    /// (cp, Python's buffered files). 1 MiB, the largest write the kernel sends in one request
    /// (libfuse's max_write): with 4096, cp copied 256 MiB in 2,048 writes of 128 KiB, each a
    /// request to the daemon; now in 256 of 1 MiB.
    public static let preferredIOSize = 1 << 20

    /// `struct stat`: type bits from `type`, st_blocks in 512-byte units, st_blksize
    /// `preferredIOSize`, times with nanoseconds.
    public var statValue: stat {
        var st = stat()
        st.st_ino = numericCast(ino)
        let typeBits: mode_t
        switch type {
        case .regular: typeBits = S_IFREG
        case .directory: typeBits = S_IFDIR
        case .symlink: typeBits = S_IFLNK
        }
        st.st_mode = typeBits | (permissions & 0o7777)
        st.st_nlink = numericCast(nlink)
        st.st_uid = uid
        st.st_gid = gid
        st.st_size = off_t(clamping: size)
        st.st_blocks = blkcnt_t(clamping: blocks)
        st.st_blksize = blksize_t(Self.preferredIOSize)
        st.st_atim = timespec(seconds: atime)
        st.st_mtim = timespec(seconds: mtime)
        st.st_ctim = timespec(seconds: ctime)
        return st
    }
}

extension timespec {
    /// Seconds since the epoch (fractional) → timespec with 0 ≤ tv_nsec < 1e9.
    public init(seconds: Double) {
        guard seconds.isFinite else { self.init(tv_sec: 0, tv_nsec: 0); return }
        var whole = seconds.rounded(.down)
        var nanos = ((seconds - whole) * 1e9).rounded()
        if nanos >= 1e9 { whole += 1; nanos -= 1e9 }
        self.init(tv_sec: Int(clamping: Int64(exactly: whole) ?? (whole < 0 ? .min : .max)), tv_nsec: Int(nanos))
    }

    public var seconds: Double { Double(tv_sec) + Double(tv_nsec) / 1e9 }
}

extension FuseEntry {
    var entryParam: fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = attributes.ino
        e.generation = 0
        e.attr = attributes.statValue
        e.attr_timeout = attrTimeout
        e.entry_timeout = entryTimeout
        return e
    }
}

extension StatFS {
    var statvfsValue: statvfs {
        var sv = statvfs()
        sv.f_bsize = UInt(blockSize)
        sv.f_frsize = UInt(blockSize)
        sv.f_blocks = fsblkcnt_t(blocks)
        sv.f_bfree = fsblkcnt_t(blocksFree)
        sv.f_bavail = fsblkcnt_t(blocksAvailable)
        sv.f_files = fsfilcnt_t(files)
        sv.f_ffree = fsfilcnt_t(filesFree)
        sv.f_favail = fsfilcnt_t(filesFree)
        sv.f_namemax = UInt(nameMax)
        return sv
    }
}

extension SetAttributes {
    /// From setattr's `struct stat` and FUSE_SET_ATTR_* bits. `now` answers ATIME_NOW/MTIME_NOW.
    public init(stat st: stat, toSet: Int32, now: Double) {
        self.init()
        if toSet & FUSE_SET_ATTR_MODE != 0 { mode = st.st_mode & 0o7777 }
        if toSet & FUSE_SET_ATTR_UID != 0 { uid = st.st_uid }
        if toSet & FUSE_SET_ATTR_GID != 0 { gid = st.st_gid }
        if toSet & FUSE_SET_ATTR_SIZE != 0 { size = UInt64(max(0, st.st_size)) }
        if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 {
            atime = now
        } else if toSet & FUSE_SET_ATTR_ATIME != 0 {
            atime = st.st_atim.seconds
        }
        if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 {
            mtime = now
        } else if toSet & FUSE_SET_ATTR_MTIME != 0 {
            mtime = st.st_mtim.seconds
        }
    }
}

/// getxattr/listxattr answer shapes: size 0 is a probe for the length; a value longer than the
/// caller's buffer is ERANGE.
enum XattrReply: Equatable {
    case size(Int)
    case bytes([UInt8])
    case error(Errno)

    init(value: [UInt8], requestedSize: Int) {
        if requestedSize == 0 {
            self = .size(value.count)
        } else if value.count > requestedSize {
            self = .error(.ERANGE)
        } else {
            self = .bytes(value)
        }
    }

    /// listxattr's format: each name followed by a NUL.
    static func nameList(_ names: [String]) -> [UInt8] {
        names.reduce(into: [UInt8]()) { out, name in out += Array(name.utf8); out.append(0) }
    }
}

/// The cookie FuseKit gives the kernel for the filesystem's `offset`: 1 and 2 belong to `.` and `..`.
enum DirectoryOffsets {
    static let shift: UInt64 = 2

    /// The filesystem offset to list after, and how many of `.`/`..` still precede it.
    static func split(kernelOffset: UInt64) -> (filesystemOffset: UInt64, dots: Int) {
        switch kernelOffset {
        case 0: return (0, 2)
        case 1: return (0, 1)
        default: return (kernelOffset - shift, 0)
        }
    }

    static func kernelOffset(filesystemOffset: UInt64) -> off_t {
        off_t(truncatingIfNeeded: filesystemOffset &+ shift)
    }
}

/// Fills one readdir/readdirplus reply buffer; entries that do not fit are left for the next call.
struct DirectoryBuffer {
    private(set) var bytes: [CChar]
    private(set) var used = 0
    /// readdirplus entries that fitted (each a kernel lookup), `.`/`..` and ino 0 excluded.
    private(set) var delivered: [UInt64] = []

    init(capacity: Int) { bytes = [CChar](repeating: 0, count: max(1, capacity)) }

    /// Adds one entry; false (and nothing written) when it does not fit.
    mutating func add(_ req: fuse_req_t?, name: String, entry: FuseEntry, nextOffset: off_t, plus: Bool,
                      countsAsLookup: Bool) -> Bool {
        let capacity = bytes.count
        let start = used
        let needed: Int = bytes.withUnsafeMutableBufferPointer { buf in
            name.withCString { cname in
                let at = buf.baseAddress! + start
                if plus {
                    var e = entry.entryParam
                    if !countsAsLookup { e.ino = 0 }  // no lookup count; the kernel skips it
                    return fuse_add_direntry_plus(req, at, capacity - start, cname, &e, nextOffset)
                } else {
                    var st = entry.attributes.statValue
                    return fuse_add_direntry(req, at, capacity - start, cname, &st, nextOffset)
                }
            }
        }
        guard needed <= capacity - start else { return false }
        used += needed
        if plus && countsAsLookup && entry.attributes.ino != 0 { delivered.append(entry.attributes.ino) }
        return true
    }
}
