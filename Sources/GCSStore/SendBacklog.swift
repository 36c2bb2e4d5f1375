import Foundation

/// What a streamed upload's connection has taken but the link has not carried yet (docs/SEMANTICS.md
/// §5.2). The socket buffers hold several MiB: a request takes that much at once (the burst),
/// then, on a link slower than the disk, they stay full and the body is taken at the link's pace.
/// So the burst is still on its way whenever the taking pauses, and needs burst / pace to drain;
/// before a pace is known, at the slowest pace that still counts as moving.
package struct SendBacklog {
    /// Pieces this close together are still the first burst.
    static let burstGap: Duration = .milliseconds(100)
    /// How far back the pace looks.
    static let window: Duration = .seconds(3)
    /// The longest drain allowed for, whatever the estimate.
    static let longest: Duration = .seconds(600)
    private var burst: Int64 = 0
    private var burstOver = false
    private var last: ContinuousClock.Instant
    /// Pieces taken after the burst, within the window.
    private var samples: [(at: ContinuousClock.Instant, taken: Int64)] = []

    package init(start: ContinuousClock.Instant) { last = start }

    /// The body had `taken` bytes taken at `now`.
    package mutating func record(_ taken: Int64, at now: ContinuousClock.Instant) {
        defer { last = now }
        if !burstOver {
            if now - last < Self.burstGap { burst = taken; return }
            burstOver = true
        }
        samples.append((now, taken))
        while let first = samples.first, now - first.at > Self.window, samples.count > 2 { samples.removeFirst() }
    }

    /// Bytes a second the body went at after the burst (nil until two pieces came after it).
    var pace: Double? {
        guard samples.count >= 2, let first = samples.first, let end = samples.last, end.taken > first.taken else { return nil }
        let s = Self.seconds(end.at - first.at)
        return s > 0 ? Double(end.taken - first.taken) / s : nil
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
