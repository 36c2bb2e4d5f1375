import Foundation
import StorageModel

/// `cat`'s download: one generation, a chunk at a time, each streamed. A download that breaks
/// after some bytes goes on from the last byte received, with a new request for the rest (a
/// stream retries by itself only until its first byte: docs/SEMANTICS.md §5.7), and a chunk that
/// brings no byte fails with the stream's own error, its retries spent. The whole object's bytes
/// are checked against its crc32c at the end (docs/SEMANTICS.md §5.1).
enum ResumedDownload {
    /// Bytes asked for per request, and held in memory at most.
    static let chunk: Int64 = 16 << 20

    /// Hands the bytes of `info`'s generation of `name` to `write`, in order. Returns how many
    /// requests broke after some of their bytes and were resumed.
    @discardableResult
    static func copy(_ store: any ObjectStore, _ name: String, _ info: ObjectInfo,
                     write: (Data) throws -> Void) async throws -> Int {
        var off: Int64 = 0
        var resumed = 0
        var sum = CRC32C()
        while off < info.size {
            let end = min(info.size, off + chunk)
            let got = Received()
            var broke: (any Error)? = nil
            do {
                try await store.stream(name, generation: info.generation, range: off..<end) { got.append($0) }
            } catch {
                broke = error
            }
            let data = got.take()
            if let broke {
                // Nothing came: the stream's own retries are spent.
                if data.isEmpty { throw broke }
                resumed += 1
            } else if Int64(data.count) != end - off {
                throw StorageError.unknown(status: 0, message: "download of \(name): asked for \(end - off) bytes at \(off), \(data.count) came")
            }
            sum.update(data)
            try write(data)
            off += Int64(data.count)
        }
        if let expected = info.crc32c, sum.base64 != expected {
            throw StorageError.nonMatchingChecksum(path: "\(name) generation \(info.generation)", expected: "crc32c \(expected)",
                                                   got: "crc32c \(sum.base64)")
        }
        return resumed
    }

    /// What a stream delivered (on a network thread), taken once it ends.
    private final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var data = Data()
        func append(_ d: Data) { lock.withLock { data.append(d) } }
        func take() -> Data { lock.withLock { data } }
    }
}
