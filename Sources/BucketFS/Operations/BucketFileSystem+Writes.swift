import Foundation
import FuseKit
import StorageModel

/// Writes (docs/SEMANTICS.md §3): the local content of files being written, made on open for
/// writing (a verified copy of the generation read, or empty), written in place, recorded in a
/// sidecar before it first becomes dirty; create and setattr.
extension BucketFileSystem {
    /// Gives a file local content: empty (truncate, or new), else a copy of the generation read.
    /// Returns it pinned (`Superblock.installStage`): the caller's handle keeps the pin, or the
    /// caller gives it back (`unpin`).
    func stage(_ n: Node, truncate: Bool) async throws(Errno) -> StagedFile {
        if let s = superblock.pinStage(of: n) {
            if truncate {
                s.stream.giveUp("the file was truncated")
                markDirty(n, s)
                ftruncate(s.fd, 0)
                superblock.withStage(s) { $0.resized(to: 0, at: nil) }
            }
            return s
        }
        let box = try await refreshed(n, force: true)
        let (info, path) = superblock.infoAndPath(n, fallback: box?.info)
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
        let winner = superblock.installStage(staged, on: n)
        if winner !== staged { staging.discard(staged) }
        return winner
    }

    /// Copies generation `info` into a stage file. Every part is checked for length, the whole
    /// for the object's checksum, and the stage file is read back and checked again: on any doubt
    /// the open fails and nothing can be uploaded.
    private func copyIn(_ info: ObjectInfo, _ path: String, into staged: StagedFile) async throws {
        var check = ContentCheck(info)
        var off: Int64 = 0
        let chunk = Int64(config.readPartMax)
        while off < info.size {
            let data = try await readPath.fetch(path, generation: info.generation, off..<min(info.size, off + chunk))
            let w = data.withUnsafeBytes { pwrite(staged.fd, $0.baseAddress, data.count, off_t(off)) }
            if w != data.count {
                let e = Errno(Glibc.errno)
                uploadCounters.cacheError(e)
                throw StorageError.unknown(status: 0, message: "cannot write the stage file \(staged.path) in the cache directory (--cache-dir): \(e)")
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
        staged.copiedIn(off)
    }

    /// Marks `n`'s staged content `s` as differing from the bucket (`StageState.markDirty`) and
    /// writes its sidecar when it has none, naming the file's object, so that a crash from here on
    /// leaves data that names its object. Called before a change (for the sidecar); the change's
    /// own step after it marks it dirty again (`StagedFile.resized`), so that an upload which
    /// started in between is known to have missed it. One critical section reads what the sidecar
    /// says; the sidecar is written after it is released.
    func markDirty(_ n: Node, _ s: StagedFile) {
        // Deleted content (an unlinked file still open) goes nowhere: no sidecar.
        let target = superblock.withStage(of: n, stage: s) { s, file in s.markDirty() ? s.sidecarTarget(object: file.path) : nil }
        if let target = target ?? nil { staging.recordIfNeeded(s, target) }
    }

    /// What `s`'s sidecar records: `n`'s path, the generation the content is based on, its size
    /// and metadata, now (read for the staging area, which never calls back).
    func sidecarTarget(_ n: Node, _ s: StagedFile) -> SidecarTarget {
        superblock.withStage(of: n, stage: s) { s, file in s.sidecarTarget(object: file.path) }!
    }

    public func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int {
        let r = data.withUnsafeBytes { bytes in immediateWrite(ino: ino, fh: fh, offset: offset, bytes: bytes) }!
        return try r.get()
    }

    /// Every write is local (the handle holds its content from its open on): FuseKit calls this
    /// on the libfuse thread, with no Task.
    public func immediateWrite(ino: UInt64, fh: UInt64, offset: UInt64, bytes: UnsafeRawBufferPointer) -> Result<Int, Errno>? {
        do throws(Errno) {
            return .success(try writeLocally(ino: ino, fh: fh, offset: offset, bytes: bytes))
        } catch {
            return .failure(error)
        }
    }

    /// One write(2): two critical sections of the superblock's lock, with the sidecar and the
    /// bytes between them (docs/ARCHITECTURE.md, "A write"). The first (`beginWrite`) finds the
    /// handle's content, refuses a refused create's writes, marks the content dirty and reads what
    /// its sidecar says, all before the bytes land; the second (`StageState.wrote`) publishes them:
    /// the size, the mtime, and dirty again. They cannot be one: the stage file is found through
    /// the handle table (under the lock) before the bytes are written, and the size may be
    /// published only after they land, when an attempt that started in between must also be
    /// told it missed them (`uploading(rewritten: true)`).
    private func writeLocally(ino: UInt64, fh: UInt64, offset: UInt64, bytes: UnsafeRawBufferPointer) throws(Errno) -> Int {
        // The handle's own content (pinned by its open): a close of another handle cannot take
        // it away meanwhile.
        let w = try superblock.beginWrite(fh: fh, ino: ino)
        let s = w.stage
        if let target = w.sidecar { staging.recordIfNeeded(s, target) }
        let written = pwrite(s.fd, bytes.baseAddress, bytes.count, off_t(offset))
        if written < 0 {
            let e = Errno(Glibc.errno)
            stageWriteFailed(w.node, s, e, at: offset)
            throw e
        }
        let now = config.clock.seconds
        superblock.withStage(s) { $0.wrote(upTo: Int64(offset) + Int64(written), at: now) }
        s.stream.wrote(fh: fh, at: Int64(offset), count: Int64(written))
        return written
    }

    /// A write to a stage file failed (ENOSPC, EDQUOT, EIO: the cache directory's disk): counted,
    /// logged once with the paths and the option, and the content is cut off (`StageState.cut`):
    /// never uploaded as if complete. The object keeps what the bucket has (a new file is not
    /// created), every later flush, fsync and close reports the error, and the stage file goes at
    /// the last close, giving its room back (docs/SEMANTICS.md §5).
    func stageWriteFailed(_ n: Node, _ s: StagedFile, _ e: Errno, at offset: UInt64) {
        uploadCounters.cacheError(e)
        s.stream.giveUp("a write to the stage file failed")
        guard let path = superblock.cutOff(n, s, e) else { return }
        staging.forgetRecord(s)
        logger.error("cannot write '\(path)' at offset \(offset) to its stage file \(s.path) in the cache directory \(staging.directory) (--cache-dir): \(e); its content is cut off and will not be uploaded: '\(path)' keeps what the bucket has (a new file is not created); make room in the cache directory, then write the file again")
    }

    public func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let path = try names.childPath(superblock.path(of: p), name)
        var existing: Node? = nil
        do { existing = try await resolve(p, name) } catch where error == .ENOENT {}
        if let e = existing {
            if e.type == .directory { throw .EISDIR }
            let fh = try await open(ino: e.ino, flags: OpenFlags(flags.rawValue | O_TRUNC))
            return (superblock.lookedUp(e, shown: nil), fh)
        }
        let metadata = newObjectMetadata(mode: mode)
        try await mayCreate(path, in: superblock.path(of: p), metadata)
        // Its mode and owner go into its upload (no request of their own).
        let staged = try staging.makeStage(origin: .createdHere, metadata: metadata, dirty: true, object: path)
        let (entry, fh, replaced) = superblock.created(path, in: p, name: name, staged: staged, writeOnly: flags.isWriteOnly)
        if let n = superblock.node(entry.attributes.ino) { enableStream(n, staged) }
        if let replaced {
            // The name's earlier local content is replaced by the new file (once an upload of it
            // under way has ended).
            superblock.withStage(replaced) { $0.delete() }
            Task { [staging] in
                _ = await replaced.uploadLock.lock()
                staging.discard(replaced)
                await replaced.uploadLock.unlock()
            }
        }
        return (entry, fh)
    }

    /// EACCES when the store's access rules refuse creating `path` (docs/SEMANTICS.md §3, "Refused
    /// creates"): the first create of a content type in a directory asks the store, the answer
    /// is kept (`CreateAnswers`). A store without rules costs nothing; a probe that fails says
    /// nothing, and the upload at close is the judge, as it always is for rules on the content.
    func mayCreate(_ path: String, in directory: String, _ metadata: WritableMetadata) async throws(Errno) {
        var meta = metadata
        if meta.contentType == nil { meta.contentType = config.contentTypes.type(for: path) }
        let key = CreateAnswers.Key(directory: directory, contentType: meta.contentType ?? "")
        var answer = createAnswers.answer(key)
        if answer == nil {
            do {
                answer = try await store.probeCreate(path, metadata: meta)
            } catch {
                logger.debug("create of '\(path)': asking the rules failed (\(error)); the upload will tell")
                return
            }
            if let answer { createAnswers.note(key, answer) }
        }
        if case .refused(let message)? = answer {
            logger.info("create of '\(path)' refused by the bucket's rules: \(message) (EACCES at open; the answer for '\(directory)/' and \(key.contentType) is kept \(Int(createAnswers.ttl)) s)")
            throw .EACCES
        }
    }

    /// Whether the store's answer kept for creating `path` (its directory, the type its name
    /// means) is a refusal.
    func createRefused(_ path: String) -> Bool {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
        let key = CreateAnswers.Key(directory: directory, contentType: config.contentTypes.type(for: path) ?? "")
        if case .refused? = createAnswers.answer(key) { return true }
        return false
    }

    public func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        // chmod, chown, chgrp: kept in the POSIX keys (with POSIX metadata off: accepted, and
        // nothing changes, the mount options decide).
        let posixChange = config.posixMetadata && (changes.mode != nil || changes.uid != nil || changes.gid != nil)
        let changesSomething = changes.size != nil || changes.mtime != nil || posixChange
        if config.readOnly, changesSomething { throw .EROFS }
        if let size = changes.size {
            guard n.type == .regular else { throw .EISDIR }
            let s = try await stage(n, truncate: size == 0)
            s.stream.giveUp("the file was truncated")
            markDirty(n, s)
            ftruncate(s.fd, off_t(size))
            let now = config.clock.seconds
            superblock.withStage(s) { $0.resized(to: Int64(size), at: now) }
            superblock.unpin(s)
            // A handle open for writing keeps this content: its close uploads. Otherwise
            // (truncate(2) on a path, with no writer, or only readers, keeping it) no close
            // that uploads follows, so upload now.
            if !superblock.isOpenForWriting(s) {
                defer { dropStageIfIdle(n) }
                try await upload(ino: ino)
            }
        }
        if let (op, edit) = metadataEdit(changes) {
            // mtime, mode and owner together: one PATCH (or into the pending upload).
            try await changeMetadata(ino: ino, op: op, edit)
        }
        return (superblock.attributes(of: n), config.metadataTTL)
    }

