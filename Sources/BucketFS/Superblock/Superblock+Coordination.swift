import Foundation
import FuseKit
import StorageModel

/// What the superblock's parts do together, with the lock held (`Held`): the methods every
/// critical section builds on (Superblock.swift).
extension Held {
    // MARK: - coordination between the parts

    /// The directory holding `n`, when known.
    func parent(of n: Node) -> Node? { table.parent(of: n, self) }

    /// The cached listing of `n`'s directory.
    func parentListing(of n: Node) -> Listing? { parent(of: n).flatMap { self[$0].listing } }
    //
    // Nodes leave the table when nothing holds them: a node stays (its number bound to its path)
    // while the kernel holds it (`lookups` > 0), it has local content or an open handle, an open
    // directory snapshot holds it, or a cached listing of its parent names it. Once none of these
    // holds, it is dropped (`Held.dropIfUnused`) with its cached state; the path gets its number
    // back if it is seen again.

    /// The node for a path and type, made if needed.
    /// The node for a path and type, made if needed; the path is no longer known missing.
    func node(path: String, type: FileType) -> Node {
        negative.forget(path)
        return table.node(path: path, type: type, self)
    }

    /// Binds `n`'s path to `n` in the path index; a node bound there before is unlinked and its
    /// listing goes.
    func bindPath(_ n: Node) {
        negative.forget(self[n].path)
        if let old = table.bind(n, self) {
            self[old].presence = .unlinked
            dropListing(old)
        }
    }

    /// A child of a listing, if it is a live node.
    func child(_ l: Listing, _ name: String) -> Node? {
        guard let ino = l.children[name], let n = table[ino], !self[n].removed else { return nil }
        return n
    }

    /// Whether `n`'s metadata must be read before it is shown: its TTL has passed, and no readdir
    /// pass holds it (or `force`). An open (`opening`) is not held: close-to-open, it sees the
    /// current generation once the TTL has passed. A staged file keeps its metadata unless forced
    /// (rename and 412 retries must re-read).
    func needsRefresh(_ n: Node, force: Bool = false, opening: Bool = false) -> Bool {
        if n.ino == Superblock.rootIno || self[n].removed { return false }
        if self[n].staged != nil && !force { return false }
        return force || (self[n].infoExpiry <= now && (opening || !heldByPass(n)))
    }

    /// Whether a readdir pass under way over `n`'s directory holds `n`'s metadata: it arrived
    /// since the listing the pass reads began, and lives the TTL from the pass's end, for every
    /// operation but an open (lookup, getattr, xattrs), however long the pass lasts
    /// (docs/SEMANTICS.md §6).
    func heldByPass(_ n: Node) -> Bool {
        guard self[n].infoExpiry > 0, let l = parentListing(of: n), l.passes > 0 else { return false }
        return self[n].infoExpiry >= l.heldSince + ttl
    }

    /// Whether a directory's listing should be refreshed by listing it again (rather than a
    /// request per name): it was listed before and has expired (and no readdir pass holds it).
    /// With a TTL of 0 every question is a request of its own, so a single GET is cheaper.
    func shouldRelist(_ dir: Node) -> Bool {
        ttl > 0 && self[dir].listing.map { !$0.isFresh(at: now) } == true
    }

    /// Caches `info` for `n` until `expiry` (the caller trims the cache when done adding).
    func setInfo(_ n: Node, _ info: ObjectInfo?, expiry: Double) {
        cache.set(n, info, expiry: expiry, tabled: table.isTabled(n), self)
    }

    /// Forgets `n`'s info (removed, or new content).
    func clearInfo(_ n: Node) { cache.clear(n, tabled: table.isTabled(n), self) }

    /// Metadata a listing or a lookup brought for a file: cached, unless the file has unsaved
    /// content here (whose metadata stays until its upload), whose expiry only moves.
    func keepListedInfo(_ n: Node, _ info: ObjectInfo, expiry: Double, since: UInt64) {
        // Metadata set here after the read began (an upload that ended meanwhile) is newer.
        if self[n].infoSeq > since { return }
        if !(self.stageState(of: n)?.state.unsaved ?? false) {
            setInfo(n, info, expiry: expiry)
        } else {
            self[n].infoExpiry = expiry
        }
    }

