import CloudHTTP
import Foundation
import Logging
import StorageModel
import TestSupport
import Testing

/// An attempt that runs out of time while still waiting for its access token sent nothing: its
/// error says the credential gave no token, not that the server gave no answer, and an earlier
/// token failure is kept as the call's cause (docs/CREDENTIALS.md, "When a token endpoint fails").
@Suite struct TokenWaitTests {
    /// The first `fastFailures` calls fail at once with `failure`; every later one waits until cancelled.
    final class Tokens: TransportAuthorization, @unchecked Sendable {
        let lock = NSLock()
        var calls = 0
        let fastFailures: Int
        let failure = StorageError.timeout(message: "no access token: the test token endpoint did not answer: connection refused")
        init(fastFailures: Int) { self.fastFailures = fastFailures }
        func authorization(timeout: Duration) async throws -> String? {
            let n = lock.withLock { calls += 1; return calls }
            if n <= fastFailures { throw failure }
            try await Task.sleep(for: .seconds(3600))
            return "Bearer never"
        }
        var canRefresh: Bool { false }
        var refreshesStreams: Bool { false }
        func unauthorized(sent: String?, within: Duration) async {}
        func unauthenticated(_ message: String) -> StorageError { .unauthenticated(message: message) }
    }

    func transport(_ auth: Tokens) -> HTTPTransport {
        let clients = CloudHTTPClients(settings: ClientSettings(trust: .system), https: false, idleTimeout: .seconds(5),
                                       maxConnections: 2, receiveBuffer: 0)
        return HTTPTransport(clients: clients, auth: auth, policy: RetryPolicy(requestTimeout: .seconds(1), initialBackoff: .milliseconds(10)),
                             logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), bucket: "b",
                             dialect: HTTPDialect(label: "GCS", bucketURL: "gs://b", retryable: RetryPolicy.isRetryable(status:),
                                                  error: { s, m, _, _ in .unknown(status: s, message: m) }))
    }

    func failure(_ t: HTTPTransport, within: Duration) async -> StorageError? {
        let url = "http://127.0.0.1:\(TestSupport.deadPort())/storage/v1/b/b/o"
        do {
            _ = try await t.send("list", path: "", idempotent: true, deadline: t.clock.now + within, CloudRequest(.GET, url))
            return nil
        } catch { return error as? StorageError }
    }

    @Test func aTokenFailureThenATokenThatNeverComesIsReportedAsTheTokenFailure() async throws {
        let auth = Tokens(fastFailures: 1)
        let t = transport(auth)
        defer { Task { try? await t.clients.shutdown() } }
        let e = try #require(await failure(t, within: .milliseconds(1500)))
        let m = "\(e)"
        #expect(m.contains(auth.failure.description) || m.contains("no access token: the test token endpoint"), "\(m)")
        #expect(!m.contains("no complete answer"), "\(m)")
        #expect(auth.lock.withLock { auth.calls } >= 2)
    }

    @Test func aTokenThatNeverComesIsTheCredentialsTimeoutNotTheServers() async throws {
        let auth = Tokens(fastFailures: 0)
        let t = transport(auth)
        defer { Task { try? await t.clients.shutdown() } }
        let e = try #require(await failure(t, within: .milliseconds(2500)))
        let m = "\(e)"
        #expect(m.contains("the credential gave no access token within"), "\(m)")
        #expect(!m.contains("no complete answer"), "\(m)")
    }
}
