import Foundation
import FuseKit
import StorageModel

/// The superblock's open files: handles made and closed, what the kernel's page cache may keep
/// for each (`PageCachePolicy`), and what the read path's walk reads of an open file's directory
/// (`ListedFiles`, `smallFiles`).
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

    /// What `openFile` did: opened (the handle's number, the handle, and for a walk its
    /// directory's listing as of the open), or found that a handle
    /// opened now reads another generation (or path) than `stream` was made for, or needs a
    /// stream where none was given: the open is not made, and the caller makes one for
    /// `target` and asks again.
    enum Opening {
        case opened(fh: UInt64, handle: Handle, listed: ListedFiles?)
        case retarget(path: String, info: ObjectInfo)
    }

    /// Opens `n`: a handle on the metadata it has now (or `seen`), keeping its stage if it has
    /// one, reading through `stream` (made outside the lock, by the caller, for what `readTarget`
    /// said) when it is opened for reading and not staged. A stream not wanted is the caller's to
    /// drop. `walks`: a handle with a stream comes with its directory's listing (`listedFiles`).
    func openFile(_ n: Node, writable: Bool, writeOnly: Bool = false, seen: ObjectInfo?, pinned: StagedFile? = nil,
                  stream: ReadStream?, walks: Bool = false) -> Opening {
        locked {
            let stage: StagedFile? = pinned ?? n.staged
            let info = n.info ?? (stage == nil ? seen : nil)
            var reads: ReadStream? = nil
            if !writable, stage == nil, let info {
                // The generation (and path) the stream was made for must be the one opened now.
                guard let stream, stream.path == n.path, stream.generation == info.generation, stream.size == info.size else {
                    return .retarget(path: n.path, info: info)
                }
                reads = stream
            }
            // A handle keeps the file's local content while it is open (read through it too): the
            // pin its open took (for writing), else the one it takes now.
            pinned?.unpinned()
            stage?.opened()
            let h = Handle(ino: n.ino, writable: writable, info: info, path: n.path, stream: reads, stage: stage)
            let pages = PageCachePolicy.keepCache(cached: n.cachedGeneration,
                                                  opening: !writable && stage == nil ? info?.generation : nil)
            h.keepCache = pages.keep
            n.cachedGeneration = pages.cachedAfter
            h.directIO = PageCachePolicy.directIO(writeOnly: writeOnly, others: handles.fileHandles(on: n.ino))
            return .opened(fh: handles.add(h), handle: h, listed: walks && reads != nil ? listedFilesLocked(around: n) : nil)
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
            cache.addChild(p, name, n.ino, nodes: { self.table[$0] })
            pending.note(n)
            let h = Handle(ino: n.ino, writable: true, info: nil, path: path, stream: nil, stage: staged)
            h.directIO = PageCachePolicy.directIO(writeOnly: writeOnly, others: handles.fileHandles(on: n.ino))
            let fh = handles.add(h)
            return (stat.entry(n, now: now), fh, replaced)
        }
    }

    /// The streams of the open handles (invariant checks of the read side).
    func openStreams() -> [ReadStream] { locked { handles.streams } }

    /// The listing of `n`'s directory as of now, with `n` in it, for the read path's walk; nil
    /// when the directory has no listing.
    func listedFiles(around n: Node) -> ListedFiles? { locked { listedFilesLocked(around: n) } }

    private func listedFilesLocked(around n: Node) -> ListedFiles? {
        guard let d = table.parent(of: n), let l = d.listing else { return nil }
        return ListedFiles(directory: StoragePath.parent(n.path) ?? "", serial: l.serial, name: n.name, ino: n.ino,
                           files: l.fileOrder, children: l.children)
    }

    /// Of `names` (files of `n`'s directory), the first `limit` that a walk may fetch ahead:
    /// regular, listed, not written here, of 1 byte to `maxSize`; each with its index in `names`.
    func smallFiles(besides n: Node, named names: ArraySlice<String>, limit: Int, maxSize: Int64) -> [SmallFile] {
        locked {
            guard limit > 0, let l = table.parent(of: n)?.listing else { return [] }
            var out: [SmallFile] = []
            for (k, name) in names.enumerated() {
                guard let c = childLocked(l, name), c.type == .regular, c.staged == nil, let info = c.info,
                      info.size > 0, info.size <= maxSize else { continue }
                out.append((k, c.path, info))
                if out.count == limit { break }
            }
            return out
        }
    }
}
