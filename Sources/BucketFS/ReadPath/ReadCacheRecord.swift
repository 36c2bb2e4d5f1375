import Crypto
import Foundation
import StorageModel

/// What the read cache knows of one of its files (docs/SEMANTICS.md §3.6, "The read cache"): the
/// object version it holds (bucket, name, generation, crc32c) and the CRC-32C of each block of
/// it. Written beside the data file (`HASH.json`, HASH naming the version) only once the whole
/// file was checked against the object's crc32c; every read from the file checks the blocks it
/// touches against these.
struct ReadCacheRecord: Codable, Equatable {
    /// The version of an object a cache file holds. Another generation, or the same generation
    /// with another crc32c, is another key: it never finds this file.
    struct Key: Hashable, Sendable {
        let bucket: String
        let name: String
        let generation: Int64
        let crc32c: String

        /// Where its files are: SHA-256 of the four fields, hex (names of any length and bytes
        /// make file names of one length and alphabet).
        var hash: String {
            var h = SHA256()
            for field in [bucket, name, String(generation), crc32c] {
                h.update(data: Data(field.utf8))
                h.update(data: Data([0]))
            }
            return h.finalize().map { String(format: "%02x", $0) }.joined()
        }
    }

    static let currentFormat = 1
    /// The unit each read is checked in: a read touches whole blocks.
    static let defaultBlockSize = 256 << 10

    var format = Self.currentFormat
    let bucket: String
    let name: String
    let generation: Int64
    let crc32c: String
    let size: Int64
    let blockSize: Int
    /// Each block's CRC-32C, big-endian, base64.
    let blocks: String

    init(key: Key, size: Int64, blockSize: Int, crcs: [UInt32]) {
        bucket = key.bucket
        name = key.name
        generation = key.generation
        crc32c = key.crc32c
        self.size = size
        self.blockSize = blockSize
        var bytes = [UInt8]()
        bytes.reserveCapacity(crcs.count * 4)
        for c in crcs { bytes += [UInt8(c >> 24), UInt8((c >> 16) & 0xFF), UInt8((c >> 8) & 0xFF), UInt8(c & 0xFF)] }
        blocks = Data(bytes).base64EncodedString()
    }

    var key: Key { Key(bucket: bucket, name: name, generation: generation, crc32c: crc32c) }

    var crcs: [UInt32]? {
        guard let d = Data(base64Encoded: blocks), d.count % 4 == 0 else { return nil }
        let b = [UInt8](d)
        return stride(from: 0, to: b.count, by: 4).map {
            UInt32(b[$0]) << 24 | UInt32(b[$0 + 1]) << 16 | UInt32(b[$0 + 2]) << 8 | UInt32(b[$0 + 3])
        }
    }

    static func blockCount(size: Int64, blockSize: Int) -> Int {
        Int((size + Int64(blockSize) - 1) / Int64(blockSize))
    }

    /// What is wrong with a record read from `hash`.json, or nil: a record is trusted only when
    /// its file name is its key's hash and its blocks cover its size.
    func problem(hash: String) -> String? {
        if format != Self.currentFormat { return "format \(format), not \(Self.currentFormat)" }
        if key.hash != hash { return "its name does not match the object it names" }
        if size <= 0 || blockSize <= 0 { return "size \(size), block size \(blockSize)" }
        guard let crcs else { return "its block checksums are unreadable" }
        if crcs.count != Self.blockCount(size: size, blockSize: blockSize) {
            return "\(crcs.count) block checksums for \(size) bytes"
        }
        return nil
    }

    /// The key of an object the cache may hold: one with a crc32c that describes the bytes read
    /// (not one a server may hand over decompressed), and not empty.
    static func key(_ info: ObjectInfo) -> Key? {
        guard let crc = info.crc32c, info.size > 0,
              !(info.writable.contentEncoding?.lowercased().contains("gzip") ?? false) else { return nil }
        return Key(bucket: info.bucket, name: info.name, generation: info.generation, crc32c: crc)
    }
}
