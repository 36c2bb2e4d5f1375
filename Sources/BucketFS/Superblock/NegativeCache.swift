import Foundation

/// What this mount learnt by asking for names that were not there (docs/SEMANTICS.md §6): the
/// paths a lookup found missing, and the directories (never listed, or whose listing expired
/// with a TTL of 0) where one did, each until its TTL ends. GUARDED_BY(Superblock.lock), a part
/// of the superblock like the other tables.
///
/// A missing path answers its next lookups with ENOENT and no request, within the TTL, unless
/// this mount makes a node at that path meanwhile (a create, mkdir, rename or listing that names
/// it: `Held.node` and `Held.bindPath` forget the entry). A directory that had a
/// miss is listed (one page) at its next lookup that would ask the bucket, rather than asked
/// once more name by name: a tool that fills a directory asks for many names that are not
/// there. A directory whose first page did not hold its whole listing is marked `large` and is
/// asked name by name for the rest of the TTL.
///
/// INVARIANT: at most `limit` paths and `limit` directories are remembered (the oldest go first).
struct NegativeCache {
    enum DirectoryState: Equatable {
        /// A lookup in it found a name missing.
        case missed
        /// Its listing is more than one page: not listed for a lookup.
        case large
    }

    private var missing: [String: Double] = [:]
    private var missingOrder: [String] = []
    private var directories: [String: (state: DirectoryState, until: Double)] = [:]
    private var directoryOrder: [String] = []
    let limit: Int

    init(limit: Int = 10_000) { self.limit = max(1, limit) }

    var isEmpty: Bool { missing.isEmpty }
    var count: Int { missing.count }
    var directoryCount: Int { directories.count }

    /// Whether `path` was found missing and its entry is still fresh at `now`.
    func isMissing(_ path: String, now: Double) -> Bool {
        guard let until = missing[path] else { return false }
        return until > now
    }

    /// `path` (in the directory `directory`) was found missing; remembered until `until`.
    mutating func noteMissing(_ path: String, in directory: String, until: Double, now: Double) {
        if missing.updateValue(until, forKey: path) == nil { missingOrder.append(path) }
        if directories[directory]?.state != .large || directories[directory]!.until <= now {
            setDirectory(directory, .missed, until: until)
        }
        trim(now: now)
    }

    /// What is known of `directory` at `now` (nil: nothing fresh).
    func directoryState(_ directory: String, now: Double) -> DirectoryState? {
        guard let d = directories[directory], d.until > now else { return nil }
        return d.state
    }

    /// `directory`'s first page did not hold all of it: asked name by name until `until`.
    mutating func noteLarge(_ directory: String, until: Double, now: Double) {
        setDirectory(directory, .large, until: until)
        trim(now: now)
    }

    /// A node now exists at `path`: it is no longer known missing.
    mutating func forget(_ path: String) {
        if !missing.isEmpty { missing[path] = nil }
    }

    /// `directory` was listed (its listing answers from now on) or removed.
    mutating func forgetDirectory(_ directory: String) {
        if !directories.isEmpty { directories[directory] = nil }
    }

    private mutating func setDirectory(_ directory: String, _ state: DirectoryState, until: Double) {
        if directories.updateValue((state, until), forKey: directory) == nil { directoryOrder.append(directory) }
    }

    /// Keeps the bound: forgotten and expired entries leave the orders, then the oldest go.
    private mutating func trim(now: Double) {
        if missingOrder.count > 2 * limit || missing.count > limit {
            missingOrder.removeAll { p in missing[p].map { $0 <= now } ?? true }
            for (p, until) in missing where until <= now { missing[p] = nil }
            var i = 0
            while missing.count > limit, i < missingOrder.count { missing[missingOrder[i]] = nil; i += 1 }
            missingOrder = missingOrder[i...].filter { missing[$0] != nil }
        }
        if directoryOrder.count > 2 * limit || directories.count > limit {
            directoryOrder.removeAll { d in directories[d].map { $0.until <= now } ?? true }
            for (d, v) in directories where v.until <= now { directories[d] = nil }
            var i = 0
            while directories.count > limit, i < directoryOrder.count { directories[directoryOrder[i]] = nil; i += 1 }
            directoryOrder = directoryOrder[i...].filter { directories[$0] != nil }
        }
    }

    /// Invariant violations (`Superblock+Invariants`).
    func violations() -> [String] {
        var out: [String] = []
        if missing.count > limit { out.append("negative cache holds \(missing.count) paths, over its bound \(limit)") }
        if directories.count > limit { out.append("negative cache holds \(directories.count) directories, over its bound \(limit)") }
        return out
    }
}
