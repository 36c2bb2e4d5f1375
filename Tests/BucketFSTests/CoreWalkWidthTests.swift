@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// Once a walk is evident it goes as wide as the connections allow (docs/SEMANTICS.md §3.6):
/// the window refills as each fetch lands, not as the reader moves, so the connections stay busy
/// while the reader works through files that landed together; and a file read whole through the
/// kernel's read-ahead, its requests out of order, counts in the evidence. The store double is no
/// better than a server: at most `connections` reads at once (the others wait for one, as on a
/// connection pool), and every read waits until the test lets it answer (`hold`; at most 5 s,
/// so a broken walk fails the test rather than hang it) or answers at once (`flow`).
@Suite struct CoreWalkWidthTests {
    final class Server: ForwardingStore, @unchecked Sendable {
        let inner: MemoryStore
        let connections: Int
        private let lock = NSLock()
        private var holding = false
        private var released: Set<String> = []
        private var busy = 0
        private var waitingForConnection = 0
        private var answering: [String] = []
        private(set) var maxInFlight = 0
        init(_ inner: MemoryStore, connections: Int) {
            self.inner = inner
            self.connections = connections
        }

        /// Reads on a connection now (held or answering), by name.
        var inFlight: [String] { lock.withLock { answering } }
        /// Reads waiting for a free connection.
        var queued: Int { lock.withLock { waitingForConnection } }
        /// Reads wait until `release(_:)` (of their name) or `flow()`.
        func hold() { lock.withLock { holding = true; released = [] } }
        func release(_ name: String) { _ = lock.withLock { released.insert(name) } }
        func flow() { lock.withLock { holding = false } }

