import Foundation
import FuseKit
import StorageModel

/// The superblock's open files: handles made and closed, what the kernel's page cache may keep
/// for each (`PageCachePolicy`), and where an open file stands in its directory's walk orders
/// (`WalkOrder`).
extension Superblock {
    func handle(_ fh: UInt64) -> Handle? { locked { handles.files[fh] } }

    func keepsCache(_ fh: UInt64) -> Bool { locked { handles.files[fh]?.keepCache ?? false } }
    func usesDirectIO(_ fh: UInt64) -> Bool { locked { handles.files[fh]?.directIO ?? false } }

    /// Whether `n` is known to be gone (a stat saw 404, or unlinked) and not being written here.
    func isGoneAndNotStaged(_ n: Node) -> Bool { locked { n.removed && n.staged == nil } }

    /// For a read of a file not staged here: its path and the metadata to read (the cached one,
    /// or `seen`, what the open read).
    func readTarget(_ n: Node, seen: ObjectInfo?) -> (path: String, info: ObjectInfo)? {
        locked { n.staged == nil ? (n.info ?? seen).map { (n.path, $0) } : nil }
    }

    /// Opens `n`: a handle on the metadata it has now (or `seen`), keeping its stage if it has
    /// one, with reads of the generation opened made by `makeStream` (a file not staged, opened
    /// for reading). Returns the handle's number.
    func openFile(_ n: Node, writable: Bool, writeOnly: Bool = false, seen: ObjectInfo?, pinned: StagedFile? = nil,
                  makeStream: (_ path: String, _ info: ObjectInfo) -> ReadStream) -> (fh: UInt64, handle: Handle) {
        locked {
            // A handle keeps the file's local content while it is open (read through it too): the
            // pin its open took (for writing), else the one it takes now.
            let stage: StagedFile?
            if let pinned {
                pinned.unpinned()
                stage = pinned
            } else {
                stage = n.staged
            }
            stage?.opened()
            let info = n.info ?? (stage == nil ? seen : nil)
            let stream = writable || stage != nil ? nil : info.map { makeStream(n.path, $0) }
            let h = Handle(ino: n.ino, writable: writable, info: info, path: n.path, stream: stream, stage: stage)
            let pages = PageCachePolicy.keepCache(cached: n.cachedGeneration,
                                                  opening: !writable && stage == nil ? info?.generation : nil)
            h.keepCache = pages.keep
            n.cachedGeneration = pages.cachedAfter
            h.directIO = PageCachePolicy.directIO(writeOnly: writeOnly, others: handles.fileHandles(on: n.ino))
            return (handles.add(h), h)
        }
    }

    /// Whether a handle open for writing keeps `s` (its close will upload it).
    func isOpenForWriting(_ s: StagedFile) -> Bool { locked { handles.isOpenForWriting(s) } }

    /// How many handles open for writing keep `s`.
    func writers(of s: StagedFile) -> Int { locked { handles.writers(of: s) } }

    /// Closes a file handle (release); nil when there is none.
    func closeFile(_ fh: UInt64) -> Handle? { locked { handles.removeFile(fh) } }

    /// A new file created here at `path` in `p` (named `name`) with local content `staged`, open
    /// through a new handle. Returns its entry, the handle's number, and the local content the
    /// name had before (a file created here earlier), which the caller discards.
    func created(_ path: String, in p: Node, name: String, staged: StagedFile, writeOnly: Bool) -> (FuseEntry, UInt64, replaced: StagedFile?) {
        locked {
            let n = nodeLocked(path: path, type: .regular)
            n.presence = .present
            clearInfoLocked(n)
            let replaced = n.staged
            n.staged = staged
            staged.opened()
            n.lookups += 1
            cache.addChild(p, name, n.ino)
            pending.note(n)
            let h = Handle(ino: n.ino, writable: true, info: nil, path: path, stream: nil, stage: staged)
            h.directIO = PageCachePolicy.directIO(writeOnly: writeOnly, others: handles.fileHandles(on: n.ino))
            let fh = handles.add(h)
            return (stat.entry(n, now: now), fh, replaced)
        }
    }

    /// The streams of the open handles (invariant checks of the read side).
    func openStreams() -> [ReadStream] { locked { handles.streams } }

    /// Where `n` stands in its directory's walk orders; nil when the directory has no listing or
    /// the listing does not name `n`.
    func walkPosition(of n: Node) -> WalkAhead.Position? {
        locked { table.parent(of: n).flatMap { WalkOrder.position(of: n, in: $0) } }
    }

    /// The next small files after `n` in its directory's `order` (`WalkOrder.window`).
    func walkWindow(after n: Node, order: WalkAhead.Order, limit: Int, maxSize: Int64) -> [WalkAhead.Candidate] {
        locked {
            guard let d = table.parent(of: n) else { return [] }
            return WalkOrder.window(after: n, in: d, order: order, limit: limit, maxSize: maxSize) { l, name in childLocked(l, name) }
        }
    }
}
