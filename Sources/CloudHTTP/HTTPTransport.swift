import Foundation
import AsyncHTTPClient
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import StorageModel

/// One HTTP exchange as the backend describes it; the transport adds authorization.
package struct CloudRequest: Sendable {
    package var method: HTTPMethod
    package var url: String
    package var headers: HTTPHeaders = [:]
    /// Always sent with a Content-Length (empty bodies as `Content-Length: 0` where a body is expected).
    package var body: ByteBuffer?
    /// A body streamed from a file instead (an upload), with its length as Content-Length. Such a
    /// request is bounded by its stall timeout while the body goes out, not by the request
    /// timeout (a large body takes as long as the network needs).
    package var streamed: StreamedBody?

    package init(_ method: HTTPMethod, _ url: String, headers: HTTPHeaders = [:], body: ByteBuffer? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }

    package init(_ method: HTTPMethod, _ url: String, headers: HTTPHeaders = [:], streaming: StreamedBody) {
        self.init(method, url, headers: headers)
        self.streamed = streaming
    }
}

package struct CloudResponse: Sendable {
    package var status: Int
    package var headers: HTTPHeaders
    package var body: ByteBuffer

    /// Set when this answer came after an attempt whose answer was lost and `Expect.doneAfterLostAnswer`
    /// admitted it: the caller confirms that the earlier attempt did what was asked.
    package var afterLostAnswer = false

    package var data: Data { Data(buffer: body, byteTransferStrategy: .noCopy) }
    package func json() throws -> [String: Any] {
        guard let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw StorageError.unknown(status: status, message: "the server's answer is not a JSON object")
        }
        return o
    }
}

/// What happened to one attempt, so the retry loop can decide.
private enum Outcome: Sendable {
    case done(CloudResponse)
    /// `status` is the HTTP status when the server answered; `retryAfter` its Retry-After.
    /// `sentAuthorization` is the header the attempt carried (for the refresh after a 401).
    case failed(StorageError, retryable: Bool, status: Int?, retryAfter: Duration?, sentAuthorization: String? = nil)
}

/// How one call reads the answers it gets.
package struct Expect: Sendable {
    /// Statuses besides 2xx returned to the caller as answers.
    package var accept: @Sendable (Int) -> Bool = { _ in false }
    /// Checks a returned answer (its framing, its length); an error is a transport fault, retried
    /// like a reset, never data.
    package var validate: (@Sendable (CloudResponse) -> StorageError?)? = nil
    /// Statuses that mean "an earlier attempt of this very call did it", once an attempt may have
    /// reached the server and its answer was lost (a DELETE that then finds 404, an insert guarded
    /// by `ifGenerationMatch` that then finds 412). They are returned as answers, with
    /// `afterLostAnswer` set, for the caller to confirm.
    package var doneAfterLostAnswer: @Sendable (Int) -> Bool = { _ in false }

    package init(accept: @escaping @Sendable (Int) -> Bool = { _ in false },
                 validate: (@Sendable (CloudResponse) -> StorageError?)? = nil,
                 doneAfterLostAnswer: @escaping @Sendable (Int) -> Bool = { _ in false }) {
        self.accept = accept
        self.validate = validate
        self.doneAfterLostAnswer = doneAfterLostAnswer
    }

    package static let plain = Expect()
}

