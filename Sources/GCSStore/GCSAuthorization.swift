import Foundation
import AsyncHTTPClient
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

    func unauthenticated(_ message: String) -> StorageError {
        .unauthenticated(message: "\(message) (credentials: \(credentials); see docs/CREDENTIALS.md)")
    }

    /// `x-goog-user-project` (quota project or `--billing-project`), and `userProject=` for `--billing-project`.
    func decorate(_ request: inout HTTPClientRequest) {
        if let p = tokens.userProjectHeader { request.headers.replaceOrAdd(name: "x-goog-user-project", value: p) }
        if let p = tokens.userProjectParameter, !request.url.contains("userProject=") {
            request.url += (request.url.contains("?") ? "&" : "?") + "userProject=" + CloudURL.encode(p)
        }
    }
}
