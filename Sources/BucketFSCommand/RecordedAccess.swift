import Foundation
import GCSStore

/// How a mount reached its bucket, recorded beside its source in `CACHE_DIR/.source`
/// (docs/OPERATING.md, "The recovery runbook"), so that `bucketfs recover` reaches the same bucket
/// the same way without being told: the endpoint (`--endpoint` or `STORAGE_EMULATOR_HOST`, when
/// one was given) and the kind of credentials (`anonymous`, `token`, `key-file` with the
/// credential file's path, `metadata-server`, `token-url`; and the accounts impersonated). Never
/// a secret: a token or a token URL is recorded as its kind only, and `recover` then asks for it.
struct RecordedAccess: Equatable {
    var endpoint: String?
    var credentials: String?
    var keyFile: String?
    var impersonate: String?

    /// What a mount of a `gs://` source used (nothing for other sources: their login is recorded
    /// by `bucketfs login`, their endpoint is the service's). A credential file is recorded by
    /// its path (`--key-file`, GOOGLE_APPLICATION_CREDENTIALS or gcloud's), impersonation by the
    /// accounts' names; a token or a token URL by its kind only.
    static func of(_ source: Source, gcs: GCSOptions, environment: [String: String] = ProcessInfo.processInfo.environment) -> RecordedAccess? {
        guard case .gcs = source else { return nil }
        let endpoint = gcs.endpoint ?? environment["STORAGE_EMULATOR_HOST"].flatMap { $0.isEmpty ? nil : $0 }
        var r = RecordedAccess(endpoint: endpoint)
        var creds = gcs.credentialChain.resolve(environment: environment, onGoogleCloud: false).source
        if case .impersonated(let base, let chain) = creds {
            r.impersonate = chain.joined(separator: ",")
            creds = base
        }
        switch creds {
        case .anonymous: r.credentials = "anonymous"
        case .token: r.credentials = "token"
        case .file(let path, _):
            r.credentials = "key-file"
            r.keyFile = URL(fileURLWithPath: path).standardizedFileURL.path
        case .metadataServer: r.credentials = "metadata-server"
        case .tokenURL: r.credentials = "token-url"
        case .impersonated: r.credentials = "impersonated"
        }
        return r
    }

    var json: [String: String] {
        var o: [String: String] = [:]
        if let endpoint { o["endpoint"] = endpoint }
        if let credentials { o["credentials"] = credentials }
        if let keyFile { o["keyFile"] = keyFile }
        if let impersonate { o["impersonate"] = impersonate }
        return o
    }

    init(endpoint: String? = nil, credentials: String? = nil, keyFile: String? = nil, impersonate: String? = nil) {
        self.endpoint = endpoint
        self.credentials = credentials
        self.keyFile = keyFile
        self.impersonate = impersonate
    }

    init(json o: [String: String]) {
        self.init(endpoint: o["endpoint"], credentials: o["credentials"], keyFile: o["keyFile"], impersonate: o["impersonate"])
    }

    /// `gcs` with what was recorded filled in where the command line and the environment say
    /// nothing: the endpoint, and the credentials when none is given. Returns the options and a
    /// line saying what was taken from the record (nil when nothing was).
    func apply(to gcs: GCSOptions, environment: [String: String] = ProcessInfo.processInfo.environment) -> (GCSOptions, String?) {
        var g = gcs
        var used: [String] = []
        func given(_ s: String?) -> Bool { !(s ?? "").isEmpty }
        if let endpoint, g.endpoint == nil, !given(environment["STORAGE_EMULATOR_HOST"]) {
            g.endpoint = endpoint
            used.append("--endpoint \(endpoint)")
        }
        let credentialGiven = g.anonymous || given(g.token) || given(g.keyFile) || given(g.tokenURL) || given(g.impersonate)
            || given(environment["GOOGLE_OAUTH_ACCESS_TOKEN"]) || given(environment["GOOGLE_APPLICATION_CREDENTIALS"])
        if !credentialGiven {
            if let impersonate {
                g.impersonate = impersonate
                used.append("--impersonate-service-account \(impersonate)")
            }
            switch credentials {
            case "anonymous":
                g.anonymous = true
                used.append("--anonymous")
            case "key-file":
                if let keyFile {
                    g.keyFile = keyFile
                    used.append("--key-file \(keyFile)")
                }
            default: break
            }
        }
        return (g, used.isEmpty ? nil : "as the mount did (recorded in the cache directory): " + used.joined(separator: " "))
    }

    /// When the mount used a token, which is never recorded: what to give.
    var missingSecret: String? {
        switch credentials {
        case "token": return "the mount used an access token (not recorded): give --token or GOOGLE_OAUTH_ACCESS_TOKEN"
        case "token-url": return "the mount used a token URL (not recorded): give --token-url again"
        default: return nil
        }
    }
}
