import AsyncHTTPClient
import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import StorageModel

/// Streamed reads: a GET whose body goes to the caller as it comes off the socket.
extension HTTPTransport {
    /// A GET whose body is handed to `deliver` as it arrives, never gathered, on the connection's
    /// event loop (so `deliver` must not block). Retried like any idempotent call until its first
    /// byte is delivered; after that a fault is thrown (sending the bytes again would repeat them)
    /// for the caller to read the rest another way. `check` sees status and headers before any
    /// byte is delivered; a body shorter than its Content-Length fails after its last byte.
    package func stream(_ what: String, path: String, _ r: CloudRequest, length: Int,
                check: @escaping @Sendable (Int, HTTPHeaders) -> StreamPlan,
                deliver: @escaping @Sendable (ByteBuffer) throws -> Void) async throws {
        // Both the call's own deadline and the operation's restart with each byte that arrives
        // (docs/SEMANTICS.md §5.2): a body that keeps coming is never cut by them.
        let clock = self.clock
        let own = OperationClock(timeout: policy.deadline)
        let operation = OperationContext.clock
        let end: @Sendable () -> BucketClock.Instant = { min(own.end, operation?.end ?? own.end) }
        let deliver: @Sendable (ByteBuffer) throws -> Void = { piece in
            own.moved()
            operation?.moved()
            try deliver(piece)
        }
        let started = StreamProgress()
        var attempts = 0
        var refreshedAfter401 = false
        while true {
            attempts += 1
            do {
                return try await streamOnce(what, path: path, r, length: length, end: end, started: started,
                                            check: check, deliver: deliver)
            } catch let f as StreamFailure {
                let e = f.error
                if auth.refreshesStreams, f.status == 401, case .unauthenticated(let m) = e {
                    // As `send` does: one fresh token, once, before any byte came.
                    guard auth.canRefresh, !refreshedAfter401, !started.value else { throw auth.unauthenticated(m) }
                    refreshedAfter401 = true
                    await auth.unauthorized(sent: f.sentAuthorization, within: end() - clock.now)
                    logger.debug("\(dialect.label) \(what) \(path): 401 (\(m)); refreshing the access token")
                    continue
                }
                guard !started.value, e.isTransient else { throw e }
                var pause = policy.delay(beforeRetry: attempts, random: Double.random(in: 0...1))
                if let after = f.retryAfter, after > pause { pause = after }
                if clock.now + pause >= end() { throw e }
                Counter(label: "bucketfs_store_retries_total", dimensions: [("operation", what)]).increment()
                try await policy.pause(pause)
            }
        }
    }

    /// One attempt: the first byte must come within the request timeout, and after it the body
    /// goes on until `end()` (which moves with the bytes); a body that stops for the idle timeout
    /// fails through the client's read timeout.
    private func streamOnce(_ what: String, path: String, _ r: CloudRequest, length: Int,
                            end: @escaping @Sendable () -> BucketClock.Instant,
                            started: StreamProgress,
                            check: @escaping @Sendable (Int, HTTPHeaders) -> StreamPlan,
                            deliver: @escaping @Sendable (ByteBuffer) throws -> Void) async throws {
        let clock = self.clock
        let limit = min(policy.requestTimeout, end() - clock.now)
        guard limit > .zero else {
            throw StreamFailure(error: .timeout(message: "\(what) \(path): the operation's deadline passed"))
        }
        let bucket = self.bucket
        let dialect = self.dialect
        let expired = StreamProgress()
        var sent: String? = nil
        do {
            let head = try await clientRequest(r, limit: limit)
            sent = head.headers.first(name: "Authorization")
            let req = try HTTPClient.Request(url: head.url, method: head.method, headers: head.headers)
            let receiver = StreamReceiver(length: length, started: started, check: check, errorFor: { status, body, headers in
                // Ranges are asked inside the object only: a 416 is a fault of the answer.
                if status == 416 { return StreamFailure(error: .unknown(status: 0, message: "download answer rejected: 416 for a range inside the object")) }
                return StreamFailure(error: dialect.error(status, Self.errorMessage(body) ?? "HTTP \(status)", path, bucket),
                                     retryAfter: headers.first(name: "Retry-After").flatMap { Self.retryAfter($0, now: self.clock.date) }, status: status)
            }, deliver: deliver)
            let task = mediaClient.execute(request: req, delegate: receiver, deadline: .now() + .hours(24))
            let firstBy = clock.now + limit
            let watcher = Task {
                while !Task.isCancelled {
                    let now = clock.now
                    let bound = started.value ? end() : min(firstBy, end())
                    if now >= bound {
                        expired.mark()
                        task.cancel()
                        return
                    }
                    try? await clock.sleep(for: min(.milliseconds(250), bound - now))
                }
            }
            defer { watcher.cancel() }
            try await withTaskCancellationHandler {
                try await task.futureResult.get()
            } onCancel: {
                task.cancel()
            }
        } catch is RangeDelivered {
            // A whole object sent for a range: the range is delivered, the rest is not wanted.
            return
        } catch _ where expired.value {
            let e = StorageError.timeout(message: started.value
                ? "\(what) \(path): the operation's deadline passed while the body came"
                : "\(what) \(path): no answer within \(limit)")
            logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)) (streamed) failed: \(e)")
            throw StreamFailure(error: e, sentAuthorization: sent)
        } catch var f as StreamFailure {
            logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)) (streamed) failed: \(f.error)")
            f.sentAuthorization = sent
            throw f
        } catch {
            let e = Task.isCancelled ? .cancelled : await failure(error, url: r.url)
            logger.debug("\(dialect.label) \(r.method) \(Self.shortURL(r.url)) (streamed) failed: \(e)")
            throw StreamFailure(error: e)
        }
    }
}
