@testable import BucketFS
import Foundation
import StorageModel
import Testing

/// ContentCheck with pieces in any order (parallel parts, concurrent kernel reads).
@Suite struct ContentCheckTests {
    func info(_ data: Data) -> ObjectInfo {
        ObjectInfo(bucket: "b", name: "o", generation: 1, metageneration: 1, size: Int64(data.count),
                   timeCreated: Date(), updated: Date(), md5Hash: nil,
                   crc32c: CRC32C.base64(CRC32C.checksum(data)), writable: WritableMetadata())
    }

    /// Adds `data` cut at `cuts`, pieces in `order`; returns the verdict of the last add and
    /// whether the check completed.
    func run(_ data: Data, expected: ObjectInfo, cuts: [Int], order: [Int]) -> (mismatch: Bool, complete: Bool) {
        let bounds = [0] + cuts + [data.count]
        var check = ContentCheck(expected)
        var bad = false
        for i in order {
            let piece = data.subdata(in: bounds[i]..<bounds[i + 1])
            if check.add(piece, at: Int64(bounds[i])) != nil { bad = true }
        }
        return (bad, check.isComplete)
    }

    @Test func piecesInAnyOrderAreChecked() {
        var rng = SystemRandomNumberGenerator()
        let data = Data((0..<100_000).map { _ in UInt8.random(in: 0...255, using: &rng) })
        let good = info(data)
        for _ in 0..<30 {
            let cuts = (0..<7).map { _ in Int.random(in: 1..<data.count, using: &rng) }.sorted()
            let order = Array(0...7).shuffled(using: &rng)
            let r = run(data, expected: good, cuts: cuts, order: order)
            #expect(!r.mismatch && r.complete, "cuts \(cuts) order \(order)")
            // One flipped byte anywhere is caught, whatever the order.
            var damaged = data
            let at = Int.random(in: 0..<data.count, using: &rng)
            damaged[at] ^= 0x40
            let d = run(damaged, expected: good, cuts: cuts, order: order)
            #expect(d.mismatch && d.complete, "byte \(at) cuts \(cuts) order \(order)")
        }
    }

    @Test func overlappingAndRepeatedPiecesCountOnce() {
        let data = Data((0..<10_000).map { UInt8($0 % 251) })
        var check = ContentCheck(info(data))
        #expect(check.add(data.subdata(in: 5000..<8000), at: 5000) == nil)
        #expect(check.add(data.subdata(in: 0..<6000), at: 0) == nil)  // overlaps the waiting piece
        #expect(check.add(data.subdata(in: 0..<3000), at: 0) == nil)  // already counted
        #expect(!check.isComplete)
        #expect(check.add(data.subdata(in: 6000..<10_000), at: 6000) == nil)
        #expect(check.isComplete)
    }
}
