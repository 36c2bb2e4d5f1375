import Foundation
import NIOHTTP1

/// One request as it comes in (head, then body pieces, then the end), for the project's two test
/// servers' handlers: the head and the body so far, and whether the connection is done with.
public struct TestRequestReader {
    /// What one part of a request was.
    public enum Taken {
        case head(HTTPRequestHead)
        /// `new` more bytes of the body came (the body so far is `body`).
        case body(HTTPRequestHead, new: Int)
        /// The whole request.
        case end(HTTPRequestHead, Data)
    }

    public private(set) var head: HTTPRequestHead?
    public private(set) var body = Data()
    /// Nothing more is read or answered on this connection.
    public var dropped = false

    public init() {}

    /// Takes one part; nil once `dropped`, or for a part without its head.
    public mutating func take(_ part: HTTPServerRequestPart) -> Taken? {
        if dropped { return nil }
        switch part {
        case .head(let h):
            head = h
            body = Data()
            // Room for the whole body at once (a streamed upload of GiBs grows by copies otherwise).
            if let n = h.headers.first(name: "Content-Length").flatMap(Int.init), n > 0 { body.reserveCapacity(min(n, 1 << 34)) }
            return .head(h)
        case .body(var buf):
            let new = buf.readableBytes
            body.append(contentsOf: buf.readableBytesView)
            buf.moveReaderIndex(forwardBy: new)
            return head.map { .body($0, new: new) }
        case .end:
            guard let h = head else { return nil }
            let whole = body
            head = nil
            body = Data()
            return .end(h, whole)
        }
    }
}
