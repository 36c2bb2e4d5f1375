import Foundation
import FuseKit
import StorageModel

/// Directories of a bucket with a hierarchical namespace (docs/SEMANTICS.md, "Hierarchical-namespace
/// buckets"): mkdir makes a folder, rmdir deletes one, a directory rename is one folder rename
/// followed to its end, and a file rename is one atomic move wherever the store offers it.
extension BucketFileSystem {
    /// mkdir: one folder create. A folder keeps no metadata: the directory shows the mount's mode
    /// and owner, as a directory without a placeholder does.
    func makeFolder(_ folders: any FolderStore, _ path: String, in p: Node, name: String) async throws(Errno) -> FuseEntry {
        do {
            _ = try await folders.createFolder(path + "/")
        } catch StorageError.conflict {
            throw .EEXIST
        } catch {
            throw fail(error, "mkdir", path)
        }
        return superblock.madeDirectory(path, in: p, name: name, info: nil)
    }

    /// rmdir, once the listing showed nothing under it: one folder delete. A folder that is gone
    /// already is fine; one the server finds not empty (something arrived meanwhile) is ENOTEMPTY.
    func removeFolder(_ folders: any FolderStore, _ prefix: String) async throws {
        do {
            try await folders.deleteFolder(prefix)
        } catch StorageError.objectNotFound {
        } catch StorageError.notEmpty {
            throw Errno.ENOTEMPTY
        }
    }

    /// A file's rename on the server: one atomic move where the store offers it (its metadata
    /// follows; a new content type is one PATCH after it, by the caller), else a copy that the
    /// caller follows with a delete of the source. `replacing`: the generation the destination
    /// must have (0: none). Returns the new object and whether it was moved (nothing to delete).
    func moveOrCopy(_ srcPath: String, generation: Int64, to dstPath: String, metadata: WritableMetadata?,
                    replacing: Int64) async throws -> (ObjectInfo, moved: Bool) {
        let there = Preconditions(ifGenerationMatch: replacing)
        if let moved = try await store.move(from: srcPath, sourceGeneration: generation, to: dstPath, preconditions: there) {
            return (moved, true)
        }
        let copied = try await store.copy(from: srcPath, sourceGeneration: generation, to: dstPath, metadata: metadata,
                                          preconditions: there)
        return (copied, false)
    }

    /// A directory rename on a hierarchical bucket: one folder rename, which the server does all
    /// at once or not at all, followed to its end by the store; then the mount's tables change
    /// for everything under it in one step. A file under it with local content learns the
    /// generation its object has after the move (one GET each), so that its next upload replaces
    /// exactly that.
    func renameFolder(_ folders: any FolderStore, _ src: Node, to dstPath: String,
                      entry: Superblock.RenamedEntry) async throws(Errno) {
        let srcPath = superblock.path(of: src)
        let (srcPrefix, dstPrefix) = (srcPath + "/", dstPath + "/")
        do {
            _ = try await folders.renameFolder(srcPrefix, to: dstPrefix)
        } catch StorageError.objectNotFound where superblock.hasPendingFiles(below: srcPath) {
            // A directory made here whose files are not uploaded yet has no folder: the new name
            // gets one, and the files upload under it.
            do { _ = try await folders.createFolder(dstPrefix) } catch StorageError.conflict {} catch {
                throw fail(error, "rename", srcPrefix + " → " + dstPrefix)
            }
        } catch StorageError.conflict {
            // The destination exists (made behind this mount's back since it looked).
            superblock.invalidate(prefixes: [dstPrefix])
            throw .ENOTEMPTY
        } catch {
            // All or nothing on the server: read both places again, whatever the answer was.
            superblock.invalidate(prefixes: [srcPrefix, dstPrefix])
            logger.error("rename of folder '\(srcPrefix)' to '\(dstPrefix)' failed: \(error); the server moves all or nothing, so both are as the server says")
            throw fail(error, "rename", srcPrefix + " → " + dstPrefix)
        }
        var copied: [String: (from: Int64, to: ObjectInfo)] = [:]
        for (name, generation) in superblock.stagedGenerations(below: srcPath) {
            let target = dstPrefix + name.dropFirst(srcPrefix.count)
            if let info = try? await store.getMetadata(target) { copied[target] = (generation, info) }
        }
        for (n, s) in superblock.movedDirectory(from: srcPath, to: dstPath, copied: copied, entry: entry) {
            staging.rerecord(s, sidecarTarget(n, s))
        }
    }
}
