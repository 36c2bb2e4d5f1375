import Foundation

/// What Storage asks of the app's Auth, as the Apple SDK's Storage asks its Auth interop: the
/// signed-in user's ID token, refreshed if need be. Registered on the `FirebaseApp` by
/// `Auth.auth(app:)`; seen only by the package's own modules.
package protocol AuthInterop: AnyObject, Sendable {
    /// The current user's ID token, nil when no one is signed in. `forcingRefresh`: a new one
    /// (after the server refused the last).
    func idToken(forcingRefresh: Bool) async throws -> String?
    /// The current user's uid, for messages.
    var currentUserID: String? { get }
}
