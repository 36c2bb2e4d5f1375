import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// `--http-version`: which HTTP a store speaks over https (plain http:// is always HTTP/1.1).
public enum HTTPVersionChoice: String, Sendable, CaseIterable {
    /// Object data (downloads, streamed uploads) over HTTP/1.1, on up to `--max-connections`
    /// connections; everything else (listings, metadata, small writes) over HTTP/2 when the server
    /// offers it, as streams on one connection (docs/BENCHMARKS.md, `Scripts/bench-tls.sh`).
    case auto
    /// HTTP/1.1 only: up to `--max-connections` connections per host.
    case http1_1 = "1.1"
    /// HTTP/2 only (ALPN offers h2 alone): one connection per host, requests as streams on it.
    case http2 = "2"
}

/// How a store's HTTP client connects, shared by the gs:// and firebase:// stores: the trust
/// roots for https, the HTTP version, the connections kept, the idle bound and the socket reads.
package struct ClientSettings: Sendable {
    package var trust: TrustRoots
    package var httpVersion: HTTPVersionChoice
    /// Connections and handshakes this client made.
    package let counter = ConnectionCounter()
    /// The client TLS configuration made from `trust` (checked by the caller first: a trust
    /// setting that fails here trusts nothing rather than falling back to the system store).
    package let tls: TLSConfiguration

    package init(trust: TrustRoots, httpVersion: HTTPVersionChoice = .auto) {
        self.trust = trust
        self.httpVersion = httpVersion
        var c: TLSConfiguration
        if let made = try? trust.tlsConfiguration() {
            c = made
        } else {
            c = TLSConfiguration.makeClientConfiguration()
            c.trustRoots = .certificates([])
        }
        switch httpVersion {
        case .auto: c.applicationProtocols = ["h2", "http/1.1"]
        case .http1_1: c.applicationProtocols = ["http/1.1"]
        case .http2: c.applicationProtocols = ["h2"]
        }
        tls = c
    }

    /// Whether object data goes on a client of its own (HTTP/1.1), apart from the rest (the
    /// stores do so for https endpoints only: over plain http everything is HTTP/1.1 anyway).
    package var splitsMedia: Bool { httpVersion == .auto }

    /// The event loop of every client of an https endpoint, all stores together: one thread.
    /// AsyncHTTPClient runs a request's delegate on a loop it picks from its group without regard
    /// to the connection the request gets; with the default group (a loop per core) a request
    /// whose connection sat on another loop sent each body chunk across to that loop, and the
    /// demand for the next read back: a cold 256 MiB read through a TLS front cost the daemon
    /// 19,000 to 78,000 context switches (docs/BENCHMARKS.md, `Scripts/bench-tls.sh`). With one
    /// loop, the socket read, the TLS, the HTTP decoding and the delivery of a chunk (its CRC and
    /// its copy into the read-ahead part) run on one thread, with no hop; the replies to the
    /// kernel run on other threads. Under HTTP/2 the one connection per host sits on one loop
    /// anyway. One core decrypts everything: on this 2-core machine that is well below what the
    /// rest of the read path takes. Plain http:// (test servers) keeps the default group.
    package static let httpsEventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// The group for a client of `endpoint`'s scheme (`httpsEventLoopGroup` for https).
    package static func eventLoopGroup(https: Bool) -> any EventLoopGroup {
        https ? httpsEventLoopGroup : HTTPClient.defaultEventLoopGroup
    }

    /// The configuration of the client for object data when `splitsMedia`: HTTP/1.1 only.
    package func mediaConfiguration(idleTimeout: Duration, maxConnections: Int, receiveBuffer: Int) -> HTTPClient.Configuration {
        var config = configuration(idleTimeout: idleTimeout, maxConnections: maxConnections, receiveBuffer: receiveBuffer)
        var t = tls
        t.applicationProtocols = ["http/1.1"]
        config.tlsConfiguration = t
        config.httpVersion = .http1Only
        return config
    }

    /// The configuration of the client for streamed uploads: that of object data (`media`: the
    /// HTTP/1.1 one of `mediaConfiguration`) or of the rest, without the read timeout. Its timer
    /// starts when the body's last byte enters the socket, while the socket buffers still hold
    /// several MiB for the link to carry before the server can answer (6 MB outlast 10 s below
    /// 0.6 MB/s): the upload's watchdog, which watches that drain (`SendQueue`), decides
    /// when such a request has stopped moving (docs/SEMANTICS.md §5.2).
    package func uploadConfiguration(media: Bool, idleTimeout: Duration, maxConnections: Int, receiveBuffer: Int) -> HTTPClient.Configuration {
        var config = media ? mediaConfiguration(idleTimeout: idleTimeout, maxConnections: maxConnections, receiveBuffer: receiveBuffer)
            : configuration(idleTimeout: idleTimeout, maxConnections: maxConnections, receiveBuffer: receiveBuffer)
        config.timeout.read = nil
        return config
    }

    /// The client configuration: at most `maxConnections` HTTP/1.1 connections per host (under
    /// HTTP/2 the client keeps one per host, the requests in flight being streams on it); a
    /// failed connection attempt (refused, or a TLS handshake refused) fails the waiting requests
    /// at once, so the transport's retry policy decides what to repeat (the client's own retries
    /// would wait out the deadline and hide a certificate error behind a timeout).
    package func configuration(idleTimeout: Duration, maxConnections: Int, receiveBuffer: Int) -> HTTPClient.Configuration {
        var config = HTTPClient.Configuration()
        config.tlsConfiguration = tls
        config.httpVersion = httpVersion == .http1_1 ? .http1Only : .automatic
        config.timeout = .init(connect: .seconds(10), read: .nanoseconds(HTTPTransport.nanos(idleTimeout)))
        config.connectionPool = .init(idleTimeout: .seconds(30),
                                      concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, maxConnections))
        config.connectionPool.retryConnectionEstablishment = false
        config.decompression = .disabled
        config.redirectConfiguration = .disallow
        let reads = Self.socketReads(upTo: receiveBuffer)
        // `--http-version 2` asks for HTTP/2 only: an https server that answers the handshake
        // without choosing h2 (ALPN) would otherwise be spoken to in HTTP/1.1 without a word, so
        // such a connection is closed and its requests fail at once, naming the protocol
        // (docs/SEMANTICS.md §5.6). Plain http:// stays HTTP/1.1.
        let h1 = httpVersion == .http2 ? Self.refusingTLS(then: reads) : reads
        config.http1_1ConnectionDebugInitializer = counter.counting(http2: false, then: h1)
        config.http2ConnectionDebugInitializer = counter.counting(http2: true, then: reads)
        return config
    }

    /// How each connection reads its socket: one read of up to `upTo` bytes each time the socket is
    /// readable, passed on at once. NIO's defaults (reads of at most 64 KiB, four in a row before
    /// the batch is passed on) cost a trip through the HTTP decoder and the response delegate per
    /// 64 KiB: 4,000+ for a 256 MiB download. An adaptive size that shrinks after short reads did
    /// worse than a fixed one: loopback reads often come short of the buffer.
    /// Scripts/bench-reads.sh's CPU row (a cold sequential read from the emulator) is the measure
    /// to watch when changing this.
    package static func socketReads(upTo bytes: Int) -> @Sendable (Channel) -> EventLoopFuture<Void> {
        let allocator = FixedSizeRecvByteBufferAllocator(capacity: max(1 << 12, bytes))
        return { channel in
            channel.setOption(ChannelOptions.recvAllocator, value: allocator).flatMap {
                channel.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
            }
        }
    }

    /// An HTTP/1.1 connection initializer that refuses TLS connections (`HTTP2NotOffered`) and
    /// passes plain ones to `next`.
    static func refusingTLS(then next: @escaping @Sendable (Channel) -> EventLoopFuture<Void>)
        -> @Sendable (Channel) -> EventLoopFuture<Void> {
        { channel in
            channel.pipeline.context(handlerType: NIOSSLClientHandler.self).map { _ in true }.recover { _ in false }
                .flatMap { tls in
                    guard tls else { return next(channel) }
                    channel.close(promise: nil)
                    return channel.eventLoop.makeFailedFuture(HTTP2NotOffered())
                }
        }
    }
}

/// An https server that completed the TLS handshake without choosing HTTP/2 while
/// `--http-version 2` allows nothing else: never retried (the next handshake chooses the same).
package struct HTTP2NotOffered: Error, CustomStringConvertible {
    package var description: String { "the server does not offer HTTP/2 (ALPN chose no h2)" }
}
