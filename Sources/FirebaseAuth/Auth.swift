import Foundation
import FirebaseCore
import FirebaseStore

/// The Firebase Apple SDK's `Auth`, as far as Storage code needs it (docs/LIBRARY.md, "The Apple
/// SDK's API"): sign in with an email and password, a custom token or anonymously; the current
/// user; the emulator. Storage reaches the app's bucket as `currentUser`. The sign-in itself is
/// the library's (`FirebaseStore.FirebaseAuth`): the same requests, token refresh and redaction.
///
/// Where the requests go: production's Auth hosts, or the emulator given to
/// `useEmulator(withHost:port:)`, else `FIREBASE_AUTH_EMULATOR_HOST` when it is set.
/// Completion handlers run on the main queue, as the SDK's do.
open class Auth: NSObject, AuthInterop, @unchecked Sendable {
    public let app: FirebaseApp?
    private let lock = NSLock()
    private var user: User?
    private var emulator: String?
    /// The sign-in client, made at the first sign-in and again when the emulator changes.
    private var client: (emulator: String?, signIn: LibrarySignIn)?
    private var listeners: [UUID: (Auth, User?) -> Void] = [:]

    private static let lock = NSLock()
    nonisolated(unsafe) private static var instances: [String: Auth] = [:]

    init(app: FirebaseApp) {
        self.app = app
        super.init()
    }

    /// The default app's Auth; the default app must be configured.
    public class func auth() -> Auth {
        guard let app = FirebaseApp.app() else {
            fatalError("The default FirebaseApp instance must be configured before the default Auth instance can be initialized. " +
                "One way to ensure this is to call `FirebaseApp.configure()` first.")
        }
        return auth(app: app)
    }

    public class func auth(app: FirebaseApp) -> Auth {
        lock.withLock {
            if let a = instances[app.name], a.app === app { return a }
            let a = Auth(app: app)
            instances[app.name] = a
            app.authInterop = a
            return a
        }
    }

    /// The signed-in user, or nil.
    public var currentUser: User? { lock.withLock { user } }

    /// Sends Auth's requests to the Auth emulator at `host:port` (http).
    open func useEmulator(withHost host: String, port: Int) {
        guard !host.isEmpty else { fatalError("Cannot connect to an empty host.") }
        let h = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        lock.withLock { emulator = "http://\(h):\(port)" }
    }

    // MARK: signing in

    open func signIn(withEmail email: String, password: String) async throws -> AuthDataResult {
        try await signIn { try await $0.signIn(email: email, password: password) }
    }

    open func signIn(withCustomToken token: String) async throws -> AuthDataResult {
        try await signIn { try await $0.signIn(customToken: token) }
    }

    open func signInAnonymously() async throws -> AuthDataResult {
        try await signIn { try await $0.signInAnonymously() }
    }

    open func signIn(withEmail email: String, password: String, completion: ((AuthDataResult?, Error?) -> Void)? = nil) {
        complete(completion) { try await self.signIn(withEmail: email, password: password) }
    }

    open func signIn(withCustomToken token: String, completion: ((AuthDataResult?, Error?) -> Void)? = nil) {
        complete(completion) { try await self.signIn(withCustomToken: token) }
    }

    open func signInAnonymously(completion: ((AuthDataResult?, Error?) -> Void)? = nil) {
        complete(completion) { try await self.signInAnonymously() }
    }

    /// Forgets the current user: Storage's requests go without a user from then on.
    open func signOut() throws {
        set(nil)
    }

    // MARK: listeners

    /// `listener` is called on the main queue now and whenever the user signs in or out.
    @discardableResult
    open func addStateDidChangeListener(_ listener: @escaping (Auth, User?) -> Void) -> NSObjectProtocol {
        let id = UUID()
        let current = lock.withLock { () -> User? in
            listeners[id] = listener
            return user
        }
        DispatchQueue.main.async { listener(self, current) }
        return id as NSUUID
    }

    open func removeStateDidChangeListener(_ listenerHandle: NSObjectProtocol) {
        guard let id = listenerHandle as? NSUUID else { return }
        _ = lock.withLock { listeners.removeValue(forKey: id as UUID) }
    }

    // MARK: AuthInterop (Storage's tokens)

    package func idToken(forcingRefresh: Bool) async throws -> String? {
        guard let u = currentUser else { return nil }
        return try await u.signedIn.tokens.idToken(afterUnauthorized: forcingRefresh)
    }

    package var currentUserID: String? { currentUser?.uid }

    // MARK: private

    private func signIn(_ how: (LibrarySignIn) async throws -> FirebaseUser) async throws -> AuthDataResult {
        guard let key = app?.options.apiKey, !key.isEmpty else {
            throw NSError(domain: AuthErrorDomain, code: 17023, userInfo: [
                NSLocalizedDescriptionKey: "the app's options have no API key (API_KEY in GoogleService-Info.plist)"])
        }
        do {
            let u = User(try await how(try signInClient(apiKey: key)))
            set(u)
            return AuthDataResult(user: u)
        } catch {
            throw AuthErrors.nsError(error)
        }
    }

    /// One client for the app's sign-ins (its connections are reused), for the current emulator.
    private func signInClient(apiKey: String) throws -> LibrarySignIn {
        try lock.withLock {
            if let client, client.emulator == emulator { return client.signIn }
            let made = try LibrarySignIn(apiKey: apiKey, authEndpoint: emulator)
            client = (emulator, made)
            return made
        }
    }

    private func set(_ u: User?) {
        let called = lock.withLock { () -> [(Auth, User?) -> Void] in
            user = u
            return Array(listeners.values)
        }
        for l in called { DispatchQueue.main.async { l(self, u) } }
    }

    private func complete(_ completion: ((AuthDataResult?, Error?) -> Void)?,
                          _ work: @escaping @Sendable () async throws -> AuthDataResult) {
        let box = UncheckedBox(completion)
        Task {
            do {
                let r = try await work()
                DispatchQueue.main.async { box.value?(r, nil) }
            } catch {
                DispatchQueue.main.async { box.value?(nil, error) }
            }
        }
    }
}

/// A completion handler carried across a task (the SDK's handlers are not `Sendable`).
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
