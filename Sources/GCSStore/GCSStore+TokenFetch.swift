import Foundation
import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import StorageModel

extension GCSStore {
    /// How to get a fresh access token for `source` (nil when there is nothing to fetch).
    /// One HTTP exchange per call; the store's retry loop retries transient failures.
    static func tokenFetcher(_ source: CredentialSource, client: HTTPClient, environment: [String: String],
                             logger: Logger) -> TokenProvider.Fetch? {
        switch source {
        case .anonymous, .token: return nil
        case .serviceAccount(let path):
            return { timeout in
                let key = try ServiceAccountKey.load(path: path)
                let assertion = try JWT.assertion(for: key, now: Date())
                var req = HTTPClientRequest(url: key.tokenURI)
                req.method = .POST
                req.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
                let form = "grant_type=\(GCSJSONAPI.encode("urn:ietf:params:oauth:grant-type:jwt-bearer"))&assertion=\(assertion)"
                req.body = .bytes(ByteBuffer(string: form))
                logger.debug("GCS: fetching an access token for \(key.clientEmail) from \(key.tokenURI)")
                return try await exchange(req, timeout: timeout, what: "token endpoint \(key.tokenURI)", unreachableIsFatal: false)
            }
        case .metadataServer:
            let host = environment["GCE_METADATA_HOST"].flatMap { $0.isEmpty ? nil : $0 } ?? "metadata.google.internal"
            let url = "http://\(host)/computeMetadata/v1/instance/service-accounts/default/token"
            return { timeout in
                var req = HTTPClientRequest(url: url)
                req.headers.add(name: "Metadata-Flavor", value: "Google")
                logger.debug("GCS: fetching an access token from the metadata server \(host)")
                // Off Google Cloud the metadata server never answers: ask briefly, then give up for good.
                return try await exchange(req, timeout: min(timeout, .seconds(3)), what: "GCE metadata server \(host)",
                                          unreachableIsFatal: true)
            }
        }

        /// Sends a token request; parses `access_token` / `expires_in`. 4xx is fatal (unauthenticated), 5xx
        /// and timeouts transient. An unreachable metadata server means "not on Google Cloud": fatal.
        @Sendable func exchange(_ req: HTTPClientRequest, timeout: Duration, what: String,
                                unreachableIsFatal: Bool) async throws -> (token: String, expiresIn: Int) {
            let resp: HTTPClientResponse
            let body: ByteBuffer
            do {
                resp = try await client.execute(req, timeout: .nanoseconds(GCSTransport.nanos(timeout)))
                body = try await resp.body.collect(upTo: 1 << 20)
            } catch {
                let e = GCSTransport.map(error)
                if unreachableIsFatal, !GCSTransport.cameFromServer(e), e != .cancelled {
                    throw StorageError.unauthenticated(message: "cannot reach the \(what) (\(e)); not on Google Cloud? "
                        + "Use --key-file, --token or --anonymous (and --endpoint for an emulator or another endpoint)")
                }
                throw e
            }
            let status = Int(resp.status.code)
            guard status == 200 else {
                let m = GCSTransport.errorMessage(body) ?? "HTTP \(status)"
                if RetryPolicy.isRetryable(status: status) { throw StorageError.unknown(status: status, message: "\(what): \(m)") }
                throw StorageError.unauthenticated(message: "\(what) refused to issue a token (HTTP \(status)): \(m)")
            }
            guard let o = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any],
                  let token = o["access_token"] as? String, !token.isEmpty else {
                throw StorageError.unauthenticated(message: "\(what) answered without an access_token")
            }
            let expires = (o["expires_in"] as? NSNumber)?.intValue ?? (o["expires_in"] as? String).flatMap { Int($0) } ?? 3600
            return (token, expires)
        }
    }
}
