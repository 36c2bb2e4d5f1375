import Foundation
import FuseKit
import StorageModel

/// The metadata cache (docs/SEMANTICS.md §6): directory listings that fill every child's attributes, their
/// TTL, and the per-name and per-file revalidation when a listing is missing or expired. The
/// requests are made here; what they bring is applied by the superblock.
extension BucketFileSystem {
    // MARK: - listing

    /// Lists a directory (all pages) and fills the attribute cache of every child. Returns the
    /// new listing (fresh even with a TTL of 0, for the caller that asked). With `handle`, that
    /// directory handle's snapshot is taken from it at once, before anything can be evicted.
    @discardableResult
    func loadListing(_ dir: Node, into handle: DirHandle? = nil) async throws(Errno) -> Listing {
        try await loadListing(dir, into: handle, pagesAtMost: nil)!
    }

    /// `loadListing`, when the directory's listing fits in `pagesAtMost` pages; nil (nothing
    /// applied) when it does not.
    ///
    /// Each page is applied as it arrives (`ListingBuild`): what the pages bring is held once, by
    /// the nodes and the metadata cache, and never also as pages or as a list of the whole
    /// directory's entries waiting for the last page (docs/SEMANTICS.md §6).
    func loadListing(_ dir: Node, into handle: DirHandle? = nil, pagesAtMost: Int?) async throws(Errno) -> Listing? {
        let prefix = superblock.childPrefix(of: dir)
        if let e = failures.check(.listing(prefix: prefix)) { throw e }
        let since = superblock.readBegins()
        let build = superblock.beginListing(dir, prefix: prefix, since: since)
        var placeholder: ObjectInfo? = nil
        var placeholderUnread = false
        var bucketShowsSome = false   // anything under the prefix, shown or hidden
        // One page's entries, applied at once. A file listed by name only (nil info) has its
        // metadata read when something asks for it (a stat: `shownInfo`), so a names-only `ls`
        // costs list requests only.
        func take(_ page: ListPage) {
            if !page.prefixes.isEmpty || !page.items.isEmpty || !page.names.isEmpty { bucketShowsSome = true }
            var dirs: [String] = []
            var files: [(name: String, info: ObjectInfo?)] = []
            files.reserveCapacity(page.items.count + page.names.count)
            var subdirectoryPlaceholders: [String: ObjectInfo] = [:]
            for p in page.prefixes {
                if let name = names.visibleName(p, relativeTo: prefix, isPrefix: true) { dirs.append(name) }
            }
            for item in page.items {
                if item.name == prefix { placeholder = item; continue }
                // A subdirectory's placeholder (includeTrailingDelimiter): its attributes,
                // so that showing it costs no GET of its own.
                let rest = item.name.utf8.dropFirst(prefix.utf8.count)  // the server's names start with the prefix
                if rest.count > 1, rest.last == UInt8(ascii: "/"), !rest.dropLast().contains(UInt8(ascii: "/")) {
                    subdirectoryPlaceholders[String(Substring(rest.dropLast()))] = item
                    continue
                }
                if let name = names.visibleName(item.name, relativeTo: prefix, isPrefix: false) { files.append((name, item)) }
            }
            for full in page.names {
                if let name = names.visibleName(full, relativeTo: prefix, isPrefix: false) { files.append((name, nil)) }
            }
            if page.metadataSkipped { placeholderUnread = true }
            superblock.applyListedPage(build, dirs: dirs, files: files,
                                       subdirectoryPlaceholders: subdirectoryPlaceholders, at: now)
        }
        do {
            let request = ListRequest(prefix: prefix, delimiter: "/", maxResults: config.listPageSize,
                                      includeTrailingDelimiter: true, namesOnly: true)
            if let most = pagesAtMost {
                // Worth it only when the directory fits in `most` pages: walked page by page, and
                // given up at the first page past the bound (applied only then: nothing is
                // applied of a listing given up).
                var pages: [ListPage] = []
                var next = request
                repeat {
                    let page = try await store.list(next)
                    pages.append(page)
                    next.pageToken = page.nextPageToken
                    if pages.count >= most, next.pageToken != nil {
                        superblock.abandonListing(build)
                        return nil
                    }
                } while next.pageToken != nil
                for page in pages { take(page) }
            } else {
                // Several name ranges at once when there is more than a page (RangeListing).
                try await rangeListing.list(request, from: store, each: take)
            }
        } catch {
            superblock.abandonListing(build)
            let e = fail(error, "list", prefix)
            failures.note(.listing(prefix: prefix), e)
            throw e
        }
        let (listing, shown) = superblock.finishListing(build, placeholder: placeholderUnread ? .unread : .read(placeholder),
                                               at: now, into: handle)
        let dirPath = superblock.path(of: dir)
        if !bucketShowsSome, listing.children.isEmpty, emptied.expired(dirPath),
           !superblock.hasPendingFiles(below: dirPath) {
            // Emptied here, its TTL over, and the bucket shows nothing: gone, as a lookup finds
            // (and the empty listing is not kept to say otherwise).
            superblock.dropListing(dir)
            throw .ENOENT
        }
        if bucketShowsSome { emptied.forget(dirPath) }
        if shown + listing.hiddenFiles.count >= largeListingNames {
            // The pages of a large listing were parsed into many short-lived objects, and the
            // metadata it brought may have evicted as much again: give the freed memory back
            // now rather than keep it as the process's high-water mark.
            releaseFreedMemory()
        }
        for name in listing.hiddenFiles.keys {
            names.hiddenLog.warn("'\(prefix + name)' is both an object and a prefix: the directory is shown; the object stays reachable through `bucketfs cat/stat`", key: "clash:" + prefix + name)
        }
        return listing
    }

