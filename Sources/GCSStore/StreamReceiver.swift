import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import StorageModel

/// Receives one streamed answer on the connection's event loop: each body chunk goes to `deliver`
/// right there, as it comes off the socket. (The async body sequence woke a Task for every chunk;
/// a 256 MiB read paid some 5,000 thread wake-ups for it.)
///
/// Checks what the transport checked before: the status, `check` on the headers before any byte
/// is delivered, no more bytes than asked, and at the end the length against Content-Length and
/// against the range asked. An error answer's body (its first 64 KiB) is kept for its message.
/// Everything here runs on the task's event loop, one call at a time.
final class StreamReceiver: HTTPClientResponseDelegate, @unchecked Sendable {
    typealias Response = Void

    private let length: Int
    private let check: @Sendable (Int, HTTPHeaders) -> StorageError?
    private let deliver: @Sendable (ByteBuffer) throws -> Void
    private let errorFor: @Sendable (Int, ByteBuffer, HTTPHeaders) -> StreamFailure
    private var status = 0
    private var headers: HTTPHeaders = [:]
    private var errorBody = ByteBuffer()
    private var got = 0
    /// Set once a byte was delivered (read from any thread after the answer ended).
    private let started: StreamProgress

    init(length: Int, started: StreamProgress,
         check: @escaping @Sendable (Int, HTTPHeaders) -> StorageError?,
         errorFor: @escaping @Sendable (Int, ByteBuffer, HTTPHeaders) -> StreamFailure,
         deliver: @escaping @Sendable (ByteBuffer) throws -> Void) {
        self.length = length
        self.started = started
        self.check = check
        self.errorFor = errorFor
        self.deliver = deliver
    }

    private var isSuccess: Bool { (200..<300).contains(status) }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        status = Int(head.status.code)
        headers = head.headers
        if isSuccess, let e = check(status, headers) {
            return task.eventLoop.makeFailedFuture(StreamFailure(error: e))
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard isSuccess else {
            if errorBody.readableBytes < 1 << 16 {
                var b = buffer
                errorBody.writeBuffer(&b)
            }
            return task.eventLoop.makeSucceededVoidFuture()
        }
        got += buffer.readableBytes
        guard got <= length else {
            return task.eventLoop.makeFailedFuture(StreamFailure(
                error: .unknown(status: 0, message: "the body has more than the \(length) bytes asked for")))
        }
        do {
            if buffer.readableBytes > 0 { started.mark() }
            try deliver(buffer)
        } catch {
            return task.eventLoop.makeFailedFuture(error)
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        guard isSuccess else { throw errorFor(status, errorBody, headers) }
        if let declared = headers.first(name: "Content-Length").flatMap(Int.init), got != declared {
            throw StreamFailure(error: .unknown(status: 0, message: "the body has \(got) bytes; Content-Length said \(declared)"))
        }
        // A body without Content-Length ends at a clean close: only its length tells it was cut.
        if got != length {
            throw StreamFailure(error: .unknown(status: 0, message: "download cut: \(got) of \(length) bytes came"))
        }
    }
}

/// A streamed attempt's failure, with the server's Retry-After, the status of an error answer,
/// and the Authorization header the attempt carried (for the refresh after a 401; never logged).
struct StreamFailure: Error {
    let error: StorageError
    var retryAfter: Duration? = nil
    var status: Int? = nil
    var sentAuthorization: String? = nil
}

/// Whether a streamed answer has delivered bytes yet.
final class StreamProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var started = false
    func mark() { lock.withLock { started = true } }
    var value: Bool { lock.withLock { started } }
}
