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
/// A whole object sent for a range (`StreamPlan.whole`) is passed over up to the range, and the
/// answer is ended once the range is delivered. Everything here runs on the task's event loop,
/// one call at a time.
final class StreamReceiver: HTTPClientResponseDelegate, @unchecked Sendable {
    typealias Response = Void

    private let length: Int
    private let check: @Sendable (Int, HTTPHeaders) -> StreamPlan
    private let deliver: @Sendable (ByteBuffer) throws -> Void
    private let errorFor: @Sendable (Int, ByteBuffer, HTTPHeaders) -> StreamFailure
    private var status = 0
    private var headers: HTTPHeaders = [:]
    private var errorBody = ByteBuffer()
    private var got = 0
    /// Bytes of the body that came, the passed-over ones included (checked against Content-Length).
    private var received = 0
    /// Bytes still to pass over before the range starts (a whole object sent for a range).
    private var skip = 0
    private var wholeObject = false
    /// Set once a byte was delivered (read from any thread after the answer ended).
    private let started: StreamProgress

    init(length: Int, started: StreamProgress,
         check: @escaping @Sendable (Int, HTTPHeaders) -> StreamPlan,
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
        if isSuccess {
            switch check(status, headers) {
            case .exact: break
            case .whole(let before):
                skip = before
                wholeObject = true
            case .rejected(let e):
                return task.eventLoop.makeFailedFuture(StreamFailure(error: e))
            }
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
        var buffer = buffer
        received += buffer.readableBytes
        if skip > 0 {
            let passed = min(skip, buffer.readableBytes)
            buffer.moveReaderIndex(forwardBy: passed)
            skip -= passed
            if buffer.readableBytes == 0 { return task.eventLoop.makeSucceededVoidFuture() }
        }
        var rangeDone = false
        if wholeObject, got + buffer.readableBytes >= length {
            // The rest of the object is not asked for: end the answer here.
            buffer = buffer.getSlice(at: buffer.readerIndex, length: length - got) ?? ByteBuffer()
            rangeDone = true
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
        if rangeDone { return task.eventLoop.makeFailedFuture(RangeDelivered()) }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        guard isSuccess else { throw errorFor(status, errorBody, headers) }
        if let declared = headers.first(name: "Content-Length").flatMap(Int.init), received != declared {
            throw StreamFailure(error: .unknown(status: 0, message: "the body has \(received) bytes; Content-Length said \(declared)"))
        }
        // A body without Content-Length ends at a clean close: only its length tells it was cut.
        if got != length {
            throw StreamFailure(error: .unknown(status: 0, message: "download cut: \(got) of \(length) bytes came"))
        }
    }
}

/// What the head of a streamed answer says about its body (`MediaRequests.streamPlan`).
package enum StreamPlan: Sendable {
    /// The bytes asked for, from the body's first byte (a 206 for exactly the range).
    case exact
    /// The whole object, whose first `skip` bytes come before the range asked (a 200 to a range
    /// request: HTTP lets a server, or a front, ignore a Range header).
    case whole(skip: Int)
    /// Not an answer to take: a fault, read around like a reset.
    case rejected(StorageError)
}

/// Ends a whole-object answer once the range asked for is delivered: the attempt succeeded.
struct RangeDelivered: Error {}

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
