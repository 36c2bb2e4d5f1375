import CloudHTTP
import Crypto
import Foundation
import GCSStore
import NIOCore
import StorageModel
import Testing

/// The sums an upload is confirmed against: the crc32c of the bytes as they are sent, each byte
/// once and in order (a resumed request sends some again); an md5 only for a server that reports
/// no crc32c, read again from the source.
@Suite struct UploadChecksumsTests {
    private func crc32c(_ data: Data) -> String { CRC32C.base64(CRC32C.checksum(data)) }
    private func md5(_ data: Data) -> String { Data(Insecure.MD5.hash(data: data)).base64EncodedString() }

    private func object(size: Int, crc32c: String?, md5: String?) -> ObjectInfo {
        ObjectInfo(bucket: "b", name: "o", generation: 1, metageneration: 1, size: Int64(size),
                   timeCreated: Date(), updated: Date(), md5Hash: md5, crc32c: crc32c, writable: WritableMetadata())
    }

    /// Sends `data[from...]` in pieces of `piece` bytes, then checks that the sum covers all of it.
    private func sendRest(of data: Data, from: Int, piece: Int, into sums: UploadChecksums) async {
        var at = from
        while at < data.count {
            let end = min(data.count, at + piece)
            await sums.add(ByteBuffer(data: data[at..<end]), at: Int64(at))
            at = end
        }
        #expect(sums.bytesSummed == Int64(data.count))
        #expect(sums.crc32c == crc32c(data))
    }

    @Test func piecesSentOnceInOrderSumToTheWholeFile() async throws {
        let data = bigData(40 << 20, seed: 7)
        await sendRest(of: data, from: 0, piece: 1 << 20, into: UploadChecksums(source: .data(data)))
    }

    @Test func bytesSentAgainAfterAResumeAreSummedOnce() async throws {
        let data = bigData(5 << 20, seed: 8)
        let sums = UploadChecksums(source: .data(data))
        // A first request sends 3 MiB + 10 bytes; the server kept 2 MiB; the resumed request sends
        // again from there, in pieces that straddle what was summed.
        await sums.add(ByteBuffer(data: data[0..<(1 << 20)]), at: 0)
        await sums.add(ByteBuffer(data: data[(1 << 20)..<((3 << 20) + 10)]), at: 1 << 20)
        await sendRest(of: data, from: 2 << 20, piece: 700_001, into: sums)
    }

    @Test func aPieceAfterAGapIsNotSummed() async throws {
        let data = bigData(3 << 20, seed: 9)
        let sums = UploadChecksums(source: .data(data))
        await sums.add(ByteBuffer(data: data[0..<(1 << 20)]), at: 0)
        await sums.add(ByteBuffer(data: data[(2 << 20)...]), at: 2 << 20)
        #expect(sums.bytesSummed == 1 << 20)
        #expect(sums.crc32c == crc32c(data[0..<(1 << 20)]))
    }

    @Test func theWholeBodyAtOnceSumsTheSame() async throws {
        let data = bigData((1 << 20) + 17, seed: 10)
        let sums = UploadChecksums(data)
        #expect(sums.crc32c == crc32c(data))
        #expect(sums.md5(size: Int64(data.count)) == md5(data))
    }

    @Test func theAnswerIsHeldToItsCrc32cElseToAnMd5OfTheSourceElseToItsSize() async throws {
        let data = bigData(3 << 20, seed: 11)
        let path = NSTemporaryDirectory() + "upload-checksums-\(UUID().uuidString)"
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let sums = UploadChecksums(source: .file(path: path))
        await sendRest(of: data, from: 0, piece: 1 << 20, into: sums)
        let n = data.count
        let other = bigData(n, seed: 12)
        // The crc32c decides when the server reports one (Cloud Storage always does).
        #expect(await sums.mismatch(object(size: n, crc32c: crc32c(data), md5: md5(data)), size: Int64(n)) == nil)
        #expect(await sums.mismatch(object(size: n, crc32c: crc32c(other), md5: md5(data)), size: Int64(n)) != nil)
        // Only an md5: the staged file's, read again.
        #expect(await sums.mismatch(object(size: n, crc32c: nil, md5: md5(data)), size: Int64(n)) == nil)
        let wrong = await sums.mismatch(object(size: n, crc32c: nil, md5: md5(other)), size: Int64(n))
        #expect(wrong?.expected == "md5 \(md5(data))")
        // Neither: the size alone.
        #expect(await sums.mismatch(object(size: n, crc32c: nil, md5: nil), size: Int64(n)) == nil)
        #expect(await sums.mismatch(object(size: n - 1, crc32c: nil, md5: nil), size: Int64(n)) != nil)
    }
}
