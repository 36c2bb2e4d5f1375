import Foundation
import FuseKit
import StorageModel

/// A file's local content while it is open for writing (or created and not yet uploaded), and the
/// owner of its upload life: its `UploadState` and `origin` change only through the transitions
/// below (this file), which the upload part (BucketFileSystem+Uploads.swift) and the write
/// operations call inside `Superblock.withStage`, under the superblock's lock.
///
///     clean ──markDirty──▶ dirty ──beginAttempt──▶ uploading ──succeeded──▶ clean (dirty if rewritten)
///                            ▲                         │ failed(restoring)
///                            │                         ▼
///     retriesEnded ◀── waitingToRetry(k) ◀──scheduleRetries / retryAttempt(k)
///     giveUp(errno) (data in lost+found) ──▶ givenUp      delete() (any state) ──▶ deleted
///
/// A rename before the first upload (`renamedBeforeUpload`) changes no state: the pending upload
/// goes to the new name, with the generation it replaces there as its `origin`.
///
/// Guarded by the superblock's lock (GUARDED_BY(Superblock.lock)): `origin`, `state`, `size`,
/// `metadata`, `handedOver`, `openHandles`, `pins`, `retryTask`, `keptAs`, `lastFailure`. The sidecar's `recorded` has a lock of its own
/// (`sidecarLock`, StagingArea.swift), taken with no other NSLock held. `fd`'s bytes are written
/// with no lock (a handle's own content).
///
/// INVARIANT: background attempts are scheduled (`waitingToRetry`) only while their task exists
/// (`retryTask`); `uploadViolations` checks it with the superblock's invariants.
final class StagedFile: @unchecked Sendable {
    let fd: Int32
    let path: String
    /// What the content was made from: the upload's precondition.
    private(set) var origin: StageOrigin
    private(set) var state: UploadState
    /// A write to the stage file failed (the cache directory's disk is full, or failed): the
    /// content is incomplete and never uploaded (`cut`).
    private(set) var cutOff: Errno?
    var size: Int64
    /// Writable metadata the upload carries (xattrs and mtime set before close go here).
    var metadata: WritableMetadata
    /// The writer handed this content over (a flush, an fsync) and wrote nothing since: if its
    /// upload ends without it in the bucket (refused, a lost race, retries given up), the entry
    /// kept in lost+found is complete, not cut off (docs/SEMANTICS.md §5, "lost+found").
    private(set) var handedOver = false
    var openHandles = 0
    /// The lost+found entry holding this content's last version given up (nil: none). A later
    /// version given up replaces it: one entry per file (docs/SEMANTICS.md §5).
    private(set) var keptAs: String?
    /// Operations between handing this content out and giving it to a handle (an open for
    /// writing) or back (a truncate): it stays meanwhile (`Superblock.installStage`).
    var pins = 0
    /// A sidecar names this stage's object (written before it first became dirty).
    /// GUARDED_BY(sidecarLock)
    var recorded = false
    /// That sidecar says the writer closed the file (`StageRecord.closed`). GUARDED_BY(sidecarLock)
    var recordedClosed = false
    /// Orders the writes of this stage's sidecar (StagingArea.swift): the last one names the
    /// object's current path. Taken with no other NSLock held (the `uploadLock` may be), and
    /// only the superblock's lock (to read the path) under it.
    let sidecarLock = NSLock()
    /// The background attempts after a failed upload (until they end). Cancelling it stops the
    /// pauses between attempts, never an attempt under way.
    private(set) var retryTask: Task<Void, Never>?
    /// Serialises uploads of this file, and what must not overlap one (unlink, giving up,
    /// the last attempt at unmount).
    let uploadLock = AsyncLock()

    init(fd: Int32, path: String, origin: StageOrigin, dirty: Bool, size: Int64, metadata: WritableMetadata) {
        self.fd = fd
        self.path = path
        self.origin = origin
        self.state = dirty ? .dirty : .clean
        self.size = size
        self.metadata = metadata
    }

    /// Not in the bucket under its name until its first upload (created here, and perhaps
    /// renamed over another object since).
    var createdHere: Bool {
        switch origin {
        case .createdHere, .createdOver: return true
        case .generation: return false
        }
    }

    // MARK: - the upload life's transitions (under the superblock's lock)

    /// The content is about to change, or just did (called before a change, for the sidecar, and
    /// again after it, so that an attempt that started in between is known to have missed it).
    /// False for deleted content (an unlinked file still open: its changes go nowhere).
    @discardableResult
    func markDirty() -> Bool {
        handedOver = false
        switch state {
        case .deleted:
            return false
        case .uploading:
            state = .uploading(rewritten: true)
        case .waitingToRetry, .dirty:
            break
        case .clean, .givenUp:
            if cutOff == nil { state = .dirty }
        }
        return true
    }

    /// A write to the stage file failed with `e`: the content is cut off; it is given up (not
    /// uploaded, every later flush, fsync and close reports `e`) and stays so whatever is written
    /// after. True the first time.
    func cut(_ e: Errno) -> Bool {
        guard cutOff == nil else { return false }
        cutOff = e
        if state != .deleted { state = .givenUp(e) }
        return true
    }

