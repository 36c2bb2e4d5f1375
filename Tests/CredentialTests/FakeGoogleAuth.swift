import Foundation
import GCSStore
import StorageModel

/// Google's token endpoints, in process, as a `TokenTransport` (no sockets): the OAuth token
/// endpoint (`/token`: the refresh_token and JWT-bearer grants), STS (`/sts`: token exchange, and
/// the refresh_token grant of workforce sign-ins), IAM Credentials (`…:generateAccessToken`, which
/// needs a live token it minted), a subject-token URL (`/subject`), a token URL (`/token-url`) and
/// the metadata server. Every request is recorded; every token minted lives `lifetime` seconds.
/// As strict as the real ones where bucketfs depends on it: unknown grants, missing fields, a
/// revoked refresh token and a wrong client secret are refused as Google refuses them.
final class FakeGoogleAuth: TokenTransport, @unchecked Sendable {
    private let lock = NSLock()
    private var _recorded: [TokenRequest] = []
    private var minted: [String: Date] = [:]
    private var counter = 0
    var lifetime = 3600
    var validRefreshTokens: Set<String> = ["refresh-1"]
    var clientSecret = "secret-1"
    var subjectTokens: Set<String> = ["subject-1"]
    var stsStatus: Int? = nil
    var subjectBody = "subject-1"
    /// Answers 503 to the next N requests.
    var failNext = 0

    static let base = "http://auth.test"

    var recorded: [TokenRequest] { lock.withLock { _recorded } }
    func reset() { lock.withLock { _recorded = [] } }
    func isLive(_ token: String) -> Bool { lock.withLock { (minted[token] ?? .distantPast) > Date() } }

    private func mint(_ prefix: String) -> String {
        counter += 1
        let t = "\(prefix)-token-\(counter)"
        minted[t] = Date().addingTimeInterval(TimeInterval(lifetime))
        return t
    }

    private func json(_ status: Int, _ o: [String: Any]) -> TokenResponse {
        TokenResponse(status: status, body: try! JSONSerialization.data(withJSONObject: o))
    }

    static func form(_ r: TokenRequest) -> [String: String] {
        var out: [String: String] = [:]
        for pair in String(decoding: r.body ?? Data(), as: UTF8.self).split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1).map { String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0) }
            out[kv[0]] = kv.count > 1 ? kv[1] : ""
        }
        return out
    }

    static func header(_ r: TokenRequest, _ name: String) -> String? {
        r.headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    func send(_ r: TokenRequest, timeout: Duration) async throws -> TokenResponse {
        try lock.withLock {
            _recorded.append(r)
            if failNext > 0 { failNext -= 1; return json(503, ["error": "unavailable"]) }
            guard r.url.hasPrefix(Self.base) else { throw StorageError.unknown(status: 0, message: "connection refused") }
            let path = String(r.url.dropFirst(Self.base.count))
            let f = Self.form(r)
            switch (r.method, path) {
            case ("POST", "/token"):
                guard Self.header(r, "Content-Type") == "application/x-www-form-urlencoded" else { return json(400, ["error": "invalid_request"]) }
                switch f["grant_type"] {
                case "refresh_token":
                    guard f["client_id"] != nil, f["client_secret"] == clientSecret else { return json(401, ["error": "invalid_client"]) }
                    guard let rt = f["refresh_token"], validRefreshTokens.contains(rt) else {
                        return json(400, ["error": "invalid_grant", "error_description": "Token has been expired or revoked."])
                    }
                    return json(200, ["access_token": mint("user"), "expires_in": lifetime, "token_type": "Bearer"])
                case "urn:ietf:params:oauth:grant-type:jwt-bearer":
                    guard let a = f["assertion"], a.split(separator: ".").count == 3 else { return json(400, ["error": "invalid_grant"]) }
                    return json(200, ["access_token": mint("sa"), "expires_in": lifetime, "token_type": "Bearer"])
                default:
                    return json(400, ["error": "unsupported_grant_type"])
                }
            case ("POST", "/sts"):
                if let s = stsStatus { return json(s, ["error": "invalid_request", "error_description": "The audience does not match"]) }
                if f["grant_type"] == "refresh_token" {
                    guard Self.header(r, "Authorization") == "Basic " + Data("wf-client:\(clientSecret)".utf8).base64EncodedString() else {
                        return json(401, ["error": "invalid_client"])
                    }
                    guard let rt = f["refresh_token"], validRefreshTokens.contains(rt) else { return json(400, ["error": "invalid_grant"]) }
                    return json(200, ["access_token": mint("wf"), "expires_in": lifetime])
                }
                guard f["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange", f["audience"] != nil,
                      f["requested_token_type"] == "urn:ietf:params:oauth:token-type:access_token",
                      let s = f["subject_token"], subjectTokens.contains(s) else {
                    return json(400, ["error": "invalid_grant", "error_description": "subject token refused"])
                }
                return json(200, ["access_token": mint("sts"), "expires_in": lifetime, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer"])
            case ("POST", let p) where p.hasSuffix(":generateAccessToken"):
                guard let auth = Self.header(r, "Authorization"), auth.hasPrefix("Bearer "),
                      (minted[String(auth.dropFirst(7))] ?? .distantPast) > Date() else {
                    return json(401, ["error": ["code": 401, "message": "Request had invalid authentication credentials."]])
                }
                let expire = Date().addingTimeInterval(TimeInterval(lifetime))
                let f = ISO8601DateFormatter()
                return json(200, ["accessToken": mint("iam"), "expireTime": f.string(from: expire)])
            case ("GET", "/subject"):
                return TokenResponse(status: 200, body: Data(subjectBody.utf8))
            case ("GET", "/token-url"):
                return json(200, ["access_token": mint("url"), "expires_in": lifetime])
            case ("GET", "/computeMetadata/v1/instance/service-accounts/default/token"):
                guard Self.header(r, "Metadata-Flavor") == "Google" else { return json(403, ["error": "missing Metadata-Flavor"]) }
                return json(200, ["access_token": mint("gce"), "expires_in": lifetime, "token_type": "Bearer"])
            default:
                return json(404, ["error": "not_found"])
            }
        }
    }
}
