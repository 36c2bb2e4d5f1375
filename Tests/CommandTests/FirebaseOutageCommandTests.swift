@testable import FirebaseStore
import GCSStore
import Foundation
import Logging
import StorageModel
import TestSupport
import Testing
@testable import bucketfs
@testable import CloudHTTP

/// The command line's side of Firebase outages and refusals: the check names the Auth server that
/// does not answer and what set its address, within the mount check's bound; help texts list
/// what the commands take; the rules' hints say each thing once and are true for both versions.
@Suite struct FirebaseOutageCommandTests {
    let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func deadPort() -> Int { TestSupport.deadPort() }

    @Test func anAuthServerThatIsDownIsNamedWithWhatSetIt() async throws {
        let config = NSTemporaryDirectory() + "bucketfs-authdown-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: config) }
        let port = Self.deadPort()
        let env = ["XDG_CONFIG_HOME": config, "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:\(port)"]
        try FirebaseLoginFile.save(FirebaseLogin(bucket: "b.appspot.com", apiKey: "k", uid: "u", email: "a@b.c", provider: "password",
                                                 refreshToken: "r", authEndpoint: "http://127.0.0.1:\(port)"), environment: env)
        let access = try FirebaseAccess.resolve(bucket: "b.appspot.com", origin: nil, gcs: try GCSOptions.parse([]),
                                                firebase: try FirebaseOptions.parse([]), environment: env, logger: quiet)
        let start = ContinuousClock.now
        do {
            try await SourceCheck.signIn(access)
            Issue.record("signed in against a dead port")
        } catch let p as SourceProblem {
            let took = ContinuousClock.now - start
            // Alone about a second; the room above the check's bound is for this process's other
            // suites on two cores (7.5 s seen in a full run). A check that ran into its deadline
            // would say so instead of "Connection refused" (checked below); the bound itself is
            // checked against the binary in Tests/e2e/test_firebase.py.
            #expect(took < SourceCheck.probeTimeout + .seconds(5), "took \(took)")
            let m = p.description
            // The Auth client's own words ("Firebase Auth (securetoken) at URL did not answer …"), or,
            // when the check's bound ran out first on a loaded machine, the check's ("cannot reach
            // Firebase Auth at URL: … Connection refused"): either names the service and its address.
            #expect(m.contains("Firebase Auth") && m.contains("http://127.0.0.1:\(port)"), "\(m)")
            #expect(m.contains("Connection refused") && m.contains("FIREBASE_AUTH_EMULATOR_HOST=127.0.0.1:\(port)"), "\(m)")
            #expect(!m.contains("HTTP 0") && ConnectionErrors.balanced(m) == m, "\(m)")
        }
        // The same through the flag: the flag is named.
        let viaFlag = try FirebaseAccess.resolve(bucket: "b.appspot.com", origin: nil, gcs: try GCSOptions.parse([]),
                                                 firebase: try FirebaseOptions.parse(["--auth-endpoint", "http://127.0.0.1:\(port)"]),
                                                 environment: ["XDG_CONFIG_HOME": config], logger: quiet)
        do { try await SourceCheck.signIn(viaFlag) } catch {
            #expect("\(error)".contains("--auth-endpoint http://127.0.0.1:\(port)"), "\(error)")
        }
    }

    @Test func theStorageSideNamesWhatSetItsAddress() throws {
        let access = FirebaseAccess(bucket: "b.appspot.com", endpoints: try FirebaseEndpoints.resolve(storage: "http://127.0.0.1:9", auth: nil, environment: [:]),
                                    tokens: FixedIDToken("t"), identity: "someone", login: nil,
                                    authSetBy: "production's", storageSetBy: "FIREBASE_STORAGE_EMULATOR_HOST=127.0.0.1:9")
        let m = SourceCheck.explainFirebase(StorageError.unknown(status: 0, message: "connection to 127.0.0.1:9 failed: Connection refused"),
                                            access: access, listed: "").description
        #expect(m.contains("cannot reach http://127.0.0.1:9 (Firebase Storage)") && m.contains("FIREBASE_STORAGE_EMULATOR_HOST=127.0.0.1:9"), "\(m)")
    }

    @Test func listingHintsAreTrueForBothRulesVersionsAndSaidOnce() throws {
        let access = FirebaseAccess(bucket: "b.appspot.com", endpoints: .production, tokens: FixedIDToken("t"), identity: "someone", login: nil)
        func line(_ server: String) -> String {
            let e = V0Errors.error(status: 403, message: server, path: "", bucket: "b.appspot.com")
            return SourceCheck.explainFirebase(e, access: access, listed: "users/u").description
        }
        let v1 = line(#"Listing objects in a bucket is disallowed for rules_version = "1". Please update storage security rules to rules_version = "2" to use list."#)
        #expect(v1.components(separatedBy: "every list is refused").count == 2, "once: \(v1)")
        #expect(v1.contains("rules_version = '2'") && v1.contains("rules_version = '1'"), "\(v1)")
        let v2 = line("Permission denied. No LIST permission.")
        #expect(!v2.contains("needs rules_version") && !v2.contains("needs Security Rules with rules_version"), "\(v2)")
        #expect(v2.contains("allow list") && v2.contains("rules_version = '2'"), "\(v2)")
    }

    @Test func helpTextsListWhatTheCommandsTake() {
        let whoami = BucketFSCommand.helpMessage(for: Whoami.self)
        // whoami takes the gs:// credentials too (whoami gs://BUCKET), each marked as for gs:// only.
        for option in ["--key-file", "--token", "--anonymous", "--impersonate-service-account"] { #expect(whoami.contains(option), "whoami lacks \(option)") }
        #expect(whoami.contains("gs:// only"))
        #expect(whoami.contains("--auth-endpoint") && whoami.contains("--endpoint"))
        let mount = BucketFSCommand.helpMessage(for: Mount.self)
        #expect(mount.contains("bucketfs mount firebase://"), "no firebase:// example")
        #expect(BucketFSCommand.helpMessage(for: Logout.self).contains("running mounts"))
    }

    @Test func noClobberSaysTheObjectExists() {
        let m = Put.exists("firebase://b/x.txt").description
        #expect(m.contains("already exists") && m.contains("nothing was written") && !m.contains("changed"))
    }
}
