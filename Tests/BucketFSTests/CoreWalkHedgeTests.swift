@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A file fetched ahead of a walk whose download runs long is asked for again, and the first
/// answer wins (docs/SEMANTICS.md §3.6, "A slow answer"): a reader in order does not wait for
/// the one slow request. Failures are not hedged, hedges are bounded, and `--walk-hedge 0` turns
/// them off. The store double stalls the requests the test names: a stalled request answers
/// only when cancelled, or after `stall` (so a missing hedge fails the test rather than hang it).
@Suite struct CoreWalkHedgeTests {
    final class Stalling: ForwardingStore, @unchecked Sendable {
        let inner: MemoryStore
        let stall: Duration
        private let lock = NSLock()
        /// Names whose next read stalls (once each); with `everyRead`, every read after the
        /// first `fastReads` stalls.
        private var stallNext: Set<String>
        private let everyRead: Bool
        private let fastReads: Int
        private var reads = 0
        private(set) var cancelled: [String] = []
        init(_ inner: MemoryStore, stallNext: Set<String> = [], everyReadAfter fast: Int? = nil, stall: Duration = .seconds(5)) {
            self.inner = inner
            self.stallNext = stallNext
            self.everyRead = fast != nil
            self.fastReads = fast ?? 0
            self.stall = stall
        }
        var cancelledReads: [String] { lock.withLock { cancelled } }

        func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
            let stalls: Bool = lock.withLock {
                reads += 1
                if everyRead { return reads > fastReads }
                return stallNext.remove(name) != nil
            }
            if stalls {
                let end = ContinuousClock.now + stall
                while ContinuousClock.now < end {
                    if Task.isCancelled {
                        lock.withLock { cancelled.append(name) }
                        throw StorageError.cancelled
                    }
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
            return try await inner.read(name, generation: generation, range: range)
        }
    }

    func name(_ i: Int) -> String { String(format: "d/f%03d", i) }

    /// `floor`: the least wait before a hedge, long enough that no read of the memory store runs
    /// past it on a busy machine, short against the stalls.
    func harness(files: Int, hedge: Double, floor: Double = 1, _ make: (MemoryStore) -> Stalling) async throws -> (Harness, Stalling, [Data]) {
        let store = MemoryStore()
        let stalling = make(store)
        let h = Harness(store: store, {
            $0.walkAheadFiles = 8; $0.walkAheadTTL = 60; $0.walkHedge = hedge; $0.walkHedgeFloor = floor
        }, through: { _ in stalling })
        var contents: [Data] = []
        for i in 0..<files {
            contents.append(Data.pattern(8_000 + i, seed: UInt32(i + 1)))
            store.put(name(i), contents[i])
        }
        _ = try await h.readdirAll(Harness.root)
        _ = try await h.readdirAll(try await h.ino("d"))
        store.resetCounts()
        return (h, stalling, contents)
    }

    func reads(_ h: Harness, _ i: Int) -> Int { h.store.reads.filter { $0.name == name(i) }.count }

    @Test func aSlowFetchIsAskedAgainAndTheFirstAnswerWins() async throws {
        let (h, stalling, contents) = try await harness(files: 40, hedge: 3) { Stalling($0, stallNext: [name(20)]) }
        for i in 0..<40 { #expect(try await h.readAll(name(i)) == contents[i], "f\(i)") }
        // The stalled request was cancelled once the second answered; every other file once.
        #expect(stalling.cancelledReads == [name(20)])
        #expect(reads(h, 20) == 1, "the store answered f020 once (the hedge); the stalled one never")
        for i in 0..<40 where i != 20 { #expect(reads(h, i) == 1, "f\(i)") }
        #expect(h.fs.readPath.hedge.counts == (sent: 1, won: 1))
        #expect(h.fs.statistics().walkHedges == 1 && h.fs.statistics().walkHedgesWon == 1)
    }

    @Test func withHedgingOffTheSlowFetchIsWaitedFor() async throws {
        let (h, stalling, contents) = try await harness(files: 40, hedge: 0) {
            Stalling($0, stallNext: [name(20)], stall: .milliseconds(300))
        }
        for i in 0..<40 { #expect(try await h.readAll(name(i)) == contents[i], "f\(i)") }
        #expect(stalling.cancelledReads.isEmpty)
        for i in 0..<40 { #expect(reads(h, i) == 1, "f\(i)") }
        #expect(h.fs.readPath.hedge.counts == (sent: 0, won: 0))
    }

    /// A server slow for every request after a while: the hedges stay within one for every ten
    /// downloads plus four, however many run long.
    @Test func hedgesAreBoundedWhenEveryRequestIsSlow() async throws {
        let (h, _, contents) = try await harness(files: 60, hedge: 3, floor: 0.05) {
            Stalling($0, everyReadAfter: 12, stall: .milliseconds(300))
        }
        for i in 0..<60 { #expect(try await h.readAll(name(i)) == contents[i], "f\(i)") }
        let (sent, _) = h.fs.readPath.hedge.counts
        #expect(sent >= 1, "the first slow downloads are hedged")
        #expect(sent <= 60 / Hedge.budget + Hedge.burst, "\(sent) hedges for at most 60 downloads")
    }
}
