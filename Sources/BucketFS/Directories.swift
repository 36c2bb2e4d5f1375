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
            // From a fresh cached listing whose children's metadata is all cached too; else
            // listed again (an evicted child would have nothing to show).
            let hit = locked { () -> Bool in
                guard let l = dir.listing, l.expiry > now,
                      !l.children.values.contains(where: { nodes[$0].map(lacksInfoLocked) ?? true }) else { return false }
                snapshotLocked(h, l)
                return true
            }
            cacheCounters.count(.listing, hit: hit)
            if !hit { try await loadListing(dir, into: h) }
        }
        return locked {
            let entries = h.entries ?? []
            var out: [DirectoryEntry] = []
            var i = Int(offset)
            while i < entries.count, out.count < limit {
                let e = entries[i]
                out.append(DirectoryEntry(name: e.name, offset: UInt64(i + 1),
                                          entry: stat.entry(e.node, info: e.node.info ?? e.box?.info, now: now)))
                i += 1
            }
            return out
        }
    }

    public func releasedir(ino: UInt64, fh: UInt64) {
        let released = locked { () -> Int in
            guard let h = dirHandles.removeValue(forKey: fh) else { return 0 }
            let count = h.entries?.count ?? 0
            unpinLocked(h)
            return count
        }
        // A large snapshot held metadata the cache had already evicted: that memory is free now.
        if released >= largeListingNames { releaseFreedMemory() }
    }

    /// Takes a directory handle's snapshot of `l`: each child node (pinned in the table, so the
    /// numbers it hands out stay valid) with the metadata it has now (evictions do not change
    /// it). Caller holds `lock`.
    func snapshotLocked(_ h: DirHandle, _ l: Listing) {
        var entries: [SnapshotEntry] = []
        entries.reserveCapacity(l.children.count)
        for name in l.sortedNames {
            guard let n = nodes[l.children[name]!] else { continue }
            n.snapshotPins += 1
            entries.append(SnapshotEntry(name: name, node: n, box: n.box))
        }
        unpinLocked(h)
        h.entries = entries
    }

    /// Releases a snapshot's nodes: those nothing else holds now leave the table. Caller holds `lock`.
    private func unpinLocked(_ h: DirHandle) {
        guard let entries = h.entries else { return }
        h.entries = nil
        for e in entries {
            e.node.snapshotPins -= 1
            if e.node.snapshotPins == 0, e.node.lookups == 0 { dropIfUnusedLocked(e.node) }
        }
    }
}
