import Foundation
import Testing
@testable import GCSStore
import StorageModel

/// A token endpoint that does not answer is named, with the setting that chose it
/// (docs/CREDENTIALS.md, "When a token endpoint fails"), never blamed on storage's endpoint.
/// `FakeGoogleAuth` refuses the connection of every URL outside its own base.
@Suite struct UnreachableTokenEndpointTests {
    static let down = "http://down.test"

    func failure(_ body: () async throws -> Void) async -> String {
        do { try await body(); return "no error" } catch let e as StorageError {
            if case .unauthenticated(let m) = e { return m }
            if case .unknown(0, let m) = e { return m }
            return "\(e)"
        } catch { return "\(error)" }
    }

    @Test func eachEndpointIsNamedWithWhatChoseIt() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        // authorized_user: BUCKETFS_OAUTH_TOKEN_URL, or Google's own.
        let user = try files.write("user.json", CredentialFiles.user)
        var m = await failure { _ = try await source(user, env: [GoogleAuth.oauthTokenVariable: Self.down + "/token"], fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m.hasPrefix(TokenAnswers.unreachablePrefix) && m.contains(Self.down + "/token") && m.contains("set by BUCKETFS_OAUTH_TOKEN_URL"), "\(m)")
        m = await failure { _ = try await source(user, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m.contains(GoogleAuth.oauthTokenURL) && m.contains("Google's; BUCKETFS_OAUTH_TOKEN_URL moves it"), "\(m)")
        // service_account: its token_uri.
        let key = try files.write("sa.json", CredentialFiles.serviceAccount(tokenURI: Self.down + "/token"))
        m = await failure { _ = try await source(key, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m.contains(Self.down + "/token") && m.contains("token_uri in \(key)"), "\(m)")
        // external_account: STS from token_url; the subject token URL from credential_source.url.
        var wif: [String: Any] = ["type": "external_account", "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/q",
                                  "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": Self.down + "/sts",
                                  "credential_source": ["url": FakeGoogleAuth.base + "/subject"]]
        let sts = try files.write("sts.json", wif)
        m = await failure { _ = try await source(sts, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m.contains("STS") && m.contains(Self.down + "/sts") && m.contains("token_url in \(sts)"), "\(m)")
        wif["credential_source"] = ["url": Self.down + "/subject"]
        let subject = try files.write("subject.json", wif)
        m = await failure { _ = try await source(subject, fake: fake).fetch(timeout: .seconds(5)) }
        #expect(m.contains(Self.down + "/subject") && m.contains("credential_source.url in \(subject)"), "\(m)")
        // Impersonation: IAM Credentials at BUCKETFS_IAM_CREDENTIALS_URL.
        let imp = try files.write("imp.json", ["type": "impersonated_service_account", "source_credentials": CredentialFiles.user,
                                               "service_account_impersonation_url": "https://x/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken"])
        m = await failure {
            _ = try await source(imp, env: [GoogleAuth.oauthTokenVariable: FakeGoogleAuth.base + "/token",
                                            GoogleAuth.iamCredentialsVariable: Self.down + "/v1"], fake: fake).fetch(timeout: .seconds(5))
        }
        #expect(m.contains("IAM Credentials") && m.contains(Self.down + "/v1/") && m.contains("set by BUCKETFS_IAM_CREDENTIALS_URL"), "\(m)")
        // The metadata server: GCE_METADATA_HOST.
        m = await failure { _ = try await MetadataServerSource(environment: ["GCE_METADATA_HOST": "down.test"], transport: fake).fetch(timeout: .seconds(5)) }
        #expect(m.contains("down.test") && m.contains("set by GCE_METADATA_HOST"), "\(m)")
        // --token-url.
        m = await failure { _ = try await TokenURLSource(url: Self.down + "/t", transport: fake).fetch(timeout: .seconds(5)) }
        #expect(m.contains(Self.down + "/t") && m.contains("--token-url"), "\(m)")
    }
}
