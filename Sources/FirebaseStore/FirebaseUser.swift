import Foundation
import CloudHTTP

/// A signed-in Firebase user: who (`uid`, `email`, `provider`) and their ID tokens, which refresh
/// themselves: a token is refreshed when a request needs one within `refreshAhead` of its expiry
/// (or after a 401), concurrent requests sharing one refresh. A refresh refused for good (the user
/// disabled or deleted, the tokens revoked) makes every later call fail with
/// `StorageError.unauthenticated`; sign in again then. Its description never shows a token.
public struct FirebaseUser: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The user's id: what Security Rules see as `request.auth.uid` (e.g. `users/{uid}/…`).
    public let uid: String
    public let email: String?
    /// "password", "custom" or "anonymous".
    public let provider: String
    public let endpoints: FirebaseEndpoints
    let trust: TrustRoots
    /// The user's ID tokens (what `Storage.storage(url:user:)` sends).
    public let tokens: FirebaseTokenManager

    /// A valid ID token, refreshed if it is near expiry (for calling your own backend with it).
    public func idToken() async throws -> String { try await tokens.idToken(afterUnauthorized: false) }

    /// When the current ID token expires.
    public var expiresAt: Date? { get async { await tokens.expiresAt } }

    /// Refreshes done since the sign-in.
    public var refreshCount: Int { get async { await tokens.refreshCount } }

    public var description: String { "FirebaseUser(uid: \(uid), email: \(email ?? "none"), provider: \(provider))" }
    public var debugDescription: String { description }
    /// `dump` shows who, never the tokens.
    public var customMirror: Mirror {
        Mirror(self, children: ["uid": uid, "email": email as Any, "provider": provider, "tokens": "<redacted>"])
    }

    /// "Firebase user UID (EMAIL, PROVIDER)", as messages name a user.
    var identity: String { "Firebase user \(uid) (\(email.map { "\($0), " } ?? "")\(provider))" }
}
