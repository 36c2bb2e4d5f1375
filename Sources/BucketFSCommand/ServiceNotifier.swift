import BucketFS
import Foundation
import Logging
import StorageModel

/// systemd's readiness protocol for `Type=notify` units (docs/OPERATING.md, "A systemd service"),
/// without libsystemd: each message is one datagram to the AF_UNIX socket `$NOTIFY_SOCKET` (a
/// path, or `@name` in the abstract namespace). Nothing is sent when the variable is unset.
/// `READY=1` goes once the mount answers (a stat of the mount point, which waits for the kernel's
/// INIT, shows the mount), never before; `STATUS=` says what is pending while it serves,
/// and `STOPPING=1` when the unmount begins.
final class ServiceNotifier: @unchecked Sendable {
    let socketPath: String

    init?(environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let p = environment["NOTIFY_SOCKET"], p.hasPrefix("/") || p.hasPrefix("@") else { return nil }
        socketPath = p
    }

    /// Sends `message` ("READY=1\nSTATUS=…"); false when it could not be sent.
    @discardableResult
    func send(_ message: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(socketPath.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }  // the abstract namespace
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity else { return false }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let payload = Array(message.utf8)
        let sent = withUnsafePointer(to: &addr) { a in
            a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                payload.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, length) }
            }
        }
        return sent == payload.count
    }

    /// On a thread of its own (the stat blocks until the kernel's INIT is answered): waits until
    /// `mountpoint` answers as a mount (a stat of it succeeds on another device than its parent
    /// directory's), then sends `READY=1` with `status`. Gives up after `limit` (logged; systemd
    /// then fails the start on its own timeout).
    func readyWhenAnswering(_ mountpoint: String, status: String, logger: Logger, limit: Duration = .seconds(60)) {
        let parent = (mountpoint as NSString).deletingLastPathComponent
        let t = Thread { [self] in
            let end = ContinuousClock.now + limit
            var up = stat()
            let parentDevice = stat(parent.isEmpty ? "/" : parent, &up) == 0 ? up.st_dev : 0
            while ContinuousClock.now < end {
                var st = stat()
                if stat(mountpoint, &st) == 0, st.st_dev != parentDevice {
                    send("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())")
                    return
                }
                usleep(20_000)
            }
            logger.error("the mount at \(mountpoint) did not answer within \(limit): READY=1 not sent to systemd")
        }
        t.start()
    }

    /// `STATUS=` every `interval` while the mount serves: files not uploaded yet, files in lost+found.
    func statusEvery(_ interval: Duration, _ core: BucketFileSystem, clock: BucketClock = .real) -> Task<Void, Never> {
        Task { [self] in
            while !Task.isCancelled {
                do { try await clock.sleep(for: interval) } catch { return }
                send("STATUS=" + Self.status(core))
            }
        }
    }

    static func status(_ core: BucketFileSystem) -> String {
        let s = core.statistics()
        return "serving; \(s.dirtyFiles) file(s) not uploaded yet (\(s.pendingBytes) bytes), \(s.lostAndFoundEntries) in lost+found"
    }
}
