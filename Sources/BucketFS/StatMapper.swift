import Foundation
import FuseKit
import StorageModel

/// What `stat` shows for an inode (SPEC §3): size, mtime from the mtime key (gsutil's
/// convention) or `updated`, ctime = `updated`, modes and owners from the mount options,
/// `st_nlink` 1, directories at the mount's start time. Pure: no I/O, no locks.
struct StatMapper: Sendable {
    let config: MountConfig
    let mountTime: Double

    func mtime(of info: ObjectInfo?) -> Double {
        guard let info else { return mountTime }
        if let s = info.customMetadata[XattrName.mtimeKey], let v = Double(s) { return v }
        if let s = info.customMetadata["gcsfuse_mtime"], let d = RFC3339.parse(s) { return d.timeIntervalSince1970 }
        return info.updated.timeIntervalSince1970
    }

    /// The attributes of `n`; `now` dates content written here and not yet uploaded. The caller
    /// holds the superblock's lock (Node fields).
    func attributes(_ n: Node, now: Double) -> FileAttributes { attributes(n, info: n.info, now: now) }

    /// The attributes of `n` with `info` as its object (the one an operation read, when the
    /// cache evicted the node's own meanwhile).
    func attributes(_ n: Node, info: ObjectInfo?, now: Double) -> FileAttributes {
        var size: Int64 = info?.size ?? 0
        var mtime = self.mtime(of: info)
        if let s = n.staged {
            size = s.size
            if let m = s.metadata.customMetadata[XattrName.mtimeKey], let v = Double(m) { mtime = v }
            else if s.state.unsaved { mtime = max(mtime, now) }
        }
        var ctime = info?.updated.timeIntervalSince1970 ?? mountTime
        let dir = n.type == .directory
        if dir {
            // A listing shows child directories without their placeholders' metadata, so a
            // directory's times would change once its placeholder is read: directories show the
            // mount's start time, always, so `rsync -a` and `find -newer` see stable times.
            mtime = mountTime
            ctime = mountTime
        }
        return FileAttributes(
            ino: n.ino, type: n.type, size: dir ? 0 : UInt64(max(0, size)),
            permissions: (dir ? config.dirMode : config.fileMode) & (config.readOnly ? 0o555 : 0o7777),
            nlink: 1, uid: config.uid, gid: config.gid, atime: mtime, mtime: mtime, ctime: ctime)
    }

    func entry(_ n: Node, now: Double) -> FuseEntry { entry(n, info: n.info, now: now) }

    func entry(_ n: Node, info: ObjectInfo?, now: Double) -> FuseEntry {
        FuseEntry(attributes: attributes(n, info: info, now: now), entryTimeout: config.metadataTTL, attrTimeout: config.metadataTTL)
    }
}
