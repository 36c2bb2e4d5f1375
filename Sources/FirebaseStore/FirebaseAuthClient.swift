import AsyncHTTPClient
import Foundation
import CloudHTTP
import Logging
import NIOCore
import NIOFoundationCompat
import StorageModel

/// The Firebase Auth REST API: `accounts:signInWithPassword`, `accounts:signInWithCustomToken`,
/// `accounts:signUp` (identitytoolkit) and the refresh-token grant (securetoken).
///
/// Refusals are `StorageError.unauthenticated` carrying the server's reason code
/// (INVALID_LOGIN_CREDENTIALS, USER_DISABLED, TOKEN_EXPIRED…); a 403 is `.unauthorized`. Transient
/// trouble (no answer, 5xx, 429) is tried up to three times, then thrown as a transient error
/// naming the Auth host that did not answer. A refused connection fails at once (the client does
/// not keep trying to connect until its deadline), so an Auth server that is down is known in
/// well under a second.
/// Passwords and tokens never reach a log line or an error message; URLs are logged without their
/// query (the API key).
public struct FirebaseAuthClient: Sendable {
    public let endpoints: FirebaseEndpoints
    let apiKey: String
    private let logger: Logger
    private let client: HTTPClient
    /// Time one exchange may take.
    var timeout: Duration = .seconds(20)

    private let settings: ClientSettings
    /// The clock a token's expiry is read on and the pauses between attempts wait on
    /// (docs/ARCHITECTURE.md, "One clock").
    let clock: BucketClock

    /// `trust`: the certificates trusted for an https Auth endpoint (the system store by default).
    public init(endpoints: FirebaseEndpoints, apiKey: String, logger: Logger, trust: TrustRoots = .system,
                clock: BucketClock = .real) {
        self.clock = clock
        self.endpoints = endpoints
        self.apiKey = apiKey
        self.logger = logger
        self.settings = ClientSettings(trust: trust)
        self.client = AuthClients.client(for: settings)
    }

    /// The Auth host of a call, as messages name it: "Firebase Auth (securetoken) at URL".
    static func named(_ base: URL) -> String {
        let host = base.lastPathComponent.hasSuffix(".googleapis.com") ? base.lastPathComponent : base.host ?? ""
        let service = host.split(separator: ".").first.map(String.init) ?? host
        return "Firebase Auth (\(service)) at \(base.absoluteString)"
    }

    public func signIn(email: String, password: String) async throws -> FirebaseTokens {
        let sent = clock.date
        let o = try await post(endpoints.identityToolkit, "v1/accounts:signInWithPassword", what: "sign-in with email and password",
                               json: ["email": email, "password": password, "returnSecureToken": true])
        return try tokens(o, provider: "password", sent: sent)
    }

    public func signIn(customToken: String) async throws -> FirebaseTokens {
        let sent = clock.date
        let o = try await post(endpoints.identityToolkit, "v1/accounts:signInWithCustomToken", what: "sign-in with a custom token",
                               json: ["token": customToken, "returnSecureToken": true])
        return try tokens(o, provider: "custom", sent: sent)
    }

    public func signUpAnonymously() async throws -> FirebaseTokens {
        let sent = clock.date
        let o = try await post(endpoints.identityToolkit, "v1/accounts:signUp", what: "anonymous sign-up",
                               json: ["returnSecureToken": true])
        return try tokens(o, provider: "anonymous", sent: sent)
    }

    public func refresh(_ refreshToken: String) async throws -> FirebaseTokens {
        let form = "grant_type=refresh_token&refresh_token=\(CloudURL.encode(refreshToken))"
        let sent = clock.date
        let o = try await post(endpoints.secureToken, "v1/token", what: "token refresh",
                               body: ByteBuffer(string: form), contentType: "application/x-www-form-urlencoded")
        var t = try tokens(o, provider: nil, sent: sent)
        if t.refreshToken.isEmpty { t.refreshToken = refreshToken }
        return t
    }

    // MARK: exchange

    /// Reads both answer shapes: identitytoolkit's camelCase and securetoken's snake_case. The
    /// expiry counts from when the request was sent (the token cannot be older), on this machine's
    /// clock (the token's own `exp` is on the server's).
    private func tokens(_ o: [String: Any], provider: String?, sent: Date) throws -> FirebaseTokens {
        guard let id = (o["idToken"] as? String) ?? (o["id_token"] as? String), !id.isEmpty else {
            throw StorageError.unauthenticated(message: "Firebase Auth answered without an ID token")
        }
        let refresh = (o["refreshToken"] as? String) ?? (o["refresh_token"] as? String) ?? ""
        let claims = IDTokenClaims(id)
        let expiresIn = Self.number(o["expiresIn"] ?? o["expires_in"]) ?? 3600
        guard let uid = (o["localId"] as? String) ?? (o["user_id"] as? String) ?? claims.uid, !uid.isEmpty else {
            throw StorageError.unauthenticated(message: "Firebase Auth answered without a user id")
        }
        return FirebaseTokens(idToken: id, refreshToken: refresh, expiresAt: sent.addingTimeInterval(expiresIn),
                              uid: uid, email: (o["email"] as? String).flatMap { $0.isEmpty ? nil : $0 } ?? claims.email,
                              provider: claims.provider ?? provider ?? "unknown")
    }