        func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
            // A connection first.
            lock.withLock { waitingForConnection += 1 }
            while !lock.withLock({ () -> Bool in
                guard busy < connections else { return false }
                busy += 1
                waitingForConnection -= 1
                answering.append(name)
                maxInFlight = max(maxInFlight, busy)
                return true
            }) {
                if Task.isCancelled { lock.withLock { waitingForConnection -= 1 }; throw StorageError.cancelled }
                try? await Task.sleep(for: .milliseconds(1))
            }
            defer {
                lock.withLock {
                    busy -= 1
                    if let i = answering.firstIndex(of: name) { answering.remove(at: i) }
                }
            }
            // Then the answer, when the test lets it come (a minute at most, so that a test that
            // fails never hangs: not a guess at how long the reads in between take).
            let giveUp = ContinuousClock.now + .seconds(60)
            while lock.withLock({ holding && !released.contains(name) }), ContinuousClock.now < giveUp {
                if Task.isCancelled { throw StorageError.cancelled }
                try? await Task.sleep(for: .milliseconds(1))
            }
            return try await inner.read(name, generation: generation, range: range)
        }
    }


    func name(_ i: Int) -> String { String(format: "d/f%03d", i) }

    /// A listed directory `d` of `files` small files behind a server of `connections`; the
    /// walk-ahead's limit is `limit`.
    func harness(files: Int, limit: Int, connections: Int, big: Data? = nil,
                 _ configure: @escaping (inout MountConfig) -> Void = { _ in }) async throws -> (Harness, Server, [Data]) {
        let store = MemoryStore()
        let server = Server(store, connections: connections)
        // (The invariants are checked after each call, not at each release of the lock: these
        // tests hold requests while the reader works through a hundred files.)
        let h = Harness(store: store, {
            $0.walkAheadFiles = limit; $0.walkAheadTTL = 60; $0.checksInvariantsAtUnlock = false; configure(&$0)
        }, through: { _ in server })
        var contents: [Data] = []
        for i in 0..<files {
            contents.append(Data.pattern(8_000 + i, seed: UInt32(i + 1)))
            store.put(name(i), contents[i])
        }
        if let big { store.put("d/a-big", big) }
        _ = try await h.readdirAll(Harness.root)
        _ = try await h.readdirAll(try await h.ino("d"))
        store.resetCounts()
        return (h, server, contents)
    }

    func reads(_ h: Harness, _ i: Int) -> Int { h.store.reads.filter { $0.name == name(i) }.count }

    @Test func aFetchThatLandsStartsTheNextWhileTheReaderIsElsewhere() async throws {
        let (h, server, contents) = try await harness(files: 200, limit: 8, connections: 8)
        // Evident at f002, widened by each guess read: eight at once from f004 on.
        for i in 0..<6 { #expect(try await h.readAll(name(i)) == contents[i]) }
        #expect(h.fs.walkAhead.width(in: "d") == 8)
        // What the window made at f004 fetched lands (the width and sixteen limits past it: the
        // window is made again every two files read at this limit); then the server answers
        // only when told.
        try #require(await eventually { h.store.count("read") == 141 }, "\(h.store.count("read")) reads")
        #expect(Set(h.fs.walkAhead.pending) == Set((6..<141).map(name)))
        server.hold()
        // The reader goes through what landed: the window moves on, and eight files after it
        // go out and are held.
        for i in 6..<141 { #expect(try await h.readAll(name(i)) == contents[i]) }
        let next = 141
        try #require(await eventually { server.inFlight.count == 8 })
        #expect(Set(server.inFlight) == Set((next..<(next + 8)).map(name)))
        #expect(server.queued == 0, "never more at once than the window's width")
        // The first of them answers; the reader does nothing: its connection goes to the next
        // file at once.
        let fresh = next + 8
        try? await Task.sleep(for: .milliseconds(50))
        #expect(!server.inFlight.contains(name(fresh)))
        server.release(name(next))
        #expect(await eventually { server.inFlight.contains(self.name(fresh)) && server.inFlight.count == 8 },
                "a landing refills the window: \(server.inFlight)")
        server.release(name(next + 1))
        #expect(await eventually { server.inFlight.contains(self.name(fresh + 1)) && server.inFlight.count == 8 })
        // The rest of the walk: every file once, never more than the width at once.
        server.flow()
        for i in next..<200 { #expect(try await h.readAll(name(i)) == contents[i], "f\(i)") }
        for i in 0..<200 { #expect(reads(h, i) == 1, "f\(i) read \(reads(h, i)) times") }
        #expect(server.maxInFlight <= 8)
        #expect(h.fs.walkAhead.outcomes(in: "d").misses == 0)
    }

    @Test func filesThatLandedWaitNoFurtherThanSeventeenLimits() async throws {
        // A reader that stops: what landed and what is in flight together are at most the width
        // and sixteen limits past it (small files) — what a walk that ends costs. (The window is
        // made again every two files read at this limit: the last at f008.)
        let (h, server, contents) = try await harness(files: 200, limit: 8, connections: 16)
        for i in 0..<9 { #expect(try await h.readAll(name(i)) == contents[i]) }
        #expect(await eventually { h.store.count("read") >= 145 })
        try? await Task.sleep(for: .milliseconds(50))
        #expect(Set(h.fs.walkAhead.pending) == Set((9..<145).map(name)))
        #expect(h.store.count("read") == 145)
    }

    @Test func aFalseStartStaysAtTwoFilesWhateverLands() async throws {
        // Three changed neighbours look like a walk: two files guessed, and their landing starts
        // nothing more until one of them is read.
        let (h, server, contents) = try await harness(files: 50, limit: 16, connections: 16)
        for i in [9, 10, 11] { #expect(try await h.readAll(name(i)) == contents[i]) }
        #expect(await eventually { server.inFlight.isEmpty && h.store.count("read") == 5 })
        try? await Task.sleep(for: .milliseconds(50))
        #expect(h.store.count("read") == 5)
        #expect(try await h.readAll(name(30)) == contents[30])
        #expect(h.store.count("read") == 6)
        #expect(h.fs.walkAhead.outcomes(in: "d") == (hits: 0, misses: 2))
    }

    @Test func aLargeFileReadWholeOutOfOrderCountsInTheEvidence() async throws {
        // tar reads a directory's large file through the kernel's read-ahead, whose requests
        // arrive in any order; then the small files after it. The large file read whole is the
        // walk's first step: two small files after it make three in a row.
        let big = Data.pattern(3 << 20, seed: 99)
        let (h, server, contents) = try await harness(files: 20, limit: 8, connections: 16, big: big) {
            $0.readPartFirst = 256 << 10; $0.readPartMax = 1 << 20; $0.kernelReadAhead = 1 << 20
        }
        let ino = try await h.ino("d/a-big")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        var out = Data(count: big.count)
        let chunk = 128 << 10
        // Windows of 1 MiB, each window's requests arriving last first.
        for window in stride(from: 0, to: big.count, by: 1 << 20) {
            for k in stride(from: (1 << 20) - chunk, through: 0, by: -chunk) {
                let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(window + k), size: chunk)
                out.replaceSubrange((window + k)..<(window + k + d.count), with: d)
            }
        }
        try await h.fs.release(ino: ino, fh: fh)
        #expect(out == big)
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(try await h.readAll(name(0)) == contents[0])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(try await h.readAll(name(1)) == contents[1])
        #expect(Set(h.fs.walkAhead.pending) == [name(2), name(3)])
        #expect(await eventually { server.inFlight.isEmpty })
    }
}
