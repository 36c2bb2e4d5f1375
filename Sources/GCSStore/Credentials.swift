import Foundation
import Crypto
import _CryptoExtras
import StorageModel

/// Where the Cloud Storage backend gets its `Authorization` header from.
public enum CredentialSource: Sendable, Equatable, CustomStringConvertible {
    /// No `Authorization` header (public buckets, emulators).
    case anonymous
    /// A static OAuth2 bearer token (`--token`, `GOOGLE_OAUTH_ACCESS_TOKEN`). Never refreshed.
    case token(String)
    /// A service account JSON key file (`--key-file`, `GOOGLE_APPLICATION_CREDENTIALS`): an RS256 JWT
    /// signed with its key is exchanged at its `token_uri` for an access token.
    case serviceAccount(path: String)
    /// The GCE metadata server (`GCE_METADATA_HOST` or metadata.google.internal).
    case metadataServer

    /// The order of docs/SEMANTICS.md §2.1: `--anonymous`; `--token` / `GOOGLE_OAUTH_ACCESS_TOKEN`; `--key-file` /
    /// `GOOGLE_APPLICATION_CREDENTIALS`; with `STORAGE_EMULATOR_HOST` or an explicit endpoint and nothing
    /// else, anonymous; else the metadata server.
    public static func resolve(anonymous: Bool, token: String?, keyFile: String?,
                               environment: [String: String], explicitEndpoint: Bool = false) -> CredentialSource {
        func given(_ s: String?) -> String? { s.flatMap { $0.isEmpty ? nil : $0 } }
        if anonymous { return .anonymous }
        if let t = given(token) ?? given(environment["GOOGLE_OAUTH_ACCESS_TOKEN"]) { return .token(t) }
        if let k = given(keyFile) ?? given(environment["GOOGLE_APPLICATION_CREDENTIALS"]) { return .serviceAccount(path: k) }
        if explicitEndpoint || given(environment["STORAGE_EMULATOR_HOST"]) != nil { return .anonymous }
        return .metadataServer
    }

    /// Safe to log: never contains a token or key material.
    public var description: String {
        switch self {
        case .anonymous: return "anonymous"
        case .token: return "static token <redacted>"
        case .serviceAccount(let p): return "service account key \(p)"
        case .metadataServer: return "GCE metadata server"
        }
    }
}

/// The fields of a service account JSON key that the token exchange needs.
struct ServiceAccountKey: Sendable {
    var clientEmail: String
    var privateKeyPEM: String
    var privateKeyID: String?
    var tokenURI: String

    static func load(path: String) throws -> ServiceAccountKey {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw StorageError.unauthenticated(message: "cannot read service account key file \(path): \(error.localizedDescription)")
        }
        guard let obj = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let email = obj["client_email"] as? String, let pem = obj["private_key"] as? String else {
            throw StorageError.unauthenticated(message: "\(path) is not a service account JSON key (client_email and private_key are required)")
        }
        return ServiceAccountKey(clientEmail: email, privateKeyPEM: pem, privateKeyID: obj["private_key_id"] as? String,
                                 tokenURI: (obj["token_uri"] as? String) ?? "https://oauth2.googleapis.com/token")
    }
}

/// RS256 JSON Web Tokens for the OAuth2 JWT-bearer grant.
enum JWT {
    static let scope = "https://www.googleapis.com/auth/devstorage.full_control"

    static func base64URL(_ d: Data) -> String {
        d.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The signed assertion `header.claims.signature`.
    static func assertion(for key: ServiceAccountKey, now: Date, lifetime: TimeInterval = 3600) throws -> String {
        var header: [String: Any] = ["alg": "RS256", "typ": "JWT"]
        if let kid = key.privateKeyID { header["kid"] = kid }
        let iat = Int(now.timeIntervalSince1970)
        let claims: [String: Any] = ["iss": key.clientEmail, "scope": scope, "aud": key.tokenURI,
                                     "iat": iat, "exp": iat + Int(lifetime)]
        let h = base64URL(try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys]))
        let c = base64URL(try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys]))
        let signingInput = Data("\(h).\(c)".utf8)
        let privateKey: _RSA.Signing.PrivateKey
        do { privateKey = try _RSA.Signing.PrivateKey(pemRepresentation: key.privateKeyPEM) } catch {
            // Never include the key itself in the message.
            throw StorageError.unauthenticated(message: "the private_key of \(key.clientEmail) is not a usable RSA PEM key")
        }
        let sig = try privateKey.signature(for: signingInput, padding: .insecurePKCS1v1_5)
        return "\(h).\(c).\(base64URL(sig.rawRepresentation))"
    }
}

/// An access token with its expiry.
struct AccessToken: Sendable {
    var value: String
    var expires: ContinuousClock.Instant
    /// When to fetch a new one: 5 minutes before expiry, or a quarter of the lifetime for short-lived tokens.
    var refreshAt: ContinuousClock.Instant
}

/// Hands out `Authorization` header values; caches and refreshes fetched tokens, one fetch at a time.
actor TokenProvider {
    typealias Fetch = @Sendable (_ timeout: Duration) async throws -> (token: String, expiresIn: Int)

    private let source: CredentialSource
    private let fetch: Fetch?
    private var cached: AccessToken?
    private var inFlight: Task<AccessToken, any Error>?
    /// Number of tokens fetched (for logs and tests).
    private(set) var fetchCount = 0
    /// The clock token lifetimes are kept on (docs/ARCHITECTURE.md, "One clock").
    private let clock: BucketClock

    init(source: CredentialSource, fetch: Fetch?, clock: BucketClock = .real) {
        self.source = source
        self.fetch = fetch
        self.clock = clock
    }

    /// Whether a 401 may be cured by fetching a new token.
    nonisolated var canRefresh: Bool {
        switch source {
        case .serviceAccount, .metadataServer: return true
        case .anonymous, .token: return false
        }
    }

    /// The header value (`Bearer …`), or nil for anonymous access.
    func authorization(timeout: Duration) async throws -> String? {
        switch source {
        case .anonymous: return nil
        case .token(let t): return "Bearer \(t)"
        case .serviceAccount, .metadataServer:
            let now = clock.now
            if let c = cached, now < c.refreshAt { return "Bearer \(c.value)" }
            let task: Task<AccessToken, any Error>
            if let t = inFlight { task = t } else {
                guard let fetch else { throw StorageError.unauthenticated(message: "no token fetcher for \(source)") }
                task = Task { [clock] in
                    let r = try await fetch(timeout)
                    let start = clock.now
                    let lifetime = Duration.seconds(max(r.expiresIn, 1))
                    let margin = min(Duration.seconds(300), lifetime / 4)
                    return AccessToken(value: r.token, expires: start + lifetime, refreshAt: start + lifetime - margin)
                }
                inFlight = task
            }
            do {
                let token = try await task.value
                if inFlight == task { inFlight = nil; fetchCount += 1; cached = token }
                return "Bearer \(token.value)"
            } catch {
                if inFlight == task { inFlight = nil }
                throw error
            }
        }
    }

    /// Forget the cached token (after a 401).
    func invalidate() { cached = nil }
}