    /// Caches a directory's listing (queued last, or in a `place` reserved for it), replacing the
    /// one it had: children of the old listing that the new one no longer names may be dropped.
    func setListing(_ dir: Node, _ listing: Listing, place: UInt64? = nil) {
        var listing = listing
        lastListingSerial += 1
        listing.serial = lastListingSerial
        listing.passes = 0
        guard let old = cache.setListing(dir, listing, place: place, self) else { return }
        for (name, ino) in old.children where listing.children[name] != ino {
            if let c = table[ino] { dropIfUnused(c) }
        }
    }

    /// Forgets a directory's listing (the next readdir lists it again); its children that
    /// nothing else holds are dropped.
    func dropListing(_ dir: Node) {
        guard let old = cache.dropListing(dir, self) else { return }
        for ino in old.children.values {
            if let c = table[ino] { dropIfUnused(c) }
        }
    }

    /// Evicts the oldest cached infos and listings until the count is within
    /// `maxCachedEntries`. Pinned infos (local content, open handles) go to the back of the
    /// queue. Each ticket is looked at at most once per call.
    func trimCache() {
        let limit = config.maxCachedEntries
        var openInos: Set<UInt64>? = nil
        var budget = cache.order.queued
        while cache.entries > limit, budget > 0, let t = cache.popOldest() {
            budget -= 1
            guard let n = table[t.ino] else { continue }
            if t.listing {
                guard self[n].listing != nil, self[n].listingTicket == t.number else { continue }
                dropListing(n)
            } else {
                guard self[n].box != nil, self[n].infoTicket == t.number else { continue }
                if openInos == nil { openInos = handles.openFileInos }
                if self[n].staged != nil || openInos!.contains(n.ino) {
                    cache.requeueInfo(n, self)
                    continue
                }
                cache.evict(n, tabled: true, self)
            }
        }
        cache.compactIfNeeded { t in
            guard let n = table[t.ino] else { return false }
            return t.listing ? self[n].listingTicket == t.number : self[n].infoTicket == t.number
        }
    }

    /// Whether `n` shows attributes that need its info, and the info is not cached: a file not
    /// staged here whose info was evicted (a directory's attributes need none).
    func lacksInfo(_ n: Node) -> Bool {
        lacksFileInfo(n) || placeholderUnknown(n)
    }

    /// A file not staged here whose info was evicted.
    func lacksFileInfo(_ n: Node) -> Bool {
        n.type == .regular && self[n].box == nil && self[n].staged == nil && !self[n].removed
    }

    /// A directory whose attributes come from its placeholder (POSIX metadata on) and whose
    /// placeholder was never read (a listing names child directories without their
    /// placeholders) or was evicted: a prefix-only directory read as such has an expiry.
    func placeholderUnknown(_ n: Node) -> Bool {
        config.posixMetadata && n.type == .directory && n.ino != Superblock.rootIno && self[n].box == nil
            && self[n].infoExpiry == 0 && !self[n].removed
    }

    /// Drops `n` from the table when nothing holds it any more: the kernel forgot it, it has no
    /// local content, handle or snapshot, and no cached listing of its parent names it. Its
    /// cached state goes with it (a listing, its children in turn).
    func dropIfUnused(_ n: Node) {
        guard n.ino != Superblock.rootIno, self[n].lookups == 0, self[n].staged == nil, self[n].snapshotPins == 0,
              table.isTabled(n), !handles.holds(n.ino) else { return }
        // (A node found gone stays while a listing names it: within its TTL the listing answers
        // as it did, whether or not the kernel forgot the node meanwhile.)
        if self[n].presence != .unlinked, let parent = table.parent(of: n, self), self[parent].listing?.children[self[n].name] == n.ino { return }
        dropListing(n)
        cache.detached(n, self)
        table.remove(n, self)
    }

    /// The node to hand to the kernel for `n`, which an operation under way holds: `n` itself,
    /// put back in the table if it was dropped meanwhile, or the node its path is bound to now.
    func attach(_ n: Node) -> Node {
        let (node, reinserted) = table.reattach(n, self)
        if reinserted { cache.attached(node, self) }
        return node
    }
}
