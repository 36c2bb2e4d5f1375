import Foundation
import NIOCore
import NIOHTTP1

/// Collects one request (head + body), asks the server, writes the answer. May drop the connection
/// mid-body when the server says so.
final class GCSTestHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: GCSTestServer
    private var reader = TestRequestReader()
    /// The paced body of the request being read (`uploadPace`): when its first byte came, and how
    /// many have come since.
    private var paceStart: NIODeadline?
    private var paced = 0
    private var resumeAt: NIODeadline?

    init(server: GCSTestServer) { self.server = server }

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
        switch reader.take(unwrapInboundIn(data)) {
        case .head?:
            paceStart = nil
            paced = 0
        case .body(let h, let new)?:
            switch server.bodyFault(method: h.method.rawValue, uri: h.uri, headers: h.headers, received: reader.body, new: new) {
            case .drop?:
                reader.dropped = true
                context.close(promise: nil)
            case .stall?:
                reader.dropped = true  // reads nothing more, answers nothing; the client gives up
                context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
            case nil:
                if h.method == .PUT, let rate = server.read({ $0.uploadPace }) {
                    pace(new, rate: rate, channel: context.channel)
                }
            }
        case .end(let h, let body)?:
            let r = server.handle(method: h.method.rawValue, uri: h.uri, headers: h.headers, body: body)
            let fault = server.takeFault(method: h.method.rawValue, uri: h.uri, status: r.status)
            if TestAnswerWriter.write(status: r.status, headers: r.headers, body: r.body, to: h, fault: fault, context: context) {
                reader.dropped = true
            }
        case nil:
            break
        }
    }
}
