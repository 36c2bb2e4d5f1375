import Foundation
import FuseKit
import StorageModel

/// Opening files and reading them (SPEC §5, §6): reads pinned to the generation opened, every
/// part checked for length, whole-object reads checked against the object's checksum.
extension BucketFileSystem {
    public func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .regular else { throw .EISDIR }
        // The metadata the open saw: the node's own may be evicted before the handle is built.
        var seen: ObjectInfo? = nil
        if flags.isWrite {
            if config.readOnly { throw .EROFS }
            try await stage(n, truncate: flags.truncate)
        } else {
            // Close-to-open: a file opened after its TTL sees the current generation.
            seen = try await refreshed(n)?.info
            // Known to be gone (a stat saw 404, or unlinked) and not being written here.
            if locked({ n.removed && n.staged == nil }) { throw .ENOENT }
        }
        // A local store's file of the generation opened: reads go straight to it.
        var localFile: Int32? = nil
        if !flags.isWrite, store.isLocal, let (path, info) = locked({ n.staged == nil ? (n.info ?? seen).map { (n.path, $0) } : nil }) {
            do {
                localFile = try await store.openLocal(path, generation: info.generation)
            } catch {
                throw fail(error, "open", path)
            }
        }
        let fh: UInt64 = locked {
            let info = n.info ?? (n.staged == nil ? seen : nil)
            let stream = flags.isWrite || n.staged != nil ? nil : info.map { makeStream(n.path, $0, localFile: localFile) }
            if stream == nil, let fd = localFile { Glibc.close(fd) }
            // A handle keeps the file's local content while it is open (read through it too).
            n.staged?.openHandles += 1
            let h = Handle(ino: ino, writable: flags.isWrite, info: info, path: n.path, stream: stream, stage: n.staged)
            // Close-to-open: pages cached for the generation opened last stay; any other
            // generation (or local content being written) drops them.
            if !flags.isWrite, n.staged == nil, let g = info?.generation {
                h.keepCache = n.cachedGeneration == g
                n.cachedGeneration = g
            } else {
                n.cachedGeneration = nil
            }
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            return fh
        }
        if let h = locked({ handles[fh] }), let stream = h.stream,
           let ahead = walkAhead.take(h.path, generation: h.generation) {
            // Fetched ahead of this walk: the open takes the bytes, and the walk moves on.
            stream.seed(ahead.bytes, reserved: ahead.reserved, from: walkAhead)
            walkOn(from: n)
        }
        return fh
    }

    public func keepsCache(ino: UInt64, fh: UInt64) -> Bool {
        locked { handles[fh]?.keepCache ?? false }
    }

    /// Reads of one generation; a local store reads on demand, anything else with read-ahead.
    /// Caller holds `lock`.
    func makeStream(_ path: String, _ info: ObjectInfo, localFile: Int32? = nil) -> ReadStream {
        var tuning = ReadStream.Tuning(config)
        if store.isLocal { tuning.streams = 0 }
        let generation = info.generation
        let store = self.store
        return ReadStream(path: path, info: info, tuning: tuning, budget: readBudget, pool: bufferPool, logger: logger, localFile: localFile,
                          stream: { range, deliver in
                              try await store.stream(path, generation: generation, range: range, deliver: deliver)
                          }, fetch: { [weak self] range in
                              guard let self else { throw StorageError.cancelled }
                              return try await self.fetch(path, generation: generation, range)
                          })
    }

    public func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        guard let h = locked({ handles[fh] }), let n = locked({ nodes[ino] }) else { throw .EBADF }
        if let s = locked({ n.staged }) {
            var buf = [UInt8](repeating: 0, count: size)
            let r = buf.withUnsafeMutableBytes { pread(s.fd, $0.baseAddress, size, off_t(offset)) }
            if r < 0 { throw Errno(Glibc.errno) }
            return Data(buf[0..<r])
        }
        guard let stream = h.stream else { return Data() }
        let key = RecentFailures.Key.bytes(path: h.path, generation: h.generation)
        if let e = failures.check(key) { throw e }
        do {
            let (data, whole) = try await stream.read(at: Int64(offset), count: size)
            if whole { walkOn(from: n) }
            return data
        } catch {
            let e = fail(error, "read", h.path)
            failures.note(key, e)
            throw e
        }
    }

    /// A file was read whole (or taken from the walk-ahead): fetch the next small files of its
    /// directory in listing order.
    func walkOn(from n: Node) {
        guard config.walkAheadFiles > 0, !store.isLocal else { return }
        let (window, dir) = locked { () -> ([WalkAhead.Candidate], String) in
            let dirPath = StoragePath.parent(n.path) ?? ""
            guard let d = parentLocked(n), let l = d.listing else { return ([], dirPath) }
            return (walkWindowLocked(after: n.name, in: l, directory: dirPath), dirPath)
        }
        if window.isEmpty { return }
        walkAhead.prefetch(window, in: dir) { [weak self] c in
            guard let self else { throw StorageError.cancelled }
            let data = try await self.fetch(c.path, generation: c.info.generation, 0..<c.info.size)
            // Checked whole before anyone can be handed it.
            var check = ContentCheck(c.info)
            if let (expected, got) = check.add(data, at: 0) {
                throw StorageError.nonMatchingChecksum(path: "\(c.path) generation \(c.info.generation) (fetched ahead)",
                                                       expected: expected, got: got)
            }
            return data
        }
    }

    /// The next small files after `name` in the listing's order: regular, listed, not written
    /// here. Caller holds `lock`.
    private func walkWindowLocked(after name: String, in l: Listing, directory: String) -> [WalkAhead.Candidate] {
        // Binary search: a listing's files come in the bucket's (UTF-8 byte) order.
        let order = l.fileOrder
        var lo = 0, hi = order.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if order[mid].utf8.lexicographicallyPrecedes(name.utf8) { lo = mid + 1 } else { hi = mid }
        }
        guard lo < order.count, order[lo] == name else { return [] }
        let at = lo
        var window: [WalkAhead.Candidate] = []
        let limit = config.walkAheadFiles
        for next in l.fileOrder[(at + 1)...].prefix(limit * 4) {
            guard let c = childLocked(l, next), c.type == .regular, c.staged == nil, let info = c.info,
                  info.size > 0, info.size <= Int64(config.walkAheadMaxSize) else { continue }
            window.append(WalkAhead.Candidate(path: c.path, info: info))
            if window.count == limit { break }
        }
        return window
    }

    /// Reads exactly `range` of a generation. An answer of another length is a transport fault:
    /// retried within the operation's deadline (`RetryBudget.wrongLengthReadAttempts`), never
    /// returned as data.
    func fetch(_ path: String, generation: Int64, _ range: Range<Int64>) async throws -> Data {
        let want = Int(range.upperBound - range.lowerBound)
        let deadline = OperationContext.deadline(capping: .now + .milliseconds(Int64(config.operationTimeout * 1000)))
        var attempt = 0
        while true {
            attempt += 1
            let data = try await store.read(path, generation: generation, range: range)
            if data.count == want { return data }
            let problem = "asked for \(want) bytes at offset \(range.lowerBound) of generation \(generation), got \(data.count)"
            let pause = RetryBudget.wrongLengthReadPause(after: attempt)
            if attempt >= RetryBudget.wrongLengthReadAttempts || ContinuousClock.now + pause >= deadline {
                throw StorageError.retryLimitExceeded(message: "read \(path): \(problem) (\(attempt) attempts)")
            }
            logger.warning("read of '\(path)': \(problem); retrying")
            do { try await Task.sleep(for: pause) } catch { throw StorageError.cancelled }
        }
    }
}
