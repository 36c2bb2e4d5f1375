import Foundation
import FuseKit

/// The kernel's readdir cache (docs/SEMANTICS.md §6): a directory handle lets the kernel cache
/// the entries it reads, and a later opendir lets it keep them while the directory's cached
/// listing is fresh and would answer the same names, numbers and types. A walk of a tree whose
/// listings are cached then costs an opendir and a releasedir a directory, no readdir. The
/// kernel drops its copy itself when something changes through the mount (a create, an unlink,
/// a rename in the directory); what the bucket changed is seen when the listing expires, as
/// without the kernel's cache.
extension Held {
    /// The directory's cached listing when readdir would answer from it without listing again:
    /// fresh (or held by a readdir pass), with every file's metadata cached (an evicted file
    /// would have nothing to show).
    func answeringListing(_ dir: Node) -> Listing? {
        guard let l = self[dir].listing, l.isFresh(at: now),
              !l.children.values.contains(where: { table[$0].map { lacksFileInfo($0) } ?? true }) else { return nil }
        return l
    }

    /// What the kernel may do with the entries of directory `ino` for a handle opened now: keep
    /// its copy when the listing it came from would answer the same, else cache afresh. Nothing
    /// with a TTL of 0 (every question asks the bucket).
    func kernelCaching(_ ino: UInt64) -> DirectoryCaching {
        guard ttl > 0, let dir = table[ino] else { return .none }
        guard let l = answeringListing(dir), let copy = l.kernelCopy else { return .fill }
        return copy == fingerprint(l) ? .keep : .fill
    }

    /// Records, in `dir`'s listing, what handle `h` (whose snapshot was just taken from it) gives
    /// a kernel that caches afresh.
    func noteKernelCopy(_ h: DirHandle, _ dir: Node) {
        guard h.caching == .fill, self[dir].listing != nil, let entries = self[h].entries else { return }
        var f = Superblock.Fingerprint()
        for e in entries { f.add(self[e.node].name, e.node.ino, e.node.type) }
        self[dir].listing?.kernelCopy = f.value
    }

    /// The fingerprint of what a snapshot of `l` would hold now (`Held.snapshot`: each child
    /// still in the table).
    func fingerprint(_ l: Listing) -> Int {
        var f = Superblock.Fingerprint()
        for (name, ino) in l.children { if let c = table[ino] { f.add(name, ino, c.type) } }
        return f.value
    }
}

extension Superblock {
    /// A directory's entries as the kernel caches them (name, number, type), in any order: the
    /// sum of each entry's hash, and the count.
    struct Fingerprint {
        private var sum = 0, count = 0

        mutating func add(_ name: String, _ ino: UInt64, _ type: FileType) {
            var h = Hasher()
            h.combine(name)
            h.combine(ino)
            h.combine(type)
            sum &+= h.finalize()
            count += 1
        }

        var value: Int {
            var h = Hasher()
            h.combine(sum)
            h.combine(count)
            return h.finalize()
        }
    }

    /// The fingerprint of `entries`.
    static func fingerprint<S: Sequence>(_ entries: S) -> Int where S.Element == (String, UInt64, FileType) {
        var f = Fingerprint()
        for (name, ino, type) in entries { f.add(name, ino, type) }
        return f.value
    }
}
