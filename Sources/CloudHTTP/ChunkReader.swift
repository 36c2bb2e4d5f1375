import Foundation
import NIOCore
import StorageModel
#if canImport(Glibc)
import Glibc
#endif

/// Reads an upload source a chunk at a time (files are never loaded whole), a file straight into
/// the buffer that is sent (one copy, no intermediate Data).
package final class ChunkReader {
    private let data: Data?
    private var fd: Int32 = -1

    package init(_ source: UploadSource) throws {
        switch source {
        case .data(let d):
            data = d
        case .file(let path):
            data = nil
            fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw StorageError.invalidArgument(message: "cannot open upload source \(path): \(String(cString: strerror(errno)))")
            }
        }
    }

    deinit { close() }

    package func read(at offset: Int64, count: Int) throws -> ByteBuffer {
        if count <= 0 { return ByteBuffer() }
        if let data {
            let lo = data.startIndex + Int(offset)
            return ByteBuffer(data: data[lo..<(lo + count)])
        }
        guard fd >= 0 else { return ByteBuffer() }
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        var failure: Int32 = 0
        while buffer.readableBytes < count {
            let want = count - buffer.readableBytes
            let at = off_t(offset) + off_t(buffer.readableBytes)
            let n = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { p -> Int in
                let r = pread(fd, p.baseAddress, want, at)
                if r < 0 { failure = errno }
                return max(r, 0)
            }
            if failure == EINTR { failure = 0; continue }
            if failure != 0 {
                throw StorageError.invalidArgument(message: "cannot read the upload source at \(at): \(String(cString: strerror(failure)))")
            }
            if n == 0 {
                throw StorageError.invalidArgument(message: "upload source shrank while uploading (wanted \(count) bytes at \(offset), got \(buffer.readableBytes))")
            }
        }
        return buffer
    }

    package func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}
