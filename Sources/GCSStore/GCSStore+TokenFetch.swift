import Foundation
import Logging
import StorageModel

/// The access tokens of a store's credential (docs/CREDENTIALS.md): what `GCSAuthorization` sends.
package struct StoreTokens: Sendable {
    /// Refreshing credentials; nil for anonymous and static-token access.
    package let cache: TokenCache?
    /// `--token`: sent as is, never refreshed.
    package let staticToken: String?
    /// `x-goog-user-project`: `--billing-project`, else the credential file's `quota_project_id`.
    package let userProjectHeader: String?
    /// `userProject=` on every request: `--billing-project` only.
    package let userProjectParameter: String?

    /// Builds the token source of `credentials`. A credential file that cannot be used gives a
    /// source that fails every call by name (the command line names it before any store opens).
    package static func make(_ credentials: CredentialSource, billingProject: String?, environment: [String: String],
                             transport: any TokenTransport, clock: BucketClock = .real) -> StoreTokens {
        var quota: String? = nil
        func source(_ c: CredentialSource) -> (any AccessTokenSource)? {
            switch c {
            case .anonymous, .token: return nil
            case .metadataServer: return MetadataServerSource(environment: environment, transport: transport)
            case .tokenURL(let u): return TokenURLSource(url: u, transport: transport, clock: clock)
            case .file(let path, _):
                do {
                    let file = try CredentialFile.read(path)
                    quota = file.quotaProject
                    return try file.source(environment: environment, transport: transport, clock: clock)
                } catch let e as StorageError {
                    return FailingSource(error: e)
                } catch {
                    return FailingSource(error: .unauthenticated(message: "\(path): \(error)"))
                }
            case .impersonated(let base, let chain):
                let from: any AccessTokenSource
                switch base {
                case .file(let path, _):
                    // Impersonation's source asks for IAM's scope, as google-auth's does.
                    do {
                        let file = try CredentialFile.read(path)
                        quota = file.quotaProject
                        from = try file.source(scope: GoogleAuth.iamScope, environment: environment, transport: transport, clock: clock)
                    } catch {
                        from = FailingSource(error: error as? StorageError ?? .unauthenticated(message: "\(path): \(error)"))
                    }
                default:
                    guard let s = source(base) else {
                        return FailingSource(error: .unauthenticated(message: "--impersonate-service-account needs a credential to impersonate with (not \(base))"))
                    }
                    from = s
                }
                let target = chain.last ?? ""
                return ImpersonatedSource(source: from, target: target, delegates: chain.count > 1 ? Array(chain.dropLast()) : nil,
                                          url: GoogleAuth.generateAccessTokenURL(target, environment: environment),
                                          urlSetting: GoogleAuth.iamCredentialsSetting(environment),
                                          transport: transport, clock: clock)
            }
        }
        let s = source(credentials)
        var token: String? = nil
        if case .token(let t) = credentials { token = t }
        let billing = billingProject.flatMap { $0.isEmpty ? nil : $0 }
        // GOOGLE_CLOUD_QUOTA_PROJECT over the file's quota_project_id (not for anonymous requests: no one to bill).
        let fromEnvironment = credentials == .anonymous ? nil : GoogleAuth.quotaProject(environment)
        return StoreTokens(cache: s.map { TokenCache(source: $0, clock: clock) }, staticToken: token,
                           userProjectHeader: billing ?? fromEnvironment ?? quota, userProjectParameter: billing)
    }
}
