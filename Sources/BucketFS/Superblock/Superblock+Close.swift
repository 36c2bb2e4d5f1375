import FuseKit
import StorageModel

/// A close through the superblock (docs/ARCHITECTURE.md, "A close"): its flush and its release
/// each read what they decide from in the critical section that acts on it. The I/O between them
/// (the sidecar, the upload, discarding the stage file) is the caller's, with no lock held.
extension Superblock {
    /// What a flush (close(2) of one descriptor) found and did in one critical section.
    struct FlushStart {
        let node: Node
        /// The writer's last descriptor closed: what its sidecar must say (closed), before any
        /// upload starts.
        let closedSidecar: (StagedFile, SidecarTarget)?
        /// Write-back: what the bucket said last about this content (a close reports it).
        let givenUp: Errno?
        /// Empty content not uploaded yet: left to the handle's release (nothing handed over).
        let waitsForRelease: Bool
    }

    /// A flush's one critical section: the sidecar's target when this was the writer's last
    /// handle, and, unless the content is empty and waits for the release (or write-back leaves
    /// it to the queue), the content handed over for saving (`StageState.handOver`). Nil when the
    /// file is not in the table.
    func beginFlush(fh: UInt64, ino: UInt64, writeBack: Bool) -> FlushStart? {
        locked { h in
            guard let n = h.table[ino] else { return nil }
            var closed: (StagedFile, SidecarTarget)? = nil
            if let handle = h.handles.files[fh], handle.writable, let s = handle.stage, h.handles.writers(of: s) == 1 {
                closed = (s, h[s].sidecarTarget(object: h[n].path))
            }
            let stage = h[n].staged
            if writeBack {
                var givenUp: Errno? = nil
                if let stage, case .givenUp(let e) = h[stage].state { givenUp = e }
                return FlushStart(node: n, closedSidecar: closed, givenUp: givenUp, waitsForRelease: false)
            }
            let waits = stage.map { h[$0].waitsForRelease } ?? false
            if !waits, let stage { h[stage].handOver() }
            return FlushStart(node: n, closedSidecar: closed, givenUp: nil, waitsForRelease: waits)
        }
    }

    /// What a release does after its first critical section.
    enum ReleaseUpload {
        /// Nothing to upload here (read-only handle, or background attempts own the content).
        case none
        /// Upload at once and report it (the default mode).
        case atOnce
        /// Queue the upload (write-back).
        case queue
    }

    /// A release's first critical section, and what the caller goes on with.
    struct ReleaseStart {
        let handle: Handle
        /// The file (nil only if it left the table, which a handle prevents).
        let node: Node?
        /// The writer's last handle closed: what its sidecar must say (closed).
        let closedSidecar: (StagedFile, SidecarTarget)?
        let upload: ReleaseUpload
    }

    /// What `beginRelease` did.
    enum ReleaseBegin {
        case started(ReleaseStart)
        /// (Immediate only) the release must upload or wait: nothing changed.
        case deferred
    }

    /// A release's first critical section: the handle goes; its hold on its stage (if it kept
    /// one) becomes the release's pin until `endRelease`; the sidecar's target when it was the
    /// writer's last handle; and whether to upload now, queue, or leave it (a file whose upload
    /// just failed is in the background attempts' hands: uploading it again here, right after
    /// close reported the failure, would make close's answer untrue). Nil when there was no such
    /// handle. `immediate` (a release on libfuse's thread, with no Task): only when the release
    /// has nothing to upload or wait for (a handle that wrote nothing, or a writer's whose content
    /// its flush saved, in the default mode); else nothing changes and it says `.deferred`.
    func beginRelease(fh: UInt64, ino: UInt64, writeBack: Bool, immediate: Bool = false) -> ReleaseBegin? {
        locked { h in
            guard let open = h.handles.files[fh] else { return nil }
            if immediate, !h.releasesAtOnce(open, ino: ino, writeBack: writeBack) { return .deferred }
            guard let handle = h.handles.removeFile(fh) else { return nil }
            if let kept = handle.stage {
                h[kept].handleReleased()
                h[kept].pinned()
            }
            // (The node stays in the table while a handle holds it: it is there.)
            guard let n = h.table[ino] else { return .started(ReleaseStart(handle: handle, node: nil, closedSidecar: nil, upload: .none)) }
            var closed: (StagedFile, SidecarTarget)? = nil
            if handle.writable, let kept = handle.stage, !h.handles.isOpenForWriting(kept) {
                closed = (kept, h[kept].sidecarTarget(object: h[n].path))
            }
            let stage = h.stageState(of: n)
            var upload = ReleaseUpload.none
            if handle.writable, writeBack {
                upload = .queue
            } else if handle.writable || stage?.waitsForRelease == true, stage?.retryTask == nil {
                upload = .atOnce
            }
            return .started(ReleaseStart(handle: handle, node: n, closedSidecar: closed, upload: upload))
        }
    }

    /// A release's second critical section: its pin on the handle's stage goes back, and the
    /// node's stage is taken away when nobody needs it any more (no handle or pin, saved or
    /// deleted, no attempt scheduled). Returns the stage taken (the caller discards its file).
    func endRelease(_ r: ReleaseStart) -> StagedFile? {
        locked { h in
            if let kept = r.handle.stage { h[kept].unpinned() }
            return r.node.flatMap { h.detachIfIdle($0) }
        }
    }
}

extension Held {
    /// Whether releasing `handle` (of `ino`) has nothing to upload or wait for: not write-back
    /// content waiting for its release, and for a writer, its content (the file's) saved with no
    /// attempt scheduled.
    func releasesAtOnce(_ handle: Handle, ino: UInt64, writeBack: Bool) -> Bool {
        if !writeBack, let n = table[ino], stageState(of: n)?.waitsForRelease == true { return false }
        guard handle.writable else { return true }
        guard !writeBack, let s = handle.stage, let n = table[ino], self[n].staged === s else { return false }
        return self[s].state == .clean && self[s].retryTask == nil
    }

    /// Takes `n`'s stage away when nobody keeps it and its content is saved (or deleted), with
    /// no attempt scheduled; the node may then leave the table.
    func detachIfIdle(_ n: Node) -> StagedFile? {
        guard let s = self[n].staged, self[s].idle else { return nil }
        self[n].staged = nil
        // Nothing local any more: the node may leave the table (the kernel forgot it already).
        dropIfUnused(n)
        return s
    }
}
