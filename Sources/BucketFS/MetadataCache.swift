import Foundation
import FuseKit
import StorageModel

/// The bound on cached metadata (issue 9: memory bounded by an option, not by the bucket).
///
/// What is counted: each node whose `info` is cached is one entry, each name in a cached
/// directory listing is one entry. When the count passes `MountConfig.maxCachedEntries`, the
/// oldest cached things go first (FIFO by when they were filled, O(1) amortized: a queue of
/// tickets, never a scan of the nodes). An evicted info is read again at its next use (GET, or
/// the directory's listing when that one expired too); an evicted listing is listed again at the
/// next readdir (lookups meanwhile ask per name).
///
/// Never evicted: the info of a file with local content (staged, dirty, or created here) or with
/// an open handle. A readdir snapshot holds its own references, so an open directory keeps
/// answering whatever is evicted.
///
/// Nodes themselves: a node stays in the table (number bound to its path) while the kernel holds
/// it (`lookups` > 0), it has local content or an open handle, an open directory snapshot holds
/// it, or a cached listing of its parent names it. Once none of these holds, it is dropped
/// (`dropIfUnusedLocked`), with its cached state; the path gets a new number if it is seen again.
struct CacheOrder {
    struct Ticket {
        let ino: UInt64
        let number: UInt64
        let listing: Bool
    }

    private var queue: [Ticket] = []
    private var head = 0
    private var lastNumber: UInt64 = 0
    /// Nodes whose info is cached.
    var infos = 0
    /// Cached listings, and the names they hold.
    var listings = 0
    var listedNames = 0
    /// What `maxCachedEntries` bounds.
    var entries: Int { infos + listedNames }
    /// Tickets in the queue, live and stale.
    var queued: Int { queue.count - head }
    /// The tickets in the queue, oldest first (invariant checks).
    var queuedTickets: ArraySlice<Ticket> { queue[head...] }

    /// A new ticket at the back of the queue; the caller stores its number in the node.
    mutating func push(_ ino: UInt64, listing: Bool) -> UInt64 {
        lastNumber += 1
        queue.append(Ticket(ino: ino, number: lastNumber, listing: listing))
        return lastNumber
    }

    mutating func popFront() -> Ticket? {
        guard head < queue.count else { return nil }
        let t = queue[head]
        head += 1
        if head >= 4096, head * 2 >= queue.count {
            queue.removeFirst(head)
            head = 0
        }
        return t
    }

    /// Drops stale tickets once they outnumber live ones (infos refreshed after their TTL leave
    /// one behind each time): the queue stays O(cached entries).
    mutating func compactIfNeeded(isLive: (Ticket) -> Bool) {
        guard queued > 2 * (infos + listings) + 4096 else { return }
        queue = queue[head...].filter(isLive)
        head = 0
    }
}

extension BucketFileSystem {
    // MARK: - cached info

    /// Caches `info` for `n` (nil: known absent, a directory without placeholder) until
    /// `expiry`. Caller holds `lock`; it calls `trimCacheLocked()` when done adding.
    func setInfoLocked(_ n: Node, _ info: ObjectInfo?, expiry: Double) {
        n.infoExpiry = expiry
        guard let info else {
            clearInfoLocked(n)
            return
        }
        if n.box == nil, isTabledLocked(n) { cache.infos += 1 }
        n.box = InfoBox(info)
        if isTabledLocked(n) { n.infoTicket = cache.push(n.ino, listing: false) }
    }

    /// Forgets `n`'s info (removed, or new content). Caller holds `lock`.
    func clearInfoLocked(_ n: Node) {
        if n.box != nil, isTabledLocked(n) { cache.infos -= 1 }
        n.box = nil
        n.infoTicket = 0
    }

    /// Whether `n` is the node the table holds for its number (dropped nodes may still be held by
    /// an operation under way; they count for nothing). Caller holds `lock`.
    func isTabledLocked(_ n: Node) -> Bool { nodes[n.ino] === n }

    // MARK: - cached listings

    /// Caches a directory's listing, replacing the one it had: children of the old listing that
    /// the new one no longer names may be dropped. Caller holds `lock`.
    func setListingLocked(_ dir: Node, _ listing: Listing) {
        let old = dir.listing
        if old != nil {
            cache.listings -= 1
            cache.listedNames -= old!.children.count
        }
        dir.listing = listing
        cache.listings += 1
        cache.listedNames += listing.children.count
        dir.listingTicket = cache.push(dir.ino, listing: true)
        if let old {
            for (name, ino) in old.children where listing.children[name] != ino {
                if let c = nodes[ino] { dropIfUnusedLocked(c) }
            }
        }
    }

    /// Forgets a directory's listing (the next readdir lists it again); its children that
    /// nothing else holds are dropped. Caller holds `lock`.
    func dropListingLocked(_ dir: Node) {
        guard let old = dir.listing else { return }
        cache.listings -= 1
        cache.listedNames -= old.children.count
        dir.listing = nil
        dir.listingTicket = 0
        for ino in old.children.values {
            if let c = nodes[ino] { dropIfUnusedLocked(c) }
        }
    }

