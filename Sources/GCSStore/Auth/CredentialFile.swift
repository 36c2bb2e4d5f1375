import Foundation
import StorageModel

/// A credential JSON file, read by its `type` (docs/CREDENTIALS.md): `service_account`,
/// `authorized_user`, `impersonated_service_account`, `external_account`,
/// `external_account_authorized_user`. Anything else is refused by name.
package struct CredentialFile: @unchecked Sendable {
    package let path: String
    package let type: String
    let object: [String: Any]

    package static let types = ["service_account", "authorized_user", "impersonated_service_account", "external_account",
                                "external_account_authorized_user"]

    /// Reads and checks the file; an unreadable, malformed or unknown one is `unauthenticated`, named.
    package static func read(_ path: String) throws -> CredentialFile {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw StorageError.unauthenticated(message: "\(path) is a directory, not a credential file: give the JSON file itself")
        }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw StorageError.unauthenticated(message: "cannot read the credential file \(path): \(error.localizedDescription)")
        }
        guard let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw StorageError.unauthenticated(message: "\(path) is not a credential file: it is not a JSON object")
        }
        return try CredentialFile(path: path, object: o)
    }

    init(path: String, object o: [String: Any]) throws {
        guard let type = o["type"] as? String else {
            throw StorageError.unauthenticated(message: "\(path) is not a credential file: it has no \"type\" (one of \(Self.types.joined(separator: ", ")))")
        }
        guard Self.types.contains(type) else {
            throw StorageError.unauthenticated(message: "\(path) has the credential type \"\(type)\", which bucketfs does not know (it reads \(Self.types.joined(separator: ", ")))")
        }
        // Another universe has its own token and storage endpoints, which bucketfs does not know.
        if let u = o["universe_domain"] as? String, !u.isEmpty, u != GoogleAuth.defaultUniverse {
            throw StorageError.unauthenticated(message: "\(path) is for the universe \"\(u)\": bucketfs reaches Google's default universe "
                + "(\(GoogleAuth.defaultUniverse)) only")
        }
        self.path = path
        self.type = type
        self.object = o
    }

    /// Whether the file holds a secret (a private key, a refresh token, a client secret): such a file
    /// should be readable by its owner only (CredentialCheck warns otherwise).
    package var holdsSecret: Bool {
        func has(_ o: [String: Any]) -> Bool {
            ["private_key", "refresh_token", "client_secret"].contains { (o[$0] as? String).map { !$0.isEmpty } ?? false }
        }
        return has(object) || (object["source_credentials"] as? [String: Any]).map(has) ?? false
    }

    /// The `delegates` of an `impersonated_service_account` file, as emails.
    package var delegates: [String] {
        (object["delegates"] as? [String] ?? []).map { $0.components(separatedBy: "/serviceAccounts/").last ?? $0 }
    }

    /// `quota_project_id` (of any type, a service-account key's too, as google-auth reads it): sent as
    /// `x-goog-user-project` unless `GOOGLE_CLOUD_QUOTA_PROJECT` or `--billing-project` replaces it.
    package var quotaProject: String? { (object["quota_project_id"] as? String).flatMap { $0.isEmpty ? nil : $0 } }

    /// The target of the file's impersonation, if any.
    package var impersonationTarget: String? {
        (object["service_account_impersonation_url"] as? String).flatMap(ImpersonatedSource.target(ofURL:))
    }

    /// Who the file signs in as, as far as it tells, without a request.
    package var principal: String {
        if let t = impersonationTarget { return t }
        switch type {
        case "service_account": return object["client_email"] as? String ?? "?"
        case "authorized_user":
            if let a = object["account"] as? String, !a.isEmpty { return a }
            return "a user signed in with gcloud (client \(object["client_id"] as? String ?? "?"))"
        case "external_account", "external_account_authorized_user":
            return "external identity of \(object["audience"] as? String ?? "?")"
        default: return "?"
        }
    }

    /// The source credential of an `impersonated_service_account` file.
    var sourceCredentials: CredentialFile? {
        get throws {
            guard type == "impersonated_service_account" else { return nil }
            guard let s = object["source_credentials"] as? [String: Any] else {
                throw StorageError.unauthenticated(message: "\(path) is not a usable impersonated_service_account file (source_credentials is required)")
            }
            let inner = try CredentialFile(path: "\(path) (source_credentials)", object: s)
            if inner.type == "impersonated_service_account" {
                throw StorageError.unauthenticated(message: "\(path): source_credentials may not be impersonated_service_account itself")
            }
            return inner
        }
    }

    /// What the file's type says about how it is reached: `service_account`, then for
    /// impersonation `authorized_user → impersonated_service_account` and so on.
    package var typeChain: String {
        if let inner = try? sourceCredentials { return "\(inner.type) → \(type)" }
        return type
    }

    /// The token source this file describes, asking for `scope` (the storage scope; IAM's when the
    /// token is itself impersonation's source).
    package func source(scope: String = GoogleAuth.storageScope, environment: [String: String], transport: any TokenTransport,
                        clock: BucketClock) throws -> any AccessTokenSource {
        switch type {
        case "service_account":
            return try ServiceAccountSource(object, path: path, scope: scope, environment: environment, transport: transport, clock: clock)
        case "authorized_user":
            // A user's grant keeps its scopes: none is asked for when it is impersonation's source.
            return try AuthorizedUserSource(object, path: path, scope: scope == GoogleAuth.iamScope ? nil : scope,
                                            environment: environment, transport: transport)
        case "external_account_authorized_user":
            return try ExternalAccountAuthorizedUserSource(object, path: path, transport: transport)
        case "external_account":
            let target = impersonationTarget
            let url = object["service_account_impersonation_url"] as? String
            if url != nil && target == nil {
                throw StorageError.unauthenticated(message: "\(path): service_account_impersonation_url does not name a service account")
            }
            let sts = try ExternalAccountSource(object, path: path, scope: target != nil ? GoogleAuth.iamScope : scope,
                                                impersonated: target, environment: environment, transport: transport, clock: clock)
            guard let url, let target else { return sts }
            let options = object["service_account_impersonation"] as? [String: Any]
            let lifetime = (options?["token_lifetime_seconds"] as? NSNumber)?.intValue ?? 3600
            return ImpersonatedSource(source: sts, target: target, delegates: nil, url: url,
                                      urlSetting: "service_account_impersonation_url in \(path)", scope: scope, lifetime: lifetime,
                                      transport: transport, clock: clock)
        case "impersonated_service_account":
            // The file's URL names the target only: the token comes from IAM Credentials itself
            // (`BUCKETFS_IAM_CREDENTIALS_URL` moves it), as google-auth asks it.
            guard let inner = try sourceCredentials, let target = impersonationTarget else {
                throw StorageError.unauthenticated(message: "\(path) is not a usable impersonated_service_account file (service_account_impersonation_url naming a service account is required)")
            }
            let source = try inner.source(scope: GoogleAuth.iamScope, environment: environment, transport: transport, clock: clock)
            return ImpersonatedSource(source: source, target: target, delegates: object["delegates"] as? [String],
                                      url: GoogleAuth.generateAccessTokenURL(target, environment: environment),
                                      urlSetting: GoogleAuth.iamCredentialsSetting(environment), scope: scope, transport: transport, clock: clock)
        default:
            throw StorageError.unauthenticated(message: "\(path): unknown credential type \(type)")
        }
    }
}
