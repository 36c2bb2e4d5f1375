import FirebaseStore
import Foundation
import StorageModel
import Testing

/// Where a login is kept and how; where the services are.
@Suite struct FirebaseLoginTests {
    static func tempHome() throws -> String {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("fbstore-login-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }

    static func mode(_ path: String) throws -> Int {
        ((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? NSNumber)?.intValue ?? -1
    }

    @Test func aLoginIsKeptOnlyForItsUser() throws {
        let home = try Self.tempHome()
        defer { try? FileManager.default.removeItem(atPath: home) }
        let env = ["HOME": home]
        let path = FirebaseLoginFile.path(bucket: "my-app.appspot.com", environment: env)
        #expect(path == home + "/.config/bucketfs/firebase-my-app.appspot.com.json")
        #expect(FirebaseLoginFile.path(bucket: "b", environment: ["HOME": home, "XDG_CONFIG_HOME": "/x/y"]) == "/x/y/bucketfs/firebase-b.json")
        #expect(try FirebaseLoginFile.load(bucket: "my-app.appspot.com", environment: env) == nil)
        let login = FirebaseLogin(bucket: "my-app.appspot.com", apiKey: "AIza-test", uid: "u1", email: "a@b.c",
                                  provider: "password", refreshToken: "refresh-secret", authEndpoint: "http://127.0.0.1:9099")
        try FirebaseLoginFile.save(login, environment: env)
        #expect(try Self.mode(path) == 0o600)
        #expect(try Self.mode(home + "/.config/bucketfs") == 0o700)
        #expect(try FirebaseLoginFile.load(bucket: "my-app.appspot.com", environment: env) == login)
        // Saved again (a new refresh token): replaced whole, no temporary file left behind.
        var again = login
        again.refreshToken = "refresh-2"
        try FirebaseLoginFile.save(again, environment: env)
        #expect(try FirebaseLoginFile.load(bucket: "my-app.appspot.com", environment: env)?.refreshToken == "refresh-2")
        #expect(try FileManager.default.contentsOfDirectory(atPath: home + "/.config/bucketfs") == ["firebase-my-app.appspot.com.json"])
        // Readable by others: refused, saying how to fix it.
        chmod(path, 0o644)
        let e = try? { () throws -> StorageError? in
            do { _ = try FirebaseLoginFile.load(bucket: "my-app.appspot.com", environment: env); return nil } catch let e as StorageError { return e }
        }()
        #expect(e.flatMap { $0 }.map { "\($0)".contains("chmod 600") } == true)
        #expect(try FirebaseLoginFile.remove(bucket: "my-app.appspot.com", environment: env))
        #expect(try !FirebaseLoginFile.remove(bucket: "my-app.appspot.com", environment: env))
        // Never the refresh token in its description.
        #expect(!"\(login)".contains("refresh-secret") && !String(reflecting: login).contains("refresh-secret"))
    }

    @Test func endpointsFollowFlagsThenEmulatorVariablesThenProduction() throws {
        let none = try FirebaseEndpoints.resolve(storage: nil, auth: nil, environment: [:])
        #expect(none == .production)
        let env = ["FIREBASE_STORAGE_EMULATOR_HOST": "127.0.0.1:9199", "FIREBASE_AUTH_EMULATOR_HOST": "localhost:9099"]
        let emu = try FirebaseEndpoints.resolve(storage: nil, auth: nil, environment: env)
        #expect(emu.storage.absoluteString == "http://127.0.0.1:9199")
        #expect(emu.identityToolkit.absoluteString == "http://localhost:9099/identitytoolkit.googleapis.com")
        #expect(emu.secureToken.absoluteString == "http://localhost:9099/securetoken.googleapis.com")
        let flags = try FirebaseEndpoints.resolve(storage: "http://10.0.0.1:9210/", auth: "http://10.0.0.2:9211", environment: env)
        #expect(flags.storage.absoluteString == "http://10.0.0.1:9210")
        #expect(flags.identityToolkit.absoluteString == "http://10.0.0.2:9211/identitytoolkit.googleapis.com")
        let onlyStorage = try FirebaseEndpoints.resolve(storage: nil, auth: nil, environment: ["FIREBASE_STORAGE_EMULATOR_HOST": "h:1"])
        #expect(onlyStorage.identityToolkit == FirebaseEndpoints.production.identityToolkit)
        #expect(throws: StorageError.self) { try FirebaseEndpoints.resolve(storage: "127.0.0.1:9199", auth: nil, environment: [:]) }
        #expect(throws: StorageError.self) { try FirebaseEndpoints.resolve(storage: nil, auth: "ftp://x", environment: [:]) }
    }
}
