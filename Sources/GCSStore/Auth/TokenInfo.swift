import Foundation
import StorageModel

/// What Google's tokeninfo endpoint says of a static access token (`--token`,
/// docs/CREDENTIALS.md, "A static token"): how long it has left, and whose it is. Asked once, at
/// mount and by `whoami`, so that a token about to expire is named before it fails requests.
///
/// The token goes in a form body (POST), never in a URL that a proxy could log.
package struct TokenInfo: Sendable, Equatable {
    /// Seconds the token has left, as the endpoint said.
    package var expiresIn: Int
    /// The account the token was minted for, when its scopes let the endpoint say.
    package var email: String?

    package init(expiresIn: Int, email: String?) {
        self.expiresIn = expiresIn
        self.email = email
    }

    package static let googleURL = "https://oauth2.googleapis.com/tokeninfo"

    /// Where to ask: `BUCKETFS_TOKENINFO_URL` when set (tests, air-gapped endpoints), else Google's
    /// own endpoint, but only when the requests go to Google: a token for an emulator or another
    /// endpoint is nobody's business at Google.
    package static func url(environment: [String: String], storageEndpointIsGoogle: Bool) -> String? {
        if let u = environment["BUCKETFS_TOKENINFO_URL"], !u.isEmpty { return u }
        return storageEndpointIsGoogle ? googleURL : nil
    }

    /// What the endpoint's answer says: the token's time left, or why there is none.
    package enum Answer: Sendable, Equatable {
        case valid(TokenInfo)
        /// The endpoint says the token is not valid (expired, revoked, or never one).
        case invalid(String)
        /// No answer that says either (unreachable, timed out, not JSON).
        case unknown(String)
    }

    package static func ask(_ token: String, url: String, through transport: any TokenTransport, timeout: Duration) async -> Answer {
        let request = TokenRequest.form(url, [("access_token", token)])
        let response: TokenResponse
        do { response = try await transport.send(request, timeout: timeout) } catch {
            return .unknown("\(url) did not answer: \(error)")
        }
        return read(response)
    }

    /// Reads an answer: `expires_in` as a string (Google's) or a number; a 400 with
    /// `error_description` (Google's "Invalid Value") means the token is not valid.
    package static func read(_ response: TokenResponse) -> Answer {
        let json = response.json
        if response.status == 200, let json {
            let left = (json["expires_in"] as? String).flatMap { Int($0) } ?? (json["expires_in"] as? NSNumber)?.intValue
            guard let left else { return .unknown("the answer has no expires_in") }
            return .valid(TokenInfo(expiresIn: left, email: json["email"] as? String))
        }
        if response.status == 400 || response.status == 401 {
            let why = (json?["error_description"] as? String) ?? (json?["error"] as? String) ?? "HTTP \(response.status)"
            return .invalid(why)
        }
        return .unknown("HTTP \(response.status)")
    }

    /// "expires in 42 min (at 2026-11-28T17:00:00Z)", for the mount's log and `whoami`.
    package func timeLeft(now: Date) -> String {
        let at = ISO8601DateFormatter().string(from: now.addingTimeInterval(Double(expiresIn)))
        let left = expiresIn >= 120 ? "\(expiresIn / 60) min" : "\(expiresIn) s"
        return "expires in \(left) (at \(at))"
    }
}
