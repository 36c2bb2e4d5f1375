import FirebaseStore
import Foundation
import Logging
import StorageModel

/// How a command reaches a `firebase://BUCKET`: the endpoints and where its ID tokens come from
/// (`--id-token` / FIREBASE_ID_TOKEN, else the login `bucketfs login` kept). Without either it
/// is a `SourceProblem` naming the `bucketfs login` line to run.
struct FirebaseAccess: Sendable {
    let bucket: String
    let endpoints: FirebaseEndpoints
    let tokens: any FirebaseIDTokenSource
    /// Who the requests are sent as, for messages: uid, email and provider (never a token).
    let identity: String
    let login: FirebaseLogin?

    static let storageEmulatorVariable = "FIREBASE_STORAGE_EMULATOR_HOST"
    static let authEmulatorVariable = "FIREBASE_AUTH_EMULATOR_HOST"

    /// The line a user without a login is told to run.
    static func loginLine(_ bucket: String) -> String {
        "bucketfs login firebase://\(bucket) --api-key KEY --email ADDRESS (or --custom-token-file FILE, or --anonymous)"
    }

    static func resolve(bucket: String, origin: String?, gcs: GCSOptions, firebase: FirebaseOptions,
                        environment: [String: String], logger: Logger) throws -> FirebaseAccess {
        if gcs.anonymous {
            throw SourceProblem("--anonymous sends no credentials to gs:// buckets; firebase:// requests are made as a "
                + "Firebase user: sign in as a new anonymous user with bucketfs login firebase://\(bucket) --api-key KEY --anonymous")
        }
        if gcs.keyFile != nil || gcs.token != nil {
            throw SourceProblem("--key-file and --token are Cloud Storage credentials (gs://); firebase:// requests are "
                + "made as a Firebase user (bucketfs login, or --id-token). To use a service account, mount gs://\(bucket)")
        }
        let fixed = firebase.idToken ?? environment[SecretArguments.environmentName].flatMap { $0.isEmpty ? nil : $0 }
        var login: FirebaseLogin?
        if fixed == nil {
            do {
                login = try FirebaseLoginFile.load(bucket: bucket, environment: environment)
            } catch {
                throw SourceProblem("\(SourceCheck.reason(error))")
            }
            guard login != nil else {
                throw SourceProblem("not signed in to firebase://\(bucket): run \(loginLine(bucket)), or pass --id-token")
            }
        }
        let endpoints = try endpointsFor(login: login, origin: origin, storageOption: gcs.endpoint,
                                         authOption: firebase.authEndpoint, environment: environment)
        if let fixed {
            return FirebaseAccess(bucket: bucket, endpoints: endpoints, tokens: FixedIDToken(fixed),
                                  identity: "the ID token from --id-token / FIREBASE_ID_TOKEN", login: nil)
        }
        let l = login!
        let client = FirebaseAuthClient(endpoints: endpoints, apiKey: l.apiKey, logger: logger,
                                        trust: try gcs.trustRoots(environment: environment))
        let manager = FirebaseTokenManager(client: client, refreshToken: l.refreshToken, bucket: bucket, logger: logger)
        return FirebaseAccess(bucket: bucket, endpoints: endpoints, tokens: manager, identity: describe(l), login: l)
    }

    /// "uid U (email E, signed in with password)".
    static func describe(_ l: FirebaseLogin) -> String {
        "Firebase user \(l.uid) (\(l.email.map { "\($0), " } ?? "")\(l.provider))"
    }

    /// Flags win over a v0 URL's own host, which wins over the emulator variables, which win over
    /// what the login was made against (a refresh token only works where it was issued), which
    /// wins over production.
    static func endpointsFor(login: FirebaseLogin?, origin: String?, storageOption: String?, authOption: String?,
                             environment: [String: String]) throws -> FirebaseEndpoints {
        let env = environment
        let storage = storageOption ?? origin ?? (nonEmpty(env[storageEmulatorVariable]) ? nil : login?.storageEndpoint)
        let auth = authOption ?? (nonEmpty(env[authEmulatorVariable]) ? nil : login?.authEndpoint)
        do {
            return try FirebaseEndpoints.resolve(storage: storage, auth: auth, environment: env)
        } catch {
            throw SourceProblem("\(SourceCheck.reason(error))")
        }
    }

    /// What `bucketfs login` keeps of the endpoints it used, so later commands go to the same
    /// place: the Auth emulator's base URL and the storage endpoint, when not production's.
    static func remembered(_ e: FirebaseEndpoints, authOption: String?, storageOption: String?,
                           environment: [String: String]) -> (auth: String?, storage: String?) {
        let p = FirebaseEndpoints.production
        var auth: String?
        if e.identityToolkit != p.identityToolkit {
            auth = authOption ?? environment[authEmulatorVariable].map { $0.contains("://") ? $0 : "http://" + $0 }
        }
        let storage = e.storage != p.storage ? e.storage.absoluteString : nil
        return (auth, storage)
    }

    private static func nonEmpty(_ s: String?) -> Bool { !(s ?? "").isEmpty }
}
