import Foundation
import FirebaseStore

/// The Firebase Apple SDK's `User`, as far as Storage code needs it: who is signed in and their
/// ID tokens, which refresh themselves (docs/LIBRARY.md, "The Apple SDK's API").
open class User: NSObject, @unchecked Sendable {
    /// The user's id: `request.auth.uid` in Security Rules.
    public let uid: String
    public let email: String?
    public let isAnonymous: Bool
    /// "Firebase", as the SDK's `User.providerID`.
    public let providerID = "Firebase"
    public let displayName: String? = nil
    public let photoURL: URL? = nil
    public let phoneNumber: String? = nil
    let signedIn: FirebaseUser

    init(_ user: FirebaseUser) {
        signedIn = user
        uid = user.uid
        email = user.email
        isAnonymous = user.provider == "anonymous"
        super.init()
    }

    /// A valid ID token, refreshed first when it is near expiry.
    open func getIDToken() async throws -> String {
        try await getIDTokenForcingRefresh(false)
    }

    open func getIDTokenForcingRefresh(_ forceRefresh: Bool) async throws -> String {
        do {
            return try await signedIn.tokens.idToken(afterUnauthorized: forceRefresh)
        } catch {
            throw AuthErrors.nsError(error)
        }
    }

    open func getIDToken(completion: ((String?, Error?) -> Void)?) {
        getIDTokenForcingRefresh(false, completion: completion)
    }

    open func getIDTokenForcingRefresh(_ forceRefresh: Bool, completion: ((String?, Error?) -> Void)?) {
        Task {
            do {
                let token = try await getIDTokenForcingRefresh(forceRefresh)
                DispatchQueue.main.async { completion?(token, nil) }
            } catch {
                DispatchQueue.main.async { completion?(nil, error) }
            }
        }
    }

    /// Never a token.
    override open var description: String { "User(uid: \(uid), email: \(email ?? "nil"), isAnonymous: \(isAnonymous))" }
}

/// The Firebase Apple SDK's `AuthDataResult`: the user a sign-in made.
open class AuthDataResult: NSObject, @unchecked Sendable {
    public let user: User
    init(user: User) {
        self.user = user
        super.init()
    }
}
