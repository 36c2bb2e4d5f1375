import Foundation

/// What a sign-in or a refresh gives. Its description never shows the tokens.
public struct FirebaseTokens: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var idToken: String
    public var refreshToken: String
    public var expiresAt: Date
    public var uid: String
    public var email: String?
    /// "password", "custom", "anonymous" (from the token's firebase.sign_in_provider).
    public var provider: String

    public init(idToken: String, refreshToken: String, expiresAt: Date, uid: String, email: String?, provider: String) {
        self.idToken = idToken
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
        self.uid = uid
        self.email = email
        self.provider = provider
    }

    public var description: String {
        "FirebaseTokens(uid: \(uid), email: \(email ?? "none"), provider: \(provider), expiresAt: \(expiresAt), idToken: <redacted>, refreshToken: <redacted>)"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
        Mirror(self, children: ["uid": uid, "email": email as Any, "provider": provider, "expiresAt": expiresAt,
                                "idToken": "<redacted>", "refreshToken": "<redacted>"])
    }
}

/// The claims of a Firebase ID token that bucketfs reads (without verifying the token: the
/// servers do that). Never kept or shown whole.
struct IDTokenClaims {
    var uid: String?
    var email: String?
    var provider: String?
    var expires: Date?

    init(_ token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 2, let data = Self.base64URL(parts[1]),
              let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
        uid = (o["user_id"] as? String) ?? (o["sub"] as? String)
        email = o["email"] as? String
        provider = (o["firebase"] as? [String: Any])?["sign_in_provider"] as? String
        if let exp = (o["exp"] as? NSNumber)?.doubleValue { expires = Date(timeIntervalSince1970: exp) }
    }

    static func base64URL(_ s: Substring) -> Data? {
        var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        return Data(base64Encoded: t)
    }
}
