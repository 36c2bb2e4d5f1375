import Foundation
import Testing
import GCSStore
import GCSTestServerKit
import Logging
import StorageModel

/// A store with a credential file against the project's Cloud Storage test server, which mints and
/// checks tokens: who pays reaches the server; a transient token failure is retried, a refusal is not.
@Suite struct StoreCredentialTests {
    @Test func quotaProjectAndBillingProjectReachTheServer() async throws {
        let files = try CredentialFiles()
        let server = try await GCSTestServer.start()
        server.configure { $0.requireToken = true }
        var key = CredentialFiles.serviceAccount(tokenURI: "http://127.0.0.1:\(server.port)/token")
        key["quota_project_id"] = "quota-p"
        let path = try files.write("sa.json", key)
        var tuning = GCSStore.Tuning()
        tuning.initialBackoff = .milliseconds(5)
        let quota = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .file(path: path, from: "--key-file"),
                             logger: Logger(label: "t"), deadline: .seconds(10), tuning: tuning, environment: [:])
        _ = try await quota.list(ListRequest())
        let r1 = try #require(server.recorded.last)
        #expect(r1.headers["x-goog-user-project"] == "quota-p" && !r1.uri.contains("userProject="))
        try await quota.shutdown()
        let billed = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .file(path: path, from: "--key-file"),
                              logger: Logger(label: "t"), deadline: .seconds(10), tuning: tuning, environment: [:], billingProject: "bill p")
        _ = try await billed.write("a", from: .data(Data("1".utf8)), metadata: .init(), preconditions: .doesNotExist)
        _ = try await billed.list(ListRequest())
        for r in server.recorded.suffix(2) {
            #expect(r.headers["x-goog-user-project"] == "bill p")
            #expect(r.uri.contains("userProject=bill%20p"), "\(r.uri)")
        }
        try await billed.shutdown()
        try await server.stop()
    }

    @Test func transientTokenFailuresAreRetriedRefusalsAreNot() async throws {
        let fake = FakeGoogleAuth()
        fake.failNext = 1
        let gce = MetadataServerSource(environment: ["GCE_METADATA_HOST": "auth.test"], transport: fake)
        do {
            _ = try await gce.fetch(timeout: .seconds(5))
            Issue.record("no error")
        } catch let e as StorageError {
            #expect(e.isTransient, "a 503 from a token endpoint is retried under the store's policy: \(e)")
        }
        #expect(try await gce.fetch(timeout: .seconds(5)).value == "gce-token-1")
        let files = try CredentialFiles()
        let path = try files.write("adc.json", CredentialFiles.user)
        fake.validRefreshTokens = []
        do {
            _ = try await CredentialFile.read(path).source(environment: oauthEnv, transport: fake, clock: .real)
                .fetch(timeout: .seconds(5))
            Issue.record("no error")
        } catch let e as StorageError {
            #expect(!e.isTransient, "a refused grant is final: \(e)")
        }
    }

    /// Token requests go through the store's own transport (docs/ARCHITECTURE.md, "One
    /// transport"): tokens from one server, storage at another that is never asked here, and the
    /// token endpoint's connection is among the store's.
    @Test func tokenRequestsAreOnTheStoresConnections() async throws {
        let files = try CredentialFiles()
        let tokens = try await GCSTestServer.start()
        let storage = try await GCSTestServer.start()
        let path = try files.write("sa.json", CredentialFiles.serviceAccount(tokenURI: "http://127.0.0.1:\(tokens.port)/token"))
        let store = GCSStore(bucket: storage.bucket, endpoint: storage.endpoint, credentials: .file(path: path, from: "--key-file"),
                             logger: Logger(label: "t"), deadline: .seconds(10), environment: [:])
        #expect(store.connections.total == 0)
        try await store.checkCredential(within: .seconds(10))
        #expect(tokens.read { $0.tokenCalls } == 1)
        #expect(storage.recorded.isEmpty)
        #expect(store.connections.total == 1, "the token request's connection is counted with the store's: \(store.connections)")
        try await store.shutdown()
        try await tokens.stop()
        try await storage.stop()
    }
}
