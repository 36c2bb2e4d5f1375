import Foundation
import StorageModel

/// A user's sign-in (`"type": "authorized_user"`, what `gcloud auth application-default login`
/// writes): the `refresh_token` grant with the file's `client_id` and `client_secret`, always at
/// Google's OAuth token endpoint. A `token_uri` in the file is ignored, as google-auth ignores it, so
/// that no file can send a refresh token elsewhere; only `BUCKETFS_OAUTH_TOKEN_URL` moves it.
package struct AuthorizedUserSource: AccessTokenSource {
    package var clientID: String
    package var clientSecret: String
    package var refreshToken: String
    package var tokenURL: String
    /// What chose `tokenURL`, for messages.
    let tokenURLSetting: String
    /// Sent as `scope` when set (not when the user sign-in is impersonation's source).
    package var scope: String?
    let transport: any TokenTransport

    package init(_ o: [String: Any], path: String, scope: String?, environment: [String: String], transport: any TokenTransport) throws {
        guard let id = o["client_id"] as? String, let secret = o["client_secret"] as? String,
              let refresh = o["refresh_token"] as? String, !refresh.isEmpty else {
            throw StorageError.unauthenticated(message: "\(path) is not a usable authorized_user file (client_id, client_secret and refresh_token are required); \(TokenAnswers.loginFix)")
        }
        clientID = id
        clientSecret = secret
        refreshToken = refresh
        tokenURL = GoogleAuth.oauthTokenURL(environment)
        tokenURLSetting = GoogleAuth.oauthTokenSetting(environment)
        self.scope = scope
        self.transport = transport
    }

    package var userSignIn: Bool { true }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        var fields = [("grant_type", "refresh_token"), ("client_id", clientID), ("client_secret", clientSecret),
                      ("refresh_token", refreshToken)]
        if let scope { fields.append(("scope", scope)) }
        let what = "the OAuth token endpoint \(tokenURL) (user sign-in; \(tokenURLSetting))"
        let resp = try await TokenAnswers.send(.form(tokenURL, fields), through: transport, timeout: timeout, what: what)
        return try TokenAnswers.accessToken(resp, what: what)
    }
}
