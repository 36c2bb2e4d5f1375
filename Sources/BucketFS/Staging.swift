import Foundation
import FuseKit
import StorageModel

/// Local content of files being written (SPEC §3): made on open for writing (a verified copy of
/// the generation read, or empty), written in place, recorded in a sidecar before it first
/// becomes dirty.
extension BucketFileSystem {
    /// Gives a file local content: empty (truncate, or new), else a copy of the generation read.
    func stage(_ n: Node, truncate: Bool) async throws(Errno) {
        if let s = locked({ n.staged }) {
            if truncate {
                locked {
                    ftruncate(s.fd, 0)
                    s.size = 0
                    markDirtyLocked(n, s)
                }
            }
            return
        }
        let box = try await refreshed(n, force: true)
        let (info, path) = locked { (n.info ?? box?.info, n.path) }
        guard let info else { throw .ENOENT }
        let staged = try staging.makeStage(origin: .generation(info.generation), metadata: info.writable,
                                           dirty: truncate && info.size > 0, object: path)
        if !truncate, info.size > 0 {
            do {
                try await copyIn(info, path, into: staged)
            } catch {
                staging.discard(staged)
                throw fail(error, "open for writing (copying the object first)", path)
            }
        }
        let winner = locked { () -> StagedFile in
            if let s = n.staged { return s }
            n.staged = staged
            return staged
        }
        if winner !== staged { staging.discard(staged) }
    }

    /// Copies generation `info` into a stage file. Every part is checked for length, the whole
    /// for the object's checksum, and the stage file is read back and checked again: on any doubt
    /// the open fails and nothing can be uploaded.
    private func copyIn(_ info: ObjectInfo, _ path: String, into staged: StagedFile) async throws {
        var check = ContentCheck(info)
        var off: Int64 = 0
        let chunk = Int64(config.readPartMax)
        while off < info.size {
            let data = try await fetch(path, generation: info.generation, off..<min(info.size, off + chunk))
            let w = data.withUnsafeBytes { pwrite(staged.fd, $0.baseAddress, data.count, off_t(off)) }
            if w != data.count {
                throw StorageError.unknown(status: 0, message: "cannot write the stage file \(staged.path): \(Errno(Glibc.errno))")
            }
            if let (expected, got) = check.add(data, at: off) {
                throw StorageError.nonMatchingChecksum(path: "\(path) generation \(info.generation) (the bytes read)",
                                                       expected: expected, got: got)
            }
            off += Int64(data.count)
        }
        if let expected = info.crc32c {
            let back = CRC32C.ofFile(staged.fd, length: info.size).map(CRC32C.base64) ?? "unreadable"
            if back != expected {
                throw StorageError.nonMatchingChecksum(path: "\(path) (the stage file \(staged.path))",
                                                       expected: "crc32c \(expected)", got: "crc32c \(back)")
            }
        }
        staged.size = off
    }

    /// Marks staged content as differing from the bucket, writing its sidecar first, so that a
    /// crash from here on leaves data that names its object. Called before a change (for the
    /// sidecar) and again after it (so that an upload which started in between is known to have
    /// missed it). Caller holds `lock`.
    func markDirtyLocked(_ n: Node, _ s: StagedFile) {
        switch s.state {
        case .deleted:
            return  // an unlinked file still open: its content goes nowhere
        case .uploading:
            s.state = .uploading(rewritten: true)
        case .waitingToRetry, .dirty:
            break
        case .clean, .givenUp:
            s.state = .dirty
        }
        if !s.recorded { staging.record(s, object: n.path) }
    }

    public func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int {
        guard let h = locked({ handles[fh] }), h.writable, let n = locked({ nodes[ino] }),
              let s = locked({ n.staged }) else { throw .EBADF }
        locked { markDirtyLocked(n, s) }
        let w = data.withUnsafeBytes { pwrite(s.fd, $0.baseAddress, data.count, off_t(offset)) }
        if w < 0 { throw Errno(Glibc.errno) }
        locked {
            markDirtyLocked(n, s)
            s.size = max(s.size, Int64(offset) + Int64(w))
            touchMtimeLocked(s)
        }
        return w
    }

    /// New content means a new mtime: an mtime key carried over from the object read (gsutil's
    /// convention, or an earlier utimens) would otherwise pin the old time. Caller holds `lock`.
    func touchMtimeLocked(_ s: StagedFile) {
        if s.metadata.customMetadata[XattrName.mtimeKey] != nil {
            s.metadata.customMetadata[XattrName.mtimeKey] = String(Int64(now.rounded(.down)))
        }
    }

    public func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let path = try names.childPath(p.path, name)
        var existing: Node? = nil
        do { existing = try await resolve(p, name) } catch where error == .ENOENT {}
        if let e = existing {
            if e.type == .directory { throw .EISDIR }
            let fh = try await open(ino: e.ino, flags: OpenFlags(flags.rawValue | O_TRUNC))
            return locked { e.lookups += 1; return (stat.entry(e, now: now), fh) }
        }
        let staged = try staging.makeStage(origin: .createdHere, metadata: WritableMetadata(), dirty: true, object: path)
        let (entry, fh, replaced) = locked { () -> (FuseEntry, UInt64, StagedFile?) in
            let n = nodeLocked(path: path, type: .regular)
            n.removed = false
            clearInfoLocked(n)
            let replaced = n.staged
            n.staged = staged
            staged.openHandles = 1
            n.lookups += 1
            addChildLocked(p, name, n.ino)
            notePendingLocked(n)
            let h = Handle(ino: n.ino, writable: true, info: nil, path: path, stream: nil, stage: staged)
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            return (stat.entry(n, now: now), fh, replaced)
        }
        if let replaced {
            // The name's earlier local content is replaced by the new file (once an upload of it
            // under way has ended).
            locked { replaced.state = .deleted; replaced.retryTask?.cancel() }
            Task { [staging] in
                _ = await replaced.uploadLock.lock()
                staging.discard(replaced)
                await replaced.uploadLock.unlock()
            }
        }
        return (entry, fh)
    }

    public func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        let changesSomething = changes.size != nil || changes.mtime != nil
        if config.readOnly, changesSomething { throw .EROFS }
        if let size = changes.size {
            guard n.type == .regular else { throw .EISDIR }
            let hadStage = locked { n.staged != nil }
            try await stage(n, truncate: size == 0)
            locked {
                if let s = n.staged {
                    markDirtyLocked(n, s)
                    ftruncate(s.fd, off_t(size))
                    s.size = Int64(size)
                    touchMtimeLocked(s)
                }
            }
            if !hadStage {
                // truncate(2) on a path: no close follows, so upload now.
                defer { dropStageIfIdle(n) }
                try await upload(ino: ino)
            }
        }
        if let mtime = changes.mtime {
            let v = String(Int64(mtime.rounded(.down)))
            try await changeMetadata(ino: ino, op: "utimens") { (m: inout WritableMetadata) throws(Errno) in
                m.customMetadata[XattrName.mtimeKey] = v
            }
        }
        // chmod and chown are accepted and change nothing: modes come from mount options.
        return locked { (stat.attributes(n, now: now), config.metadataTTL) }
    }
}
