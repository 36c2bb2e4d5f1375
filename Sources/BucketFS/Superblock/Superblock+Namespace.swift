import Foundation
import FuseKit
import StorageModel

/// The superblock's side of namespace changes made through the mount: what mkdir, symlink,
/// unlink, rmdir and rename did, applied to the tables. Local content a change deletes and stage
/// sidecars that must name a new path are handed back to the caller, which does that work after
/// the lock is released.
extension Superblock {
    /// A directory made here at `path` in `p` (named `name`), with the placeholder `info`:
    /// known empty, held by the kernel.
    func madeDirectory(_ path: String, in p: Node, name: String, info: ObjectInfo) -> FuseEntry {
        locked {
            let n = nodeLocked(path: path, type: .directory)
            n.presence = .present
            setInfoLocked(n, info, expiry: now + ttl)
            setListingLocked(n, Listing(children: [:], expiry: now + ttl))
            n.lookups += 1
            cache.addChild(p, name, n.ino, nodes: { self.table[$0] })
            trimCacheLocked()
            return stat.entry(n, now: now)
        }
    }

    /// An object uploaded whole here at `path` in `p` (named `name`), with its metadata `info`
    /// (a symbolic link): held by the kernel.
    func madeObject(_ path: String, in p: Node, name: String, info: ObjectInfo) -> FuseEntry {
        locked {
            let n = nodeLocked(path: path, type: .regular)
            n.presence = .present
            setInfoLocked(n, info, expiry: now + ttl)
            n.lookups += 1
            cache.addChild(p, name, n.ino, nodes: { self.table[$0] })
            trimCacheLocked()
            return stat.entry(n, now: now)
        }
    }

    /// The file `n` (named `name` in `p`) was deleted through this mount: it leaves the index and
    /// its directory's listing. Returns its local content and the path it had, which the caller
    /// discards (the content goes nowhere).
    func unlinked(_ n: Node, from p: Node, name: String) -> (StagedFile, path: String)? {
        locked {
            n.presence = .unlinked
            clearInfoLocked(n)
            let discarded = n.staged.map { ($0, n.path) }
            cache.removeChild(p, name, nodes: { self.table[$0] })
            table.unindex(n)
            dropIfUnusedLocked(n)
            return discarded
        }
    }

    /// The directory at `path`, if this mount knows it and it was not removed (a prefix-only
    /// directory whose last object just went is still removable).
    func knownDirectory(at path: String) -> Node? {
        locked { table.bound(path, isDirectory: true).flatMap { $0.removed ? nil : $0 } }
    }

    /// The directory `n` (named `name` in `p`) was removed through this mount; a file of the same
    /// name it hid shows at once.
    func removedDirectory(_ n: Node, from p: Node, name: String) {
        locked {
            n.presence = .unlinked
            clearInfoLocked(n)
            dropListingLocked(n)
            cache.removeChild(p, name, nodes: { self.table[$0] })
            table.unindex(n)
            uncoverLocked(p, name)
            dropIfUnusedLocked(n)
        }
    }

    /// The file `src` now lives at `dstPath` (its object was copied there, or it is created
    /// here); `dst`, the file that was there, is unlinked. The moved file's metadata is read again
    /// at its next use. Returns `dst`'s local content and path, which the caller discards, and
    /// whether `src`'s stage sidecar must be written again to name its new path.
    func movedFile(_ src: Node, to dstPath: String, replacing dst: Node?) -> (discarded: (StagedFile, path: String)?, rename: StagedFile?) {
        locked {
            var discarded: (StagedFile, path: String)? = nil
            if let dst, dst !== src {
                dst.presence = .unlinked
                discarded = dst.staged.map { ($0, dst.path) }
                table.unindex(dst)
            }
            table.unindex(src)
            cache.noteLeft(src.path)
            src.path = dstPath
            cache.noteChange(src)
            negative.forget(dstPath)
            if table.isTabled(src) { bindPathLocked(src) }
            if src.staged?.createdHere == true { pending.note(src) }
            src.infoExpiry = 0
            if src.staged?.createdHere == true { clearInfoLocked(src) }
            return (discarded, src.staged)
        }
    }

