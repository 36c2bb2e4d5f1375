import Foundation
import Testing
import Crypto
import _CryptoExtras
@testable import GCSStore
import StorageModel
import TestSupport

/// Writes credential files to a directory of their own.
final class CredentialFiles {
    let dir: URL
    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("creds-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: dir) }

    func write(_ name: String, _ object: [String: Any]) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]).write(to: URL(fileURLWithPath: path))
        return path
    }

    func writeText(_ name: String, _ text: String, executable: Bool = false) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        if executable { try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path) }
        return path
    }

    nonisolated(unsafe) static let rsaKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    static func serviceAccount(tokenURI: String? = FakeGoogleAuth.base + "/token") -> [String: Any] {
        var o: [String: Any] = ["type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com", "private_key_id": "k1",
                                "private_key": rsaKey.pkcs8PEMRepresentation, "project_id": "p"]
        if let tokenURI { o["token_uri"] = tokenURI }
        return o
    }

    static var user: [String: Any] { ["type": "authorized_user", "client_id": "cid.apps", "client_secret": "secret-1",
                                      "refresh_token": "refresh-1", "quota_project_id": "quota-p",
                                      "token_uri": "http://evil.test/steal"] }
}

func source(_ path: String, env: [String: String] = [:], fake: FakeGoogleAuth, scope: String = GoogleAuth.storageScope) throws -> any AccessTokenSource {
    try CredentialFile.read(path).source(scope: scope, environment: env, transport: fake, clock: .real)
}

func refusal(_ body: () async throws -> Void) async -> String? {
    do { try await body(); return nil } catch let e as StorageError {
        if case .unauthenticated(let m) = e { return m }
        return "\(e)"
    } catch { return "\(error)" }
}

let oauthEnv = [GoogleAuth.oauthTokenVariable: FakeGoogleAuth.base + "/token"]

