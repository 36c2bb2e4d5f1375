import Foundation
import FuseKit
import StorageModel

/// What a listing said of the listed directory's own placeholder `dir/`.
enum ListedPlaceholder {
    /// Looked for: the placeholder, or nil when there is none.
    case read(ObjectInfo?)
    /// Not looked for (a names-only listing): what is cached of it stays.
    case unread
}

/// The superblock's listings and directory handles: what a lookup brought, bound to nodes and
/// cached (a listing's pages: Superblock+ListingBuild.swift); the snapshots open directories
/// answer readdir from.
extension Superblock {
    /// Whether a directory's listing should be refreshed by listing it again (rather than a
    /// request per name): it was listed before and has expired.
    func shouldRelist(_ dir: Node) -> Bool { locked { h in h.shouldRelist(dir) } }

    /// `dir`'s listing while it is fresh.
    func freshListing(_ dir: Node) -> Listing? {
        locked { h in h[dir].listing.flatMap { $0.isFresh(at: now) ? $0 : nil } }
    }

    /// A child of a listing, if it is a live node.
    func child(_ l: Listing, _ name: String) -> Node? { locked { h in h.child(l, name) } }

    /// The files after `n` in its directory's fresh listing whose metadata is not cached (listed
    /// by name only), or expired in a listing of names only (whose listing again would not
    /// refresh it), for a stat of `n` to read along with its own: as many as the listing's
    /// `statAhead`, which then grows (up to `Listing.maxStatAhead`). `namesOnly`: only from a
    /// listing of names only (a refresh of expired metadata; elsewhere the listing refreshes it).
    func statAhead(after n: Node, namesOnly: Bool = false) -> [Node] {
        locked { h in
            guard n.type == .regular, let dir = h.table.parent(of: n, h), let l = h[dir].listing, l.isFresh(at: now),
                  !namesOnly || l.namesOnly, let i = l.fileIndex(h[n].name) else { return [] }
            var out: [Node] = []
            for name in l.fileOrder[(i + 1)...] where out.count < l.statAhead {
                guard let c = h.child(l, name), h.lacksFileInfo(c) || h.expiredByName(c, in: l) else { continue }
                out.append(c)
            }
            h[dir].listing?.statAhead = min(Listing.maxStatAhead, l.statAhead * 4 + 15)
            return out
        }
    }

    /// The subdirectories after `n` in its directory's fresh listing whose placeholder is not
    /// known (prefix-only, or listed by a server that leaves placeholders out), for the lookup of
    /// `n` to read along with its own: a walk down a tree (`ls -R`, `find`, `tar`) looks each
    /// subdirectory up in turn, and each would otherwise cost a round trip of its own before its
    /// listing (docs/SEMANTICS.md §3.7). As many as the listing's `statAhead`, which grows as it
    /// does for files: a lone lookup reads its own placeholder only.
    func placeholdersAhead(after n: Node) -> [Node] {
        locked { h in
            guard n.type == .directory, let dir = h.table.parent(of: n, h), let l = h[dir].listing, l.isFresh(at: now) else { return [] }
            h[dir].listing?.statAhead = min(Listing.maxStatAhead, l.statAhead * 4 + 15)
            guard l.statAhead > 0 else { return [] }
            let after = h[n].name
            var names: [String] = []
            for (name, ino) in l.children where NameOrder.precedes(after, name) {
                guard let c = h.table[ino], c.type == .directory, h.placeholderUnknown(c) else { continue }
                names.append(name)
            }
            names.sort { NameOrder.precedes($0, $1) }
            return names.prefix(l.statAhead).compactMap { h.child(l, $0) }
        }
    }

    /// The subdirectories after `dir` in its parent's fresh listing whose own listing is not
    /// cached and fresh, for a readdir that must list `dir` to list along with it: a walk down a
    /// tree (`ls -R`, `find`, `du`) reads each subdirectory in turn, and each would otherwise cost
    /// a round trip of its own (docs/SEMANTICS.md §6). None at the first such readdir under a
    /// parent, then `Listing.maxListAhead`; none in a parent of more than
    /// `Listing.maxNamesToListAhead` names, or with a TTL of 0 (nothing listed ahead would be kept).
    func listingsAhead(after dir: Node) -> [Node] {
        locked { h in
            guard ttl > 0, dir.type == .directory, let p = h.table.parent(of: dir, h), let l = h[p].listing, l.isFresh(at: now),
                  l.children.count <= Listing.maxNamesToListAhead else { return [] }
            h[p].listing?.listAhead = Listing.maxListAhead
            guard l.listAhead > 0 else { return [] }
            let after = h[dir].name
            var names: [String] = []
            for (name, ino) in l.children where NameOrder.precedes(after, name) {
                guard let c = h.table[ino], c.type == .directory, !h[c].removed, !(h[c].listing?.isFresh(at: now) ?? false) else { continue }
                names.append(name)
            }
            names.sort { NameOrder.precedes($0, $1) }
            return names.prefix(l.listAhead).compactMap { h.child(l, $0) }
        }
    }

