import Foundation
import StorageModel

/// The check `bucketfs mount` (and each library command) makes before it starts: one list request
/// (maxResults=1) under its own short deadline, so a bucket that does not exist, credentials that
/// cannot list it, or an endpoint that never answers are refused within seconds.
extension GCSStore {
    /// Lists at most one name under the store's prefix. Throws the store's typed errors; bounded by
    /// `timeout` whatever the endpoint does (retries of transient failures included).
    public func probe(timeout: Duration) async throws {
        let url = bucketPath + GCSJSONAPI.query([
            ("prefix", prefix.isEmpty ? nil : prefix), ("delimiter", "/"), ("maxResults", "1"), ("fields", "kind"),
        ])
        _ = try await transport.send("list", path: "", idempotent: true, deadline: ContinuousClock.now + timeout,
                                     GCSRequest(.GET, url))
    }
}

extension CredentialSource {
    /// Reads and checks a service account key file without contacting anyone: it must be JSON with
    /// `client_email` and an RSA `private_key`. Returns the account's email (the identity used).
    public static func checkKeyFile(_ path: String) throws -> String {
        let key = try ServiceAccountKey.load(path: path)
        _ = try JWT.assertion(for: key, now: Date())
        return key.clientEmail
    }

    /// Who the requests are sent as, for messages (never a secret).
    public var identity: String {
        switch self {
        case .anonymous: return "anonymous (no credentials)"
        case .token: return "the access token from --token / GOOGLE_OAUTH_ACCESS_TOKEN"
        case .serviceAccount(let p):
            if let email = try? ServiceAccountKey.load(path: p).clientEmail { return "service account \(email) (key \(p))" }
            return "the service account key \(p)"
        case .metadataServer: return "the GCE metadata server's default service account"
        }
    }
}
