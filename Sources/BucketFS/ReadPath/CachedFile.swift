import Foundation
import StorageModel

/// One open of a complete read-cache file (docs/SEMANTICS.md §3.6, "The read cache"): reads
/// become `pread`s of the file, each checked block by block against the CRC-32C its record
/// holds, so bytes changed on disk after the file was filled and checked are never returned.
/// The descriptor stays open while a stream holds this (an eviction may unlink the file
/// meanwhile; its bytes stay readable and checked).
final class CachedFile: @unchecked Sendable {
    /// A block of the file does not hold what it held when it was checked.
    struct Changed: Error, CustomStringConvertible {
        let block: Int
        let expected: UInt32
        let got: UInt32?
        var description: String {
            let g = got.map { CRC32C.base64($0) } ?? "(unreadable)"
            return "block \(block) has CRC-32C \(g), not \(CRC32C.base64(expected))"
        }
    }

    let record: ReadCacheRecord
    private let fd: Int32
    private let crcs: [UInt32]
    /// Told once a read found the file changed (the cache drops it), and of each read's bytes.
    private let onChanged: @Sendable (Changed) -> Void
    private let onServed: @Sendable (Int) -> Void

    /// The file at `path` for `record`, or nil when it is missing or not the size the record says.
    init?(path: String, record: ReadCacheRecord, onChanged: @escaping @Sendable (Changed) -> Void,
          onServed: @escaping @Sendable (Int) -> Void) {
        guard let crcs = record.crcs else { return nil }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, Int64(st.st_size) == record.size else {
            Glibc.close(fd)
            return nil
        }
        self.fd = fd
        self.record = record
        self.crcs = crcs
        self.onChanged = onChanged
        self.onServed = onServed
    }

    deinit { Glibc.close(fd) }

    /// The bytes at `range` (within the object), read with the whole blocks around them, each
    /// block checked; `Changed` (after telling the cache) when one differs or cannot be read.
    func read(_ range: Range<Int64>, pool: BufferPool? = nil) throws(Changed) -> Data {
        let bs = Int64(record.blockSize)
        let lo = range.lowerBound / bs * bs
        let hi = min(record.size, (range.upperBound + bs - 1) / bs * bs)
        let count = Int(hi - lo)
        let r = LocalRead(fd, lo..<hi, pool: pool)
        let base = r.buffer.base
        let done = r.done
        var block = Int(lo / bs)
        var at = 0
        while at < count {
            let len = min(Int(bs), count - at)
            let got: UInt32? = at + len <= done ? Self.crc(UnsafeRawBufferPointer(start: base + at, count: len)) : nil
            if got != crcs[block] {
                r.giveBack()
                let e = Changed(block: block, expected: crcs[block], got: got)
                onChanged(e)
                throw e
            }
            block += 1
            at += len
        }
        // The disk is asked for what a reader in order reads next while this read goes to the
        // kernel (the FUSE request in flight is the only read-ahead the cache file gets otherwise).
        if hi < record.size {
            _ = posix_fadvise(fd, off_t(hi), off_t(min(Self.readAhead, record.size - hi)), POSIX_FADV_WILLNEED)
        }
        // No copy: the reply points into the buffer, which goes back when the reply has gone.
        let data = r.data(from: Int(range.lowerBound - lo), count: Int(range.upperBound - range.lowerBound))
        onServed(data.count)
        return data
    }

    /// How far past each read the disk is asked to read ahead.
    static let readAhead: Int64 = 8 << 20

    static func crc(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var c = CRC32C()
        c.update(bytes)
        return c.value
    }

    /// The whole object (the walk-ahead's small files), checked.
    func whole() throws(Changed) -> Data { try read(0..<record.size) }

    /// The largest file the kernel is handed to read itself: it is checked whole at the open
    /// (once per change of the file), which a reader of a few bytes of a larger one would pay for.
    static let kernelReadMax: Int64 = 2 << 30

    /// What `forKernel` found.
    enum KernelCheck: Equatable {
        /// The descriptor the kernel may read.
        case file(Int32)
        /// Not handed over (too large, or changing while it was checked): read as before.
        case notNow
        /// A block differs from its record: the cache was told and dropped the file.
        case changed
    }

    /// This file's descriptor for the kernel to read itself (docs/SEMANTICS.md §3.6, "The kernel
    /// reads the cache"), once every block is checked (or was, and the file has not changed since,
    /// `stamps`).
    func forKernel(stamps: KernelReadStamps, max: Int64 = kernelReadMax, pool: BufferPool? = nil) -> KernelCheck {
        guard record.size <= max, let before = KernelReadStamps.stamp(fd) else { return .notNow }
        if stamps.isChecked(before) { return .file(fd) }
        stamps.noteCheck()
        let bs = Int64(record.blockSize)
        let chunk = Swift.max(bs, (8 << 20) / bs * bs)
        var at: Int64 = 0
        var block = 0
        while at < record.size {
            let r = LocalRead(fd, at..<min(record.size, at + chunk), pool: pool)  // one pooled 8 MiB buffer, reused
            defer { r.giveBack() }
            let count = Int(min(chunk, record.size - at))
            var off = 0
            while off < count {
                let len = min(Int(bs), count - off)
                let crc: UInt32? = off + len <= r.done ? Self.crc(UnsafeRawBufferPointer(start: r.buffer.base + off, count: len)) : nil
                if crc != crcs[block] {
                    onChanged(Changed(block: block, expected: crcs[block], got: crc))
                    return .changed
                }
                block += 1
                off += len
            }
            at += Int64(count)
        }
        // Changed while it was read: checked bytes of an earlier state prove nothing of this one.
        guard KernelReadStamps.stamp(fd) == before else { return .notNow }
        stamps.note(before)
        return .file(fd)
    }
}

