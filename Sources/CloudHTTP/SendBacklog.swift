import Foundation
import StorageModel

/// What a streamed upload's connection has taken but the link has not carried yet (docs/SEMANTICS.md
/// §5.2). The socket buffers hold several MiB (11.5 MB measured through a local proxy): a request
/// takes that much at once (the burst), then, on a link slower than the disk, they stay full and
/// the body is taken at the link's pace, in steps as the buffers drain. So the burst is still on
/// its way whenever the taking pauses, and needs burst / pace to drain; before a pace is known,
/// at the slowest pace that still counts as moving. The pace is the average since the burst
/// ended, which counts the time the burst took to drain: on the slow side, so the drain allowed
/// for is never too short (steps of a MiB taken within milliseconds would make a window's pace
/// far too fast).
package struct SendBacklog {
    /// Pieces this close together are still the first burst.
    static let burstGap: Duration = .milliseconds(100)
    /// The longest drain allowed for, whatever the estimate.
    static let longest: Duration = .seconds(600)
    private var burst: Int64 = 0
    private var burstOver = false
    private var last: BucketClock.Instant
    /// When the last piece of the burst was taken.
    private var burstEnd: BucketClock.Instant
    /// The latest piece taken after the burst.
    private var latest: (at: BucketClock.Instant, taken: Int64)?

    package init(start: BucketClock.Instant) {
        last = start
        burstEnd = start
    }

    /// The body had `taken` bytes taken at `now`.
    package mutating func record(_ taken: Int64, at now: BucketClock.Instant) {
        defer { last = now }
        if !burstOver {
            // The first piece starts the burst, however long the connection took to open.
            if burst == 0 || now - last < Self.burstGap {
                burst = taken
                burstEnd = now
                return
            }
            burstOver = true
        }
        latest = (now, taken)
    }

    /// For the debug log: the burst and the pace since it.
    package var summary: String {
        "burst \(burst) B, pace since it " + (pace.map { "\(Int($0)) B/s" } ?? "none")
    }

    /// Bytes a second the body went at since the burst (nil until a piece came after it).
    var pace: Double? {
        guard let latest, latest.taken > burst else { return nil }
        let s = Self.seconds(latest.at - burstEnd)
        return s > 0 ? Double(latest.taken - burst) / s : nil
    }

    /// How long the link needs for what the buffers hold: the burst at the pace, or at `slowest`
    /// bytes a second before a pace is known.
    package func drainTime(slowest: Double) -> Duration {
        guard burst > 0, let rate = pace ?? (slowest > 0 ? slowest : nil) else { return .zero }
        return min(.milliseconds(Int64(min(Double(burst) / rate, 86_400) * 1000)), Self.longest)
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
