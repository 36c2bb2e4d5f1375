import Foundation
import FuseKit
import StorageModel

/// Directory handles: a snapshot of names per open directory so readdir offsets stay stable.
extension BucketFileSystem {
    // MARK: - directories

    public func opendir(ino: UInt64) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .directory else { throw .ENOTDIR }
        return locked {
            let fh = nextFh
            nextFh += 1
            dirHandles[fh] = DirHandle(ino: ino)
            return fh
        }
    }

    public func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] {
        try await readdir(ino: ino, fh: fh, offset: offset, limit: 4096)
    }

    /// Entries after `offset`, at most `limit` (what the kernel's buffer can take).
    public func readdir(ino: UInt64, fh: UInt64, offset: UInt64, limit: Int) async throws(Errno) -> [DirectoryEntry] {
        let dir = try node(ino)
        guard let h = locked({ dirHandles[fh] }) else { throw .EBADF }
        if offset == 0 || locked({ h.entries == nil }) {
            let l: Listing
            let fresh = freshListing(dir)
            cacheCounters.count(.listing, hit: fresh != nil)
            if let fresh { l = fresh } else { l = try await loadListing(dir) }
            let entries = l.sortedNames.map { ($0, l.children[$0]!) }
            locked { h.entries = entries }
        }
        return locked {
            let entries = h.entries ?? []
            var out: [DirectoryEntry] = []
            var i = Int(offset)
            while i < entries.count, out.count < limit {
                if let n = nodes[entries[i].ino] {
                    out.append(DirectoryEntry(name: entries[i].name, offset: UInt64(i + 1), entry: stat.entry(n, now: now)))
                }
                i += 1
            }
            return out
        }
    }

    public func releasedir(ino: UInt64, fh: UInt64) {
        _ = locked { dirHandles.removeValue(forKey: fh) }
    }
}
