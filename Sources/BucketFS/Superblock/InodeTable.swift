import Foundation
import FuseKit
import StorageModel

/// The inode table and the path index: which `Node` a number names, and which number a path
/// (and type) is bound to. A part of the superblock, guarded by its lock (a value stored in
/// `Superblock`, changed only by the superblock's methods).
///
/// Inode numbers come from the path: a 64-bit hash of type and path, probed past numbers in use.
/// A path the kernel forgot and the table dropped gets its old number back when it is seen again,
/// so numbers stay stable for the life of the mount (docs/SEMANTICS.md §3) without keeping every
/// path ever seen. Only a collision with a live number (a path unlinked or renamed while the
/// kernel still holds its node) moves a path to another number.
///
/// The path index costs nothing for most nodes: a node whose number is its path's first probe
/// (`home`), the number nearly every path gets, is found by computing that number and checking
/// the node there (its path, type, and that it is not unlinked). Only the others (a path that
/// collided, a node renamed) are kept in `moved`, path → number, and an entry there wins over the
/// node at the path's home; the root is inode 1. This saves a dictionary entry (about 67 bytes at
/// a million nodes) per node the kernel holds (docs/OPERATING.md#memory).
///
/// INVARIANT: the root is inode 1, a directory at "", in the table and the path index.
/// INVARIANT: the table is keyed by each node's own number; every node in it that is not
/// unlinked is indexed under its path, and every indexed path names a node in the table with that
/// path and type, not unlinked (`violations`).
struct InodeTable {
    static let rootIno: UInt64 = 1

    /// GUARDED_BY(Superblock.lock)
    private(set) var nodes: [UInt64: Node] = [:]
    /// (path, is a directory) → inode for the paths whose node is not at the path's `home`
    /// number (or whose home holds another node of that path, unlinked). The key shares the
    /// node's path string (no second copy). GUARDED_BY(Superblock.lock)
    private var moved: [PathKey: UInt64] = [:]

    init() {
        // The kernel holds the root from the start, for the life of the mount.
        let root = Node(ino: Self.rootIno, path: "", type: .directory, lookups: 1)
        nodes[Self.rootIno] = root
    }

    subscript(ino: UInt64) -> Node? { nodes[ino] }

    var count: Int { nodes.count }

    /// The node bound to `path` (a directory or a file), removed or not.
    func bound(_ path: String, isDirectory: Bool, _ h: borrowing Held) -> Node? {
        bound(PathKey(path: path, isDirectory: isDirectory), h)
    }

    private func bound(_ key: PathKey, _ h: borrowing Held) -> Node? {
        // The root, inode 1, is nobody's home.
        if key.path.isEmpty { return key.isDirectory ? nodes[Self.rootIno] : nil }
        if !moved.isEmpty, let ino = moved[key] { return nodes[ino] }
        guard let n = nodes[Self.home(key)], h[n].presence != .unlinked,
              (n.type == .directory) == key.isDirectory, h[n].path == key.path else { return nil }
        return n
    }

    /// The node for a path and type, made (and bound) if there is none. Pass a path string that
    /// lives on anyway (a listed object's name) so the node shares it.
    mutating func node(path: String, type: FileType, _ h: borrowing Held) -> Node {
        let key = PathKey(path: path, isDirectory: type == .directory)
        if let n = bound(key, h) { return n }
        let n = Node(ino: inodeNumber(for: key), path: path, type: type)
        nodes[n.ino] = n
        if n.ino != Self.home(key) { moved[key] = n.ino }
        return n
    }

    /// The first number a path's probe tries: a 64-bit hash of type and path (FNV-1a, spread by
    /// SplitMix64's finalizer), past the root's.
    static func home(_ key: PathKey) -> UInt64 {
        var h: UInt64 = key.isDirectory ? 0x84222325_cbf29ce4 : 0xcbf29ce4_84222325
        for b in key.path.utf8 { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }  // FNV-1a
        var ino = mix(h)
        while ino <= rootIno { ino = mix(ino) }
        return ino
    }

    private static func mix(_ x: UInt64) -> UInt64 {  // SplitMix64's finalizer: spreads the bits
        var z = x &+ 0x9e37_79b9_7f4a_7c15
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return (z ^ (z >> 31)) & 0x7fff_ffff_ffff_ffff
    }

    private func inodeNumber(for key: PathKey) -> UInt64 {
        var ino = Self.home(key)
        while ino <= Self.rootIno || nodes[ino] != nil { ino = Self.mix(ino) }
        return ino
    }

