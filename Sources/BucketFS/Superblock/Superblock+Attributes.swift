import Foundation
import FuseKit
import StorageModel

/// The superblock's lookups, attributes, xattr sources, metadata cache and statistics: each
/// method one critical section (Superblock.swift).
extension Superblock {
    // MARK: - lookups and attributes

    /// The node an operation found goes to the kernel (lookup, create of an existing name): it is
    /// put back in the table if the cache dropped it meanwhile, its lookup count rises, and its
    /// entry shows `shown` when the cache evicted the node's own metadata since.
    func lookedUp(_ found: Node, shown: ObjectInfo?) -> FuseEntry {
        locked { h in
            let n = h.attach(found)
            h[n].lookups += 1
            return stat.entry(n, info: h[n].info ?? shown, now: now, h)
        }
    }

    func forget(ino: UInt64, nlookup: UInt64) {
        locked { h in
            guard ino != Self.rootIno, let n = h.table[ino] else { return }
            h[n].lookups = h[n].lookups > nlookup ? h[n].lookups - nlookup : 0
            guard h[n].lookups == 0 else { return }
            // The kernel no longer knows this number: the node goes, with its listing, unless
            // something else holds it. A directory its parent's cached listing names stays, and
            // keeps its own fresh listing, until the cache's bound or the TTL lets that go
            // (docs/SEMANTICS.md §6, "A listing outlives the kernel's forgetting").
            h.dropIfUnused(n)
            // Kept: the kernel's copy of its entries went with its inode (the next handle fills one).
            if h.table.isTabled(n) { h[n].listing?.kernelCopy = nil }
        }
    }

    /// readdirplus entries that reached the kernel count as lookups.
    func noteLookup(ino: UInt64) {
        locked { h in if let n = h.table[ino] { h[n].lookups += 1 } }
    }

    /// `n`'s attributes; `shown` when the cache evicted its metadata after the operation read it.
    func attributes(of n: Node, shown: ObjectInfo? = nil) -> FileAttributes {
        locked { h in stat.attributes(n, info: h[n].info ?? shown, now: now, h) }
    }

    /// getattr with no I/O: nil when the metadata must be read first.
    func cachedAttributes(ino: UInt64) -> (FileAttributes, Double)? {
        locked { h in
            guard let n = h.table[ino], !h.needsRefresh(n) else { return nil }
            counters.count(.attributes, hit: true)
            return (stat.attributes(n, now: now, h), ttl)
        }
    }

    /// What xattrs are answered from: a staged file's pending metadata, else the object's.
    struct XattrSource {
        let isDirectory: Bool
        /// The object's path (for properties whose default depends on the name).
        let path: String
        let stagedMetadata: WritableMetadata?
        let info: ObjectInfo?
    }

    /// `n`'s xattr source, with `shown` when the cache evicted its metadata after it was read.
    func xattrSource(_ n: Node, shown: ObjectInfo?) -> XattrSource {
        locked { h in XattrSource(isDirectory: n.type == .directory, path: h[n].path, stagedMetadata: h.stageState(of: n)?.metadata, info: h[n].info ?? shown) }
    }

    /// The content type inferred here for `n`'s object (`Node.inferredType`).
    func inferredType(of n: Node) -> String? {
        locked { h in h[n].inferredType }
    }

    /// Records the content type inferred here for `n`'s object (nil: it was given, or replaced).
    func setInferredType(_ n: Node, _ type: String?) {
        locked { h in h[n].inferredType = type }
    }

    /// getxattr and listxattr with no I/O: nil when the metadata must be read first.
    func cachedXattrSource(ino: UInt64) -> XattrSource? {
        locked { h in
            guard let n = h.table[ino], !h.needsRefresh(n) else { return nil }
            counters.count(.attributes, hit: true)
            return XattrSource(isDirectory: n.type == .directory, path: h[n].path, stagedMetadata: h.stageState(of: n)?.metadata, info: h[n].info)
        }
    }

    // MARK: - the metadata cache

    /// Caches metadata just read for `n` (fresh for the TTL; nil: known absent, a directory without
    /// placeholder), within the bound, and returns it for the caller to answer with even if the
    /// bound evicts it at once. `alongWith` runs in the same critical section (the upload part's
    /// transition of `n`'s stage that goes with it).
    @discardableResult
    func setInfo(_ n: Node, _ info: ObjectInfo?, alongWith: ((borrowing Held) -> Void)? = nil) -> InfoBox? {
        locked { h in
            alongWith?(h)
            h.setInfo(n, info, expiry: now + ttl)
            let box = h[n].box
            h.trimCache()
            return box
        }
    }

