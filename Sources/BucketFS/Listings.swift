import Foundation
import FuseKit
import StorageModel

/// The metadata cache (SPEC §6): directory listings that fill every child's attributes, their
/// TTL, and the per-name and per-file revalidation when a listing is missing or expired.
extension BucketFileSystem {
    // MARK: - listing

    /// Lists a directory (all pages) and fills the attribute cache of every child.
    func loadListing(_ dir: Node) async throws(Errno) {
        let prefix = locked { dir.childPrefix }
        if let e = failures.check("l:" + prefix) { throw e }
        var token: String? = nil
        var dirs: [String] = []
        var files: [String: ObjectInfo] = [:]
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
                    if let name = names.visibleName(item.name, relativeTo: prefix, isPrefix: false) { files[name] = item }
                }
                token = page.nextPageToken
            } while token != nil
        } catch {
            let e = fail(error, "list", prefix)
            failures.note("l:" + prefix, e)
            throw e
        }
        let t = now
        locked {
            var children: [String: UInt64] = [:]
            for name in dirs {
                let n = nodeLocked(path: prefix + name, type: .directory)
                children[name] = n.ino
                if files[name] != nil {
                    names.hiddenLog.warn("'\(prefix + name)' is both an object and a prefix: the directory is shown; the object stays reachable through `bucketfs cat/stat`", key: "clash:" + prefix + name)
                }
            }
            for (name, info) in files where children[name] == nil {
                let n = nodeLocked(path: prefix + name, type: .regular)
                n.removed = false
                if n.staged == nil || !(n.staged!.dirty) { n.info = info }
                n.infoExpiry = t + config.metadataTTL
                children[name] = n.ino
            }
            // Files created here and not yet uploaded stay visible (even when this directory had
            // no listing yet when they were created).
            for n in nodes.values where n.type == .regular && !n.removed && n.staged?.baseGeneration == 0 {
                if StoragePath.parent(n.path) == dir.path, children[n.name] == nil { children[n.name] = n.ino }
            }
            if dir.ino != Self.rootIno {
                dir.info = placeholder
                dir.infoExpiry = t + config.metadataTTL
            }
            dir.listing = Listing(children: children, expiry: t + config.metadataTTL)
        }
    }

    func freshListing(_ dir: Node) -> Listing? {
        locked { dir.listing.flatMap { $0.expiry > now ? $0 : nil } }
    }

    /// Resolves one name in a directory: from a fresh listing, else with a get and a one-item list.
    func resolve(_ parent: Node, _ name: String) async throws(Errno) -> Node {
        let path = try names.childPath(parent.path, name)
        if let l = freshListing(parent) {
            guard let ino = l.children[name], let n = locked({ nodes[ino] }), !n.removed else { throw .ENOENT }
            return n
        }
        if let local = locked({ () -> Node? in
            guard let ino = byPath["f:" + path], let n = nodes[ino], let s = n.staged, s.baseGeneration == 0, !n.removed else { return nil }
            return n
        }) { return local }
        if StoragePath.mountProblem(path) != nil { throw .ENOENT }
        if let e = failures.check("s:" + path) { throw e }
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
            failures.note("s:" + path, e)
            throw e
        }
        let t = now
        return try locked { () throws(Errno) -> Node in
            if !listed.items.isEmpty || !listed.prefixes.isEmpty {
                let n = nodeLocked(path: path, type: .directory)
                n.removed = false
                if let ph = listed.items.first, ph.name == path + "/" { n.info = ph } else { n.info = nil }
                n.infoExpiry = t + config.metadataTTL
                return n
            }
            guard let info else { throw .ENOENT }
            let n = nodeLocked(path: path, type: .regular)
            n.removed = false
            if n.staged == nil || !(n.staged!.dirty) { n.info = info }
            n.infoExpiry = t + config.metadataTTL
            return n
        }
    }

    /// Refreshes a file's metadata when its TTL has passed (no request while fresh or staged).
    func refreshed(_ n: Node, force: Bool = false) async throws(Errno) {
        let (need, name) = locked { () -> (Bool, String) in
            let stale = force || n.infoExpiry <= now
            // A staged file keeps its metadata unless forced (rename and 412 retries must re-read).
            if n.ino == Self.rootIno || (n.staged != nil && !force) || n.removed { return (false, n.path) }
            return (stale, n.path)
        }
        guard need else { return }
        // A directory's attributes and xattrs are those of its `dir/` placeholder.
        if n.type == .directory { try await reloadPlaceholder(n); return }
        if let e = failures.check("s:" + name) { throw e }
        do {
            let info = try await store.getMetadata(name)
            locked {
                n.info = info
                n.infoExpiry = now + config.metadataTTL
            }
        } catch {
            if case StorageError.objectNotFound = error { locked { n.removed = true } }
            let e = fail(error, "stat", name)
            failures.note("s:" + name, e)
            throw e
        }
    }
}
