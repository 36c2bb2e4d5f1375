import Foundation

/// One memory budget for every read-ahead buffer of the mount (`--read-ahead-mb`): parts fetched
/// ahead of readers and small files fetched ahead of a tree walk. Nothing waits for it: what does
/// not fit is not fetched ahead, and the read asks for just its own bytes (back-pressure by
/// degrading to reads on demand, so no reader can be starved or deadlocked).
final class ReadBudget: @unchecked Sendable {
    let capacity: Int
    private let lock = NSLock()
    private var used = 0
    /// Holders with bytes reserved, for the fair share.
    private var holders: [ObjectIdentifier: Int] = [:]

    init(capacity: Int) { self.capacity = max(0, capacity) }

    var inUse: Int { lock.withLock { used } }

    /// Reserves `bytes` for `holder` if they fit in the budget and in the holder's fair share:
    /// the capacity split evenly between the holders (`floor` at least), or, when the others
    /// hold less than theirs (a reader of small files next to one of a large file), what they
    /// leave, less a newcomer's even share (room for the next holder always stays).
    func reserve(_ bytes: Int, for holder: AnyObject, floor: Int = 0) -> Bool {
        let id = ObjectIdentifier(holder)
        return lock.withLock {
            guard used + bytes <= capacity else { return false }
            let mine = holders[id] ?? 0
            let sharers = holders.count + (mine == 0 ? 1 : 0)
            let left = capacity - (used - mine) - capacity / (sharers + 1)
            let share = max(floor, capacity / max(1, sharers), left)
            guard mine == 0 || mine + bytes <= share else { return false }
            used += bytes
            holders[id] = mine + bytes
            return true
        }
    }

    func release(_ bytes: Int, for holder: AnyObject) {
        let id = ObjectIdentifier(holder)
        lock.withLock {
            used -= bytes
            let left = (holders[id] ?? 0) - bytes
            holders[id] = left > 0 ? left : nil
        }
    }

    /// Bytes `holder` has reserved now.
    func reserved(by holder: AnyObject) -> Int {
        lock.withLock { holders[ObjectIdentifier(holder)] ?? 0 }
    }

    /// INVARIANT: what is in use is what the holders reserved, within the capacity.
    func invariantViolations() -> [String] {
        lock.withLock {
            var bad: [String] = []
            let sum = holders.values.reduce(0, +)
            if used != sum { bad.append("the read budget has \(used) bytes in use, its holders \(sum)") }
            if used < 0 || used > capacity { bad.append("the read budget has \(used) bytes in use of \(capacity)") }
            if holders.values.contains(where: { $0 <= 0 }) { bad.append("a read budget holder has no bytes reserved") }
            return bad
        }
    }

    /// Moves a reservation to another holder (a walk-ahead file handed to the handle that opens it).
    func transfer(_ bytes: Int, from old: AnyObject, to new: AnyObject) {
        lock.withLock {
            let o = ObjectIdentifier(old), n = ObjectIdentifier(new)
            let left = (holders[o] ?? 0) - bytes
            holders[o] = left > 0 ? left : nil
            holders[n, default: 0] += bytes
        }
    }
}
