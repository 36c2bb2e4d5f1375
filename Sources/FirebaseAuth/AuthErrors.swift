import Foundation
import StorageModel

/// The Apple SDK's error domain for Auth.
public let AuthErrorDomain = "FIRAuthErrorDomain"

/// Auth's refusals as the Apple SDK reports them: `NSError`s in `AuthErrorDomain` with its codes,
/// the server's reason in the description.
enum AuthErrors {
    /// The SDK's codes for the server's reasons this library meets.
    static let codes: [(reason: String, code: Int)] = [
        ("INVALID_CUSTOM_TOKEN", 17000), ("CREDENTIAL_MISMATCH", 17002), ("INVALID_LOGIN_CREDENTIALS", 17004),
        ("USER_DISABLED", 17005), ("ADMIN_ONLY_OPERATION", 17006), ("OPERATION_NOT_ALLOWED", 17006),
        ("EMAIL_EXISTS", 17007), ("INVALID_EMAIL", 17008), ("INVALID_PASSWORD", 17009),
        ("TOO_MANY_ATTEMPTS_TRY_LATER", 17010), ("EMAIL_NOT_FOUND", 17011), ("USER_NOT_FOUND", 17011),
        ("TOKEN_EXPIRED", 17021), ("INVALID_API_KEY", 17023),
    ]
    static let networkError = 17020
    static let internalError = 17999

    static func nsError(_ error: Error) -> NSError {
        let ns = error as NSError
        if ns.domain == AuthErrorDomain { return ns }
        let message = "\(error)"
        let code: Int
        if let known = codes.first(where: { message.contains($0.reason) }) {
            code = known.code
        } else if let e = error as? StorageModel.StorageError, e.isTransient {
            code = networkError
        } else {
            code = internalError
        }
        return NSError(domain: AuthErrorDomain, code: code, userInfo: [NSLocalizedDescriptionKey: message,
                                                                       NSUnderlyingErrorKey: error])
    }
}
