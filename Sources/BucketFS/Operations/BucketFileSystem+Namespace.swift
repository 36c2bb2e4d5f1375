import Foundation
import FuseKit
import StorageModel

/// Namespace changes (docs/SEMANTICS.md §3): mkdir, unlink, rmdir, rename of files and of directories. The
/// requests are made here; the superblock applies each change to the tables in one step.
extension BucketFileSystem {
    // MARK: - namespace changes

    public func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let path = try names.childPath(superblock.path(of: p), name, directory: true)
        try await refuseIfExists(p, name)
        if let folders = store.folders { return try await makeFolder(folders, path, in: p, name: name) }
        do {
            // Its mode and owner go into the placeholder's upload.
            let info = try await store.write(path + "/", from: .data(Data()), metadata: newObjectMetadata(mode: mode),
                                             preconditions: .doesNotExist)
            return superblock.madeDirectory(path, in: p, name: name, info: info)
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
        let staged = superblock.withStage(of: n) { s, file -> StagedFile in
            s.cancelRetries()
            return file.stage
        }
        try await holdingUploadLock(staged) { () async throws(Errno) in
            // A file renamed over an object before its first upload: that object is still there,
            // to be replaced by the upload, and goes now instead.
            let over = superblock.withStage(of: n) { s, _ -> Int64? in
                if case .createdOver(let g) = s.origin { return g }
                return nil
            } ?? nil
            let generation = try await shownInfo(n)?.generation ?? over
            let path = superblock.path(of: n)
            if let generation {
                do {
                    try await store.delete(path, preconditions: Preconditions(ifGenerationMatch: generation))
                } catch StorageError.objectNotFound {
                } catch {
                    throw fail(error, "unlink", path)
                }
            }
            if let (s, path) = superblock.unlinked(n, from: p, name: name) {
                discardStaged(s, path: path, because: "the file was deleted")
            }
        }
        emptied.note(superblock.path(of: p))
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
            let path = try names.childPath(superblock.path(of: p), name)
            guard let known = superblock.knownDirectory(at: path) else { throw error }
            n = known
        }
        guard n.type == .directory else { throw .ENOTDIR }
        let prefix = superblock.childPrefix(of: n)
        do {
            let page = try await store.list(ListRequest(prefix: prefix, delimiter: "/", maxResults: 2))
            if !page.prefixes.isEmpty || page.items.contains(where: { $0.name != prefix }) { throw Errno.ENOTEMPTY }
            // Files created here and not uploaded yet are in it too.
            if superblock.hasPendingFiles(below: superblock.path(of: n)) { throw Errno.ENOTEMPTY }
            if let folders = store.folders {
                try await removeFolder(folders, prefix)
            } else {
                do { try await store.delete(prefix, preconditions: .none) } catch StorageError.objectNotFound {}
            }
        } catch let e as Errno {
            throw e
        } catch {
            throw fail(error, "rmdir", prefix)
        }
        superblock.removedDirectory(n, from: p, name: name)
        // A directory rename it was the old name of has nothing left to finish.
        unfinishedRenames.end(superblock.path(of: n))
        emptied.forget(superblock.path(of: n))
        emptied.note(superblock.path(of: p))  // its parent may be emptied by it
    }

    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        let flags = RenameFlags(rawValue: flags)
        if flags.contains(.exchange) { throw .EINVAL }
        let p = try node(parent)
        let np = try node(newParent)
        let src = try await resolve(p, name)
        let srcPath = superblock.path(of: src)  // before a directory's rename moves its node
        let dstPath = try names.childPath(superblock.path(of: np), newName, directory: src.type == .directory)
        var dst: Node? = nil
        do { dst = try await resolve(np, newName) } catch where error == .ENOENT {}
        // A directory rename that stopped part way (a flat bucket): only the same rename again,
        // which goes on from where it stopped, is taken (BucketFileSystem+DirectoryRename.swift).
        let resuming = src.type == .directory && store.folders == nil ? try unfinishedRenames.admit(srcPath, to: dstPath) : false
        if dst != nil, flags.contains(.noReplace), !resuming { throw .EEXIST }
        let entry = Superblock.RenamedEntry(from: p, name: name, to: np, newName: newName)
        if src.type == .regular {
            if dst?.type == .directory { throw .EISDIR }
            do {
                try await renameFile(src, to: dstPath, replacing: dst, entry: entry, noReplace: flags.contains(.noReplace))
            } catch where error == .EEXIST {
                // The destination appeared behind our back: forget the listing that hid it, so
                // the caller's next lookup (mv retries with a plain rename) sees it.
                superblock.dropListing(np)
                throw error
            }
        } else {
            if let dst, resuming {
                // Its own destination, part built: the objects there stay, the node goes (the
                // moved directory takes its place).
                guard dst.type == .directory else { throw .ENOTDIR }
                superblock.invalidate(prefixes: [dstPath + "/"])
                superblock.removedDirectory(dst, from: np, name: newName)
            } else if let dst {
                guard dst.type == .directory else { throw .ENOTDIR }
                try await rmdir(parent: newParent, name: newName)
            }
            try await renameDirectory(src, to: dstPath, entry: entry)
        }
        // (The listings changed with the node, in the same critical section: Superblock+Namespace.swift.)
        if src.type == .directory { emptied.forget(srcPath) }
        emptied.note(superblock.path(of: p))
    }

    func renameFile(_ src: Node, to dstPath: String, replacing dst: Node?, entry: Superblock.RenamedEntry,
                    noReplace: Bool = false) async throws(Errno) {
        if try await renameBeforeUpload(src, to: dstPath, replacing: dst, entry: entry) { return }
        try await upload(ino: src.ino)
        let info = try await shownInfo(src)
        let (srcPath, staged) = (superblock.path(of: src), superblock.stage(of: src))
        var dstGen: Int64? = nil
        if let dst { dstGen = try await shownInfo(dst)?.generation }
        let retyped = info.flatMap { retype($0, of: src, to: dstPath) }
        var copiedInfo: ObjectInfo? = nil
        var wasMoved = false
        if let info {
            do {
                var (copied, moved): (ObjectInfo, Bool)
                do {
                    (copied, moved) = try await moveOrCopy(srcPath, generation: info.generation, to: dstPath, metadata: retyped,
                                                           replacing: dstGen ?? 0)
                } catch StorageError.preconditionFailed where dstGen == nil {
                    if noReplace { throw Errno.EEXIST }
                    // The destination appeared behind this mount's back (within the TTL, so
                    // unseen): rename(2) replaces it, so replace the generation there now, once.
                    // (Nothing there: it was the source that changed.)
                    guard let there = try? await store.getMetadata(dstPath) else { throw StorageError.preconditionFailed(path: srcPath) }
                    (copied, moved) = try await moveOrCopy(srcPath, generation: info.generation, to: dstPath, metadata: retyped,
                                                           replacing: there.generation)
                }
                if let want = retyped?.contentType, copied.contentType != want {
                    // A server whose copy ignores the metadata given (gcp-storage-emulator): one PATCH.
                    var patch = MetadataPatch()
                    patch.contentType = .set(want)
                    copied = try await store.patchMetadata(dstPath, patch, preconditions: Preconditions(ifMetagenerationMatch: copied.metageneration))
                }
                copiedInfo = copied
                wasMoved = moved
                if !moved { try await store.delete(srcPath, preconditions: Preconditions(ifGenerationMatch: info.generation)) }
                superblock.setInferredType(src, retyped == nil ? superblock.inferredType(of: src) : copied.contentType)
            } catch {
                throw fail(error, "rename", srcPath + " → " + dstPath)
            }
        } else if staged == nil {
            throw .ENOENT
        }
        let (discarded, moved) = superblock.movedFile(src, to: dstPath, replacing: dst, entry: entry)
        if let (s, path) = discarded { discardStaged(s, path: path, because: "another file was renamed over it") }
        if let s = moved { staging.rerecord(s, sidecarTarget(src, s)) }
        if let dst, dst !== src { dropStageIfIdle(dst) }
        if info != nil {
            // The copy has a new generation: read it before the next write or stat (a move's
            // answer is the object as it is now: no need).
            if wasMoved, let c = copiedInfo { _ = superblock.setInfo(src, c) } else { try? await refreshed(src, force: true) }
            superblock.rebaseStage(of: src)
            // Content still staged here (write-back) shows and uploads the copy's metadata: the new
            // type, and no default disposition naming the old name (docs/SEMANTICS.md §4.1).
            superblock.withStage(of: src) { s, _ in
                s.followedRename(copy: copiedInfo, newType: retyped?.contentType, from: srcPath)
            }
        }
    }

    /// A file whose content was never uploaded (created here; its upload queued, waiting to
    /// retry, or its writer still open) is renamed where it waits (docs/SEMANTICS.md §3.4): one
    /// upload under the new name, with the metadata set meanwhile and the type the new name means
    /// (unless one was given), replacing exactly the generation shown there; no copy, no delete.
    /// Holds the upload lock, so no attempt is under way; the sidecar names the new object before
    /// the lock is released, so a crash after the rename keeps the data under the new name. False
    /// when the rename must copy (the content is in the bucket already).
    func renameBeforeUpload(_ src: Node, to dstPath: String, replacing dst: Node?, entry: Superblock.RenamedEntry) async throws(Errno) -> Bool {
        guard let s = superblock.stage(of: src), superblock.withStage(of: src, stage: s, { s, _ in s.renamesBeforeUpload }) == true else {
            return false
        }
        return try await holdingUploadLock(s) { () async throws(Errno) -> Bool in
            var dstGen: Int64? = nil
            if let dst, dst !== src {
                // A destination never uploaded itself replaces what its own upload would have.
                let pending = superblock.withStage(of: dst) { d, _ in (d.createdHere && d.state.unsaved, d.origin.ifGenerationMatch) }
                if let (unsaved, pendingOver) = pending, unsaved {
                    dstGen = pendingOver == 0 ? nil : pendingOver
                } else {
                    dstGen = try await shownInfo(dst)?.generation
                }
            }
            guard superblock.withStage(of: src, stage: s, { s, _ in s.renamedBeforeUpload(over: dstGen) }) == true else { return false }
            let (discarded, moved) = superblock.movedFile(src, to: dstPath, replacing: dst, entry: entry)
            if let (d, path) = discarded { discardStaged(d, path: path, because: "another file was renamed over it") }
            if let m = moved { staging.rerecord(m, sidecarTarget(src, m)) }
            if let dst, dst !== src { dropStageIfIdle(dst) }
            return true
        }
    }

    /// The metadata a renamed file's copy carries when its content type was inferred here from
    /// its old name (rsync's `.name.XXXXXX`): the same, with the new name's type; nil (copy it
    /// as it is) when the type was given, or the new name means the same (docs/SEMANTICS.md §4.1).
    func retype(_ info: ObjectInfo, of n: Node, to dstPath: String) -> WritableMetadata? {
        guard let inferred = superblock.inferredType(of: n), info.contentType == inferred else { return nil }
        let type = config.contentTypes.type(for: dstPath)
        guard type != inferred else { return nil }
        var w = info.writable
        w.contentType = type
        return w
    }
}

extension BucketFileSystem {
    /// EEXIST when `name` exists in `p`. Only "not found" means a new name may be made there; any
    /// other failure of the lookup (EIO, EACCES) is reported.
    func refuseIfExists(_ p: Node, _ name: String) async throws(Errno) {
        var exists = false
        do throws(Errno) {
            _ = try await resolve(p, name)
            exists = true
        } catch {
            if error != .ENOENT { throw error }
        }
        if exists { throw .EEXIST }
    }
}
