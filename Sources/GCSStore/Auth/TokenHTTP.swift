import Foundation
import CloudHTTP
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import StorageModel

/// One request a credential makes to get a token (docs/CREDENTIALS.md): to an OAuth token
/// endpoint, STS, IAM Credentials, a subject-token URL or the metadata server.
package struct TokenRequest: Sendable, Equatable {
    package var method: String
    package var url: String
    /// In the order sent; `Authorization` may be among them (never logged).
    package var headers: [(String, String)]
    package var body: Data?

    package init(method: String = "POST", url: String, headers: [(String, String)] = [], body: Data? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }

    package static func == (a: TokenRequest, b: TokenRequest) -> Bool {
        a.method == b.method && a.url == b.url && a.body == b.body
            && a.headers.map { "\($0.0.lowercased()): \($0.1)" } == b.headers.map { "\($0.0.lowercased()): \($0.1)" }
    }

    /// `application/x-www-form-urlencoded` with `fields` in their order.
    package static func form(_ url: String, _ fields: [(String, String)], headers: [(String, String)] = []) -> TokenRequest {
        let body = fields.map { "\(formEncode($0.0))=\(formEncode($0.1))" }.joined(separator: "&")
        return TokenRequest(url: url, headers: [("Content-Type", "application/x-www-form-urlencoded")] + headers,
                            body: Data(body.utf8))
    }

    /// `application/json`.
    package static func json(_ url: String, _ object: [String: Any], headers: [(String, String)] = []) -> TokenRequest {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return TokenRequest(url: url, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    /// As HTML forms (and Python's `urlencode`) encode: unreserved characters kept, space as `+`.
    package static func formEncode(_ s: String) -> String {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~ ")
        return (s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s).replacingOccurrences(of: " ", with: "+")
    }
}

/// A token endpoint's answer.
package struct TokenResponse: Sendable {
    package var status: Int
    package var body: Data
    package init(status: Int, body: Data) { self.status = status; self.body = body }

    package var json: [String: Any]? { try? JSONSerialization.jsonObject(with: body) as? [String: Any] }
}

/// Sends token requests. Production: `HTTPTokenTransport`; Swift tests: in-process fakes.
package protocol TokenTransport: Sendable {
    func send(_ request: TokenRequest, timeout: Duration) async throws -> TokenResponse
}

/// Token requests through the store's transport (`CredentialRequests`: its clients, trust,
/// connection count and clock). One attempt each: a failed one fails the attempt of the store call
/// that needed the token, and that call's retries (its `RetryPolicy`) fetch again. A URL
/// `http+unix://%2Fpath%2Fto.sock/path` goes over a unix socket (the HTTP client's spelling;
/// `--token-url unix:/path/to.sock` is turned into it).
package struct HTTPTokenTransport: TokenTransport {
    let requests: CredentialRequests
    package init(_ requests: CredentialRequests) { self.requests = requests }

    package func send(_ request: TokenRequest, timeout: Duration) async throws -> TokenResponse {
        var headers = HTTPHeaders()
        for (name, value) in request.headers { headers.add(name: name, value: value) }
        let sent = CloudRequest(HTTPMethod(rawValue: request.method), request.url, headers: headers,
                                body: request.body.map { ByteBuffer(data: $0) })
        let answer = try await requests.send("token", sent, timeout: timeout, retried: false)
        return TokenResponse(status: answer.status, body: answer.data)
    }
}

/// What every credential type does with a token endpoint's answer.
package enum TokenAnswers {
    /// The fix for a refused user sign-in, as Google's tools say it.
    package static let loginFix = "run `gcloud auth application-default login` to sign in again"
    /// The same for a workforce identity sign-in (`external_account_authorized_user`).
    package static let workforceLoginFix = "run `gcloud auth application-default login --login-config=LOGIN_CONFIG` "
        + "(the workforce pool's login configuration) to sign in again"

    /// What a token endpoint that did not answer is called in an error: `what` names the endpoint
    /// and the setting that chose it; the prefix tells it from storage's own endpoint (SourceCheck).
    package static func unreachable(_ what: String, _ cause: String) -> String {
        "\(unreachablePrefix)\(what) did not answer: \(cause)"
    }
    package static let unreachablePrefix = "no access token: "

    /// Sends `request`; a 2xx answer is returned, a 408/429/5xx is transient (`unknown`, retried by the
    /// store), any other refusal `unauthenticated` naming `what`, the server's `error` and `fix`.
    package static func send(_ request: TokenRequest, through transport: any TokenTransport, timeout: Duration,
                             what: String, fix: String? = nil) async throws -> TokenResponse {
        let resp: TokenResponse
        do { resp = try await transport.send(request, timeout: timeout) } catch let e as StorageError {
            if e == .cancelled { throw e }
            // No answer: transient, unless it is a certificate refusal (named by the transport).
            if case .tls = e { throw e }
            throw StorageError.unknown(status: 0, message: unreachable(what, "\(e)"))
        }
        if (200..<300).contains(resp.status) { return resp }
        let reason = refusal(resp)
        if RetryPolicy.isRetryable(status: resp.status) {
            // Transient, so retried under the store's policy (no storage request was sent yet).
            switch resp.status {
            case 429: throw StorageError.quotaExceeded(message: "\(what): \(reason)")
            case 408: throw StorageError.timeout(message: "\(what): \(reason)")
            default: throw StorageError.unknown(status: resp.status, message: "\(what): \(reason)")
            }
        }
        var m = "\(what) refused to issue a token (HTTP \(resp.status)): \(reason)"
        if let fix { m += "; \(fix)" }
        throw StorageError.unauthenticated(message: m)
    }

    /// `error: error_description` of an OAuth error, or the `error.message` of a Google API error,
    /// or the status. Never the request (which may hold secrets).
    package static func refusal(_ resp: TokenResponse) -> String {
        guard let o = resp.json else { return "HTTP \(resp.status)" }
        if let e = o["error"] as? String {
            if let d = o["error_description"] as? String, !d.isEmpty { return "\(e): \(d)" }
            return e
        }
        if let e = o["error"] as? [String: Any], let m = e["message"] as? String { return m }
        return "HTTP \(resp.status)"
    }

    /// Whether the refusal is `invalid_grant` (a revoked or expired refresh token, a disabled account).
    package static func isInvalidGrant(_ error: any Error) -> Bool {
        if case StorageError.unauthenticated(let m)? = error as? StorageError { return m.contains("invalid_grant") }
        return false
    }

    /// `access_token` and `expires_in` (a number or, as some servers send it, a string) of an OAuth answer.
    package static func accessToken(_ resp: TokenResponse, what: String) throws -> FetchedToken {
        guard let o = resp.json, let token = o["access_token"] as? String, !token.isEmpty else {
            throw StorageError.unauthenticated(message: "\(what) answered without an access_token")
        }
        return FetchedToken(value: token, lifetime: lifetime(o["expires_in"]))
    }

    static func lifetime(_ v: Any?) -> Duration? {
        if let n = v as? NSNumber { return .seconds(n.intValue) }
        if let s = v as? String, let n = Int(s) { return .seconds(n) }
        return nil
    }
}
