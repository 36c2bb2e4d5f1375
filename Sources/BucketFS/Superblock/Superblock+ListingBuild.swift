import Foundation
import FuseKit
import StorageModel

/// The superblock's side of a listing applied as its pages arrive (`ListingBuild`,
/// docs/SEMANTICS.md §6): begun, fed page by page, then finished (or abandoned on an error).
extension Superblock {
    /// A listing of `dir` that began at `since` (`readBegins`), to feed its pages to.
    func beginListing(_ dir: Node, prefix: String, since: UInt64) -> ListingBuild {
        locked {
            let b = ListingBuild(dir: dir, prefix: prefix, since: since, began: now, place: cache.reservePlace())
            listingBuilds[ObjectIdentifier(b)] = b
            return b
        }
    }

    /// Applies one page of `b`'s listing: every new file's node is made (pinned) and its metadata
    /// cached, unless it left through this mount since the listing began; a name already given
    /// (an edge of two ranges) is kept as it first came; a file whose name a directory has is
    /// hidden (the directory wins). Nothing shows the listing yet.
    func applyListedPage(_ b: ListingBuild, dirs: [String], files: [(name: String, info: ObjectInfo?)],
                         subdirectoryPlaceholders: [String: ObjectInfo], at t: Double) {
        locked {
            absorbChangesLocked(b)
            for name in dirs where b.dirNames.insert(name).inserted {
                b.dirs.append(name)
                // A file of that name came first: hidden now (its node goes when the build ends,
                // unless something else holds it).
                if let ino = b.children.removeValue(forKey: name) { b.hidden[name] = .some(table[ino]?.info) }
            }
            for (name, ph) in subdirectoryPlaceholders { b.subdirectoryPlaceholders[name] = ph }
            for (name, info) in files {
                guard b.children[name] == nil, b.hidden[name] == nil else { continue }
                b.noteFile(name)
                if b.dirNames.contains(name) {
                    b.hidden[name] = .some(info)
                    continue
                }
                if leftHereLocked(b, name) { continue }
                // The object's name is the node's path: a new node shares that string.
                let n = nodeLocked(path: info?.name ?? b.prefix + name, type: .regular)
                n.presence = .present
                n.snapshotPins += 1
                b.pinned.append(n)
                b.children[name] = n.ino
                // Listed by name only: what is cached of it stays, within its own TTL.
                if let info { keepListedInfoLocked(n, info, expiry: t + ttl, since: b.since) }
            }
            // The changes made by this page are the listing's own.
            b.mark = cache.changes
        }
    }

    /// Ends `b`: binds its directories (and those that hold files created here and not uploaded
    /// yet), adds the files created here and not uploaded yet, corrects it by what changed here
    /// since it began (a name that left through this mount is not shown, a node made or uploaded
    /// here is), caches it (unless it is larger than the whole cache) and the directory's
    /// placeholder. With `handle`, that directory handle's snapshot is taken from it at once,
    /// before anything can be evicted, and its readdir pass begins (`startPassLocked`). Returns
    /// the listing (fresh even with a TTL of 0, for the caller that asked).
    func finishListing(_ b: ListingBuild, placeholder: ListedPlaceholder, at t: Double, into handle: DirHandle?) -> Listing {
        locked {
            absorbChangesLocked(b)
            let dir = b.dir, prefix = b.prefix
            var children = b.children
            b.children = [:]
            // Names that left here after their page was applied.
            for (path, kind) in b.changed ?? [:] where kind == .left {
                let name = StoragePath.lastSegment(path)
                if children[name] != nil, leftHereLocked(b, name) { children[name] = nil }
            }
            // Directories that hold files created here and not uploaded yet exist before the
            // bucket has anything under them.
            let pendingDirs = pending.directories(in: dir.path, table: table).subtracting(b.dirNames)
            let dirs = b.dirs + pendingDirs.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            var hidden = b.hidden
            for name in dirs where !leftHereLocked(b, name) {
                if let ino = children[name] { hidden[name] = .some(table[ino]?.info) }
                let n = nodeLocked(path: prefix + name, type: .directory)
                children[name] = n.ino
                // Its placeholder, when the listing brought it (a hint: none proves nothing).
                if let ph = b.subdirectoryPlaceholders[name], n.infoSeq <= b.since {
                    setInfoLocked(n, ph, expiry: t + ttl)
                }
            }
            // Files created here and not yet uploaded stay visible (even when this directory had
            // no listing yet when they were created).
            for n in pending.files(in: dir.path, table: table) where children[n.name] == nil {
                children[n.name] = n.ino
            }
            for (path, kind) in b.changed ?? [:] where kind == .changed {
                let name = StoragePath.lastSegment(path)
                if children[name] == nil, let n = liveBoundLocked(path) { children[name] = n.ino }
            }
            var listing = Listing(children: children, expiry: t + ttl)
            if case .unread = placeholder { listing.namesOnly = true }
            listing.hiddenFiles = hidden
            if !b.inOrder { b.fileOrder.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
            listing.fileOrder = b.fileOrder
            b.fileOrder = []
            // One larger than the whole cache is answered from but not kept.
            if children.count <= config.maxCachedEntries, table.isTabled(dir) {
                // Queued before the metadata it brought, so under pressure it goes first: the
                // files' metadata answers stat and getxattr without it, not it without them.
                setListingLocked(dir, listing, place: b.place)
            } else {
                dropListingLocked(dir)
            }
            if dir.ino != Self.rootIno, dir.infoSeq <= b.since, case .read(let ph) = placeholder {
                setInfoLocked(dir, ph, expiry: t + ttl)
            }
            if let handle {
                snapshotLocked(handle, listing)
                startPassLocked(handle, dir, start: b.began)
            }
            trimCacheLocked()
            endBuildLocked(b)
            return listing
        }
    }

    /// Ends `b` without a listing (its listing failed, or was given up): the nodes it made that
    /// nothing else holds leave the table.
    func abandonListing(_ b: ListingBuild) { locked { endBuildLocked(b) } }

    /// Adds the changes other operations made in `b`'s directory since its last page.
    private func absorbChangesLocked(_ b: ListingBuild) {
        guard b.changed != nil else { return }
        guard let more = cache.recent.since(b.mark, in: b.dir.path) else {
            b.changed = nil
            return
        }
        for (path, kind) in more { b.changed![path] = kind }
    }

    /// Whether `name` left through this mount since `b` began, and nothing is there now.
    private func leftHereLocked(_ b: ListingBuild, _ name: String) -> Bool {
        guard let changed = b.changed, !changed.isEmpty else { return false }
        return changed[b.prefix + name] == .left && liveBoundLocked(b.prefix + name) == nil
    }

    private func endBuildLocked(_ b: ListingBuild) {
        listingBuilds[ObjectIdentifier(b)] = nil
        let pinned = b.pinned
        b.pinned = []
        for n in pinned {
            n.snapshotPins -= 1
            if n.snapshotPins == 0, n.lookups == 0 { dropIfUnusedLocked(n) }
        }
    }
}
