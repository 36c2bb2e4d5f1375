@testable import FirebaseStore
import Foundation
import StorageModel
import Testing

/// The store's side of a 401: one refresh per refused token, however many requests it refused
/// and whenever their answers come back.
@Suite struct FirebaseAuthorizationTests {
    /// Counts refreshes; hands out token N after N refreshes.
    actor CountingSource: FirebaseIDTokenSource {
        private(set) var refreshes = 0
        func idToken(afterUnauthorized: Bool) async throws -> String {
            if afterUnauthorized {
                try await Task.sleep(for: .milliseconds(50))
                refreshes += 1
            }
            return "token-\(refreshes)"
        }
        var expiresAt: Date? { nil }
    }

    @Test func lateFourOhOnesOfARefusedTokenCauseNoSecondRefresh() async throws {
        let source = CountingSource()
        let auth = FirebaseAuthorization(source: source, bucket: "b", clock: .real)
        let first = try #require(try await auth.authorization(timeout: .seconds(1)))
        #expect(first == "Firebase token-0")
        // Many requests refused with token-0 at once, and some whose answers come after the refresh.
        await withTaskGroup(of: Void.self) { g in
            for _ in 0..<10 { g.addTask { await auth.unauthorized(sent: first) } }
        }
        await auth.unauthorized(sent: first)
        await auth.unauthorized(sent: first)
        #expect(await source.refreshes == 1)
        let second = try #require(try await auth.authorization(timeout: .seconds(1)))
        #expect(second == "Firebase token-1")
        // The new token refused too: one more.
        await auth.unauthorized(sent: second)
        await auth.unauthorized(sent: second)
        #expect(await source.refreshes == 2)
        #expect(auth.canRefresh)
        #expect(!FirebaseAuthorization(source: FixedIDToken("t"), bucket: "b", clock: .real).canRefresh)
    }
}
