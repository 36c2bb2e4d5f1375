import Foundation
import FuseKit
import StorageModel

/// Symbolic links, and the file types a bucket cannot hold (docs/SEMANTICS.md §3). A link is an object whose
/// content is its target and whose custom metadata has `goog-reserved-file-is-symlink: true`
/// (gcloud's and Storage Transfer Service's form), made in one upload; gcsfuse's older
/// `gcsfuse_symlink_target` key (the target in the key's value) is read too. Hard links, device
/// nodes, FIFOs and sockets have no object form: EPERM.
extension BucketFileSystem {
    public func symlink(parent: UInt64, name: String, target: String) async throws(Errno) -> FuseEntry {
        if config.readOnly { throw .EROFS }
        guard config.posixMetadata else {
            refusalLog.warn("symbolic links are refused (EPERM) with --posix-metadata off: a link is kept only in its metadata keys")
            throw .EPERM
        }
        if target.isEmpty { throw .ENOENT }
        if target.utf8.count > PosixAttributes.maxTargetBytes { throw .ENAMETOOLONG }
        let p = try node(parent)
        guard p.type == .directory else { throw .ENOTDIR }
        let path = try names.childPath(superblock.path(of: p), name)
        try await refuseIfExists(p, name)
        let metadata = newObjectMetadata(mode: 0o777, symlink: true)
        do {
            let info = try await store.write(path, from: .data(Data(target.utf8)), metadata: metadata, preconditions: .doesNotExist)
            linkTargets.remember(path, generation: info.generation, target)
            return superblock.madeObject(path, in: p, name: name, info: info)
        } catch StorageError.preconditionFailed {
            throw .EEXIST
        } catch {
            throw fail(error, "symlink", path)
        }
    }

    /// The target: from gcsfuse's legacy key, else from the link's content (one GET per
    /// generation, then remembered).
    public func readlink(ino: UInt64) async throws(Errno) -> String {
        let n = try node(ino)
        let box = try await refreshed(n)
        let (info, path) = superblock.infoAndPath(n, fallback: box?.info)
        guard n.type == .regular, superblock.stage(of: n) == nil, let info,
              let px = stat.posix(info.writable, object: path), px.isSymlink else { throw .EINVAL }
        if let t = px.legacyTarget { return t }
        if let t = linkTargets.target(path, generation: info.generation) { return t }
        guard info.size <= Int64(PosixAttributes.maxTargetBytes) else {
            logger.error("readlink '\(path)': the link's target is \(info.size) bytes; at most \(PosixAttributes.maxTargetBytes) can be returned")
            throw .ENAMETOOLONG
        }
        let data: Data
        do {
            data = info.size == 0 ? Data() : try await readPath.fetch(path, generation: info.generation, 0..<info.size)
        } catch {
            throw fail(error, "readlink", path)
        }
        let target = String(decoding: data, as: UTF8.self)
        linkTargets.remember(path, generation: info.generation, target)
        return target
    }

    public func link(ino: UInt64, newParent: UInt64, newName: String) async throws(Errno) -> FuseEntry {
        if config.readOnly { throw .EROFS }
        refusalLog.warn("hard links are refused (EPERM): an object has one name, and a copy would not stay the same file")
        throw .EPERM
    }

    public func mknod(parent: UInt64, name: String, mode: UInt32, rdev: UInt64) async throws(Errno) -> FuseEntry {
        if config.readOnly { throw .EROFS }
        if mode & UInt32(S_IFMT) == UInt32(S_IFREG) {
            // A regular file made with mknod (GNU tar --xattrs: mknod, setxattr, open, write,
            // close; a non-atomic create): an empty file that waits for what follows.
            let (entry, fh) = try await create(parent: parent, name: name, mode: mode & 0o7777, flags: OpenFlags(O_WRONLY | O_CREAT | O_EXCL))
            if config.writeBack {
                try await release(ino: entry.attributes.ino, fh: fh)  // queued: the write-back delay joins what follows
            } else {
                holdMknodded(ino: entry.attributes.ino, fh: fh)
            }
            return entry
        }
        refusalLog.warn("device nodes, FIFOs and sockets are refused (EPERM): a bucket holds only files, directories and symbolic links")
        throw .EPERM
    }

    /// The custom metadata a new object (file, placeholder, link) is uploaded with: its mode
    /// (permission bits; setuid, setgid and sticky are not kept) and the caller's uid and gid.
    /// Empty with POSIX metadata off.
    func newObjectMetadata(mode: UInt32, symlink: Bool = false) -> WritableMetadata {
        var m = WritableMetadata()
        guard config.posixMetadata else { return m }
        let caller = FuseCaller.current
        PosixAttributes(mode: mode & 0o777, uid: caller?.uid, gid: caller?.gid, isSymlink: symlink)
            .write(into: &m.customMetadata)
        return m
    }
}
