import Foundation
import Logging
import StorageModel

/// Keeps a fresh Firebase ID token from a refresh token: refreshes ahead of expiry (default: 5
/// minutes before; a quarter of the lifetime for shorter-lived tokens), once more after a 401;
/// concurrent callers share one refresh. A refresh refused for good (revoked, user disabled or
/// deleted) is remembered: every later call fails at once with `StorageError.unauthenticated`
/// saying how to sign in again: "sign in again with bucketfs login firebase://BUCKET …" (the whole
/// line, with the endpoints in use, so that copying it signs in to the same place), or
/// `signInAgain` for a program's own sign-in. With `logsRefusals` (a running mount, which logs
/// every failed operation) that line is logged once per refusal episode instead, and the errors
/// point to it (docs/FIREBASE.md, "Sessions, logout and signing in again"); a refresh that works
/// ends the episode.
/// A session refused that way revives without a restart when `newerLogin` (the login file of the
/// same bucket, read again) gives a refresh token of the same user that was not refused yet: the
/// next call refreshes with it.
/// Transient trouble (no answer, 5xx) is thrown as a transient error, for the caller to retry.
/// Tokens never reach a log line or an error message.
public actor FirebaseTokenManager: FirebaseIDTokenSource, CustomStringConvertible, CustomReflectable {
    private let client: FirebaseAuthClient
    private var refreshToken: String
    private let bucket: String
    private let logger: Logger
    private let refreshAhead: Duration
    /// The clock tokens' lifetimes are read on: the Auth client's (docs/ARCHITECTURE.md, "One clock").
    private nonisolated func now() -> Date { client.clock.date }

    private var current: (token: String, expires: Date, refreshAt: Date)?
    private var inFlight: Task<FirebaseTokens, any Error>?
    /// The server's reason while the refresh token is refused (a refusal episode), else nil.
    private var refusal: String?
    /// When the episode began, and whether its sign-in line was logged (`logsRefusals`).
    private var refusedSince: Date?
    private var announced = false
    /// Whether the sign-in line is logged once per episode (errors then point to it) rather than
    /// carried by every error.
    private let logsRefusals: Bool
    /// The refresh token the server refused (a newer login must bring another one).
    private var refusedToken: String?
    /// A refresh token of a newer login of the same user, if there is one (read when refused).
    private let newerLogin: (@Sendable () -> String?)?
    /// Who signed in, for the sign-in-again line: email (if any) and provider.
    private var user: (email: String?, provider: String)?
    /// How to sign in again, when not with `bucketfs login` (a program's own sign-in).
    private let signInAgain: String?
    /// Whose tokens, for messages when no bucket is named (a program's sign-in).
    private let uid: String?
    /// Refreshes done (for logs and tests).
    public private(set) var refreshCount = 0

    public init(client: FirebaseAuthClient, refreshToken: String, bucket: String, logger: Logger,
                refreshAhead: Duration = .seconds(300),
                user: (email: String?, provider: String)? = nil, newerLogin: (@Sendable () -> String?)? = nil,
                logsRefusals: Bool = false) {
        self.client = client
        self.refreshToken = refreshToken
        self.bucket = bucket
        self.logger = logger
        self.refreshAhead = refreshAhead
        self.user = user
        self.newerLogin = newerLogin
        self.signInAgain = nil
        self.uid = nil
        self.logsRefusals = logsRefusals
    }

    /// Starts from tokens a sign-in just gave (no refresh until they near expiry). `bucket` may be
    /// empty (a program's sign-in, for any bucket); `signInAgain` then says how to sign in again.
    public init(client: FirebaseAuthClient, signedIn tokens: FirebaseTokens, bucket: String, logger: Logger,
                refreshAhead: Duration = .seconds(300),
                newerLogin: (@Sendable () -> String?)? = nil, signInAgain: String? = nil) {
        self.client = client
        self.refreshToken = tokens.refreshToken
        self.bucket = bucket
        self.logger = logger
        self.refreshAhead = refreshAhead
        self.user = (tokens.email, tokens.provider)
        self.newerLogin = newerLogin
        self.signInAgain = signInAgain
        self.uid = tokens.uid
        self.logsRefusals = false
        self.current = (tokens.idToken, tokens.expiresAt, Self.refreshTime(tokens.expiresAt, from: client.clock.date, ahead: refreshAhead))
    }

    public nonisolated var description: String { "FirebaseTokenManager(\(scope))" }
    /// `dump` shows whose tokens, never the tokens.
    public nonisolated var customMirror: Mirror { Mirror(self, children: ["scope": scope, "tokens": "<redacted>"]) }

    /// What messages name: the bucket, else the user.
    private nonisolated var scope: String { bucket.isEmpty ? "Firebase user \(uid ?? "?")" : "firebase://\(bucket)" }

    public var expiresAt: Date? { current?.expires }

    /// The refresh token to keep (Firebase may hand out a new one with a refresh).
    public var currentRefreshToken: String { refreshToken }

    public func idToken(afterUnauthorized: Bool) async throws -> String {
        if refusal != nil, !reviveFromNewerLogin() { throw refusalError() }
        if !afterUnauthorized, inFlight == nil, let c = current, now() < c.refreshAt { return c.token }
        do {
            return try await refreshed()
        } catch is Refused {
            // A newer login may already be there (signed in again before this refresh was due).
            guard reviveFromNewerLogin() else { throw refusalError() }
            do { return try await refreshed() } catch is Refused { throw refusalError() }
        }
    }

    /// The line that signs in again to the same place (endpoints and user as this session's), or
    /// what a program was told to do instead.
    public var signInAgainLine: String {
        if let signInAgain { return signInAgain }
        return FirebaseLogin.command(bucket: bucket, apiKey: client.apiKey, email: user?.email, provider: user?.provider,
                              endpoints: client.endpoints)
    }

    /// The refresh token was refused (`refusal` says why).
    private struct Refused: Error {}

    /// The error of a refused session: says how to sign in again, or, when that is logged once
    /// per episode, points to the log.
    private func refusalError() -> StorageError {
        let reason = refusal ?? "the refresh token was refused"
        guard logsRefusals else { return .unauthenticated(message: signInAgainMessage(reason)) }
        let since = refusedSince.map { " since \(Self.stamp($0))" } ?? ""
        return .unauthenticated(message: "\(reason) (\(scope) is signed out\(since); the line to sign in again is in the log)")
    }

    private func signInAgainMessage(_ reason: String) -> String {
        let revives = newerLogin == nil ? "" : " (the new login is picked up at the next operation, without a restart)"
        return "\(reason); sign in again with \(signInAgainLine)\(revives)"
    }

    private static func stamp(_ d: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: d)
    }

    /// One refresh, shared by concurrent callers. A refusal of the refresh token itself is
    /// remembered (`refusal`) and thrown as `Refused`.
    private func refreshed() async throws -> String {
        let task: Task<FirebaseTokens, any Error>
        if let t = inFlight {
            task = t
        } else {
            let client = self.client, token = refreshToken
            task = Task { try await client.refresh(token) }
            inFlight = task
        }
        let token = refreshToken
        do {
            let t = try await task.value
            if inFlight == task {
                inFlight = nil
                refreshCount += 1
                current = (t.idToken, t.expiresAt, Self.refreshTime(t.expiresAt, from: now(), ahead: refreshAhead))
                if !t.refreshToken.isEmpty { refreshToken = t.refreshToken }
                // A refresh that works ends a refusal episode: the next refusal says it all again.
                announced = false
                refusedSince = nil
                user = (t.email ?? user?.email, t.provider)
                logger.debug("Firebase: ID token for \(t.uid) refreshed; it expires at \(t.expiresAt)")
            }
            return t.idToken
        } catch {
            if inFlight == task { inFlight = nil }
            let e = error as? StorageError ?? .unknown(status: 0, message: "\(error)")
            if let m = Self.refusalMessage(e) {
                // The refresh token itself was refused: no retry will help.
                if refusal == nil || refusedToken != token {
                    if refusedSince == nil { refusedSince = now() }
                    refusal = m
                    refusedToken = token
                    current = nil
                    if logsRefusals && !announced {
                        announced = true
                        logger.error("\(scope): unauthenticated: \(signInAgainMessage(m))")
                    } else {
                        logger.debug("\(scope): the refresh token was refused: \(m)")
                    }
                }
                throw Refused()
            }
            throw e
        }
    }

    /// After a refusal: takes the refresh token of a newer login of the same user, if the login
    /// file has one that was not refused yet. True when there is one to try.
    private func reviveFromNewerLogin() -> Bool {
        guard refusal != nil, let newerLogin, let fresh = newerLogin(), !fresh.isEmpty, fresh != refusedToken else { return false }
        refreshToken = fresh
        refusal = nil
        current = nil
        logger.notice("\(scope): a newer login of the same user is in the login file; using it")
        return true
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
