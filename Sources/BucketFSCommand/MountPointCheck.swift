import Foundation
import KernelFiles

/// One mount per mount point (docs/OPERATING.md, "A mount that fails fast"): before anything is
/// started, a mount point that is a dead mount, already a mount (bucketfs or any other), not a
/// directory, or a directory with entries (unless `--allow-non-empty`) is refused with the
/// command that fixes it.
enum MountPointCheck {
    /// A mount listed in /proc/self/mountinfo.
    struct Entry: Equatable {
        let id: Int
        let mountPoint: String
        let type: String
        let source: String
    }

    /// The mounts of /proc/self/mountinfo (or `text`) whose mount point is `path`.
    static func mounts(at path: String, mountinfo text: String? = nil) -> [Entry] {
        guard let text = text ?? KernelFile.text("/proc/self/mountinfo") else { return [] }
        var out: [Entry] = []
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: false)
            guard f.count > 4, let id = Int(f[0]), unescape(String(f[4])) == path,
                  let dash = f.firstIndex(of: "-"), dash + 2 < f.count else { continue }
            out.append(Entry(id: id, mountPoint: path, type: String(f[dash + 1]), source: unescape(String(f[dash + 2]))))
        }
        return out
    }

    /// `path` with its symbolic links resolved, as mountinfo names mount points.
    static func resolved(_ path: String) -> String {
        guard let p = realpath(path, nil) else { return path }
        defer { free(p) }
        return String(cString: p)
    }

    /// mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
    static func unescape(_ s: String) -> String {
        guard s.contains("\\") else { return s }
        var bytes: [UInt8] = []
        let u = Array(s.utf8)
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "\\"), i + 3 < u.count,
               let v = UInt8(String(decoding: u[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                bytes.append(v)
                i += 4
            } else {
                bytes.append(u[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Why `path` cannot be mounted on, with the fix; nil when it can.
    static func problem(_ path: String, allowNonEmpty: Bool) -> String? {
        var st = Glibc.stat()
        let dead = "mount point \(path) is a dead mount (Transport endpoint is not connected: its process ended without unmounting): run `fusermount3 -u \(path)` (or `bucketfs unmount \(path)`), then mount again"
        if fstatat(AT_FDCWD, path, &st, 0) != 0 {
            let e = errno
            // ECONNABORTED: the first request after the process died; ENOTCONN after it.
            if e == ENOTCONN || e == ECONNABORTED { return dead }
            if e == ENOENT { return "mount point \(path) does not exist: create it (mkdir -p \(path))" }
            return "cannot use mount point \(path): \(String(cString: strerror(e)))"
        }
        if let m = mounts(at: resolved(path)).last {
            // The kernel may answer a stat from its cache: a statfs asks the mount's process.
            if m.type.hasPrefix("fuse") {
                switch probe(path) {
                case ENOTCONN, ECONNABORTED: return dead
                case ETIMEDOUT: return "\(path) is a mount (\(m.type) of \(m.source)) that does not answer: unmount it first (`fusermount3 -uz \(path)`), then mount again"
                default: break
                }
            }
            if m.type == "fuse.bucketfs" {
                let what = m.source.hasPrefix("bucketfs:") ? String(m.source.dropFirst("bucketfs:".count)) : m.source
                return "\(path) is already a bucketfs mount (of \(what)); one mount per mount point: unmount it first (`bucketfs unmount \(path)`), or choose another mount point"
            }
            return "\(path) is already a mount point (\(m.type) of \(m.source)); mounting over it would hide it: unmount it first (`umount \(path)`), or choose another mount point"
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { return "mount point \(path) is not a directory" }
        if !allowNonEmpty, let first = firstEntry(path) {
            return "mount point \(path) is not empty (it holds \(first)…): the mount would hide its files; choose an empty directory, or give --allow-non-empty (fstab: allow_non_empty)"
        }
        return nil
    }

    /// The errno of a statfs of `path` (0 when it answered), ETIMEDOUT when it did not answer
    /// within 2 s (a mount whose process hangs; the call is left to finish on its own thread).
    static func probe(_ path: String) -> Int32 {
        final class Box: @unchecked Sendable { var result: Int32 = ETIMEDOUT }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        let t = Thread {
            var st = statvfs()
            let r = statvfs(path, &st) == 0 ? 0 : errno
            box.result = r
            done.signal()
        }
        t.start()
        return done.wait(timeout: .now() + 2) == .success ? box.result : ETIMEDOUT
    }

    /// The name of one entry of directory `path` (not `.` or `..`), or nil when it has none or
    /// cannot be read (then the mount itself reports what is wrong).
    static func firstEntry(_ path: String) -> String? {
        guard let d = opendir(path) else { return nil }
        defer { closedir(d) }
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { return name }
        }
        return nil
    }
}
