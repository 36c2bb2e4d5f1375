import CloudHTTP
import Crypto
import Foundation
import GCSStore
import NIOCore
import StorageModel
import Testing

/// The sums an upload is confirmed against: the md5 runs on a queue of its own beside the
/// sending, so these check that it still covers every byte once, in order.
@Suite struct UploadChecksumsTests {
    private func expected(_ data: Data) -> (crc32c: String, md5: String) {
        (CRC32C.base64(CRC32C.checksum(data)), Data(Insecure.MD5.hash(data: data)).base64EncodedString())
    }

    /// Sends `data[from...]` in pieces of `piece` bytes, then checks that the sums cover all of it.
    private func sendRest(of data: Data, from: Int, piece: Int, into sums: UploadChecksums) async {
        var at = from
        while at < data.count {
            let end = min(data.count, at + piece)
            await sums.add(ByteBuffer(data: data[at..<end]), at: Int64(at))
            at = end
        }
        #expect(sums.bytesSummed == Int64(data.count))
        let got = await sums.base64()
        #expect(got.crc32c == expected(data).crc32c)
        #expect(got.md5 == expected(data).md5)
    }

    @Test func piecesSentOnceInOrderSumToTheWholeFile() async throws {
        // More than the md5's backlog limit, so the sender has to wait for it.
        let data = bigData(40 << 20, seed: 7)
        await sendRest(of: data, from: 0, piece: 1 << 20, into: UploadChecksums())
    }

    @Test func bytesSentAgainAfterAResumeAreSummedOnce() async throws {
        let data = bigData(5 << 20, seed: 8)
        let sums = UploadChecksums()
        // A first request sends 3 MiB + 10 bytes; the server kept 2 MiB; the resumed request sends
        // again from there, in pieces that straddle what was summed.
        await sums.add(ByteBuffer(data: data[0..<(1 << 20)]), at: 0)
        await sums.add(ByteBuffer(data: data[(1 << 20)..<((3 << 20) + 10)]), at: 1 << 20)
        await sendRest(of: data, from: 2 << 20, piece: 700_001, into: sums)
    }

    @Test func aPieceAfterAGapIsNotSummed() async throws {
        let data = bigData(3 << 20, seed: 9)
        let sums = UploadChecksums()
        await sums.add(ByteBuffer(data: data[0..<(1 << 20)]), at: 0)
        await sums.add(ByteBuffer(data: data[(2 << 20)...]), at: 2 << 20)
        #expect(sums.bytesSummed == 1 << 20)
        #expect(await sums.base64().md5 == expected(data[0..<(1 << 20)]).md5)
    }

    @Test func theWholeBodyAtOnceSumsTheSame() async throws {
        let data = bigData((1 << 20) + 17, seed: 10)
        let got = await UploadChecksums(data).base64()
        #expect(got.crc32c == expected(data).crc32c)
        #expect(got.md5 == expected(data).md5)
    }
}
