import Foundation
import NIOCore
import NIOHTTP1

/// How the next media downloads of a test server misbehave (docs/SEMANTICS.md §5 faults).
public enum TestMediaFault: Sendable {
    /// Headers, then nothing (the socket stays open until the client gives up).
    case stallAfterHeaders
    /// Headers without Content-Length (close-delimited, HTTP/1.0 framing), `keep` bytes, clean close.
    case truncateUnframed(keep: Int)
    /// The whole body, `piece` bytes at a time, one piece every `every` (a slow link).
    case trickle(piece: Int, every: Duration)
    /// Headers with the whole body's Content-Length, `keep` bytes, then the connection closes.
    case cutAfter(keep: Int)
}

/// What a test server does to one answer instead of sending it whole.
public enum TestAnswerFault: Sendable {
    /// The request is carried out, then the connection closes with no answer.
    case lose
    case media(TestMediaFault)
}

/// How the project's two test servers (the JSON API's `GCSTestHandler` and the Firebase test
/// server's handler) write an answer, or what a fault makes of it: written once for both.
public enum TestAnswerWriter {
    /// Writes the answer to `request` (`Content-Length` set; `Connection: close`, and the
    /// connection closed after it, unless the request keeps it alive), or what `fault` makes of
    /// it. Returns whether the connection is done with: nothing more is to be read on it.
    public static func write(status: Int, headers given: [(String, String)], body: Data, to request: HTTPRequestHead,
                             fault: TestAnswerFault?, context: ChannelHandlerContext) -> Bool {
        let channel = context.channel
        guard channel.isActive else { return false }
        var headers = HTTPHeaders(given)
        headers.replaceOrAdd(name: "Content-Length", value: String(body.count))
        let head = HTTPResponseHead(version: request.version, status: HTTPResponseStatus(statusCode: status), headers: headers)
        switch fault {
        case .lose?:
            context.close(promise: nil)
            return true
        case .media(.stallAfterHeaders)?:
            context.writeAndFlush(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
            return true  // nothing more, ever
        case .media(.trickle(let piece, let every))?:
            context.writeAndFlush(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
            trickle(body, from: 0, piece: piece, every: every, channel: channel)
            return false
        case .media(.truncateUnframed(let keep))?:
            headers.remove(name: "Content-Length")
            headers.replaceOrAdd(name: "Connection", value: "close")
            let unframed = HTTPResponseHead(version: .http1_0, status: head.status, headers: headers)
            context.write(NIOAny(HTTPServerResponsePart.head(unframed)), promise: nil)
            context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: body.prefix(keep))))), promise: nil)
            context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            return true
        case .media(.cutAfter(let keep))?:
            context.write(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
            context.writeAndFlush(NIOAny(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: body.prefix(keep))))))
                .whenComplete { _ in channel.close(promise: nil) }
            return true
        case nil:
            break
        }
        let keepAlive = request.isKeepAlive
        if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
        context.write(NIOAny(HTTPServerResponsePart.head(HTTPResponseHead(version: request.version, status: head.status,
                                                                          headers: headers))), promise: nil)
        if !body.isEmpty {
            context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
        }
        let end = context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)))
        if !keepAlive { end.whenComplete { _ in channel.close(promise: nil) } }
        return false
    }

    /// Sends `body` from `at`, a piece at a time, `every` apart, then the end of the answer.
    static func trickle(_ body: Data, from at: Int, piece: Int, every: Duration, channel: any Channel) {
        guard at < body.count else {
            channel.writeAndFlush(HTTPServerResponsePart.end(nil), promise: nil)
            return
        }
        let lo = body.startIndex + at, hi = body.startIndex + min(at + piece, body.count)
        channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: body[lo..<hi]))), promise: nil)
        let nanos = every.components.seconds * 1_000_000_000 + every.components.attoseconds / 1_000_000_000
        channel.eventLoop.scheduleTask(in: .nanoseconds(nanos)) {
            trickle(body, from: at + piece, piece: piece, every: every, channel: channel)
        }
    }
}
