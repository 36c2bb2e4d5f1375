import Foundation
import StorageModel

/// Where the Firebase services are: Cloud Storage for Firebase's v0 API and Firebase Auth's two
/// REST hosts. Production, the Local Emulator Suite (`FIREBASE_*_EMULATOR_HOST`), or URLs given on
/// the command line.
public struct FirebaseEndpoints: Sendable, Equatable {
    /// e.g. https://firebasestorage.googleapis.com ; the store appends /v0/b/…
    public var storage: URL
    /// e.g. https://identitytoolkit.googleapis.com ; emulator: http://HOST:PORT/identitytoolkit.googleapis.com
    public var identityToolkit: URL
    /// e.g. https://securetoken.googleapis.com ; emulator: http://HOST:PORT/securetoken.googleapis.com
    public var secureToken: URL

    public init(storage: URL, identityToolkit: URL, secureToken: URL) {
        self.storage = storage
        self.identityToolkit = identityToolkit
        self.secureToken = secureToken
    }

    public static let production = FirebaseEndpoints(
        storage: URL(string: "https://firebasestorage.googleapis.com")!,
        identityToolkit: URL(string: "https://identitytoolkit.googleapis.com")!,
        secureToken: URL(string: "https://securetoken.googleapis.com")!)

    /// Both Auth hosts behind one emulator-style base URL: the production host name becomes the
    /// first path segment (`http://127.0.0.1:9099/identitytoolkit.googleapis.com/v1/…`), as the
    /// Firebase SDKs address the Auth emulator.
    public static func auth(emulatorBase base: URL) -> (identityToolkit: URL, secureToken: URL) {
        (base.appendingPathComponent("identitytoolkit.googleapis.com"),
         base.appendingPathComponent("securetoken.googleapis.com"))
    }

    /// The Auth emulator's base URL these endpoints use (what `--auth-endpoint` takes), or nil for
    /// production's Auth hosts.
    public var authBase: URL? {
        guard identityToolkit != Self.production.identityToolkit else { return nil }
        var base = identityToolkit.deletingLastPathComponent().absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        return URL(string: base)
    }

    /// --endpoint / --auth-endpoint (full URLs) win over FIREBASE_STORAGE_EMULATOR_HOST /
    /// FIREBASE_AUTH_EMULATOR_HOST (host:port, no scheme), which win over production.
    /// `auth` is the Auth emulator's base URL (`http://HOST:PORT`), as `connectAuthEmulator` takes it.
    public static func resolve(storage: String?, auth: String?, environment: [String: String]) throws -> FirebaseEndpoints {
        func given(_ s: String?) -> String? {
            guard let t = s?.trimmingCharacters(in: .whitespaces), !t.isEmpty else { return nil }
            return t
        }
        var e = production
        if let s = given(storage) {
            e.storage = try url(s, what: "--endpoint")
        } else if let h = given(environment["FIREBASE_STORAGE_EMULATOR_HOST"]) {
            e.storage = try emulatorURL(h, variable: "FIREBASE_STORAGE_EMULATOR_HOST")
        }
        var authBase: URL? = nil
        if let a = given(auth) {
            authBase = try url(a, what: "--auth-endpoint")
        } else if let h = given(environment["FIREBASE_AUTH_EMULATOR_HOST"]) {
            authBase = try emulatorURL(h, variable: "FIREBASE_AUTH_EMULATOR_HOST")
        }
        if let authBase { (e.identityToolkit, e.secureToken) = Self.auth(emulatorBase: authBase) }
        return e
    }

    /// A full http(s) URL with a host; trailing slashes (and a trailing `/v0` for storage) dropped.
    private static func url(_ s: String, what: String) throws -> URL {
        var t = s
        while t.hasSuffix("/") { t.removeLast() }
        if t.hasSuffix("/v0") { t.removeLast(3) }
        guard let u = URL(string: t), let scheme = u.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = u.host, !host.isEmpty else {
            throw StorageError.invalidArgument(message: "\(what) must be a full http(s) URL such as http://127.0.0.1:9199, got '\(s)'")
        }
        return u
    }

    /// `host:port` as the Firebase tools set it (a scheme is tolerated).
    private static func emulatorURL(_ hostPort: String, variable: String) throws -> URL {
        let s = hostPort.contains("://") ? hostPort : "http://" + hostPort
        guard let u = URL(string: s), let host = u.host, !host.isEmpty else {
            throw StorageError.invalidArgument(message: "\(variable) must be host:port (for example 127.0.0.1:9199), got '\(hostPort)'")
        }
        var t = s
        while t.hasSuffix("/") { t.removeLast() }
        return URL(string: t) ?? u
    }
}
