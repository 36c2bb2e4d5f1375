import Foundation
import FuseKit
import StorageModel

/// One mount at a time holds a cache directory: an flock on `CACHE_DIR/.lock`, which holds the
/// holder's pid, so that a mount refused for it can name the process to wait for (it may still be
/// uploading what was written before its unmount; docs/SEMANTICS.md §5.5).
public enum CacheDirectoryLock {
    /// Takes the lock (the descriptor stays open for the mount's life) and writes our pid in it.
    static func take(_ directory: String) throws(CacheDirectoryError) -> Int32 {
        let path = directory + "/.lock"
        let fd = PrivateFiles.open(path, O_RDWR)
        guard fd >= 0 else {
            throw CacheDirectoryError(description: "cannot open \(path) (--cache-dir): \(Errno(Glibc.errno))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            Glibc.close(fd)
            throw CacheDirectoryError(description: inUseMessage(directory, pid: readPID(path)))
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }

    /// Why `directory` cannot be taken now (another process holds it), or nil when it is free
    /// or does not exist yet. The lock is only tried, never kept.
    public static func refusal(_ directory: String) -> String? {
        let path = directory + "/.lock"
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            _ = flock(fd, LOCK_UN)
            return nil
        }
        return inUseMessage(directory, pid: readPID(path))
    }

    /// The pid the holder of `directory` wrote in its lock file (meaningful while `refusal` is not nil).
    public static func holderPID(_ directory: String) -> pid_t? { readPID(directory + "/.lock") }

    static func readPID(_ path: String) -> pid_t? {
        guard let d = FileManager.default.contents(atPath: path) else { return nil }
        return pid_t(String(decoding: d, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The refusal: which process holds the directory, and to wait for it (never "use another
    /// cache directory": the data it may still hold would then be found by no mount).
    static func inUseMessage(_ directory: String, pid: pid_t?) -> String {
        let who = pid.map { "bucketfs process \($0)" } ?? "another bucketfs process"
        let wait = pid.map { " (e.g. `tail --pid=\($0) -f /dev/null`)" } ?? ""
        return "the cache directory \(directory) (--cache-dir) is in use by \(who): a mount, or one still uploading what was written before its unmount; wait for it to exit\(wait), then mount again"
    }
}
