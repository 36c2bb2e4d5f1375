import Foundation
import GCSStore
import Logging
import StorageModel

/// `bucketfs whoami gs://BUCKET` (docs/CREDENTIALS.md, "whoami"): who the credential chain signs
/// in as, where that came from, the impersonation chain and quota project, then a token fetched
/// and one list request, to say whether the bucket answered. Never prints a secret.
enum GCSWhoami {
    static func run(_ spec: String, gcs: GCSOptions, firebase: FirebaseOptions, logger: Logger) async throws {
        let env = ProcessInfo.processInfo.environment
        guard case .gcs(let bucket, _) = try Source.parse(spec, splitLocal: false) else {
            throw ValidationErrorText("'\(spec)' is not a gs:// source")
        }
        let check = try CredentialCheck.resolve(gcs, environment: env)
        check.logNotices(logger, mounting: false)
        let d = check.description
        print("gs://\(bucket)")
        var principal = d.principal
        let store = try openStore(.gcs(bucket: bucket, path: ""), gcs: gcs, firebase: firebase, logger: logger)
        if case .metadataServer = check.found.source, let g = store as? GCSStore,
           let email = await g.metadataServerEmail(environment: env, timeout: .seconds(3)) {
            principal = email
        }
        print("principal: \(principal)")
        print("type: \(d.type)")
        print("source: \(d.origin)")
        print("impersonation: \(d.impersonation.isEmpty ? "-" : d.impersonation.joined(separator: " → "))")
        print("quota project: \(d.quotaProject ?? "-")\(check.billingProject != nil ? " (--billing-project: also userProject= on every request)" : "")")
        guard let g = store as? GCSStore else { return }
        defer { Task { try? await g.shutdown() } }
        // A static token's time left, asked before the bucket: it explains a refusal too.
        var staticToken = "static, never refreshed"
        if let left = await g.staticTokenTimeLeft(check.found.source, environment: env, timeout: .seconds(3)) { staticToken += "; \(left)" }
        do {
            try await SourceCheck.checkCredential(g)
            try await g.probe(timeout: SourceCheck.probeTimeout)
            print("bucket: answered (listing allowed)")
        } catch let e as StorageError {
            if case .unauthenticated = e {
                if case .token = check.found.source { print("access token: \(staticToken)") }
                throw SourceCheck.explain(e, bucket: bucket, endpoint: g.endpoint, identity: check.found.source.identity)
            }
            print("bucket: \(SourceCheck.explain(e, bucket: bucket, endpoint: g.endpoint, identity: principal))")
        }
        let fetched = await g.tokenFetchCount
        print("access token: \(check.found.source.refreshable ? "fetched \(fetched), refreshed ahead of expiry" : check.found.source == .anonymous ? "none (anonymous)" : staticToken)")
    }
}
