import Foundation
import GCSStore
import StorageModel
import Testing

/// A static `--token`'s time left, as Google's tokeninfo endpoint answers (docs/CREDENTIALS.md,
/// "The chain"): its answer read as Google writes it, the token sent in a form body, and where to
/// ask.
@Suite struct TokenInfoTests {
    /// Records what it is sent and answers with `answer`.
    final class OneAnswer: TokenTransport, @unchecked Sendable {
        let answer: Result<TokenResponse, StorageError>
        var sent: [TokenRequest] = []
        init(_ answer: Result<TokenResponse, StorageError>) { self.answer = answer }
        func send(_ request: TokenRequest, timeout: Duration) async throws -> TokenResponse {
            sent.append(request)
            return try answer.get()
        }
    }

    static func json(_ status: Int, _ o: [String: Any]) -> TokenResponse {
        TokenResponse(status: status, body: try! JSONSerialization.data(withJSONObject: o))
    }

    @Test func googlesAnswerGivesTheTimeLeftAndTheAccount() async {
        // As Google answers: every value a string.
        let t = OneAnswer(.success(Self.json(200, ["azp": "x", "aud": "x", "scope": "s", "exp": "1795000000",
                                                   "expires_in": "2519", "email": "a@p.iam.gserviceaccount.com",
                                                   "email_verified": "true", "access_type": "online"])))
        let answer = await TokenInfo.ask("ya29.secret", url: "http://info.test/tokeninfo", through: t, timeout: .seconds(3))
        #expect(answer == .valid(TokenInfo(expiresIn: 2519, email: "a@p.iam.gserviceaccount.com")))
        #expect(t.sent.count == 1)
        #expect(t.sent.first?.method == "POST" && t.sent.first?.url == "http://info.test/tokeninfo", "the token never in the URL")
        #expect(t.sent.first?.body == Data("access_token=ya29.secret".utf8))
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        #expect(TokenInfo(expiresIn: 2519, email: nil).timeLeft(now: now) == "expires in 41 min (at 2026-11-18T11:48:39Z)")
        #expect(TokenInfo(expiresIn: 90, email: nil).timeLeft(now: now).hasPrefix("expires in 90 s"))
    }

    @Test func aNumberForExpiresInIsReadToo() {
        #expect(TokenInfo.read(Self.json(200, ["expires_in": 600])) == .valid(TokenInfo(expiresIn: 600, email: nil)))
        #expect(TokenInfo.read(Self.json(200, ["scope": "s"])) == .unknown("the answer has no expires_in"))
    }

    @Test func anExpiredOrUnknownTokenIsNotValid() {
        #expect(TokenInfo.read(Self.json(400, ["error_description": "Invalid Value"])) == .invalid("Invalid Value"))
        #expect(TokenInfo.read(Self.json(400, ["error": "invalid_token"])) == .invalid("invalid_token"))
        #expect(TokenInfo.read(TokenResponse(status: 503, body: Data())) == .unknown("HTTP 503"))
    }

    @Test func noAnswerIsUnknownNotAFailure() async {
        let t = OneAnswer(.failure(.timeout(message: "no answer within 3 s")))
        guard case .unknown(let why) = await TokenInfo.ask("t", url: "http://info.test/tokeninfo", through: t, timeout: .seconds(3)) else {
            Issue.record("not unknown")
            return
        }
        #expect(why.contains("http://info.test/tokeninfo did not answer"))
    }

    @Test func googleIsAskedOnlyWhenTheRequestsGoToGoogle() {
        #expect(TokenInfo.url(environment: [:], storageEndpointIsGoogle: true) == TokenInfo.googleURL)
        #expect(TokenInfo.url(environment: [:], storageEndpointIsGoogle: false) == nil, "an emulator's token is not Google's business")
        #expect(TokenInfo.url(environment: ["BUCKETFS_TOKENINFO_URL": "http://x/i"], storageEndpointIsGoogle: false) == "http://x/i")
        #expect(TokenInfo.url(environment: ["BUCKETFS_TOKENINFO_URL": ""], storageEndpointIsGoogle: false) == nil)
    }
}
