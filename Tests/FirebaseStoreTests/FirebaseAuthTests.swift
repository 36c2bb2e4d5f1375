import FirebaseStore
import Foundation
import Logging
import StorageModel
import Testing
import TestSupport

/// Signing in, refreshing tokens (ahead of expiry, after a 401, shared by concurrent requests),
/// refusals for good, and tokens given from outside.
@Suite struct FirebaseAuthTests {
    static func server() async throws -> (FirebaseTestServer, FirebaseAuthClient) {
        let s = try await FirebaseTestServer.start()
        return (s, FirebaseAuthClient(endpoints: try endpoints(s), apiKey: "k", logger: Logger(label: "auth-test")))
    }

    @Test func signInEachWay() async throws {
        let (s, client) = try await Self.server()
        let uid = s.addUser(email: "ada@example.com", password: "correct horse")
        let p = try await client.signIn(email: "ada@example.com", password: "correct horse")
        #expect(p.uid == uid)
        #expect(p.email == "ada@example.com")
        #expect(p.provider == "password")
        #expect(!p.idToken.isEmpty)
        #expect(!p.refreshToken.isEmpty)
        #expect(p.expiresAt.timeIntervalSinceNow > 3500)
        let c = try await client.signIn(customToken: #"{"uid":"bob"}"#)
        #expect(c.uid == "bob")
        #expect(c.email == nil)
        #expect(c.provider == "custom")
        let a = try await client.signUpAnonymously()
        #expect(a.provider == "anonymous")
        #expect(!a.uid.isEmpty)
        #expect(a.email == nil)
        let r = try await client.refresh(p.refreshToken)
        #expect(r.uid == uid && r.provider == "password")
        #expect(r.idToken != p.idToken)
        #expect(r.refreshToken == p.refreshToken)
        try await s.stop()
    }

    @Test func refusalsCarryTheReasonCode() async throws {
        let (s, client) = try await Self.server()
        let uid = s.addUser(email: "ada@example.com", password: "right")
        var e = await storageError { _ = try await client.signIn(email: "ada@example.com", password: "wrong") }
        guard case .unauthenticated(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
        #expect(m.contains("INVALID_LOGIN_CREDENTIALS"))
        #expect(!m.contains("wrong"), "never the password")
        s.disable(uid: uid)
        e = await storageError { _ = try await client.signIn(email: "ada@example.com", password: "right") }
        #expect(e.map { "\($0)" }?.contains("USER_DISABLED") == true)
        s.configure { $0.anonymousSignIn = false }
        e = await storageError { _ = try await client.signUpAnonymously() }
        #expect(e.map { "\($0)" }?.contains("ADMIN_ONLY_OPERATION") == true)
        e = await storageError { _ = try await client.signIn(customToken: "not json") }
        #expect(e.map { "\($0)" }?.contains("INVALID_CUSTOM_TOKEN") == true)
        e = await storageError { _ = try await client.refresh("no-such-token") }
        #expect(e.map { "\($0)" }?.contains("INVALID_REFRESH_TOKEN") == true)
        // A refresh endpoint down for a moment: tried again.
        let t = try await client.signIn(customToken: #"{"uid":"carol"}"#)
        s.configure { $0.refreshFailNext = 2 }
        _ = try await client.refresh(t.refreshToken)
        #expect(s.read { $0.refreshCalls } == 4)
        try await s.stop()
    }

    /// Through the transport's retries (`RetryPolicy.maxAttempts`): three attempts, then the last
    /// one's error, still transient and naming the Auth host.
    @Test func aRefreshEndpointDownLongerFailsAfterThreeAttempts() async throws {
        let (s, client) = try await Self.server()
        let t = try await client.signIn(customToken: #"{"uid":"erin"}"#)
        s.configure { $0.refreshFailNext = 5 }
        let e = await storageError { _ = try await client.refresh(t.refreshToken) }
        #expect(s.read { $0.refreshCalls } == 3)
        #expect(e?.isTransient == true, "\(String(describing: e))")
        #expect(e.map { "\($0)" }?.contains("Firebase Auth (securetoken) at ") == true, "\(String(describing: e))")
        #expect(e.map { "\($0)" }?.contains("failed the token refresh") == true, "\(String(describing: e))")
        try await s.stop()
    }

    @Test func tokensAreRefreshedAheadOfExpiry() async throws {
        // 6 s tokens: refreshed a quarter of their life before they expire (at 4.5 s), so no
        // request sees a 401. The tokens' time is a ManualClock, moved 250 ms between requests
        // for 11 s: refreshed at 4.5 s and at 9 s, exactly twice, however busy the machine is.
        let clock = ManualClock()
        try await withFirebase(tokenLifetime: 6, clock: clock.clock) { f in
            _ = try await f.store.write("o", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            for _ in 0..<44 {
                _ = try await f.store.getMetadata("o")
                clock.advance(by: .milliseconds(250))
            }
            let refreshes = f.server.read { $0.refreshCalls }
            #expect(refreshes == 2, "one refresh per 4.5 s of the tokens' clock: \(refreshes)")
            #expect(!f.server.recorded.contains { $0.status == 401 }, "no request was refused")
            #expect(await f.manager.expiresAt.map { $0 > clock.clock.date } == true)
        }
    }

    @Test func concurrentCallersShareOneRefreshAheadOfExpiry() async throws {
        let s = try await FirebaseTestServer.start()
        let clock = ManualClock()
        let client = FirebaseAuthClient(endpoints: try endpoints(s), apiKey: "k", logger: Logger(label: "auth-test"), clock: clock.clock)
        let signed = try await client.signIn(customToken: #"{"uid":"dan"}"#)
        let manager = FirebaseTokenManager(client: client, signedIn: signed, bucket: s.bucket, logger: Logger(label: "t"))
        #expect(try await manager.idToken(afterUnauthorized: false) == signed.idToken)
        clock.advance(by: .seconds(3400))  // within 5 minutes of expiry
        s.configure { $0.refreshLatency = .milliseconds(300) }
        let tokens = try await withThrowingTaskGroup(of: String.self) { g in
            for _ in 0..<20 { g.addTask { try await manager.idToken(afterUnauthorized: false) } }
            var all: [String] = []
            for try await t in g { all.append(t) }
            return all
        }
        #expect(Set(tokens).count == 1 && tokens[0] != signed.idToken)
        #expect(s.read { $0.refreshCalls } == 1, "twenty callers, one refresh")
        #expect(await manager.refreshCount == 1)
        try await s.stop()
    }

    @Test func aFourOhOneRefreshesOnceForAllTheRequestsItHit() async throws {
        try await withFirebase(maxConnections: 16) { f in
            for i in 0..<16 { f.server.seed("o\(i)", Data("\(i)".utf8)) }
            _ = try await f.store.getMetadata("o0")
            f.server.expireIDTokens()  // every request now carries an expired token
            f.server.configure { $0.refreshLatency = .milliseconds(300) }
            f.server.clearRecorded()
            let sizes = try await withThrowingTaskGroup(of: Int64.self) { g in
                for i in 0..<16 { g.addTask { try await f.store.getMetadata("o\(i)").size } }
                var all: [Int64] = []
                for try await s in g { all.append(s) }
                return all
            }
            #expect(sizes.count == 16)
            #expect(f.server.read { $0.refreshCalls } == 1, "one refresh for every request the 401s hit")
            let refused = f.server.recorded.filter { $0.status == 401 }.count
            #expect(refused >= 1 && refused <= 16)
            #expect(f.server.recorded.filter { $0.isMetadataGet && $0.status == 200 }.count == 16)
            // And a streamed read that meets a 401 first is refreshed too.
            f.server.configure { $0.unauthorizedNext = 1 }
            let got = FirebaseStoreTests.Received()
            let info = try await f.store.getMetadata("o3")
            try await f.store.stream("o3", generation: info.generation, range: 0..<1) { got.add($0) }
            #expect(got.data == Data("3".utf8))
            #expect(f.server.read { $0.refreshCalls } == 2)
        }
    }

    @Test func aRevokedRefreshTokenEndsInUnauthenticated() async throws {
        try await withFirebase { f in
            _ = try await f.store.write("o", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            f.server.revokeRefreshTokens(uid: "alice")
            f.server.expireIDTokens()
            let e = await storageError { _ = try await f.store.getMetadata("o") }
            guard case .unauthenticated(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("TOKEN_EXPIRED"))
            #expect(m.contains("sign in again with bucketfs login firebase://\(f.server.bucket)"))
            let calls = f.server.read { $0.refreshCalls }
            // Refused for good: later calls fail at once, without asking again.
            let e2 = await storageError { _ = try await f.store.read("o", generation: nil, range: nil) }
            guard case .unauthenticated? = e2 else { Issue.record("got \(String(describing: e2))"); return }
            #expect(f.server.read { $0.refreshCalls } == calls)
            // A command's or a program's session: every error says it, for its caller to show; the
            // store logs nothing (a running mount logs it once instead: FirebaseRefusalEpisodeTests).
            #expect(e2.map { "\($0)" }?.contains("sign in again with bucketfs login firebase://\(f.server.bucket)") == true)
            #expect(!f.logs.all.contains { $0.contains("sign in again") }, "\(f.logs.all)")
        }
        try await withFirebase { f in
            f.server.disable(uid: "alice")
            f.server.expireIDTokens()
            let e = await storageError { _ = try await f.store.getMetadata("o") }
            #expect(e.map { "\($0)" }?.contains("USER_DISABLED") == true)
        }
    }

    @Test func aFixedTokenIsNeverRefreshed() async throws {
        let s = try await FirebaseTestServer.start()
        let token = s.issueIDToken(uid: "erin", lifetime: 600)
        let fixed = FixedIDToken(token)
        #expect(await fixed.expiresAt.map { abs($0.timeIntervalSinceNow - 600) < 5 } == true)
        let store = FirebaseStore(bucket: s.bucket, prefix: "", endpoints: try endpoints(s), tokens: fixed,
                                  logger: Logger(label: "t"), requestTimeout: .seconds(5), deadline: .seconds(5),
                                  maxConnections: 4, tuning: fastTuning)
        _ = try await store.write("o", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
        s.expireIDTokens()
        let e = await storageError { _ = try await store.getMetadata("o") }
        guard case .unauthenticated(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
        #expect(m.contains("--id-token"))
        #expect(s.read { $0.refreshCalls } == 0)
        #expect(s.recorded.filter { $0.status == 401 }.count == 1, "no retry with the same token")
        try await store.shutdown()
        try await s.stop()
    }

    @Test func noTokenOrPasswordReachesALogLineOrAnError() async throws {
        let logs = LogLines()
        var errors: [String] = []
        var described: [String] = []
        let password = "pa55-word-\(UUID().uuidString)"
        let s = try await FirebaseTestServer.start(rules: .perUser)
        let logger = capturingLogger(logs)
        let client = FirebaseAuthClient(endpoints: try endpoints(s), apiKey: "key", logger: logger)
        let uid = s.addUser(email: "fay@example.com", password: password)
        if let e = await storageError({ _ = try await client.signIn(email: "fay@example.com", password: password + "x") }) {
            errors.append("\(e)")
        }
        let t = try await client.signIn(email: "fay@example.com", password: password)
        s.configure { $0.tokenLifetime = 2 }
        let manager = FirebaseTokenManager(client: client, refreshToken: t.refreshToken, bucket: s.bucket, logger: logger)
        let store = FirebaseStore(bucket: s.bucket, prefix: "", endpoints: try endpoints(s), tokens: manager, logger: logger,
                                  requestTimeout: .seconds(5), deadline: .seconds(3), maxConnections: 4, tuning: fastTuning)
        let fixed = FixedIDToken(t.idToken)
        let login = FirebaseLogin(bucket: s.bucket, apiKey: "key", uid: uid, email: "fay@example.com", provider: "password",
                                  refreshToken: t.refreshToken)
        described += ["\(t)", String(reflecting: t), "\(fixed)", String(reflecting: fixed), "\(login)", String(reflecting: login),
                      "\(manager)", "\(store)"]
        var dumped = ""
        dump(t, to: &dumped)
        dump(login, to: &dumped)
        dump(fixed, to: &dumped)
        described.append(dumped)
        _ = try await store.write("users/\(uid)/a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
        for op in 0..<6 {
            let e = await storageError {
                switch op {
                case 0: _ = try await store.getMetadata("users/someone-else/x")
                case 1: _ = try await store.list(ListRequest(prefix: "", delimiter: "/"))
                case 2: s.expireIDTokens(); _ = try await store.getMetadata("users/\(uid)/a")
                case 3: s.configure { $0.alwaysStatus = 503 }; _ = try await store.getMetadata("users/\(uid)/a")
                case 4: s.configure { $0.alwaysStatus = nil }; s.revokeRefreshTokens(uid: uid); s.expireIDTokens()
                    _ = try await store.getMetadata("users/\(uid)/a")
                default: _ = try await store.read("users/\(uid)/a", generation: nil, range: nil)
                }
            }
            if let e { errors.append("\(e)"); errors.append(String(reflecting: e)) }
        }
        #expect(errors.count >= 8)
        let secrets = s.read { server in server.issuedSecrets } + [password]
        #expect(secrets.count >= 4)
        let lines = logs.all
        #expect(lines.count > 20, "trace logging was on")
        for text in lines + errors + described {
            for secret in secrets where text.contains(secret) {
                Issue.record("a secret appears in: \(text.prefix(200))")
            }
        }
        try await store.shutdown()
        try await s.stop()
    }
}
