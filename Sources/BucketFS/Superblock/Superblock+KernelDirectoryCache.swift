import Foundation
import FuseKit

/// The kernel's readdir cache (docs/SEMANTICS.md §6): a directory handle lets the kernel cache
/// the entries it reads, and a later opendir lets it keep them while the directory's cached
/// listing is fresh and would answer the same names, numbers and types. A walk of a tree whose
/// listings are cached then costs an opendir and a releasedir a directory, no readdir. The
/// kernel drops its copy itself when something changes through the mount (a create, an unlink,
/// a rename in the directory); what the bucket changed is seen when the listing expires, as
/// without the kernel's cache.
extension Superblock {
    /// The directory's cached listing when readdir would answer from it without listing again:
    /// fresh (or held by a readdir pass), with every file's metadata cached (an evicted file
    /// would have nothing to show).
    func answeringListingLocked(_ dir: Node) -> Listing? {
        guard let l = dir.listing, l.isFresh(at: now),
              !l.children.values.contains(where: { table[$0].map(lacksFileInfoLocked) ?? true }) else { return nil }
        return l
    }

    /// What the kernel may do with the entries of directory `ino` for a handle opened now: keep
    /// its copy when the listing it came from would answer the same, else cache afresh. Nothing
    /// with a TTL of 0 (every question asks the bucket).
    func kernelCachingLocked(_ ino: UInt64) -> DirectoryCaching {
        guard ttl > 0, let dir = table[ino] else { return .none }
        guard let l = answeringListingLocked(dir), let copy = l.kernelCopy else { return .fill }
        return copy == fingerprintLocked(l) ? .keep : .fill
    }

    /// Records, in `dir`'s listing, what handle `h` (whose snapshot was just taken from it) gives
    /// a kernel that caches afresh.
    func noteKernelCopyLocked(_ h: DirHandle, _ dir: Node) {
        guard h.caching == .fill, dir.listing != nil, let entries = h.entries else { return }
        dir.listing?.kernelCopy = Self.fingerprint(entries.lazy.map { ($0.node.name, $0.node.ino, $0.node.type) })
    }

    /// The fingerprint of what a snapshot of `l` would hold now (`snapshotLocked`: each child
    /// still in the table).
    func fingerprintLocked(_ l: Listing) -> Int {
        Self.fingerprint(l.children.lazy.compactMap { name, ino in self.table[ino].map { (name, ino, $0.type) } })
    }

    /// A directory's entries as the kernel caches them (name, number, type), in any order: the
    /// sum of each entry's hash, and the count.
    static func fingerprint<S: Sequence>(_ entries: S) -> Int where S.Element == (String, UInt64, FileType) {
        var sum = 0, count = 0
        for (name, ino, type) in entries {
            var h = Hasher()
            h.combine(name)
            h.combine(ino)
            h.combine(type)
            sum &+= h.finalize()
            count += 1
        }
        var h = Hasher()
        h.combine(sum)
        h.combine(count)
        return h.finalize()
    }
}
