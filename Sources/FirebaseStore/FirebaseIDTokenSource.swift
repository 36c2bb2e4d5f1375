import Foundation

/// Where the store gets ID tokens.
public protocol FirebaseIDTokenSource: Sendable {
    /// A token valid for at least a minute; `afterUnauthorized` forces one refresh (after a 401).
    func idToken(afterUnauthorized: Bool) async throws -> String
    /// When the current token expires (for `whoami`), if known.
    var expiresAt: Date? { get async }
}

/// --id-token / FIREBASE_ID_TOKEN: used as is, never refreshed. Its description never shows it.
public struct FixedIDToken: FirebaseIDTokenSource, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    private let token: String

    public init(_ token: String) { self.token = token }

    public func idToken(afterUnauthorized: Bool) async throws -> String { token }

    /// From the token's own `exp` claim, when it has one.
    public var expiresAt: Date? { get async { IDTokenClaims(token).expires } }

    public var description: String { "FixedIDToken(<redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["token": "<redacted>"]) }
}
