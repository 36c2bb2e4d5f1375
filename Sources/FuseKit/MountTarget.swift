#if canImport(Glibc)
import Glibc
#endif

/// Where a session serves: a directory it mounts itself, or a FUSE device a parent process
/// already mounted and handed over as an open descriptor (`/dev/fd/N`, as the Cloud Storage FUSE
/// CSI driver's node plugin does). A pre-mounted target is never mounted, unmounted or given to
/// fusermount3 here: its unmount is the parent's (libfuse 3.3+ takes `/dev/fd/N` that way).
public enum MountTarget: Sendable, Equatable, CustomStringConvertible {
    case directory(String)
    case fileDescriptor(Int32)

    /// `/dev/fd/N` is a descriptor; anything else a directory path, as given.
    public init(_ text: String) {
        if let n = Self.descriptorNumber(text) { self = .fileDescriptor(n) } else { self = .directory(text) }
    }

    /// N of `/dev/fd/N` (digits only), else nil.
    public static func descriptorNumber(_ text: String) -> Int32? {
        let prefix = "/dev/fd/"
        guard text.hasPrefix(prefix) else { return nil }
        let digits = text.dropFirst(prefix.count)
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int32(digits)
    }

    /// What libfuse's `fuse_session_mount` is given.
    public var libfuseMountpoint: String {
        switch self {
        case .directory(let path): return path
        case .fileDescriptor(let fd): return "/dev/fd/\(fd)"
        }
    }

    public var description: String { libfuseMountpoint }

    /// The directory, when this target is one.
    public var directory: String? {
        if case .directory(let p) = self { return p }
        return nil
    }

    public var isPreMounted: Bool { directory == nil }

    /// Why a descriptor target cannot be served (nil when it can): a closed descriptor, or one
    /// that is not the FUSE device (`/dev/fuse`, character device 10:229).
    public func descriptorProblem() -> String? {
        guard case .fileDescriptor(let fd) = self else { return nil }
        var st = stat()
        guard fcntl(fd, F_GETFD) != -1, fstat(fd, &st) == 0 else {
            return "/dev/fd/\(fd) is not an open file descriptor: the process that starts bucketfs must open /dev/fuse, mount it (fd=N) and pass it as descriptor \(fd)"
        }
        let major = (UInt64(st.st_rdev) >> 8) & 0xfff
        let minor = (UInt64(st.st_rdev) & 0xff) | ((UInt64(st.st_rdev) >> 12) & ~UInt64(0xff))
        guard st.st_mode & S_IFMT == S_IFCHR, major == 10, minor == 229 else {
            return "/dev/fd/\(fd) is not a FUSE device (it must be an open /dev/fuse that its parent mounted with fd=N)"
        }
        return nil
    }
}
