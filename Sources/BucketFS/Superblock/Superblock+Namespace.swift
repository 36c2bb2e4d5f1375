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
    /// `info`: its placeholder; nil for a folder of a hierarchical bucket, which has none.
    func madeDirectory(_ path: String, in p: Node, name: String, info: ObjectInfo?) -> FuseEntry {
        locked { h in
            let n = h.node(path: path, type: .directory)
            h[n].presence = .present
            h.setInfo(n, info, expiry: now + ttl)
            h.setListing(n, Listing(children: [:], expiry: now + ttl))
            h[n].lookups += 1
            h.cache.addChild(p, name, n.ino, h)
            h.trimCache()
            return stat.entry(n, now: now, h)
        }
    }

    /// An object uploaded whole here at `path` in `p` (named `name`), with its metadata `info`
    /// (a symbolic link): held by the kernel.
    func madeObject(_ path: String, in p: Node, name: String, info: ObjectInfo) -> FuseEntry {
        locked { h in
            let n = h.node(path: path, type: .regular)
            h[n].presence = .present
            h.setInfo(n, info, expiry: now + ttl)
            h[n].lookups += 1
            h.cache.addChild(p, name, n.ino, h)
            h.trimCache()
            return stat.entry(n, now: now, h)
        }
    }

    /// The file `n` (named `name` in `p`) was deleted through this mount: it leaves the index and
    /// its directory's listing. Returns its local content and the path it had, which the caller
    /// discards (the content goes nowhere).
    func unlinked(_ n: Node, from p: Node, name: String) -> (StagedFile, path: String)? {
        locked { h in
            h[n].presence = .unlinked
            h.clearInfo(n)
            let discarded = h[n].staged.map { ($0, h[n].path) }
            h.cache.removeChild(p, name, h)
            h.table.unindex(n, h)
            h.dropIfUnused(n)
            return discarded
        }
    }

    /// The directory at `path`, if this mount knows it and it was not removed (a prefix-only
    /// directory whose last object just went is still removable).
    func knownDirectory(at path: String) -> Node? {
        locked { h in h.table.bound(path, isDirectory: true, h).flatMap { h[$0].removed ? nil : $0 } }
    }

    /// The directory `n` (named `name` in `p`) was removed through this mount; a file of the same
    /// name it hid shows at once.
    func removedDirectory(_ n: Node, from p: Node, name: String) {
        locked { h in
            h[n].presence = .unlinked
            h.clearInfo(n)
            h.dropListing(n)
            h.cache.removeChild(p, name, h)
            h.table.unindex(n, h)
            h.uncover(p, name)
            h.dropIfUnused(n)
        }
    }

    /// A rename's names: `name` in `from` became `newName` in `to`. The listings change in the
    /// critical section that moves the node (`Held.renamed`).
    struct RenamedEntry {
        let from: Node
        let name: String
        let to: Node
        let newName: String
    }

    /// The file `src` now lives at `dstPath` (its object was copied there, or it is created
    /// here); `dst`, the file that was there, is unlinked. The moved file's metadata is read again
    /// at its next use. Returns `dst`'s local content and path, which the caller discards, and
    /// whether `src`'s stage sidecar must be written again to name its new path.
    func movedFile(_ src: Node, to dstPath: String, replacing dst: Node?, entry: RenamedEntry) -> (discarded: (StagedFile, path: String)?, rename: StagedFile?) {
        locked { h in
            var discarded: (StagedFile, path: String)? = nil
            if let dst, dst !== src {
                h[dst].presence = .unlinked
                discarded = h[dst].staged.map { ($0, h[dst].path) }
                h.table.unindex(dst, h)
            }
            h.table.unindex(src, h)
            h.cache.noteLeft(h[src].path)
            h[src].path = dstPath
            h.cache.noteChange(src, h)
            h.negative.forget(dstPath)
            if h.table.isTabled(src) { h.bindPath(src) }
            if h.stageState(of: src)?.createdHere == true { h.pending.note(src, h) }
            h[src].infoExpiry = 0
            if h.stageState(of: src)?.createdHere == true { h.clearInfo(src) }
            h.renamed(entry, at: dstPath, isDirectory: false)
            return (discarded, h[src].staged)
        }
    }

    /// After a file's rename copied its object: its local content's next upload replaces the copy
    /// (the metadata read since the copy).
    func rebaseStage(of n: Node) {
        locked { h in if let s = h[n].staged, let i = h[n].info { h[s].rebase(on: i.generation) } }
    }

    /// Every known node at `srcPath` or below moves to `dstPath` (their objects were copied:
    /// `copied` maps each new object name to the generation it was copied from and the copy's
    /// metadata). Live nodes only: a removed directory's inode may still carry the same path.
    /// Returns the moved files with local content, whose sidecars must name their new paths.
    func movedDirectory(from srcPath: String, to dstPath: String, copied: [String: (from: Int64, to: ObjectInfo)],
                        entry: RenamedEntry) -> [(Node, StagedFile)] {
        locked { h in
            let moved = h.table.liveNodes(at: srcPath, h)
            for n in moved { h.table.unindex(n, h) }
            var stages: [(Node, StagedFile)] = []
            for n in moved {
                h.cache.noteLeft(h[n].path)
                h[n].path = dstPath + h[n].path.dropFirst(srcPath.count)
                h.cache.noteChange(n, h)
                h.negative.forget(h[n].path)
                h[n].infoExpiry = 0
                if let c = copied[h[n].objectName(n.type)] {
                    // What is there now is the copy (the generation a later unlink or upload
                    // must name).
                    if let s = h[n].staged { h[s].rebase(from: c.from, to: c.to.generation) }
                    h.setInfo(n, c.to, expiry: now + ttl)
                }
                if let s = h[n].staged { stages.append((n, s)) }
                if h.stageState(of: n)?.createdHere == true { h.pending.note(n, h) }
                h.bindPath(n)
            }
            // Once every node has its new path (dropping a listing may drop children it held).
            for n in moved { h.dropListing(n) }
            h.renamed(entry, at: dstPath, isDirectory: true)
            return stages
        }
    }

    /// The files under `path` with local content and an uploaded generation, by object name: a
    /// folder rename moves their objects (docs/SEMANTICS.md, "Hierarchical-namespace buckets"),
    /// and their next upload must name what is there after it.
    func stagedGenerations(below path: String) -> [String: Int64] {
        locked { h in
            var out: [String: Int64] = [:]
            for n in h.table.liveNodes(at: path, h) where n.type == .regular && h[n].staged != nil {
                if let g = h[n].info?.generation { out[h[n].objectName(n.type)] = g }
            }
            return out
        }
    }

    /// A directory rename stopped part way: cached listings under both prefixes are dropped
    /// (what moved and what did not is read again).
    func invalidate(prefixes: [String]) {
        locked { h in
            for prefix in prefixes {
                for n in h.table.nodes.values where h[n].path.hasPrefix(prefix) || prefix.hasPrefix(h[n].childPrefix) {
                    h.dropListing(n)
                    h[n].infoExpiry = 0
                }
            }
        }
    }
}

