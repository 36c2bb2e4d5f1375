import Foundation

/// A token source that may have no user signed in (the Apple SDK's Storage before a sign-in): its
/// requests then go without `Authorization`, and the Security Rules see no `request.auth`, so
/// rules that let anyone read still answer (docs/LIBRARY.md, "The Apple SDK's API").
public protocol FirebaseOptionalIDTokenSource: FirebaseIDTokenSource {
    /// The signed-in user's token as `idToken(afterUnauthorized:)` gives it, or nil when no one is
    /// signed in.
    func idTokenIfSignedIn(afterUnauthorized: Bool) async throws -> String?
}
