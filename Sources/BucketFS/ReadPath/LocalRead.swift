import Foundation

/// Reads of a file on this machine (the embedded bucket's blob of a generation, a read cache's
/// file) into the read path's pooled buffers: one `pread` loop, whose reply points into the
/// buffer and gives it back once it has gone to the kernel (docs/SEMANTICS.md §3.6). A fresh
/// allocation at every read would be a new mapping whose pages the kernel zeroes first.
struct LocalRead {
    let buffer: BufferPool.Buffer
    /// Bytes read: fewer than asked at a file that ends early.
    let done: Int
    /// The errno of a read that failed (nil when none did).
    let failure: Int32?
    private let pool: BufferPool?

    /// Reads `range` of `fd` into a buffer of the pool (a buffer of its own without one).
    init(_ fd: Int32, _ range: Range<Int64>, pool: BufferPool?) {
        let count = Int(range.upperBound - range.lowerBound)
        let buf = pool?.take(count)
            ?? BufferPool.Buffer(base: UnsafeMutableRawPointer.allocate(byteCount: max(1, count), alignment: 16), capacity: count)
        var done = 0
        var failure: Int32?
        while done < count {
            let n = pread(fd, buf.base + done, count - done, off_t(range.lowerBound) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                failure = errno
                break
            }
            if n == 0 { break }
            done += n
        }
        buffer = buf
        self.done = done
        self.failure = failure
        self.pool = pool
    }

    /// The buffer goes back (a read that is not answered with it).
    func giveBack() {
        if let pool { pool.give(buffer) } else { buffer.base.deallocate() }
    }

    /// `count` bytes from `offset` in the buffer, with no copy: the buffer goes back when the
    /// Data is released.
    func data(from offset: Int = 0, count: Int) -> Data {
        let read = self
        return Data(bytesNoCopy: buffer.base + offset, count: count, deallocator: .custom { _, _ in read.giveBack() })
    }
}