extension Held {
    /// After a rename of `e.name` in `e.from` to `e.newName` in `e.to` (at `dstPath`), in the
    /// critical section that moved the node: the old name leaves the old listing (a file a
    /// renamed directory hid shows at once), the new one joins the new one.
    func renamed(_ e: Superblock.RenamedEntry, at dstPath: String, isDirectory: Bool) {
        cache.removeChild(e.from, e.name, self)
        if isDirectory { uncover(e.from, e.name) }
        if let n = table.bound(dstPath, isDirectory: isDirectory, self) {
            // A directory renamed over a directory that hid a file (the rmdir of the one it
            // replaced showed that file): the file is hidden again, the directory wins.
            if isDirectory, let shown = self[e.to].listing?.children[e.newName], shown != n.ino,
               let f = table[shown], f.type == .regular {
                self[e.to].listing?.hiddenFiles[e.newName] = .some(self[f].info)
            }
            cache.addChild(e.to, e.newName, n.ino, self)
        }
        trimCache()
    }

    /// After the directory `name` left `p`, a file of the same name that it hid (the directory
    /// wins) shows at once.
    func uncover(_ p: Node, _ name: String) {
        guard let hidden = self[p].listing?.hiddenFiles.removeValue(forKey: name) else { return }
        let f = node(path: hidden?.name ?? self[p].childPrefix + name, type: .regular)
        self[f].presence = .present
        if let info = hidden { setInfo(f, info, expiry: now + ttl) }
        cache.addChild(p, name, f.ino, self)
    }
}
