import Foundation
import FuseKit
import StorageModel

/// Opening files and reading them (SPEC §5, §6): reads pinned to the generation opened, every
/// part checked for length, whole-object reads checked against the object's checksum.
extension BucketFileSystem {
    public func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .regular else { throw .EISDIR }
        if flags.isWrite {
            if config.readOnly { throw .EROFS }
            try await stage(n, truncate: flags.truncate)
        } else {
            // Close-to-open: a file opened after its TTL sees the current generation.
            try await refreshed(n)
            // Known to be gone (a stat saw 404, or unlinked) and not being written here.
            if locked({ n.removed && n.staged == nil }) { throw .ENOENT }
        }
        return locked {
            if flags.isWrite { n.staged?.openHandles += 1 }
            let h = Handle(ino: ino, writable: flags.isWrite, info: n.info, path: n.path, window: config.readAheadInitial)
            // Close-to-open: pages cached for the generation opened last stay; any other
            // generation (or local content being written) drops them.
            if !flags.isWrite, n.staged == nil, let g = n.info?.generation {
                h.keepCache = n.cachedGeneration == g
                n.cachedGeneration = g
            } else {
                n.cachedGeneration = nil
            }
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            if !flags.isWrite, let s = n.staged { s.openHandles += 1 }
            return fh
        }
    }

    public func keepsCache(ino: UInt64, fh: UInt64) -> Bool {
        locked { handles[fh]?.keepCache ?? false }
    }

    public func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        guard let h = locked({ handles[fh] }), let n = locked({ nodes[ino] }) else { throw .EBADF }
        if let s = locked({ n.staged }) {
            var buf = [UInt8](repeating: 0, count: size)
            let r = buf.withUnsafeMutableBytes { pread(s.fd, $0.baseAddress, size, off_t(offset)) }
            if r < 0 { throw Errno(Glibc.errno) }
            return Data(buf[0..<r])
        }
        let off = Int64(offset)
        if off >= h.size || size == 0 { return Data() }
        let end = min(h.size, off + Int64(size))
        let key = "r:\(h.path)#\(h.generation)"
        if let e = failures.check(key) { throw e }
        do {
            return try await h.readLock.withLock { () async throws -> Data in
                if let bad = h.corrupt { throw bad }
                if off >= h.bufferStart, end <= h.bufferStart + Int64(h.buffer.count) {
                    h.lastEnd = end
                    let lo = Int(off - h.bufferStart)
                    return h.buffer.subdata(in: lo..<(lo + Int(end - off)))
                }
                // Sequential reads double the window; a jump starts over.
                if off == h.lastEnd || (off >= h.bufferStart && off <= h.bufferStart + Int64(h.buffer.count)) {
                    h.window = min(h.window * 2, self.config.readAheadMax)
                } else {
                    h.window = self.config.readAheadInitial
                }
                let fetchEnd = min(h.size, max(end, off + Int64(h.window)))
                let data = try await self.fetch(h.path, generation: h.generation, off..<fetchEnd)
                if let (expected, got) = h.check?.add(data, at: off) {
                    let e = StorageError.nonMatchingChecksum(path: "\(h.path) generation \(h.generation) (the bytes read)",
                                                             expected: expected, got: got)
                    h.corrupt = e
                    h.buffer = Data()
                    self.locked { h.readAheadBytes = 0 }
                    throw e
                }
                h.buffer = data
                self.locked { h.readAheadBytes = data.count }
                h.bufferStart = off
                h.lastEnd = end
                return data.prefix(Int(end - off))
            }
        } catch {
            let e = fail(error, "read", h.path)
            failures.note(key, e)
            throw e
        }
    }

    /// Reads exactly `range` of a generation. An answer of another length is a transport fault:
    /// retried within the operation's deadline, never returned as data.
    func fetch(_ path: String, generation: Int64, _ range: Range<Int64>) async throws -> Data {
        let want = Int(range.upperBound - range.lowerBound)
        let deadline = OperationContext.deadline(capping: .now + .milliseconds(Int64(config.operationTimeout * 1000)))
        var attempt = 0
        while true {
            attempt += 1
            let data = try await store.read(path, generation: generation, range: range)
            if data.count == want { return data }
            let problem = "asked for \(want) bytes at offset \(range.lowerBound) of generation \(generation), got \(data.count)"
            let pause = Duration.milliseconds(100 << min(attempt, 5))
            if attempt >= 5 || ContinuousClock.now + pause >= deadline {
                throw StorageError.retryLimitExceeded(message: "read \(path): \(problem) (\(attempt) attempts)")
            }
            logger.warning("read of '\(path)': \(problem); retrying")
            do { try await Task.sleep(for: pause) } catch { throw StorageError.cancelled }
        }
    }
}
