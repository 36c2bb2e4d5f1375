import Foundation
import FuseKit
import StorageModel

/// A file's local content while it is open for writing (or created and not yet uploaded), and the
/// owner of its upload life. Every field changes only through the methods below (this file), named
/// after what happened (`wrote`, `opened`, `succeeded`…): each is `private(set)`, so the compiler
/// refuses an assignment from anywhere else. The upload part (BucketFileSystem+Uploads.swift), the
/// write operations and the superblock call them inside the superblock's lock (`withStage` and the
/// write path's steps, Superblock+Writes.swift).
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
/// What changes lives in a `StageState`, which only the superblock's lock hands out
/// (`held[stage]`, or `Superblock.withStage`): code that does not hold it cannot name `origin`,
/// `state`, `size`… The sidecar's `recorded`, `recordedClosed`, `discarded` and newest target
/// live in `sidecar`, a lock of their own that owns them (`SidecarState`, StagingArea.swift),
/// taken with no other NSLock held. `fd`'s bytes are written with no lock (a handle's own
/// content).
///
/// INVARIANT: background attempts are scheduled (`waitingToRetry`) only while their task exists
/// (`retryTask`); `uploadViolations` checks it with the superblock's invariants.
final class StagedFile: @unchecked Sendable {
    let fd: Int32
    let path: String
    /// GUARDED_BY(Superblock.lock), by construction: reachable only through `Held`.
    fileprivate var state: StageState
    /// What the sidecar says, owned by its own lock (StagingArea.swift): each write is made from
    /// the newest target handed to it, so the last names the object's current path. Taken with no
    /// other NSLock held (the `uploadLock` may be), and none under it.
    let sidecar = Guarded(SidecarState())
    /// Serialises uploads of this file, and what must not overlap one (unlink, giving up,
    /// the last attempt at unmount).
    let uploadLock = AsyncLock()
    /// The upload that streams while a new file is written in order (docs/SEMANTICS.md §3.3,
    /// "Streamed uploads"); off unless `BucketFileSystem.create` enables it. Its own lock.
    let stream = UploadStream()

    init(fd: Int32, path: String, origin: StageOrigin, dirty: Bool, size: Int64, metadata: WritableMetadata) {
        self.fd = fd
        self.path = path
        self.state = StageState(origin: origin, state: dirty ? .dirty : .clean, size: size, metadata: metadata)
    }

    // MARK: - before it is handed out (nobody else can reach it yet: no lock)

    /// The copy of the generation read filled the stage file with `bytes`.
    func copiedIn(_ bytes: Int64) { state.copiedIn(bytes) }

    /// The first sidecar's target, for the object at `object`.
    func sidecarTargetUnshared(object: String) -> SidecarTarget { state.sidecarTarget(object: object) }

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

extension Held {
    /// `s`'s changing fields, while the superblock's lock is held.
    subscript(s: StagedFile) -> StageState {
        _read { yield s.state }
        nonmutating _modify { yield &s.state }
    }

    /// Runs `body` on `s`'s fields in place (`Superblock.withStage`).
    func modify<T, E: Error>(_ s: StagedFile, _ body: (inout StageState) throws(E) -> T) throws(E) -> T {
        try body(&s.state)
    }

    /// `n`'s stage as it is now (a copy), if it has one.
    func stageState(of n: Node) -> StageState? {
        guard let s = self[n].staged else { return nil }
        return s.state
    }
}

/// A stage's fields that change, GUARDED_BY(Superblock.lock), and the upload life's transitions
/// (the diagram on `StagedFile`). Every field is `private(set)`: it changes only through the
/// methods below, named after what happened.
struct StageState {
    /// What the content was made from: the upload's precondition.
    private(set) var origin: StageOrigin
    private(set) var state: UploadState
    /// A write to the stage file failed (the cache directory's disk is full, or failed): the
    /// content is incomplete and never uploaded (`cut`).
    private(set) var cutOff: Errno?
    private(set) var size: Int64
    /// Writable metadata the upload carries (xattrs and mtime set before close go here).
    private(set) var metadata: WritableMetadata
    /// The writer handed this content over (a flush, an fsync) and wrote nothing since: if its
    /// upload ends without it in the bucket (refused, a lost race, retries given up), the entry
    /// kept in lost+found is complete, not cut off (docs/SEMANTICS.md §5, "lost+found").
    private(set) var handedOver = false
    private(set) var openHandles = 0
    /// The lost+found entry holding this content's last version given up (nil: none). A later
    /// version given up replaces it: one entry per file (docs/SEMANTICS.md §5).
    private(set) var keptAs: String?
    /// Operations between handing this content out and giving it to a handle (an open for
    /// writing) or back (a truncate): it stays meanwhile (`Superblock.installStage`).
    private(set) var pins = 0
    /// How many sidecar targets have been read (`sidecarTarget`): each read's serial tells a
    /// newer one from an older.
    private(set) var sidecarSerial: UInt64 = 0
    /// The background attempts after a failed upload (until they end). Cancelling it stops the
    /// pauses between attempts, never an attempt under way.
    private(set) var retryTask: Task<Void, Never>?
    /// Why the last attempt failed, in words (the store's error, and where the store is when it
    /// could not be reached): what a lost+found entry's reason says after the last attempt.
    private(set) var lastFailure: String?