@Suite struct CredentialFileTests {
    @Test func serviceAccountSignsAJWTForItsTokenURI() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        let path = try files.write("sa.json", CredentialFiles.serviceAccount())
        let t = try await source(path, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "sa-token-1" && t.lifetime == .seconds(3600))
        let r = try #require(fake.recorded.first)
        #expect(fake.recorded.count == 1 && r.url == FakeGoogleAuth.base + "/token" && r.method == "POST")
        #expect(FakeGoogleAuth.header(r, "Content-Type") == "application/x-www-form-urlencoded")
        #expect(FakeGoogleAuth.header(r, "Authorization") == nil)
        let f = FakeGoogleAuth.form(r)
        #expect(f["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer")
        let claims = try #require(f["assertion"]?.split(separator: ".").dropFirst().first)
        var b64 = claims.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        let c = try #require(try JSONSerialization.jsonObject(with: Data(base64Encoded: b64)!) as? [String: Any])
        #expect(c["iss"] as? String == "sa@p.iam.gserviceaccount.com" && c["aud"] as? String == GoogleAuth.oauthTokenURL,
                "the audience is Google's endpoint, as google-auth signs it")
        #expect(String(decoding: r.body!, as: UTF8.self).hasPrefix("assertion="))
        #expect(c["scope"] as? String == GoogleAuth.storageScope)
        // Without token_uri: Google's endpoint, or BUCKETFS_OAUTH_TOKEN_URL.
        let bare = try files.write("bare.json", CredentialFiles.serviceAccount(tokenURI: nil))
        _ = try await source(bare, env: oauthEnv, fake: fake).fetch(timeout: .seconds(5))
        #expect(fake.recorded.last?.url == FakeGoogleAuth.base + "/token")
        let defaultURL = try #require(try source(bare, fake: fake) as? ServiceAccountSource).tokenURI
        #expect(defaultURL == GoogleAuth.oauthTokenURL)
    }

    @Test func authorizedUserRefreshesAtGooglesEndpointNeverTheFilesTokenURI() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        let path = try files.write("adc.json", CredentialFiles.user)
        #expect(try #require(try source(path, fake: fake) as? AuthorizedUserSource).tokenURL == GoogleAuth.oauthTokenURL,
                "the file's token_uri is ignored")
        let t = try await source(path, env: oauthEnv, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "user-token-1")
        let r = try #require(fake.recorded.first)
        #expect(r.url == FakeGoogleAuth.base + "/token")
        #expect(String(decoding: r.body!, as: UTF8.self) == "grant_type=refresh_token&client_id=cid.apps&client_secret=secret-1&refresh_token=refresh-1&scope=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fdevstorage.full_control")
        #expect(try CredentialFile.read(path).quotaProject == "quota-p")
        // Revoked: refused by name with the command that fixes it, through the cache as a store uses it.
        fake.validRefreshTokens = []
        let cache = TokenCache(source: try source(path, env: oauthEnv, fake: fake))
        let m = await refusal { _ = try await cache.token(timeout: .seconds(5)) }
        #expect(m?.contains("invalid_grant") == true && m?.contains("gcloud auth application-default login") == true, "\(m ?? "")")
        #expect(m?.contains("refresh-1") == false && m?.contains("secret-1") == false)
    }

    @Test func impersonatedServiceAccountFileUsesItsSourceThenIAM() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        var user = CredentialFiles.user
        user["quota_project_id"] = nil
        let path = try files.write("imp.json", [
            "type": "impersonated_service_account", "source_credentials": user, "delegates": ["projects/-/serviceAccounts/mid@p.iam.gserviceaccount.com"],
            "service_account_impersonation_url": FakeGoogleAuth.base + "/v1/projects/-/serviceAccounts/target@p.iam.gserviceaccount.com:generateAccessToken",
            "quota_project_id": "q2",
        ])
        let file = try CredentialFile.read(path)
        #expect(file.principal == "target@p.iam.gserviceaccount.com" && file.typeChain == "authorized_user → impersonated_service_account")
        // The file's URL names the target; the token comes from IAM Credentials (moved by its variable), as google-auth asks it.
        let env = oauthEnv.merging([GoogleAuth.iamCredentialsVariable: FakeGoogleAuth.base + "/v1"]) { $1 }
        let t = try await source(path, env: env, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "iam-token-2")
        #expect(fake.recorded.map(\.url) == [FakeGoogleAuth.base + "/token", file.object["service_account_impersonation_url"] as! String])
        #expect(FakeGoogleAuth.form(fake.recorded[0])["scope"] == nil, "a user's grant keeps its own scopes")
        let iam = fake.recorded[1]
        #expect(FakeGoogleAuth.header(iam, "Authorization") == "Bearer user-token-1")
        #expect(FakeGoogleAuth.header(iam, "Content-Type") == "application/json")
        let body = try #require(try JSONSerialization.jsonObject(with: iam.body!) as? [String: Any])
        #expect(body["delegates"] as? [String] == ["projects/-/serviceAccounts/mid@p.iam.gserviceaccount.com"])
        #expect(body["scope"] as? [String] == [GoogleAuth.storageScope] && body["lifetime"] as? String == "3600s")
        #expect(t.lifetime! > .seconds(3590) && t.lifetime! <= .seconds(3600))
    }

    func externalAccount(_ source: [String: Any], impersonate: Bool = false, extra: [String: Any] = [:]) -> [String: Any] {
        var o: [String: Any] = ["type": "external_account", "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov",
                                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": FakeGoogleAuth.base + "/sts",
                                "credential_source": source]
        if impersonate {
            o["service_account_impersonation_url"] = FakeGoogleAuth.base + "/v1/projects/-/serviceAccounts/wif@p.iam.gserviceaccount.com:generateAccessToken"
        }
        return o.merging(extra) { $1 }
    }

    @Test func externalAccountFileSourceExchangesAtSTS() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        let subject = try files.writeText("subject.txt", "subject-1")
        let path = try files.write("wif.json", externalAccount(["file": subject]))
        let t = try await source(path, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "sts-token-1")
        let r = try #require(fake.recorded.first)
        #expect(r.url == FakeGoogleAuth.base + "/sts" && FakeGoogleAuth.header(r, "Authorization") == nil)
        let body = String(decoding: r.body!, as: UTF8.self)
        #expect(body.hasPrefix("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange&audience=%2F%2Fiam.googleapis.com%2Fprojects%2F1"))
        let f = FakeGoogleAuth.form(r)
        #expect(f["scope"] == GoogleAuth.storageScope && f["subject_token"] == "subject-1")
        #expect(f["subject_token_type"] == "urn:ietf:params:oauth:token-type:jwt")
        // JSON format, with impersonation: STS for IAM's scope, then generateAccessToken with the STS token.
        fake.reset()
        let json = try files.writeText("subject.json", #"{"id_token": "subject-1", "other": 1}"#)
        let imp = try files.write("wif-imp.json", externalAccount(["file": json, "format": ["type": "json", "subject_token_field_name": "id_token"]],
                                                                 impersonate: true))
        let t2 = try await source(imp, fake: fake).fetch(timeout: .seconds(5))
        #expect(t2.value == "iam-token-3")
        #expect(fake.recorded.count == 2 && FakeGoogleAuth.form(fake.recorded[0])["scope"] == GoogleAuth.iamScope)
        #expect(FakeGoogleAuth.header(fake.recorded[1], "Authorization") == "Bearer sts-token-2")
        #expect(try CredentialFile.read(imp).principal == "wif@p.iam.gserviceaccount.com")
        // STS refuses: by name, within the call.
        fake.stsStatus = 400
        let m = await refusal { _ = try await source(path, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m?.contains("token exchange (STS)") == true && m?.contains("HTTP 400") == true && m?.contains("subject-1") == false, "\(m ?? "")")
    }

    @Test func externalAccountURLSourceSendsItsHeaders() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        fake.subjectBody = #"{"access_token": "subject-1"}"#
        let path = try files.write("wif-url.json", externalAccount([
            "url": FakeGoogleAuth.base + "/subject", "headers": ["Metadata": "True"],
            "format": ["type": "json", "subject_token_field_name": "access_token"]]))
        let t = try await source(path, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "sts-token-1")
        #expect(fake.recorded.map(\.url) == [FakeGoogleAuth.base + "/subject", FakeGoogleAuth.base + "/sts"])
        #expect(fake.recorded[0].method == "GET" && FakeGoogleAuth.header(fake.recorded[0], "Metadata") == "True")
    }

    @Test func externalAccountExecutableRunsOnlyWhenAllowedAndWithinItsTimeout() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        let later = Int(Date().timeIntervalSince1970) + 3600
        let script = try files.writeText("exe.sh", """
            #!/bin/sh
            [ "$GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE" = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov" ] || exit 3
            echo run >> "\(files.dir.path)/runs"
            echo '{"version": 1, "success": true, "token_type": "urn:ietf:params:oauth:token-type:jwt", "id_token": "subject-1", "expiration_time": \(later)}'
            """, executable: true)
        let path = try files.write("wif-exe.json", externalAccount(["executable": ["command": "\(script) --flag", "timeout_millis": 5000]]))
        let notAllowed = await refusal { _ = try await source(path, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(notAllowed?.contains("GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1") == true, "\(notAllowed ?? "")")
        #expect(fake.recorded.isEmpty)
        let allow = ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
        let t = try await source(path, env: allow, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "sts-token-1" && FakeGoogleAuth.form(fake.recorded[0])["subject_token"] == "subject-1")
        // With an output_file holding an unexpired answer, the program is not run.
        let cached = try files.writeText("cache.json", #"{"version": 1, "success": true, "token_type": "urn:ietf:params:oauth:token-type:jwt", "id_token": "subject-1", "expiration_time": \#(later)}"#)
        let withCache = try files.write("wif-exe2.json", externalAccount(["executable": ["command": script, "output_file": cached]]))
        _ = try await source(withCache, env: allow, fake: fake).fetch(timeout: .seconds(5))
        let runs = try String(contentsOfFile: files.dir.path + "/runs", encoding: .utf8)
        #expect(runs == "run\n", "the cached answer was used")
        // A program that does not answer is killed at its timeout, and the refusal names it.
        let slow = try files.writeText("slow.sh", "#!/bin/sh\nsleep 60\n", executable: true)
        let stuck = try files.write("wif-slow.json", externalAccount(["executable": ["command": slow, "timeout_millis": 5000]]))
        let start = ContinuousClock.now
        let m = await refusal { _ = try await source(stuck, env: allow, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(ContinuousClock.now - start < .seconds(10))
        #expect(m?.contains("slow.sh") == true && m?.contains("timeout_millis") == true, "\(m ?? "")")
        // An unsuccessful answer: its code and message, never the output as a whole.
        let no = try files.writeText("no.sh", #"#!/bin/sh\#necho '{"version": 1, "success": false, "code": "401", "message": "not signed in"}'\#n"#, executable: true)
        let refused = try files.write("wif-no.json", externalAccount(["executable": ["command": no]]))
        let m2 = await refusal { _ = try await source(refused, env: allow, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m2?.contains("not signed in") == true, "\(m2 ?? "")")
    }

    @Test func externalAccountAuthorizedUserUsesBasicClientAuth() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        let path = try files.write("wf.json", ["type": "external_account_authorized_user", "audience": "//iam.googleapis.com/locations/global/workforcePools/wf/providers/p",
                                               "refresh_token": "refresh-1", "token_url": FakeGoogleAuth.base + "/sts",
                                               "client_id": "wf-client", "client_secret": "secret-1"])
        let t = try await source(path, fake: fake).fetch(timeout: .seconds(5))
        #expect(t.value == "wf-token-1")
        let r = fake.recorded[0]
        #expect(String(decoding: r.body!, as: UTF8.self) == "grant_type=refresh_token&refresh_token=refresh-1")
        #expect(FakeGoogleAuth.header(r, "Authorization") == "Basic " + Data("wf-client:secret-1".utf8).base64EncodedString())
    }

    @Test func badFilesAreRefusedByName() async throws {
        let files = try CredentialFiles()
        let unknown = try files.write("u.json", ["type": "gdch_service_account", "x": 1])
        #expect(throws: StorageError.self) { try CredentialFile.read(unknown) }
        let m = await refusal { _ = try CredentialFile.read(unknown) }
        #expect(m?.contains("\"gdch_service_account\"") == true && m?.contains("does not know") == true, "\(m ?? "")")
        let malformed = try files.writeText("m.json", "{\"type\": \"authorized_user\",")
        let m2 = await refusal { _ = try CredentialSource.checkFile(malformed) }
        #expect(m2?.contains("not a JSON object") == true && m2?.contains(malformed) == true, "\(m2 ?? "")")
        let noType = try files.write("n.json", ["client_email": "a@b"])
        #expect(await refusal { _ = try CredentialSource.checkFile(noType) }?.contains("has no \"type\"") == true)
        var missing = CredentialFiles.user
        missing["refresh_token"] = nil
        let m3 = await refusal { _ = try CredentialSource.checkFile(try files.write("x.json", missing)) }
        #expect(m3?.contains("refresh_token") == true && m3?.contains("secret-1") == false, "\(m3 ?? "")")
        let m4 = await refusal { _ = try CredentialSource.checkFile(files.dir.path + "/absent.json") }
        #expect(m4?.contains("cannot read") == true)
    }

    @Test func metadataServerAndTokenURL() async throws {
        let fake = FakeGoogleAuth()
        let gce = MetadataServerSource(environment: ["GCE_METADATA_HOST": "auth.test"], transport: fake)
        #expect(try await gce.fetch(timeout: .seconds(5)).value == "gce-token-1")
        let url = TokenURLSource(url: FakeGoogleAuth.base + "/token-url", transport: fake)
        #expect(try await url.fetch(timeout: .seconds(5)).value == "url-token-2")
        #expect(TokenURLSource.clientURL("unix:/run/t.sock") == "http+unix://%2Frun%2Ft.sock/")
        #expect(TokenURLSource.clientURL("http://127.0.0.1:1/t") == "http://127.0.0.1:1/t")
        // gcsfuse's spelling, as the CSI driver's config file gives it.
        #expect(TokenURLSource.clientURL("unix:///gcsfuse-tmp/.volumes/v/token.sock") == "http+unix://%2Fgcsfuse-tmp%2F.volumes%2Fv%2Ftoken.sock/")
    }

    @Test("a token URL on a unix socket is asked with a Host (Go's net/http refuses a request without one)")
    func tokenURLOverAUnixSocketNamesItsHost() {
        let unix = TokenURLSource(url: "unix:/run/t.sock", transport: FakeGoogleAuth())
        #expect(unix.request.headers.contains { $0.0 == "Host" && $0.1 == "localhost" })
        let tcp = TokenURLSource(url: "http://127.0.0.1:1/t", transport: FakeGoogleAuth())
        #expect(!tcp.request.headers.contains { $0.0 == "Host" })
    }

    @Test("an oauth2 expiry (RFC 3339, nanoseconds as Go writes it) is the token's lifetime")
    func expiryAsGoWritesIt() throws {
        let now = try #require(ISO8601DateFormatter().date(from: "2026-08-21T12:45:12Z"))
        #expect(TokenURLSource.lifetime(untilExpiry: "2026-08-21T13:45:12.123456789Z", now: now) == .milliseconds(3_600_123))
        #expect(TokenURLSource.lifetime(untilExpiry: "2026-08-21T13:45:12Z", now: now) == .seconds(3600))
        #expect(TokenURLSource.lifetime(untilExpiry: "2026-08-21T13:45:12.5+01:00", now: now) == .milliseconds(500))
        #expect(TokenURLSource.lifetime(untilExpiry: "2026-08-21T11:00:00Z", now: now) == .zero)
        #expect(TokenURLSource.lifetime(untilExpiry: "tomorrow", now: now) == nil)
    }

    @Test("a token URL's expiry counts from the store's clock")
    func tokenURLExpiryOnTheClock() async throws {
        struct Expiring: TokenTransport {
            func send(_ request: TokenRequest, timeout: Duration) async throws -> TokenResponse {
                TokenResponse(status: 200, body: Data(#"{"access_token": "t", "expiry": "2026-08-21T13:45:12Z"}"#.utf8))
            }
        }
        let clock = ManualClock(date: try #require(ISO8601DateFormatter().date(from: "2026-08-21T12:45:12Z")))
        let source = TokenURLSource(url: "http://127.0.0.1:1/t", transport: Expiring(), clock: clock.clock)
        #expect(try await source.fetch(timeout: .seconds(5)).lifetime == .seconds(3600))
        clock.advance(by: .seconds(600))
        #expect(try await source.fetch(timeout: .seconds(5)).lifetime == .seconds(3000))
    }

    @Test func commandLineImpersonationUsesGcloudsOrderAndIAMVariable() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        let path = try files.write("sa.json", CredentialFiles.serviceAccount())
        let env = [GoogleAuth.iamCredentialsVariable: FakeGoogleAuth.base + "/v1"]
        let tokens = StoreTokens.make(.impersonated(.file(path: path, from: "--key-file"), chain: ["d1@p.iam.gserviceaccount.com", "target@p.iam.gserviceaccount.com"]),
                                      billingProject: "bill-p", environment: env, transport: fake)
        let cache = try #require(tokens.cache)
        #expect(try await cache.token(timeout: .seconds(5)) == "iam-token-2")
        #expect(fake.recorded[1].url == FakeGoogleAuth.base + "/v1/projects/-/serviceAccounts/target@p.iam.gserviceaccount.com:generateAccessToken")
        let body = try #require(try JSONSerialization.jsonObject(with: fake.recorded[1].body!) as? [String: Any])
        #expect(body["delegates"] as? [String] == ["projects/-/serviceAccounts/d1@p.iam.gserviceaccount.com"])
        #expect(FakeGoogleAuth.form(fake.recorded[0])["assertion"].map { $0.count > 100 } == true)
        #expect(tokens.userProjectHeader == "bill-p" && tokens.userProjectParameter == "bill-p")
        // The file's quota project, as the header only.
        let user = try files.write("adc.json", CredentialFiles.user)
        let t2 = StoreTokens.make(.file(path: user, from: "gcloud"), billingProject: nil, environment: oauthEnv, transport: fake)
        #expect(t2.userProjectHeader == "quota-p" && t2.userProjectParameter == nil)
    }
}
