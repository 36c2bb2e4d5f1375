import Foundation
import StorageModel

/// The bounded metadata cache: what each node has cached (its info, its listing), counted against
/// `MountConfig.maxCachedEntries` in the eviction order (`CacheOrder`), and the change count that
/// keeps a read of the bucket from overwriting what changed here after it began. A part of the
/// superblock, guarded by its lock; the superblock decides what to evict and what a node's
/// eviction drops with it (`Held.trimCache`).
///
/// What is counted: each object whose metadata or name is cached is one entry, once: a node
/// whose `info` is cached, a name in a cached directory listing, or both (a listed node's info,
/// `Node.listed`, counts with its name). When the count passes the bound, the oldest cached things go
/// first (FIFO by when they were filled, O(1) amortized: a queue of tickets, never a scan of the
/// nodes). An evicted info is read again at its next use (GET, or the directory's listing when
/// that one expired too); an evicted listing is listed again at the next readdir (lookups
/// meanwhile ask per name).
///
/// Never evicted: the info of a file with local content (staged, dirty, or created here) or
/// with an open handle. A readdir snapshot holds its own references, so an open directory keeps
/// answering whatever is evicted. Only nodes in the table are counted (`tabled`): a node dropped
/// from the table keeps its info uncounted for an operation under way that holds it.
///
/// INVARIANT: the counts equal what the nodes in the table hold; everything cached has a ticket
/// in the queue and nothing uncached has one (`Superblock.invariantViolations`).
struct MetadataCache {
    /// GUARDED_BY(Superblock.lock)
    private(set) var order = CacheOrder()
    /// Counts changes of nodes' metadata and presence (each node keeps the count of its last one,
    /// `Node.infoSeq`), so that a read of the bucket applies only what nothing here changed since
    /// it began (`Superblock.readBegins`). GUARDED_BY(Superblock.lock)
    private(set) var changes: UInt64 = 0
    /// The paths of the latest changes, so a listing that began before them is corrected by them.
    /// GUARDED_BY(Superblock.lock)
    private(set) var recent = RecentChanges()

    var entries: Int { order.entries }

    /// Caches `info` for `n` (nil: known absent, a directory without placeholder) until `expiry`.
    mutating func set(_ n: Node, _ info: ObjectInfo?, expiry: Double, tabled: Bool, _ h: borrowing Held) {
        h[n].infoExpiry = expiry
        noteChange(n, h)
        guard let info else {
            clear(n, tabled: tabled, h)
            return
        }
        if h[n].box == nil, tabled {
            order.infos += 1
            if h[n].listed { order.listedInfos += 1 }
        }
        h[n].box = InfoBox(info)
        if tabled { h[n].infoTicket = order.push(n.ino, listing: false) }
    }

    /// Forgets `n`'s info (removed, new content, or `evicted`: not a change of what is known, so a
    /// read that began before may fill it again).
    mutating func clear(_ n: Node, evicted: Bool = false, tabled: Bool, _ h: borrowing Held) {
        if !evicted { noteChange(n, h) }
        if h[n].box != nil, tabled {
            order.infos -= 1
            if h[n].listed { order.listedInfos -= 1 }
        }
        h[n].box = nil
        h[n].infoTicket = 0
    }

    /// Drops `n`'s cached info: its next use reads it again.
    mutating func evict(_ n: Node, tabled: Bool, _ h: borrowing Held) {
        clear(n, evicted: true, tabled: tabled, h)
        h[n].infoExpiry = 0
    }

    /// Something known about `n` changed here (its presence, or its info).
    mutating func noteChange(_ n: Node, _ h: borrowing Held) {
        changes += 1
        h[n].infoSeq = changes
        recent.note(changes, h[n].path, h[n].removed ? .left : .changed)
    }

    /// `path` left through this mount (a rename moved its node away): a listing that began
    /// before shows it no more.
    mutating func noteLeft(_ path: String) {
        changes += 1
        recent.note(changes, path, .left)
    }

