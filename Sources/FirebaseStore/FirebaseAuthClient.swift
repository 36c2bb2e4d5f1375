import Foundation
import CloudHTTP
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import StorageModel

/// The Firebase Auth REST API: `accounts:signInWithPassword`, `accounts:signInWithCustomToken`,
/// `accounts:signUp` (identitytoolkit) and the refresh-token grant (securetoken).
///
/// Refusals are `StorageError.unauthenticated` carrying the server's reason code
/// (INVALID_LOGIN_CREDENTIALS, USER_DISABLED, TOKEN_EXPIRED…); a 403 is `.unauthorized`. Transient
/// trouble (no answer, 5xx, 429) is tried up to three times (`RetryPolicy.maxAttempts`), then
/// thrown as a transient error naming the Auth host that did not answer. A refused connection
/// fails at once (the client does not keep trying to connect until its deadline), so an Auth
/// server that is down is known in well under a second. The requests go through CloudHTTP's
/// transport (`CredentialRequests`) on clients of their own, with the trust given.
/// Passwords and tokens never reach a log line or an error message; URLs are logged without their
/// query (the API key).
public struct FirebaseAuthClient: Sendable {
    public let endpoints: FirebaseEndpoints
    let apiKey: String
    private let logger: Logger
    private let requests: CredentialRequests
    /// The clock a token's expiry is read on and the pauses between attempts wait on
    /// (docs/ARCHITECTURE.md, "One clock").
    var clock: BucketClock { requests.clock }

    /// Time one exchange may take, and how often a call is tried.
    static func policy(clock: BucketClock) -> RetryPolicy {
        RetryPolicy(deadline: .seconds(65), requestTimeout: .seconds(20), initialBackoff: .milliseconds(200),
                    maxBackoff: .seconds(1), maxAttempts: 3, clock: clock)
    }

    /// `trust`: the certificates trusted for an https Auth endpoint (the system store by default).
    public init(endpoints: FirebaseEndpoints, apiKey: String, logger: Logger, trust: TrustRoots = .system,
                clock: BucketClock = .real) {
        self.endpoints = endpoints
        self.apiKey = apiKey
        self.logger = logger
        var tuning = HTTPTuning()
        tuning.trust = trust
        tuning.idleTimeout = .seconds(20)
        let https = [endpoints.identityToolkit, endpoints.secureToken].contains { $0.scheme?.lowercased() == "https" }
        requests = CredentialRequests(clients: CloudHTTPClients(tuning: tuning, https: https, maxConnections: 4),
                                      policy: Self.policy(clock: clock), logger: logger, label: "Firebase Auth")
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
        let request = CloudRequest(.POST, shown + "?key=" + CloudURL.encode(apiKey),
                                   headers: ["Content-Type": contentType], body: body)
        let answer: CloudResponse
        do {
            answer = try await requests.send(what, request, retried: true) { answer in
                RetryPolicy.isRetryable(status: answer.status) ? Self.refusal(answer, base: base, shown: shown, what: what) : nil
            }
        } catch let e as StorageError {
            // No answer: named with the Auth host (a refused certificate is explained as it is).
            switch e {
            case .unknown(status: 0, let m):
                throw StorageError.unknown(status: 0, message: "\(Self.named(base)) did not answer the \(what): \(Self.cause(m))")
            case .timeout(let m) where !m.hasPrefix("Firebase Auth \(what)"):
                throw StorageError.timeout(message: "\(Self.named(base)) did not answer the \(what): \(m)")
            default:
                throw e
            }
        }
        if answer.status == 200, let o = try? JSONSerialization.jsonObject(with: answer.data) as? [String: Any] { return o }
        throw Self.refusal(answer, base: base, shown: shown, what: what)
    }

    /// What an answer other than a 200 with a JSON object means.
    private static func refusal(_ answer: CloudResponse, base: URL, shown: String, what: String) -> StorageError {
        let status = answer.status
        let reason = Self.reason(answer.data) ?? "HTTP \(status)"
        switch status {
        case 200: return StorageError.unknown(status: 200, message: "Firebase Auth \(what): the answer is not JSON")
        case 408: return StorageError.timeout(message: "Firebase Auth \(what): \(reason)")
        case 429: return StorageError.quotaExceeded(message: "Firebase Auth \(what): \(reason)")
        case 500...599: return StorageError.unknown(status: status, message: "\(Self.named(base)) failed the \(what): \(reason)")
        case 403: return StorageError.unauthorized(path: shown, message: "Firebase Auth refused the \(what): \(reason)")
        default: return StorageError.unauthenticated(message: "Firebase Auth refused the \(what): \(reason)")
        }
    }

    /// The transport's words for a connection that failed, without its "connection error: ".
    static func cause(_ message: String) -> String {
        let prefix = "connection error: "
        return message.hasPrefix(prefix) ? String(message.dropFirst(prefix.count)) : message
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
