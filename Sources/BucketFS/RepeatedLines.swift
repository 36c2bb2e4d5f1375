import Foundation
import StorageModel

/// Error lines said once while they repeat (docs/OPERATING.md, "Logs"): a line identical to one
/// logged less than `window` seconds ago (the same operation, name and cause: a tool that asks
/// again at once, a shell's `ls` that stats, lists and reads xattrs of a directory it cannot
/// reach) is counted, not logged; the first one logged after the window says how many were left
/// out. Lines that differ in anything are each logged.
final class RepeatedLines: @unchecked Sendable {
    private let lock = NSLock()
    /// Per line: when it was last logged (the mount's clock, seconds), and how many were left out since.
    private var seen: [String: (at: Double, omitted: Int)] = [:]
    let window: Double
    private let clock: BucketClock

    init(window: Double = 60, clock: BucketClock) {
        self.window = window
        self.clock = clock
    }

    /// Whether to log `line` now; when it is, how many identical lines were left out before it.
    func admit(_ line: String) -> (log: Bool, omitted: Int) {
        let now = clock.seconds
        return lock.withLock {
            if let s = seen[line], now - s.at < window {
                seen[line] = (s.at, s.omitted + 1)
                return (false, 0)
            }
            if seen.count > 1_000 { seen = seen.filter { now - $0.value.at < window } }
            let omitted = seen[line]?.omitted ?? 0
            seen[line] = (now, 0)
            return (true, omitted)
        }
    }
}