    /// A name added to a cached listing (create, mkdir, rename), if `p` has one. Caller holds `lock`.
    func addChildLocked(_ p: Node, _ name: String, _ ino: UInt64) {
        guard p.listing != nil else { return }
        if p.listing!.children.updateValue(ino, forKey: name) == nil { cache.listedNames += 1 }
    }

    /// A name gone from a cached listing (unlink, rmdir, rename). Caller holds `lock`.
    func removeChildLocked(_ p: Node, _ name: String) {
        guard p.listing != nil else { return }
        if p.listing!.children.removeValue(forKey: name) != nil { cache.listedNames -= 1 }
    }

    // MARK: - eviction

    /// Evicts the oldest cached infos and listings until the count is within
    /// `maxCachedEntries`. Pinned infos (local content, open handles) go to the back of the
    /// queue. Each ticket is looked at at most once per call. Caller holds `lock`.
    func trimCacheLocked() {
        let limit = config.maxCachedEntries
        var openInos: Set<UInt64>? = nil
        var budget = cache.queued
        while cache.entries > limit, budget > 0, let t = cache.popFront() {
            budget -= 1
            guard let n = nodes[t.ino] else { continue }
            if t.listing {
                guard n.listing != nil, n.listingTicket == t.number else { continue }
                dropListingLocked(n)
            } else {
                guard n.box != nil, n.infoTicket == t.number else { continue }
                if openInos == nil { openInos = Set(handles.values.map(\.ino)) }
                if n.staged != nil || openInos!.contains(n.ino) {
                    n.infoTicket = cache.push(n.ino, listing: false)
                    continue
                }
                evictInfoLocked(n)
            }
        }
        cache.compactIfNeeded { t in
            guard let n = nodes[t.ino] else { return false }
            return t.listing ? n.listingTicket == t.number : n.infoTicket == t.number
        }
    }

    /// Drops `n`'s cached info: its next use reads it again. Caller holds `lock`.
    func evictInfoLocked(_ n: Node) {
        clearInfoLocked(n)
        n.infoExpiry = 0
    }

    /// Whether `n` shows attributes that need its info, and the info is not cached: a file not
    /// staged here whose info was evicted (a directory's attributes need none). Caller holds `lock`.
    func lacksInfoLocked(_ n: Node) -> Bool {
        n.type == .regular && n.box == nil && n.staged == nil && !n.removed
    }

    // MARK: - the inode table

    /// Drops `n` from the table when nothing holds it any more: the kernel forgot it, it has no
    /// local content, handle or snapshot, and no cached listing of its parent names it. Its
    /// cached state goes with it (a listing, its children in turn). Caller holds `lock`.
    func dropIfUnusedLocked(_ n: Node) {
        guard n.ino != Self.rootIno, n.lookups == 0, n.staged == nil, n.snapshotPins == 0,
              isTabledLocked(n) else { return }
        if handles.values.contains(where: { $0.ino == n.ino }) || dirHandles.values.contains(where: { $0.ino == n.ino }) {
            return
        }
        // (A node found gone stays while a listing names it: within its TTL the listing answers
        // as it did, whether or not the kernel forgot the node meanwhile.)
        if n.presence != .unlinked, let parent = parentLocked(n), parent.listing?.children[n.name] == n.ino { return }
        dropListingLocked(n)
        // The info stays on the object (uncounted) for an operation under way that holds it;
        // `attachLocked` counts it again should that operation hand the node to the kernel.
        if n.box != nil { cache.infos -= 1 }
        n.infoTicket = 0
        nodes.removeValue(forKey: n.ino)
        if byPath[key(n)] == n.ino { byPath.removeValue(forKey: key(n)) }
    }

    /// The node to hand to the kernel for `n`, which an operation under way holds: `n` itself,
    /// put back in the table if it was dropped meanwhile, or the node its path is bound to now.
    /// Caller holds `lock`.
    func attachLocked(_ n: Node) -> Node {
        if isTabledLocked(n) { return n }
        if n.presence != .unlinked {
            if let ino = byPath[key(n)], let bound = nodes[ino] { return bound }
            byPath[key(n)] = n.ino
        }
        nodes[n.ino] = n
        if n.box != nil {
            cache.infos += 1
            n.infoTicket = cache.push(n.ino, listing: false)
        }
        return n
    }

    /// Caches metadata just read for `n` (fresh for the TTL, within the bound) and returns it,
    /// for the caller to answer with even if the bound evicts it at once.
    func keep(_ info: ObjectInfo, in n: Node) -> InfoBox? {
        locked {
            setInfoLocked(n, info, expiry: now + config.metadataTTL)
            let box = n.box
            trimCacheLocked()
            return box
        }
    }
}