    init(origin: StageOrigin, state: UploadState, size: Int64, metadata: WritableMetadata) {
        self.origin = origin
        self.state = state
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
    mutating func markDirty() -> Bool {
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
    mutating func cut(_ e: Errno) -> Bool {
        guard cutOff == nil else { return false }
        cutOff = e
        if state != .deleted { state = .givenUp(e) }
        return true
    }

    /// What an attempt found when it came to start.
    enum AttemptStart {
        /// Nothing to upload: saved, deleted, or its object removed.
        case nothing
        /// Given up earlier: the attempt reports `error`.
        case givenUp(Errno)
        /// Started from `before` (for `failed(restoring:)`), of this content's `origin` and
        /// `metadata`.
        case started(before: UploadState, origin: StageOrigin, metadata: WritableMetadata)
    }

    /// An attempt comes to start (the caller holds `uploadLock`; `removed`: the object's name was
    /// removed meanwhile): it starts only from dirty content or a background attempt's turn.
    mutating func beginAttempt(removed: Bool) -> AttemptStart {
        switch state {
        case .dirty, .waitingToRetry:
            if removed { return .nothing }
        case .givenUp(let e):
            return removed ? .nothing : .givenUp(e)
        case .clean, .deleted, .uploading:
            return .nothing  // `uploading` cannot be seen under `uploadLock`
        }
        let before = state
        state = .uploading(rewritten: false)
        return .started(before: before, origin: origin, metadata: metadata)
    }

    /// The attempt put generation `info` in the bucket: the content is clean unless it was
    /// written again meanwhile; metadata changed while it ran stays for the next one.
    mutating func succeeded(_ info: ObjectInfo) {
        origin = .generation(info.generation)
        if case .uploading(let rewritten) = state {
            state = rewritten ? .dirty : .clean
            if !rewritten { metadata = info.writable }
        }
    }

    /// The writer asked for this content to be saved (a flush or an fsync of it).
    mutating func handOver() { handedOver = true }

    /// The attempt failed: the state it started from again (unless something else, a deletion,
    /// has moved it on).
    mutating func failed(restoring before: UploadState, cause: String) {
        if case .uploading = state { state = before }
        lastFailure = cause
    }

    /// The data is safe in lost+found (or could not be): every later flush, fsync and close of
    /// this content reports `e`.
    mutating func giveUp(_ e: Errno, keptAs entry: String?) {
        state = .givenUp(e)
        if let entry { keptAs = entry }
    }

    /// Background attempts start after a failed attempt of dirty content, unless they are under
    /// way already; `makeTask` makes them. False when none start.
    mutating func scheduleRetries(_ makeTask: () -> Task<Void, Never>) -> Bool {
        guard retryTask == nil, state == .dirty else { return false }
        state = .waitingToRetry(attempt: 1)
        retryTask = makeTask()
        return true
    }

    /// Background attempt `attempt` comes after its pause; false when there is nothing left to
    /// upload (saved, given up, deleted).
    mutating func retryAttempt(_ attempt: Int) -> Bool {
        guard state.unsaved else { return false }
        state = .waitingToRetry(attempt: attempt)
        return true
    }

    /// The background attempts ended (their task's last step): content still waiting for one is
    /// plain dirty again, with nothing scheduled.
    mutating func retriesEnded() {
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
    mutating func delete() -> Bool {
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
    mutating func renamedBeforeUpload(over generation: Int64?) -> Bool {
        guard renamesBeforeUpload else { return false }
        origin = generation.map { .createdOver($0) } ?? .createdHere
        return true
    }

    /// Whether a rename would move the pending upload (`renamedBeforeUpload`).
    var renamesBeforeUpload: Bool { origin == .createdHere && state.unsaved && cutOff == nil }

    /// A rename copied the object: the next upload replaces generation `generation`.
    mutating func rebase(on generation: Int64) {
        origin = .generation(generation)
    }

    /// A directory rename copied the object the content was made from (`from`) to `to`.
    mutating func rebase(from: Int64, to: Int64) {
        switch origin {
        case .generation(let g) where g == from: origin = .generation(to)
        case .createdOver(let g) where g == from: origin = .createdOver(to)
        default: break
        }
    }

    // MARK: - the content and its metadata (under the superblock's lock)

    /// Bytes up to `end` landed in the stage file (a write): dirty again (an attempt that started
    /// since the write began missed them), the size grows to `end`, and a new mtime (`touch`).
    mutating func wrote(upTo end: Int64, at now: Double) {
        markDirty()
        size = max(size, end)
        touchMtime(now)
    }

    /// The stage file was truncated or extended to `newSize` (setattr, an open with O_TRUNC):
    /// dirty again, and a new mtime when `now` is given.
    mutating func resized(to newSize: Int64, at now: Double?) {
        markDirty()
        size = newSize
        if let now { touchMtime(now) }
    }

    /// The copy of the generation read filled the stage file with `bytes` (before it is handed
    /// out: nobody else sees it yet).
    mutating func copiedIn(_ bytes: Int64) {
        size = bytes
    }

    /// New content means a new mtime: an mtime key carried over from the object read (gsutil's
    /// convention, or an earlier utimens) would otherwise pin the old time.
    private mutating func touchMtime(_ now: Double) {
        if metadata.customMetadata[XattrName.mtimeKey] != nil {
            metadata.customMetadata[XattrName.mtimeKey] = String(Int64(now.rounded(.down)))
        }
    }

    /// A metadata change (chmod, chown, utimens, an xattr) rides along with the pending upload:
    /// `m` is what it uploads. Returns `markDirty`'s answer (false: deleted content).
    mutating func rodeAlong(_ m: WritableMetadata) -> Bool {
        metadata = m
        return markDirty()
    }

    /// A PATCH put `writable` on the object: the content carries it too.
    mutating func patched(_ writable: WritableMetadata) {
        metadata = writable
    }

    /// A rename copied the object from `oldPath` (`copy`: the copy's metadata): saved content takes
    /// the copy's metadata; unsaved content the type the new name means (`newType`, when the
    /// type was inferred), and no default disposition naming the old name (docs/SEMANTICS.md §4.1).
    mutating func followedRename(copy: ObjectInfo?, newType: String?, from oldPath: String) {
        if state == .clean, let copy { metadata = copy.writable; return }
        if let newType { metadata.contentType = newType }
        if let d = metadata.contentDisposition, ContentDisposition.isDefault(d, forObject: oldPath) {
            metadata.contentDisposition = nil
        }
    }

    // MARK: - who holds it (under the superblock's lock)

    /// An operation took a pin (`Superblock.installStage`, `pinStage`).
    mutating func pinned() { pins += 1 }
    /// The pin went back, or to the handle the operation opened.
    mutating func unpinned() { pins -= 1 }
    /// A handle now keeps this content.
    mutating func opened() { openHandles += 1 }
    /// A handle that kept it was released.
    mutating func handleReleased() { openHandles -= 1 }

    /// Nobody keeps it (no handle, no pin), its content is saved or deleted, and no background
    /// attempt is scheduled: the stage can go.
    var idle: Bool { openHandles <= 0 && pins <= 0 && retryTask == nil && !state.unsaved }

    /// Empty content not uploaded yet (a create, an O_TRUNC, nothing written since): a flush
    /// leaves it to the handle's release (docs/SEMANTICS.md §3.3, "One generation per written
    /// file").
    var waitsForRelease: Bool { state == .dirty && size == 0 }

    // MARK: - the sidecar

    /// What the sidecar would say now, for the object at `object` (under the superblock's lock, or
    /// before the stage is handed out): the generation the content is based on, its size and
    /// metadata, with a serial newer than every earlier one.
    mutating func sidecarTarget(object: String) -> SidecarTarget {
        sidecarSerial += 1
        return SidecarTarget(object: object, baseGeneration: origin.ifGenerationMatch, size: size, metadata: metadata,
                             serial: sidecarSerial)
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
}

/// What a stage's sidecar says, owned by `StagedFile.sidecar` (StagingArea.swift writes it).
struct SidecarState {
    /// A sidecar names this stage's object (written before it first became dirty).
    private(set) var recorded = false
    /// That sidecar says the writer closed the file (`StageRecord.closed`).
    private(set) var recordedClosed = false
    /// The stage file was deleted (`StagingArea.discard`): a sidecar written now would name
    /// nothing.
    private(set) var discarded = false
    /// The newest target any caller handed the sidecar (the highest serial).
    private var newestTarget: SidecarTarget?

    /// The newest of `target` and those handed before it: a caller
    /// that read its target before a rename may write after the rename's caller did.
    mutating func newest(_ target: SidecarTarget) -> SidecarTarget {
        if let kept = newestTarget, kept.serial > target.serial { return kept }
        newestTarget = target
        return target
    }

    /// The sidecar now says `closed` or not.
    mutating func sidecarWritten(closed: Bool) {
        recorded = true
        recordedClosed = closed
    }

    /// The sidecar was deleted.
    mutating func sidecarDeleted() {
        recorded = false
        recordedClosed = false
    }

    /// The stage was discarded: no sidecar is written for it again.
    mutating func sidecarDiscarded() {
        sidecarDeleted()
        discarded = true
    }
}