    /// The directory bound at `path` while a readdir pass over its listing is under way: it
    /// exists, so its lookup again (`ls -l DIR` stats `DIR/name` for each file, and the kernel
    /// looks `DIR` up again each time its entry expires) asks nothing (docs/SEMANTICS.md §6).
    func directoryInPass(at path: String) -> Node? {
        locked { h in
            guard let n = h.table.bound(path, isDirectory: true, h), !h[n].removed, let l = h[n].listing, l.passes > 0 else { return nil }
            return n
        }
    }

    /// A file created here and not uploaded yet at `path`, if there is one (it answers a lookup
    /// before the bucket has it).
    func pendingNewFile(at path: String) -> Node? {
        locked { h in
            guard let n = h.table.bound(path, isDirectory: false, h), let s = h[n].staged, h[s].createdHere, !h[n].removed else { return nil }
            return n
        }
    }

    /// Binds what a lookup of `path` found at `t`: a directory when `listed` (what lies under
    /// `path/`, its placeholder first if it has one) has anything (or files created here are
    /// below it), else the object `info`, else ENOENT.
    func bindLookedUp(_ path: String, listed: ListPage, info: ObjectInfo?, at t: Double, since: UInt64 = .max) throws(Errno) -> Node {
        try locked { (h: borrowing Held) throws(Errno) -> Node in
            defer { h.trimCache() }
            if !listed.items.isEmpty || !listed.prefixes.isEmpty || h.pending.hasFiles(below: path, table: h.table, h) {
                let n = h.node(path: path, type: .directory)
                h[n].presence = .present
                let ph = listed.items.first.flatMap { $0.name == path + "/" ? $0 : nil }
                if h[n].infoSeq <= since { h.setInfo(n, ph, expiry: t + ttl) }
                return n
            }
            guard let info else { throw .ENOENT }
            let n = h.node(path: info.name == path ? info.name : path, type: .regular)
            h[n].presence = .present
            h.keepListedInfo(n, info, expiry: t + ttl, since: since)
            return n
        }
    }


    /// Drops `dir`'s cached listing (the next lookup or readdir asks the bucket).
    func dropListing(_ dir: Node) { locked { h in h.dropListing(dir) } }

    /// Whether files created here and not uploaded yet are in the directory `path` or below.
    func hasPendingFiles(below path: String) -> Bool { locked { h in h.pending.hasFiles(below: path, table: h.table, h) } }

    // MARK: - directory handles

    func openDirectory(_ ino: UInt64) -> UInt64 {
        locked { h in h.handles.add(DirHandle(ino: ino, caching: h.kernelCaching(ino))) }
    }

    /// What the kernel may do with directory handle `fh`'s entries.
    func directoryCaching(_ fh: UInt64) -> DirectoryCaching {
        locked { h in h.handles.directories[fh]?.caching ?? .none }
    }

    /// The directory handle `fh`, and whether it needs a snapshot before answering from `offset`.
    func directoryHandle(_ fh: UInt64, offset: UInt64) -> (DirHandle, needsSnapshot: Bool)? {
        locked { h in
            guard let dh = h.handles.directories[fh] else { return nil }
            return (dh, offset == 0 || h[dh].entries == nil)
        }
    }

    /// Takes `h`'s snapshot from `dir`'s cached listing when it is fresh (or a readdir pass holds
    /// it) and every child's metadata is cached too (an evicted child would have nothing to
    /// show); false otherwise. A names-only listing (firebase://) is listed again too: a list
    /// request per page, where showing it from the cache would cost the kernel a lookup, and a
    /// GET, per file. The snapshot begins a readdir pass (`Held.startPass`).
    func snapshotFromCache(_ dir: Node, into dh: DirHandle) -> Bool {
        locked { h in
            guard let l = h.answeringListing(dir) else { return false }
            h.snapshot(dh, l)
            h.noteKernelCopy(dh, dir)
            h.startPass(dh, dir, start: now)
            return true
        }
    }

