import Foundation
import Logging
import StorageModel

/// The requests that fetch credentials rather than data (docs/ARCHITECTURE.md, "One
/// transport"): an OAuth token endpoint's, STS's, IAM Credentials', the metadata server's, a
/// `--token-url`'s, a tokeninfo check's and Firebase Auth's. They bring their own credential or
/// need none, and every answer they get is the caller's to read (a refusal is what the caller
/// names, with its fix). They go through `HTTPTransport` all the same, as the API's calls do: on
/// clients made by `CloudHTTPClients` (the store's own for Google's token endpoints, so one count
/// of connections and one trust setting cover both), bounded by the policy's clock, retried by
/// its `RetryPolicy`, with a refused certificate explained.
package struct CredentialRequests: Sendable {
    package let transport: HTTPTransport

    /// `label` begins their log lines ("GCS auth", "Firebase Auth").
    package init(clients: CloudHTTPClients, policy: RetryPolicy, logger: Logger, label: String) {
        transport = HTTPTransport(clients: clients, auth: OwnCredentials(), policy: policy, logger: logger, bucket: "",
                                  dialect: HTTPDialect(label: label, bucketURL: label, retryable: RetryPolicy.isRetryable,
                                                       error: { status, message, _, _ in .unknown(status: status, message: message) }))
    }

    /// The policy's clock.
    package var clock: BucketClock { transport.clock }

    /// Sends `request` as it is (its headers carry whatever credential it brings) and returns the
    /// answer, whatever its status, unless `transient` makes an error of it (a 503, a 429):
    /// such an answer, like no answer at all, is tried again while `retried` and the policy
    /// allow (its pauses, its attempts, `timeout`), and the last attempt's error is thrown.
    /// Without `retried`, one attempt: a token request that fails fails the attempt of the
    /// store call that needed the token, and that call's retries fetch it again.
    ///
    /// Bounded by `timeout` (the policy's deadline when nil), which a caller takes from its own
    /// deadline, and not by the enclosing filesystem operation's: a token serves every request
    /// that waits for it, each bounded on its own.
    package func send(_ what: String, _ request: CloudRequest, timeout: Duration? = nil, retried: Bool,
                      transient: (@Sendable (CloudResponse) -> StorageError?)? = nil) async throws -> CloudResponse {
        let deadline = clock.now + (timeout ?? transport.policy.deadline)
        return try await OperationContext.$clock.withValue(nil) {
            try await transport.send(what, path: HTTPTransport.shortURL(request.url), idempotent: retried, deadline: deadline,
                                     expect: Expect(accept: { _ in true }, validate: transient), request)
        }
    }

    /// No `Authorization` from the transport: the request carries its own, or none.
    private struct OwnCredentials: TransportAuthorization {
        func authorization(timeout: Duration) async throws -> String? { nil }
        var canRefresh: Bool { false }
        var refreshesStreams: Bool { false }
        func unauthorized(sent: String?, within: Duration) async {}
        func unauthenticated(_ message: String) -> StorageError { .unauthenticated(message: message) }
    }
}
