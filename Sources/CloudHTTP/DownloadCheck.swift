import Foundation
import NIOHTTP1
import StorageModel

/// Checks that a download answer carries exactly the bytes asked for (docs/SEMANTICS.md §5): a short, long or
/// cut body is a transport fault, retried like a reset, never data.
package enum DownloadCheck {
    /// nil when `r` is a whole, well-framed answer for `range` (nil range: the whole object).
    package static func problem(with r: CloudResponse, range: Range<Int64>?) -> StorageError? {
        let count = Int64(r.body.readableBytes)
        func bad(_ why: String) -> StorageError { .unknown(status: 0, message: "download answer rejected: \(why)") }
        switch r.status {
        case 416:
            // Only a range that starts at or past the end may come back empty.
            guard let range, let total = r.headers.first(name: "Content-Range").flatMap(total(of:)) else {
                return bad("416 without the object's size")
            }
            return total <= range.lowerBound ? nil : bad("416 for byte \(range.lowerBound) of a \(total)-byte object")
        case 206:
            guard let range else { return bad("206 for a whole-object read") }
            guard let (a, b, total) = r.headers.first(name: "Content-Range").flatMap(parse) else {
                return bad("206 without a usable Content-Range")
            }
            // Some servers answer a range past the end with an empty 206 (`bytes 200-99/100`).
            if let total, total <= range.lowerBound { return count == 0 ? nil : bad("\(count) bytes past the end") }
            guard b >= a else { return bad("an empty range \(a)-\(b) inside the object") }
            let wantEnd = total.map { min(range.upperBound, $0) } ?? range.upperBound
            if a != range.lowerBound || b + 1 != wantEnd {
                return bad("asked for bytes \(range.lowerBound)-\(range.upperBound - 1), the answer is bytes \(a)-\(b)")
            }
            if count != b - a + 1 { return bad("Content-Range \(a)-\(b) but \(count) bytes came") }
            return nil
        default:
            let gzip = r.headers.first(name: "Content-Encoding")?.lowercased().contains("gzip") ?? false
            if gzip { return nil }  // served decompressed: neither size nor checksum describe these bytes
            if let range, isRangeUnder200(r.headers, count: count, range: range) { return nil }
            if let stored = r.headers.first(name: "x-goog-stored-content-length").flatMap({ Int64($0) }), stored != count {
                return bad("\(count) bytes came of a \(stored)-byte object")
            }
            // A whole object comes with its checksum (X-Goog-Hash: crc32c=…): check it here, so
            // a cut or damaged body is retried like a reset.
            if let expected = crc32c(in: r.headers) {
                var c = CRC32C()
                r.body.withUnsafeReadableBytes { c.update($0) }
                if c.base64 != expected { return bad("the body's crc32c is \(c.base64), X-Goog-Hash says \(expected) (\(count) bytes came)") }
            }
            return nil
        }
    }

    /// A 200 whose Content-Range names exactly the bytes asked for (clamped to the object's end)
    /// and whose body has exactly that many bytes: the range's bytes under the wrong status, as
    /// storage-testbench's injected faults send them (Google's clients take them; so does
    /// bucketfs). Its Content-Length or its body says which bytes came, never a guess: a 200
    /// that does not say so exactly is the whole object or a fault (docs/SEMANTICS.md §5.1).
    package static func isRangeUnder200(_ headers: HTTPHeaders, count: Int64, range: Range<Int64>) -> Bool {
        guard let (a, b, total) = headers.first(name: "Content-Range").flatMap(parse), b >= a else { return false }
        let end = total.map { min(range.upperBound, $0) } ?? range.upperBound
        return a == range.lowerBound && b + 1 == end && count == b - a + 1
    }

    /// The `crc32c=` value of the X-Goog-Hash headers, if any.
    package static func crc32c(in headers: HTTPHeaders) -> String? {
        for value in headers[canonicalForm: "x-goog-hash"] {
            let v = value.trimmingCharacters(in: .whitespaces)
            if v.hasPrefix("crc32c=") { return String(v.dropFirst(7)) }
        }
        return nil
    }

    /// `bytes A-B/TOTAL` (TOTAL may be `*`).
    package static func parse(_ header: String) -> (Int64, Int64, Int64?)? {
        guard header.hasPrefix("bytes ") else { return nil }
        let spec = header.dropFirst(6).split(separator: "/", maxSplits: 1)
        guard spec.count == 2 else { return nil }
        let ab = spec[0].split(separator: "-", maxSplits: 1)
        guard ab.count == 2, let a = Int64(ab[0]), let b = Int64(ab[1]) else { return nil }
        return (a, b, Int64(spec[1]))
    }

    /// TOTAL of `bytes */TOTAL` or `bytes A-B/TOTAL`.
    package static func total(of header: String) -> Int64? {
        guard header.hasPrefix("bytes "), let slash = header.lastIndex(of: "/") else { return nil }
        return Int64(header[header.index(after: slash)...])
    }
}