    /// lookup with no I/O: from a fresh listing of the parent (a miss there is ENOENT).
    public func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? {
        superblock.cachedLookup(parent: parent, name: name)
    }

    /// Resolves one name in a directory: from a fresh listing, else by asking the bucket for the name
    /// (`askBucket`). A directory emptied here within the TTL is found even when the bucket no
    /// longer shows it (`EmptiedDirectories`).
    func resolve(_ parent: Node, _ name: String) async throws(Errno) -> Node {
        do {
            return try await resolveShown(parent, name)
        } catch where error == .ENOENT {
            let path = try names.childPath(superblock.path(of: parent), name)
            guard emptied.kept(path) else { throw error }
            return try superblock.bindLookedUp(path, listed: ListPage(prefixes: [path + "/"]), info: nil, at: now)
        }
    }

    private func resolveShown(_ parent: Node, _ name: String) async throws(Errno) -> Node {
        let path = try names.childPath(superblock.path(of: parent), name)
        if let l = superblock.freshListing(parent) {
            cacheCounters.count(.listing, hit: true)
            guard let n = superblock.child(l, name) else { throw .ENOENT }
            return n
        }
        cacheCounters.count(.listing, hit: false)
        if superblock.shouldRelist(parent) {
            // Listed before and expired: one listing answers this name and all its siblings,
            // and the lookups of its siblings that come meanwhile (`SharedRelists`).
            let l = try await relists.listing(of: parent) { () async throws(Errno) -> Listing in try await self.loadListing(parent) }
            guard let n = superblock.child(l, name) else { throw .ENOENT }
            return n
        }
        if let local = superblock.pendingNewFile(at: path) { return local }
        if StoragePath.mountProblem(path) != nil { throw .ENOENT }
        // A directory being read (a readdir pass holds its listing): not asked again.
        if let dir = superblock.directoryInPass(at: path) {
            cacheCounters.count(.listing, hit: true)
            return dir
        }
        // Found missing within the TTL (docs/SEMANTICS.md §6): a create's own check after the
        // kernel's lookup, rsync's lookups of one name again and again.
        if superblock.knownMissing(path) {
            cacheCounters.count(.listing, hit: true)
            throw .ENOENT
        }
        if superblock.listsAfterMiss(parent) {
            // A name was missing here a moment ago: something is filling this directory, and
            // asks for names that are not there yet. One page answers them all, if it holds the
            // whole directory.
            if let l = try await loadListing(parent, pagesAtMost: 1) {
                if let n = superblock.child(l, name) { return n }
                // Named, but its node left the table already (a cache smaller than the
                // listing): asked by name below.
                if l.children[name] == nil { throw .ENOENT }
            } else {
                superblock.noteLarge(parent)
            }
        }
        if let e = failures.check(.metadata(path: path)) { throw e }
        let since = superblock.readBegins()
        let info: ObjectInfo?
        let listed: ListPage
        do {
            (listed, info) = try await askBucket(path)
        } catch {
            let e = fail(error, "lookup", path)
            failures.note(.metadata(path: path), e)
            throw e
        }
        do {
            return try superblock.bindLookedUp(path, listed: listed, info: info, at: now, since: since)
        } catch {
            if error == .ENOENT { superblock.noteMissing(path, in: parent) }
            throw error
        }
    }

    /// What the bucket holds at `path`: whether it is a directory (`listed` shows something under
    /// `path/`, its placeholder first when it has one) and the object named `path`. One list
    /// request where the store answers a listing under a partial name (`NameProbe`); else, or
    /// when that page cannot tell, a GET of the name and a one-item list of `path/` at once.
    private func askBucket(_ path: String) async throws -> (listed: ListPage, info: ObjectInfo?) {
        if store.listsUnderPartialNames {
            switch NameProbe.answer(try await store.list(NameProbe.request(path, folders: store.folders != nil)), for: path) {
            case .missing?: return (ListPage(), nil)
            case .file(let info)?: return (ListPage(), info)
            case .directory(let placeholder)?: return (ListPage(prefixes: [path + "/"], items: placeholder.map { [$0] } ?? []), nil)
            case nil: break
            }
        }
        async let meta: Result<ObjectInfo?, any Error> = { () async -> Result<ObjectInfo?, any Error> in
            do { return .success(try await store.getMetadata(path)) } catch StorageError.objectNotFound {
                return .success(nil)
            } catch {
                return .failure(error)
            }
        }()
        async let page = store.list(ListRequest(prefix: path + "/", delimiter: "/", maxResults: 1))
        var listed = try await page
        let got = await meta
        if listed.items.isEmpty, listed.prefixes.isEmpty, let folders = store.folders,
           (try? await folders.getFolder(path + "/")) != nil {
            // An empty folder of a hierarchical bucket: nothing under it to list.
            listed.prefixes = [path + "/"]
        }
        if !listed.items.isEmpty || !listed.prefixes.isEmpty {
            // A directory (it wins over an object of the same name): what the GET of the name
            // said does not matter, not even a refusal (Security Rules may let a user list
            // `users/` but not read an object named `users`).
            return (listed, try? got.get())
        }
        return (listed, try got.get())
    }

