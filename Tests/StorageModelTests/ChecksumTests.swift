import Foundation
import StorageModel
import Testing

@Suite struct ChecksumTests {
    @Test func knownValue() {
        // The CRC-32C check value of "123456789".
        #expect(CRC32C.checksum(Data("123456789".utf8)) == 0xE306_9283)
    }

    @Test func combiningPartsGivesTheWholeChecksum() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            let n = Int.random(in: 0..<5000, using: &rng)
            let data = Data((0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) })
            let cut = Int.random(in: 0...n, using: &rng)
            let a = data.prefix(cut), b = data.dropFirst(cut)
            let combined = CRC32C.combine(CRC32C.checksum(Data(a)), CRC32C.checksum(Data(b)), length: Int64(b.count))
            #expect(combined == CRC32C.checksum(data), "split \(n) at \(cut)")
        }
    }
}
