import Foundation
import StorageModel

/// Hedged requests for the files fetched ahead of a walk (docs/SEMANTICS.md §3.6, "A slow
/// answer"; *The Tail at Scale*): a fetch still running `factor` times the median of the recent
/// ones later (and at least `floor` later) is asked for a second time, and the first answer
/// wins; the other request is cancelled. A reader that goes in order (tar, restic) would
/// otherwise wait for the one slow request while every file after it has landed.
///
/// Only whole small files are hedged (a wasted hedge costs one small download), never a failure
/// (a fetch that fails is not asked again here: retries are the store's), and at most one hedge
/// for every `budget` fetches plus `burst`, so a server that is slow for everyone is not asked
/// twice for everything. Both answers are checked alike by the caller.
final class Hedge: @unchecked Sendable {
    /// How many medians a fetch may take before it is hedged (0: never).
    let factor: Double
    /// The least wait before a hedge, seconds.
    let floor: Double
    static let samples = 64
    static let budget = 10
    static let burst = 4

    private let clock: BucketClock
    private let lock = NSLock()
    /// GUARDED_BY(lock): the last `samples` winning fetches' times (seconds), oldest first.
    private var recent: [Double] = []
    private var fetches = 0
    /// GUARDED_BY(lock): hedges sent, and those whose answer came first.
    private(set) var sent = 0
    private(set) var won = 0

    init(factor: Double, floor: Double, clock: BucketClock) {
        self.factor = factor
        self.floor = floor
        self.clock = clock
    }

    /// Hedges sent and won so far (metrics).
    var counts: (sent: Int, won: Int) { lock.withLock { (sent, won) } }

    /// How long a fetch may run before it is hedged now: nil when hedging is off, before 8
    /// fetches have been timed, or when the budget is spent.
    private func delayLocked() -> Double? {
        guard factor > 0, recent.count >= 8, sent < fetches / Self.budget + Self.burst else { return nil }
        let sorted = recent.sorted()
        return max(floor, factor * sorted[sorted.count / 2])
    }

    private func record(_ seconds: Double) {
        lock.withLock {
            recent.append(seconds)
            if recent.count > Self.samples { recent.removeFirst(recent.count - Self.samples) }
        }
    }

    private enum Outcome<T: Sendable>: Sendable {
        case value(T, hedged: Bool)
        case failed(any Error, hedged: Bool)
        /// The hedge was never sent (its wait was cut short).
        case notSent
    }

    /// `work`, hedged: run once, and once more if the first is still running after the delay;
    /// the first to succeed wins. The first request's failure before the hedge is sent is the
    /// answer; after it, the other request's answer is awaited.
    func run<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async throws -> T {
        let clock = self.clock
        let (delay, start): (Double?, BucketClock.Instant) = lock.withLock {
            fetches += 1
            return (delayLocked(), clock.now)
        }
        guard let delay else {
            let value = try await work()
            record(Self.seconds(clock.now - start))
            return value
        }
        let hedgeSent = Flag()
        return try await withThrowingTaskGroup(of: Outcome<T>.self) { group in
            group.addTask {
                do { return .value(try await work(), hedged: false) } catch { return .failed(error, hedged: false) }
            }
            group.addTask { [weak self] in
                do { try await clock.sleep(for: .milliseconds(Int64(delay * 1000))) } catch { return .notSent }
                guard let self, !Task.isCancelled else { return .notSent }
                hedgeSent.set()
                self.lock.withLock { self.sent += 1 }
                do { return .value(try await work(), hedged: true) } catch { return .failed(error, hedged: true) }
            }
            var running = 2
            var firstError: (any Error)?
            for try await outcome in group {
                running -= 1
                switch outcome {
                case .value(let value, let hedged):
                    group.cancelAll()
                    if hedged { lock.withLock { won += 1 } } else { record(Self.seconds(clock.now - start)) }
                    return value
                case .notSent:
                    continue
                case .failed(let error, let hedged):
                    if firstError == nil { firstError = error }
                    // The hedge failed, or the first request failed while the hedge runs: wait
                    // for the other. The first failed before any hedge: that is the answer.
                    if hedged || (hedgeSent.isSet && running > 0) { continue }
                    group.cancelAll()
                    throw error
                }
            }
            throw firstError ?? StorageError.cancelled
        }
    }

    /// Set once, read from any task.
    private final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { lock.withLock { value = true } }
        var isSet: Bool { lock.withLock { value } }
    }

    private static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