    /// Entries of `h`'s snapshot after `offset`, at most `limit`. The answer that says the end
    /// (no entries) ends the readdir pass. Each shows the node's metadata when it has it (or its
    /// local content), else the attributes its listing showed.
    func entries(_ dh: DirHandle, after offset: UInt64, limit: Int) -> [DirectoryEntry] {
        locked { h in
            let entries = h[dh].entries ?? []
            var out: [DirectoryEntry] = []
            var i = Int(offset)
            let t = now
            while i < entries.count, out.count < limit {
                let e = entries[i], n = e.node
                // A directory whose placeholder is not known yet: its name only, and the kernel's
                // lookup reads the placeholder before its attributes are shown.
                // Likewise a file listed by name only, or whose metadata expired in a listing of
                // names only (listing it again did not refresh it): the kernel's lookup reads it.
                var expired = h[dh].namesOnly && n.type == .regular && h[n].staged == nil && h[n].infoExpiry <= t
                // (What arrived during this pass lives until it ends.)
                if expired, let p = h[dh].pass, h[n].infoExpiry >= p.start + ttl { expired = false }
                let known = !expired && (e.shown != nil || !(h.placeholderUnknown(n) || h.lacksFileInfo(n)))
                let attributes: FileAttributes
                if let shown = e.shown, h[n].box == nil, h[n].staged == nil {
                    attributes = shown.attributes(ino: n.ino)
                } else {
                    attributes = stat.attributes(n, info: h[n].info, now: t, h)
                }
                out.append(DirectoryEntry(name: h[n].name, offset: UInt64(i + 1),
                                          entry: FuseEntry(attributes: attributes, entryTimeout: ttl, attrTimeout: ttl),
                                          attributesKnown: known))
                i += 1
            }
            if out.isEmpty { h.endPass(dh) }
            return out
        }
    }

    /// Closes a directory handle; returns how many entries its snapshot held.
    func releaseDirectory(_ fh: UInt64) -> Int {
        locked { h in
            guard let dh = h.handles.removeDirectory(fh) else { return 0 }
            let count = h[dh].entries?.count ?? 0
            h.unpin(dh)
            return count
        }
    }

}

/// Names found missing by a lookup (`NegativeCache`, docs/SEMANTICS.md §6).
extension Superblock {
    /// lookup with no I/O: from a fresh listing of the parent (a miss there is ENOENT), or a
    /// name found missing within the TTL.
    func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? {
        locked { (h: borrowing Held) -> Result<FuseEntry, Errno>? in
            guard let p = h.table[parent], p.type == .directory else { return nil }
            guard let l = h[p].listing, l.isFresh(at: now) else {
                // A name found missing within the TTL (a lookup's miss, not a listing's).
                if !h.negative.isEmpty, h.knownMissing(h[p].childPrefix + name) {
                    counters.count(.listing, hit: true)
                    return .failure(.ENOENT)
                }
                return nil
            }
            counters.count(.listing, hit: true)
            guard let n = h.child(l, name) else {
                // Names the rules refuse get their logged error from the async path.
                return name.utf8.count <= StoragePath.maxSegmentBytes && !name.contains("/") ? .failure(.ENOENT) : nil
            }
            // Its metadata was evicted, or expired in a listing of names only: the async path
            // reads it again.
            if h.lacksInfo(n) || h.expiredByName(n, in: l) { return nil }
            h[n].lookups += 1
            return .success(stat.entry(n, now: now, h))
        }
    }


    func knownMissing(_ path: String) -> Bool { locked { h in h.knownMissing(path) } }

    /// A lookup found `path` missing in `dir` (no object, nothing below it).
    func noteMissing(_ path: String, in dir: Node) {
        locked { h in
            let t = now
            h.negative.noteMissing(path, in: h[dir].path, until: t + ttl, now: t)
        }
    }

    /// Whether a lookup in `dir` found a name missing within the TTL (and its first page was not
    /// found too small to hold it since): its next lookup lists it rather than asking by name.
    func listsAfterMiss(_ dir: Node) -> Bool {
        locked { h in h.negative.directoryState(h[dir].path, now: now) == .missed }
    }