    /// A place in the eviction order for a listing cached later (`setListing`'s `place`).
    mutating func reservePlace() -> UInt64 { order.reserve() }

    /// Caches `dir`'s listing, queued last or in the `place` reserved for it; returns the one it
    /// replaces (whose children the caller may drop).
    /// `nodes`: the table's node of a number (every listed child is in the table).
    mutating func setListing(_ dir: Node, _ listing: Listing, place: UInt64? = nil, _ h: borrowing Held) -> Listing? {
        let old = h[dir].listing
        if let old {
            order.listings -= 1
            order.listedNames -= old.children.count
            for ino in old.children.values { unlist(h.table[ino], h) }
        }
        h[dir].listing = listing
        order.listings += 1
        order.listedNames += listing.children.count
        for ino in listing.children.values { list(h.table[ino], h) }
        h[dir].listingTicket = place.map { order.insert(dir.ino, listing: true, number: $0) } ?? order.push(dir.ino, listing: true)
        return old
    }

    /// Forgets `dir`'s listing; returns it (the caller may drop its children).
    mutating func dropListing(_ dir: Node, _ h: borrowing Held) -> Listing? {
        guard let old = h[dir].listing else { return nil }
        order.listings -= 1
        order.listedNames -= old.children.count
        for ino in old.children.values { unlist(h.table[ino], h) }
        h[dir].listing = nil
        h[dir].listingTicket = 0
        return old
    }

    /// A name added to `p`'s cached listing (create, mkdir, rename), if it has one.
    mutating func addChild(_ p: Node, _ name: String, _ ino: UInt64, _ h: borrowing Held) {
        guard h[p].listing != nil else { return }
        if let old = h[p].listing!.children.updateValue(ino, forKey: name) {
            if old != ino { unlist(h.table[old], h) } else { return }
        } else {
            order.listedNames += 1
        }
        list(h.table[ino], h)
    }

    /// A name gone from `p`'s cached listing (unlink, rmdir, rename).
    mutating func removeChild(_ p: Node, _ name: String, _ h: borrowing Held) {
        guard h[p].listing != nil else { return }
        if let old = h[p].listing!.children.removeValue(forKey: name) {
            order.listedNames -= 1
            unlist(h.table[old], h)
        }
    }

    /// `n` is named by a cached listing now: its cached info counts with its name.
    private mutating func list(_ n: Node?, _ h: borrowing Held) {
        guard let n, !h[n].listed else { return }
        h[n].listed = true
        if h[n].box != nil { order.listedInfos += 1 }
    }

    /// No cached listing names `n` any more: its cached info counts on its own.
    private mutating func unlist(_ n: Node?, _ h: borrowing Held) {
        guard let n, h[n].listed else { return }
        h[n].listed = false
        if h[n].box != nil { order.listedInfos -= 1 }
    }

    /// `n` came back into the table holding an info: it counts again.
    mutating func attached(_ n: Node, _ h: borrowing Held) {
        guard h[n].box != nil else { return }
        order.infos += 1
        if h[n].listed { order.listedInfos += 1 }
        h[n].infoTicket = order.push(n.ino, listing: false)
    }

    /// `n` leaves the table (its listing was dropped first): its info stays on the object,
    /// uncounted, for an operation under way that holds it.
    mutating func detached(_ n: Node, _ h: borrowing Held) {
        if h[n].box != nil {
            order.infos -= 1
            if h[n].listed { order.listedInfos -= 1 }
        }
        h[n].infoTicket = 0
    }

    /// The oldest ticket, taken off the queue (nil when it is empty).
    mutating func popOldest() -> CacheOrder.Ticket? { order.popFront() }

    /// `n`'s info goes to the back of the queue (pinned: local content or an open handle).
    mutating func requeueInfo(_ n: Node, _ h: borrowing Held) { h[n].infoTicket = order.push(n.ino, listing: false) }

    /// Drops stale tickets once they outnumber live ones.
    mutating func compactIfNeeded(isLive: (CacheOrder.Ticket) -> Bool) { order.compactIfNeeded(isLive: isLive) }
}
