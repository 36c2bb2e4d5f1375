import Foundation
import Metrics
import NIOCore
import NIOSSL

/// How many connections (and TLS handshakes) a store's HTTP client opened, by protocol: a mount
/// that opens one per request is a bug, and this is where it shows (the metrics
/// `bucketfs_store_connections_total{protocol}` and `bucketfs_store_tls_handshakes_total`, and the
/// line a mount logs when it ends).
public final class ConnectionCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var counts = Snapshot()

    public struct Snapshot: Sendable, Equatable, CustomStringConvertible {
        public var http1 = 0
        public var http2 = 0
        public var tlsHandshakes = 0
        public var total: Int { http1 + http2 }
        public var description: String {
            "\(total) connection\(total == 1 ? "" : "s") (HTTP/1.1: \(http1), HTTP/2: \(http2)), \(tlsHandshakes) TLS handshake\(tlsHandshakes == 1 ? "" : "s")"
        }
    }

    public init() {}

    public var snapshot: Snapshot {
        lock.lock(); defer { lock.unlock() }
        return counts
    }

    func opened(http2: Bool, tls: Bool) {
        lock.lock()
        if http2 { counts.http2 += 1 } else { counts.http1 += 1 }
        if tls { counts.tlsHandshakes += 1 }
        lock.unlock()
        Counter(label: "bucketfs_store_connections_total", dimensions: [("protocol", http2 ? "2" : "1.1")]).increment()
        if tls { Counter(label: "bucketfs_store_tls_handshakes_total").increment() }
    }

    /// A connection initializer that counts the connection (a TLS one when its pipeline has a TLS
    /// handler), then runs `next`.
    func counting(http2: Bool, then next: @escaping @Sendable (Channel) -> EventLoopFuture<Void>)
        -> @Sendable (Channel) -> EventLoopFuture<Void> {
        { [self] channel in
            channel.pipeline.context(handlerType: NIOSSLClientHandler.self).map { _ in true }.recover { _ in false }
                .flatMap { tls in
                    self.opened(http2: http2, tls: tls)
                    return next(channel)
                }
        }
    }
}

/// A store that counts its connections.
public protocol ConnectionCounting {
    var connections: ConnectionCounter.Snapshot { get }
}
