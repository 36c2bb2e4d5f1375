import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import StorageModel

/// A failed TLS handshake as a user can act on it: the host, what was wrong with its certificate
/// (untrusted, expired, not yet valid, wrong name) and the fix. Such a failure is
/// `StorageError.tls`, never retried: the next handshake meets the same certificate. A
/// connection cut after the handshake (an unclean shutdown) is not one of these: it stays a
/// network fault, retried.
package enum TLSFailure {
    /// Whether `error` is a refused handshake (as opposed to a connection lost later).
    package static func isHandshakeFailure(_ error: any Error) -> Bool {
        if error is HTTP2NotOffered { return true }
        if let e = error as? NIOSSLError {
            switch e {
            case .handshakeFailed, .noCertificateToValidate, .unableToValidateCertificate, .cannotMatchULabel: return true
            default: return false
            }
        }
        if let e = error as? NIOSSLExtraError { return e == .failedToValidateHostname || e == .cannotUseIPAddressInSNI }
        // A BoringSSL error on its own comes from a connection already up (a damaged record):
        // a network fault, retried.
        return false
    }

    /// The message for a refused handshake with `url`'s host. For a chain BoringSSL refused, one
    /// more handshake (at most `within`) fetches the server's certificate to tell an expired
    /// certificate from an untrusted one.
    package static func explain(_ error: any Error, url: String, tls: TLSConfiguration, trust: TrustRoots,
                                within: Duration = .seconds(1)) async -> StorageError {
        let (host, port) = hostAndPort(url)
        let shown = "\(host):\(port)"
        let trusted = trust.description
        let text = "\(error)"
        if error is HTTP2NotOffered {
            return .tls(message: "\(shown) does not offer HTTP/2 (its TLS handshake chose no h2 by ALPN), and "
                + "--http-version 2 allows HTTP/2 only. Use --http-version auto (HTTP/2 where the server offers it) or 1.1")
        }
        if let e = error as? NIOSSLExtraError, e == .failedToValidateHostname {
            return .tls(message: "the TLS certificate of \(shown) is for another name (wrong name: it does not list "
                + "\(host)). Use a name the certificate lists in --endpoint, or reissue the certificate with \(host) "
                + "in its subjectAltName")
        }
        guard text.contains("CERTIFICATE_VERIFY_FAILED") else {
            return .tls(message: "the TLS handshake with \(shown) failed (\(short(text))): no certificate could be checked. "
                + "Is it an https server? A plain-HTTP server needs an http:// endpoint")
        }
        let now = time(nil)
        if let leaf = await peerCertificate(host: host, port: port, tls: tls, within: within) {
            if leaf.notValidAfter < now {
                return .tls(message: "the TLS certificate of \(shown) expired on \(date(leaf.notValidAfter)) (now: "
                    + "\(date(now))). Renew the server's certificate (or set this machine's clock right)")
            }
            if leaf.notValidBefore > now {
                return .tls(message: "the TLS certificate of \(shown) is not valid until \(date(leaf.notValidBefore)) "
                    + "(now: \(date(now))): set this machine's clock right, or renew the certificate")
            }
        }
        return .tls(message: "the TLS certificate of \(shown) is not trusted (untrusted: no CA in \(trusted) signed it). "
            + "If this endpoint or a proxy in between uses a private CA, pass that CA's PEM file with --ca-file "
            + "(or SSL_CERT_FILE)")
    }

    /// The certificate `host:port` presents, read with verification off; nil when no handshake
    /// gets that far within `within`.
    static func peerCertificate(host: String, port: Int, tls: TLSConfiguration, within: Duration) async -> NIOSSLCertificate? {
        var c = tls
        c.certificateVerification = .noHostnameVerification
        guard let context = try? NIOSSLContext(configuration: c) else { return nil }
        let group = MultiThreadedEventLoopGroup.singleton
        let promise = group.next().makePromise(of: NIOSSLCertificate?.self)
        let sni = isIPAddress(host) ? nil : host
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.nanoseconds(HTTPTransport.nanos(within)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let callback: NIOSSLCustomVerificationCallback = { certs, verdict in
                        promise.succeed(certs.first)
                        verdict.succeed(NIOSSLVerificationResult.failed)
                    }
                    let handler = try NIOSSLClientHandler(context: context, serverHostname: sni,
                                                          customVerificationCallback: callback)
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
        let timer = promise.futureResult.eventLoop.scheduleTask(in: .nanoseconds(HTTPTransport.nanos(within))) {
            promise.succeed(nil)
        }
        var channel: Channel?
        do {
            channel = try await bootstrap.connect(host: host, port: port).get()
        } catch {
            promise.succeed(nil)
        }
        let leaf = try? await promise.futureResult.get()
        timer.cancel()
        try? await channel?.close()
        return leaf ?? nil
    }

    static func hostAndPort(_ url: String) -> (String, Int) {
        let c = URLComponents(string: url)
        let host = (c?.host ?? url).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return (host, c?.port ?? (c?.scheme == "http" ? 80 : 443))
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    static func date(_ t: time_t) -> String {
        let f = ISO8601DateFormatter()
        return f.string(from: Date(timeIntervalSince1970: TimeInterval(t)))
    }

    /// BoringSSL's error stack without its numeric codes.
    static func short(_ text: String) -> String {
        if let r = text.range(of: #"[A-Z_]{6,}"#, options: .regularExpression) { return String(text[r]) }
        return String(text.prefix(160))
    }
}
