import Foundation
import StorageModel

/// Where the Cloud Storage backend gets its `Authorization` header from (docs/CREDENTIALS.md).
public indirect enum CredentialSource: Sendable, Equatable, CustomStringConvertible {
    /// No `Authorization` header (public buckets, emulators).
    case anonymous
    /// A static OAuth2 bearer token (`--token`, `GOOGLE_OAUTH_ACCESS_TOKEN`). Never refreshed.
    case token(String)
    /// A credential JSON file, read by its `type`; `from` says what named it (`--key-file`,
    /// `GOOGLE_APPLICATION_CREDENTIALS`, `CLOUDSDK_CONFIG`, `gcloud`).
    case file(path: String, from: String)
    /// The GCE metadata server (`GCE_METADATA_HOST` or metadata.google.internal).
    case metadataServer
    /// `--token-url`: a local endpoint answering `{access_token, expires_in}`.
    case tokenURL(String)
    /// `--impersonate-service-account`: `chain` as gcloud writes it, delegates first, the target last.
    case impersonated(CredentialSource, chain: [String])

    /// A service account key given with `--key-file` (the name tests and older callers use).
    public static func serviceAccount(path: String) -> CredentialSource { .file(path: path, from: "--key-file") }

    /// Safe to log: never contains a token or key material.
    public var description: String {
        switch self {
        case .anonymous: return "anonymous"
        case .token: return "static token <redacted>"
        case .file(let p, let from): return "credential file \(p) (\(from))"
        case .metadataServer: return "GCE metadata server"
        case .tokenURL(let u): return "token URL \(u)"
        case .impersonated(let base, let chain): return "\(base), impersonating \(chain.joined(separator: " → "))"
        }
    }

    /// Whether a 401 may be cured by fetching a new token.
    public var refreshable: Bool {
        switch self {
        case .anonymous, .token: return false
        default: return true
        }
    }

    /// The credential file the chain reads, if any.
    public var file: (path: String, from: String)? {
        switch self {
        case .file(let p, let f): return (p, f)
        case .impersonated(let base, _): return base.file
        default: return nil
        }
    }

    /// Reads and checks a credential file without contacting anyone (its type known, its fields
    /// present, a key able to sign). Returns who it signs in as.
    public static func checkFile(_ path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> String {
        let file = try CredentialFile.read(path)
        _ = try file.source(environment: environment, transport: NoTransport(), clock: .real)
        return file.principal
    }

    /// The older name of `checkFile`.
    public static func checkKeyFile(_ path: String) throws -> String { try checkFile(path) }

    /// Who the requests are sent as, for messages (never a secret).
    public var identity: String {
        switch self {
        case .anonymous: return "anonymous (no credentials)"
        case .token: return "the access token from --token / GOOGLE_OAUTH_ACCESS_TOKEN"
        case .file(let p, _):
            guard let f = try? CredentialFile.read(p) else { return "the credential file \(p)" }
            return "\(f.principal) (\(f.typeChain) from \(p))"
        case .metadataServer: return "the GCE metadata server's default service account"
        case .tokenURL(let u): return "the token from \(u)"
        case .impersonated(let base, let chain): return "\(chain.last ?? "?") impersonated by \(base.identity)"
        }
    }
}

/// A transport for checks that send nothing.
struct NoTransport: TokenTransport {
    func send(_ request: TokenRequest, timeout: Duration) async throws -> TokenResponse {
        throw StorageError.unauthenticated(message: "no request may be sent here")
    }
}