    private static func number(_ v: Any?) -> TimeInterval? {
        switch v {
        case let s as String: return TimeInterval(s)
        case let n as NSNumber: return n.doubleValue
        default: return nil
        }
    }

    private func post(_ base: URL, _ path: String, what: String, json: [String: Any]) async throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])
        return try await post(base, path, what: what, body: ByteBuffer(data: body), contentType: "application/json")
    }

    private func post(_ base: URL, _ path: String, what: String, body: ByteBuffer, contentType: String) async throws -> [String: Any] {
        let shown = base.appendingPathComponent(path).absoluteString
        var req = HTTPClientRequest(url: shown + "?key=" + CloudURL.encode(apiKey))
        req.method = .POST
        req.headers.add(name: "Content-Type", value: contentType)
        req.body = .bytes(body)
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await once(req, base: base, shown: shown, what: what)
            } catch let e as StorageError where e.isTransient && attempt < 3 {
                logger.debug("Firebase Auth \(what) at \(shown): \(e); trying again")
                do { try await clock.sleep(for: .milliseconds(200 * attempt)) } catch { throw StorageError.cancelled }
            }
        }
    }

    private func once(_ req: HTTPClientRequest, base: URL, shown: String, what: String) async throws -> [String: Any] {
        let status: Int
        let data: Data
        do {
            let resp = try await client.execute(req, timeout: .nanoseconds(HTTPTransport.nanos(timeout)))
            status = Int(resp.status.code)
            data = Data(buffer: try await resp.body.collect(upTo: 1 << 20))
        } catch {
            if TLSFailure.isHandshakeFailure(error) {
                throw await TLSFailure.explain(error, url: shown, tls: settings.tls, trust: settings.trust)
            }
            let e = HTTPTransport.map(error)
            switch e {
            case .unknown(status: 0, _):
                throw StorageError.unknown(status: 0, message: "\(Self.named(base)) did not answer the \(what): \(ConnectionErrors.describe(error))")
            case .timeout:
                throw StorageError.timeout(message: "\(Self.named(base)) did not answer the \(what) within \(timeout)")
            default:
                throw e
            }
        }
        logger.debug("Firebase Auth \(what): POST \(shown) → \(status)")
        if status == 200, let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] { return o }
        let reason = Self.reason(data) ?? "HTTP \(status)"
        switch status {
        case 200: throw StorageError.unknown(status: 200, message: "Firebase Auth \(what): the answer is not JSON")
        case 408: throw StorageError.timeout(message: "Firebase Auth \(what): \(reason)")
        case 429: throw StorageError.quotaExceeded(message: "Firebase Auth \(what): \(reason)")
        case 500...599: throw StorageError.unknown(status: status, message: "\(Self.named(base)) failed the \(what): \(reason)")
        case 403: throw StorageError.unauthorized(path: shown, message: "Firebase Auth refused the \(what): \(reason)")
        default: throw StorageError.unauthenticated(message: "Firebase Auth refused the \(what): \(reason)")
        }
    }

    /// The reason code of an Auth error body (`{"error":{"message":"INVALID_LOGIN_CREDENTIALS"}}`,
    /// or securetoken's `{"error":"invalid_grant","error_description":"…"}`), else the text.
    static func reason(_ data: Data) -> String? {
        if let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] {
            if let e = o["error"] as? [String: Any], let m = e["message"] as? String { return m }
            if let m = o["error_description"] as? String { return (o["error"] as? String).map { "\($0): \(m)" } ?? m }
            if let m = o["error"] as? String { return m }
        }
        let s = String(decoding: data.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return s.isEmpty ? nil : s
    }
}

/// One HTTP client per trust setting for Auth calls, kept for the life of the process like
/// `HTTPClient.shared` (a sign-in or token refresh is rare; its client is never shut down). Unlike
/// `HTTPClient.shared`, a failed connection attempt fails the call at once (a refused certificate
/// is reported, not waited on until the timeout).
private enum AuthClients {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var clients: [TrustRoots: HTTPClient] = [:]

    static func client(for settings: ClientSettings) -> HTTPClient {
        lock.lock()
        defer { lock.unlock() }
        if let c = clients[settings.trust] { return c }
        var config = HTTPClient.Configuration()
        config.tlsConfiguration = settings.tls
        config.connectionPool.retryConnectionEstablishment = false
        config.timeout = .init(connect: .seconds(5), read: .seconds(20))
        config.redirectConfiguration = .disallow
        let c = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: config)
        clients[settings.trust] = c
        return c
    }
}
