import FuseKit
import StorageModel

/// The write path's steps through the superblock (docs/ARCHITECTURE.md, "A write"): each reads
/// what one step needs and publishes what it did in one critical section, changing a stage only
/// through its own methods (StagedFile.swift). The I/O between them (the stage file's bytes, the
/// sidecar, the upload, a copy into lost+found) is the caller's, with no lock held.
extension Superblock {
    /// What one write(2) needs before its bytes land (`beginWrite`).
    struct WriteStart {
        let node: Node
        let stage: StagedFile
        /// What the sidecar says (written before the bytes land when it has none, or said
        /// closed); nil for deleted content (an unlinked file still open: its changes go nowhere).
        let sidecar: SidecarTarget?
    }

    /// The first of a write(2)'s two critical sections: the handle's own content (EBADF when the
    /// handle is not open for writing), refused with EACCES when its create was refused (every
    /// later write of that open file says so, as its flush and close do: docs/SEMANTICS.md §3.3,
    /// "Refused creates"), marked dirty before the bytes land (so that a copy into lost+found
    /// taken meanwhile is not called complete), and what its sidecar says. The second is
    /// `StageState.wrote`, once the bytes are in the stage file.
    func beginWrite(fh: UInt64, ino: UInt64) throws(Errno) -> WriteStart {
        try locked { (h: borrowing Held) throws(Errno) -> WriteStart in
            guard let handle = h.handles.files[fh], handle.writable, let n = h.table[ino], let s = handle.stage else { throw .EBADF }
            if case .givenUp(.EACCES) = h[s].state { throw .EACCES }
            let live = h[s].markDirty()
            return WriteStart(node: n, stage: s, sidecar: live ? h[s].sidecarTarget(object: h[n].path) : nil)
        }
    }

    /// `n` and its stage, for an upload (nil when it has none).
    func stagedNode(_ ino: UInt64) -> (Node, StagedFile)? {
        locked { h in h.table[ino].flatMap { n in h[n].staged.map { (n, $0) } } }
    }

    /// An upload attempt's inputs, and its start (`StageState.beginAttempt`), in one critical
    /// section: what the attempt found, the object's path and the content type inferred here for
    /// it (`Node.inferredType`).
    func beginUpload(_ n: Node, _ s: StagedFile) -> (start: StageState.AttemptStart, path: String, inferredType: String?) {
        locked { h in (h[s].beginAttempt(removed: h[n].removed), h[n].path, h[n].inferredType) }
    }

    /// What an upload of `s` would be made of now (the path, metadata, origin and the type
    /// inferred here), for a stream's session (UploadStream.swift); nil for deleted content or a
    /// node that no longer holds `s`.
    func uploadInputs(_ n: Node, _ s: StagedFile) -> (String, WritableMetadata, StageOrigin, String?)? {
        locked { h in
            guard h[n].staged === s, !h[n].removed, h[s].state != .deleted else { return nil }
            return (h[n].path, h[s].metadata, h[s].origin, h[n].inferredType)
        }
    }

    /// A successful attempt's result, in one critical section: the stage's transition, the
    /// answer's metadata cached, and the type inferred for the object (`inferred`, if the answer
    /// kept it).
    func uploaded(_ n: Node, _ s: StagedFile, _ info: ObjectInfo, inferred: String?) {
        setInfo(n, info, alongWith: { h in
            h[s].succeeded(info)
            h[n].inferredType = info.contentType == inferred ? inferred : nil
        })
    }

    /// What a copy into lost+found is made from: the sidecar's target, whether the content is
    /// complete (handed over since its last write, or no longer open for writing), and the entry
    /// an earlier version was kept as.
    struct KeepInputs {
        let target: SidecarTarget
        let complete: Bool
        let previous: String?
    }

    /// What a failed attempt's caller goes on with.
    struct FailedAttempt {
        let shuttingDown: Bool
        let createdHere: Bool
        /// When the caller gives the content up: what it keeps in lost+found.
        let keep: KeepInputs?
    }

    /// A failed attempt's result, in one critical section: the state it started from again
    /// (`StageState.failed`), and, when the caller gives the content up (`keeping`), what it keeps.
    func attemptFailed(_ n: Node, _ s: StagedFile, restoring before: UploadState, cause: String,
                       keeping: Bool) -> FailedAttempt {
        locked { h in
            h[s].failed(restoring: before, cause: cause)
            return FailedAttempt(shuttingDown: h.shuttingDown, createdHere: h[s].createdHere,
                                 keep: keeping ? h.keepInputs(n, s) : nil)
        }
    }

    /// What a copy of `s` into lost+found is made from, now.
    func keepInputs(_ n: Node, _ s: StagedFile) -> KeepInputs { locked { h in h.keepInputs(n, s) } }


    /// The content was given up with `e` (kept as `keptAs`, or nothing kept): the file shows the
    /// bucket's state again.
    func gaveUp(_ n: Node, _ s: StagedFile, _ e: Errno, keptAs: String?) {
        locked { h in
            h[s].giveUp(e, keptAs: keptAs)
            h.expire(n, parentListing: true)
        }
    }

    /// A write to `s`'s stage file failed with `e`: its content is cut off (`StageState.cut`) and
    /// the file shows the bucket's state again. The object's path, the first time; nil after.
    func cutOff(_ n: Node, _ s: StagedFile, _ e: Errno) -> String? {
        locked { h in
            guard h[s].cut(e) else { return nil }
            h.expire(n, parentListing: true)
            return h[n].path
        }
    }
}

extension Held {
    func keepInputs(_ n: Node, _ s: StagedFile) -> Superblock.KeepInputs {
        Superblock.KeepInputs(target: self[s].sidecarTarget(object: self[n].path), complete: self[s].handedOver || !handles.isOpenForWriting(s),
                   previous: self[s].keptAs)
    }
}
