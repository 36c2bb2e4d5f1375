import Foundation
import CloudHTTP
import Logging
import StorageModel

/// Where a program's `firebase://BUCKET` requests go and whose ID tokens they carry, decided by
/// the rules every bucketfs command follows (docs/FIREBASE.md, "The Swift library"):
///
/// - tokens: an ID token given by the caller, else `FIREBASE_ID_TOKEN`, is used as is and never
///   refreshed; else the login that `bucketfs login` kept for the bucket, refreshed as needed;
///   without either, an error naming the `bucketfs login` line to run;
/// - endpoints: URLs given by the caller win over a v0 URL's own host, which wins over the
///   emulator variables (`FIREBASE_STORAGE_EMULATOR_HOST`, `FIREBASE_AUTH_EMULATOR_HOST`), which
///   win over what the login was made against (a refresh token only works where it was issued),
///   which wins over production.
public struct FirebaseSession: Sendable {
    public let bucket: String
    public let endpoints: FirebaseEndpoints
    public let tokens: any FirebaseIDTokenSource
    /// Who the requests are sent as, for messages: uid, email and provider (never a token).
    public let identity: String
    /// The login the tokens come from; nil when an ID token was given.
    public let login: FirebaseLogin?
    /// What set each endpoint, for messages: "FIREBASE_AUTH_EMULATOR_HOST=127.0.0.1:9099",
    /// "--auth-endpoint http://…", "the login file (…)", or production's.
    public var authSetBy = ""
    public var storageSetBy = ""

    /// A session made by hand (tests; programs with their own token source).
    public init(bucket: String, endpoints: FirebaseEndpoints, tokens: any FirebaseIDTokenSource, identity: String,
                login: FirebaseLogin?, authSetBy: String = "", storageSetBy: String = "") {
        self.bucket = bucket
        self.endpoints = endpoints
        self.tokens = tokens
        self.identity = identity
        self.login = login
        self.authSetBy = authSetBy
        self.storageSetBy = storageSetBy
    }

    public static let storageEmulatorVariable = "FIREBASE_STORAGE_EMULATOR_HOST"
    public static let authEmulatorVariable = "FIREBASE_AUTH_EMULATOR_HOST"
    public static let idTokenVariable = "FIREBASE_ID_TOKEN"

    /// Resolves a session. Nothing is sent: the first request signs in (refreshes) if it must.
    /// - Parameters:
    ///   - idToken: an ID token obtained elsewhere (wins over `FIREBASE_ID_TOKEN` and the login).
    ///   - storageEndpoint, authEndpoint: full URLs (`http://127.0.0.1:9199`), as `--endpoint` and
    ///     `--auth-endpoint` take them.
    ///   - origin: the host of a v0 URL the bucket was named by (`https://HOST/v0/b/BUCKET/o/…`).
    ///   - trust: the certificates trusted for https Auth endpoints (`TrustRoots.resolve`).
    ///   - revives: a refresh token the server refuses is replaced by a newer login of the same
    ///     user, read again from the login file (a long-running session: a mount, a service).
    ///   - logsRefusals: a refused refresh token's sign-in line is logged once per refusal episode,
    ///     and errors point to it (a running mount, which logs every failed operation), instead
    ///     of being carried by every error (`FirebaseTokenManager`).
    public static func resolve(bucket: String, idToken: String? = nil, storageEndpoint: String? = nil,
                               authEndpoint: String? = nil, origin: String? = nil,
                               environment: [String: String] = ProcessInfo.processInfo.environment,
                               trust: TrustRoots = .system, revives: Bool = true, logsRefusals: Bool = false,
                               logger: Logger = Logger(label: "bucketfs.firebase")) throws(StorageError) -> FirebaseSession {
        try BucketName.validate(bucket)
        let fixed = nonEmpty(idToken) ?? nonEmpty(environment[idTokenVariable])
        var login: FirebaseLogin?
        if fixed == nil {
            do {
                login = try FirebaseLoginFile.load(bucket: bucket, environment: environment)
            } catch let e as StorageError {
                throw e
            } catch {
                throw .invalidArgument(message: "\(error)")
            }
            guard login != nil else {
                throw .unauthenticated(message: "not signed in to firebase://\(bucket): run \(loginLine(bucket)), or pass an ID token (FIREBASE_ID_TOKEN, or --id-token on the command line)")
            }
        }
        let endpoints = try endpointsFor(login: login, origin: origin, storageOption: storageEndpoint,
                                         authOption: authEndpoint, environment: environment)
        let setBy = settings(login: login, origin: origin, storageOption: storageEndpoint, authOption: authEndpoint,
                             environment: environment)
        if let fixed {
            return FirebaseSession(bucket: bucket, endpoints: endpoints, tokens: FixedIDToken(fixed),
                                   identity: "the ID token from --id-token / \(idTokenVariable)", login: nil,
                                   authSetBy: setBy.auth, storageSetBy: setBy.storage)
        }
        let l = login!
        let client = FirebaseAuthClient(endpoints: endpoints, apiKey: l.apiKey, logger: logger, trust: trust)
        // A refresh token the server refuses is replaced by a newer login of the same user, read
        // again from the login file, without a restart.
        let manager = FirebaseTokenManager(client: client, refreshToken: l.refreshToken, bucket: bucket, logger: logger,
                                           user: (l.email, l.provider),
                                           newerLogin: revives ? FirebaseLoginFile.newerLogin(of: l, environment: environment) : nil,
                                           logsRefusals: logsRefusals)
        return FirebaseSession(bucket: bucket, endpoints: endpoints, tokens: manager, identity: describe(l), login: l,
                               authSetBy: setBy.auth, storageSetBy: setBy.storage)
    }

