import Foundation
import CloudHTTP
import StorageModel

/// OAuth2 access tokens for the JSON API, from `StoreTokens` (docs/CREDENTIALS.md).
struct GCSAuthorization: TransportAuthorization {
    let tokens: StoreTokens
    let credentials: CredentialSource

    func authorization(timeout: Duration) async throws -> String? {
        if let t = tokens.staticToken { return "Bearer \(t)" }
        guard let cache = tokens.cache else { return nil }
        return "Bearer \(try await cache.token(timeout: timeout))"
    }

    var canRefresh: Bool { tokens.cache != nil }

    /// A stream answered 401 fails at once, as it always has for gs://.
    var refreshesStreams: Bool { false }

    func unauthorized(sent: String?, within: Duration) async {
        let token = sent.map { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : $0 }
        await tokens.cache?.refused(token)
    }

    /// A 401 no refresh can cure, with why, in the message every failed operation's line carries
    /// (docs/CREDENTIALS.md, "When a credential is refused"): a static token is never refreshed, an
    /// anonymous request has nothing to refresh.
    func unauthenticated(_ message: String) -> StorageError {
        .unauthenticated(message: "\(message) (\(Self.why(credentials)); see docs/CREDENTIALS.md)")
    }

    static func why(_ credentials: CredentialSource) -> String {
        switch credentials {
        case .token:
            return "credentials: \(staticTokenWhy)"
        case .anonymous:
            return "no credentials were sent: anonymous, by --anonymous, by STORAGE_EMULATOR_HOST, or because the chain found none"
        default:
            return "credentials: \(credentials)"
        }
    }

    /// Why a static token is refused once it has expired.
    package static let staticTokenWhy = "a static token (an access token from --token / GOOGLE_OAUTH_ACCESS_TOKEN), which is never refreshed: "
        + "once it expires (Google's last an hour) every request is refused; pass a fresh one, or use a credential file or --token-url"

    /// `x-goog-user-project` (quota project or `--billing-project`), and `userProject=` for `--billing-project`.
    func decorate(_ request: inout CloudRequest) {
        if let p = tokens.userProjectHeader { request.headers.replaceOrAdd(name: "x-goog-user-project", value: p) }
        if let p = tokens.userProjectParameter, !request.url.contains("userProject=") {
            request.url += (request.url.contains("?") ? "&" : "?") + "userProject=" + CloudURL.encode(p)
        }
    }
}