    /// chmod, chown, chgrp and utimens of a file whose content waits to be uploaded (tar's
    /// `fchown`/`fchmod`/`futimens` before close): the change joins the upload, with no I/O, so
    /// FuseKit calls this on libfuse's thread. Anything else (a size, a PATCH) goes to `setattr`.
    public func immediateSetattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) -> Result<(FileAttributes, Double), Errno>? {
        guard changes.size == nil, !config.readOnly, let n = superblock.node(ino), let (_, edit) = metadataEdit(changes) else { return nil }
        do throws(Errno) {
            guard try rideAlong(n, edit) else { return nil }
            return .success((superblock.attributes(of: n), config.metadataTTL))
        } catch {
            return .failure(error)
        }
    }

    /// What a setattr changes in the metadata (the mtime key, the POSIX keys), with the name of
    /// the operation for the logs; nil when it changes none of them.
    func metadataEdit(_ changes: SetAttributes) -> (op: String, edit: (inout WritableMetadata) throws(Errno) -> Void)? {
        let posixChange = config.posixMetadata && (changes.mode != nil || changes.uid != nil || changes.gid != nil)
        guard changes.mtime != nil || posixChange else { return nil }
        let mtime = changes.mtime.map { String(Int64($0.rounded(.down))) }
        let posix = posixChange ? PosixAttributes(mode: changes.mode, uid: changes.uid, gid: changes.gid) : PosixAttributes()
        let op = posixChange ? (changes.mode != nil ? "chmod" : "chown") : "utimens"
        return (op, { (m: inout WritableMetadata) throws(Errno) in
            if let mtime { m.customMetadata[XattrName.mtimeKey] = mtime }
            posix.write(into: &m.customMetadata)
        })
    }
}
