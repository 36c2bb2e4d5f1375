import Foundation
import FuseKit
import StorageModel

/// Directory handles: a snapshot of names per open directory so readdir offsets stay stable (the
/// superblock keeps the snapshots and pins their nodes).
extension BucketFileSystem {
    // MARK: - directories

    public func opendir(ino: UInt64) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .directory else { throw .ENOTDIR }
        // Emptied here and its time kept is over: what a listing cached since (or the kernel's
        // copy of it) says is not the answer; the bucket's is (EmptiedDirectories), and it is
        // said here: a kernel that still holds the directory's entry opens it, and an ENOENT of
        // readdir reads as the directory's end to glibc (an empty directory to `ls`), while one
        // of opendir is the error a lookup would give.
        if emptied.expired(superblock.path(of: n)) {
            superblock.dropListing(n)
            _ = try await loadListing(n)
        }
        return superblock.openDirectory(ino)
    }

    /// Whether the kernel caches a directory's entries, or keeps what it cached
    /// (Superblock+KernelDirectoryCache.swift).
    public func directoryCaching(ino: UInt64, fh: UInt64) -> DirectoryCaching {
        superblock.directoryCaching(fh)
    }

    public func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] {
        try await readdir(ino: ino, fh: fh, offset: offset, limit: 4096)
    }

    /// Entries after `offset`, at most `limit` (what the kernel's buffer can take).
    public func readdir(ino: UInt64, fh: UInt64, offset: UInt64, limit: Int) async throws(Errno) -> [DirectoryEntry] {
        let dir = try node(ino)
        guard let (h, needsSnapshot) = superblock.directoryHandle(fh, offset: offset) else { throw .EBADF }
        if needsSnapshot {
            // From a fresh cached listing whose children's metadata is all cached too; else
            // listed again (an evicted child would have nothing to show).
            let hit = superblock.snapshotFromCache(dir, into: h)
            cacheCounters.count(.listing, hit: hit)
            if !hit {
                // In a walk down a tree, the next subdirectories are listed at the same time.
                async let aheadDone: Void = listAhead(superblock.listingsAhead(after: dir))
                try await loadListing(dir, into: h)
                await aheadDone
            }
        }
        return superblock.entries(h, after: offset, limit: limit)
    }

    /// Lists directories at once for a walk's readdir (`Superblock.listingsAhead`), each only when
    /// it fits in one page; what fails or does not fit is left for the directory's own readdir.
    private func listAhead(_ dirs: [Node]) async {
        guard !dirs.isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            for d in dirs {
                group.addTask { [self] in _ = try? await loadListing(d, pagesAtMost: 1) }
            }
        }
    }

    public func releasedir(ino: UInt64, fh: UInt64) {
        let released = superblock.releaseDirectory(fh)
        // A large snapshot held metadata the cache had already evicted: that memory is free now.
        if released >= largeListingNames { releaseFreedMemory() }
    }
}
