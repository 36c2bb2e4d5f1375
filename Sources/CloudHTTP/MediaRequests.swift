import Foundation
import NIOCore
import NIOHTTP1
import StorageModel

/// The parts of a media request that the JSON API (`GCSStore`) and Firebase's v0 API
/// (`FirebaseStore`) share, written once: the body of a multipart upload, the headers of a
/// download, what a download's answer holds, and the `Content-Range` check of a streamed read.
package enum MediaRequests {
    /// The whole content of a small upload (a multipart upload sends it in one body).
    package static func content(of source: UploadSource) throws -> Data {
        switch source {
        case .data(let d): return d
        case .file(let path):
            guard let d = FileManager.default.contents(atPath: path) else {
                throw StorageError.invalidArgument(message: "cannot read upload source \(path)")
            }
            return d
        }
    }

    /// The size of an upload's source; an unreadable file is `invalidArgument`.
    package static func sourceSize(_ source: UploadSource) throws -> Int64 {
        do { return try source.size() } catch {
            if case .file(let p) = source {
                throw StorageError.invalidArgument(message: "cannot read upload source \(p): \(error.localizedDescription)")
            }
            throw error
        }
    }

    /// A `multipart/related` body with `boundary`: the object's resource (JSON), then its bytes.
    /// `jsonCharset` and `closingLineBreak` are how the two APIs' own clients write it (the JSON
    /// API's: `UTF-8` and a line break after the closing boundary; the Firebase SDKs': `utf-8`, none).
    package static func multipartBody(boundary: String, resource: Data, contentType: String?, content: Data,
                                      jsonCharset: String, closingLineBreak: Bool) -> ByteBuffer {
        var body = ByteBuffer()
        body.writeString("--\(boundary)\r\nContent-Type: application/json; charset=\(jsonCharset)\r\n\r\n")
        body.writeData(resource)
        body.writeString("\r\n--\(boundary)\r\nContent-Type: \(contentType ?? "application/octet-stream")\r\n\r\n")
        body.writeData(content)
        body.writeString("\r\n--\(boundary)--" + (closingLineBreak ? "\r\n" : ""))
        return body
    }

    /// `bytes=A-B` for `range` (not empty).
    package static func rangeHeader(_ range: Range<Int64>) -> String {
        "bytes=\(range.lowerBound)-\(range.upperBound - 1)"
    }

    /// A download's headers: the stored bytes as they are (without `Accept-Encoding: gzip`, Cloud
    /// Storage decompresses objects stored with `Content-Encoding: gzip`, and their size and
    /// checksums no longer describe what comes), and the range, if any.
    package static func downloadHeaders(range: Range<Int64>?) -> HTTPHeaders {
        var headers: HTTPHeaders = ["Accept-Encoding": "gzip"]
        if let range { headers.add(name: "Range", value: rangeHeader(range)) }
        return headers
    }

    /// What a download accepts besides 2xx, and how it checks an answer (`DownloadCheck`).
    package static func downloadExpect(range: Range<Int64>?) -> Expect {
        Expect(accept: { $0 == 416 }, validate: { DownloadCheck.problem(with: $0, range: range) })
    }

    /// The bytes of `range` (nil: the whole object) in a checked download answer: none for a 416
    /// (the range starts at or past the end), and the range cut out locally from a 200 (the server
    /// ignored the range).
    package static func bytes(of r: CloudResponse, range: Range<Int64>?) -> Data {
        if r.status == 416 { return Data() }
        var data = r.data
        if let range, r.status == 200, !DownloadCheck.isRangeUnder200(r.headers, count: Int64(data.count), range: range) {
            let lo = Int(min(range.lowerBound, Int64(data.count))), hi = Int(min(range.upperBound, Int64(data.count)))
            data = data.subdata(in: lo..<hi)
        }
        return data
    }

    /// How a streamed read takes its answer: a 206 for exactly `range`, or a 200 that says it is
    /// (`DownloadCheck.isRangeUnder200`); or a 200 whose body is the whole object (its Content-Length is the object's size, as `x-goog-stored-content-length` or
    /// the Content-Range total says, not transcoded), passed over up to the range; anything else
    /// is a fault (docs/SEMANTICS.md §5.1). A whole body that comes short stays a transport fault.
    package static func streamPlan(status: Int, headers: HTTPHeaders, range: Range<Int64>) -> StreamPlan {
        let contentRange = headers.first(name: "Content-Range")
        if status == 206, let (a, b, _) = contentRange.flatMap(DownloadCheck.parse),
           a == range.lowerBound, b + 1 == range.upperBound {
            return .exact
        }
        if status == 200, let length = headers.first(name: "Content-Length").flatMap({ Int64($0) }),
           DownloadCheck.isRangeUnder200(headers, count: length, range: range) {
            return .exact
        }
        if status == 200, let length = headers.first(name: "Content-Length").flatMap({ Int64($0) }),
           !(headers.first(name: "Content-Encoding")?.lowercased().contains("gzip") ?? false),
           let total = headers.first(name: "x-goog-stored-content-length").flatMap({ Int64($0) }) ?? contentRange.flatMap(DownloadCheck.total),
           length == total, range.upperBound <= total,
           contentRange.flatMap(DownloadCheck.parse).map({ $0.0 == 0 && $0.1 + 1 == total }) ?? true {
            return .whole(skip: Int(range.lowerBound))
        }
        return .rejected(.unknown(status: 0, message: "download answer rejected: HTTP \(status), Content-Range \(contentRange ?? "none"), Content-Length \(headers.first(name: "Content-Length") ?? "none") for bytes \(range.lowerBound)-\(range.upperBound - 1)"))
    }
}
