import Foundation
import GCSStore

/// How a mount reached its bucket, recorded beside its source in `CACHE_DIR/.source`
/// (docs/OPERATING.md, "The recovery runbook"), so that `bucketfs recover` reaches the same bucket
/// the same way without being told: the endpoint (`--endpoint` or `STORAGE_EMULATOR_HOST`, when
/// one was given) and the kind of credentials (`anonymous`, `token`, `key-file` with the key
/// file's path, `metadata-server`). Never a secret: a token is recorded as its kind only, and
/// `recover` then asks for one.
struct RecordedAccess: Equatable {
    var endpoint: String?
    var credentials: String?
    var keyFile: String?

    /// What a mount of a `gs://` source used (nothing for other sources: their login is recorded
    /// by `bucketfs login`, their endpoint is the service's).
    static func of(_ source: Source, gcs: GCSOptions, environment: [String: String] = ProcessInfo.processInfo.environment) -> RecordedAccess? {
        guard case .gcs = source else { return nil }
        let endpoint = gcs.endpoint ?? environment["STORAGE_EMULATOR_HOST"].flatMap { $0.isEmpty ? nil : $0 }
        let creds = CredentialSource.resolve(anonymous: gcs.anonymous, token: gcs.token, keyFile: gcs.keyFile,
                                             environment: environment, explicitEndpoint: gcs.endpoint != nil)
        var r = RecordedAccess(endpoint: endpoint)
        switch creds {
        case .anonymous: r.credentials = "anonymous"
        case .token: r.credentials = "token"
        case .serviceAccount(let path):
            r.credentials = "key-file"
            r.keyFile = URL(fileURLWithPath: path).standardizedFileURL.path
        case .metadataServer: r.credentials = "metadata-server"
        }
        return r
    }

    var json: [String: String] {
        var o: [String: String] = [:]
        if let endpoint { o["endpoint"] = endpoint }
        if let credentials { o["credentials"] = credentials }
        if let keyFile { o["keyFile"] = keyFile }
        return o
    }

    init(endpoint: String? = nil, credentials: String? = nil, keyFile: String? = nil) {
        self.endpoint = endpoint
        self.credentials = credentials
        self.keyFile = keyFile
    }

    init(json o: [String: String]) {
        self.init(endpoint: o["endpoint"], credentials: o["credentials"], keyFile: o["keyFile"])
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
        let credentialGiven = g.anonymous || given(g.token) || given(g.keyFile)
            || given(environment["GOOGLE_OAUTH_ACCESS_TOKEN"]) || given(environment["GOOGLE_APPLICATION_CREDENTIALS"])
        if !credentialGiven {
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
        credentials == "token" ? "the mount used an access token (not recorded): give --token or GOOGLE_OAUTH_ACCESS_TOKEN" : nil
    }
}
