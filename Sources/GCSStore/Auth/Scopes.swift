/// The OAuth scopes and Google endpoints credentials use (docs/CREDENTIALS.md).
package enum GoogleAuth {
    /// What bucketfs asks for: everything Cloud Storage does, nothing else.
    package static let storageScope = "https://www.googleapis.com/auth/devstorage.full_control"
    /// What a token must carry to call IAM Credentials' generateAccessToken.
    package static let cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"
    package static let iamScope = "https://www.googleapis.com/auth/iam"
    /// Google's OAuth token endpoint: service-account keys without a `token_uri`, and every
    /// `authorized_user` file (whose own `token_uri` is ignored). `BUCKETFS_OAUTH_TOKEN_URL` replaces it.
    package static let oauthTokenURL = "https://oauth2.googleapis.com/token"
    package static let oauthTokenVariable = "BUCKETFS_OAUTH_TOKEN_URL"
    /// IAM Credentials, for `--impersonate-service-account`. `BUCKETFS_IAM_CREDENTIALS_URL` replaces the
    /// base (`…/v1`), as in `…/v1/projects/-/serviceAccounts/EMAIL:generateAccessToken`.
    package static let iamCredentialsBase = "https://iamcredentials.googleapis.com/v1"
    package static let iamCredentialsVariable = "BUCKETFS_IAM_CREDENTIALS_URL"

    /// The only universe bucketfs reaches; a credential file for another is refused by name.
    package static let defaultUniverse = "googleapis.com"
    /// Replaces any credential file's `quota_project_id`, as google-auth's `default()` lets it.
    package static let quotaProjectVariable = "GOOGLE_CLOUD_QUOTA_PROJECT"

    package static func quotaProject(_ environment: [String: String]) -> String? {
        environment[quotaProjectVariable].flatMap { $0.isEmpty ? nil : $0 }
    }

    package static func oauthTokenURL(_ environment: [String: String]) -> String {
        environment[oauthTokenVariable].flatMap { $0.isEmpty ? nil : $0 } ?? oauthTokenURL
    }

    /// What chose the OAuth token endpoint, for messages (docs/CREDENTIALS.md, "When a token endpoint fails").
    package static func oauthTokenSetting(_ environment: [String: String]) -> String {
        environment[oauthTokenVariable].map { !$0.isEmpty } ?? false ? "set by \(oauthTokenVariable)" : "Google's; \(oauthTokenVariable) moves it"
    }

    /// What chose IAM Credentials' address, for messages.
    package static func iamCredentialsSetting(_ environment: [String: String]) -> String {
        environment[iamCredentialsVariable].map { !$0.isEmpty } ?? false ? "set by \(iamCredentialsVariable)" : "Google's; \(iamCredentialsVariable) moves it"
    }

    package static func generateAccessTokenURL(_ email: String, environment: [String: String]) -> String {
        var base = environment[iamCredentialsVariable].flatMap { $0.isEmpty ? nil : $0 } ?? iamCredentialsBase
        while base.hasSuffix("/") { base.removeLast() }
        return "\(base)/projects/-/serviceAccounts/\(email):generateAccessToken"
    }
}
