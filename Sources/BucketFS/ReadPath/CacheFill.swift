import Foundation
import FuseKit
import StorageModel

/// A read-cache file being filled (docs/SEMANTICS.md §3.6, "The read cache"): a sparse file of
/// the object's size into which every stream reading that version writes what its parts and
/// on-demand reads deliver, with the ranges filled so far. Once they cover the object, the cache
/// has the file checked (`check`) before it is ever served. Shared by all opens of the version
/// while it fills; never read from before it is complete and checked.
final class CacheFill: @unchecked Sendable {
    /// Writes `bytes` at `offset` of a descriptor; 0, or the errno of the failure (tests inject
    /// ENOSPC here).
    typealias Writer = @Sendable (_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ offset: Int64) -> Int32

    let key: ReadCacheRecord.Key
    let size: Int64
    let path: String
    private let writer: Writer
    /// Told (outside the lock) once every byte is in, and once a write failed.
    private let onFull: @Sendable (CacheFill) -> Void
    private let onFailure: @Sendable (CacheFill, Int32) -> Void

    // Guarded by `lock`; held across each write, so no write reaches a descriptor once closed.
    private let lock = NSLock()
    private var fd: Int32
    /// Filled ranges, sorted, merged, disjoint.
    private var filled: [Range<Int64>] = []
    private var state = State.filling
    enum State { case filling, full, over }

    init(key: ReadCacheRecord.Key, size: Int64, path: String, fd: Int32, writer: @escaping Writer,
         onFull: @escaping @Sendable (CacheFill) -> Void, onFailure: @escaping @Sendable (CacheFill, Int32) -> Void) {
        self.key = key
        self.size = size
        self.path = path
        self.fd = fd
        self.writer = writer
        self.onFull = onFull
        self.onFailure = onFailure
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// The pwrite(2) the cache uses.
    static let pwriteAll: Writer = { fd, bytes, offset in
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            done += n
        }
        return 0
    }

    /// Bytes of the object filled so far.
    var filledBytes: Int64 { lock.withLock { filled.reduce(0) { $0 + $1.upperBound - $1.lowerBound } } }
    var isFilling: Bool { lock.withLock { state == .filling } }

    /// `data`, the object's bytes at `offset` (checked for length by the read path; their
    /// checksum is the whole file's, checked once full), written in.
    func write(_ data: Data, at offset: Int64) {
        guard !data.isEmpty, offset >= 0, offset + Int64(data.count) <= size else { return }
        let range = offset..<(offset + Int64(data.count))
        var failed: Int32 = 0
        let nowFull: Bool = lock.withLock {
            guard state == .filling, !covered(range) else { return false }
            failed = data.withUnsafeBytes { writer(fd, $0, offset) }
            guard failed == 0 else {
                state = .over
                return false
            }
            add(range)
            guard filled.count == 1, filled[0] == 0..<size else { return false }
            state = .full
            return true
        }
        if failed != 0 { onFailure(self, failed) }
        if nowFull { onFull(self) }
    }

    /// Stops filling: later writes are dropped and the descriptor is closed.
    func abandon() {
        lock.withLock {
            state = .over
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }
    }

    /// Reads the full file back: each block's CRC-32C, and whether they combine into the
    /// object's crc32c. nil with what went wrong otherwise.
    func check(blockSize: Int) -> Result<[UInt32], CheckFailure> {
        let fd = lock.withLock { self.fd >= 0 ? dup(self.fd) : -1 }
        guard fd >= 0 else { return .failure(.init(description: "abandoned")) }
        defer { Glibc.close(fd) }
        var crcs: [UInt32] = []
        var whole: UInt32 = 0
        var buf = [UInt8](repeating: 0, count: blockSize)
        var off: Int64 = 0
        while off < size {
            let len = Int(min(Int64(blockSize), size - off))
            var done = 0
            while done < len {
                let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, len - done, off_t(off) + off_t(done)) }
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return .failure(.init(description: "cannot read it back at \(off + Int64(done)): \(n < 0 ? Errno(errno).description : "short")")) }
                done += n
            }
            let c = buf.withUnsafeBytes { CachedFile.crc(UnsafeRawBufferPointer(rebasing: $0[0..<len])) }
            crcs.append(c)
            whole = off == 0 ? c : CRC32C.combine(whole, c, length: Int64(len))
            off += Int64(len)
        }
        let got = CRC32C.base64(whole)
        guard got == key.crc32c else {
            return .failure(.init(description: "its bytes have CRC-32C \(got), the object's is \(key.crc32c)"))
        }
        return .success(crcs)
    }

    struct CheckFailure: Error, CustomStringConvertible { let description: String }

    // MARK: - ranges (caller holds `lock`)

    private func covered(_ r: Range<Int64>) -> Bool {
        filled.contains { $0.lowerBound <= r.lowerBound && r.upperBound <= $0.upperBound }
    }

    private func add(_ r: Range<Int64>) {
        var lo = r.lowerBound, hi = r.upperBound
        var kept: [Range<Int64>] = []
        for f in filled {
            if f.upperBound < lo || f.lowerBound > hi {
                kept.append(f)
            } else {
                lo = min(lo, f.lowerBound)
                hi = max(hi, f.upperBound)
            }
        }
        kept.append(lo..<hi)
        filled = kept.sorted { $0.lowerBound < $1.lowerBound }
    }
}
