import Foundation
import FuseKit
import Logging
import StorageModel

/// Uploads of staged files (docs/SEMANTICS.md §3, §5): one object per upload with
/// `ifGenerationMatch`; what close/fsync report is what happened in the bucket; a failed upload is
/// never abandoned.
///
/// A staged file's life is its `UploadState`, changed only by `StagedFile`'s transitions
/// (StagedFile.swift); this file decides when each is taken:
///
///     clean ──write──▶ dirty ──flush/fsync/close──▶ uploading ──ok──▶ clean (dirty if rewritten)
///                                                       │
///                       failed (EIO) ◀──────────────────┤ lost race (412) or refusal
///                           │                           ▼
///                    waitingToRetry(k) ─pause─▶ uploading  …  givenUp(errno): data in lost+found
///     unlink / renamed over (any state, after an attempt under way ends) ──▶ deleted
///
/// - A lost race (412) or a refusal (401/403/400: EACCES, EINVAL…) fails the writer at once and
///   the data goes to lost+found: retrying could not help, and a later success would contradict
///   what close said.
/// - Any other failure (EIO: 5xx, timeouts, resets after all retries) fails the writer too, keeps
///   the file staged, and starts background attempts (1 s, 2 s, 4 s… up to `retryBackoffMax`,
///   `uploadRetries` of them); a later flush/fsync/close also tries at once. After the last
///   attempt the data goes to lost+found, logged at error level with its path.
/// - The stage file is deleted only once its content is in the bucket (`clean`), in lost+found
///   (`givenUp`) or was deleted by the user (`deleted`), and never while an attempt is under way:
///   an attempt's effect is known before anything else touches the file (cancelling background
///   attempts stops their pauses, never an upload in flight).
/// - `shutdown(within:)` (unmount, SIGTERM) waits for attempts under way, gives every file with
///   unsaved content one more attempt, all within one bound, and keeps what still fails in
///   lost+found; then no stage file is left.
/// - Write-back (`config.writeBack`): flush uploads nothing and close queues the file
///   (`UploadQueue`, in the order files were closed); its upload is `uploadQueued`, the same
///   attempt under the same lock, with the same failures (background retries, lost+found).
///   fsync still uploads at once, and shutdown's last attempt covers every queued file.
extension BucketFileSystem {
    public func flush(ino: UInt64, fh: UInt64) async throws(Errno) {
        // One critical section decides (Superblock+Close.swift): close(2) of the writer's last
        // handle writes the sidecar as closed (with the size and metadata) before the upload
        // starts, so a crash during it leaves content known to be complete (a write after this
        // marks it not closed again, before its bytes land).
        guard let f = superblock.beginFlush(fh: fh, ino: ino, writeBack: config.writeBack) else { return }
        if let (s, target) = f.closedSidecar { staging.recordClosed(s, target) }
        // Write-back: what the bucket said last about this content still reaches every close.
        if let e = f.givenUp { throw e }
        // Empty content (a create, an O_TRUNC, nothing written since) waits for the handle's
        // release: a shell's `>` closes its first descriptor before it writes through the second
        // (a dup of the same open file), and that close must not put an empty generation in the
        // bucket (docs/SEMANTICS.md §3.3, "One generation per written file").
        if config.writeBack || f.waitsForRelease { return }
        try await upload(ino: ino)
    }

    /// The writer asks for the content as it is now to be saved (fsync).
    private func handOver(_ ino: UInt64) {
        guard let n = superblock.node(ino) else { return }
        superblock.withStage(of: n) { s, _ in s.handOver() }
    }

