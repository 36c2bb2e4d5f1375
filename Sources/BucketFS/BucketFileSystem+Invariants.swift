import Foundation
import FuseKit
import StorageModel

/// What must hold whenever no lock is held, written once (gcsfuse's `checkInvariants`). The core
/// tests check it after every call they make (Tests/BucketFSTests/Harness.swift), the
/// reference-model test after every step. Each part states its own, with an `INVARIANT:` comment
/// each (the superblock's parts in Superblock/, StagedFile.swift, UploadQueue.swift,
/// ReadBudget.swift, BufferPool.swift, ReadStream.swift, WalkAhead.swift).
extension BucketFileSystem {
    /// The invariants that do not hold now, each described; empty when all hold. O(inodes +
    /// cached names + the eviction queue): the superblock's under its lock once, then each
    /// read-side part under its own lock. Each part states its own (`INVARIANT:`).
    func invariantViolations() -> [String] {
        // The superblock's (the upload life's included, StagedFile.swift) under its lock once,
        // then the write-back queue's under its own.
        var bad = superblock.invariantViolations()
        bad += uploads.invariantViolations()
        // The read side, each part under its own lock.
        bad += readPath.invariantViolations()
        for s in superblock.openStreams() { bad += s.invariantViolations() }
        return bad
    }
}