    /// `dir`'s first page did not hold all of it: asked name by name for the rest of the TTL.
    func noteLarge(_ dir: Node) {
        locked { h in
            let t = now
            h.negative.noteLarge(h[dir].path, until: t + ttl, now: t)
        }
    }
}

extension Held {
    /// The live node bound at `path`, the directory first (it wins over a file of that name).
    func liveBound(_ path: String) -> Node? {
        for isDirectory in [true, false] {
            if let n = table.bound(path, isDirectory: isDirectory, self), !self[n].removed { return n }
        }
        return nil
    }

    /// Takes a directory handle's snapshot of `l`: each child node (pinned in the table, so the
    /// numbers it hands out stay valid) with the attributes its metadata shows now (evictions do
    /// not change them). A pass of the handle under way ends (rewinddir).
    func snapshot(_ h: DirHandle, _ l: Listing) {
        var entries: [SnapshotEntry] = []
        entries.reserveCapacity(l.children.count)
        let t = now
        for name in l.sortedNames {
            guard let n = table[l.children[name]!] else { continue }
            self[n].snapshotPins += 1
            entries.append(SnapshotEntry(node: n, shown: shown(n, at: t)))
        }
        installSnapshot(h, entries, namesOnly: l.namesOnly)
    }

    /// Makes `entries`, in the bucket's order, whose nodes are pinned for it, `h`'s snapshot; the
    /// one it had goes (its pass ends).
    func installSnapshot(_ h: DirHandle, _ entries: [SnapshotEntry], namesOnly: Bool) {
        unpin(h)
        self[h].entries = entries
        self[h].namesOnly = namesOnly
    }

    /// Begins `h`'s readdir pass over `dir`'s cached listing, whose reading began at `start`
    /// (docs/SEMANTICS.md §6): until the pass ends the listing does not expire. None with a TTL
    /// of 0 (every question is a request), or when the listing was not kept (larger than the
    /// cache).
    func startPass(_ h: DirHandle, _ dir: Node, start: Double) {
        guard ttl > 0, self[h].pass == nil, let l = self[dir].listing else { return }
        self[dir].listing?.heldSince = l.passes == 0 ? start : min(l.heldSince, start)
        self[dir].listing?.passes += 1
        self[h].pass = ReaddirPass(serial: l.serial, start: start)
    }

    /// Ends `h`'s readdir pass, if one is under way: its listing, and the metadata of its entries
    /// that arrived since the listing began (its pages, the stat-ahead of `ls -l`), live the TTL
    /// from now, the end of the work that filled them (docs/SEMANTICS.md §6).
    func endPass(_ h: DirHandle) {
        guard let pass = self[h].pass else { return }
        self[h].pass = nil
        guard let dir = table[h.ino], let l = self[dir].listing, l.serial == pass.serial else { return }
        let until = now + ttl
        self[dir].listing?.passes -= 1
        self[dir].listing?.expiry = max(l.expiry, until)
        let filled = pass.start + ttl
        for e in self[h].entries ?? [] where self[e.node].infoExpiry >= filled && self[e.node].infoExpiry < until {
            self[e.node].infoExpiry = until
        }
    }

    /// Whether `n`, a file in listing `l`, shows metadata that expired where listing its directory
    /// again does not refresh it (a listing of names only): its next lookup or stat reads it.
    /// Metadata that arrived during a readdir pass still under way has not expired: it lives the
    /// TTL from the pass's end.
    func expiredByName(_ n: Node, in l: Listing) -> Bool {
        guard l.namesOnly, n.type == .regular, self[n].box != nil, self[n].staged == nil, !self[n].removed, self[n].infoExpiry <= now else { return false }
        return !heldByPass(n)
    }

    /// Releases a snapshot's nodes: those nothing else holds now leave the table. The handle's
    /// pass ends first.
    func unpin(_ h: DirHandle) {
        endPass(h)
        guard let entries = self[h].entries else { return }
        self[h].entries = nil
        for e in entries {
            self[e.node].snapshotPins -= 1
            if self[e.node].snapshotPins == 0, self[e.node].lookups == 0 { dropIfUnused(e.node) }
        }
    }

    /// Whether `path` was found missing within the TTL, and no node this mount made or moved is
    /// there since (a second guard: making one forgets the entry).
    func knownMissing(_ path: String) -> Bool {
        guard negative.isMissing(path, now: now) else { return false }
        for isDirectory in [false, true] {
            if let n = table.bound(path, isDirectory: isDirectory, self), !self[n].removed { return false }
        }
        return true
    }
}
