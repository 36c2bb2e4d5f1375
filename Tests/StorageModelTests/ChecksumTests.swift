import Foundation
import StorageModel
import Testing

@Suite struct ChecksumTests {
    @Test func knownValue() {
        // The CRC-32C check value of "123456789".
        #expect(CRC32C.checksum(Data("123456789".utf8)) == 0xE306_9283)
    }

    @Test func longInputsMatchAnIndependentImplementation() {
        // Values from the google-crc32c package: long enough for the three-lane path, and not
        // a multiple of its blocks.
        #expect(CRC32C.checksum(Data((0..<100_003).map { UInt8($0 * 7 % 251) })) == 0x1FC4_CD15)
        #expect(CRC32C.checksum(Data(count: 3 * 4096 * 5 + 17)) == 0x988A_2C2A)
    }

    @Test func anySplitIntoUpdatesGivesTheSameChecksum() {
        var rng = SystemRandomNumberGenerator()
        let data = Data((0..<70_000).map { _ in UInt8.random(in: 0...255, using: &rng) })
        let whole = CRC32C.checksum(data)
        for _ in 0..<20 {
            var c = CRC32C()
            var at = 0
            while at < data.count {
                let n = min(data.count - at, [1, 7, 4095, 12_289, 40_000].randomElement(using: &rng)!)
                c.update(data.subdata(in: at..<(at + n)))
                at += n
            }
            #expect(c.value == whole)
        }
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
