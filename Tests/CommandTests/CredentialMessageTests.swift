import Foundation
import GCSStore
import Logging
import StorageModel
import TestSupport
import Testing
@testable import bucketfs

/// What the command line says when a credential fails (docs/CREDENTIALS.md): the token endpoint
/// that did not answer is named with the setting that chose it, not storage's endpoint.
@Suite struct CredentialMessageTests {
    let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    /// A user sign-in file (gcloud's `authorized_user`) in a directory of its own: (directory, file).
    static func userCredentialFile(_ tag: String) throws -> (String, String) {
        let dir = NSTemporaryDirectory() + "bucketfs-\(tag)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/adc.json"
        try Data(#"{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        return (dir, path)
    }

    @Test func anUnreachableTokenEndpointIsNamedNotStorage() async throws {
        let (dir, path) = try Self.userCredentialFile("tokendown")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tokenURL = "http://127.0.0.1:\(TestSupport.deadPort())/token"
        let storage = "http://127.0.0.1:\(TestSupport.deadPort())"
        let store = GCSStore(bucket: "b", endpoint: URL(string: storage), credentials: .file(path: path, from: "--key-file"), logger: quiet,
                             deadline: .seconds(10), environment: [GoogleAuth.oauthTokenVariable: tokenURL])
        defer { Task { try? await store.shutdown() } }
        do {
            try await store.probe(timeout: SourceCheck.probeTimeout)
            Issue.record("probed through a dead token endpoint")
        } catch {
            let m = SourceCheck.explain(error, bucket: "b", endpoint: storage, identity: "someone").description
            #expect(m.hasPrefix("cannot get an access token: the OAuth token endpoint \(tokenURL)"), "\(m)")
            #expect(m.contains("set by BUCKETFS_OAUTH_TOKEN_URL") && !m.contains("STORAGE_EMULATOR_HOST") && !m.contains("cannot reach \(storage)"), "\(m)")
        }
    }

    @Test func attemptsThatAllWaitedForATokenAreTheCredentialsFailure() {
        let e = StorageError.retryLimitExceeded(message: "list gs://b: gave up after 3 attempts within the deadline: timed out: "
            + "the credential gave no access token within 1.5 seconds")
        let m = SourceCheck.explain(e, bucket: "b", endpoint: "http://storage", identity: "someone").description
        #expect(m.hasPrefix("timed out: the credential gave no access token within 1.5 seconds (someone)"), "\(m)")
        #expect(!m.contains("cannot reach"), "\(m)")
    }

    @Test func aKeyFileOthersCanReadIsWarnedOf() throws {
        let (dir, path) = try Self.userCredentialFile("keymode")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        let w = CredentialCheck.readableByOthers(path)
        #expect(w?.contains("mode 644") == true && w?.contains("chmod 600 \(path)") == true, "\(w ?? "")")
        let check = try CredentialCheck.resolve(try GCSOptions.parse(["--key-file", path]), environment: [:])
        #expect(check.warnings == [w!])
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(CredentialCheck.readableByOthers(path) == nil)
        // An external account's file holds no secret: nothing to warn of.
        let wif = dir + "/wif.json"
        try Data(#"{"type": "external_account", "audience": "a", "subject_token_type": "t", "token_url": "http://x/sts", "credential_source": {"file": "/x"}}"#.utf8)
            .write(to: URL(fileURLWithPath: wif))
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: wif)
        #expect(CredentialCheck.readableByOthers(wif) == nil)
    }

    @Test func whoamiDescribesQuotaProjectFromTheEnvironmentAndDelegates() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-desc-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/imp.json"
        try Data(#"""
            {"type": "impersonated_service_account", "quota_project_id": "file-p",
             "delegates": ["projects/-/serviceAccounts/mid@p.iam.gserviceaccount.com"],
             "service_account_impersonation_url": "https://x/v1/projects/-/serviceAccounts/t@p.iam.gserviceaccount.com:generateAccessToken",
             "source_credentials": {"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}}
            """#.utf8).write(to: URL(fileURLWithPath: path))
        let source = CredentialSource.file(path: path, from: "--key-file")
        let d = CredentialDescription(source, environment: ["GOOGLE_CLOUD_QUOTA_PROJECT": "env-p"], billingProject: nil)
        #expect(d.quotaProject == "env-p" && d.quotaProjectFrom == "GOOGLE_CLOUD_QUOTA_PROJECT")
        #expect(d.impersonation == ["mid@p.iam.gserviceaccount.com", "t@p.iam.gserviceaccount.com"])
        let plain = CredentialDescription(source, environment: [:], billingProject: nil)
        #expect(plain.quotaProject == "file-p" && plain.quotaProjectFrom == nil)
    }

    @Test func aRefusalCarriesWhatTheStartNoticesSaid() {
        let m = SourceCheck.explain(StorageError.unauthenticated(message: "Anonymous caller"), bucket: "b", endpoint: "http://e",
                                    identity: "anonymous (no credentials)", why: "no Google credentials found (…)").description
        #expect(m == "the credentials were refused (anonymous (no credentials)): Anonymous caller; no Google credentials found (…)")
    }
}
