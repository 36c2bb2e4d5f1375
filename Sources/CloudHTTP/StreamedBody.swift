import Crypto
import Foundation
import NIOCore
import StorageModel

/// A request body streamed from an upload source: `length` bytes from `offset`, read a piece at a
/// time as the connection takes them (never whole in memory). Every piece goes through `sums`
/// (the checksums of the bytes sent) and moves `progress` (what the stall watchdog watches).
package struct StreamedBody: Sendable {
    package let source: UploadSource
    package let offset: Int64
    package let length: Int64
    package let sums: UploadChecksums
    package let progress: BodyProgress
    /// A body that takes no byte for this long while the connection is open is a stall.
    package let stallTimeout: Duration
    /// What one read from the source takes in at most. Also the grain at which progress is seen
    /// (the stall watchdog, the operation's deadline: docs/SEMANTICS.md §5.2): a link that takes
    /// less than one piece per `--idle-timeout` (26 KB/s at 10 s) counts as stalled, once what
    /// the socket buffers hold has drained (`SendQueue`, or where it is not seen `SendBacklog`).
    /// (1 MiB pieces were tried: about a tenth faster to a local server, but a piece then takes half
    /// of a 1 s idle timeout at 2 MiB/s, and a moving upload was taken for stalled on a busy
    /// machine: docs/BENCHMARKS.md, "An upload's pieces".)
    static let pieceSize = 1 << 18

    /// `clock`: the one the pieces' times are read on (the transport's).
    package init(source: UploadSource, offset: Int64, length: Int64, sums: UploadChecksums, stallTimeout: Duration,
                 clock: BucketClock) {
        self.progress = BodyProgress(clock: clock)
        self.source = source
        self.offset = offset
        self.length = length
        self.sums = sums
        self.stallTimeout = stallTimeout
    }

    /// The pieces, for the HTTP client (a new reader of the source for each attempt).
    var pieces: Pieces { Pieces(body: self) }

    struct Pieces: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let body: StreamedBody

        func makeAsyncIterator() -> Iterator {
            Iterator(body: body, position: body.offset, end: body.offset + body.length)
        }

        struct Iterator: AsyncIteratorProtocol {
            let body: StreamedBody
            var position: Int64
            let end: Int64
            var reader: ChunkReader?

            mutating func next() async throws -> ByteBuffer? {
                guard position < end else {
                    reader?.close()
                    reader = nil
                    return nil
                }
                if reader == nil { reader = try ChunkReader(body.source) }
                let count = Int(Swift.min(Int64(StreamedBody.pieceSize), end - position))
                let piece = try reader!.read(at: position, count: count)
                await body.sums.add(piece, at: position)
                position += Int64(count)
                body.progress.advance(by: Int64(count))
                return piece
            }
        }
    }
}

/// How many bytes of a streamed body the connection has taken, and when (each piece's time, for
/// `SendBacklog`); read by the stall watchdog.
package final class BodyProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var taken: Int64 = 0
    private let clock: BucketClock
    private var pieces: SendBacklog
    package init(clock: BucketClock) {
        self.clock = clock
        pieces = SendBacklog(start: clock.now)
    }
    func advance(by n: Int64) {
        lock.lock()
        taken += n
        pieces.record(taken, at: clock.now)
        lock.unlock()
    }
    package var bytes: Int64 { lock.lock(); defer { lock.unlock() }; return taken }
    /// What the connection took at once and the pace it took the rest at, from the pieces' times.
    package var backlog: SendBacklog { lock.lock(); defer { lock.unlock() }; return pieces }
}

/// The checksums of an upload's bytes, in order from byte 0, fed by the pieces as they are sent.
/// A resumed request sends again from the offset the server persisted: bytes already summed are
/// skipped, so the sum covers each byte once. The server's answer must carry the same sums
/// (`mismatch`).
///
/// The crc32c is summed as the bytes go (the CPU's instruction: little cost). Cloud Storage
/// reports a crc32c for every object, so that is what the answer is checked against, as Google's
/// own clients check it. An md5 is computed only for a server that reports an md5 and no crc32c,
/// by reading the source again after the upload: summed beside the sending, the md5 took half of
/// the daemon's CPU in an upload and set its pace (docs/bench-results/fio.md).
package final class UploadChecksums: @unchecked Sendable {
    private let lock = NSLock()
    private var crc = CRC32C()
    private var summedTo: Int64 = 0
    /// Where the bytes come from, read again for an md5 (nil: no md5 can be made).
    private let source: UploadSource?

    package init(source: UploadSource?) { self.source = source }

    /// The sums of `data` at once (a multipart body).
    package convenience init(_ data: Data) {
        self.init(source: .data(data))
        data.withUnsafeBytes { crc.update($0) }
        summedTo = Int64(data.count)
    }

    /// Adds the bytes of `piece` (which starts at `position`) not summed yet.
    package func add(_ piece: ByteBuffer, at position: Int64) async {
        lock.withLock {
            let end = position + Int64(piece.readableBytes)
            guard position <= summedTo, end > summedTo else { return }
            let skip = Int(summedTo - position)
            piece.withUnsafeReadableBytes { raw in
                crc.update(UnsafeRawBufferPointer(rebasing: raw[skip...]))
            }
            summedTo = end
        }
    }

    package var bytesSummed: Int64 { lock.withLock { summedTo } }

    /// The crc32c in the JSON API's base64 form.
    package var crc32c: String { lock.withLock { crc.base64 } }

    /// The md5 of the source's first `size` bytes in the JSON API's base64 form, read in 1 MiB
    /// pieces; nil when the source cannot be read whole.
    package func md5(size: Int64) -> String? {
        guard let source, let reader = try? ChunkReader(source) else { return nil }
        var md5 = Insecure.MD5()
        var at: Int64 = 0
        while at < size {
            guard let piece = try? reader.read(at: at, count: Int(min(1 << 20, size - at))), piece.readableBytes > 0 else { return nil }
            piece.withUnsafeReadableBytes { md5.update(bufferPointer: $0) }
            at += Int64(piece.readableBytes)
        }
        return Data(md5.finalize()).base64EncodedString()
    }

    /// Why `info` is not the object these bytes make, or nil when the sum the server reported
    /// matches: its crc32c, else its md5 (a server that reports neither confirms nothing and is
    /// not contradicted either).
    package func mismatch(_ info: ObjectInfo, size: Int64) async -> (expected: String, got: String)? {
        if info.size != size { return ("\(size) bytes", "\(info.size) bytes") }
        let c = crc32c
        if let got = info.crc32c { return got != c ? ("crc32c \(c)", "crc32c \(got)") : nil }
        if let got = info.md5Hash, let m = md5(size: size), got != m { return ("md5 \(m)", "md5 \(got)") }
        return nil
    }
}
