import Foundation
import FuseKit
import StorageModel

/// The superblock's open files: handles made and closed, what the kernel's page cache may keep
/// for each (`PageCachePolicy`), and what the read path's walk reads of an open file's directory
/// (`ListedFiles`, `smallFiles`).
extension Superblock {
    func handle(_ fh: UInt64) -> Handle? { locked { h in h.handles.files[fh] } }

    func keepsCache(_ fh: UInt64) -> Bool { locked { h in h.handles.files[fh]?.keepCache ?? false } }
    func usesDirectIO(_ fh: UInt64) -> Bool { locked { h in h.handles.files[fh]?.directIO ?? false } }

    /// Whether `n` is known to be gone (a stat saw 404, or unlinked) and not being written here.
    func isGoneAndNotStaged(_ n: Node) -> Bool { locked { h in h[n].removed && h[n].staged == nil } }

    /// For a read of a file not staged here: its path and the metadata to read (the cached one,
    /// or `seen`, what the open read).
    func readTarget(_ n: Node, seen: ObjectInfo?) -> (path: String, info: ObjectInfo)? {
        locked { h in h[n].staged == nil ? (h[n].info ?? seen).map { (h[n].path, $0) } : nil }
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
        locked { h in
            let stage: StagedFile? = pinned ?? h[n].staged
            let info = h[n].info ?? (stage == nil ? seen : nil)
            var reads: ReadStream? = nil
            if !writable, stage == nil, let info {
                // The generation (and path) the stream was made for must be the one opened now.
                guard let stream, stream.path == h[n].path, stream.generation == info.generation, stream.size == info.size else {
                    return .retarget(path: h[n].path, info: info)
                }
                reads = stream
            }
            // A handle keeps the file's local content while it is open (read through it too): the
            // pin its open took (for writing), else the one it takes now.
            if let pinned { h[pinned].unpinned() }
            if let stage { h[stage].opened() }
            let pages = PageCachePolicy.keepCache(cached: h[n].cachedGeneration,
                                                  opening: !writable && stage == nil ? info?.generation : nil)
            h[n].cachedGeneration = pages.cachedAfter
            let handle = Handle(ino: n.ino, writable: writable, info: info, path: h[n].path, stream: reads, stage: stage,
                                keepCache: pages.keep,
                                directIO: PageCachePolicy.directIO(writeOnly: writeOnly, others: h.handles.fileHandles(on: n.ino),
                                                                   directReads: config.directReads,
                                                                   // (the stream's lock only when the option is on)
                                                                   readsBucket: config.directReads && reads != nil && reads?.cachedFile == nil))
            return .opened(fh: h.handles.add(handle), handle: handle, listed: walks && reads != nil ? h.listedFiles(around: n) : nil)
        }
    }

    /// Whether a handle open for writing keeps `s` (its close will upload it).
    func isOpenForWriting(_ s: StagedFile) -> Bool { locked { h in h.handles.isOpenForWriting(s) } }

    /// How many handles open for writing keep `s`.
    func writers(of s: StagedFile) -> Int { locked { h in h.handles.writers(of: s) } }

    /// Closes a file handle (release); nil when there is none.
    func closeFile(_ fh: UInt64) -> Handle? { locked { h in h.handles.removeFile(fh) } }

    /// A new file created here at `path` in `p` (named `name`) with local content `staged`, open
    /// through a new handle. Returns its entry, the handle's number, and the local content the
    /// name had before (a file created here earlier), which the caller discards.
    func created(_ path: String, in p: Node, name: String, staged: StagedFile, writeOnly: Bool) -> (FuseEntry, UInt64, replaced: StagedFile?) {
        locked { h in
            let n = h.node(path: path, type: .regular)
            h[n].presence = .present
            h.clearInfo(n)
            let replaced = h[n].staged
            h[n].staged = staged
            h[staged].opened()
            h[n].lookups += 1
            h.cache.addChild(p, name, n.ino, h)
            h.pending.note(n, h)
            let handle = Handle(ino: n.ino, writable: true, info: nil, path: path, stream: nil, stage: staged,
                                directIO: PageCachePolicy.directIO(writeOnly: writeOnly, others: h.handles.fileHandles(on: n.ino)))
            let fh = h.handles.add(handle)
            return (stat.entry(n, now: now, h), fh, replaced)
        }
    }

    /// The streams of the open handles (invariant checks of the read side).
    func openStreams() -> [ReadStream] { locked { h in h.handles.streams } }

    /// The listing of `n`'s directory as of now, with `n` in it, for the read path's walk; nil
    /// when the directory has no listing.
    func listedFiles(around n: Node) -> ListedFiles? { locked { h in h.listedFiles(around: n) } }


    /// Of `names` (files of `n`'s directory), the first `limit` that a walk may fetch ahead:
    /// regular, listed, not written here, of 1 byte to `maxSize`; each with its index in `names`.
    func smallFiles(besides n: Node, named names: ArraySlice<String>, limit: Int, maxSize: Int64) -> [SmallFile] {
        locked { h in
            guard limit > 0, let l = h.parentListing(of: n) else { return [] }
            var out: [SmallFile] = []
            for (k, name) in names.enumerated() {
                guard let c = h.child(l, name), c.type == .regular, h[c].staged == nil, let info = h[c].info,
                      info.size > 0, info.size <= maxSize else { continue }
                out.append((k, h[c].path, info))
                if out.count == limit { break }
            }
            return out
        }
    }
}

extension Held {
    func listedFiles(around n: Node) -> ListedFiles? {
        guard let d = table.parent(of: n, self), let l = self[d].listing else { return nil }
        return ListedFiles(directory: StoragePath.parent(self[n].path) ?? "", serial: l.serial, name: self[n].name, ino: n.ino,
                           files: l.fileOrder, children: l.children)
    }
}
