import Foundation
import FuseKit
import StorageModel

/// The superblock's side of a listing applied as its pages arrive (`ListingBuild`,
/// docs/SEMANTICS.md §6): begun, fed page by page, then finished (or abandoned on an error).
extension Superblock {
    /// Puts entries of one directory in the bucket's order (the paths' UTF-8 byte order, so the
    /// names'). A listing's entries come as runs, one a page, each in order, from name ranges that
    /// do not overlap: the runs are put in order as wholes when they do not overlap (n
    /// comparisons), else every entry is sorted. Sorts 4-byte indices and moves the entries in
    /// place, so that a million entries cost no second copy of them.
    /// `path`: each node's path (read under the superblock's lock).
    /// `pageStarts` (ascending indices) end runs too: two pages that happen to follow in order
    /// are still two runs, which may have another page's names between them.
    static func sortByPath(_ all: inout [SnapshotEntry], pageStarts: [Int] = [], path: (Node) -> String) {
        func precedes(_ a: SnapshotEntry, _ b: SnapshotEntry) -> Bool { NameOrder.precedes(path(a.node), path(b.node)) }
        if all.count < 2 { return }
        var runs: [Range<Int>] = []
        var start = 0
        var scattered = false  // more runs than pages a listing has: sorted entry by entry
        var nextPage = pageStarts.makeIterator()
        var pageStart = nextPage.next()
        for i in 1..<all.count {
            while let p = pageStart, p < i { pageStart = nextPage.next() }
            guard pageStart == i || !precedes(all[i - 1], all[i]) else { continue }
            if runs.count == 4096 { scattered = true; break }
            runs.append(start..<i)
            start = i
        }
        if runs.isEmpty { return }
        runs.append(start..<all.count)
        runs.sort { precedes(all[$0.lowerBound], all[$1.lowerBound]) }
        var order: [UInt32]
        if !scattered, zip(runs, runs.dropFirst()).allSatisfy({ precedes(all[$0.upperBound - 1], all[$1.lowerBound]) }) {
            order = []
            order.reserveCapacity(all.count)
            for r in runs { for i in r { order.append(UInt32(i)) } }
        } else {
            order = [UInt32](unsafeUninitializedCapacity: all.count) { buf, n in
                for i in 0..<all.count { buf[i] = UInt32(i) }
                n = all.count
            }
            order.sort { precedes(all[Int($0)], all[Int($1)]) }
        }
        // all[k] = old all[order[k]], cycle by cycle (a visited slot's order becomes .max).
        for start in 0..<all.count where order[start] != .max {
            let held = all[start]
            var k = start
            while true {
                let from = Int(order[k])
                order[k] = .max
                if from == start { all[k] = held; break }
                all[k] = all[from]
                k = from
            }
        }
    }

    /// A listing of `dir` that began at `since` (`readBegins`), to feed its pages to.
    func beginListing(_ dir: Node, prefix: String, since: UInt64) -> ListingBuild {
        locked { h in
            let b = ListingBuild(dir: dir, prefix: prefix, since: since, began: now, place: h.cache.reservePlace())
            h.listingBuilds[ObjectIdentifier(b)] = b
            return b
        }
    }

    /// Applies one page of `b`'s listing: every new file's node is made (pinned) and its metadata
    /// cached, unless it left through this mount since the listing began; a name already given
    /// (an edge of two ranges) is kept as it first came; a file whose name a directory has is
    /// hidden (the directory wins). Nothing shows the listing yet. The cache's bound holds after
    /// each page: what the pages brought may be evicted at once (the entry keeps the attributes
    /// its page showed, `SnapshotEntry.shown`).
    func applyListedPage(_ b: ListingBuild, dirs: [String], files: [(name: String, info: ObjectInfo?)],
                         subdirectoryPlaceholders: [String: ObjectInfo], at t: Double) {
        locked { h in
            h.absorbChanges(b)
            for name in dirs where h[b].dirNames.insert(name).inserted {
                h[b].dirs.append(name)
                // A file of that name came first: hidden now (its node goes when the build ends,
                // unless something else holds it).
                if let f = h.givenFile(b.prefix + name, of: b) {
                    h[b].given.remove(f.ino)
                    h[b].hidden[name] = .some(h[f].info)
                }
            }
            for (name, ph) in subdirectoryPlaceholders { h[b].subdirectoryPlaceholders[name] = ph }
            if h[b].pageStarts.last != h[b].files.count { h[b].pageStarts.append(h[b].files.count) }
            for (name, info) in files {
                guard h[b].hidden[name] == nil else { continue }
                if h[b].dirNames.contains(name) {
                    h[b].hidden[name] = .some(info)
                    continue
                }
                if h.leftHere(b, name) { continue }
                // The object's name is the node's path: a new node shares that string.
                let n = h.node(path: info?.name ?? b.prefix + name, type: .regular)
                guard h[b].given.insert(n.ino).inserted else { continue }
                h[n].presence = .present
                h[n].snapshotPins += 1
                // Listed by name only: what is cached of it stays, within its own TTL.
                if let info { h.keepListedInfo(n, info, expiry: t + ttl, since: b.since) }
                h[b].files.append(SnapshotEntry(node: n, shown: h.shown(n, at: t)))
            }
            h.trimCache()
            // The changes made by this page are the listing's own.
            h[b].mark = h.cache.changes
        }
    }


