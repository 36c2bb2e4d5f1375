import Foundation
import GCSStore

/// Why a gs:// credential was refused, said in the refusal itself (docs/CREDENTIALS.md, "When a
/// credential is refused"): the notices a command logs when it starts (`CredentialCheck.logNotices`)
/// sit below the default log level, so the error line carries what they said.
extension CredentialCheck {
    /// The chain's notice when it ended anonymous for want of credentials; for a static token,
    /// what the tokeninfo endpoint says of it (when there is one to ask). Nil otherwise.
    func refusalContext(_ store: GCSStore, environment: [String: String]) async -> String? {
        if let notice = found.notice { return notice }
        guard case .token = found.source else { return nil }
        if let left = await store.staticTokenTimeLeft(found.source, environment: environment, timeout: .seconds(3)) {
            return "the static token: \(left)"
        }
        return nil
    }
}
