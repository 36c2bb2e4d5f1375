import FirebaseStore
import Foundation
import Logging
import StorageModel
import TestSupport
import Testing

/// The library's own sign-in (`FirebaseAuth`, docs/LIBRARY.md "Signing in from a program"): each
/// way gives the user's uid and a `Storage` as that user, without a login file; its ID tokens
/// refresh themselves on the clock; refusals say why, and never carry a secret.
@Suite struct FirebaseSignInTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func auth(_ s: FirebaseTestServer, clock: BucketClock = .real, logger: Logger = quiet) throws -> FirebaseAuth {
        // No emulator variable, no login file: everything comes from the arguments.
        try FirebaseAuth(apiKey: "test-api-key", authEndpoint: s.base.absoluteString, storageEndpoint: s.base.absoluteString,
                         environment: [:], clock: clock, logger: logger)
    }

    /// Upload, download, metadata, list and delete in the user's own folder; another's is refused.
    static func roundTrip(_ storage: Storage, _ user: FirebaseUser) async throws {
        let folder = storage.reference().child("users/\(user.uid)/notes")
        let file = folder.child("a.txt")
        var m = StorageMetadata()
        m.contentType = "text/plain"
        #expect(try await file.putData(Data("from \(user.uid)".utf8), metadata: m).size == Int64("from \(user.uid)".utf8.count))
        #expect(try await file.data(maxSize: 1000) == Data("from \(user.uid)".utf8))
        #expect(try await file.getMetadata().contentType == "text/plain")
        #expect(try await folder.listAll().items.map(\.fullPath) == ["users/\(user.uid)/notes/a.txt"])
        try await file.delete()
        #expect(try await folder.listAll().items.isEmpty)
        let e = await storageError { try await storage.reference().child("users/someone-else/x").putData(Data("x".utf8)) }
        #expect(e.map { if case .unauthorized = $0 { true } else { false } } == true, "\(String(describing: e))")
    }

    @Test func eachWayGivesTheUsersIdAndAStorageAsThatUser() async throws {
        let s = try await FirebaseTestServer.start(rules: .perUser)
        let auth = try Self.auth(s)
        let uid = s.addUser(email: "ada@example.com", password: "correct horse")

        let ada = try await auth.signIn(email: "ada@example.com", password: "correct horse")
        #expect(ada.uid == uid && ada.email == "ada@example.com" && ada.provider == "password")
        let bob = try await auth.signIn(customToken: #"{"uid":"bob"}"#)
        #expect(bob.uid == "bob" && bob.email == nil && bob.provider == "custom")
        let anon = try await auth.signInAnonymously()
        let anon2 = try await auth.signInAnonymously()
        #expect(anon.provider == "anonymous" && !anon.uid.isEmpty && anon.uid != anon2.uid, "each anonymous sign-in is a new user")

        for user in [ada, bob, anon] {
            let storage = try Storage.storage(url: "gs://\(s.bucket)", user: user)
            try await Self.roundTrip(storage, user)
            try await storage.shutdown()
        }
        // The requests went as each user: the objects' folders are theirs, and no refresh was needed.
        #expect(s.read { $0.refreshCalls } == 0)
        #expect(s.read { $0.signInCalls } == 4)
        try await s.stop()
    }

    @Test func theSessionRefreshesItselfAheadOfExpiryOnTheClock() async throws {
        // 60 s tokens are refreshed 15 s (a quarter of their life) before they expire. The tokens'
        // time is a ManualClock, on both sides: no real time passes.
        let s = try await FirebaseTestServer.start(rules: .perUser)
        let clock = ManualClock()
        s.configure { $0.tokenLifetime = 60; $0.tokenClock = clock.clock }
        let user = try await Self.auth(s, clock: clock.clock).signIn(customToken: #"{"uid":"carol"}"#)
        let storage = try Storage.storage(url: "firebase://\(s.bucket)", user: user)
        let ref = storage.reference().child("users/carol/a.txt")
        try await ref.putData(Data("a".utf8))
        let first = try #require(await user.expiresAt)

        clock.advance(by: .seconds(44))  // 16 s left: not yet
        _ = try await ref.getMetadata()
        #expect(s.read { $0.refreshCalls } == 0, "refreshed too early")
        #expect(await user.refreshCount == 0)

        clock.advance(by: .seconds(2))   // 14 s left: the next request refreshes first
        _ = try await ref.getMetadata()
        #expect(s.read { $0.refreshCalls } == 1)
        #expect(await user.refreshCount == 1)
        let second = try #require(await user.expiresAt)
        #expect(second.timeIntervalSince(first) >= 45, "a new token: \(first) → \(second)")

        clock.advance(by: .seconds(58))  // past the first token's expiry, and near the second's
        #expect(try await ref.data(maxSize: 10) == Data("a".utf8))
        #expect(s.read { $0.refreshCalls } == 2)
        #expect(!s.recorded.contains { $0.status == 401 }, "no request carried an expired token")
        try await storage.shutdown()
        try await s.stop()
    }

    @Test func aRefusedSignInSaysWhyAndNeverTheSecret() async throws {
        let s = try await FirebaseTestServer.start(rules: .perUser)
        let logs = LogLines()
        let auth = try Self.auth(s, logger: capturingLogger(logs))
        let password = "pa55-\(UUID().uuidString)"
        let uid = s.addUser(email: "dee@example.com", password: password)
        var messages: [String] = []
        func refused(_ code: String, _ body: () async throws -> Void) async {
            let e = await storageError(body)
            guard case .unauthenticated(let m)? = e else { Issue.record("\(code): got \(String(describing: e))"); return }
            #expect(m.contains(code), "\(m)")
            messages.append("\(e!)")
        }
        await refused("INVALID_LOGIN_CREDENTIALS") { _ = try await auth.signIn(email: "dee@example.com", password: password + "x") }
        await refused("INVALID_CUSTOM_TOKEN") { _ = try await auth.signIn(customToken: "not-a-token-\(password)") }
        s.configure { $0.anonymousSignIn = false }
        await refused("ADMIN_ONLY_OPERATION") { _ = try await auth.signInAnonymously() }
        s.disable(uid: uid)
        await refused("USER_DISABLED") { _ = try await auth.signIn(email: "dee@example.com", password: password) }

        // No API key, a bad endpoint, and an Auth server that is down: refused or named at once.
        #expect(throws: StorageError.self) { _ = try FirebaseAuth(apiKey: " ", environment: [:]) }
        #expect(throws: StorageError.self) { _ = try FirebaseAuth(apiKey: "k", authEndpoint: "ftp://127.0.0.1:9099", environment: [:]) }
        let down = try FirebaseAuth(apiKey: "k", authEndpoint: "http://127.0.0.1:\(deadPort())", environment: [:], logger: Self.quiet)
        let e = await storageError { _ = try await down.signInAnonymously() }
        #expect(e.map { "\($0)" }?.contains("Firebase Auth (identitytoolkit)") == true, "\(String(describing: e))")

        let secrets = s.read { $0.issuedSecrets } + [password]
        for text in messages + logs.all {
            for secret in secrets where text.contains(secret) { Issue.record("a secret appears in: \(text.prefix(200))") }
        }
        try await s.stop()
    }

    /// The user's tokens revoked: every call fails with unauthenticated, saying to sign in again
    /// through the library (not `bucketfs login`, which this program never used); nothing is
    /// logged, and nothing shows a token.
    @Test func aRevokedSessionSaysToSignInAgainThroughTheLibrary() async throws {
        let s = try await FirebaseTestServer.start(rules: .perUser)
        let logs = LogLines()
        let password = "pw-\(UUID().uuidString)"
        let uid = s.addUser(email: "eve@example.com", password: password)
        let user = try await Self.auth(s, logger: capturingLogger(logs)).signIn(email: "eve@example.com", password: password)
        let storage = try Storage.storage(url: "gs://\(s.bucket)", user: user, logger: capturingLogger(logs))
        let ref = storage.reference().child("users/\(uid)/a")
        try await ref.putData(Data("a".utf8))
        s.revokeRefreshTokens(uid: uid)
        s.expireIDTokens()
        var messages: [String] = []
        for _ in 0..<3 {
            let e = await storageError { _ = try await ref.getMetadata() }
            guard case .unauthenticated(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("TOKEN_EXPIRED"), "\(m)")
            #expect(!m.contains("bucketfs login"), "\(m)")
            messages.append(m)
        }
        #expect(messages.allSatisfy { $0.contains("sign in again with FirebaseAuth.signIn(email:password:)") }, "\(messages)")
        #expect(!logs.all.contains { $0.contains("sign in again") }, "\(logs.all)")
        var dumped = ""
        dump(user, to: &dumped)
        dump(user.tokens, to: &dumped)
        let described = ["\(user)", String(reflecting: user), "\(user.tokens)", dumped]
        #expect(described[0] == "FirebaseUser(uid: \(uid), email: eve@example.com, provider: password)")
        let secrets = s.read { $0.issuedSecrets } + [password]
        for text in messages + logs.all + described {
            for secret in secrets where text.contains(secret) { Issue.record("a secret appears in: \(text.prefix(200))") }
        }
        try await storage.shutdown()
        try await s.stop()
    }
}
