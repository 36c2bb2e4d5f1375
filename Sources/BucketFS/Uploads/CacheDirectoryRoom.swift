import Foundation
import FuseKit

/// Whether the cache directory can take what a mount writes (docs/OPERATING.md, "The cache
/// directory"): it must be writable (refused otherwise, naming the path and the option), and a
/// mount warns when its filesystem has less room free than `warnBelow`.
public enum CacheDirectoryRoom {
    /// The free room under which a mount warns: 1 GiB. Every file written through the mount is
    /// staged whole before its upload (several at once with `--write-back`), so this is the size
    /// of the largest files a nightly backup can write without ENOSPC, with none waiting.
    public static let warnBelow: Int64 = 1 << 30

    /// Why nothing can be written in `directory` (a read-only filesystem, no permission), or nil:
    /// creates and removes a file there.
    public static func writeProblem(_ directory: String) -> String? {
        let probe = directory + "/.write-check-\(getpid())"
        let fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let e = Errno(Glibc.errno)
            if e == .EEXIST { unlink(probe); return nil }
            return "cannot write in the cache directory \(directory) (--cache-dir): \(e); make it writable or choose another with --cache-dir"
        }
        Glibc.close(fd)
        unlink(probe)
        return nil
    }

    /// Bytes free for this user on `directory`'s filesystem, or nil when it cannot be read.
    public static func free(_ directory: String) -> Int64? {
        var st = statvfs()
        guard statvfs(directory, &st) == 0 else { return nil }
        return Int64(st.f_bavail) * Int64(st.f_frsize)
    }

    /// A warning when `directory` has less than `bound` bytes free, or nil.
    public static func warning(_ directory: String, bound: Int64 = warnBelow) -> String? {
        guard let room = free(directory), room < bound else { return nil }
        return "the cache directory \(directory) (--cache-dir) has \(mib(room)) free, less than \(mib(bound)): every file written is staged there whole before its upload, and a write that finds it full fails with ENOSPC and is not uploaded; give it more room or choose another with --cache-dir"
    }

    static func mib(_ bytes: Int64) -> String {
        bytes >= 1 << 30 ? String(format: "%.1f GiB", Double(bytes) / Double(1 << 30))
            : String(format: "%.1f MiB", Double(bytes) / Double(1 << 20))
    }
}