    /// An attempt starts (the caller holds `uploadLock`); returns the state it started from, for
    /// `failed(restoring:)`.
    func beginAttempt() -> UploadState {
        let before = state
        state = .uploading(rewritten: false)
        return before
    }

    /// The attempt put generation `info` in the bucket: the content is clean unless it was
    /// written again meanwhile; metadata changed while it ran stays for the next one.
    func succeeded(_ info: ObjectInfo) {
        origin = .generation(info.generation)
        if case .uploading(let rewritten) = state {
            state = rewritten ? .dirty : .clean
            if !rewritten { metadata = info.writable }
        }
    }

    /// The writer asked for this content to be saved (a flush or an fsync of it).
    func handOver() { handedOver = true }

    /// The attempt failed: the state it started from again (unless something else, a deletion,
    /// has moved it on).
    func failed(restoring before: UploadState, cause: String) {
        if case .uploading = state { state = before }
        lastFailure = cause
    }

    /// Why the last attempt failed, in words (the store's error, and where the store is when it
    /// could not be reached): what a lost+found entry's reason says after the last attempt.
    private(set) var lastFailure: String?

    /// The data is safe in lost+found (or could not be): every later flush, fsync and close of
    /// this content reports `e`.
    func giveUp(_ e: Errno, keptAs entry: String?) {
        state = .givenUp(e)
        if let entry { keptAs = entry }
    }

    /// Background attempts start after a failed attempt of dirty content, unless they are under
    /// way already; `makeTask` makes them. False when none start.
    func scheduleRetries(_ makeTask: () -> Task<Void, Never>) -> Bool {
        guard retryTask == nil, state == .dirty else { return false }
        state = .waitingToRetry(attempt: 1)
        retryTask = makeTask()
        return true
    }

    /// Background attempt `attempt` comes after its pause; false when there is nothing left to
    /// upload (saved, given up, deleted).
    func retryAttempt(_ attempt: Int) -> Bool {
        guard state.unsaved else { return false }
        state = .waitingToRetry(attempt: attempt)
        return true
    }

    /// The background attempts ended (their task's last step): content still waiting for one is
    /// plain dirty again, with nothing scheduled.
    func retriesEnded() {
        retryTask = nil
        if case .waitingToRetry = state { state = .dirty }
    }

    /// Stops the pauses between background attempts (never an attempt under way); the task ends
    /// itself (`retriesEnded`).
    func cancelRetries() {
        retryTask?.cancel()
    }

    /// The user deleted the file (unlink, a rename over it, a new file of the same name): its
    /// content goes nowhere. Returns whether it held unsaved changes.
    @discardableResult
    func delete() -> Bool {
        let unsaved = state.unsaved
        state = .deleted
        retryTask?.cancel()
        return unsaved
    }

    /// A rename of content that was never uploaded (created here, its upload queued, waiting to
    /// retry, or still open) moves the pending upload itself: it is uploaded once, under the new
    /// name, replacing exactly `generation` there (nil: nothing there). False, and nothing
    /// changes, when the content is in the bucket already or saved (then the rename copies), or
    /// when it was itself renamed over an object: that object must go from the old name, so its
    /// upload replaces it there first.
    func renamedBeforeUpload(over generation: Int64?) -> Bool {
        guard renamesBeforeUpload else { return false }
        origin = generation.map { .createdOver($0) } ?? .createdHere
        return true
    }

    /// Whether a rename would move the pending upload (`renamedBeforeUpload`).
    var renamesBeforeUpload: Bool { origin == .createdHere && state.unsaved && cutOff == nil }

    /// A rename copied the object: the next upload replaces generation `generation`.
    func rebase(on generation: Int64) {
        origin = .generation(generation)
    }

    /// A directory rename copied the object the content was made from (`from`) to `to`.
    func rebase(from: Int64, to: Int64) {
        switch origin {
        case .generation(let g) where g == from: origin = .generation(to)
        case .createdOver(let g) where g == from: origin = .createdOver(to)
        default: break
        }
    }

    /// The upload life's invariants that do not hold now (under the superblock's lock).
    func uploadViolations() -> [String] {
        var bad: [String] = []
        if case .waitingToRetry(let k) = state, retryTask == nil {
            bad.append("waits for background attempt \(k), and no retry task exists")
        }
        if state == .deleted, retryTask != nil, !(retryTask!.isCancelled) {
            bad.append("was deleted, and its background attempts were not cancelled")
        }
        if size < 0 { bad.append("has a negative size \(size)") }
        return bad
    }

    // MARK: - the file

    private let closeLock = NSLock()
    private var closed = false

    /// A stage nobody refers to any more (its filesystem was dropped without a shutdown) gives
    /// back its descriptor; the file stays, for the next mount's recovery if it held unsaved data.
    deinit {
        if closeLock.withLock({ !closed }) { Glibc.close(fd) }
    }

    /// Closes and deletes the stage file, once (a second call does nothing: the descriptor
    /// number may belong to another file by then).
    func close() {
        let first = closeLock.withLock { () -> Bool in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        Glibc.close(fd)
        unlink(path)
    }
}
