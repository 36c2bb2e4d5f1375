import Foundation

/// The read cache's files checked whole for the kernel to read them itself (FUSE passthrough,
/// docs/SEMANTICS.md §3.6, "The kernel reads the cache"): each by what `fstat` says of it when it
/// was checked. Any write to a file changes its change time (which no one can set), so a file
/// whose stamp is still the one checked holds the bytes checked, and is not read again to check.
final class KernelReadStamps: @unchecked Sendable {
    struct Stamp: Hashable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let changed: Int
        let changedNanos: Int
        let modified: Int
        let modifiedNanos: Int
    }

    private let lock = NSLock()
    // Guarded by `lock`.
    private var checked: Set<Stamp> = []

    static func stamp(_ fd: Int32) -> Stamp? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return stamp(st)
    }

    static func stamp(path: String) -> Stamp? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return stamp(st)
    }

    private static func stamp(_ st: stat) -> Stamp {
        Stamp(device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
                     changed: st.st_ctim.tv_sec, changedNanos: st.st_ctim.tv_nsec,
                     modified: st.st_mtim.tv_sec, modifiedNanos: st.st_mtim.tv_nsec)
    }

    /// Files read whole to check them for the kernel.
    var checks: Int { lock.withLock { _checks } }
    private var _checks = 0
    func noteCheck() { lock.withLock { _checks += 1 } }

    func isChecked(_ s: Stamp) -> Bool { lock.withLock { checked.contains(s) } }
    func note(_ s: Stamp) { lock.withLock { _ = checked.insert(s) } }
    func forget(_ s: Stamp) { lock.withLock { _ = checked.remove(s) } }
}
