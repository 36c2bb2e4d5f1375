import Foundation

/// What `bucketfs login` keeps (never the password, never an ID token). Its description never
/// shows the refresh token.
public struct FirebaseLogin: Codable, Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var bucket: String
    public var apiKey: String
    public var uid: String
    public var email: String?
    public var provider: String
    public var refreshToken: String
    /// Set when login used an emulator / --auth-endpoint.
    public var authEndpoint: String?
    public var storageEndpoint: String?

    public init(bucket: String, apiKey: String, uid: String, email: String?, provider: String, refreshToken: String,
                authEndpoint: String? = nil, storageEndpoint: String? = nil) {
        self.bucket = bucket
        self.apiKey = apiKey
        self.uid = uid
        self.email = email
        self.provider = provider
        self.refreshToken = refreshToken
        self.authEndpoint = authEndpoint
        self.storageEndpoint = storageEndpoint
    }

    public var description: String {
        "FirebaseLogin(bucket: \(bucket), uid: \(uid), email: \(email ?? "none"), provider: \(provider), refreshToken: <redacted>)"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
        Mirror(self, children: ["bucket": bucket, "uid": uid, "email": email as Any, "provider": provider,
                                "refreshToken": "<redacted>", "authEndpoint": authEndpoint as Any,
                                "storageEndpoint": storageEndpoint as Any])
    }
}
