import Foundation
import Testing
import GCSStore
import StorageModel
import TestSupport

/// A source that counts its fetches and can be held until released.
final class CountingSource: AccessTokenSource, @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    private var gate: CheckedContinuation<Void, Never>?
    private var holding = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    let lifetime: Duration?
    var error: StorageError?
    let user: Bool

    init(lifetime: Duration?, user: Bool = false) { self.lifetime = lifetime; self.user = user }
    var fetches: Int { lock.withLock { count } }
    var userSignIn: Bool { user }

    func hold() { lock.withLock { holding = true } }
    func release() {
        let w: [CheckedContinuation<Void, Never>] = lock.withLock { holding = false; defer { waiting = [] }; return waiting }
        for c in w { c.resume() }
    }

    func fetch(timeout: Duration) async throws -> FetchedToken {
        let n: Int = lock.withLock { count += 1; return count }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let hold: Bool = lock.withLock { if holding { waiting.append(c) }; return holding }
            if !hold { c.resume() }
        }
        if let error { throw error }
        return FetchedToken(value: "token-\(n)", lifetime: lifetime)
    }
}

@Suite struct TokenCacheTests {
    @Test func refreshRuleIsLifetimeLessTheSmallerOfFiveMinutesAndAQuarter() {
        let t0 = ContinuousClock.now
        #expect(TokenCache.refreshAt(arrival: t0, lifetime: .seconds(3600)) == t0 + .seconds(3300))
        #expect(TokenCache.refreshAt(arrival: t0, lifetime: .seconds(1000)) == t0 + .seconds(750))
        #expect(TokenCache.refreshAt(arrival: t0, lifetime: .seconds(2)) == t0 + .milliseconds(1500))
    }

    @Test func cachedUntilDueThenRefreshedAhead() async throws {
        let clock = ManualClock()
        let source = CountingSource(lifetime: .seconds(2))
        let cache = TokenCache(source: source, clock: clock.clock)
        #expect(try await cache.token(timeout: .seconds(5)) == "token-1")
        clock.advance(by: .milliseconds(1499))
        #expect(try await cache.token(timeout: .seconds(5)) == "token-1", "still before lifetime − lifetime/4")
        clock.advance(by: .milliseconds(1))
        #expect(try await cache.token(timeout: .seconds(5)) == "token-2", "refreshed at 1.5 s, ahead of the 2 s expiry")
        #expect(source.fetches == 2)
        #expect(await cache.fetchCount == 2)
        // A source that does not say how long: an hour.
        let quiet = CountingSource(lifetime: nil)
        let c2 = TokenCache(source: quiet, clock: clock.clock)
        _ = try await c2.token(timeout: .seconds(5))
        clock.advance(by: .seconds(3299))
        _ = try await c2.token(timeout: .seconds(5))
        #expect(quiet.fetches == 1)
        clock.advance(by: .seconds(1))
        _ = try await c2.token(timeout: .seconds(5))
        #expect(quiet.fetches == 2)
    }

    @Test func oneRefreshHoweverManyWait() async throws {
        let source = CountingSource(lifetime: .seconds(3600))
        let cache = TokenCache(source: source)
        source.hold()
        let tokens = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<64 { group.addTask { try? await cache.token(timeout: .seconds(5)) } }
            // Every waiter is queued behind the one fetch before it is let go.
            try? await Task.sleep(for: .milliseconds(200))
            source.release()
            var out: [String?] = []
            for await t in group { out.append(t) }
            return out
        }
        #expect(source.fetches == 1)
        #expect(Set(tokens) == ["token-1"])
    }

    @Test func a401DropsTheRefusedTokenOnce() async throws {
        let source = CountingSource(lifetime: .seconds(3600))
        let cache = TokenCache(source: source)
        let first = try await cache.token(timeout: .seconds(5))
        await cache.refused(first)
        let second = try await cache.token(timeout: .seconds(5))
        #expect(second == "token-2")
        // Late 401s for the old token (sent before the refresh) do not refresh again.
        await cache.refused(first)
        await cache.refused(first)
        #expect(try await cache.token(timeout: .seconds(5)) == "token-2")
        #expect(source.fetches == 2)
    }

    @Test func aRefusedUserRefreshNamesTheCommandThatFixesIt() async throws {
        let source = CountingSource(lifetime: .seconds(3600), user: true)
        source.error = .unauthenticated(message: "the OAuth token endpoint refused to issue a token (HTTP 400): invalid_grant: Token has been expired or revoked.")
        let cache = TokenCache(source: source)
        do {
            _ = try await cache.token(timeout: .seconds(5))
            Issue.record("no error")
        } catch let e as StorageError {
            guard case .unauthenticated(let m) = e else { Issue.record("\(e)"); return }
            #expect(m.contains("invalid_grant") && m.contains("gcloud auth application-default login"), "\(m)")
        }
        // A transient failure is not cached: the next call tries again.
        source.error = nil
        #expect(try await cache.token(timeout: .seconds(5)) == "token-2")
    }
}
