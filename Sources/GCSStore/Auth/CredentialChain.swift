import Foundation
import StorageModel

/// Application Default Credentials in Google's order (docs/CREDENTIALS.md, "The chain"):
/// 1. `--anonymous`; `--token` / `GOOGLE_OAUTH_ACCESS_TOKEN`; `--token-url`;
/// 2. `--key-file`, else `GOOGLE_APPLICATION_CREDENTIALS`;
/// 3. with `STORAGE_EMULATOR_HOST` and none of the above (nor `--impersonate-service-account`): anonymous;
/// 4. gcloud's `application_default_credentials.json`, in `$CLOUDSDK_CONFIG` when set, else in
///    `~/.config/gcloud` (google-auth looks in one of the two, never both);
/// 5. the metadata server. With `--endpoint` it is asked only where it can be (`GCE_METADATA_HOST`
///    set, or a Google Compute Engine VM); elsewhere the chain ends anonymous, with a notice, rather
///    than wait out the metadata server on every command.
/// `--impersonate-service-account` then wraps what was found.
public struct CredentialChain: Sendable {
    public var anonymous = false
    public var token: String?
    public var tokenURL: String?
    public var keyFile: String?
    /// `--impersonate-service-account EMAIL[,EMAIL…]` as gcloud writes it: the last is the target.
    public var impersonate: String?
    public var explicitEndpoint = false

    public init(anonymous: Bool = false, token: String? = nil, tokenURL: String? = nil, keyFile: String? = nil,
                impersonate: String? = nil, explicitEndpoint: Bool = false) {
        self.anonymous = anonymous
        self.token = token
        self.tokenURL = tokenURL
        self.keyFile = keyFile
        self.impersonate = impersonate
        self.explicitEndpoint = explicitEndpoint
    }

    /// What the chain found, and the notice to log when it ended anonymous for want of anything.
    public struct Found: Sendable, Equatable {
        public var source: CredentialSource
        public var notice: String?
    }

    /// gcloud's file: `$CLOUDSDK_CONFIG/application_default_credentials.json`, else under `$HOME/.config/gcloud`.
    public static func gcloudFile(_ environment: [String: String]) -> (path: String, from: String)? {
        func given(_ s: String?) -> String? { s.flatMap { $0.isEmpty ? nil : $0 } }
        if let dir = given(environment["CLOUDSDK_CONFIG"]) {
            return (dir + "/application_default_credentials.json", "CLOUDSDK_CONFIG")
        }
        guard let home = given(environment["HOME"]) else { return nil }
        return (home + "/.config/gcloud/application_default_credentials.json", "gcloud")
    }

    /// Whether this machine says it is a Compute Engine VM (no request is made).
    public static func onGoogleCloud() -> Bool { MetadataServerSource.onGoogleCloud() }

    public func resolve(environment: [String: String], onGoogleCloud: @autoclosure () -> Bool = CredentialChain.onGoogleCloud()) -> Found {
        func given(_ s: String?) -> String? { s.flatMap { $0.isEmpty ? nil : $0 } }
        if anonymous { return Found(source: .anonymous) }
        if let t = given(token) ?? given(environment["GOOGLE_OAUTH_ACCESS_TOKEN"]) { return Found(source: .token(t)) }
        var found: Found
        if let u = given(tokenURL) {
            found = Found(source: .tokenURL(u))
        } else if let k = given(keyFile) {
            found = Found(source: .file(path: k, from: "--key-file"))
        } else if let k = given(environment["GOOGLE_APPLICATION_CREDENTIALS"]) {
            found = Found(source: .file(path: k, from: "GOOGLE_APPLICATION_CREDENTIALS"))
        } else if given(environment["STORAGE_EMULATOR_HOST"]) != nil && given(impersonate) == nil {
            return Found(source: .anonymous)
        } else if let g = Self.gcloudFile(environment), FileManager.default.fileExists(atPath: g.path) {
            found = Found(source: .file(path: g.path, from: g.from))
        } else if !explicitEndpoint || MetadataServerSource.isConfigured(environment) || onGoogleCloud() {
            found = Found(source: .metadataServer)
        } else {
            let looked = [Self.gcloudFile(environment)?.path].compactMap { $0 }
            return Found(source: .anonymous, notice: "no Google credentials found (no --key-file, GOOGLE_APPLICATION_CREDENTIALS"
                + looked.map { ", \($0)" }.joined() + ", and no metadata server here): sending requests to the endpoint without credentials")
        }
        let chain = Self.impersonationChain(impersonate)
        if !chain.isEmpty { found.source = .impersonated(found.source, chain: chain) }
        return found
    }

    static func impersonationChain(_ s: String?) -> [String] {
        (s ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

extension CredentialSource {
    /// The chain without impersonation, token URL or notice (the older entry point).
    public static func resolve(anonymous: Bool, token: String?, keyFile: String?, environment: [String: String],
                               explicitEndpoint: Bool = false, onGoogleCloud: Bool = false) -> CredentialSource {
        CredentialChain(anonymous: anonymous, token: token, keyFile: keyFile, explicitEndpoint: explicitEndpoint)
            .resolve(environment: environment, onGoogleCloud: onGoogleCloud).source
    }
}
