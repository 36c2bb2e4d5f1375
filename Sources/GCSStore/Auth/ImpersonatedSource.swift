import Foundation
import StorageModel

/// Service-account impersonation: a token of the source credential is traded at IAM Credentials'
/// `generateAccessToken` for one of the target service account, through `delegates` (an
/// `impersonated_service_account` file, an `external_account` with
/// `service_account_impersonation_url`, or `--impersonate-service-account`).
package struct ImpersonatedSource: AccessTokenSource {
    package let target: String
    /// As sent: `projects/-/serviceAccounts/EMAIL`; nil is sent as JSON null, as google-auth sends "none given".
    package let delegates: [String]?
    package let url: String
    /// What chose `url`, for messages: the credential file, or `BUCKETFS_IAM_CREDENTIALS_URL`.
    let urlSetting: String
    package let scope: String
    package let lifetime: Int
    /// The source's tokens, kept while they live (google-auth refreshes the source only when stale).
    let source: TokenCache
    package let userSignIn: Bool
    package let signInFix: String
    let transport: any TokenTransport
    let clock: BucketClock

    package init(source: any AccessTokenSource, target: String, delegates: [String]?, url: String, urlSetting: String,
                 scope: String = GoogleAuth.storageScope, lifetime: Int = 3600,
                 transport: any TokenTransport, clock: BucketClock) {
        self.source = TokenCache(source: source, clock: clock)
        self.userSignIn = source.userSignIn
        self.signInFix = source.signInFix
        self.target = target
        self.delegates = delegates?.map { $0.hasPrefix("projects/") ? $0 : "projects/-/serviceAccounts/\($0)" }
        self.url = url
        self.urlSetting = urlSetting
        self.scope = scope
        self.lifetime = lifetime
        self.transport = transport
        self.clock = clock
    }

    /// The target's email in a `…/serviceAccounts/EMAIL:generateAccessToken` URL.
    package static func target(ofURL url: String) -> String? {
        guard let r = url.range(of: "/serviceAccounts/") else { return nil }
        let rest = url[r.upperBound...]
        guard let colon = rest.range(of: ":generateAccessToken") else { return nil }
        let email = String(rest[..<colon.lowerBound])
        return email.removingPercentEncoding ?? email
    }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        let sourceToken = try await source.token(timeout: timeout)
        let body: [String: Any] = ["delegates": delegates.map { $0 as Any } ?? NSNull(), "scope": [scope], "lifetime": "\(lifetime)s"]
        let request = TokenRequest.json(url, body, headers: [("Authorization", "Bearer \(sourceToken)")])
        let what = "IAM Credentials generateAccessToken for \(target) at \(url) (\(urlSetting))"
        let resp: TokenResponse
        do {
            resp = try await TokenAnswers.send(request, through: transport, timeout: timeout, what: what,
                                               fix: "the source credential needs roles/iam.serviceAccountTokenCreator on \(target)")
        } catch {
            if case StorageError.unauthenticated? = error as? StorageError { await source.refused(sourceToken) }
            throw error
        }
        guard let o = resp.json, let token = o["accessToken"] as? String, !token.isEmpty else {
            throw StorageError.unauthenticated(message: "\(what) answered without an accessToken")
        }
        var life: Duration? = nil
        if let e = o["expireTime"] as? String, let expires = RFC3339Date.parse(e) {
            life = .milliseconds(Int64((expires.timeIntervalSince(clock.date) * 1000).rounded(.down)))
        }
        return FetchedToken(value: token, lifetime: life)
    }
}

/// `2026-11-28T13:00:00Z`, with or without fractional seconds.
package enum RFC3339Date {
    package static func parse(_ s: String) -> Date? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: s) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: s)
    }
}