    /// Ends `b`: binds its directories (and those that hold files created here and not uploaded
    /// yet), adds the files created here and not uploaded yet, corrects it by what changed here
    /// since it began (a file that left through this mount is not shown, one renamed within the
    /// directory shows under its new name, a node made or uploaded here is), caches it (unless it
    /// is larger than the whole cache) and the directory's placeholder. With `handle`, that
    /// directory handle's snapshot is made of the build's entries at once (the attributes their
    /// pages showed: the cache may have evicted their metadata already), and its readdir pass
    /// begins (`Held.startPass`). Returns the listing and how many names it showed (fresh even with a TTL of 0, for the caller
    /// that asked); with `handle` and larger than the cache, without its names (only the
    /// snapshot needed them, and it has them: `b.shown` counts them).
    func finishListing(_ b: ListingBuild, placeholder: ListedPlaceholder, at t: Double, into handle: DirHandle?) -> (listing: Listing, shown: Int) {
        locked { h in
            h.absorbChanges(b)
            let dir = b.dir, prefix = b.prefix
            // Directories that hold files created here and not uploaded yet exist before the
            // bucket has anything under them.
            let pendingDirs = h.pending.directories(in: h[dir].path, table: h.table, h).subtracting(h[b].dirNames)
            let dirs = h[b].dirs + pendingDirs.sorted { NameOrder.precedes($0, $1) }
            var hidden = h[b].hidden
            var extras: [SnapshotEntry] = []
            var extraNames = Set<String>()
            for name in dirs where !h.leftHere(b, name) {
                if let f = h.givenFile(prefix + name, of: b) {
                    hidden[name] = .some(h[f].info)
                    h[b].given.remove(f.ino)
                }
                let n = h.node(path: prefix + name, type: .directory)
                // Its placeholder, when the listing brought it (a hint: none proves nothing).
                if let ph = h[b].subdirectoryPlaceholders[name], h[n].infoSeq <= b.since {
                    h.setInfo(n, ph, expiry: t + ttl)
                }
                extras.append(SnapshotEntry(node: n, shown: h.shown(n, at: t)))
                extraNames.insert(name)
            }
            // A file that left through this mount since its page came (removed, renamed away,
            // found missing) is not shown; one renamed within the directory is, by its new name.
            var files = h[b].files
            h[b].files = []
            // The pages in the bucket's order first (each a run), while their bounds still hold.
            Self.sortByPath(&files, pageStarts: h[b].pageStarts, path: { h[$0].path })
            h[b].pageStarts = []
            var dropped: [SnapshotEntry] = []
            let prefixBytes = prefix.utf8.count
            // (Without changes here since the listing began, none of them can have moved.)
            let mayHaveMoved = h[b].changed.map { !$0.isEmpty } ?? true
            files.removeAll { e in
                let n = e.node
                var keep = h[b].given.contains(n.ino) && !h[n].removed
                if keep, mayHaveMoved {
                    let p = h[n].path.utf8
                    keep = p.count > prefixBytes && p.starts(with: prefix.utf8)
                        && !p.dropFirst(prefixBytes).contains(UInt8(ascii: "/"))
                        && (extraNames.isEmpty || !extraNames.contains(h[n].name))
                }
                if !keep {
                    h[b].given.remove(n.ino)
                    dropped.append(e)
                }
                return !keep
            }
            // (Below, whether the listing shows a name already: one of the extras, or a given file.)
            // Files created here and not yet uploaded stay visible (even when this directory had
            // no listing yet when they were created).
            for n in h.pending.files(in: h[dir].path, table: h.table, h)
            where !extraNames.contains(h[n].name) && h.givenFile(prefix + h[n].name, of: b) == nil {
                extras.append(SnapshotEntry(node: n, shown: h.shown(n, at: t)))
                extraNames.insert(h[n].name)
            }
            for (path, kind) in h[b].changed ?? [:] where kind == .changed {
                let name = StoragePath.lastSegment(path)
                if !extraNames.contains(name), h.givenFile(prefix + name, of: b) == nil, let n = h.liveBound(path) {
                    extras.append(SnapshotEntry(node: n, shown: h.shown(n, at: t)))
                    extraNames.insert(name)
                }
            }
            h[b].given = []
            for e in extras { h[e.node].snapshotPins += 1 }
            var entries = files
            files = []
            // (The files are in order already, and removing some kept it.)
            if !extras.isEmpty {
                entries.append(contentsOf: extras)
                Self.sortByPath(&entries, path: { h[$0].path })
            }
            h[b].shown = entries.count
            let keep = entries.count <= config.maxCachedEntries && h.table.isTabled(dir)
            var listing = Listing(children: [:], expiry: t + ttl)
            if case .unread = placeholder { listing.namesOnly = true }
            listing.hiddenFiles = hidden
            if keep || handle == nil {
                var children: [String: UInt64] = [:]
                children.reserveCapacity(entries.count)
                var fileOrder: [String] = []
                for e in entries {
                    let name = h[e.node].name
                    children[name] = e.node.ino
                    if e.node.type == .regular { fileOrder.append(name) }
                }
                listing.children = children
                listing.fileOrder = fileOrder
            }
            // One larger than the whole cache is answered from but not kept.
            if keep {
                // Queued before the metadata it brought, so under pressure it goes first: the
                // files' metadata answers stat and getxattr without it, not it without them.
                h.setListing(dir, listing, place: b.place)
            } else {
                h.dropListing(dir)
            }
            if dir.ino != Self.rootIno, h[dir].infoSeq <= b.since, case .read(let ph) = placeholder {
                h.setInfo(dir, ph, expiry: t + ttl)
            }
            if let handle {
                // The build's pins are the snapshot's now.
                h.installSnapshot(handle, entries, namesOnly: listing.namesOnly)
                if keep { h.noteKernelCopy(handle, dir) }
                entries = []
                h.startPass(handle, dir, start: b.began)
            }
            // What the build still pins: what it dropped, and its entries when no snapshot
            // took them.
            entries.append(contentsOf: dropped)
            h[b].files = entries
            h.trimCache()
            h.endBuild(b)
            return (listing, h[b].shown)
        }
    }

