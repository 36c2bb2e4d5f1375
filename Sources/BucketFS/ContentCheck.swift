import Crypto
import Foundation
import StorageModel

/// A running checksum of an object's bytes read in order from offset 0, compared with what the
/// object's metadata says once the last byte is in (SPEC §5): crc32c, or md5 when there is none.
struct ContentCheck {
    let expectedCRC32C: String?
    let expectedMD5: String?
    let size: Int64
    private var crc = CRC32C()
    private var md5: Insecure.MD5?
    /// Bytes checked so far, from 0; nil once the reads left the sequence (a seek).
    private(set) var checkedTo: Int64? = 0

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

    /// Adds bytes that were read at `offset`. Returns a mismatch (expected, got) when they complete
    /// the object and do not match; nil otherwise.
    mutating func add(_ data: Data, at offset: Int64) -> (expected: String, got: String)? {
        guard let done = checkedTo, canCheck else { return nil }
        let end = offset + Int64(data.count)
        guard offset <= done else { checkedTo = nil; return nil }  // a gap: no longer in order
        guard end > done else { return nil }                        // already counted
        let tail = data.dropFirst(Int(done - offset))
        crc.update(tail)
        md5?.update(data: tail)
        checkedTo = end
        guard end >= size else { return nil }
        return mismatch()
    }

    /// Compares the finished sums with the metadata.
    func mismatch() -> (expected: String, got: String)? {
        if let e = expectedCRC32C {
            let got = crc.base64
            return got == e ? nil : ("crc32c \(e)", "crc32c \(got)")
        }
        if let e = expectedMD5, let md5 {
            let got = Data(md5.finalize()).base64EncodedString()
            return got == e ? nil : ("md5 \(e)", "md5 \(got)")
        }
        return nil
    }
}
