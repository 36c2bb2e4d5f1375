import Crypto
import Foundation
import StorageModel

/// A running checksum of an object's bytes, compared with what the object's metadata says once
/// every byte from 0 to the end has been seen (docs/SEMANTICS.md §5): crc32c, or md5 when there is none.
///
/// Pieces may arrive out of order (parallel parts, the kernel's concurrent read-ahead requests):
/// a piece beyond the checked prefix keeps only its own crc32c, joined to the prefix with
/// CRC-32C combination once the gap before it is filled. md5 cannot be combined, so an md5-only
/// object is checked only when its bytes come in order.
struct ContentCheck {
    let expectedCRC32C: String?
    let expectedMD5: String?
    let size: Int64
    /// CRC-32C of [0, checkedTo).
    private var crc: UInt32 = 0
    private var md5: Insecure.MD5?
    /// Bytes checked so far, from 0; nil once the check was given up (a seek left a gap that
    /// cannot be filled, or more pieces waited than `maxWaiting`).
    private(set) var checkedTo: Int64? = 0
    /// Pieces past `checkedTo`: start → (end, crc32c of the piece).
    private var waiting: [Int64: (end: Int64, crc: UInt32)] = [:]
    static let maxWaiting = 256

    init(_ info: ObjectInfo) {
        // A server may still hand a gzip-encoded object over decompressed: then neither checksum
        // describes the bytes, so such objects are checked for length only.
        let gzip = info.writable.contentEncoding?.lowercased().contains("gzip") ?? false
        expectedCRC32C = gzip ? nil : info.crc32c
        expectedMD5 = gzip || info.crc32c != nil ? nil : info.md5Hash
        size = info.size
        md5 = expectedMD5 == nil ? nil : Insecure.MD5()
    }

    var canCheck: Bool { expectedCRC32C != nil || expectedMD5 != nil }

    /// Whether every byte has been counted (and compared).
    var isComplete: Bool { checkedTo.map { $0 >= size } ?? false }

    /// Adds bytes that were read at `offset`. Returns a mismatch (expected, got) when the object
    /// is complete with them and does not match; nil otherwise.
    mutating func add(_ data: Data, at offset: Int64) -> (expected: String, got: String)? {
        guard let done = checkedTo, canCheck, done < size else { return nil }
        let end = offset + Int64(data.count)
        guard end > done else { return nil }  // already counted
        if offset > done {
            // Ahead of the checked prefix: keep the piece's crc until the gap is filled.
            guard md5 == nil, waiting.count < Self.maxWaiting else { giveUp(); return nil }
            if let w = waiting[offset], w.end >= end { return nil }
            waiting[offset] = (end, CRC32C.checksum(data))
            return nil
        }
        let tail = data.dropFirst(Int(done - offset))
        md5?.update(data: tail)
        // In order: the running checksum goes on over the new bytes, no combination needed.
        var running = CRC32C(continuing: crc)
        running.update(tail)
        crc = running.value
        checkedTo = end
        return join(nil, to: end)
    }

    /// Adds a piece known only by its crc32c (a part checked as it streamed in). An md5-only
    /// object cannot be checked this way: its check is given up.
    mutating func add(crc32c pieceCRC: UInt32, of range: Range<Int64>) -> (expected: String, got: String)? {
        guard let done = checkedTo, canCheck, done < size, range.upperBound > done else { return nil }
        guard md5 == nil else { giveUp(); return nil }
        if range.lowerBound > done {
            guard waiting.count < Self.maxWaiting else { giveUp(); return nil }
            if let w = waiting[range.lowerBound], w.end >= range.upperBound { return nil }
            waiting[range.lowerBound] = (range.upperBound, pieceCRC)
            return nil
        }
        // Overlapping what is counted: a crc cannot be trimmed; the bytes must come again.
        guard range.lowerBound == done else { return nil }
        return join(pieceCRC, to: range.upperBound)
    }

    /// Extends the checked prefix by a piece ending at `end` (its crc32c covering from
    /// `checkedTo`; nil when `crc` already covers it), then by the waiting pieces that follow on.
    private mutating func join(_ pieceCRC: UInt32?, to end: Int64) -> (expected: String, got: String)? {
        guard let done = checkedTo else { return nil }
        if let pieceCRC { crc = CRC32C.combine(crc, pieceCRC, length: end - done) }
        var to = end
        // Waiting pieces that now follow on; those overlapping the prefix cannot be trimmed
        // (only their crc is kept) and are dropped: their bytes come again or the check waits.
        while !waiting.isEmpty {
            if let next = waiting.removeValue(forKey: to) {
                crc = CRC32C.combine(crc, next.crc, length: next.end - to)
                to = next.end
                continue
            }
            let stale = waiting.keys.filter { $0 < to }
            if stale.isEmpty { break }
            for k in stale { waiting[k] = nil }
        }
        checkedTo = to
        guard to >= size else { return nil }
        return mismatch()
    }

    private mutating func giveUp() {
        checkedTo = nil
        waiting = [:]
    }

    /// Compares the finished sums with the metadata.
    func mismatch() -> (expected: String, got: String)? {
        if let e = expectedCRC32C {
            let got = CRC32C.base64(crc)
            return got == e ? nil : ("crc32c \(e)", "crc32c \(got)")
        }
        if let e = expectedMD5, let md5 {
            let got = Data(md5.finalize()).base64EncodedString()
            return got == e ? nil : ("md5 \(e)", "md5 \(got)")
        }
        return nil
    }
}
