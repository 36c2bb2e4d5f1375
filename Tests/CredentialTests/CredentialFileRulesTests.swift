import Foundation
import Testing
@testable import GCSStore
import GCSTestServerKit
import Logging
import StorageModel

/// The credential-file rules google-auth has and bucketfs follows (docs/CREDENTIALS.md): who pays
/// (`GOOGLE_CLOUD_QUOTA_PROJECT` over `quota_project_id`), ambiguous or foreign files refused by
/// name, a directory named as one, the fix of a revoked workforce sign-in, and why a 401 that no
/// refresh can cure was final.
@Suite struct CredentialFileRulesTests {
    @Test func quotaProjectFromTheEnvironmentReplacesTheFiles() throws {
        let files = try CredentialFiles()
        var key = CredentialFiles.serviceAccount()
        key["quota_project_id"] = "file-p"
        let path = try files.write("sa.json", key)
        let file = CredentialSource.file(path: path, from: "--key-file")
        let fake = FakeGoogleAuth()
        #expect(StoreTokens.make(file, billingProject: nil, environment: [:], transport: fake).userProjectHeader == "file-p",
                "a service-account key's quota_project_id is honoured, as google-auth reads it")
        let env = [GoogleAuth.quotaProjectVariable: "env-p"]
        #expect(StoreTokens.make(file, billingProject: nil, environment: env, transport: fake).userProjectHeader == "env-p")
        #expect(StoreTokens.make(.metadataServer, billingProject: nil, environment: env, transport: fake).userProjectHeader == "env-p")
        #expect(StoreTokens.make(file, billingProject: "bill-p", environment: env, transport: fake).userProjectHeader == "bill-p")
        #expect(StoreTokens.make(.anonymous, billingProject: nil, environment: env, transport: fake).userProjectHeader == nil)
    }

    @Test func filesThatCannotBeMeantAreRefusedByName() async throws {
        let files = try CredentialFiles()
        let both = try files.write("both.json", ["type": "external_account", "audience": "a", "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                                                 "token_url": FakeGoogleAuth.base + "/sts",
                                                 "credential_source": ["file": "/tmp/x", "url": FakeGoogleAuth.base + "/subject"]])
        let m = await refusal { _ = try CredentialSource.checkFile(both) }
        #expect(m?.contains("both file and url") == true && m?.contains(both) == true, "\(m ?? "")")
        var key = CredentialFiles.serviceAccount()
        key["universe_domain"] = "example-universe.test"
        let foreign = try files.write("foreign.json", key)
        let m2 = await refusal { _ = try CredentialSource.checkFile(foreign) }
        #expect(m2?.contains("example-universe.test") == true && m2?.contains("googleapis.com") == true, "\(m2 ?? "")")
        key["universe_domain"] = "googleapis.com"
        _ = try CredentialSource.checkFile(try files.write("default.json", key))
        let m3 = await refusal { _ = try CredentialSource.checkFile(files.dir.path) }
        #expect(m3 == "\(files.dir.path) is a directory, not a credential file: give the JSON file itself", "\(m3 ?? "")")
    }

    @Test func aRevokedWorkforceSignInNamesItsLoginConfig() async throws {
        let files = try CredentialFiles(), fake = FakeGoogleAuth()
        fake.validRefreshTokens = []
        let path = try files.write("wf.json", ["type": "external_account_authorized_user", "audience": "//iam.googleapis.com/locations/global/workforcePools/wf/providers/p",
                                               "refresh_token": "refresh-1", "token_url": FakeGoogleAuth.base + "/sts",
                                               "client_id": "wf-client", "client_secret": "secret-1"])
        let cache = TokenCache(source: try source(path, fake: fake))
        let m = await refusal { _ = try await cache.token(timeout: .seconds(5)) }
        #expect(m?.contains("gcloud auth application-default login --login-config=") == true, "\(m ?? "")")
        // A user's own sign-in keeps the plain command.
        let user = TokenCache(source: try source(try files.write("u.json", CredentialFiles.user), env: oauthEnv, fake: fake))
        let m2 = await refusal { _ = try await user.token(timeout: .seconds(5)) }
        #expect(m2?.contains("`gcloud auth application-default login`") == true, "\(m2 ?? "")")
    }

    @Test func secretsAndDelegatesAreKnownFromTheFile() throws {
        let files = try CredentialFiles()
        #expect(try CredentialFile.read(try files.write("sa.json", CredentialFiles.serviceAccount())).holdsSecret)
        let wif = try CredentialFile.read(try files.write("wif.json", ["type": "external_account", "audience": "a", "subject_token_type": "t",
                                                                      "token_url": "u", "credential_source": ["file": "/x"]]))
        #expect(!wif.holdsSecret)
        let imp = try CredentialFile.read(try files.write("imp.json", [
            "type": "impersonated_service_account", "source_credentials": CredentialFiles.user,
            "delegates": ["projects/-/serviceAccounts/mid@p.iam.gserviceaccount.com", "other@p.iam.gserviceaccount.com"],
            "service_account_impersonation_url": "https://x/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken"]))
        #expect(imp.holdsSecret && imp.delegates == ["mid@p.iam.gserviceaccount.com", "other@p.iam.gserviceaccount.com"])
    }

    @Test func aFinalRefusalSaysWhyNoRefreshCouldCureIt() async throws {
        let server = try await GCSTestServer.start()
        server.configure { $0.requireToken = true }
        for (credentials, why) in [(CredentialSource.token("expired-or-bogus"), "never refreshed"),
                                   (.anonymous, "no credentials were sent")] {
            let store = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: credentials, logger: Logger(label: "t"),
                                 deadline: .seconds(10), environment: [:])
            let m = await refusal { _ = try await store.list(ListRequest()) }
            #expect(m?.contains("Invalid Credentials") == true && m?.contains(why) == true, "\(m ?? "")")
            try await store.shutdown()
        }
        try await server.stop()
    }
}
