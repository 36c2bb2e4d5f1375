import ArgumentParser
import Foundation
import GCSStore
import Logging
import StorageModel

/// `bucketfs whoami gs://BUCKET` (docs/CREDENTIALS.md, "whoami"): who the credential chain signs
/// in as, where that came from, the impersonation chain and quota project, then a token fetched
/// and one list request, to say whether the bucket answered. Never prints a secret. Exits 0 only
/// when the bucket answered the list (a token fetched first where the credential needs one), so
/// scripts can use it as a check; 1 otherwise, after the whole report.
enum GCSWhoami {
    static func run(_ spec: String, gcs: GCSOptions, firebase: FirebaseOptions, logger: Logger) async throws {
        let env = ProcessInfo.processInfo.environment
        guard case .gcs(let bucket, _) = try Source.parse(spec, splitLocal: false) else {
            throw ValidationErrorText("'\(spec)' is not a gs:// source")
        }
        let check = try CredentialCheck.resolve(gcs, environment: env)
        check.logNotices(logger, mounting: false)
        print("gs://\(bucket)")
        let store = try openStore(.gcs(bucket: bucket, path: ""), gcs: gcs, firebase: firebase, logger: logger)
        let d = await check.described(store as? GCSStore, environment: env)
        let principal = d.principal
        print("principal: \(principal)")
        print("type: \(d.type)")
        print("source: \(d.origin)")
        print("impersonation: \(d.impersonation.isEmpty ? "-" : d.impersonation.joined(separator: " → "))")
        let quotaFrom = d.quotaProjectFrom == "--billing-project" ? " (--billing-project: also userProject= on every request)"
            : d.quotaProjectFrom.map { " (\($0))" } ?? ""
        print("quota project: \(d.quotaProject ?? "-")\(quotaFrom)")
        guard let g = store as? GCSStore else { return }
        defer { Task { try? await g.shutdown() } }
        // A static token's time left, asked before the bucket: it explains a refusal too.
        var staticToken = "static, never refreshed"
        if let left = await g.staticTokenTimeLeft(check.found.source, environment: env, timeout: .seconds(3)) { staticToken += "; \(left)" }
        var answered = false
        do {
            try await SourceCheck.checkCredential(g)
            try await g.probe(timeout: SourceCheck.probeTimeout)
            print("bucket: answered (listing allowed)")
            answered = true
            do { print(BucketLayout.describe(try await g.learnLayout(timeout: SourceCheck.probeTimeout))) } catch {
                print("bucket layout: unknown (\(error))")
            }
        } catch let e as StorageError {
            if case .unauthenticated = e {
                if case .token = check.found.source { print("access token: \(staticToken)") }
                throw SourceCheck.explain(e, bucket: bucket, endpoint: g.endpoint, identity: check.found.source.identity,
                                          why: check.found.notice)
            }
            print("bucket: \(SourceCheck.explain(e, bucket: bucket, endpoint: g.endpoint, identity: principal))")
        }
        let fetched = await g.tokenFetchCount
        print("access token: \(check.found.source.refreshable ? "fetched \(fetched), refreshed ahead of expiry" : check.found.source == .anonymous ? "none (anonymous)" : staticToken)")
        if !answered { throw ExitCode(1) }
    }
}