/// The shared HTTP client, authorization and the retry loop (for the JSON API and, with its own
/// dialect and authorization, Firebase's v0 API).
package final class HTTPTransport: Sendable {
    /// The store's clients (`CloudHTTPClients`): the API's, object data's, streamed uploads'.
    package let clients: CloudHTTPClients
    package var client: HTTPClient { clients.client }
    /// The client for object data (downloads): `client` unless the settings split them
    /// (`--http-version auto`: HTTP/1.1 for data, HTTP/2 for the rest).
    package var mediaClient: HTTPClient { clients.media ?? clients.client }
    /// The client for streamed uploads, without the read timeout (`watch` bounds them).
    package var uploadClient: HTTPClient { clients.upload }
    package let auth: any TransportAuthorization
    package let policy: RetryPolicy
    /// The clock of every "now", pause and deadline here: the policy's (`.real` outside tests).
    package var clock: BucketClock { policy.clock }
    package let logger: Logger
    package let bucket: String
    package let dialect: HTTPDialect
    /// The trust in effect, to explain a refused certificate.
    package var settings: ClientSettings { clients.settings }
    /// Largest response body accepted in memory (downloads are ranged by callers).
    let maxResponseBytes = 1 << 31

    package init(clients: CloudHTTPClients, auth: any TransportAuthorization, policy: RetryPolicy,
                 logger: Logger, bucket: String, dialect: HTTPDialect) {
        self.clients = clients
        self.auth = auth
        self.policy = policy
        self.logger = logger
        self.bucket = bucket
        self.dialect = dialect
    }

    /// Sends `request` with retries when `idempotent`, until `deadline` (default: now + policy
    /// deadline), never past the enclosing filesystem operation's deadline. A streamed body is
    /// the exception: it goes on for as long as its bytes move (each byte taken restarts the
    /// operation's deadline, docs/SEMANTICS.md §5.2) and fails when none moves for its stall
    /// timeout. Statuses in 200..<300 and those `expect` admits are returned; others become typed errors.
    package func send(_ what: String, path: String, idempotent: Bool, deadline: BucketClock.Instant? = nil,
              expect: Expect = .plain, _ request: CloudRequest) async throws -> CloudResponse {
        let own = deadline ?? clock.now + policy.deadline
        let end = request.streamed == nil ? OperationContext.deadline(capping: own) : own
        var attempts = 0
        var refreshedAfter401 = false
        var lastError: StorageError?
        var lastAnswer: StorageError?  // the last error the server itself gave (a status)
        var mayHaveActed = false       // an attempt may have reached the server and lost its answer
        var lastUnsent = false         // the last failed attempt sent nothing (its token failed)
        while true {
            if Task.isCancelled { throw StorageError.cancelled }
            let remaining = end - clock.now
            if remaining <= .zero { throw giveUp(what, path: path, attempts: attempts, last: lastError, answer: lastAnswer) }
            attempts += 1
            let limit = request.streamed == nil ? min(policy.requestTimeout, remaining) : remaining
            let outcome = await attempt(request, limit: limit, path: path,
                                        idempotent: idempotent, expect: expect, afterLostAnswer: mayHaveActed)
            var retryAfter: Duration? = nil
            switch outcome {
            case .done(let r):
                if attempts > 1 { logger.debug("\(dialect.label) \(what) \(path): answered on attempt \(attempts)") }
                return r
            case .failed(let e, _, _, _, _) where e == .cancelled:
                throw e
            case .failed(.unauthenticated(let m), _, 401?, _, let sent) where auth.canRefresh && !refreshedAfter401:
                // A 401 means the request did nothing: fetch a fresh token and try once more.
                refreshedAfter401 = true
                await auth.unauthorized(sent: sent, within: end - clock.now)
                logger.debug("\(dialect.label) \(what) \(path): 401 (\(m)); refreshing the access token")
                continue
            case .failed(.unauthenticated(let m), _, _, _, _):
                throw auth.unauthenticated(m)
            case .failed(let e, let retryable, let status, let after, _):
                guard retryable else { throw e }
                // An attempt that ran out of time still waiting for its token sent nothing: the
                // token's own earlier failure says more of why than its timeout does.
                let unsent = status == 0
                if !(unsent && lastUnsent && Self.waitedForToken(e)) { lastError = e }
                lastUnsent = unsent
                if Self.cameFromServer(e) { lastAnswer = e }
                if Self.mayHaveActed(status: status) { mayHaveActed = true }
                retryAfter = after
                if let most = policy.maxAttempts, attempts >= most { throw e }
            }
            var pause = policy.delay(beforeRetry: attempts, random: Double.random(in: 0...1))
            if let retryAfter, retryAfter > pause { pause = retryAfter }
            if clock.now + pause >= end {
                throw giveUp(what, path: path, attempts: attempts, last: lastError, answer: lastAnswer,
                             note: retryAfter.map { "the server asked to wait \($0)" })
            }
            logger.debug("\(dialect.label) \(what) \(path): \(lastError.map { "\($0)" } ?? "error"); retry \(attempts) in \(pause)")
            Counter(label: "bucketfs_store_retries_total", dimensions: [("operation", what)]).increment()
            try await policy.pause(pause)
        }
    }

    private func giveUp(_ what: String, path: String, attempts: Int, last: StorageError?,
                        answer: StorageError?, note: String? = nil) -> StorageError {
        let shown = path.isEmpty ? dialect.bucketURL : path
        if attempts <= 1, case .timeout(let m)? = last { return .timeout(message: "\(what) \(shown): \(m)") }
        if attempts == 0 { return .timeout(message: "\(what) \(shown): the operation's deadline passed") }
        var cause = last.map { "\($0)" } ?? "no answer"
        if let answer, answer != last { cause += " (last answer from the server: \(answer))" }
        if let note { cause += "; \(note)" }
        return .retryLimitExceeded(message: "\(what) \(shown): gave up after \(attempts) attempts within the deadline: \(cause)")
    }

    /// The timeout of an attempt that never got its access token ("the credential gave no access
    /// token within …", which the command line names as the credential's failure, not storage's).
    package static func noTokenWithin(_ d: Duration) -> String { "the credential gave no access token within \(d)" }
    static func waitedForToken(_ e: StorageError) -> Bool {
        if case .timeout(let m) = e { return m.hasPrefix("the credential gave no access token within") }
        return false
    }

    /// Whether a failed attempt may still have changed the bucket: no answer at all (a reset, a
    /// lost response, a timeout) or a server error. A 4xx answer means it did nothing.
    static func mayHaveActed(status: Int?) -> Bool {
        guard let status else { return true }
        return status == 408 || (500...599).contains(status)
    }

    /// One exchange, bounded as a whole by `limit` (headers and body; a body that stops moving
    /// for the idle timeout fails sooner, through the client's read timeout, or for a streamed
    /// upload through `watch`). Cancelling the
    /// calling Task cancels the HTTP request.
    private func attempt(_ r: CloudRequest, limit: Duration, path: String, idempotent: Bool,
                         expect: Expect, afterLostAnswer: Bool) async -> Outcome {
        await withTaskGroup(of: Outcome?.self) { group in
            let sent = OnceFlag()
            group.addTask {
                await self.exchange(r, limit: limit, path: path, idempotent: idempotent, expect: expect,
                                    afterLostAnswer: afterLostAnswer, sent: sent)
            }
            let timer = clock.now
            group.addTask {
                if let body = r.streamed {
                    await self.watch(body, answerWithin: self.policy.requestTimeout, until: timer + limit,
                                     queue: SendQueue(url: r.url))
                } else {
                    try? await self.clock.sleep(for: limit)
                }
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            if let first { return first }
            if Task.isCancelled { return .failed(.cancelled, retryable: false, status: nil, retryAfter: nil) }
            let e: StorageError
            if let body = r.streamed, body.progress.bytes < body.length {
                e = .timeout(message: "the upload stalled: no byte taken for \(body.stallTimeout) at byte \(body.offset + body.progress.bytes) of the request's \(body.offset + body.length)")
            } else if !sent.isSet {
                // Nothing went to the server: the time went to the access token (docs/CREDENTIALS.md,
                // "When a token endpoint fails"). Status 0: no request, so none that may have acted.
                e = .timeout(message: Self.noTokenWithin(clock.now - timer))
                logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)): \(e)")
                return .failed(e, retryable: true, status: 0, retryAfter: nil)
            } else {
                e = .timeout(message: "no complete answer within \(clock.now - timer)")
            }
            logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)): \(e)")
            return .failed(e, retryable: idempotent, status: nil, retryAfter: nil)
        }
    }

    /// Returns when a streamed body stops moving, when its answer has not come `answerWithin`
    /// after its last byte left, or at `end`, whichever is first (docs/SEMANTICS.md §5.2). Each
    /// byte taken restarts the operation's deadline. What the connection's send queue holds is
    /// watched where the kernel shows it (`SendQueue`): its shrinking is the link moving, after
    /// the last byte and while full buffers take nothing more, so the body stops moving when
    /// neither happens for its stall timeout, and the answer is due `answerWithin` after the
    /// queue last shrank. Where it cannot be seen, the time the link needs for what the buffers
    /// took is estimated instead (`SendBacklog`) and allowed for on top of both.
    private func watch(_ body: StreamedBody, answerWithin: Duration, until end: BucketClock.Instant,
                       queue: SendQueue?) async {
        var seen: Int64 = -1
        var moved = clock.now
        // The slowest pace that still counts as moving: one piece per stall timeout.
        let slowest = Double(StreamedBody.pieceSize) / max(SendBacklog.seconds(body.stallTimeout), 0.001)
        // Once every byte is taken: when, and the estimate's bound on the answer (the time the
        // link needs for what the buffers still hold, then `answerWithin`).
        var allTaken: BucketClock.Instant? = nil
        var estimatedBy: BucketClock.Instant? = nil
        // The send queues as last seen since the body last took a byte (nil: not seen), and
        // when one last shrank.
        var queued: [UInt64: Int64]? = nil
        var drained = clock.now
        while !Task.isCancelled {
            let now = clock.now
            if now >= end { return }
            let taken = body.progress.bytes
            if taken != seen {
                if seen >= 0 { OperationContext.moved() }
                seen = taken
                moved = now
                queued = nil
                if taken >= body.length {
                    allTaken = now
                    let backlog = body.progress.backlog
                    let drain = backlog.drainTime(slowest: slowest)
                    estimatedBy = now + drain + answerWithin
                    logger.debug("\(dialect.label) upload body taken whole: awaiting the answer for \(answerWithin) after the send queue last shrinks (estimated drain \(drain), \(backlog.summary))")
                }
            }
            // The queue is read once the body could be waiting on the link: after its last byte,
            // or when no byte was taken for a quarter of the stall timeout.
            if allTaken != nil || now - moved >= body.stallTimeout / 4 {
                if let current = queue?.unacknowledged() {
                    if let before = queued, SendQueue.shrank(from: before, to: current) { drained = now }
                    queued = current
                } else if allTaken == nil {
                    queued = nil
                }
            }
            let lastMove = max(moved, drained)
            if let allTaken {
                // Seen the queue since the last byte: the answer is due `answerWithin` after it last
                // shrank. Not seen: by the estimate.
                let answerBy = queued != nil ? max(allTaken, drained) + answerWithin : estimatedBy!
                if now >= answerBy {
                    logger.debug("\(dialect.label) upload answer not come: \(queued.map { "send queue \($0.values.reduce(0, +)) B, last shrank \(now - drained) ago" } ?? "send queue not seen, estimated drain over")")
                    return
                }
                OperationContext.moved()
            } else {
                // A body that takes no byte, its queue not shrinking, for its stall timeout is a
                // stall. Where the queue is not seen, once the burst the socket buffers took has
                // had time to drain (at the pace seen since, or at the slowest pace that counts
                // as moving); until then it counts as moving, whatever the operation's deadline.
                // (A link slower than the burst per stall timeout, 11.5 MB in 10 s measured, was
                // taken for stalled while it moved.)
                let allowance = queued != nil ? body.stallTimeout
                    : body.stallTimeout + body.progress.backlog.drainTime(slowest: slowest)
                if now - lastMove >= allowance { return }
                OperationContext.moved()
            }
            // The operation's deadline, restarted by the bytes: past it only when nothing moved
            // for `--op-timeout`, or at the unmount's bound.
            if let operationEnd = OperationContext.deadline, now >= operationEnd { return }
            let tick = min(body.stallTimeout / 4, end - now, .milliseconds(250))
            do { try await clock.sleep(for: max(tick, .milliseconds(5))) } catch { return }
        }
    }

    /// The client's request for `r`, with what the authorization adds: the current access token
    /// and, for some credentials, who pays.
    func clientRequest(_ r: CloudRequest, limit: Duration) async throws -> HTTPClientRequest {
        var r = r
        auth.decorate(&r)
        var req = HTTPClientRequest(url: r.url)
        req.method = r.method
        req.headers = r.headers
        if let auth = try await auth.authorization(timeout: limit) {
            req.headers.replaceOrAdd(name: "Authorization", value: auth)
        }
        return req
    }

    private func exchange(_ r: CloudRequest, limit: Duration, path: String, idempotent: Bool,
                          expect: Expect, afterLostAnswer: Bool, sent: OnceFlag) async -> Outcome {
        var req: HTTPClientRequest
        do {
            req = try await clientRequest(r, limit: limit)
            _ = sent.set()
        } catch {
            // No request was sent: a transient token failure is always safe to retry.
            let e = Self.map(error)
            return .failed(e, retryable: e.isTransient, status: 0, retryAfter: nil)
        }
        if let streamed = r.streamed {
            req.body = .stream(streamed.pieces, length: .known(streamed.length))
        } else if let body = r.body {
            req.body = .bytes(body)
        } else if r.method == .POST || r.method == .PUT || r.method == .PATCH {
            req.body = .bytes(ByteBuffer())
        }
        let started = clock.now
        logger.trace("\(dialect.label) → \(r.method) \(Self.shortURL(r.url)) \(Self.redacted(req.headers))")
        do {
            let carrier = r.streamed != nil ? uploadClient : Self.isMedia(r.url) ? mediaClient : client
            let resp = try await carrier.execute(req, timeout: TimeAmount.nanoseconds(Self.nanos(limit)), logger: nil)
            let body = try await resp.body.collect(upTo: maxResponseBytes)
            let status = Int(resp.status.code)
            logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)) → \(status) (\(clock.now - started))")
            var answer = CloudResponse(status: status, headers: resp.headers, body: body)
            if let declared = resp.headers.first(name: "Content-Length").flatMap(Int.init), declared != body.readableBytes {
                let e = StorageError.unknown(status: 0, message: "the body has \(body.readableBytes) bytes; Content-Length said \(declared)")
                return .failed(e, retryable: idempotent, status: nil, retryAfter: nil)
            }
            if afterLostAnswer && expect.doneAfterLostAnswer(status) {
                answer.afterLostAnswer = true
                return .done(answer)
            }
            if (200..<300).contains(status) || expect.accept(status) {
                if let e = expect.validate?(answer) {
                    logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)): rejected answer: \(e)")
                    return .failed(e, retryable: idempotent, status: nil, retryAfter: nil)
                }
                return .done(answer)
            }
            let message = Self.errorMessage(body) ?? "HTTP \(status) \(resp.status.reasonPhrase)"
            let e = dialect.error(status, message, path, bucket)
            return .failed(e, retryable: idempotent && dialect.retryable(status), status: status,
                           retryAfter: resp.headers.first(name: "Retry-After").flatMap { Self.retryAfter($0, now: clock.date) },
                           sentAuthorization: req.headers.first(name: "Authorization"))
        } catch {
            let e = Task.isCancelled ? .cancelled : await failure(error, url: r.url)
            logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)) failed: \(e)")
            return .failed(e, retryable: Self.repeatable(error, e, idempotent: idempotent, hasBody: req.body != nil),
                           status: nil, retryAfter: nil)
        }
    }

    /// Whether a request that failed without an answer may be sent again: a transient failure of
    /// an idempotent request; or, for any request without a body, a connection found closed when
    /// the request was to be written (`ioOnClosedChannel`: the server closed a kept-alive
    /// connection as it was taken from the pool). Such a request is one write of its head, so
    /// none of it reached the server, and a DELETE without preconditions is repeated as safely
    /// as a GET (docs/SEMANTICS.md §2).
    package static func repeatable(_ error: any Error, _ e: StorageError, idempotent: Bool, hasBody: Bool) -> Bool {
        guard e.isTransient else { return false }
        return idempotent || (!hasBody && (error as? ChannelError) == .ioOnClosedChannel)
    }

    /// `map`, with a refused TLS handshake explained (`StorageError.tls`, never transient).
    func failure(_ error: any Error, url: String) async -> StorageError {
        guard TLSFailure.isHandshakeFailure(error) else { return Self.map(error) }
        return await TLSFailure.explain(error, url: url, tls: settings.tls, trust: settings.trust)
    }

    /// Whether a URL asks for object data (`alt=media`, the JSON API's and v0's downloads).
    static func isMedia(_ url: String) -> Bool {
        guard let q = url.split(separator: "?", maxSplits: 1).dropFirst().first else { return false }
        return q.split(separator: "&").contains("alt=media")
    }

    /// A Retry-After value: seconds, or an HTTP date (counted from `now`).
    package static func retryAfter(_ value: String, now: Date) -> Duration? {
        let v = value.trimmingCharacters(in: .whitespaces)
        if let s = Double(v), s >= 0 { return .milliseconds(Int64(s * 1000)) }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let d = f.date(from: v) else { return nil }
        return .milliseconds(Int64(max(0, d.timeIntervalSince(now)) * 1000))
    }

    /// False for timeouts and connection trouble (no status from the server).
    package static func cameFromServer(_ e: StorageError) -> Bool {
        switch e {
        case .timeout, .unknown(status: 0, _), .cancelled: return false
        default: return true
        }
    }

    /// Turns client / transport errors into typed errors: timeouts, cancellation, connection trouble.
    package static func map(_ error: any Error) -> StorageError {
        if let e = error as? StorageError { return e }
        if error is CancellationError { return .cancelled }
        if error is HTTP2NotOffered {
            return .tls(message: "\(error), and --http-version 2 allows HTTP/2 only: use --http-version auto or 1.1")
        }
        if TLSFailure.isHandshakeFailure(error) {
            return .tls(message: "the TLS handshake failed: \(error). If a private CA signed the server's certificate, pass it with --ca-file")
        }
        if let e = error as? HTTPClientError {
            if e == .cancelled || e == .requestStreamCancelled { return .cancelled }
            let timeouts: [HTTPClientError] = [.readTimeout, .writeTimeout, .connectTimeout, .deadlineExceeded,
                                               .getConnectionFromPoolTimeout, .tlsHandshakeTimeout]
            if timeouts.contains(e) { return .timeout(message: e.shortDescription) }
            if e == .invalidURL || e == .emptyHost || e == .emptyScheme {
                return .invalidArgument(message: "bad endpoint URL: \(e.shortDescription)")
            }
            return .unknown(status: 0, message: "connection error: \(ConnectionErrors.describe(e))")
        }
        return .unknown(status: 0, message: "connection error: \(ConnectionErrors.describe(error))")
    }

    /// The `error.message` of a JSON API error body, if any.
    package static func errorMessage(_ body: ByteBuffer) -> String? {
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
    package static func redacted(_ headers: HTTPHeaders) -> String {
        headers.map { name, value in
            name.lowercased() == "authorization" ? "\(name): <redacted>" : "\(name): \(value)"
        }.joined(separator: "; ")
    }

    /// The URL without its query (upload ids and page tokens stay out of routine logs).
    package static func shortURL(_ url: String) -> String {
        url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
    }

    package static func nanos(_ d: Duration) -> Int64 {
        let c = d.components
        return c.seconds * 1_000_000_000 + c.attoseconds / 1_000_000_000
    }
}
