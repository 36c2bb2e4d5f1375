import Foundation
import AsyncHTTPClient
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import StorageModel

/// One HTTP exchange as the backend describes it; the transport adds authorization.
struct GCSRequest: Sendable {
    var method: HTTPMethod
    var url: String
    var headers: HTTPHeaders = [:]
    /// Always sent with a Content-Length (empty bodies as `Content-Length: 0` where a body is expected).
    var body: ByteBuffer?

    init(_ method: HTTPMethod, _ url: String, headers: HTTPHeaders = [:], body: ByteBuffer? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

struct GCSResponse: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: ByteBuffer

    var data: Data { Data(buffer: body, byteTransferStrategy: .noCopy) }
    func json() throws -> [String: Any] {
        guard let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw StorageError.unknown(status: status, message: "the server's answer is not a JSON object")
        }
        return o
    }
}

/// What happened to one attempt, so the retry loop can decide.
private enum Outcome {
    case done(GCSResponse)
    /// `status` is the HTTP status when the server answered.
    case failed(StorageError, retryable: Bool, status: Int?)
}

/// The shared HTTP client, credentials and the retry loop.
final class GCSTransport: Sendable {
    let client: HTTPClient
    let tokens: TokenProvider
    let credentials: CredentialSource
    let policy: RetryPolicy
    let logger: Logger
    let bucket: String
    /// Largest response body accepted in memory (downloads are ranged by callers).
    let maxResponseBytes = 1 << 31

    init(client: HTTPClient, tokens: TokenProvider, credentials: CredentialSource, policy: RetryPolicy,
         logger: Logger, bucket: String) {
        self.client = client
        self.tokens = tokens
        self.credentials = credentials
        self.policy = policy
        self.logger = logger
        self.bucket = bucket
    }

    /// Sends `request` with retries when `idempotent`, until `deadline` (default: now + policy deadline).
    /// Statuses in 200..<300 and those `accept` admits are returned; others become typed errors.
    func send(_ what: String, path: String, idempotent: Bool, deadline: ContinuousClock.Instant? = nil,
              accept: (Int) -> Bool = { _ in false }, _ request: GCSRequest) async throws -> GCSResponse {
        let end = deadline ?? ContinuousClock.now + policy.deadline
        var attempts = 0
        var refreshedAfter401 = false
        var lastError: StorageError?
        var lastAnswer: StorageError?  // the last error the server itself gave (a status)
        while true {
            if Task.isCancelled { throw StorageError.cancelled }
            let remaining = end - ContinuousClock.now
            if remaining <= .zero { throw giveUp(what, path: path, attempts: attempts, last: lastError, answer: lastAnswer) }
            attempts += 1
            switch await attempt(request, timeout: min(policy.requestTimeout, remaining), path: path,
                                 idempotent: idempotent, accept: accept) {
            case .done(let r):
                return r
            case .failed(let e, _, _) where e == .cancelled:
                throw e
            case .failed(.unauthenticated(let m), _, 401?) where tokens.canRefresh && !refreshedAfter401:
                // A 401 means the request did nothing: fetch a fresh token and try once more.
                refreshedAfter401 = true
                await tokens.invalidate()
                logger.debug("GCS \(what) \(path): 401 (\(m)); refreshing the access token")
                continue
            case .failed(.unauthenticated(let m), _, _):
                throw StorageError.unauthenticated(message: "\(m) (credentials: \(credentials); see --key-file, --token, --anonymous)")
            case .failed(let e, let retryable, _):
                guard retryable else { throw e }
                lastError = e
                if Self.cameFromServer(e) { lastAnswer = e }
            }
            let pause = policy.delay(beforeRetry: attempts, random: Double.random(in: 0...1))
            if ContinuousClock.now + pause >= end {
                throw giveUp(what, path: path, attempts: attempts, last: lastError, answer: lastAnswer)
            }
            logger.debug("GCS \(what) \(path): \(lastError.map { "\($0)" } ?? "error"); retry \(attempts) in \(pause)")
            Counter(label: "bucketfs_store_retries_total", dimensions: [("operation", what)]).increment()
            do { try await Task.sleep(for: pause) } catch { throw StorageError.cancelled }
        }
    }

    private func giveUp(_ what: String, path: String, attempts: Int, last: StorageError?,
                        answer: StorageError?) -> StorageError {
        let shown = path.isEmpty ? "gs://\(bucket)" : path
        if attempts <= 1, case .timeout(let m)? = last { return .timeout(message: "\(what) \(shown): \(m)") }
        if attempts == 0 { return .timeout(message: "\(what) \(shown): deadline of \(policy.deadline) passed") }
        var cause = last.map { "\($0)" } ?? "no answer"
        if let answer, answer != last { cause += " (last answer from the server: \(answer))" }
        return .retryLimitExceeded(message: "\(what) \(shown): gave up after \(attempts) attempts within \(policy.deadline): \(cause)")
    }

