import Foundation
import CloudHTTP
import Logging
import StorageModel

/// Signing in to Firebase Auth from a program, without the command line's login file
/// (docs/LIBRARY.md, "Signing in from a program"): with an email and password, a custom token
/// minted by your server, or as a new anonymous user. Each gives a `FirebaseUser`, whose uid is
/// the signed-in user's and whose ID tokens refresh themselves ahead of expiry;
/// `Storage.storage(url:user:)` reaches a bucket as that user.
///
/// ```swift
/// let auth = try FirebaseAuth(apiKey: "AIza…")
/// let user = try await auth.signIn(email: "alice@example.com", password: password)
/// let storage = try Storage.storage(url: "gs://my-app.firebasestorage.app", user: user)
/// try await storage.reference().child("users/\(user.uid)/notes.txt").putData(Data("hi".utf8))
/// ```
///
/// The endpoints are production's, or the emulators' when `FIREBASE_AUTH_EMULATOR_HOST` /
/// `FIREBASE_STORAGE_EMULATOR_HOST` are set, or the URLs given (`authEndpoint`: the Auth
/// emulator's base URL, as `connectAuthEmulator` takes it; `storageEndpoint`: a full URL). A refused
/// sign-in is `StorageError.unauthenticated` with the server's reason code
/// (INVALID_LOGIN_CREDENTIALS, USER_DISABLED, INVALID_CUSTOM_TOKEN, ADMIN_ONLY_OPERATION…); an
/// Auth server that does not answer is a transient error naming it. The password, the custom
/// token and every token the server gives never reach a log line, an error message or a
/// description.
public struct FirebaseAuth: Sendable {
    public let endpoints: FirebaseEndpoints
    let client: FirebaseAuthClient
    let trust: TrustRoots
    let logger: Logger
    /// How long before an ID token's expiry it is refreshed (at most a quarter of its lifetime).
    public var refreshAhead: Duration = .seconds(300)

    /// `caFile`: a PEM file of a private CA to trust for https endpoints, besides the system store
    /// (or `SSL_CERT_FILE` / `SSL_CERT_DIR`). `clock`: the time tokens' lifetimes are read on
    /// (tests inject one they advance).
    public init(apiKey: String, authEndpoint: String? = nil, storageEndpoint: String? = nil, caFile: String? = nil,
                environment: [String: String] = ProcessInfo.processInfo.environment, clock: BucketClock = .real,
                logger: Logger = Logger(label: "bucketfs.firebase")) throws(StorageError) {
        guard !apiKey.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .invalidArgument(message: "the API key is empty (Firebase console: Project settings → General → Web API key)")
        }
        do {
            endpoints = try FirebaseEndpoints.resolve(storage: storageEndpoint, auth: authEndpoint, environment: environment)
        } catch let e as StorageError {
            throw e
        } catch {
            throw .invalidArgument(message: "\(error)")
        }
        trust = TrustRoots.resolve(caFile: caFile, environment: environment)
        self.logger = logger
        client = FirebaseAuthClient(endpoints: endpoints, apiKey: apiKey, logger: logger, trust: trust, clock: clock)
    }

    /// Signs in with an email and password (`accounts:signInWithPassword`).
    public func signIn(email: String, password: String) async throws -> FirebaseUser {
        user(try await client.signIn(email: email, password: password), again: "signIn(email:password:)")
    }

    /// Signs in with a custom token your server minted with the Admin SDK (`accounts:signInWithCustomToken`).
    public func signIn(customToken: String) async throws -> FirebaseUser {
        user(try await client.signIn(customToken: customToken), again: "signIn(customToken:) with a new custom token")
    }

    /// Signs up as a new anonymous user (`accounts:signUp`): each call is another user.
    public func signInAnonymously() async throws -> FirebaseUser {
        user(try await client.signUpAnonymously(), again: "signInAnonymously() (as a new user)")
    }

    private func user(_ t: FirebaseTokens, again: String) -> FirebaseUser {
        let tokens = FirebaseTokenManager(client: client, signedIn: t, bucket: "", logger: logger, refreshAhead: refreshAhead,
                                          signInAgain: "FirebaseAuth.\(again)")
        return FirebaseUser(uid: t.uid, email: t.email, provider: t.provider, endpoints: endpoints, trust: trust, tokens: tokens)
    }
}