    /// Binds `n`'s path to `n`. Returns the node bound there before (an object a rename replaced,
    /// or a directory that was gone from the bucket), which the caller unlinks: a path names one
    /// node.
    mutating func bind(_ n: Node, _ h: borrowing Held) -> Node? {
        let k = PathKey(n, h)
        let before = bound(k, h)
        let old = before.flatMap { $0.ino != n.ino ? $0 : nil }
        if n.ino == Self.home(k) { moved.removeValue(forKey: k) } else { moved[k] = n.ino }
        return old
    }

    /// `n` leaves the path index (when its path is bound to it). The caller unlinks it or gives
    /// it another path at once: a node at its path's home number is indexed by being there.
    mutating func unindex(_ n: Node, _ h: borrowing Held) {
        let k = PathKey(n, h)
        if moved[k] == n.ino { moved.removeValue(forKey: k) }
    }

    /// Whether `n`'s path is bound to `n`.
    func isIndexed(_ n: Node, _ h: borrowing Held) -> Bool { bound(PathKey(n, h), h)?.ino == n.ino }

    /// Whether `n` is the node the table holds for its number (dropped nodes may still be held by
    /// an operation under way; they count for nothing).
    func isTabled(_ n: Node) -> Bool { nodes[n.ino] === n }

    /// The directory holding `n`, when known.
    func parent(of n: Node, _ h: borrowing Held) -> Node? {
        StoragePath.parent(h[n].path).flatMap { bound($0, isDirectory: true, h) }
    }

    /// `n` leaves the table and the path index.
    mutating func remove(_ n: Node, _ h: borrowing Held) {
        nodes.removeValue(forKey: n.ino)
        unindex(n, h)
    }

    /// Puts `n`, which an operation under way holds, back in the table when it was dropped: the
    /// node its path is bound to now when there is one (and `n` is not unlinked), else `n`
    /// itself, bound again. `reinserted` says whether `n` came back into the table.
    mutating func reattach(_ n: Node, _ h: borrowing Held) -> (node: Node, reinserted: Bool) {
        if isTabled(n) { return (n, false) }
        if h[n].presence != .unlinked {
            if let bound = bound(h[n].path, isDirectory: n.type == .directory, h) { return (bound, false) }
            let k = PathKey(n, h)
            if n.ino != Self.home(k) { moved[k] = n.ino }
        }
        nodes[n.ino] = n
        return (n, true)
    }

    /// The live nodes at `path` or below it that are bound to their paths (a removed directory's
    /// inode may still carry the same path).
    func liveNodes(at path: String, _ h: borrowing Held) -> [Node] {
        let prefix = path + "/"
        return nodes.values.filter { (h[$0].path == path || h[$0].path.hasPrefix(prefix)) && !h[$0].removed && isIndexed($0, h) }
    }

    /// The table's own invariants that do not hold now, each described.
    func violations(_ h: borrowing Held) -> [String] {
        var bad: [String] = []
        let root = nodes[Self.rootIno]
        if !(root != nil && root!.type == .directory && h[root!].path.isEmpty && h[root!].presence == .present
             && h[root!].lookups >= 1 && bound("", isDirectory: true, h) === root) {
            bad.append("the root is not inode 1 at \"\", indexed and present")
        }
        for (ino, n) in nodes {
            if n.ino != ino { bad.append("nodes[\(ino)] holds inode \(n.ino) ('\(h[n].path)')") }
            if h[n].presence != .unlinked, !isIndexed(n, h) {
                bad.append("inode \(n.ino) '\(h[n].path)' (\(h[n].presence)) is not indexed under its path (the index has \(bound(PathKey(n, h), h).map { String($0.ino) } ?? "nothing"))")
            }
        }
        // The paths kept apart; a path found at its home number names the node there by
        // construction (its path, type, not unlinked).
        for (k, ino) in moved {
            guard let n = nodes[ino] else { bad.append("path '\(k.path)' names inode \(ino), which is not in the table"); continue }
            if !(h[n].path == k.path && (n.type == .directory) == k.isDirectory) {
                bad.append("path '\(k.path)' (directory: \(k.isDirectory)) names inode \(ino), which is '\(h[n].path)' (\(n.type))")
            }
            if h[n].presence == .unlinked { bad.append("path '\(k.path)' names inode \(ino), which was unlinked") }
        }
        return bad
    }
}

/// A key of the path index: a path and whether it names a directory (a file and a directory of
/// the same name are different inodes).
struct PathKey: Hashable {
    let path: String
    let isDirectory: Bool

    init(path: String, isDirectory: Bool) {
        self.path = path
        self.isDirectory = isDirectory
    }

    init(_ n: Node, _ h: borrowing Held) { self.init(path: h[n].path, isDirectory: n.type == .directory) }
}