    /// One exchange: authorization, request, whole body.
    private func attempt(_ r: GCSRequest, timeout: Duration, path: String, idempotent: Bool,
                         accept: (Int) -> Bool) async -> Outcome {
        var req = HTTPClientRequest(url: r.url)
        req.method = r.method
        req.headers = r.headers
        do {
            if let auth = try await tokens.authorization(timeout: timeout) {
                req.headers.replaceOrAdd(name: "Authorization", value: auth)
            }
        } catch {
            // No request was sent: a transient token failure is always safe to retry.
            let e = Self.map(error)
            return .failed(e, retryable: e.isTransient, status: nil)
        }
        if let body = r.body {
            req.body = .bytes(body)
        } else if r.method == .POST || r.method == .PUT || r.method == .PATCH {
            req.body = .bytes(ByteBuffer())
        }
        let started = ContinuousClock.now
        logger.trace("GCS → \(r.method) \(Self.shortURL(r.url)) \(Self.redacted(req.headers))")
        do {
            let resp = try await client.execute(req, timeout: TimeAmount.nanoseconds(Self.nanos(timeout)), logger: nil)
            let body = try await resp.body.collect(upTo: maxResponseBytes)
            let status = Int(resp.status.code)
            logger.debug("GCS \(r.method) \(Self.shortURL(r.url)) → \(status) (\(ContinuousClock.now - started))")
            if (200..<300).contains(status) || accept(status) {
                return .done(GCSResponse(status: status, headers: resp.headers, body: body))
            }
            let message = Self.errorMessage(body) ?? "HTTP \(status) \(resp.status.reasonPhrase)"
            let e = StorageError.fromHTTP(status: status, message: message, path: path, bucket: bucket)
            return .failed(e, retryable: idempotent && RetryPolicy.isRetryable(status: status), status: status)
        } catch {
            let e = Task.isCancelled ? .cancelled : Self.map(error)
            logger.debug("GCS \(r.method) \(Self.shortURL(r.url)) failed: \(e)")
            return .failed(e, retryable: idempotent && e.isTransient, status: nil)
        }
    }

    /// False for timeouts and connection trouble (no status from the server).
    static func cameFromServer(_ e: StorageError) -> Bool {
        switch e {
        case .timeout, .unknown(status: 0, _), .cancelled: return false
        default: return true
        }
    }

    /// Turns client / transport errors into typed errors: timeouts, cancellation, connection trouble.
    static func map(_ error: any Error) -> StorageError {
        if let e = error as? StorageError { return e }
        if error is CancellationError { return .cancelled }
        if let e = error as? HTTPClientError {
            if e == .cancelled || e == .requestStreamCancelled { return .cancelled }
            let timeouts: [HTTPClientError] = [.readTimeout, .writeTimeout, .connectTimeout, .deadlineExceeded,
                                               .getConnectionFromPoolTimeout, .tlsHandshakeTimeout]
            if timeouts.contains(e) { return .timeout(message: e.shortDescription) }
            if e == .invalidURL || e == .emptyHost || e == .emptyScheme {
                return .invalidArgument(message: "bad endpoint URL: \(e.shortDescription)")
            }
            return .unknown(status: 0, message: "connection error: \(e.shortDescription)")
        }
        return .unknown(status: 0, message: "connection error: \(error)")
    }

    /// The `error.message` of a JSON API error body, if any.
    static func errorMessage(_ body: ByteBuffer) -> String? {
        let d = Data(buffer: body)
        if let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any] {
            if let e = o["error"] as? [String: Any], let m = e["message"] as? String { return m }
            if let m = o["error_description"] as? String { return m }
            if let m = o["error"] as? String { return m }
        }
        let s = String(decoding: d.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return s.isEmpty ? nil : s
    }

    /// Headers safe to log: `Authorization` is never shown.
    static func redacted(_ headers: HTTPHeaders) -> String {
        headers.map { name, value in
            name.lowercased() == "authorization" ? "\(name): <redacted>" : "\(name): \(value)"
        }.joined(separator: "; ")
    }

    /// The URL without its query (upload ids and page tokens stay out of routine logs).
    static func shortURL(_ url: String) -> String {
        url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
    }

    static func nanos(_ d: Duration) -> Int64 {
        let c = d.components
        return c.seconds * 1_000_000_000 + c.attoseconds / 1_000_000_000
    }
}
