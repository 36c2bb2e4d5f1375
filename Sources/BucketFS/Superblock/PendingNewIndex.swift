import Foundation
import StorageModel

/// The files created here and not uploaded yet, by directory path: listings of that directory
/// include them before the bucket has them (an index, so a listing never scans every inode). A
/// part of the superblock, guarded by its lock.
///
/// Entries are dropped lazily: a file that no longer is one (uploaded, unlinked, moved) leaves the
/// index the next time its directory is asked about.
///
/// INVARIANT: every file in the table created here and not yet uploaded, not unlinked, is in the
/// index under its directory (`contains`, checked by `Superblock.invariantViolations`).
struct PendingNewIndex {
    /// GUARDED_BY(Superblock.lock)
    private var byDirectory: [String: Set<UInt64>] = [:]

    /// Records a file created here and not yet uploaded, so listings of its directory show it.
    mutating func note(_ n: Node, _ h: borrowing Held) {
        byDirectory[StoragePath.parent(h[n].path) ?? "", default: []].insert(n.ino)
    }

    func contains(_ n: Node, _ h: borrowing Held) -> Bool {
        byDirectory[StoragePath.parent(h[n].path) ?? ""]?.contains(n.ino) == true
    }

    /// The files created here and not uploaded yet directly in the directory `dirPath` ("": the
    /// root). Entries that no longer are leave the index.
    mutating func files(in dirPath: String, table: InodeTable, _ h: borrowing Held) -> [Node] {
        guard let inos = byDirectory[dirPath] else { return [] }
        var live: [Node] = []
        for ino in inos {
            if let n = table[ino], n.type == .regular, !h[n].removed, h.stageState(of: n)?.createdHere == true,
               (StoragePath.parent(h[n].path) ?? "") == dirPath {
                live.append(n)
            } else {
                byDirectory[dirPath]?.remove(ino)
            }
        }
        if live.isEmpty { byDirectory[dirPath] = nil }
        return live
    }

    /// The names, in `dirPath`, of the directories below which files were created here and not
    /// uploaded yet: they exist even while the bucket has nothing under them (their last object
    /// was deleted, or they were only ever a prefix).
    mutating func directories(in dirPath: String, table: InodeTable, _ h: borrowing Held) -> Set<String> {
        let prefix = dirPath.isEmpty ? "" : dirPath + "/"
        var names = Set<String>()
        for key in Array(byDirectory.keys) where key.count > prefix.count && key.hasPrefix(prefix) {
            guard !files(in: key, table: table, h).isEmpty else { continue }
            names.insert(String(key.dropFirst(prefix.count).prefix { $0 != "/" }))
        }
        return names
    }

    /// Whether files created here and not uploaded yet are in the directory `path` or below it.
    mutating func hasFiles(below path: String, table: InodeTable, _ h: borrowing Held) -> Bool {
        if !files(in: path, table: table, h).isEmpty { return true }
        return Array(byDirectory.keys).contains { $0.hasPrefix(path + "/") && !files(in: $0, table: table, h).isEmpty }
    }
}
