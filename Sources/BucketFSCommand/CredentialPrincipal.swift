import Foundation
import GCSStore

extension CredentialCheck {
    /// The description with the principal as far as can be learnt: the metadata server is asked
    /// for its default service account's email (within 3 s), so that `whoami` and the mount's log
    /// line name the same account (docs/CREDENTIALS.md, "whoami"). Nothing else is asked.
    func described(_ store: GCSStore?, environment: [String: String]) async -> CredentialDescription {
        var d = description
        if case .metadataServer = found.source, let store,
           let email = await store.metadataServerEmail(environment: environment, timeout: .seconds(3)) {
            d.principal = email
        }
        return d
    }
}
