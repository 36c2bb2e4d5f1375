import Foundation
import CloudHTTP
import StorageModel

/// `Authorization: Firebase <ID token>` for the transport. After a 401, the token that was refused
/// is refreshed once: every request refused with that same token (many at once, after an
/// expiry) waits for that one refresh, and a request that carried an older token just takes the
/// new one.
actor FirebaseAuthorization: TransportAuthorization {
    private let source: any FirebaseIDTokenSource
    private let bucket: String
    /// What a wait for a token is bounded on (the store's clock).
    private let clock: BucketClock
    nonisolated let canRefresh: Bool
    /// Tokens already refused (the last few), so their late 401s cause no second refresh.
    private var refused: [String] = []
    private var refreshing: Task<Void, Never>?

    init(source: any FirebaseIDTokenSource, bucket: String, clock: BucketClock) {
        self.source = source
        self.clock = clock
        self.bucket = bucket
        self.canRefresh = !(source is FixedIDToken)
    }

    nonisolated var refreshesStreams: Bool { true }

    /// Within `timeout`, whatever the Auth server does (a refresh that takes longer goes on, for
    /// the next caller): a request never waits past its own deadline for a token.
    func authorization(timeout: Duration) async throws -> String? {
        let source = self.source, refreshing = self.refreshing
        // A little under the attempt's own limit, so that the error says what was waited for.
        let token = try await Bounded.run(timeout * 9 / 10, clock: clock, late: {
            .timeout(message: "no Firebase ID token within \(timeout): Firebase Auth did not answer the token refresh")
        }) {
            if let refreshing { await refreshing.value }
            if let optional = source as? any FirebaseOptionalIDTokenSource {
                return try await optional.idTokenIfSignedIn(afterUnauthorized: false)
            }
            return try await source.idToken(afterUnauthorized: false)
        }
        return token.map { "Firebase " + $0 }
    }

    /// Starts the one refresh for a refused token and waits for it, at most `within` (the call's
    /// time left): an Auth server that does not answer holds no request past its deadline; the
    /// refresh goes on for the next request, whose `authorization` waits for it within its own time.
    func unauthorized(sent: String?, within: Duration = .seconds(60)) async {
        if let refreshing {
            await Self.wait(for: refreshing, within: within, clock: clock)
            return
        }
        if let sent, refused.contains(sent) { return }
        if let sent {
            refused.append(sent)
            if refused.count > 8 { refused.removeFirst() }
        }
        let source = self.source
        let task = Task<Void, Never> { _ = try? await source.idToken(afterUnauthorized: true) }
        refreshing = task
        Task { await task.value; self.refreshed(task) }
        await Self.wait(for: task, within: within, clock: clock)
    }

    private func refreshed(_ task: Task<Void, Never>) {
        if refreshing == task { refreshing = nil }
    }

    private static func wait(for task: Task<Void, Never>, within: Duration, clock: BucketClock) async {
        _ = try? await Bounded.run(max(within, .zero), clock: clock, late: { .timeout(message: "token refresh") }) { await task.value }
    }

    nonisolated func unauthenticated(_ message: String) -> StorageError {
        // The token source's own refusal says how to sign in again, or where that was logged.
        if message.contains("sign in again") { return .unauthenticated(message: message) }
        let hint = canRefresh
            ? "the Firebase ID token was refused after a refresh; sign in again with bucketfs login firebase://\(bucket)"
            : "the ID token given (--id-token / FIREBASE_ID_TOKEN) was refused, and it is never refreshed"
        return .unauthenticated(message: "\(message) (\(hint))")
    }
}
