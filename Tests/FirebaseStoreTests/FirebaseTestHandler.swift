import Foundation
import NIOCore
import NIOHTTP1

/// Collects one request (head and body), asks the server, and writes the answer after the
/// server's latency; may drop the connection mid-body, lose the answer, stall or cut a download.
final class FirebaseTestHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: FirebaseTestServer
    private var head: HTTPRequestHead?
    private var body = Data()
    private var dropped = false

    init(server: FirebaseTestServer) { self.server = server }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if dropped { return }
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = Data()
        case .body(var buf):
            body.append(contentsOf: buf.readBytes(length: buf.readableBytes) ?? [])
            if let h = head, server.shouldDrop(method: h.method.rawValue, uri: h.uri, headers: h.headers, received: body) {
                dropped = true
                context.close(promise: nil)
            }
        case .end:
            guard let h = head else { return }
            head = nil
            let isMetadataGet = h.method == .GET && h.uri.hasPrefix("/v0/") && !h.uri.contains("alt=media")
                && !(h.uri.split(separator: "?").first ?? "").hasSuffix("/o")
            if isMetadataGet { server.metadataGetStarted() }
            let r = server.handle(method: h.method.rawValue, uri: h.uri, headers: h.headers, body: body)
            body = Data()
            let answer = { [self] in
                if isMetadataGet { server.metadataGetEnded() }
                respond(context: context, h, r)
            }
            if r.delay > .zero {
                _ = context.eventLoop.assumeIsolated().scheduleTask(in: r.delay, answer)
            } else {
                answer()
            }
        }
    }

    private func respond(context: ChannelHandlerContext, _ h: HTTPRequestHead, _ r: FirebaseTestServer.Response) {
        guard context.channel.isActive else { return }
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
    }
}
