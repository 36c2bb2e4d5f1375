import Foundation
import Crypto
import _CryptoExtras
import StorageModel

/// A service account JSON key (`"type": "service_account"`): an RS256 JWT signed with its key is
/// exchanged at its `token_uri` (the JWT-bearer grant).
package struct ServiceAccountSource: AccessTokenSource {
    package var clientEmail: String
    package var privateKeyPEM: String
    package var privateKeyID: String?
    package var tokenURI: String
    /// What chose `tokenURI`, for messages.
    let tokenURISetting: String
    package var scope: String
    let transport: any TokenTransport
    let clock: BucketClock

    package static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"

    /// From the key's fields; `scope` is the storage scope, or IAM's when it is impersonation's source.
    package init(_ o: [String: Any], path: String, scope: String = GoogleAuth.storageScope, environment: [String: String],
                 transport: any TokenTransport, clock: BucketClock) throws {
        guard let email = o["client_email"] as? String, let pem = o["private_key"] as? String else {
            throw StorageError.unauthenticated(message: "\(path) is not a usable service account key (client_email and private_key are required)")
        }
        clientEmail = email
        privateKeyPEM = pem
        privateKeyID = o["private_key_id"] as? String
        if let uri = (o["token_uri"] as? String).flatMap({ $0.isEmpty ? nil : $0 }) {
            (tokenURI, tokenURISetting) = (uri, "token_uri in \(path)")
        } else {
            (tokenURI, tokenURISetting) = (GoogleAuth.oauthTokenURL(environment), GoogleAuth.oauthTokenSetting(environment))
        }
        self.scope = scope
        self.transport = transport
        self.clock = clock
        // A key that cannot sign is refused now, by name, not at the first request.
        _ = try assertion(now: clock.date)
    }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        let request = TokenRequest.form(tokenURI, [("assertion", try assertion(now: clock.date)), ("grant_type", Self.grantType)])
        let what = "the token endpoint \(tokenURI) (service account \(clientEmail); \(tokenURISetting))"
        return try TokenAnswers.accessToken(try await TokenAnswers.send(request, through: transport, timeout: timeout, what: what), what: what)
    }

    /// The signed assertion `header.claims.signature`. Its audience is Google's token endpoint
    /// whatever `token_uri` says, as google-auth signs it.
    package func assertion(now: Date, lifetime: Int = 3600) throws -> String {
        var header: [String: Any] = ["alg": "RS256", "typ": "JWT"]
        if let kid = privateKeyID { header["kid"] = kid }
        let iat = Int(now.timeIntervalSince1970)
        let claims: [String: Any] = ["iss": clientEmail, "scope": scope, "aud": GoogleAuth.oauthTokenURL, "iat": iat, "exp": iat + lifetime]
        let h = Self.base64URL(try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys]))
        let c = Self.base64URL(try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys]))
        let key: _RSA.Signing.PrivateKey
        do { key = try _RSA.Signing.PrivateKey(pemRepresentation: privateKeyPEM) } catch {
            // Never the key itself in the message.
            throw StorageError.unauthenticated(message: "the private_key of \(clientEmail) is not a usable RSA PEM key")
        }
        let sig = try key.signature(for: Data("\(h).\(c)".utf8), padding: .insecurePKCS1v1_5)
        return "\(h).\(c).\(Self.base64URL(sig.rawRepresentation))"
    }

    package static func base64URL(_ d: Data) -> String {
        d.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
