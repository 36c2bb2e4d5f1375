import Foundation
import StorageModel

/// Where the transport gets each request's `Authorization` header, and what it does after a 401.
/// The Cloud Storage JSON API uses OAuth2 access tokens (GCSStore's `GCSAuthorization`); the Firebase store
/// brings Firebase ID tokens; requests that bring their own credential, or need none (a token
/// request), go with `OwnCredentials`.
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
    /// Adds what every request of this credential carries besides `Authorization` (who pays): a
    /// header or a query parameter.
    func decorate(_ request: inout CloudRequest)
}

extension TransportAuthorization {
    package func decorate(_ request: inout CloudRequest) {}
}
