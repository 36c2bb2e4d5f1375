import Foundation
import FuseKit
import StorageModel

/// The metadata cache (SPEC §6): directory listings that fill every child's attributes, their
/// TTL, and the per-name and per-file revalidation when a listing is missing or expired.
extension BucketFileSystem {
    // MARK: - listing

    /// Lists a directory (all pages) and fills the attribute cache of every child. Returns the
    /// new listing (fresh even with a TTL of 0, for the caller that asked). With `handle`, that
    /// directory handle's snapshot is taken from it at once, before anything can be evicted.
    @discardableResult
    func loadListing(_ dir: Node, into handle: DirHandle? = nil) async throws(Errno) -> Listing {
        let prefix = locked { dir.childPrefix }
        if let e = failures.check(.listing(prefix: prefix)) { throw e }
        var token: String? = nil
        var dirs: [String] = []
        // In the bucket's order, so the cache's FIFO keeps the end of a listing it cannot hold.
        var files: [(name: String, info: ObjectInfo)] = []
        var placeholder: ObjectInfo? = nil
        do {
            repeat {
                let page = try await store.list(ListRequest(prefix: prefix, delimiter: "/",
                                                            maxResults: config.listPageSize, pageToken: token))
                for p in page.prefixes {
                    if let name = names.visibleName(p, relativeTo: prefix, isPrefix: true) { dirs.append(name) }
                }
                for item in page.items {
                    if item.name == prefix { placeholder = item; continue }
                    if let name = names.visibleName(item.name, relativeTo: prefix, isPrefix: false) { files.append((name, item)) }
                }
                token = page.nextPageToken
            } while token != nil
        } catch {
            let e = fail(error, "list", prefix)
            failures.note(.listing(prefix: prefix), e)
            throw e
        }
        let t = now
        let big = dirs.count + files.count >= largeListingNames
        defer {
            if big {
                // The pages of a large listing were parsed into many short-lived objects, and the
                // metadata it brought may have evicted as much again: give the freed memory back
                // now rather than keep it as the process's high-water mark.
                releaseFreedMemory()
            }
        }
        return locked {
            // Directories that hold files created here and not uploaded yet exist before the
            // bucket has anything under them.
            let pendingDirs = pendingDirectoriesLocked(in: dir.path).subtracting(dirs)
            let dirs = dirs + pendingDirs.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            var children: [String: UInt64] = [:]
            children.reserveCapacity(dirs.count + files.count)
            var hidden: [String: ObjectInfo] = [:]
            for name in dirs {
                let n = nodeLocked(path: prefix + name, type: .directory)
                children[name] = n.ino
            }
            for (name, info) in files {
                if children[name] != nil {
                    hidden[name] = info
                    names.hiddenLog.warn("'\(prefix + name)' is both an object and a prefix: the directory is shown; the object stays reachable through `bucketfs cat/stat`", key: "clash:" + prefix + name)
                    continue
                }
                // The object's name is the node's path: a new node shares that string.
                let n = nodeLocked(path: info.name, type: .regular)
                n.removed = false
                children[name] = n.ino
            }
            // Files created here and not yet uploaded stay visible (even when this directory had
            // no listing yet when they were created).
            for n in pendingFilesLocked(in: dir.path) where children[n.name] == nil {
                children[n.name] = n.ino
            }
            var listing = Listing(children: children, expiry: t + config.metadataTTL)
            listing.hiddenFiles = hidden
            // The listing is queued before the metadata it brings, so under pressure it goes
            // first: the files' metadata answers stat and getxattr without it, not it without
            // them. One larger than the whole cache is answered from but not kept.
            listing.fileOrder = files.map { $0.name }
            if children.count <= config.maxCachedEntries, isTabledLocked(dir) {
                setListingLocked(dir, listing)
            } else {
                dropListingLocked(dir)
            }
            for (name, info) in files {
                guard let ino = children[name], let n = nodes[ino], n.type == .regular else { continue }
                if !(n.staged?.state.unsaved ?? false) {
                    setInfoLocked(n, info, expiry: t + config.metadataTTL)
                } else {
                    n.infoExpiry = t + config.metadataTTL
                }
            }
            if dir.ino != Self.rootIno {
                setInfoLocked(dir, placeholder, expiry: t + config.metadataTTL)
            }
            if let handle { snapshotLocked(handle, listing) }
            trimCacheLocked()
            return listing
        }
    }

    /// Whether a directory's listing should be refreshed by listing it again (rather than a
    /// request per name): it was listed before and has expired. With a TTL of 0 every question
    /// is a request of its own, so a single GET is cheaper.
    func shouldRelistLocked(_ dir: Node) -> Bool {
        config.metadataTTL > 0 && dir.listing.map { $0.expiry <= now } == true
    }

