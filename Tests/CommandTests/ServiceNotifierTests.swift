import Foundation
import Testing
@testable import bucketfs

/// `$NOTIFY_SOCKET` messages (docs/OPERATING.md, "A systemd service"): one datagram each, to a
/// path or to `@name` in the abstract namespace; nothing without the variable.
@Suite struct ServiceNotifierTests {
    func receiver(_ address: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        #expect(fd >= 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(address.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in for (i, b) in bytes.enumerated() { p[i] = b } }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        #expect(rc == 0)
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    func receive(_ fd: Int32) -> String {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = recv(fd, &buf, buf.count, 0)
        return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self) : ""
    }

    @Test func sendsOneDatagramToAPathOrAnAbstractName() throws {
        let path = NSTemporaryDirectory() + "bucketfs-notify-" + UUID().uuidString.prefix(8)
        defer { unlink(path) }
        for address in [path, "@bucketfs-test-" + UUID().uuidString.prefix(8)] {
            let fd = try receiver(address)
            defer { close(fd) }
            let n = try #require(ServiceNotifier(environment: ["NOTIFY_SOCKET": address]))
            #expect(n.send("READY=1\nSTATUS=mounted"))
            #expect(receive(fd) == "READY=1\nSTATUS=mounted")
        }
        #expect(ServiceNotifier(environment: [:]) == nil)
        #expect(ServiceNotifier(environment: ["NOTIFY_SOCKET": "relative"]) == nil)
    }
}