    /// getattr with no I/O: nil when the metadata must be read first.
    public func cachedGetattr(ino: UInt64) -> (FileAttributes, Double)? {
        superblock.cachedAttributes(ino: ino)
    }

    /// Refreshes a file's metadata when its TTL has passed (no request while fresh or staged): by
    /// listing its directory again when that listing expired too (one request for all siblings),
    /// else with a GET. In a listing of names only (firebase://), which brings no metadata, the
    /// GET reads the metadata of the next files listed whose metadata expired too, many at once
    /// (`Superblock.statAhead`): `getfattr -d` or `ls -l` over a directory whose entries expired
    /// costs about N / `--max-connections` round trips, not N. Returns the metadata it ended
    /// with, which the caller shows even if the cache evicts it from the node meanwhile.
    /// `opening`: for an open, which a readdir pass does not hold (close-to-open).
    @discardableResult
    func refreshed(_ n: Node, force: Bool = false, opening: Bool = false) async throws(Errno) -> InfoBox? {
        let (need, name, relist, box) = superblock.refreshPlan(n, force: force, opening: opening)
        cacheCounters.count(.attributes, hit: !need)
        guard need else { return box }
        // A directory's attributes and xattrs are those of its `dir/` placeholder.
        if n.type == .directory { return try await reloadPlaceholder(n) }
        if let dir = relist {
            let since = superblock.readBegins()
            let l = try await loadListing(dir)
            let (listed, box) = superblock.isListed(n, in: l)
            // (A listing larger than the cache may have evicted this very info: read it alone.
            // A listing of names only brought none: read below, with its siblings'.)
            if listed, box != nil, !l.namesOnly { return box }
            // Unlisted: gone, unless it changed here while the listing was read (then ask).
            if !listed, superblock.markGone(n, since: since) {
                logger.debug("stat \(name): not found")
                throw .ENOENT
            }
        }
        if let e = failures.check(.metadata(path: name)) { throw e }
        // (A forced refresh is a check of this file alone; `shownInfo` reads ahead itself.)
        let ahead = force ? [] : superblock.statAhead(after: n, namesOnly: true)
        async let aheadDone: Void = readInfo(of: ahead)
        let since = superblock.readBegins()
        do {
            let info = try await store.getMetadata(name)
            let box = superblock.setReadInfo(n, info, since: since)
            await aheadDone
            return box
        } catch {
            if case StorageError.objectNotFound = error { superblock.markGone(n, since: since) }
            let e = fail(error, "stat", name)
            failures.note(.metadata(path: name), e)
            throw e
        }
    }

    /// The metadata to show for `n` now: the cached one, or, when the cache evicted it after the
    /// operation found `n` (or it expired in a listing of names only), read again.
    func shownInfo(_ n: Node) async throws(Errno) -> ObjectInfo? {
        let (lacks, info) = superblock.cachedInfo(n)
        if !lacks { return info }
        // A file listed by name only (firebase://): the next ones listed are likely stat'ed next
        // (`ls -l`), so their metadata is read at the same time (`Superblock.statAhead`), theirs
        // too when it expired.
        let ahead = superblock.statAhead(after: n)
        async let aheadDone: Void = readInfo(of: ahead)
        // A subdirectory whose placeholder is not known: the next ones in its directory are
        // likely walked into next (`ls -R`, `find`), so their placeholders are read with it.
        let dirsAhead = superblock.placeholdersAhead(after: n)
        async let dirsDone: Void = readPlaceholders(of: dirsAhead)
        let box = try await refreshed(n, force: true)
        await aheadDone
        await dirsDone
        return box?.info
    }

    /// Reads the placeholders of directories at once, for a lookup's read-ahead; what fails is
    /// left for the directory's own lookup.
    private func readPlaceholders(of nodes: [Node]) async {
        guard !nodes.isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            for c in nodes {
                group.addTask { [self] in _ = try? await reloadPlaceholder(c) }
            }
        }
    }

    /// Reads the metadata of files listed by name only, at once, for a stat-ahead; what fails is
    /// left for the file's own stat.
    private func readInfo(of nodes: [Node]) async {
        guard !nodes.isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            for c in nodes {
                group.addTask { [self] in
                    let (path, since) = (superblock.path(of: c), superblock.readBegins())
                    do {
                        let info = try await store.getMetadata(path)
                        _ = superblock.setReadInfo(c, info, since: since)
                    } catch StorageError.objectNotFound {
                        _ = superblock.markGone(c, since: since)
                    } catch {}
                }
            }
        }
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
