import Foundation
import StorageModel

/// An access token as a source fetched it.
package struct FetchedToken: Sendable, Equatable {
    package var value: String
    /// How long it lives from its arrival; nil when the source does not say (then an hour is assumed).
    package var lifetime: Duration?
    package init(value: String, lifetime: Duration?) { self.value = value; self.lifetime = lifetime }
}

/// One kind of credential (docs/CREDENTIALS.md): how it gets a fresh access token. One call is one
/// round of exchanges (a subject token, STS, IAM...); `TokenCache` decides when to call it, and the
/// store's retry loop retries a transient failure.
package protocol AccessTokenSource: Sendable {
    func fetch(timeout: Duration) async throws -> FetchedToken
    /// Whether a refused refresh is cured by signing in again (`authorized_user`): the error then
    /// says `gcloud auth application-default login`.
    var userSignIn: Bool { get }
    /// The command that signs in again, when `userSignIn`.
    var signInFix: String { get }
}

extension AccessTokenSource {
    package var userSignIn: Bool { false }
    package var signInFix: String { TokenAnswers.loginFix }
}

/// A source whose credential could not be read: every fetch fails with the reason (the command line
/// names it before any mount; a store opened anyway fails its calls by name).
package struct FailingSource: AccessTokenSource {
    let error: StorageError
    package func fetch(timeout: Duration) async throws -> FetchedToken { throw error }
}
