import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The bytes this process's TCP connections to one port have sent, or queued to send, that the
/// peer has not acknowledged yet, as the kernel counts them (docs/SEMANTICS.md §5.2). On a slow
/// link a streamed upload's last byte leaves the process while the socket still holds megabytes;
/// that queue shrinks at the link's pace, so its shrinking is the upload's progress after its
/// last byte (and while the full buffers take nothing more). Read on the process's own sockets
/// (those among `/proc/self/fd` whose peer has the port: `SIOCOUTQ`, established connections
/// only); nil where that cannot be seen (no procfs, or no such connection, as through an HTTP
/// proxy), and the caller falls back to an estimate (`SendBacklog`). The queries only read: a
/// descriptor closed and reused meanwhile answers for whatever it then is, for one sample.
package struct SendQueue: Sendable {
    /// The remote port the connections go to.
    package let port: Int

    package init(port: Int) { self.port = port }

    /// The port of `url` (its scheme's default when it names none); nil for a URL without a host.
    package init?(url: String) {
        guard let c = URLComponents(string: url), c.host != nil else { return nil }
        if let p = c.port { port = p } else { port = c.scheme?.lowercased() == "https" ? 443 : 80 }
    }

    /// The unacknowledged bytes of each of this process's established connections to `port`, by
    /// socket inode; nil when there is none, or procfs cannot be read.
    package func unacknowledged() -> [UInt64: Int64]? {
        var queues: [UInt64: Int64] = [:]
        for (fd, inode) in Self.ownSockets() {
            guard Self.peerPort(fd) == port, Self.established(fd) else { continue }
            var queued: Int32 = 0
            guard ioctl(fd, Self.siocoutq, &queued) == 0 else { continue }
            queues[inode] = Int64(queued)
        }
        return queues.isEmpty ? nil : queues
    }

    /// Whether some connection's queue is shorter in `now` than it was in `before` (a connection
    /// that came or went is no sign of the link moving).
    package static func shrank(from before: [UInt64: Int64], to now: [UInt64: Int64]) -> Bool {
        now.contains { inode, q in before[inode].map { q < $0 } ?? false }
    }

    /// `SIOCOUTQ` (linux/sockios.h, the same number as `TIOCOUTQ`): a TCP socket's bytes not yet
    /// acknowledged, sent or not.
    static let siocoutq: UInt = 0x5411

    /// The descriptors among this process's open ones that are sockets, with their inodes.
    static func ownSockets() -> [(fd: Int32, inode: UInt64)] {
        guard let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return [] }
        var sockets: [(Int32, UInt64)] = []
        var buffer = [CChar](repeating: 0, count: 64)
        for name in fds {
            guard let fd = Int32(name) else { continue }
            let n = readlink("/proc/self/fd/" + name, &buffer, buffer.count - 1)
            guard n > 9 else { continue }
            buffer[n] = 0
            let target = String(cString: buffer)
            // "socket:[12345]"
            guard target.hasPrefix("socket:["), target.hasSuffix("]"),
                  let inode = UInt64(target.dropFirst(8).dropLast()) else { continue }
            sockets.append((fd, inode))
        }
        return sockets
    }

    /// The port of the peer of the socket `fd` (IPv4 or IPv6), or nil.
    static func peerPort(_ fd: Int32) -> Int? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) == 0 }
        }
        guard ok else { return nil }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            }
        case AF_INET6:
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
        default:
            return nil
        }
    }

    /// Whether the TCP socket `fd` is an established connection.
    static func established(_ fd: Int32) -> Bool {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return false }
        return Int(info.tcpi_state) == Int(TCP_ESTABLISHED)
    }
}
