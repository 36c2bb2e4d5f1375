@testable import CloudHTTP
@testable import FirebaseStore
import Foundation
import GCSStore
import Logging
import StorageModel
import TestSupport
import Testing

/// What a Firebase developer meets when a server is down or a session is refused: Auth that does
/// not answer is named and known at once, no request waits past its own time for a token, a
/// refused session revives with a newer login of the same user, and every name reaches its object.
@Suite struct FirebaseOutageTests {
    let quiet = Logger(label: "outage-test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func deadPort() -> Int { TestSupport.deadPort() }

    @Test func anAuthServerThatIsDownIsNamedAtOnce() async throws {
        let dead = "http://127.0.0.1:\(Self.deadPort())"
        let client = FirebaseAuthClient(endpoints: try FirebaseEndpoints.resolve(storage: dead, auth: dead, environment: [:]),
                                        apiKey: "k", logger: quiet)
        for (what, service) in [("token refresh", "securetoken"), ("sign-in with email and password", "identitytoolkit")] {
            let start = ContinuousClock.now
            let e = await storageError {
                if service == "securetoken" { _ = try await client.refresh("r") } else { _ = try await client.signIn(email: "a@b.c", password: "p") }
            }
            let took = ContinuousClock.now - start
            let m = e.map { "\($0)" } ?? "no error"
            // Three quick attempts (0.6 s of pauses): about a second alone. A client that keeps
            // trying to connect until its request deadline takes 20 s per attempt (15.6 s seen).
            // The bound has room for this process's other suites, which share its two cores and
            // event loops (7.6 s seen in a full run); the mount check's own 5 s is checked against
            // the binary, in Tests/e2e/test_firebase.py.
            #expect(took < .seconds(10), "\(what) took \(took)")
            #expect(m.contains("Firebase Auth (\(service)) at \(dead)/\(service).googleapis.com did not answer the \(what)"), "\(m)")
            #expect(m.contains("Connection refused"), "\(m)")
            #expect(!m.contains("HTTP 0") && !m.contains("errno"), "\(m)")
            #expect(ConnectionErrors.balanced(m) == m, "unbalanced parentheses: \(m)")
            #expect(e?.isTransient == true, "an outage is worth retrying within an operation's deadline")
        }
    }

    @Test func connectionErrorTextsAreWellFormed() {
        #expect(ConnectionErrors.balanced("a (b) c) (d") == "a (b) c (d)")
        #expect(ConnectionErrors.balanced("fine (ok)") == "fine (ok)")
        #expect("\(StorageError.unknown(status: 0, message: "connection error: Connection refused"))" == "connection error: Connection refused")
        #expect("\(StorageError.unknown(status: 502, message: "bad gateway"))" == "HTTP 502: bad gateway")
    }

    /// A token refresh that takes 10 s holds no request past its own deadline (2 s here).
    @Test func aRequestWaitsForNoTokenPastItsDeadline() async throws {
        // Pauses of at least 250 ms between attempts: the first attempt's failure is the last.
        var slowRetries = fastTuning
        slowRetries.initialBackoff = .milliseconds(500)
        let clock = ManualClock()
        try await withFirebase(deadline: .seconds(2), tuning: slowRetries, tokenLifetime: 4, clock: clock.clock) { f in
            // Seeded, not written through the store: only the request under test meets the 2 s deadline.
            f.server.seed("o", Data("x".utf8))
            // Past the refresh time (a quarter of the lifetime before expiry), the token still valid.
            clock.advance(by: .milliseconds(3200))
            f.server.configure { $0.refreshLatency = .seconds(10) }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await f.store.getMetadata("o") }
            let took = ContinuousClock.now - start
            #expect(took < .seconds(4), "waited \(took) for a token")
            // Either deadline may be the one that ends it (the token wait's or the request's own,
            // both 2 s; in a full parallel run the request's came first): a timeout either way.
            let text = e.map { "\($0)" } ?? "none"
            #expect(text.contains("Firebase Auth did not answer the token refresh") || text.contains("no complete answer within"),
                    "got: \(text)")
        }
    }

    /// A 401 asks for a fresh token; a refresh that takes 10 s holds the request no longer than
    /// its deadline (2 s) either.
    @Test func aFourOhOneWaitsForNoRefreshPastItsDeadline() async throws {
        try await withFirebase(deadline: .seconds(2)) { f in
            f.server.seed("o", Data("x".utf8))
            f.server.configure { $0.refreshLatency = .seconds(10); $0.unauthorizedNext = 1 }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await f.store.getMetadata("o") }
            let took = ContinuousClock.now - start
            #expect(took < .seconds(4), "waited \(took) for a refresh after a 401")
            #expect(e != nil)
            // The refresh went on: once it is done (10 s after it began), requests work with its token.
            f.server.configure { $0.refreshLatency = .zero }
            #expect(await eventually { (try? await f.store.getMetadata("o").size) == 1 }, "requests work once the refresh is done")
            #expect(f.server.read { $0.refreshCalls } == 1, "the refresh begun at the 401 is the one used, not another")
        }
    }

    /// The refresh token refused (revoked): the error and the log carry the whole line to sign in
    /// again, endpoints included; after a new `bucketfs login` of the same user (the login file
    /// rewritten), the same manager and store work again. A login of another user is not taken.
    @Test func aRefusedSessionRevivesWithANewerLoginOfTheSameUser() async throws {
        let config = NSTemporaryDirectory() + "bucketfs-revive-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: config) }
        let env = ["XDG_CONFIG_HOME": config]
        try await withFirebase { f in
            let s = f.server
            let uid = s.addUser(email: "ada@example.com", password: "pw")
            let first = try await f.client.signIn(email: "ada@example.com", password: "pw")
            func login(_ t: FirebaseTokens) -> FirebaseLogin {
                FirebaseLogin(bucket: s.bucket, apiKey: "test-api-key", uid: t.uid, email: t.email, provider: t.provider,
                              refreshToken: t.refreshToken, authEndpoint: s.base.absoluteString, storageEndpoint: s.base.absoluteString)
            }
            try FirebaseLoginFile.save(login(first), environment: env)
            let logs = LogLines()
            let manager = FirebaseTokenManager(client: f.client, refreshToken: first.refreshToken, bucket: s.bucket,
                                               logger: capturingLogger(logs), user: (first.email, first.provider),
                                               newerLogin: FirebaseLoginFile.newerLogin(of: login(first), environment: env))
            let store = FirebaseStore(bucket: s.bucket, prefix: "", endpoints: try endpoints(s), tokens: manager, logger: quiet,
                                      requestTimeout: .seconds(5), deadline: .seconds(5), maxConnections: 4, tuning: fastTuning)
            defer { Task { try? await store.shutdown() } }
            s.seed("users/\(uid)/a.txt", Data("alpha".utf8))
            _ = try await store.getMetadata("users/\(uid)/a.txt")

            s.revokeRefreshTokens(uid: uid)
            s.expireIDTokens()
            let line = "bucketfs login firebase://\(s.bucket) --api-key test-api-key --email ada@example.com --auth-endpoint \(s.base.absoluteString) --endpoint \(s.base.absoluteString)"
            let e = await storageError { _ = try await store.getMetadata("users/\(uid)/a.txt") }
            #expect(e.map { "\($0)" }?.contains(line) == true, "\(String(describing: e))")
            #expect(e.map { "\($0)" }?.contains("picked up at the next operation, without a restart") == true)
            // Still refused while nobody signed in again. (A running mount logs the line once
            // instead: FirebaseRefusalEpisodeTests.)
            #expect(await storageError { _ = try await store.getMetadata("users/\(uid)/a.txt") } != nil)

            // Another user signs in to the bucket: not this session's user, not taken.
            let other = try await f.client.signIn(customToken: #"{"uid":"mallory"}"#)
            try FirebaseLoginFile.save(login(other), environment: env)
            #expect(await storageError { _ = try await store.getMetadata("users/\(uid)/a.txt") } != nil)

            // The same user signs in again: the running store works, no restart.
            let again = try await f.client.signIn(email: "ada@example.com", password: "pw")
            try FirebaseLoginFile.save(login(again), environment: env)
            let m = try await store.getMetadata("users/\(uid)/a.txt")
            #expect(m.size == 5)
            #expect(logs.all.contains { $0.contains("newer login") })
        }
    }

    @Test func theSignInAgainLineNamesTheWayAndTheEndpoints() throws {
        let emu = try FirebaseEndpoints.resolve(storage: "http://127.0.0.1:9199", auth: "http://127.0.0.1:9099", environment: [:])
        #expect(FirebaseLogin.command(bucket: "b.appspot.com", apiKey: "K", email: "a@b.c", provider: "password", endpoints: emu)
            == "bucketfs login firebase://b.appspot.com --api-key K --email a@b.c --auth-endpoint http://127.0.0.1:9099 --endpoint http://127.0.0.1:9199")
        #expect(FirebaseLogin.command(bucket: "b.appspot.com", apiKey: "K", email: nil, provider: "anonymous", endpoints: .production)
            == "bucketfs login firebase://b.appspot.com --api-key K --anonymous")
        let fromEnv = try FirebaseEndpoints.resolve(storage: nil, auth: nil, environment: ["FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9099"])
        #expect(fromEnv.authBase?.absoluteString == "http://127.0.0.1:9099")
        #expect(FirebaseEndpoints.production.authBase == nil)
    }

    /// Every path segment is percent-encoded: names with dot segments, `%`, `#`, `?`, spaces and
    /// non-ASCII reach their own object (the test server resolves a raw `..` as HTTP front ends do).
    @Test func everyNameReachesItsOwnObject() async throws {
        try await withFirebase { f in
            let problems = await AwkwardNames.roundTrip(f.store)
            #expect(problems.isEmpty, "\(problems)")
            let uris = f.server.recorded.map(\.uri)
            #expect(uris.contains { $0.hasPrefix("/v0/b/\(f.server.bucket)/o/%2E%2E") }, "a name '..' is sent as %2E%2E")
            let segments = uris.flatMap { $0.split(separator: "?").first!.split(separator: "/", omittingEmptySubsequences: false) }
            #expect(!segments.contains { $0 == "." || $0 == ".." }, "a raw dot segment was sent")
            #expect(f.store.objectURL("a b#c?d%e/ü").hasSuffix("/o/a%20b%23c%3Fd%25e%2F%C3%BC"))
        }
    }
}
