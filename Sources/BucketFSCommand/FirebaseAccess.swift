import FirebaseStore
import Foundation
import Logging
import StorageModel

/// How a command reaches a `firebase://BUCKET`: the command line's own refusals (Cloud Storage
/// credentials given to a Firebase source), then `FirebaseSession`'s rules — whose ID tokens
/// (`--id-token` / FIREBASE_ID_TOKEN, else the login `bucketfs login` kept), which endpoints —
/// the same rules a program gets through `Storage.storage(url:)` (docs/LIBRARY.md). Every failure
/// is a `SourceProblem` naming what to do.
struct FirebaseAccess: Sendable {
    let session: FirebaseSession

    var bucket: String { session.bucket }
    var endpoints: FirebaseEndpoints { session.endpoints }
    var tokens: any FirebaseIDTokenSource { session.tokens }
    /// Who the requests are sent as, for messages: uid, email and provider (never a token).
    var identity: String { session.identity }
    var login: FirebaseLogin? { session.login }
    var authSetBy: String { session.authSetBy }
    var storageSetBy: String { session.storageSetBy }

    init(session: FirebaseSession) { self.session = session }

    init(bucket: String, endpoints: FirebaseEndpoints, tokens: any FirebaseIDTokenSource, identity: String,
         login: FirebaseLogin?, authSetBy: String = "", storageSetBy: String = "") {
        session = FirebaseSession(bucket: bucket, endpoints: endpoints, tokens: tokens, identity: identity, login: login,
                                  authSetBy: authSetBy, storageSetBy: storageSetBy)
    }

    /// "Firebase user UID (EMAIL, PROVIDER)".
    static func describe(_ l: FirebaseLogin) -> String { FirebaseSession.describe(l) }

    static let storageEmulatorVariable = FirebaseSession.storageEmulatorVariable
    static let authEmulatorVariable = FirebaseSession.authEmulatorVariable

    /// The line a user without a login is told to run.
    static func loginLine(_ bucket: String) -> String { FirebaseSession.loginLine(bucket) }

    static func resolve(bucket: String, origin: String?, gcs: GCSOptions, firebase: FirebaseOptions,
                        environment: [String: String], logger: Logger) throws -> FirebaseAccess {
        if gcs.anonymous {
            throw SourceProblem("--anonymous sends no credentials to gs:// buckets; firebase:// requests are made as a "
                + "Firebase user: sign in as a new anonymous user with bucketfs login firebase://\(bucket) --api-key KEY --anonymous")
        }
        if gcs.keyFile != nil || gcs.token != nil || gcs.tokenURL != nil || gcs.impersonate != nil || gcs.billingProject != nil {
            throw SourceProblem("--key-file, --token, --token-url, --impersonate-service-account and --billing-project are Cloud Storage options (gs://); firebase:// requests are "
                + "made as a Firebase user (bucketfs login, or --id-token). To use a service account, mount gs://\(bucket)")
        }
        do {
            return FirebaseAccess(session: try FirebaseSession.resolve(
                bucket: bucket, idToken: firebase.idToken, storageEndpoint: gcs.endpoint, authEndpoint: firebase.authEndpoint,
                origin: origin, environment: environment, trust: try gcs.trustRoots(environment: environment), logger: logger))
        } catch {
            throw SourceProblem(SourceCheck.reason(error))
        }
    }

    /// What set each endpoint, as messages name it (`FirebaseSession.settings`).
    static func settings(login: FirebaseLogin?, origin: String?, storageOption: String?, authOption: String?,
                         environment: [String: String]) -> (auth: String, storage: String) {
        FirebaseSession.settings(login: login, origin: origin, storageOption: storageOption, authOption: authOption,
                                 environment: environment)
    }

    /// The endpoints by `FirebaseSession`'s order; a malformed one is a `SourceProblem`.
    static func endpointsFor(login: FirebaseLogin?, origin: String?, storageOption: String?, authOption: String?,
                             environment: [String: String]) throws -> FirebaseEndpoints {
        do {
            return try FirebaseSession.endpointsFor(login: login, origin: origin, storageOption: storageOption,
                                                    authOption: authOption, environment: environment)
        } catch {
            throw SourceProblem(SourceCheck.reason(error))
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
}
