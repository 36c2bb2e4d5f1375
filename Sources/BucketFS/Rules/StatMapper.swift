import Foundation
import FuseKit
import StorageModel

/// What `stat` shows for an inode (docs/SEMANTICS.md §3): size, mtime from the mtime key (gsutil's
/// convention) or `updated`, ctime = `updated`, `st_nlink` 1; with POSIX metadata on, modes and
/// owners from the object's (a directory's placeholder's) POSIX keys, else from the mount
/// options, and objects marked as symbolic links as links whose size is the target's length.
/// Directories show their placeholder's mtime key, else the mount's start time. Pure: no I/O, no
/// locks (an unparsable key is reported to `warnings`, once per object and key).
struct StatMapper: Sendable {
    let config: MountConfig
    let mountTime: Double
    var warnings = WarnOnce()

    func mtime(of info: ObjectInfo?) -> Double {
        guard let info else { return mountTime }
        if let s = info.customValue(XattrName.mtimeKey), let v = Double(s) { return v }
        if let s = info.customValue("gcsfuse_mtime"), let d = RFC3339.parse(s) { return d.timeIntervalSince1970 }
        return info.updated.timeIntervalSince1970
    }

    /// The POSIX keys of `metadata` (nil with POSIX metadata off, or no metadata).
    func posix(_ metadata: WritableMetadata?, object: @autoclosure () -> String) -> PosixAttributes? {
        guard config.posixMetadata, let metadata else { return nil }
        let p = PosixAttributes(metadata)
        for (key, value) in p.unparsable {
            let name = object()
            warnings.warn("'\(name.prefix(200))': \(key) '\(value.prefix(64))' does not parse; the mount's option is shown instead",
                          key: "posix:" + name + ":" + key)
        }
        return p
    }

    /// Whether `info` is a symbolic link (POSIX metadata on).
    func isSymlink(_ info: ObjectInfo) -> Bool {
        posix(info.writable, object: info.name)?.isSymlink ?? false
    }

    /// The attributes of `n`; `now` dates content written here and not yet uploaded. The caller
    /// holds the superblock's lock (`h`: the node's and its stage's fields).
    func attributes(_ n: Node, now: Double, _ h: borrowing Held) -> FileAttributes { attributes(n, info: h[n].info, now: now, h) }

    /// The attributes of `n` with `info` as its object (the one an operation read, when the
    /// cache evicted the node's own meanwhile).
    func attributes(_ n: Node, info: ObjectInfo?, now: Double, _ h: borrowing Held) -> FileAttributes {
        var size: Int64 = info?.size ?? 0
        var mtime = self.mtime(of: info)
        let staged = h.stageState(of: n)
        if let s = staged {
            size = s.size
            if let m = s.metadata.customValue(XattrName.mtimeKey), let v = Double(m) { mtime = v }
            else if s.state.unsaved { mtime = max(mtime, now) }
        }
        var ctime = info?.updated.timeIntervalSince1970 ?? mountTime
        let dir = n.type == .directory
        // Staged content carries the metadata its upload will write.
        let px = posix(staged?.metadata ?? info?.writable, object: info?.name ?? h[n].path)
        if dir {
            // A listing shows child directories without their placeholders' metadata: a directory
            // shows its placeholder's mtime key (written by utimens, so `rsync -a` keeps it) when
            // POSIX metadata is on and the placeholder is known, else the mount's start time,
            // never `updated`, so its times do not change once its placeholder is read.
            mtime = mountTime
            if px != nil, let s = info?.customValue(XattrName.mtimeKey), let v = Double(s) { mtime = v }
            ctime = mountTime
        }
        var type = n.type
        var permissions = px?.mode ?? (dir ? config.dirMode : config.fileMode)
        if !dir, staged == nil, let px, px.isSymlink {
            type = .symlink
            permissions = 0o777
            if let t = px.legacyTarget { size = Int64(t.utf8.count) }
        }
        return FileAttributes(
            ino: n.ino, type: type, size: dir ? 0 : UInt64(max(0, size)),
            permissions: permissions & (config.readOnly && config.pastMoment == nil ? 0o555 : 0o7777),
            nlink: 1, uid: px?.uid ?? config.uid, gid: px?.gid ?? config.gid, atime: mtime, mtime: mtime, ctime: ctime)
    }

    func entry(_ n: Node, now: Double, _ h: borrowing Held) -> FuseEntry { entry(n, info: h[n].info, now: now, h) }

    func entry(_ n: Node, info: ObjectInfo?, now: Double, _ h: borrowing Held) -> FuseEntry {
        FuseEntry(attributes: attributes(n, info: info, now: now, h), entryTimeout: config.metadataTTL, attrTimeout: config.metadataTTL)
    }
}
