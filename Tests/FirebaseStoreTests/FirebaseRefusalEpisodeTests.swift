import BucketFS
import FirebaseStore
import Foundation
import FuseKit
import Logging
import StorageModel
import TestSupport
import Testing

/// What a running mount logs when the server refuses its refresh token: the filesystem core logs
/// every failed operation, and the line to sign in again appears once per refusal episode
/// (docs/FIREBASE.md, "Sessions, logout and signing in again"); a sign-in that works ends the
/// episode, and the next refusal logs it again.
@Suite struct FirebaseRefusalEpisodeTests {
    final class Box: @unchecked Sendable {
        private let lock = NSLock()
        private var token: String?
        var value: String? { lock.withLock { token } }
        func set(_ t: String) { lock.withLock { token = t } }
    }

    @Test func aRunningMountLogsTheSignInLineOncePerRefusal() async throws {
        let s = try await FirebaseTestServer.start(rules: .signedIn)
        let cache = NSTemporaryDirectory() + "bucketfs-episode-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: cache) }
        let logs = LogLines()
        let logger = capturingLogger(logs)
        let client = FirebaseAuthClient(endpoints: try endpoints(s), apiKey: "test-api-key", logger: logger)
        let uid = s.addUser(email: "ada@example.com", password: "pw")
        let first = try await client.signIn(email: "ada@example.com", password: "pw")
        // The login file as a new `bucketfs login` of the same user would rewrite it.
        let newer = Box()
        let manager = FirebaseTokenManager(client: client, refreshToken: first.refreshToken, bucket: s.bucket, logger: logger,
                                           user: (first.email, first.provider), newerLogin: { newer.value },
                                           logsRefusals: true)
        let store = FirebaseStore(bucket: s.bucket, prefix: "", endpoints: try endpoints(s), tokens: manager, logger: logger,
                                  requestTimeout: .seconds(5), deadline: .seconds(5), maxConnections: 4, tuning: fastTuning)
        s.seed("f0", Data("x".utf8))
        var config = MountConfig()
        config.cacheDirectory = cache
        config.metadataTTL = 0
        config.failureTTL = 0
        let core = try BucketFileSystem(store: store, config: config, logger: logger)
        let line = "sign in again with bucketfs login firebase://\(s.bucket) --api-key test-api-key --email ada@example.com"
        func said() -> Int { logs.all.filter { $0.contains(line) }.count }
        /// Lookups of `n` names that are not there: each asks the bucket, and fails with EACCES.
        func refusedLookups(_ names: Range<Int>) async -> Int {
            var refused = 0
            for i in names {
                do { _ = try await core.lookup(parent: BucketFileSystem.rootIno, name: "n\(i)") } catch {
                    if error == .EACCES { refused += 1 }
                }
            }
            return refused
        }

        _ = try await core.lookup(parent: BucketFileSystem.rootIno, name: "f0")
        s.revokeRefreshTokens(uid: uid)
        s.expireIDTokens()
        #expect(await refusedLookups(0..<12) == 12)
        let failed = logs.all.filter { $0.contains("failed") && $0.contains("TOKEN_EXPIRED") }
        #expect(failed.count >= 12, "every failed operation is logged: \(logs.all)")
        #expect(said() == 1, "the sign-in line once, not with each failure: \(logs.all.filter { $0.contains("sign in again") })")
        #expect(failed.allSatisfy { $0.contains("the line to sign in again is in the log") }, "\(failed)")

        // The user signs in again: the next operation takes the new login and works, which ends
        // the episode; refused again, the line is logged again, once.
        newer.set(try await client.signIn(email: "ada@example.com", password: "pw").refreshToken)
        _ = try await core.lookup(parent: BucketFileSystem.rootIno, name: "f0")
        #expect(said() == 1)
        s.revokeRefreshTokens(uid: uid)
        s.expireIDTokens()
        #expect(await refusedLookups(100..<112) == 12)
        #expect(said() == 2, "\(logs.all.filter { $0.contains("sign in again") })")

        let secrets = s.read { $0.issuedSecrets }
        for text in logs.all { for secret in secrets where text.contains(secret) { Issue.record("a token in: \(text.prefix(200))") } }
        await core.shutdown(within: .seconds(5))
        try await store.shutdown()
        try await s.stop()
    }
}
