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

/// The crc32c and md5 of an upload's bytes in order from byte 0, fed by the pieces as they are
/// sent. A resumed request sends again from the offset the server persisted: bytes already
/// summed are skipped, so the sums cover each byte once. The server's answer must carry the same
/// sums (`mismatch`).
///
/// The md5 is computed beside the sending, on a queue of its own: it costs as much CPU as the
/// rest of the upload, and done inline it held the body back (README, "Writes"). Pieces wait
/// for it sharing the sent buffer's storage (no copy), at most `backlogLimit` bytes of them; the
/// sender waits when it is ahead by more.
package final class UploadChecksums: @unchecked Sendable {
    private let lock = NSLock()
    private var crc = CRC32C()
    private var summedTo: Int64 = 0
    /// Bytes handed to `hasher` and not yet hashed; senders waiting for it to shrink.
    private var backlog = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []
    /// Touched only on `hasher`.
    private var md5 = Insecure.MD5()
    private let hasher = DispatchQueue(label: "bucketfs.upload-md5")
    static let backlogLimit = 16 << 20

    package init() {}

    /// The sums of `data` at once (a multipart body).
    package convenience init(_ data: Data) {
        self.init()
        data.withUnsafeBytes { raw in
            crc.update(raw)
            hasher.sync { md5.update(bufferPointer: raw) }
        }
        summedTo = Int64(data.count)
    }

    /// Adds the bytes of `piece` (which starts at `position`) not summed yet; waits while the md5
    /// is more than `backlogLimit` bytes behind.
    package func add(_ piece: ByteBuffer, at position: Int64) async {
        await room()
        lock.withLock {
            let end = position + Int64(piece.readableBytes)
            guard position <= summedTo, end > summedTo else { return }
            let skip = Int(summedTo - position)
            guard let fresh = piece.getSlice(at: piece.readerIndex + skip, length: piece.readableBytes - skip) else { return }
            fresh.withUnsafeReadableBytes { crc.update($0) }
            summedTo = end
            backlog += fresh.readableBytes
            // Queued under the lock: the md5 sees the pieces in the order they were summed.
            hasher.async { [self] in
                fresh.withUnsafeReadableBytes { md5.update(bufferPointer: $0) }
                let ready = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
                    backlog -= fresh.readableBytes
                    guard backlog < Self.backlogLimit else { return [] }
                    defer { waiters.removeAll() }
                    return waiters
                }
                for w in ready { w.resume() }
            }
        }
    }

    private func room() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            lock.lock()
            if backlog < Self.backlogLimit {
                lock.unlock()
                c.resume()
            } else {
                waiters.append(c)
                lock.unlock()
            }
        }
    }

    package var bytesSummed: Int64 { lock.withLock { summedTo } }

    /// (crc32c, md5) in the JSON API's base64 form, once the md5 has caught up.
    package func base64() async -> (crc32c: String, md5: String) {
        let digest = await withCheckedContinuation { (c: CheckedContinuation<Data, Never>) in
            hasher.async { [self] in c.resume(returning: Data(md5.finalize())) }
        }
        return lock.withLock { (crc.base64, digest.base64EncodedString()) }
    }

    /// Why `info` is not the object these bytes make, or nil when every sum the server reported
    /// matches (a server that reports none confirms nothing and is not contradicted either).
    package func mismatch(_ info: ObjectInfo, size: Int64) async -> (expected: String, got: String)? {
        let (c, m) = await base64()
        if info.size != size { return ("\(size) bytes", "\(info.size) bytes") }
        if let got = info.crc32c, got != c { return ("crc32c \(c)", "crc32c \(got)") }
        if let got = info.md5Hash, got != m { return ("md5 \(m)", "md5 \(got)") }
        return nil
    }
}
