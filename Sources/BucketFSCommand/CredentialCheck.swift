import Foundation
import GCSStore
import Logging
import StorageModel

/// The gs:// credential as the options and environment choose it (docs/CREDENTIALS.md), checked
/// before any request: a credential file that cannot be used is a `SourceProblem` naming it and
/// what set it; what was chosen is said in one line without secrets (the mount logs it, `whoami`
/// prints its parts).
struct CredentialCheck {
    let found: CredentialChain.Found
    let description: CredentialDescription
    let billingProject: String?
    /// Said at warning level when a command or mount starts: a credential file others can read.
    var warnings: [String] = []

    static func resolve(_ gcs: GCSOptions, environment: [String: String]) throws(SourceProblem) -> CredentialCheck {
        let found = gcs.credentialChain.resolve(environment: environment)
        if let (path, from) = found.source.file {
            do { _ = try CredentialSource.checkFile(path, environment: environment) } catch {
                let named = from == "--key-file" ? "--key-file \(path)" : from == "GOOGLE_APPLICATION_CREDENTIALS" ? "GOOGLE_APPLICATION_CREDENTIALS=\(path)" : "\(path), gcloud's application default credentials (\(from))"
                throw SourceProblem("bad credential file (\(named)): \(SourceCheck.reason(error)). See docs/CREDENTIALS.md for "
                    + "each type and how to get it (`gcloud auth application-default login` for your own account)")
            }
        }
        if case .tokenURL(let u) = found.source, !(u.hasPrefix("http://") || u.hasPrefix("https://") || u.hasPrefix("unix:") || u.hasPrefix("http+unix://")) {
            throw SourceProblem("--token-url \(u): give http://HOST:PORT/PATH, unix:/path/to.sock or http+unix://%2Fpath%2Fto.sock/PATH")
        }
        let description = CredentialDescription(found.source, environment: environment,
                                                billingProject: gcs.billingProject.flatMap { $0.isEmpty ? nil : $0 })
        var check = CredentialCheck(found: found, description: description, billingProject: gcs.billingProject)
        if let (path, _) = found.source.file, let warning = Self.readableByOthers(path) { check.warnings.append(warning) }
        return check
    }

    /// Logs what a mount or command is about to use: the notice of a chain that found nothing, and
    /// that a static token is never refreshed.
    func logNotices(_ logger: Logger, mounting: Bool) {
        for w in warnings { logger.warning("\(w)") }
        if let n = found.notice { logger.notice("\(n)") }
        if mounting, case .token = found.source {
            logger.notice("--token / GOOGLE_OAUTH_ACCESS_TOKEN is a static access token: it is never refreshed, and requests fail once it expires (Google's last an hour); use a credential file or --token-url for long mounts")
        }
    }
}

extension CredentialCheck {
    /// A credential file holding a secret that its group or others may read (as ssh warns of a
    /// private key): the warning, or nil.
    static func readableByOthers(_ path: String) -> String? {
        guard let mode = (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber,
              mode.intValue & 0o044 != 0, let file = try? CredentialFile.read(path), file.holdsSecret else { return nil }
        return "the credential file \(path) can be read by other users (mode \(String(mode.intValue & 0o777, radix: 8))) and holds a secret: "
            + "chmod 600 \(path)"
    }
}

/// Who the requests go as, and where that came from, as far as the credential tells without asking
/// anyone. Never a secret.
struct CredentialDescription: CustomStringConvertible {
    var principal: String
    var origin: String
    var type: String
    var impersonation: [String] = []
    var quotaProject: String?
    /// What set `quotaProject` when not the credential file: `GOOGLE_CLOUD_QUOTA_PROJECT`, `--billing-project`.
    var quotaProjectFrom: String?

    init(_ source: CredentialSource, environment: [String: String], billingProject: String?) {
        self = Self.describe(source, environment: environment)
        if source != .anonymous, let q = GoogleAuth.quotaProject(environment) {
            (quotaProject, quotaProjectFrom) = (q, GoogleAuth.quotaProjectVariable)
        }
        if let billingProject { (quotaProject, quotaProjectFrom) = (billingProject, "--billing-project") }
    }

    private init(principal: String, origin: String, type: String) {
        self.principal = principal
        self.origin = origin
        self.type = type
    }

    private static func describe(_ s: CredentialSource, environment: [String: String]) -> CredentialDescription {
        switch s {
        case .anonymous:
            let emulator = environment["STORAGE_EMULATOR_HOST"].map { !$0.isEmpty } ?? false
            return CredentialDescription(principal: "anonymous", origin: emulator ? "STORAGE_EMULATOR_HOST" : "--anonymous, or no credential found",
                                         type: "none")
        case .token:
            return CredentialDescription(principal: "the holder of the access token", origin: "--token / GOOGLE_OAUTH_ACCESS_TOKEN",
                                         type: "static access token (never refreshed)")
        case .tokenURL(let u):
            return CredentialDescription(principal: "the identity behind \(u)", origin: "--token-url \(u)", type: "token URL")
        case .metadataServer:
            let host = environment["GCE_METADATA_HOST"].flatMap { $0.isEmpty ? nil : $0 } ?? "metadata.google.internal"
            return CredentialDescription(principal: "the default service account of this machine", origin: "metadata server \(host)",
                                         type: "metadata server")
        case .file(let path, let from):
            let origin = from == "--key-file" ? "--key-file \(path)" : from == "GOOGLE_APPLICATION_CREDENTIALS"
                ? "GOOGLE_APPLICATION_CREDENTIALS=\(path)" : "\(path) (gcloud application default credentials)"
            guard let f = try? CredentialFile.read(path) else { return CredentialDescription(principal: "?", origin: origin, type: "unreadable") }
            var d = CredentialDescription(principal: f.principal, origin: origin, type: f.typeChain)
            d.quotaProject = f.quotaProject
            if let t = f.impersonationTarget { d.impersonation = f.delegates + [t] }
            return d
        case .impersonated(let base, let chain):
            var d = describe(base, environment: environment)
            d.principal = chain.last ?? d.principal
            d.impersonation += chain
            d.origin += ", --impersonate-service-account"
            return d
        }
    }

    var description: String {
        var s = "credentials: \(principal) (\(type), from \(origin)"
        if !impersonation.isEmpty { s += ", impersonating \(impersonation.joined(separator: " → "))" }
        s += ")"
        if let quotaProject { s += ", quota project \(quotaProject)" + (quotaProjectFrom.map { " (\($0))" } ?? "") }
        return s
    }
}