    /// Records a file created here and not yet uploaded, so listings of its directory show it.
    /// Caller holds `lock`.
    func notePendingLocked(_ n: Node) {
        pendingNew[StoragePath.parent(n.path) ?? "", default: []].insert(n.ino)
    }

    /// The files created here and not uploaded yet directly in the directory `dirPath` ("": the
    /// root). Entries that no longer are (uploaded, unlinked, moved) leave the index. Caller
    /// holds `lock`.
    func pendingFilesLocked(in dirPath: String) -> [Node] {
        guard let inos = pendingNew[dirPath] else { return [] }
        var live: [Node] = []
        for ino in inos {
            if let n = nodes[ino], n.type == .regular, !n.removed, n.staged?.createdHere == true,
               (StoragePath.parent(n.path) ?? "") == dirPath {
                live.append(n)
            } else {
                pendingNew[dirPath]?.remove(ino)
            }
        }
        if live.isEmpty { pendingNew[dirPath] = nil }
        return live
    }

    /// The names, in `dirPath`, of the directories below which files were created here and not
    /// uploaded yet: they exist even while the bucket has nothing under them (their last object
    /// was deleted, or they were only ever a prefix). Caller holds `lock`.
    func pendingDirectoriesLocked(in dirPath: String) -> Set<String> {
        let prefix = dirPath.isEmpty ? "" : dirPath + "/"
        var names = Set<String>()
        for key in Array(pendingNew.keys) where key.count > prefix.count && key.hasPrefix(prefix) {
            guard !pendingFilesLocked(in: key).isEmpty else { continue }
            names.insert(String(key.dropFirst(prefix.count).prefix { $0 != "/" }))
        }
        return names
    }

    /// Whether files created here and not uploaded yet are in the directory `path` or below it.
    /// Caller holds `lock`.
    func hasPendingFilesLocked(below path: String) -> Bool {
        if !pendingFilesLocked(in: path).isEmpty { return true }
        return Array(pendingNew.keys).contains { $0.hasPrefix(path + "/") && !pendingFilesLocked(in: $0).isEmpty }
    }

    /// A child of a listing, if it is a live node. Caller holds `lock`.
    func childLocked(_ l: Listing, _ name: String) -> Node? {
        guard let ino = l.children[name], let n = nodes[ino], !n.removed else { return nil }
        return n
    }

    /// lookup with no I/O: from a fresh listing of the parent (a miss there is ENOENT).
    public func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? {
        locked {
            guard let p = nodes[parent], p.type == .directory, let l = p.listing, l.expiry > now else { return nil }
            cacheCounters.count(.listing, hit: true)
            guard let n = childLocked(l, name) else {
                // Names the rules refuse get their logged error from the async path.
                return name.utf8.count <= StoragePath.maxSegmentBytes && !name.contains("/") ? .failure(.ENOENT) : nil
            }
            // Its metadata was evicted: the async path reads it again.
            if lacksInfoLocked(n) { return nil }
            n.lookups += 1
            return .success(stat.entry(n, now: now))
        }
    }

    func freshListing(_ dir: Node) -> Listing? {
        locked { dir.listing.flatMap { $0.expiry > now ? $0 : nil } }
    }

    /// Resolves one name in a directory: from a fresh listing, else with a get and a one-item list.
    func resolve(_ parent: Node, _ name: String) async throws(Errno) -> Node {
        let path = try names.childPath(parent.path, name)
        if let l = freshListing(parent) {
            cacheCounters.count(.listing, hit: true)
            guard let n = locked({ childLocked(l, name) }) else { throw .ENOENT }
            return n
        }
        cacheCounters.count(.listing, hit: false)
        if locked({ shouldRelistLocked(parent) }) {
            // Listed before and expired: one listing answers this name and all its siblings.
            let l = try await loadListing(parent)
            guard let n = locked({ childLocked(l, name) }) else { throw .ENOENT }
            return n
        }
        if let local = locked({ () -> Node? in
            guard let ino = byPath[PathKey(path: path, isDirectory: false)], let n = nodes[ino], let s = n.staged,
                  s.createdHere, !n.removed else { return nil }
            return n
        }) { return local }
        if StoragePath.mountProblem(path) != nil { throw .ENOENT }
        if let e = failures.check(.metadata(path: path)) { throw e }
        async let meta: ObjectInfo? = { () async throws -> ObjectInfo? in
            do { return try await store.getMetadata(path) } catch StorageError.objectNotFound { return nil }
        }()
        async let page = store.list(ListRequest(prefix: path + "/", delimiter: "/", maxResults: 1))
        let info: ObjectInfo?
        let listed: ListPage
        do {
            listed = try await page
            info = try await meta
        } catch {
            let e = fail(error, "lookup", path)
            failures.note(.metadata(path: path), e)
            throw e
        }
        let t = now
        return try locked { () throws(Errno) -> Node in
            defer { trimCacheLocked() }
            if !listed.items.isEmpty || !listed.prefixes.isEmpty || hasPendingFilesLocked(below: path) {
                let n = nodeLocked(path: path, type: .directory)
                n.removed = false
                let ph = listed.items.first.flatMap { $0.name == path + "/" ? $0 : nil }
                setInfoLocked(n, ph, expiry: t + config.metadataTTL)
                return n
            }
            guard let info else { throw .ENOENT }
            let n = nodeLocked(path: info.name == path ? info.name : path, type: .regular)
            n.removed = false
            if !(n.staged?.state.unsaved ?? false) {
                setInfoLocked(n, info, expiry: t + config.metadataTTL)
            } else {
                n.infoExpiry = t + config.metadataTTL
            }
            return n
        }
    }

