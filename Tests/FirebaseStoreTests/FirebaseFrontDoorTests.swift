import FirebaseStore
import Foundation
import Logging
import StorageModel
import Testing

/// The library's front door: `Storage.storage(url:)` gives a ready `Storage` for a Firebase bucket
/// from the login `bucketfs login` keeps, the emulator variables or an ID token, by the rules the
/// command line follows (docs/FIREBASE.md, "The Swift library").
@Suite struct FirebaseFrontDoorTests {
    /// A server, and a home whose login file holds a refresh token of `uid` issued by it.
    static func withLogin(uid: String = "alice", rules: TestRules = .perUser,
                          _ body: (FirebaseTestServer, [String: String]) async throws -> Void) async throws {
        let server = try await FirebaseTestServer.start(flavour: .emulator, rules: rules)
        let home = try FirebaseLoginTests.tempHome()
        defer { try? FileManager.default.removeItem(atPath: home) }
        do {
            let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            let client = FirebaseAuthClient(endpoints: try endpoints(server), apiKey: "test-api-key", logger: quiet)
            let t = try await client.signIn(customToken: #"{"uid":"\#(uid)"}"#)
            let login = FirebaseLogin(bucket: server.bucket, apiKey: "test-api-key", uid: t.uid, email: nil,
                                      provider: t.provider, refreshToken: t.refreshToken,
                                      authEndpoint: server.base.absoluteString, storageEndpoint: server.base.absoluteString)
            try FirebaseLoginFile.save(login, environment: ["HOME": home])
            try await body(server, ["HOME": home])
        } catch {
            try? await server.stop()
            throw error
        }
        try await server.stop()
    }

    static func failure(_ body: () throws -> Void) -> String? {
        do { try body(); return nil } catch { return "\(error)" }
    }

    @Test func theLoginFileSignsTheSamplesIn() async throws {
        try await Self.withLogin { server, env in
            let storage = try Storage.storage(url: "gs://\(server.bucket)", environment: env)
            let ref = storage.reference().child("users/alice/images/forest.jpg")
            var m = StorageMetadata()
            m.contentType = "image/jpeg"
            try await ref.putData(Data("forest".utf8), metadata: m)
            #expect(try await ref.getMetadata().contentType == "image/jpeg")
            #expect(try await storage.reference().child("users/alice").listAll().prefixes.map(\.fullPath) == ["users/alice/images"])
            // As alice, under the rules: another user's folder is refused, as the SDK would be.
            let e = await storageError { _ = try await storage.reference().child("users/bob/x").getMetadata() }
            #expect(e.map { if case .unauthorized = $0 { true } else { false } } == true, "\(String(describing: e))")
            #expect(server.recorded.filter { $0.path == "/securetoken.googleapis.com/v1/token" }.count == 1,
                    "the login's refresh token was exchanged once for an ID token")
            // firebase:// names the same bucket; the store is a v0 store at the login's endpoint.
            let again = try Storage.storage(url: "firebase://\(server.bucket)", environment: env)
            #expect(try await again.reference().child("users/alice/images/forest.jpg").data(maxSize: 100) == Data("forest".utf8))
            #expect((again.store as? FirebaseStore)?.endpoints.storage == server.base)
            try await storage.shutdown()
            try await again.shutdown()
        }
    }

    @Test func anIDTokenWinsOverTheLogin() async throws {
        try await Self.withLogin { server, env in
            let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            let bob = try await FirebaseAuthClient(endpoints: try endpoints(server), apiKey: "k", logger: quiet)
                .signIn(customToken: #"{"uid":"bob"}"#)
            var withToken = env
            withToken["FIREBASE_STORAGE_EMULATOR_HOST"] = "\(server.base.host!):\(server.base.port!)"
            // The variable, then the argument, win over alice's login.
            for storage in [try Storage.storage(url: "gs://\(server.bucket)", environment: withToken.merging(["FIREBASE_ID_TOKEN": bob.idToken]) { $1 }),
                            try Storage.storage(url: "gs://\(server.bucket)", idToken: bob.idToken, environment: withToken)] {
                try await storage.reference().child("users/bob/a").putData(Data("b".utf8))
                let e = await storageError { _ = try await storage.reference().child("users/alice/a").getMetadata() }
                #expect(e.map { if case .unauthorized = $0 { true } else { false } } == true)
                try await storage.shutdown()
            }
        }
    }

    @Test func whatCannotWorkIsRefusedBeforeAnyRequest() async throws {
        let home = try FirebaseLoginTests.tempHome()
        defer { try? FileManager.default.removeItem(atPath: home) }
        let env = ["HOME": home]
        let notSignedIn = Self.failure { _ = try Storage.storage(url: "gs://my-app.appspot.com", environment: env) }
        #expect(notSignedIn?.contains("not signed in to firebase://my-app.appspot.com") == true, "\(notSignedIn ?? "no error")")
        #expect(notSignedIn?.contains("bucketfs login firebase://my-app.appspot.com") == true)
        let object = Self.failure { _ = try Storage.storage(url: "gs://my-app.appspot.com/images/a.jpg", idToken: "t", environment: env) }
        #expect(object?.contains("names an object") == true, "\(object ?? "no error")")
        let badName = Self.failure { _ = try Storage.storage(url: "firebase://Bad_Bucket!", idToken: "t", environment: env) }
        #expect(badName != nil && badName?.contains("bucket name") == true, "\(badName ?? "no error")")
        let notAURL = Self.failure { _ = try Storage.storage(url: "my-app.appspot.com", idToken: "t", environment: env) }
        #expect(notAURL?.contains("not a storage URL") == true, "\(notAURL ?? "no error")")
    }

    @Test func aV0URLsHostIsTheEndpointUnlessItIsProductions() throws {
        let env = ["FIREBASE_STORAGE_EMULATOR_HOST": "127.0.0.1:9199"]
        let local = try Storage.storage(url: "http://127.0.0.1:9555/v0/b/my-app.appspot.com/o", idToken: "t", environment: env)
        #expect((local.store as? FirebaseStore)?.endpoints.storage.absoluteString == "http://127.0.0.1:9555")
        let prod = try Storage.storage(url: "https://firebasestorage.googleapis.com/v0/b/my-app.appspot.com/o", idToken: "t", environment: env)
        #expect((prod.store as? FirebaseStore)?.endpoints.storage.absoluteString == "http://127.0.0.1:9199", "the variable still applies")
        let plain = try Storage.storage(url: "gs://my-app.appspot.com", idToken: "t", environment: [:])
        #expect((plain.store as? FirebaseStore)?.endpoints == .production)
    }
}