    /// After a file's rename copied its object: its local content's next upload replaces the copy
    /// (the metadata read since the copy).
    func rebaseStage(of n: Node) {
        locked { if let s = n.staged, let i = n.info { s.rebase(on: i.generation) } }
    }

    /// Every known node at `srcPath` or below moves to `dstPath` (their objects were copied:
    /// `copied` maps each new object name to the generation it was copied from and the copy's
    /// metadata). Live nodes only: a removed directory's inode may still carry the same path.
    /// Returns the moved files with local content, whose sidecars must name their new paths.
    func movedDirectory(from srcPath: String, to dstPath: String, copied: [String: (from: Int64, to: ObjectInfo)]) -> [(Node, StagedFile)] {
        locked {
            let moved = table.liveNodes(at: srcPath)
            for n in moved { table.unindex(n) }
            var stages: [(Node, StagedFile)] = []
            for n in moved {
                cache.noteLeft(n.path)
                n.path = dstPath + n.path.dropFirst(srcPath.count)
                cache.noteChange(n)
                negative.forget(n.path)
                n.infoExpiry = 0
                if let c = copied[n.objectName] {
                    // What is there now is the copy (the generation a later unlink or upload
                    // must name).
                    n.staged?.rebase(from: c.from, to: c.to.generation)
                    setInfoLocked(n, c.to, expiry: now + ttl)
                }
                if let s = n.staged { stages.append((n, s)) }
                if n.staged?.createdHere == true { pending.note(n) }
                bindPathLocked(n)
            }
            // Once every node has its new path (dropping a listing may drop children it held).
            for n in moved { dropListingLocked(n) }
            trimCacheLocked()
            return stages
        }
    }

    /// A directory rename stopped part way: cached listings under both prefixes are dropped
    /// (what moved and what did not is read again).
    func invalidate(prefixes: [String]) {
        locked {
            for prefix in prefixes {
                for n in table.nodes.values where n.path.hasPrefix(prefix) || prefix.hasPrefix(n.childPrefix) {
                    dropListingLocked(n)
                    n.infoExpiry = 0
                }
            }
        }
    }

    /// After a rename of `name` in `p` to `newName` in `np` (at `dstPath`): the old name leaves
    /// `p`'s listing (a file a renamed directory hid shows at once), the new one joins `np`'s.
    func renamed(from p: Node, _ name: String, to np: Node, _ newName: String, at dstPath: String, isDirectory: Bool) {
        locked {
            cache.removeChild(p, name, nodes: { self.table[$0] })
            if isDirectory { uncoverLocked(p, name) }
            if let n = table.bound(dstPath, isDirectory: isDirectory) {
                // A directory renamed over a directory that hid a file (the rmdir of the one it
                // replaced showed that file): the file is hidden again, the directory wins.
                if isDirectory, let shown = np.listing?.children[newName], shown != n.ino,
                   let f = table[shown], f.type == .regular {
                    np.listing?.hiddenFiles[newName] = .some(f.info)
                }
                cache.addChild(np, newName, n.ino, nodes: { self.table[$0] })
            }
            trimCacheLocked()
        }
    }

    /// After the directory `name` left `p`, a file of the same name that it hid (the directory
    /// wins) shows at once.
    private func uncoverLocked(_ p: Node, _ name: String) {
        guard let hidden = p.listing?.hiddenFiles.removeValue(forKey: name) else { return }
        let f = nodeLocked(path: hidden?.name ?? p.childPrefix + name, type: .regular)
        f.presence = .present
        if let info = hidden { setInfoLocked(f, info, expiry: now + ttl) }
        cache.addChild(p, name, f.ino, nodes: { self.table[$0] })
    }
}
