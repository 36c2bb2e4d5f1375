import Foundation
import AsyncHTTPClient
import StorageModel

/// Where the transport gets each request's `Authorization` header, and what it does after a 401.
/// The Cloud Storage JSON API uses OAuth2 access tokens (`GCSAuthorization`); the Firebase store
/// brings Firebase ID tokens.
package protocol TransportAuthorization: Sendable {
    /// The header value, or nil to send none. `timeout` bounds a token fetch.
    func authorization(timeout: Duration) async throws -> String?
    /// Whether a 401 may be cured by a fresh token (then the call is tried once more).
    var canRefresh: Bool { get }
    /// Whether a streamed read answered 401 before its first byte is tried once more too.
    var refreshesStreams: Bool { get }
    /// After a 401 to a request sent with `sent` (the header value, never logged): the next
    /// `authorization` must come from a fresh token. Concurrent calls for one token share one refresh.
    /// Returns within `within` (the call's time left), whether or not the refresh has ended.
    func unauthorized(sent: String?, within: Duration) async
    /// The error that ends a call refused with 401 for good: `message` is the server's, plus what to do.
    func unauthenticated(_ message: String) -> StorageError
    /// Adds what every request of this credential carries besides `Authorization` (who pays).
    func decorate(_ request: inout HTTPClientRequest)
}

extension TransportAuthorization {
    package func decorate(_ request: inout HTTPClientRequest) {}
}

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
            request.url += (request.url.contains("?") ? "&" : "?") + "userProject=" + GCSJSONAPI.encode(p)
        }
    }
}
