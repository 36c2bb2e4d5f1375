import Foundation
import FuseKit
import StorageModel

/// Uploads of staged files (SPEC §3, §5): one object per upload with `ifGenerationMatch`; what
/// close/fsync report is what happened in the bucket; a failed upload is never abandoned.
///
/// - A lost race (412) or a refusal (401/403/400: EACCES, EINVAL…) fails the writer at once and
///   the data goes to lost+found: retrying could not help, and a later success would contradict
///   what close said.
/// - Any other failure (EIO: 5xx, timeouts, resets after all retries) fails the writer too, keeps
///   the file staged and dirty, and starts background attempts (1 s, 2 s, 4 s… up to
///   `retryBackoffMax`, `uploadRetries` of them); a later flush/fsync/close also tries at once.
///   After the last attempt the data goes to lost+found, logged at error level with its path.
/// - `shutdown(within:)` (unmount, SIGTERM) tries every dirty file once more within a bound.
extension BucketFileSystem {
    public func flush(ino: UInt64, fh: UInt64) async throws(Errno) {
        try await upload(ino: ino)
    }

    public func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno) {
        try await upload(ino: ino)
    }

    public func release(ino: UInt64, fh: UInt64) async throws(Errno) {
        guard let h = locked({ handles.removeValue(forKey: fh) }) else { return }
        h.stream?.close()
        guard let n = locked({ nodes[ino] }) else { return }
        var uploadError: Errno? = nil
        // A file whose upload just failed is in the background attempts' hands: uploading it
        // again here, right after close reported the failure, would make close's answer untrue.
        if h.writable, !locked({ n.staged?.retrying ?? false }) {
            do { try await upload(ino: ino) } catch { uploadError = error }
        }
        locked { n.staged?.openHandles -= 1 }
        dropStageIfIdle(n)
        if let uploadError { throw uploadError }
    }

    /// Drops a stage nobody has open and nothing waits to upload.
    func dropStageIfIdle(_ n: Node) {
        let gone: StagedFile? = locked {
            guard let s = n.staged, s.openHandles <= 0, !s.dirty, !s.retrying else { return nil }
            n.staged = nil
            // Nothing local any more: the node may leave the table (the kernel forgot it already).
            dropIfUnusedLocked(n)
            return s
        }
        if let gone { staging.discard(gone) }
    }

    /// Uploads a dirty staged file now (flush, fsync, close, truncate, rename).
    func upload(ino: UInt64) async throws(Errno) {
        guard let n = locked({ nodes[ino] }), let s = locked({ n.staged }) else { return }
        let e: Errno?
        do {
            try await s.uploadLock.withLock { () async throws -> Void in try await self.uploadOnce(n, s) }
            e = nil
        } catch let thrown as Errno {
            e = thrown
        } catch {
            e = errno(for: error)
        }
        guard let e else { return }
        if locked({ s.dirty && !s.retrying && s.failed == nil }) { scheduleRetries(n, s) }
        throw e
    }

    /// One attempt; the caller holds `s.uploadLock`. Logs what happened.
    private func uploadOnce(_ n: Node, _ s: StagedFile) async throws(Errno) {
        let (dirty, base, path, removed, failed) = locked { (s.dirty, s.baseGeneration, n.path, n.removed, s.failed) }
        guard dirty, !removed else {
            if let failed, !removed { throw failed }
            return
        }
        var meta = locked { s.metadata }
        if meta.contentType == nil { meta.contentType = ContentTypes.guess(path) }
        locked { s.dirty = false }
        Glibc.fsync(s.fd)
        do {
            let info = try await store.write(path, from: .file(path: s.path), metadata: meta,
                                             preconditions: Preconditions(ifGenerationMatch: base))
            locked {
                s.baseGeneration = info.generation
                s.metadata = info.writable
                setInfoLocked(n, info, expiry: now + config.metadataTTL)
                trimCacheLocked()
            }
            failures.clear("s:" + path)
        } catch {
            locked { s.dirty = true }
            let e = errno(for: error)
            if case StorageError.preconditionFailed = error {
                let kept = giveUp(n, s, e, reason: "lost a race: the object changed since it was opened (generation \(base))")
                logger.error("upload of '\(path)' lost a race: the object changed since it was opened (generation \(base)); your data is kept in \(kept)")
            } else if Self.isRefusal(e) {
                let kept = giveUp(n, s, e, reason: "the server refused the upload: \(error)")
                logger.error("upload of '\(path)' refused: \(error) → \(e); not retried; your data is kept in \(kept)")
            } else {
                logger.error("upload of '\(path)' failed: \(error) → \(e); the data stays staged (\(s.path)) and is retried in the background up to \(config.uploadRetries) times, then kept in \(staging.lostAndFound)")
            }
            throw e
        }
    }

    /// Errors that another attempt of the same upload cannot cure.
    static func isRefusal(_ e: Errno) -> Bool {
        [.EACCES, .EINVAL, .ENAMETOOLONG, .ENOENT, .EROFS, .ESTALE].contains(e)
    }

    /// Copies a stage into lost+found and marks it clean, failed with `e`; the file then shows
    /// the bucket's state again. Returns where the data is.
    @discardableResult
    private func giveUp(_ n: Node, _ s: StagedFile, _ e: Errno, reason: String) -> String {
        let path = locked { n.path }
        guard let kept = staging.keepLost(s, object: path, reason: reason) else {
            // Not even a copy could be made: keep the stage file itself, dirty, and say so.
            return "\(s.path) (the stage file: copying it to lost+found failed)"
        }
        locked {
            s.dirty = false
            s.failed = e
            s.retrying = false
            n.infoExpiry = 0
            if let parent = parentLocked(n) { dropListingLocked(parent) }
        }
        return kept
    }

    /// Background attempts after a failed upload, with doubling pauses; after the last, the data
    /// goes to lost+found.
    private func scheduleRetries(_ n: Node, _ s: StagedFile) {
        guard locked({ () -> Bool in
            if s.retrying { return false }
            s.retrying = true
            return true
        }) else { return }
        let task = Task { [self] in
            var lastError: Errno = .EIO
            for attempt in 1...max(1, config.uploadRetries) {
                let pause = min(config.retryBackoffMax, pow(2, Double(attempt - 1)))
                do { try await Task.sleep(for: .milliseconds(Int64(pause * 1000))) } catch {
                    locked { s.retrying = false }  // cancelled: unlink, or shutdown takes over
                    return
                }
                let path = locked { n.path }
                do {
                    try await OperationContext.$deadline.withValue(.now + .milliseconds(Int64(config.operationTimeout * 1000))) {
                        try await s.uploadLock.withLock { () async throws -> Void in try await self.uploadOnce(n, s) }
                    }
                    logger.notice("upload of '\(path)' succeeded on background attempt \(attempt)")
                    locked { s.retrying = false }
                    dropStageIfIdle(n)
                    return
                } catch {
                    lastError = errno(for: error)
                    if locked({ s.failed != nil || !s.dirty }) {  // refused or lost: already in lost+found
                        locked { s.retrying = false }
                        dropStageIfIdle(n)
                        return
                    }
                }
            }
            let path = locked { n.path }
            let kept = giveUp(n, s, lastError, reason: "the upload failed \(config.uploadRetries + 1) times (last: \(lastError))")
            logger.error("upload of '\(path)' failed for good after \(config.uploadRetries) background attempts (\(lastError)); your data is kept in \(kept)")
            dropStageIfIdle(n)
        }
        locked { s.retryTask = task }
    }

    /// Before the process ends (unmount, SIGTERM): every dirty file gets one more upload attempt,
    /// all within `limit`; what cannot be uploaded goes to lost+found, each logged with its path.
    public func shutdown(within limit: Duration) async {
        walkAhead.dropAll()
        let staged: [(Node, StagedFile)] = locked { nodes.values.compactMap { n in n.staged.map { (n, $0) } } }
        for (_, s) in staged { locked { s.retryTask }?.cancel() }
        let end = ContinuousClock.now + limit
        for (n, s) in staged {
            let (dirty, path) = locked { (s.dirty && !n.removed, n.path) }
            if dirty {
                do {
                    try await OperationContext.$deadline.withValue(end) {
                        try await s.uploadLock.withLock { () async throws -> Void in try await self.uploadOnce(n, s) }
                    }
                    logger.notice("uploaded '\(path)' before unmounting")
                } catch {
                    if locked({ s.dirty }) {
                        let kept = giveUp(n, s, errno(for: error), reason: "could not be uploaded before the mount ended: \(error)")
                        logger.error("could not upload '\(path)' before unmounting (\(error)); your data is kept in \(kept)")
                    }
                }
            }
            if !locked({ s.dirty }) { staging.discard(s) }
        }
    }
}
