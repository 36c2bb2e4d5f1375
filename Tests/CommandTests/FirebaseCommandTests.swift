import FirebaseStore
import Foundation
import Logging
import StorageModel
import Testing
@testable import bucketfs

@Suite struct FirebaseSourceTests {
    @Test func firebaseURLs() throws {
        guard case .firebase(let b, let p, let o) = try Source.parse("firebase://my-app.appspot.com/users/u1/", splitLocal: true) else {
            Issue.record("not a firebase source"); return
        }
        #expect(b == "my-app.appspot.com" && p == "users/u1" && o == nil)
        guard case .firebase(let b2, let p2, nil) = try Source.parse("firebase://my-app.firebasestorage.app", splitLocal: false) else {
            Issue.record("not a firebase source"); return
        }
        #expect(b2 == "my-app.firebasestorage.app" && p2 == "")
        #expect(throws: (any Error).self) { try Source.parse("firebase:///x", splitLocal: false) }
    }

    @Test func v0URLsAreFirebaseSources() throws {
        let prod = try Source.parse("https://firebasestorage.googleapis.com/v0/b/my-app.appspot.com/o/images%2Fstars.jpg", splitLocal: true)
        guard case .firebase("my-app.appspot.com", "images/stars.jpg", nil) = prod else { Issue.record("\(prod)"); return }
        let emu = try Source.parse("http://127.0.0.1:9199/v0/b/bkt/o/a%2Fb", splitLocal: true)
        guard case .firebase("bkt", "a/b", "http://127.0.0.1:9199") = emu else { Issue.record("\(emu)"); return }
        #expect(emu.display == "firebase://bkt/a/b")
        #expect(throws: (any Error).self) { try Source.parse("https://host/storage/v1/b/x/o/y", splitLocal: true) }
    }

    /// A name that cannot be a bucket is refused by the parse itself, before any store (and so any
    /// request) exists, whichever form the source takes; the error says which rule it breaks.
    @Test func namesThatAreNotBucketsAreRefusedBeforeAnyRequest() throws {
        for spec in ["firebase://Bad_Bucket!", "firebase://..", "firebase://../x", "gs://Bad_Bucket!/x", "gs://ab",
                     "http://127.0.0.1:9199/v0/b/..%2F..%2Fx/o", "https://firebasestorage.googleapis.com/v0/b/My-App.appspot.com/o/x"] {
            do {
                let parsed = try Source.parse(spec, splitLocal: true)
                Issue.record("\(spec) parsed as \(parsed)")
            } catch {
                #expect("\(error)".contains("is not a bucket name"), "\(spec): \(error)")
            }
        }
        #expect(throws: (any Error).self) { try firebaseBucket("firebase://Bad_Bucket!") }
    }

    @Test func loginBucketIsFirebaseOnly() throws {
        #expect(try firebaseBucket("firebase://b.appspot.com") == "b.appspot.com")
        #expect(throws: (any Error).self) { try firebaseBucket("gs://b") }
        #expect(throws: (any Error).self) { try firebaseBucket("/tmp/some-dir") }
    }
}

@Suite struct FirebaseAccessTests {
    func emptyConfig() -> [String: String] {
        ["XDG_CONFIG_HOME": NSTemporaryDirectory() + "bucketfs-cfg-\(UUID().uuidString)"]
    }
    let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    @Test func noLoginNamesTheLoginLine() throws {
        do {
            _ = try FirebaseAccess.resolve(bucket: "b.appspot.com", origin: nil, gcs: try GCSOptions.parse([]), firebase: try FirebaseOptions.parse([]),
                                           environment: emptyConfig(), logger: quiet)
            Issue.record("resolved with no login")
        } catch let e as SourceProblem {
            #expect(e.description.contains("not signed in to firebase://b.appspot.com"))
            #expect(e.description.contains("bucketfs login firebase://b.appspot.com --api-key KEY --email ADDRESS"))
        }
    }