    public func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno) {
        handOver(ino)
        try await upload(ino: ino)
    }

    public func release(ino: UInt64, fh: UInt64) async throws(Errno) {
        guard let r = beginRelease(ino: ino, fh: fh) else { return }
        var uploadError: Errno? = nil
        switch r.upload {
        case .queue: if let n = r.node { do { try queueUpload(n) } catch { uploadError = error } }
        case .atOnce: do { try await upload(ino: ino) } catch { uploadError = error }
        case .none: break
        }
        endRelease(r)
        if let uploadError { throw uploadError }
        // A queue past its bound holds this close until one of its uploads starts (docs/SEMANTICS.md §3.4).
        if r.upload == .queue { await uploads.room() }
    }

    /// A release that waits for nothing, on libfuse's thread with no Task (FuseKit's
    /// `immediateRelease`): a handle that wrote nothing, or a writer's whose content its flush
    /// uploaded (clean, no attempt under way or scheduled), in the default mode. What `release`
    /// would do then is local: the handle goes, and the stage file with it when nobody else has
    /// it open. nil (then `release` runs) when there is an upload to make or wait for.
    public func immediateRelease(ino: UInt64, fh: UInt64) -> Result<Void, Errno>? {
        switch superblock.beginRelease(fh: fh, ino: ino, writeBack: config.writeBack, immediate: true) {
        case .deferred?: return nil
        case .started(let r)?:
            closed(r)
            endRelease(r)
        case nil: break
        }
        return .success(())
    }

    /// The handle closed (the first of a release's two critical sections, Superblock+Close.swift);
    /// for the writer's last handle, its sidecar says closed (with the size and metadata) before
    /// any upload starts, so a crash during it leaves content known to be complete. nil when
    /// there was no such handle.
    func beginRelease(ino: UInt64, fh: UInt64) -> Superblock.ReleaseStart? {
        guard case .started(let r)? = superblock.beginRelease(fh: fh, ino: ino, writeBack: config.writeBack) else { return nil }
        closed(r)
        return r
    }

    /// What a handle's release does outside the lock once the handle is gone.
    private func closed(_ r: Superblock.ReleaseStart) {
        r.handle.stream?.close()
        if let (s, target) = r.closedSidecar { staging.recordClosed(s, target) }
    }

    /// The release's hold on its stage ends (the second critical section), and the stage file
    /// goes if nobody needs it.
    func endRelease(_ r: Superblock.ReleaseStart) {
        if let gone = superblock.endRelease(r) { staging.discard(gone) }
    }

    /// Drops a stage nobody has open whose content is saved (or was deleted by the user), with
    /// no attempt under way or scheduled.
    func dropStageIfIdle(_ n: Node) {
        let gone = superblock.detachStage(of: n) { _, s in s.idle }
        if let gone { staging.discard(gone) }
    }

    /// Uploads a staged file's unsaved content now (flush, fsync, close, truncate, rename).
    func upload(ino: UInt64) async throws(Errno) {
        guard let (n, s) = superblock.stagedNode(ino) else { return }
        do {
            try await s.uploadLock.withLock { () async throws -> Void in try await self.uploadOnce(n, s) }
        } catch {
            let e = (error as? Errno) ?? errno(for: error)
            scheduleRetries(n, s)
            throw e
        }
    }

    /// Write-back's close: a file with unsaved content joins the queue (unless background
    /// retries have it already); content given up reports its error, as in the default mode.
    func queueUpload(_ n: Node) throws(Errno) {
        guard let s = superblock.stage(of: n) else { return }
        let (state, retrying, size) = superblock.withStage(s) { s in (s.state, s.retryTask != nil, s.size) }
        switch state {
        case .givenUp(let e): throw e
        case .dirty, .uploading(rewritten: true): if !retrying { uploads.enqueue(n, s, bytes: size) }
        case .clean, .deleted, .uploading(rewritten: false), .waitingToRetry: return
        }
    }

    /// One queued upload (write-back), as `upload(ino:)` makes it, in a task of its own under
    /// the operation deadline. A failure starts the background attempts (then lost+found), as
    /// in the default mode; the error is logged by `uploadOnce`. True when nothing is left unsaved.
    func uploadQueued(_ n: Node, _ s: StagedFile) async -> Bool {
        let failure = await attemptInOwnTask(n, s)
        if failure != nil { scheduleRetries(n, s) }
        dropStageIfIdle(n)
        return failure == nil
    }

    /// One attempt in a task of its own under a fresh operation deadline, holding `s`'s upload
    /// lock: cancelling the caller (background retries stopped by unlink or shutdown) never cuts
    /// an upload in flight, whose effect would then be unknown. The error, or nil.
    private func attemptInOwnTask(_ n: Node, _ s: StagedFile, attempt: Int = 1) async -> Errno? {
        let clock = operationClock()
        return await Task { [self] () async -> Errno? in
            do {
                try await OperationContext.$clock.withValue(clock) {
                    try await s.uploadLock.withLock { () async throws -> Void in try await self.uploadOnce(n, s, attempt: attempt) }
                }
                return nil
            } catch {
                return (error as? Errno) ?? errno(for: error)
            }
        }.value
    }

    /// Runs `body` holding `s`'s upload lock, so that an upload under way ends (and its effect is
    /// known) first; EINTR when the caller is interrupted while it waits.
    func holdingUploadLock<T>(_ s: StagedFile?, _ body: () async throws(Errno) -> T) async throws(Errno) -> T {
        guard let s else { return try await body() }
        guard await s.uploadLock.lock() else { throw .EINTR }
        do {
            let r = try await body()
            await s.uploadLock.unlock()
            return r
        } catch {
            await s.uploadLock.unlock()
            throw error
        }
    }

    /// One attempt; the caller holds `s.uploadLock`. Logs what happened: at info level, one line
    /// per finished upload with its object, bytes, generation, attempt and time (docs/OPERATING.md,
    /// "Logs"). `attempt`: 1 for close's (or the write-back queue's), 1 + N for background
    /// attempt N, nil for the last one at unmount. Two critical sections of the superblock's
    /// lock: its inputs and its start (`beginUpload`), then its result (`uploaded` or
    /// `attemptFailed`); giving the content up takes a third, after the copy into lost+found.
    private func uploadOnce(_ n: Node, _ s: StagedFile, attempt: Int? = 1) async throws(Errno) {
        let (start, path, wasInferred) = superblock.beginUpload(n, s)
        guard case .started(let started, let origin, var meta) = start else {
            if case .givenUp(let e) = start { throw e }
            return
        }
        let inferred = typed(&meta, path: path, wasInferred: wasInferred)
        let size = superblock.withStage(s) { $0.size }
        let began = config.clock.now
        let attemptText = attempt.map(String.init) ?? "final"
        // No fsync first: the upload reads the page cache, and syncing a large file costs disk
        // writes before the first byte is sent, about as long as the upload itself.
        // The content is synced below when an attempt fails and it stays here for the next one.
        do {
            let preconditions = Preconditions(ifGenerationMatch: origin.ifGenerationMatch)
            // A stream under way sends only the rest; one given up (or none) leaves the whole file
            // to this upload (docs/SEMANTICS.md §3.3, "Streamed uploads").
            let streamed = try await s.stream.finish(size: size, inputs: UploadStream.Inputs(path: path, metadata: meta, preconditions: preconditions),
                                                     refusal: { [self] in Self.isRefusal(errno(for: $0)) })
            let info: ObjectInfo
            if let streamed { info = streamed } else {
                info = try await store.write(path, from: .file(path: s.path), metadata: meta, preconditions: preconditions)
            }
            superblock.uploaded(n, s, info, inferred: inferred)
            failures.clear(.metadata(path: path))
            uploadCounters.uploaded(bytes: info.size)
            let took = (config.clock.now - began).components
            let seconds = String(format: "%.3f", Double(took.seconds) + Double(took.attoseconds) / 1e18)
            logger.info("uploaded '\(path)' (\(info.size) bytes, generation \(info.generation), attempt \(attemptText), \(seconds) s)",
                        metadata: ["event": "upload", "object": "\(path)", "bytes": "\(info.size)",
                                   "generation": "\(info.generation)", "attempts": "\(attemptText)", "seconds": "\(seconds)"])
        } catch {
            let e = errno(for: error)
            let lostRace: Bool
            if case StorageError.preconditionFailed = error { lostRace = true } else { lostRace = false }
            let givesUp = e != .EINTR && (lostRace || Self.isRefusal(e))
            let result = superblock.attemptFailed(n, s, restoring: started, cause: "\(error)\(storageNote(error)) → \(e)",
                                                  keeping: givesUp)
            Glibc.fsync(s.fd)
            if e != .EINTR { uploadCounters.attemptFailed() }
            let failed: Logger.Metadata = ["object": "\(path)", "attempts": "\(attemptText)", "error": "\(error)"]
            if e == .EINTR {
                // Its caller was interrupted (a signal): nothing went wrong, and the data stays.
                logger.debug("upload of '\(path)' interrupted by its caller (\(error)); the data stays staged (\(s.path))")
            } else if lostRace {
                let kept = giveUp(n, s, e, reason: "lost a race: the object changed since it was opened (generation \(origin.ifGenerationMatch))",
                                  keeping: result.keep)
                logger.error("upload of '\(path)' lost a race: the object changed since it was opened (generation \(origin.ifGenerationMatch)); your data: \(kept)",
                             metadata: failed.merging(["event": "upload_given_up", "kept": "\(kept)"]) { $1 })
            } else if Self.isRefusal(e) {
                let kept = giveUp(n, s, e, reason: "\(LostEntry.refusedReason): \(error)", keeping: result.keep)
                let atClose = e == .EACCES && result.createdHere
                    ? Self.refusedAtClose(path, contentType: meta.contentType ?? "", asked: createAnswers.answer(createKey(path, meta.contentType ?? ""))) : ""
                logger.error("upload of '\(path)' refused: \(error) → \(e); not retried; your data: \(kept)\(atClose)",
                             metadata: failed.merging(["event": "upload_given_up", "kept": "\(kept)"]) { $1 })
                if e == .EACCES, result.createdHere { rememberRefusedCreate(path, contentType: meta.contentType ?? "", error) }
            } else if result.shuttingDown {
                logger.error("upload of '\(path)' failed: \(error) → \(e)", metadata: failed.merging(["event": "upload_failed"]) { $1 })
            } else {
                logger.error("upload of '\(path)' failed: \(error) → \(e); the data stays staged (\(s.path)) and is retried in the background up to \(config.uploadRetries) times, then kept in \(staging.lostAndFound)",
                             metadata: failed.merging(["event": "upload_retry"]) { $1 })
            }
            throw e
        }
    }

    /// The content type an upload sends: none given, the name's (docs/SEMANTICS.md §4.1),
    /// remembered as inferred so that a rename infers it again; a type given (or one this mount
    /// did not infer) is kept as is. Returns the type inferred here, if any.
    func typed(_ meta: inout WritableMetadata, path: String, wasInferred: String?) -> String? {
        if meta.contentType == nil {
            meta.contentType = config.contentTypes.type(for: path)
            return meta.contentType
        }
        return meta.contentType == wasInferred ? wasInferred : nil
    }

    /// A new file's upload may stream while it is written (docs/SEMANTICS.md §3.3, "Streamed
    /// uploads"): in the default mode, when the mount streams. Its session starts with what an
    /// upload would send at that moment (`streamInputs`).
    func enableStream(_ n: Node, _ s: StagedFile) {
        guard config.streamUploads, !config.writeBack, !config.readOnly else { return }
        let settings = UploadStream.Settings(start: max(config.streamUploadStart, 1), chunk: max(config.streamUploadChunk, 256 << 10))
        s.stream.enable(settings, logger: logger) { [weak self, n, s] () async throws -> (UploadStream.Inputs, any GrowingUpload)? in
            guard let self, let inputs = self.streamInputs(n, s),
                  let upload = try await self.store.beginGrowingUpload(inputs.path, file: s.path, metadata: inputs.metadata,
                                                                       preconditions: inputs.preconditions)
            else { return nil }
            return (inputs, upload)
        }
    }

    /// What an upload of `s` would be sent with now: its path, metadata (with the type inferred)
    /// and precondition; nil when it has none to make.
    func streamInputs(_ n: Node, _ s: StagedFile) -> UploadStream.Inputs? {
        guard let (path, meta0, origin, wasInferred) = superblock.uploadInputs(n, s) else { return nil }
        var meta = meta0
        _ = typed(&meta, path: path, wasInferred: wasInferred)
        return UploadStream.Inputs(path: path, metadata: meta, preconditions: Preconditions(ifGenerationMatch: origin.ifGenerationMatch))
    }

    /// A new file refused at its upload (rules or IAM): the directory's answer for its content
    /// type turns to refused at once, whatever a probe said, so the next create there fails at
    /// open(2) with EACCES instead of being refused again at close (docs/SEMANTICS.md §3.3,
    /// "Refused creates").
    private func rememberRefusedCreate(_ path: String, contentType: String, _ error: any Error) {
        createAnswers.note(createKey(path, contentType), .refused(message: "\(error)"))
    }

    private func createKey(_ path: String, _ contentType: String) -> CreateAnswers.Key {
        CreateAnswers.Key(directory: path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "", contentType: contentType)
    }

    /// What the log line of a new file refused at its upload adds (docs/FIREBASE.md, "Refused
    /// creates"): the create was not refused at open (the rules allowed its start, or the store
    /// has none to ask), so a writer that ignores close's error (a shell's `>`, `touch`) showed
    /// none; where that is said, and that the next create there fails at open.
    static func refusedAtClose(_ path: String, contentType: String, asked: CreateAnswer?) -> String {
        let why = asked == .allowed
            ? "its create was allowed when asked at open (this server checks these rules only when an upload finishes)"
            : "nothing refused its create at open (the store has no rules to ask before an upload)"
        return "; \(why), so a writer that ignores close's error (a shell's `>`, `touch`) reported success: "
            + "`bucketfs status` lists what lost+found keeps, `bucketfs_uploads_failed_total` counts it; "
            + "later creates of \(contentType.isEmpty ? "this type" : contentType) there fail at open with EACCES"
    }

    /// Errors that another attempt of the same upload cannot cure.
    static func isRefusal(_ e: Errno) -> Bool {
        [.EACCES, .EINVAL, .ENAMETOOLONG, .ENOENT, .EROFS, .ESTALE].contains(e)
    }

    /// Copies a stage into lost+found; the file is then `givenUp(e)` and shows the bucket's state
    /// again. Returns where the data is, in words ("kept in PATH"). The caller holds `s.uploadLock`. One entry per file, never an empty one: empty
    /// content keeps nothing (nothing is lost), and content given up again (written after an
    /// earlier refusal, as a shell's `>` does: its first close, of the empty file, comes before
    /// the write) replaces the entry of the earlier version. Returns where the data is; when not
    /// even a copy could be made, the stage file itself stays (unsaved, found again at the next
    /// mount). `keeping`: what to keep, read by the caller with its attempt's result (else read here).
    @discardableResult
    private func giveUp(_ n: Node, _ s: StagedFile, _ e: Errno, reason: String, keeping: Superblock.KeepInputs? = nil) -> String {
        let inputs = keeping ?? superblock.keepInputs(n, s)
        let target = inputs.target
        // Complete: the writer closed the file, or handed this content over with a flush or an
        // fsync and wrote nothing since; whatever ended the upload after that (a refusal, a lost
        // race, retries given up) does not make it a cut-off file (docs/SEMANTICS.md §5).
        let record = StageRecord(bucket: store.bucket, object: target.object, baseGeneration: target.baseGeneration,
                                 closed: inputs.complete, size: target.size, metadata: target.metadata)
        let (size, previous) = (target.size, inputs.previous)
        var kept: String? = nil
        if size > 0 {
            guard let k = staging.keepLost(s, size: size, record: record, reason: reason) else {
                return "kept in \(s.path) (the stage file: copying it to lost+found failed)"
            }
            kept = k
            if let previous, previous != k { staging.dropLost(previous) }
        }
        // The data is safe in lost+found: a crash from here on must not keep it twice.
        staging.forgetRecord(s)
        superblock.gaveUp(n, s, e, keptAs: kept)
        uploadCounters.gaveUp()
        return kept.map { "kept in \($0)" } ?? previous.map { "kept in \($0) (an earlier version; this one is empty)" }
            ?? "none to keep: the file is empty, nothing is lost"
    }

    /// Background attempts after a failed upload of unsaved content, unless they are under way
    /// already or the mount is ending (then `shutdown` makes the last attempt).
    private func scheduleRetries(_ n: Node, _ s: StagedFile) {
        superblock.withStage(of: n, stage: s) { st, file in
            guard !file.shuttingDown, !file.removed else { return }
            _ = st.scheduleRetries { Task { [self] in await retryInBackground(n, s) } }
        }
    }

    /// Attempts with doubling pauses; after the last, the data goes to lost+found. Ends early when
    /// the content is saved (a flush succeeded meanwhile), given up or deleted, and at once when
    /// cancelled (unlink, shutdown), leaving the rest to whoever cancelled it.
    private func retryInBackground(_ n: Node, _ s: StagedFile) async {
        defer {
            superblock.withStage(s) { $0.retriesEnded() }
            dropStageIfIdle(n)
        }
        var lastError: Errno = .EIO
        for attempt in 1...max(1, config.uploadRetries) {
            let goOn = superblock.withStage(of: n, stage: s) { s, file -> Bool in
                !file.removed && s.retryAttempt(attempt)
            }!
            guard goOn else { return }
            let pause = RetryBudget.uploadPause(beforeAttempt: attempt, max: config.retryBackoffMax)
            do { try await config.clock.sleep(for: .milliseconds(Int64(pause * 1000))) } catch { return }
            // In a task of its own: cancelling the retries never cuts an upload in flight, whose
            // effect would then be unknown.
            let failure = await attemptInOwnTask(n, s, attempt: attempt + 1)
            let path = superblock.path(of: n)
            if let failure {
                lastError = failure
            } else if superblock.withStage(s, { $0.state == .clean }) {
                logger.notice("upload of '\(path)' succeeded on background attempt \(attempt)")
            }
            if Task.isCancelled { return }
        }
        // The last attempt failed: keep the data, unless the mount is ending (shutdown's own
        // last attempt decides) or it was saved, given up or deleted meanwhile.
        guard await s.uploadLock.lock() else { return }
        let (unsaved, path, lastFailure) = superblock.withStage(of: n, stage: s) { s, file in
            (s.state.unsaved && !file.removed && !file.shuttingDown, file.path, s.lastFailure)
        }!
        if unsaved {
            let last = lastFailure ?? "\(lastError)"
            let kept = giveUp(n, s, lastError, reason: "the upload failed \(config.uploadRetries + 1) times (last: \(last))")
            logger.error("upload of '\(path)' failed for good after \(config.uploadRetries) background attempts (\(last)); your data: \(kept)",
                         metadata: ["event": "upload_given_up", "object": "\(path)", "attempts": "\(config.uploadRetries + 1)",
                                    "error": "\(lastError)", "kept": "\(kept)"])
        }
        await s.uploadLock.unlock()
    }

    /// The user deleted a file (unlink, or another file renamed over it): its staged content `s`
    /// (at `path`) goes nowhere, said in the log when it was unsaved. Called after the superblock
    /// change (unlink, rename) that handed it the stage, with no lock held; the stage file goes
    /// at its last close (`dropStageIfIdle`).
    func discardStaged(_ s: StagedFile, path: String, because why: String) {
        s.stream.giveUp("the file was deleted")
        let (unsaved, size) = superblock.withStage(s) { s in (s.delete(), s.size) }
        if unsaved {
            logger.notice("unsaved changes of '\(path)' (\(size) bytes) discarded: \(why)")
        }
        // Nothing to recover after a crash either.
        staging.forgetRecord(s)
    }

    /// Before the process ends (unmount, SIGTERM): attempts under way end, then every file with
    /// unsaved content gets one more attempt, all within `limit` together; what cannot be uploaded
    /// goes to lost+found, each logged with its path. Every stage file is gone afterwards, except
    /// one whose data could not even be copied to lost+found (logged; the next mount keeps it).
    public func shutdown(within limit: Duration) async {
        let end = ContinuousClock.now + limit
        // Transfers under way, moving or not, end by then too (docs/SEMANTICS.md §5.5).
        shutdownLimit.end = end
        // Queued uploads start no more: the last attempts below cover them.
        uploads.stop()
        readPath.dropAll()
        await readPath.settle()
        let staged = superblock.beginShutdown()
        let pending = staged.filter { superblock.withStage($0.1) { $0.state.unsaved } }.count
        if pending > 0 {
            logger.notice("finishing \(pending) upload(s) before exiting, for at most \(limit)")
        }
        // The pauses between background attempts stop; an attempt in flight ends by its deadline.
        let retries = staged.compactMap { superblock.withStage($0.1) { $0.retryTask } }
        for t in retries { t.cancel() }
        for t in retries { await t.value }
        await withTaskGroup(of: Void.self) { group in
            for (n, s) in staged {
                group.addTask { await self.lastAttempt(n, s, until: end) }
            }
        }
    }

    /// Shutdown's attempt for one file (after any attempt under way, e.g. of a close the kernel
    /// abandoned at unmount), then the stage file goes.
    private func lastAttempt(_ n: Node, _ s: StagedFile, until end: ContinuousClock.Instant) async {
        _ = await s.uploadLock.lock()
        let (unsaved, path) = superblock.withStage(of: n, stage: s) { s, file in (s.state.unsaved && !file.removed, file.path) }!
        if unsaved {
            var failure: any Error = Errno.ETIMEDOUT
            var attempted = false
            if ContinuousClock.now < end {
                do {
                    attempted = true
                    try await OperationContext.$clock.withValue(OperationClock(fixedEnd: end)) { try await self.uploadOnce(n, s, attempt: nil) }
                    logger.notice("uploaded '\(path)' before exiting")
                } catch {
                    failure = error
                }
            }
            if superblock.withStage(s, { $0.state.unsaved }) {
                let cause = attempted ? (superblock.withStage(s, { $0.lastFailure }) ?? "\(failure)") : "\(failure)"
                let kept = giveUp(n, s, errno(for: failure), reason: "could not be uploaded before the mount ended: \(cause)")
                logger.error("could not upload '\(path)' before exiting (\(cause)); your data: \(kept)")
            }
        }
        let saved = superblock.withStage(s) { !$0.state.unsaved }
        if saved {
            _ = superblock.detachStage(of: n) { stage, _ in stage === s }
            staging.discard(s)
        }
        await s.uploadLock.unlock()
    }
}
