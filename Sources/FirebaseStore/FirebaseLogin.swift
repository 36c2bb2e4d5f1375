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

extension FirebaseLogin {
    /// The `bucketfs login` line that signs this user in again to the same place: the API key, the
    /// way they signed in (email, custom token or anonymous; all three when unknown) and the
    /// endpoints when they are not production's (an emulator), so that copying it never signs in
    /// to production by mistake.
    public static func command(bucket: String, apiKey: String?, email: String?, provider: String?,
                               endpoints: FirebaseEndpoints) -> String {
        var s = "bucketfs login firebase://\(bucket) --api-key \(apiKey ?? "KEY")"
        switch provider {
        case "password"?: s += " --email \(email ?? "ADDRESS")"
        case "custom"?: s += " --custom-token-file FILE"
        case "anonymous"?: s += " --anonymous"
        default: s += " (--email ADDRESS | --custom-token-file FILE | --anonymous)"
        }
        if let auth = endpoints.authBase { s += " --auth-endpoint \(auth.absoluteString)" }
        if endpoints.storage != FirebaseEndpoints.production.storage { s += " --endpoint \(endpoints.storage.absoluteString)" }
        return s
    }
}
