import AsyncHTTPClient
import Foundation
import NIOCore
import NIOSSL

/// How a store's HTTP client connects, shared by the gs:// and firebase:// stores: the trust
/// roots for https, the connections kept, the idle bound and the socket reads.
package struct ClientSettings: Sendable {
    package var trust: TrustRoots
    /// The client TLS configuration made from `trust` (checked by the caller first: a trust
    /// setting that fails here trusts nothing rather than falling back to the system store).
    package let tls: TLSConfiguration

    package init(trust: TrustRoots) {
        self.trust = trust
        if let c = try? trust.tlsConfiguration() {
            tls = c
        } else {
            var none = TLSConfiguration.makeClientConfiguration()
            none.trustRoots = .certificates([])
            tls = none
        }
    }

    /// The client configuration: at most `maxConnections` HTTP/1.1 connections per host; a
    /// failed connection attempt (refused, or a TLS handshake refused) fails the waiting requests
    /// at once, so the transport's retry policy decides what to repeat (the client's own retries
    /// would wait out the deadline and hide a certificate error behind a timeout).
    package func configuration(idleTimeout: Duration, maxConnections: Int, receiveBuffer: Int) -> HTTPClient.Configuration {
        var config = HTTPClient.Configuration()
        config.tlsConfiguration = tls
        config.timeout = .init(connect: .seconds(10), read: .nanoseconds(GCSTransport.nanos(idleTimeout)))
        config.connectionPool = .init(idleTimeout: .seconds(30),
                                      concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, maxConnections))
        config.connectionPool.retryConnectionEstablishment = false
        config.decompression = .disabled
        config.redirectConfiguration = .disallow
        config.http1_1ConnectionDebugInitializer = GCSStore.socketReads(upTo: receiveBuffer)
        return config
    }
}