    /// Ends `b` without a listing (its listing failed, or was given up): the nodes it made that
    /// nothing else holds leave the table.
    func abandonListing(_ b: ListingBuild) { locked { h in h.endBuild(b) } }
}

extension Held {
    /// What a snapshot shows of `n` once its metadata may be evicted: its attributes now, if
    /// its metadata is known (nil for a file listed by name only, a placeholder not read).
    func shown(_ n: Node, at t: Double) -> ShownAttributes? {
        self[n].box.map { ShownAttributes(stat.attributes(n, info: $0.info, now: t, self)) }
    }

    /// Adds the changes other operations made in `b`'s directory since its last page.
    func absorbChanges(_ b: ListingBuild) {
        guard self[b].changed != nil else { return }
        guard let more = cache.recent.since(self[b].mark, in: self[b.dir].path) else {
            self[b].changed = nil
            return
        }
        for (path, kind) in more { self[b].changed![path] = kind }
    }

    /// Whether `name` left through this mount since `b` began, and nothing is there now.
    func leftHere(_ b: ListingBuild, _ name: String) -> Bool {
        guard let changed = self[b].changed, !changed.isEmpty else { return false }
        return changed[b.prefix + name] == .left && liveBound(b.prefix + name) == nil
    }

    func endBuild(_ b: ListingBuild) {
        listingBuilds[ObjectIdentifier(b)] = nil
        let pinned = self[b].files
        self[b].files = []
        self[b].given = []
        for e in pinned {
            let n = e.node
            self[n].snapshotPins -= 1
            if self[n].snapshotPins == 0, self[n].lookups == 0 { dropIfUnused(n) }
        }
    }
}
