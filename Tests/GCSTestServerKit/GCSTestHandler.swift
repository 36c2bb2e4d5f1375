import Foundation
import NIOCore
import NIOHTTP1

/// Collects one request (head + body), asks the server, writes the answer. May drop the connection
/// mid-body when the server says so.
final class GCSTestHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: GCSTestServer
    private var head: HTTPRequestHead?
    private var body = Data()
    private var dropped = false
    /// The paced body of the request being read (`uploadPace`): when its first byte came, and how
    /// many have come since.
    private var paceStart: NIODeadline?
    private var paced = 0
    private var resumeAt: NIODeadline?

    init(server: GCSTestServer) { self.server = server }

    static func nanos(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// Sends `body` from `at`, a piece at a time, `every` apart, then the end of the answer.
    static func trickle(_ body: Data, from at: Int, piece: Int, every: Duration, channel: any Channel) {
        guard at < body.count else {
            channel.writeAndFlush(HTTPServerResponsePart.end(nil), promise: nil)
            return
        }
        let lo = body.startIndex + at, hi = body.startIndex + min(at + piece, body.count)
        channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: body[lo..<hi]))), promise: nil)
        channel.eventLoop.scheduleTask(in: .nanoseconds(nanos(every))) {
            trickle(body, from: at + piece, piece: piece, every: every, channel: channel)
        }
    }

    /// Reads a body at `rate` bytes a second, whatever the sizes of the pieces NIO hands over: after
    /// the bytes that came, reading waits until the time they were due. The socket's receive buffer
    /// is held to 128 KiB (the kernel doubles it) and one 64 KiB read is taken per wake-up, so what
    /// the link holds unread stays small. The last byte is read no sooner than size / rate after
    /// the first: the pace is a floor on the transfer's time on any machine.
    private func pace(_ new: Int, rate: Int, channel: any Channel) {
        let now = NIODeadline.now()
        if paceStart == nil {
            paceStart = now
            channel.setOption(ChannelOptions.socketOption(.so_rcvbuf), value: 128 << 10).whenComplete { _ in }
            channel.setOption(ChannelOptions.maxMessagesPerRead, value: 1).whenComplete { _ in }
            channel.setOption(ChannelOptions.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 1 << 16))
                .whenComplete { _ in }
        }
        paced += new
        let due = paceStart! + .nanoseconds(Int64(Double(paced) / Double(rate) * 1e9))
        guard due > now else { return }
        resumeAt = due
        channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in
            channel.eventLoop.scheduleTask(deadline: due) {
                // Pieces read meanwhile put the time off: only the latest wake-up resumes.
                guard self.resumeAt == due else { return }
                channel.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in }
                channel.read()
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if dropped { return }
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = Data()
            paceStart = nil
            paced = 0
            // Room for the whole body at once (a streamed upload of GiBs grows by copies otherwise).
            if let n = h.headers.first(name: "Content-Length").flatMap(Int.init), n > 0 { body.reserveCapacity(min(n, 1 << 34)) }
        case .body(var buf):
            let new = buf.readableBytes
            body.append(contentsOf: buf.readableBytesView)
            buf.moveReaderIndex(forwardBy: new)
            guard let h = head else { return }
            switch server.bodyFault(method: h.method.rawValue, uri: h.uri, headers: h.headers, received: body, new: new) {
            case .drop?:
                dropped = true
                context.close(promise: nil)
            case .stall?:
                dropped = true  // reads nothing more, answers nothing; the client gives up
                context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
            case nil:
                if h.method == .PUT, let rate = server.read({ $0.uploadPace }) {
                    pace(new, rate: rate, channel: context.channel)
                }
            }
        case .end:
            guard let h = head else { return }
            let r = server.handle(method: h.method.rawValue, uri: h.uri, headers: h.headers, body: body)
            switch server.takeFault(method: h.method.rawValue, uri: h.uri, status: r.status) {
            case .lose?:
                context.close(promise: nil)
                return
            case .media(.stallAfterHeaders)?:
                var headers = HTTPHeaders(r.headers)
                headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
                let head = HTTPResponseHead(version: h.version, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.writeAndFlush(wrapOutboundOut(.head(head)), promise: nil)
                dropped = true  // nothing more, ever
                return
            case .media(.trickle(let piece, let every))?:
                var headers = HTTPHeaders(r.headers)
                headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
                let head = HTTPResponseHead(version: h.version, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.writeAndFlush(wrapOutboundOut(.head(head)), promise: nil)
                Self.trickle(r.body, from: 0, piece: piece, every: every, channel: context.channel)
                return
            case .media(.truncateUnframed(let keep))?:
                var headers = HTTPHeaders(r.headers)
                headers.remove(name: "Content-Length")
                headers.replaceOrAdd(name: "Connection", value: "close")
                let channel = context.channel
                let head = HTTPResponseHead(version: .http1_0, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: r.body.prefix(keep))))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
                dropped = true
                return
            case .media(.cutAfter(let keep))?:
                var headers = HTTPHeaders(r.headers)
                headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
                let channel = context.channel
                let head = HTTPResponseHead(version: h.version, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: r.body.prefix(keep))))))
                    .whenComplete { _ in channel.close(promise: nil) }
                dropped = true
                return
            case nil:
                break
            }
            var headers = HTTPHeaders(r.headers)
            headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
            let keepAlive = h.isKeepAlive
            if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
            let status = HTTPResponseStatus(statusCode: r.status)
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: h.version, status: status, headers: headers))), promise: nil)
            if !r.body.isEmpty {
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: r.body)))), promise: nil)
            }
            if keepAlive {
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            } else {
                let channel = context.channel
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            }
            head = nil
            body = Data()
        }
    }
}
