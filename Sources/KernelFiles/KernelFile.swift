#if canImport(Glibc)
import Glibc
#endif

/// Reading the files the kernel makes up as they are read (`/proc`, `/sys`): their size says 0
/// (or 4096), so Foundation's whole-file readers stop at the first page, and a long
/// `/proc/self/mountinfo` (a Kubernetes node, a desktop with snaps) loses the lines past 4 KiB.
/// Every read of such a file goes through here: read(2) until it returns 0
/// (docs/ARCHITECTURE.md, "Kernel files"). A test fails when one is read any other way.
public enum KernelFile {
    /// The whole file's bytes, or nil when it cannot be opened or read (`errno` says why).
    public static func bytes(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                out.append(contentsOf: chunk[0..<n])
            } else if n == 0 {
                return out
            } else if errno != EINTR {
                return nil
            }
        }
    }

    /// The whole file as text (invalid UTF-8 replaced), or nil when it cannot be read.
    public static func text(_ path: String) -> String? {
        bytes(path).map { String(decoding: $0, as: UTF8.self) }
    }
}
