import Foundation
import GCSTestServerKit
import NIOCore
import NIOHTTP1

/// Collects one request (head and body), asks the server, and writes the answer after the
/// server's latency; may drop the connection mid-body, lose the answer, stall or cut a download.
final class FirebaseTestHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: FirebaseTestServer
    private var reader = TestRequestReader()

    init(server: FirebaseTestServer) { self.server = server }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch reader.take(unwrapInboundIn(data)) {
        case .body(let h, _)?:
            if server.shouldDrop(method: h.method.rawValue, uri: h.uri, headers: h.headers, received: reader.body) {
                reader.dropped = true
                context.close(promise: nil)
            }
        case .end(let h, let body)?:
            let isMetadataGet = h.method == .GET && h.uri.hasPrefix("/v0/") && !h.uri.contains("alt=media")
                && !(h.uri.split(separator: "?").first ?? "").hasSuffix("/o")
            if isMetadataGet { server.metadataGetStarted() }
            let r = server.handle(method: h.method.rawValue, uri: h.uri, headers: h.headers, body: body)
            let answer = { [self] in
                if isMetadataGet { server.metadataGetEnded() }
                respond(context: context, h, r)
            }
            if r.delay > .zero {
                _ = context.eventLoop.assumeIsolated().scheduleTask(in: r.delay, answer)
            } else {
                answer()
            }
        case .head?, nil:
            break
        }
    }

    private func respond(context: ChannelHandlerContext, _ h: HTTPRequestHead, _ r: FirebaseTestServer.Response) {
        let fault = server.takeFault(method: h.method.rawValue, uri: h.uri, status: r.status)
        if TestAnswerWriter.write(status: r.status, headers: r.headers, body: r.body, to: h, fault: fault, context: context) {
            reader.dropped = true
        }
    }
}