    /// Whether `n`'s metadata must be read before it is shown: its TTL has passed (or `force`).
    /// A staged file keeps its metadata unless forced (rename and 412 retries must re-read).
    /// Caller holds `lock`.
    func needsRefreshLocked(_ n: Node, force: Bool = false) -> Bool {
        if n.ino == Self.rootIno || n.removed { return false }
        if n.staged != nil && !force { return false }
        return force || n.infoExpiry <= now
    }

    /// A stat or a listing found `n`'s object missing. A node this mount already unlinked stays
    /// so (it left the path index). Caller holds `lock`.
    func markGoneLocked(_ n: Node) {
        if n.presence == .present { n.presence = .gone }
    }

    /// The directory holding `n`, when known. Caller holds `lock`.
    func parentLocked(_ n: Node) -> Node? {
        StoragePath.parent(n.path).flatMap { byPath[PathKey(path: $0, isDirectory: true)] }.flatMap { nodes[$0] }
    }

    /// getattr with no I/O: nil when the metadata must be read first.
    public func cachedGetattr(ino: UInt64) -> (FileAttributes, Double)? {
        locked {
            guard let n = nodes[ino], !needsRefreshLocked(n) else { return nil }
            cacheCounters.count(.attributes, hit: true)
            return (stat.attributes(n, now: now), config.metadataTTL)
        }
    }

    /// Refreshes a file's metadata when its TTL has passed (no request while fresh or staged): by
    /// listing its directory again when that listing expired too (one request for all siblings),
    /// else with a GET. Returns the metadata it ended with, which the caller shows even if the
    /// cache evicts it from the node meanwhile.
    @discardableResult
    func refreshed(_ n: Node, force: Bool = false) async throws(Errno) -> InfoBox? {
        let (need, name, relist, box) = locked { () -> (Bool, String, Node?, InfoBox?) in
            let parent = parentLocked(n)
            return (needsRefreshLocked(n, force: force), n.path,
                    !force && n.type == .regular && parent.map(shouldRelistLocked) == true ? parent : nil, n.box)
        }
        cacheCounters.count(.attributes, hit: !need)
        guard need else { return box }
        // A directory's attributes and xattrs are those of its `dir/` placeholder.
        if n.type == .directory { return try await reloadPlaceholder(n) }
        if let dir = relist {
            let l = try await loadListing(dir)
            let (listed, box) = locked { (l.children[n.name] == n.ino, n.box) }
            // (A listing larger than the cache may have evicted this very info: read it alone.)
            if listed, box != nil { return box }
            if !listed {
                locked { markGoneLocked(n) }
                logger.debug("stat \(name): not found")
                throw .ENOENT
            }
        }
        if let e = failures.check(.metadata(path: name)) { throw e }
        do {
            let info = try await store.getMetadata(name)
            return keep(info, in: n)
        } catch {
            if case StorageError.objectNotFound = error { locked { markGoneLocked(n) } }
            let e = fail(error, "stat", name)
            failures.note(.metadata(path: name), e)
            throw e
        }
    }

    /// The metadata to show for `n` now: the cached one, or, when the cache evicted it after the
    /// operation found `n`, read again.
    func shownInfo(_ n: Node) async throws(Errno) -> ObjectInfo? {
        let (lacks, info) = locked { (lacksInfoLocked(n), n.info) }
        if !lacks { return info }
        return try await refreshed(n, force: true)?.info
    }
}

/// glibc's `malloc_trim(0)`: returns freed heap memory to the system (whole free pages anywhere
/// in the heap, not only at its top). A few milliseconds for a heap of 100 MB: only after work
/// that freed a lot.
func releaseFreedMemory() { _ = mallocTrim(0) }

/// A listing (or a readdir snapshot) of at least this many names is large: once its pages or
/// snapshot are freed, the freed heap is given back at once (`releaseFreedMemory`). Below it the
/// trim would cost more than the little memory it returns.
let largeListingNames = 5000

@_silgen_name("malloc_trim")
private func mallocTrim(_ pad: Int) -> Int32
