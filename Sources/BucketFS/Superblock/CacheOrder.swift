import Foundation

/// The bounded metadata cache's order and counts (memory bounded by an option, not by
/// the bucket): a FIFO queue of tickets, one per cached info or listing, and what is counted
/// against `MountConfig.maxCachedEntries`. A pure value: the superblock (Superblock.swift) keeps
/// it with the nodes it describes, and evicts by it.
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
    /// Nodes whose info is cached and whose name is in a cached listing (`Node.listed`): one
    /// object each, counted once.
    var listedInfos = 0
    /// What `maxCachedEntries` bounds: the objects whose metadata or name is cached, each once.
    var entries: Int { infos + listedNames - listedInfos }
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

    /// A number for a ticket queued later in its place (`insert`): what is cached meanwhile
    /// queues after it.
    mutating func reserve() -> UInt64 {
        lastNumber += 1
        return lastNumber
    }

    /// A ticket numbered `number` (from `reserve`), put where a push would have put it then:
    /// before the queued tickets numbered after it (the queue is in number order: every push
    /// appends the next number, and nothing reorders it). Returns `number`.
    mutating func insert(_ ino: UInt64, listing: Bool, number: UInt64) -> UInt64 {
        var lo = head, hi = queue.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if queue[mid].number < number { lo = mid + 1 } else { hi = mid }
        }
        queue.insert(Ticket(ino: ino, number: number, listing: listing), at: lo)
        return number
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
