import CloudHTTP
import Foundation
import GCSStore
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The send queue of the process's own connections (docs/SEMANTICS.md §5.2), which a streamed
/// upload watches after its last byte: read from the kernel's tables, and seen to shrink as the
/// peer reads.
@Suite struct SendQueueTests {
    @Test func thePortAndTheShrinking() {
        #expect(SendQueue(url: "https://storage.example/upload?x=1")?.port == 443)
        #expect(SendQueue(url: "http://127.0.0.1:9023/b")?.port == 9023)
        #expect(SendQueue(url: "not a url") == nil)
        #expect(SendQueue.shrank(from: [1: 10, 2: 5], to: [1: 10, 2: 4]))
        #expect(!SendQueue.shrank(from: [1: 10], to: [1: 10, 2: 0]), "a new connection is no move")
        #expect(!SendQueue.shrank(from: [1: 10, 2: 3], to: [1: 11]), "a connection gone is no move")
    }

    /// A connection to a listener that reads nothing: what was written stays queued, and the
    /// queue shrinks, to nothing, once the peer reads it.
    @Test func theQueueOfARealConnectionShrinksAsThePeerReads() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(listener >= 0)
        defer { close(listener) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &addr) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                guard bind(listener, sa, len) == 0, listen(listener, 1) == 0, getsockname(listener, sa, &len) == 0
                else { throw POSIXError(.EADDRINUSE) }
            }
        }
        let port = Int(UInt16(bigEndian: addr.sin_port))
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        try withUnsafePointer(to: &addr) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                guard connect(client, sa, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 else { throw POSIXError(.ECONNREFUSED) }
            }
        }
        let server = accept(listener, nil, nil)
        defer { close(server) }
        _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
        let chunk = [UInt8](repeating: 7, count: 64 << 10)
        var written = 0
        while written < 4 << 20 {
            let n = chunk.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            written += n
        }
        let probe = SendQueue(port: port)
        let before = try #require(probe.unacknowledged(), "the connection is seen")
        #expect(before.count == 1, "only the client's side goes to the port (not the listener, not the accepted side): \(before)")
        let queued = before.values.first ?? 0
        #expect(queued > 0 && queued <= Int64(written), "queued \(queued) of \(written) written")
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var read = 0
        while read < written {
            let n = recv(server, &buffer, buffer.count, 0)
            if n <= 0 { break }
            read += n
        }
        let after = try #require(probe.unacknowledged())
        #expect(after.values.first == 0, "all read, nothing left queued: \(after)")
        #expect(SendQueue.shrank(from: before, to: after))
    }
}
