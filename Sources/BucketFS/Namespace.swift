import Foundation
import FuseKit
import StorageModel

/// Namespace changes (SPEC §3): mkdir, unlink, rmdir, rename of files and of directories.
extension BucketFileSystem {
    // MARK: - namespace changes

    public func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let path = try names.childPath(p.path, name, directory: true)
        // Only "not found" means we may create it; any other failure (EIO, EACCES) is reported.
        var exists = false
        do throws(Errno) {
            _ = try await resolve(p, name)
            exists = true
        } catch {
            if error != .ENOENT { throw error }
        }
        if exists { throw .EEXIST }
        do {
            let info = try await store.write(path + "/", from: .data(Data()), metadata: WritableMetadata(),
                                             preconditions: .doesNotExist)
            return locked {
                let n = nodeLocked(path: path, type: .directory)
                n.removed = false
                setInfoLocked(n, info, expiry: now + config.metadataTTL)
                setListingLocked(n, Listing(children: [:], expiry: now + config.metadataTTL))
                n.lookups += 1
                addChildLocked(p, name, n.ino)
                trimCacheLocked()
                return stat.entry(n, now: now)
            }
        } catch StorageError.preconditionFailed {
            throw .EEXIST
        } catch {
            throw fail(error, "mkdir", path)
        }
    }

    public func unlink(parent: UInt64, name: String) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let n = try await resolve(p, name)
        guard n.type == .regular else { throw .EISDIR }
        // Local content: its background attempts stop, and an upload of it under way ends first,
        // so that what is deleted is what that upload left (never a name it brings back after).
        let staged = locked { () -> StagedFile? in
            n.staged?.retryTask?.cancel()
            return n.staged
        }
        try await holdingUploadLock(staged) { () async throws(Errno) in
            let info = try await shownInfo(n)
            let path = locked { n.path }
            if let info {
                do {
                    try await store.delete(path, preconditions: Preconditions(ifGenerationMatch: info.generation))
                } catch StorageError.objectNotFound {
                } catch {
                    throw fail(error, "unlink", path)
                }
            }
            locked {
                n.presence = .unlinked
                clearInfoLocked(n)
                discardStagedLocked(n, because: "the file was deleted")
                removeChildLocked(p, name)
                if byPath[key(n)] == n.ino { byPath.removeValue(forKey: key(n)) }
                dropIfUnusedLocked(n)
            }
        }
        dropStageIfIdle(n)
    }

    public func rmdir(parent: UInt64, name: String) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let n: Node
        do {
            n = try await resolve(p, name)
        } catch where error == .ENOENT {
            // A prefix-only directory stops existing in the bucket once its last object is
            // deleted (as `rm -r` does just before this rmdir): a directory this mount has
            // shown is still removable, and its removal is then only local.
            let path = try names.childPath(p.path, name)
            guard let known = locked({ byPath[PathKey(path: path, isDirectory: true)].flatMap { nodes[$0] } }),
                  !known.removed else { throw error }
            n = known
        }
        guard n.type == .directory else { throw .ENOTDIR }
        let prefix = locked { n.childPrefix }
        do {
            let page = try await store.list(ListRequest(prefix: prefix, delimiter: "/", maxResults: 2))
            if !page.prefixes.isEmpty || page.items.contains(where: { $0.name != prefix }) { throw Errno.ENOTEMPTY }
            // Files created here and not uploaded yet are in it too.
            if locked({ hasPendingFilesLocked(below: n.path) }) { throw Errno.ENOTEMPTY }
            do { try await store.delete(prefix, preconditions: .none) } catch StorageError.objectNotFound {}
        } catch let e as Errno {
            throw e
        } catch {
            throw fail(error, "rmdir", prefix)
        }
        locked {
            n.presence = .unlinked
            clearInfoLocked(n)
            dropListingLocked(n)
            removeChildLocked(p, name)
            if byPath[key(n)] == n.ino { byPath.removeValue(forKey: key(n)) }
            uncoverLocked(p, name)
            dropIfUnusedLocked(n)
        }
    }

    /// After the directory `name` left `p`, a file of the same name that it hid (the directory
    /// wins) shows at once. Caller holds `lock`.
    func uncoverLocked(_ p: Node, _ name: String) {
        guard let info = p.listing?.hiddenFiles.removeValue(forKey: name) else { return }
        let f = nodeLocked(path: info.name, type: .regular)
        f.removed = false
        setInfoLocked(f, info, expiry: now + config.metadataTTL)
        addChildLocked(p, name, f.ino)
    }

    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        let flags = RenameFlags(rawValue: flags)
        if flags.contains(.exchange) { throw .EINVAL }
        let p = try node(parent)
        let np = try node(newParent)
        let src = try await resolve(p, name)
        let dstPath = try names.childPath(np.path, newName, directory: src.type == .directory)
        var dst: Node? = nil
        do { dst = try await resolve(np, newName) } catch where error == .ENOENT {}
        if dst != nil, flags.contains(.noReplace) { throw .EEXIST }
        if src.type == .regular {
            if dst?.type == .directory { throw .EISDIR }
            do {
                try await renameFile(src, to: dstPath, replacing: dst, noReplace: flags.contains(.noReplace))
            } catch where error == .EEXIST {
                // The destination appeared behind our back: forget the listing that hid it, so
                // the caller's next lookup (mv retries with a plain rename) sees it.
                locked { dropListingLocked(np) }
                throw error
            }
        } else {
            if let dst {
                guard dst.type == .directory else { throw .ENOTDIR }
                try await rmdir(parent: newParent, name: newName)
            }
            try await renameDirectory(src, to: dstPath)
        }
        locked {
            removeChildLocked(p, name)
            if src.type == .directory { uncoverLocked(p, name) }
            if let ino = byPath[PathKey(path: dstPath, isDirectory: src.type == .directory)] {
                addChildLocked(np, newName, ino)
            }
            trimCacheLocked()
        }
    }

    func renameFile(_ src: Node, to dstPath: String, replacing dst: Node?, noReplace: Bool = false) async throws(Errno) {
        try await upload(ino: src.ino)
        let info = try await shownInfo(src)
        let (srcPath, staged) = locked { (src.path, src.staged) }
        var dstGen: Int64? = nil
        if let dst { dstGen = try await shownInfo(dst)?.generation }
        if let info {
            do {
                do {
                    _ = try await store.copy(from: srcPath, sourceGeneration: info.generation, to: dstPath, metadata: nil,
                                             preconditions: Preconditions(ifGenerationMatch: dstGen ?? 0))
                } catch StorageError.preconditionFailed where dstGen == nil {
                    if noReplace { throw Errno.EEXIST }
                    // The destination appeared behind this mount's back (within the TTL, so
                    // unseen): rename(2) replaces it, so replace the generation there now, once.
                    let there = try await store.getMetadata(dstPath)
                    _ = try await store.copy(from: srcPath, sourceGeneration: info.generation, to: dstPath, metadata: nil,
                                             preconditions: Preconditions(ifGenerationMatch: there.generation))
                }
                try await store.delete(srcPath, preconditions: Preconditions(ifGenerationMatch: info.generation))
            } catch {
                throw fail(error, "rename", srcPath + " → " + dstPath)
            }
        } else if staged == nil {
            throw .ENOENT
        }
        locked {
            if let dst, dst !== src {
                dst.presence = .unlinked
                discardStagedLocked(dst, because: "another file was renamed over it")
                if byPath[key(dst)] == dst.ino { byPath.removeValue(forKey: key(dst)) }
            }
            if byPath[key(src)] == src.ino { byPath.removeValue(forKey: key(src)) }
            src.path = dstPath
            if isTabledLocked(src) { bindPathLocked(src) }
            if let s = src.staged, s.recorded { staging.record(s, object: dstPath) }
            if src.staged?.createdHere == true { notePendingLocked(src) }
            src.infoExpiry = 0
            if src.staged?.createdHere == true { clearInfoLocked(src) }
        }
        if let dst, dst !== src { dropStageIfIdle(dst) }
        if info != nil {
            // The copy has a new generation: read it before the next write or stat.
            try? await refreshed(src, force: true)
            locked { if let s = src.staged, let i = src.info { s.origin = .generation(i.generation) } }
        }
    }

    /// Renames every object under a prefix (copy with `ifGenerationMatch=0`, then delete with the
    /// source generation). On a failure part way, what was copied stays in both places and the
    /// error says so; nothing is deleted before its copy exists.
    func renameDirectory(_ src: Node, to dstPath: String) async throws(Errno) {
        let srcPrefix = locked { src.path + "/" }
        let dstPrefix = dstPath + "/"
        var objects: [ObjectInfo] = []
        var token: String? = nil
        do {
            repeat {
                let page = try await store.list(ListRequest(prefix: srcPrefix, delimiter: nil, maxResults: 1000, pageToken: token))
                objects += page.items
                token = page.nextPageToken
            } while token != nil
        } catch {
            throw fail(error, "rename", srcPrefix)
        }
        var done = 0
        // Each object's generation before and after its copy: a file being written here moves
        // with its directory, and its next upload replaces the copy.
        var copied: [String: (from: Int64, to: ObjectInfo)] = [:]
        for o in objects {
            let target = dstPrefix + o.name.dropFirst(srcPrefix.count)
            do {
                let copy = try await store.copy(from: o.name, sourceGeneration: o.generation, to: target, metadata: nil,
                                                preconditions: .doesNotExist)
                copied[target] = (o.generation, copy)
                try await store.delete(o.name, preconditions: Preconditions(ifGenerationMatch: o.generation))
                done += 1
            } catch {
                logger.error("rename of directory '\(srcPrefix)' to '\(dstPrefix)' stopped after \(done) of \(objects.count) objects at '\(o.name)': \(error); objects before it are moved, the rest are where they were")
                locked { invalidateLocked(prefix: srcPrefix); invalidateLocked(prefix: dstPrefix) }
                throw errno(for: error)
            }
        }
        if objects.isEmpty {
            // A directory known only here (no objects): give the new name a placeholder.
            _ = try? await store.write(dstPrefix, from: .data(Data()), metadata: WritableMetadata(), preconditions: .doesNotExist)
        }
        locked {
            // Move every known node under the old prefix to the new one.
            // Live nodes only: a removed directory's inode may still carry the same path.
            let srcPath = src.path  // (src is among the moved: its path changes in the loop)
            let moved = nodes.values.filter {
                ($0.path == srcPath || $0.path.hasPrefix(srcPrefix)) && !$0.removed && byPath[key($0)] == $0.ino
            }
            for n in moved { byPath.removeValue(forKey: key(n)) }
            for n in moved {
                n.path = dstPath + n.path.dropFirst(srcPath.count)
                n.infoExpiry = 0
                if let c = copied[n.objectName] {
                    // What is there now is the copy (the generation a later unlink or upload
                    // must name).
                    if let s = n.staged, case .generation(let g) = s.origin, c.from == g { s.origin = .generation(c.to.generation) }
                    setInfoLocked(n, c.to, expiry: now + config.metadataTTL)
                }
                if let s = n.staged, s.recorded { staging.record(s, object: n.path) }
                if n.staged?.createdHere == true { notePendingLocked(n) }
                bindPathLocked(n)
            }
            // Once every node has its new path (dropping a listing may drop children it held).
            for n in moved { dropListingLocked(n) }
            trimCacheLocked()
        }
    }

    /// Drops cached listings under a prefix. Caller holds `lock`.
    func invalidateLocked(prefix: String) {
        for n in nodes.values where n.path.hasPrefix(prefix) || prefix.hasPrefix(n.childPrefix) {
            dropListingLocked(n)
            n.infoExpiry = 0
        }
    }
}
