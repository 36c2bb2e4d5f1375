import Foundation

/// CRC-32C (Castagnoli), the checksum Cloud Storage reports as `crc32c`: reflected polynomial
/// 0x82F63B78, initial value and final xor 0xFFFFFFFF. Table-driven, one byte at a time.
public struct CRC32C: Sendable {
    private static let table: [UInt32] = (0..<256).map { i -> UInt32 in
        var c = UInt32(i)
        for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
        return c
    }

    private var state: UInt32 = 0xFFFF_FFFF

    public init() {}

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var c = state
        Self.table.withUnsafeBufferPointer { t in
            for b in bytes { c = t[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        }
        state = c
    }

    public mutating func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    public var value: UInt32 { state ^ 0xFFFF_FFFF }

    /// Base64 of the big-endian checksum, as the JSON API's `crc32c` field.
    public var base64: String {
        let v = value
        return Data([UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]).base64EncodedString()
    }

    public static func checksum(_ data: Data) -> UInt32 {
        var c = CRC32C()
        c.update(data)
        return c.value
    }
}
