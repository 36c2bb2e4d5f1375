import CChecksum
import Foundation

/// CRC-32C (Castagnoli), the checksum Cloud Storage reports as `crc32c`: reflected polynomial
/// 0x82F63B78, initial value and final xor 0xFFFFFFFF. Computed in C (the SSE4.2 instruction
/// where the CPU has it), so verifying every download costs little even in debug builds.
public struct CRC32C: Sendable, Equatable {
    public private(set) var value: UInt32 = 0

    public init() {}

    /// Continues a checksum of earlier bytes.
    public init(continuing value: UInt32) { self.value = value }

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        value = bucketfs_crc32c(value, base, bytes.count)
    }

    public mutating func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// Base64 of the big-endian checksum, as the JSON API's `crc32c` field.
    public var base64: String { Self.base64(value) }

    public static func base64(_ v: UInt32) -> String {
        Data([UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]).base64EncodedString()
    }

    /// The checksum of A followed by B, given checksum(A), checksum(B) and B's length.
    public static func combine(_ a: UInt32, _ b: UInt32, length: Int64) -> UInt32 {
        bucketfs_crc32c_combine(a, b, UInt64(max(0, length)))
    }

    public static func checksum(_ data: Data) -> UInt32 {
        var c = CRC32C()
        c.update(data)
        return c.value
    }

    /// The checksum of a file's first `length` bytes, read in 1 MiB
    /// pieces; nil when it cannot be read or is shorter.
    public static func ofFile(_ fd: Int32, length: Int64) -> UInt32? {
        var c = CRC32C()
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        var off: Int64 = 0
        while off < length {
            let want = Int(min(Int64(buf.count), length - off))
            let r = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, want, off_t(off)) }
            if r <= 0 { return nil }
            buf.withUnsafeBytes { c.update(UnsafeRawBufferPointer(rebasing: $0[0..<r])) }
            off += Int64(r)
        }
        return c.value
    }
}