    @Test func gcsCredentialsAreRefusedWithTheWayOut() throws {
        let gcs = try GCSOptions.parse(["--anonymous"])
        #expect(throws: SourceProblem.self) {
            try FirebaseAccess.resolve(bucket: "b", origin: nil, gcs: gcs, firebase: try FirebaseOptions.parse([]),
                                       environment: emptyConfig(), logger: quiet)
        }
    }

    @Test func idTokenFromTheEnvironmentNeedsNoLogin() throws {
        var env = emptyConfig()
        env["FIREBASE_ID_TOKEN"] = "header.payload.sig"
        let a = try FirebaseAccess.resolve(bucket: "my-app.appspot.com", origin: nil, gcs: try GCSOptions.parse([]), firebase: try FirebaseOptions.parse([]),
                                           environment: env, logger: quiet)
        #expect(a.tokens is FixedIDToken && a.login == nil)
        #expect(!a.identity.contains("header.payload.sig"))
    }

    @Test func endpointPrecedence() throws {
        let login = FirebaseLogin(bucket: "b", apiKey: "k", uid: "u", email: nil, provider: "anonymous", refreshToken: "r",
                                  authEndpoint: "http://127.0.0.1:9099", storageEndpoint: "http://127.0.0.1:9199")
        // what the login was made against, when nothing else says
        var e = try FirebaseAccess.endpointsFor(login: login, origin: nil, storageOption: nil, authOption: nil, environment: [:])
        #expect(e.storage.absoluteString == "http://127.0.0.1:9199")
        #expect(e.identityToolkit.absoluteString == "http://127.0.0.1:9099/identitytoolkit.googleapis.com")
        // the emulator variables win over the login
        e = try FirebaseAccess.endpointsFor(login: login, origin: nil, storageOption: nil, authOption: nil,
                                            environment: ["FIREBASE_STORAGE_EMULATOR_HOST": "127.0.0.1:9221",
                                                          "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9222"])
        #expect(e.storage.absoluteString == "http://127.0.0.1:9221")
        #expect(e.secureToken.absoluteString == "http://127.0.0.1:9222/securetoken.googleapis.com")
        // a v0 URL's host wins over those; a flag wins over everything
        e = try FirebaseAccess.endpointsFor(login: login, origin: "http://127.0.0.1:9300", storageOption: nil, authOption: nil,
                                            environment: ["FIREBASE_STORAGE_EMULATOR_HOST": "127.0.0.1:9221"])
        #expect(e.storage.absoluteString == "http://127.0.0.1:9300")
        e = try FirebaseAccess.endpointsFor(login: login, origin: "http://127.0.0.1:9300", storageOption: "http://127.0.0.1:9400",
                                            authOption: nil, environment: [:])
        #expect(e.storage.absoluteString == "http://127.0.0.1:9400")
        // no login, nothing set: production
        e = try FirebaseAccess.endpointsFor(login: nil, origin: nil, storageOption: nil, authOption: nil, environment: [:])
        #expect(e == FirebaseEndpoints.production)
        #expect(throws: SourceProblem.self) {
            try FirebaseAccess.endpointsFor(login: nil, origin: nil, storageOption: "ftp://x", authOption: nil, environment: [:])
        }
    }

    @Test func loginRemembersTheEmulatorItUsed() throws {
        let env = ["FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9099", "FIREBASE_STORAGE_EMULATOR_HOST": "127.0.0.1:9199"]
        let e = try FirebaseAccess.endpointsFor(login: nil, origin: nil, storageOption: nil, authOption: nil, environment: env)
        let kept = FirebaseAccess.remembered(e, authOption: nil, storageOption: nil, environment: env)
        #expect(kept.auth == "http://127.0.0.1:9099" && kept.storage == "http://127.0.0.1:9199")
        let prod = FirebaseAccess.remembered(.production, authOption: nil, storageOption: nil, environment: [:])
        #expect(prod.auth == nil && prod.storage == nil)
    }

    @Test func probeFailuresNameCauseAndFix() throws {
        let login = FirebaseLogin(bucket: "b", apiKey: "k", uid: "u1", email: "a@x", provider: "password", refreshToken: "r")
        let access = FirebaseAccess(bucket: "b", endpoints: .production, tokens: FixedIDToken("t"),
                                    identity: FirebaseAccess.describe(login), login: login)
        func line(_ e: StorageError) -> String { SourceCheck.explainFirebase(e, access: access, listed: "users/u1").description }
        #expect(line(.bucketNotFound(bucket: "b")).contains("bucket 'b' does not exist"))
        let refused = line(.unauthorized(path: "users/u1", message: "Permission denied. No LIST permission."))
        #expect(refused.contains("Firebase user u1 (a@x, password) may not list firebase://b/users/u1"))
        #expect(refused.contains("No LIST permission") && refused.contains("rules_version = '2'")
                && refused.contains("rules_version = '1'") && refused.contains("allow list"))
        #expect(line(.unauthenticated(message: "TOKEN_EXPIRED")).contains("bucketfs login firebase://b --api-key KEY"))
        #expect(line(.timeout(message: "x")).contains("did not answer"))
        #expect(line(.retryLimitExceeded(message: "connection refused")).contains("cannot reach https://firebasestorage.googleapis.com"))
    }
}

@Suite struct SecretArgumentsTests {
    @Test func idTokenLeavesTheArguments() {
        let (args, token) = SecretArguments.extractIDToken(["mount", "firebase://b", "/mnt", "--id-token", "T0K", "--read-only"])
        #expect(args == ["mount", "firebase://b", "/mnt", "--read-only"] && token == "T0K")
        let (args2, token2) = SecretArguments.extractIDToken(["ls", "--id-token=abc", "firebase://b"])
        #expect(args2 == ["ls", "firebase://b"] && token2 == "abc")
        let (args3, token3) = SecretArguments.extractIDToken(["ls", "firebase://b"])
        #expect(args3 == ["ls", "firebase://b"] && token3 == nil)
    }

    @Test func everyTokenOptionLeavesTheArgumentsForTheEnvironment() {
        let (args, env) = SecretArguments.extract(["mount", "gs://b", "/mnt", "--token", "ya29.T", "--id-token=ID", "--read-only"])
        #expect(args == ["mount", "gs://b", "/mnt", "--read-only"])
        #expect(env == ["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.T", "FIREBASE_ID_TOKEN": "ID"])
        let (args2, env2) = SecretArguments.extract(["mount", "gs://b", "/mnt", "--token=ya29.U", "--key-file", "k.json"])
        #expect(args2 == ["mount", "gs://b", "/mnt", "--key-file", "k.json"] && env2 == ["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.U"])
    }

    @Test func passwordIsTheFirstLine() throws {
        #expect(try PasswordInput.firstLine(Data("s3cret\n".utf8), from: "x") == "s3cret")
        #expect(try PasswordInput.firstLine(Data("with space\r\nsecond".utf8), from: "x") == "with space")
        #expect(throws: (any Error).self) { try PasswordInput.firstLine(Data("\n".utf8), from: "x") }
    }
}
