import Foundation
import StorageModel

/// Workload Identity Federation (`"type": "external_account"`): a subject token from
/// `credential_source` is exchanged at `token_url` (STS, RFC 8693) for a Google access token;
/// with `service_account_impersonation_url`, that token then impersonates the service account
/// (`ImpersonatedSource` wraps this one, asking STS for IAM's scope).
package struct ExternalAccountSource: AccessTokenSource {
    package let audience: String
    package let subjectTokenType: String
    package let tokenURL: String
    /// The file that named `tokenURL`, for messages.
    let path: String
    package let scope: String
    package let subject: any SubjectTokenSource
    let clientID: String?
    let clientSecret: String?
    let workforceUserProject: String?
    let transport: any TokenTransport

    package static let grantType = "urn:ietf:params:oauth:grant-type:token-exchange"
    package static let requestedTokenType = "urn:ietf:params:oauth:token-type:access_token"

    package init(_ o: [String: Any], path: String, scope: String, impersonated: String?, environment: [String: String],
                 transport: any TokenTransport, clock: BucketClock) throws {
        func required(_ k: String) throws -> String {
            guard let v = o[k] as? String, !v.isEmpty else {
                throw StorageError.unauthenticated(message: "\(path) is not a usable external_account file (\(k) is required)")
            }
            return v
        }
        audience = try required("audience")
        subjectTokenType = try required("subject_token_type")
        tokenURL = try required("token_url")
        self.path = path
        self.scope = scope
        clientID = (o["client_id"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        clientSecret = o["client_secret"] as? String
        workforceUserProject = (o["workforce_pool_user_project"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        self.transport = transport
        guard let cs = o["credential_source"] as? [String: Any] else {
            throw StorageError.unauthenticated(message: "\(path) is not a usable external_account file (credential_source is required)")
        }
        let kinds = ["file", "url", "executable"].filter { cs[$0] != nil }
        if kinds.count > 1 {
            // As google-auth refuses it: which one was meant cannot be known.
            throw StorageError.unauthenticated(message: "\(path): credential_source has both \(kinds.joined(separator: " and ")): give exactly one of file, url or executable")
        }
        if let exe = cs["executable"] as? [String: Any] {
            subject = try ExecutableSubjectSource(exe, path: path, audience: audience, tokenType: subjectTokenType,
                                                  impersonated: impersonated, environment: environment, clock: clock)
        } else if let file = cs["file"] as? String {
            subject = FileSubjectSource(file: file, format: try SubjectFormat(cs["format"] as? [String: Any], path: path))
        } else if let url = cs["url"] as? String {
            let headers = (cs["headers"] as? [String: String] ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            subject = URLSubjectSource(url: url, path: path, headers: headers, format: try SubjectFormat(cs["format"] as? [String: Any], path: path),
                                       transport: transport)
        } else if cs["environment_id"] != nil {
            throw StorageError.unauthenticated(message: "\(path): AWS credential sources (environment_id) are not supported; use a file, url or executable source")
        } else {
            throw StorageError.unauthenticated(message: "\(path): credential_source needs a file, a url or an executable")
        }
    }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        let subjectToken = try await subject.subjectToken(timeout: timeout)
        var fields = [("grant_type", Self.grantType), ("audience", audience), ("scope", scope),
                      ("requested_token_type", Self.requestedTokenType), ("subject_token", subjectToken),
                      ("subject_token_type", subjectTokenType)]
        if let p = workforceUserProject, clientID == nil {
            let options = (try? JSONSerialization.data(withJSONObject: ["userProject": p])).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            fields.append(("options", options.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? options))
        }
        let what = "the token exchange (STS) \(tokenURL) (token_url in \(path))"
        let request = TokenRequest.form(tokenURL, fields, headers: ExternalAccountAuthorizedUserSource.basic(clientID, clientSecret))
        let resp = try await TokenAnswers.send(request, through: transport, timeout: timeout, what: what,
                                               fix: "check the workload identity pool provider's audience and attribute conditions")
        return try TokenAnswers.accessToken(resp, what: what)
    }
}

/// A workforce identity sign-in from gcloud (`"type": "external_account_authorized_user"`): the
/// `refresh_token` grant at the file's `token_url`, the client authenticated with HTTP Basic.
package final class ExternalAccountAuthorizedUserSource: AccessTokenSource, @unchecked Sendable {
    let tokenURL: String
    let path: String
    let clientID: String?
    let clientSecret: String?
    let transport: any TokenTransport
    private let lock = NSLock()
    /// Rotated when the server sends a new one.
    private var refreshToken: String

    package init(_ o: [String: Any], path: String, transport: any TokenTransport) throws {
        guard let url = o["token_url"] as? String, !url.isEmpty, let refresh = o["refresh_token"] as? String, !refresh.isEmpty,
              let id = o["client_id"] as? String, let secret = o["client_secret"] as? String else {
            throw StorageError.unauthenticated(message: "\(path) is not a usable external_account_authorized_user file (token_url, refresh_token, client_id and client_secret are required); sign in again with `gcloud auth application-default login --login-config=FILE`")
        }
        tokenURL = url
        self.path = path
        refreshToken = refresh
        clientID = id
        clientSecret = secret
        self.transport = transport
    }

    package var userSignIn: Bool { true }
    package var signInFix: String { TokenAnswers.workforceLoginFix }

    package func fetch(timeout: Duration) async throws -> FetchedToken {
        let current = lock.withLock { refreshToken }
        let request = TokenRequest.form(tokenURL, [("grant_type", "refresh_token"), ("refresh_token", current)],
                                        headers: Self.basic(clientID, clientSecret))
        let what = "the token endpoint \(tokenURL) (workforce sign-in; token_url in \(path))"
        let resp = try await TokenAnswers.send(request, through: transport, timeout: timeout, what: what)
        if let next = resp.json?["refresh_token"] as? String, !next.isEmpty { lock.withLock { refreshToken = next } }
        return try TokenAnswers.accessToken(resp, what: what)
    }

    /// `Authorization: Basic base64(id:secret)` when a client ID is given.
    static func basic(_ id: String?, _ secret: String?) -> [(String, String)] {
        guard let id else { return [] }
        return [("Authorization", "Basic " + Data("\(id):\(secret ?? "")".utf8).base64EncodedString())]
    }
}
