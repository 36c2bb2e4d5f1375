import Foundation
import Logging
import StorageModel

/// Keeps a fresh Firebase ID token from a refresh token: refreshes ahead of expiry (default: 5
/// minutes before; a quarter of the lifetime for shorter-lived tokens), once more after a 401;
/// concurrent callers share one refresh. A refresh refused for good (revoked, user disabled or
/// deleted) is remembered: every later call fails at once with `StorageError.unauthenticated`
/// saying "sign in again with bucketfs login firebase://BUCKET …", and that is logged once.
/// Transient trouble (no answer, 5xx) is thrown as a transient error, for the caller to retry.
/// Tokens never reach a log line or an error message.
public actor FirebaseTokenManager: FirebaseIDTokenSource, CustomStringConvertible {
    private let client: FirebaseAuthClient
    private var refreshToken: String
    private let bucket: String
    private let logger: Logger
    private let refreshAhead: Duration
    private let now: @Sendable () -> Date

    private var current: (token: String, expires: Date, refreshAt: Date)?
    private var inFlight: Task<FirebaseTokens, any Error>?
    private var refusal: StorageError?
    /// Refreshes done (for logs and tests).
    public private(set) var refreshCount = 0

    public init(client: FirebaseAuthClient, refreshToken: String, bucket: String, logger: Logger,
                refreshAhead: Duration = .seconds(300), now: @escaping @Sendable () -> Date = Date.init) {
        self.client = client
        self.refreshToken = refreshToken
        self.bucket = bucket
        self.logger = logger
        self.refreshAhead = refreshAhead
        self.now = now
    }

    /// Starts from tokens a sign-in just gave (no refresh until they near expiry).
    public init(client: FirebaseAuthClient, signedIn tokens: FirebaseTokens, bucket: String, logger: Logger,
                refreshAhead: Duration = .seconds(300), now: @escaping @Sendable () -> Date = Date.init) {
        self.client = client
        self.refreshToken = tokens.refreshToken
        self.bucket = bucket
        self.logger = logger
        self.refreshAhead = refreshAhead
        self.now = now
        self.current = (tokens.idToken, tokens.expiresAt, Self.refreshTime(tokens.expiresAt, from: now(), ahead: refreshAhead))
    }

    public nonisolated var description: String { "FirebaseTokenManager(firebase://\(bucket))" }

    public var expiresAt: Date? { current?.expires }

    /// The refresh token to keep (Firebase may hand out a new one with a refresh).
    public var currentRefreshToken: String { refreshToken }

    public func idToken(afterUnauthorized: Bool) async throws -> String {
        if let refusal { throw refusal }
        if !afterUnauthorized, inFlight == nil, let c = current, now() < c.refreshAt { return c.token }
        let task: Task<FirebaseTokens, any Error>
        if let t = inFlight {
            task = t
        } else {
            let client = self.client, token = refreshToken
            task = Task { try await client.refresh(token) }
            inFlight = task
        }
        do {
            let t = try await task.value
            if inFlight == task {
                inFlight = nil
                refreshCount += 1
                current = (t.idToken, t.expiresAt, Self.refreshTime(t.expiresAt, from: now(), ahead: refreshAhead))
                if !t.refreshToken.isEmpty { refreshToken = t.refreshToken }
                logger.debug("Firebase: ID token for \(t.uid) refreshed; it expires at \(t.expiresAt)")
            }
            return t.idToken
        } catch {
            if inFlight == task { inFlight = nil }
            let e = error as? StorageError ?? .unknown(status: 0, message: "\(error)")
            if let m = Self.refusalMessage(e) {
                // The refresh token itself was refused: no retry will help.
                let refused = StorageError.unauthenticated(message: "\(m); sign in again with bucketfs login firebase://\(bucket) --api-key KEY (--email ADDRESS | --custom-token-file FILE | --anonymous)")
                if refusal == nil {
                    refusal = refused
                    current = nil
                    logger.error("firebase://\(bucket): \(refused)")
                }
                throw refused
            }
            throw e
        }
    }

    /// The server's reason when it refused the refresh token itself (no retry will help).
    static func refusalMessage(_ e: StorageError) -> String? {
        switch e {
        case .unauthenticated(let m), .unauthorized(_, let m): return m
        default: return nil
        }
    }

    /// `ahead` before expiry, but at most a quarter of the lifetime left (short-lived tokens).
    static func refreshTime(_ expires: Date, from now: Date, ahead: Duration) -> Date {
        let lifetime = max(0, expires.timeIntervalSince(now))
        let c = ahead.components
        let margin = min(Double(c.seconds) + Double(c.attoseconds) / 1e18, lifetime / 4)
        return expires.addingTimeInterval(-margin)
    }
}
