import CloudHTTP
import Foundation
import StorageModel

/// The check `bucketfs mount` (and each library command) makes before it starts: one list request
/// (maxResults=1) under its own short deadline, so a bucket that does not exist, credentials that
/// cannot list it, or an endpoint that never answers are refused within seconds.
extension GCSStore {
    /// Lists at most one name under the store's prefix. Throws the store's typed errors; bounded by
    /// `timeout` whatever the endpoint does (retries of transient failures included).
    public func probe(timeout: Duration) async throws {
        let url = bucketPath + CloudURL.query([
            ("prefix", prefix.isEmpty ? nil : prefix), ("delimiter", "/"), ("maxResults", "1"), ("fields", "kind"),
        ])
        _ = try await transport.send("list", path: "", idempotent: true, deadline: transport.clock.now + timeout,
                                     CloudRequest(.GET, url))
    }
}

extension GCSStore {
    /// Gets an access token within `limit`, before the probe, so that a credential that is refused
    /// or does not answer (an executable at its timeout, a token endpoint down) is named as such,
    /// not as storage. Anonymous and static-token stores have nothing to check. A transient failure
    /// is left to the probe, which retries it.
    public func checkCredential(within limit: Duration) async throws {
        guard let cache = tokens.cache else { return }
        let clock = transport.clock
        let got = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { _ = try await cache.token(timeout: limit); return true }
            group.addTask { try await clock.sleep(for: limit); return false }
            defer { group.cancelAll() }
            return try await group.next() ?? false
        }
        if !got { throw StorageError.timeout(message: HTTPTransport.noTokenWithin(limit)) }
    }
}

extension GCSStore {
    /// The email of the metadata server's default service account (whoami), or nil when it does
    /// not say within `timeout`.
    public func metadataServerEmail(environment: [String: String], timeout: Duration) async -> String? {
        let source = MetadataServerSource(environment: environment, transport: HTTPTokenTransport(tokenRequests))
        guard let email = try? await source.email(timeout: timeout), email.contains("@") else { return nil }
        return email.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

extension GCSStore {
    /// What the tokeninfo endpoint says of a static `--token` (TokenInfo): nil for any other
    /// credential, or when there is nowhere to ask (requests go to an emulator or another endpoint
    /// and `BUCKETFS_TOKENINFO_URL` is unset).
    public func staticTokenTimeLeft(_ source: CredentialSource, environment: [String: String], timeout: Duration) async -> String? {
        guard case .token(let token) = source,
              let url = TokenInfo.url(environment: environment, storageEndpointIsGoogle: endpoint == Self.defaultEndpoint) else { return nil }
        switch await TokenInfo.ask(token, url: url, through: HTTPTokenTransport(tokenRequests), timeout: timeout) {
        case .valid(let info):
            return info.timeLeft(now: transport.clock.date) + (info.email.map { ", for \($0)" } ?? "") + " (\(url))"
        case .invalid(let why):
            return "not valid now, \(url) says: \(why); requests will be refused (401)"
        case .unknown(let why):
            return "time left unknown: \(why)"
        }
    }
}
