import FuseKit

/// Where a staged file's content stands against the bucket (docs/SEMANTICS.md §3). It changes
/// only through `StagedFile`'s transitions (StagedFile.swift), under the superblock's lock
/// (`withStage`); the stage file may be discarded only in `.clean`, `.givenUp` and `.deleted`,
/// and never while an attempt is under way.
enum UploadState: Equatable {
    /// The same bytes as the bucket's generation the file is based on: nothing to upload.
    case clean
    /// Differs from the bucket; no attempt under way or scheduled.
    case dirty
    /// An attempt is under way (holding `uploadLock`); `rewritten`: written again since it
    /// started, so still dirty after it succeeds.
    case uploading(rewritten: Bool)
    /// An attempt failed; background attempt `attempt` (of `uploadRetries`) comes after a pause.
    case waitingToRetry(attempt: Int)
    /// Could not be uploaded (a lost race, a refusal, or every attempt failed): the data is in
    /// lost+found, and every later flush, fsync and close of this content reports `error`, because
    /// the kernel also flushes when a forked child closes its inherited descriptor and that first
    /// answer reaches nobody.
    case givenUp(Errno)
    /// The user deleted (or renamed another file over) the file: its content goes nowhere.
    case deleted

    /// Content the bucket does not have yet, and that is not safe in lost+found.
    var unsaved: Bool {
        switch self {
        case .dirty, .uploading, .waitingToRetry: return true
        case .clean, .givenUp, .deleted: return false
        }
    }
}

/// What a staged file was made from.
enum StageOrigin: Equatable {
    /// Created here: not in the bucket until its first upload (`ifGenerationMatch=0`).
    case createdHere
    /// Created here and renamed, before its first upload, over the object of this generation
    /// (docs/SEMANTICS.md §3.4): not in the bucket under its name until that upload, which
    /// replaces exactly this generation.
    case createdOver(Int64)
    /// A copy of (or a truncation of) this generation; uploads replace exactly it.
    case generation(Int64)

    /// The upload precondition: 0 means "must not exist".
    var ifGenerationMatch: Int64 {
        switch self {
        case .createdHere: return 0
        case .createdOver(let g): return g
        case .generation(let g): return g
        }
    }
}
