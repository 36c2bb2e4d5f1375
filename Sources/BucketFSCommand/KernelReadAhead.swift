import Foundation
import Logging

/// The kernel's read-ahead for the mount (its backing device's `read_ahead_kb`). FUSE mounts
/// start at 128 KiB, so a sequential reader reaches the filesystem in 128 KiB requests, each a
/// round trip through the kernel; 1 MiB requests cost an eighth of them (gcsfuse's tuning guide
/// gives the same advice). Needs root (sysfs); otherwise the kernel's value stays, logged.
enum KernelReadAhead {
    /// Sets it once the mount answers (a stat waits for the kernel's INIT, which would otherwise
    /// lower it again), on a thread of its own so the session loop can answer that INIT.
    static func apply(kilobytes: Int, mountpoint: String, logger: Logger) {
        guard kilobytes > 0 else { return }
        let t = Thread {
            var st = stat()
            guard stat(mountpoint, &st) == 0 else { return }
            let dev = UInt64(st.st_dev)
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & ~UInt64(0xfff))
            let minor = (dev & 0xff) | ((dev >> 12) & ~UInt64(0xff))
            let file = "/sys/class/bdi/\(major):\(minor)/read_ahead_kb"
            do {
                try "\(kilobytes)\n".write(toFile: file, atomically: false, encoding: .utf8)
                logger.debug("kernel read-ahead of \(mountpoint): \(kilobytes) KiB (\(file))")
            } catch {
                logger.info("kernel read-ahead of \(mountpoint) stays at the kernel's value: cannot write \(file) (needs root)")
            }
        }
        t.start()
    }
}