    /// Marks the start of a read of the bucket (a listing, a lookup, a GET): what it brings is
    /// applied with this mark, and does not overwrite metadata that changed here after it (an
    /// upload or a PATCH that ended while the read was under way knows better).
    func readBegins() -> UInt64 { locked { h in h.cache.changes } }

    /// Caches metadata a GET that began at `since` read for `n`, unless `n`'s metadata changed
    /// here after that; returns what `n` shows now.
    func setReadInfo(_ n: Node, _ info: ObjectInfo, since: UInt64) -> InfoBox? {
        locked { h in
            guard h[n].infoSeq <= since else { return h[n].box ?? InfoBox(info) }
            h.setInfo(n, info, expiry: now + ttl)
            let box = h[n].box
            h.trimCache()
            return box
        }
    }

    /// `n`'s metadata is read again at its next use; with `parentListing`, its directory is
    /// listed again too (the file shows the bucket's state again).
    func expire(_ n: Node, parentListing: Bool) {
        locked { h in h.expire(n, parentListing: parentListing) }
    }


    /// A stat or a listing that began at `since` found `n`'s object missing. False (and nothing
    /// changes) when `n` changed here after that: the read knows less than the node. A node this
    /// mount already unlinked stays so (it left the path index).
    @discardableResult
    func markGone(_ n: Node, since: UInt64 = .max) -> Bool {
        locked { h in
            guard h[n].infoSeq <= since else { return false }
            if h[n].presence == .present { h[n].presence = .gone }
            h.cache.noteChange(n, h)
            return true
        }
    }

    /// The cached metadata of `n`, and whether it shows attributes that need metadata the cache
    /// evicted, or that expired in a listing of names only (then it must be read again before it
    /// is shown).
    func cachedInfo(_ n: Node) -> (lacks: Bool, info: ObjectInfo?) {
        locked { h in
            var expired = false
            if n.type == .regular, let l = h.parentListing(of: n) { expired = h.expiredByName(n, in: l) }
            return (h.lacksInfo(n) || expired, h[n].info)
        }
    }

    /// `n`'s cached metadata (or `fallback`) and its path.
    func infoAndPath(_ n: Node, fallback: ObjectInfo? = nil) -> (info: ObjectInfo?, path: String) {
        locked { h in (h[n].info ?? fallback, h[n].path) }
    }

    /// What a refresh of `n` must do: whether it is needed (TTL passed, or `force`), `n`'s path,
    /// the parent to list again instead of a GET (a file whose directory's listing expired too),
    /// and the metadata it has now.
    func refreshPlan(_ n: Node, force: Bool, opening: Bool = false) -> (need: Bool, path: String, relist: Node?, box: InfoBox?) {
        locked { h in
            let parent = h.table.parent(of: n, h)
            return (h.needsRefresh(n, force: force, opening: opening), h[n].path,
                    !force && n.type == .regular && parent.map { h.shouldRelist($0) } == true ? parent : nil, h[n].box)
        }
    }

    /// Whether listing `l` names `n`, and `n`'s metadata now.
    func isListed(_ n: Node, in l: Listing) -> (listed: Bool, box: InfoBox?) {
        locked { h in (l.children[h[n].name] == n.ino, h[n].box) }
    }

    // MARK: - statistics

    func statistics(into s: inout CoreStatistics) {
        locked { h in
            let t = now
            s.inodes = h.table.count
            s.cachedEntries = h.cache.entries
            s.maxCachedEntries = config.maxCachedEntries
            for n in h.table.nodes.values {
                if h[n].info != nil, h[n].infoExpiry > t { s.cachedAttributes += 1 }
                if let l = h[n].listing, l.isFresh(at: t) { s.cachedListings += 1; s.cachedListingEntries += l.children.count }
                if let st = h[n].staged {
                    s.stagedFiles += 1
                    if h[st].state.unsaved { s.dirtyFiles += 1; s.pendingBytes += h[st].size }
                }
            }
            s.openFiles = h.handles.files.count
        }
    }
}

extension Held {
    func expire(_ n: Node, parentListing: Bool) {
        self[n].infoExpiry = 0
        if parentListing, let parent = table.parent(of: n, self) { dropListing(parent) }
    }
}