    /// What set the endpoints `endpointsFor` picks, in the same order, as messages name it.
    public static func settings(login: FirebaseLogin?, origin: String?, storageOption: String?, authOption: String?,
                                environment env: [String: String]) -> (auth: String, storage: String) {
        let auth: String
        if let a = authOption {
            auth = "--auth-endpoint \(a)"
        } else if let v = nonEmpty(env[authEmulatorVariable]) {
            auth = "\(authEmulatorVariable)=\(v)"
        } else if let a = login?.authEndpoint {
            auth = "the login file (bucketfs login was given \(a)); override it with \(authEmulatorVariable) or --auth-endpoint"
        } else {
            auth = "production's (for an emulator set \(authEmulatorVariable) or --auth-endpoint)"
        }
        let storage: String
        if let e = storageOption {
            storage = "--endpoint \(e)"
        } else if let o = origin {
            storage = "the v0 URL given (\(o))"
        } else if let v = nonEmpty(env[storageEmulatorVariable]) {
            storage = "\(storageEmulatorVariable)=\(v)"
        } else if let e = login?.storageEndpoint {
            storage = "the login file (bucketfs login was given \(e)); override it with \(storageEmulatorVariable) or --endpoint"
        } else {
            storage = "production's (for an emulator set \(storageEmulatorVariable) or --endpoint)"
        }
        return (auth, storage)
    }

    /// The line a user without a login is told to run.
    public static func loginLine(_ bucket: String) -> String {
        "bucketfs login firebase://\(bucket) --api-key KEY --email ADDRESS (or --custom-token-file FILE, or --anonymous)"
    }

    /// "Firebase user UID (EMAIL, PROVIDER)".
    public static func describe(_ l: FirebaseLogin) -> String {
        "Firebase user \(l.uid) (\(l.email.map { "\($0), " } ?? "")\(l.provider))"
    }

    /// The endpoints by the order above.
    public static func endpointsFor(login: FirebaseLogin?, origin: String?, storageOption: String?, authOption: String?,
                                    environment: [String: String]) throws(StorageError) -> FirebaseEndpoints {
        let env = environment
        let storage = storageOption ?? origin ?? (nonEmpty(env[storageEmulatorVariable]) != nil ? nil : login?.storageEndpoint)
        let auth = authOption ?? (nonEmpty(env[authEmulatorVariable]) != nil ? nil : login?.authEndpoint)
        do {
            return try FirebaseEndpoints.resolve(storage: storage, auth: auth, environment: env)
        } catch let e as StorageError {
            throw e
        } catch {
            throw .invalidArgument(message: "\(error)")
        }
    }

    private static func nonEmpty(_ s: String?) -> String? {
        guard let s, !s.isEmpty else { return nil }
        return s
    }
}
