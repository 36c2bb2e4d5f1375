import FirebaseStore
import Foundation
import Logging
import StorageModel
import TestSupport
import Testing

let fastTuning: FirebaseStore.Tuning = {
    var t = FirebaseStore.Tuning()
    t.initialBackoff = .milliseconds(5)
    t.maxBackoff = .milliseconds(50)
    return t
}()

/// The endpoints of a test server: Storage at its root, Auth emulator-style on the same port.
func endpoints(_ server: FirebaseTestServer) throws -> FirebaseEndpoints {
    try FirebaseEndpoints.resolve(storage: server.base.absoluteString, auth: server.base.absoluteString, environment: [:])
}

/// A test server, a user signed in with a custom token (`uid`), a token manager and a store.
struct FirebaseFixture {
    let server: FirebaseTestServer
    let store: FirebaseStore
    let manager: FirebaseTokenManager
    let client: FirebaseAuthClient
    let signedIn: FirebaseTokens
    let logs: LogLines
}

func withFirebase(flavour: FirebaseTestServer.Flavour = .emulator, rules: TestRules? = .signedIn, uid: String = "alice",
                  prefix: String = "", deadline: Duration = .seconds(10), tuning: FirebaseStore.Tuning = fastTuning,
                  maxConnections: Int = 16, tokenLifetime: Int = 3600, refreshAhead: Duration = .seconds(300),
                  clock: BucketClock = .real,
                  configure: (FirebaseTestServer) -> Void = { _ in },
                  _ body: (FirebaseFixture) async throws -> Void) async throws {
    let server = try await FirebaseTestServer.start(flavour: flavour, rules: rules)
    // `clock`: the one time of the tokens' whole life, issued and checked by the server, read and
    // refreshed by the client (a test's ManualClock moves both).
    server.configure { $0.tokenLifetime = tokenLifetime; $0.tokenClock = clock }
    configure(server)
    let logs = LogLines()
    let logger = capturingLogger(logs)
    let client = FirebaseAuthClient(endpoints: try endpoints(server), apiKey: "test-api-key", logger: logger, clock: clock)
    let store: FirebaseStore
    let manager: FirebaseTokenManager
    let tokens: FirebaseTokens
    do {
        tokens = try await client.signIn(customToken: #"{"uid":"\#(uid)"}"#)
        manager = FirebaseTokenManager(client: client, signedIn: tokens, bucket: server.bucket, logger: logger,
                                       refreshAhead: refreshAhead)
        store = FirebaseStore(bucket: server.bucket, prefix: prefix, endpoints: try endpoints(server), tokens: manager,
                              logger: logger, requestTimeout: .seconds(5), deadline: deadline,
                              maxConnections: maxConnections, tuning: tuning)
    } catch {
        try? await server.stop()
        throw error
    }
    let fixture = FirebaseFixture(server: server, store: store, manager: manager, client: client, signedIn: tokens, logs: logs)
    do {
        try await body(fixture)
    } catch {
        try? await store.shutdown()
        try? await server.stop()
        throw error
    }
    try await store.shutdown()
    try await server.stop()
}

func storageError(_ body: () async throws -> Void) async -> StorageError? {
    do { try await body(); return nil } catch let e as StorageError { return e } catch {
        Issue.record("not a StorageError: \(error)")
        return nil
    }
}
