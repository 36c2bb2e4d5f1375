import Foundation
import StorageModel

/// Hands out a credential's access token (docs/CREDENTIALS.md, "Tokens for as long as a mount lives"):
/// - cached, and refreshed ahead of expiry, at lifetime − min(300 s, lifetime / 4);
/// - one refresh at a time, however many requests wait for it;
/// - after a 401, the token that was refused is dropped once (the first 401 for it), so that
///   concurrent 401s cause one refresh;
/// - a refused refresh (`invalid_grant`) of a user sign-in names `gcloud auth application-default login`.
package actor TokenCache {
    private struct Cached {
        var value: String
        var refreshAt: BucketClock.Instant
    }

    private let source: any AccessTokenSource
    private let clock: BucketClock
    private var cached: Cached?
    private var inFlight: (id: Int, task: Task<Cached, any Error>)?
    private var nextID = 0
    /// Tokens fetched so far (logs, tests, whoami).
    package private(set) var fetchCount = 0

    package init(source: any AccessTokenSource, clock: BucketClock = .real) {
        self.source = source
        self.clock = clock
    }

    /// When a token that lives `lifetime` from `arrival` is refreshed.
    package static func refreshAt(arrival: BucketClock.Instant, lifetime: Duration) -> BucketClock.Instant {
        arrival + lifetime - min(.seconds(300), lifetime / 4)
    }

    /// The current token, fetching one when there is none or it is due for refresh.
    package func token(timeout: Duration) async throws -> String {
        if let c = cached, clock.now < c.refreshAt { return c.value }
        let entry: (id: Int, task: Task<Cached, any Error>)
        if let running = inFlight { entry = running } else {
            nextID += 1
            let source = self.source
            let clock = self.clock
            let task = Task<Cached, any Error> {
                let t = try await source.fetch(timeout: timeout)
                let lifetime = max(t.lifetime ?? .seconds(3600), .seconds(1))
                return Cached(value: t.value, refreshAt: Self.refreshAt(arrival: clock.now, lifetime: lifetime))
            }
            entry = (nextID, task)
            inFlight = entry
        }
        do {
            let fresh = try await entry.task.value
            if inFlight?.id == entry.id {
                inFlight = nil
                fetchCount += 1
                cached = fresh
            }
            return fresh.value
        } catch {
            if inFlight?.id == entry.id { inFlight = nil }
            throw named(error)
        }
    }

    /// After a 401 to a request that carried `sent` (the token, without `Bearer `): the cached token
    /// is dropped if it is the one refused (a later 401 for an older token does nothing).
    package func refused(_ sent: String?) {
        guard let c = cached else { return }
        if sent == nil || sent == c.value { cached = nil }
    }

    /// A refused refresh of a user sign-in says how to sign in again.
    private func named(_ error: any Error) -> any Error {
        guard source.userSignIn, TokenAnswers.isInvalidGrant(error), case StorageError.unauthenticated(let m)? = error as? StorageError,
              !m.contains("gcloud auth") else { return error }
        return StorageError.unauthenticated(message: "\(m); the sign-in was revoked or has expired: \(source.signInFix)")
    }
}
