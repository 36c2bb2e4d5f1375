@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The read path: parts fetched ahead of a sequential reader within one mount-wide
/// budget, a seek that stops them, and small files fetched ahead of a walk in listing order —
/// pinned to the generation listed, dropped when not opened. No timing: background work is
/// awaited by polling its effects.
@Suite struct CoreReadAheadTests {
    /// Polls `condition` until it holds (or 10 s pass, then the caller's expectation fails).

    /// `big.bin` of `size` patterned bytes, opened for reading, the store's counts reset.
    func openedBig(_ h: Harness, size: Int, seed: UInt32) async throws -> (content: Data, ino: UInt64, fh: UInt64) {
        let content = Data.pattern(size, seed: seed)
        h.store.put("big.bin", content)
        let ino = try await h.ino("big.bin")
        h.store.resetCounts()
        return (content, ino, try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY)))
    }

    @Test func aSequentialReaderGetsPartsFetchedAhead() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4 }
        let (content, ino, fh) = try await openedBig(h, size: 40 << 20, seed: 11)
        var out = Data()
        while out.count < 4 << 20 {
            out += try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 128 << 10)
        }
        // Parts beyond what was read are being fetched before anyone asked for them.
        let reader = out.count
        #expect(await eventually { h.store.reads.contains { ($0.range?.lowerBound ?? 0) > Int64(reader) } })
        #expect(h.store.reads.allSatisfy { $0.generation != nil && $0.range != nil })
        while true {
            let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 128 << 10)
            if d.isEmpty { break }
            out += d
        }
        try await h.fs.release(ino: ino, fh: fh)
        #expect(out == content)
        // 1 + 2 + 4 MiB, then 4 MiB parts: about a dozen requests for 40 MiB, not one per read.
        #expect(h.store.count("read") <= 13)
        #expect(h.fs.readBudget.inUse == 0)
    }

    /// A long read that keeps the budget full reuses the memory of the parts it finished (a
    /// fresh buffer costs a page fault per page on first touch): fresh buffers for about the
    /// parts the budget holds at once, not one per part.
    @Test func aLongReadWithTheBudgetFullReusesItsBuffers() async throws {
        let h = Harness {
            $0.readPartFirst = 1 << 20; $0.readPartMax = 1 << 20; $0.readStreams = 8; $0.readStreamsMax = 8
            $0.readAheadBudget = 8 << 20
        }
        h.store.setStreamRate(200e6)
        let (content, ino, fh) = try await openedBig(h, size: 48 << 20, seed: 29)
        var out = Data()
        // The replies of the last 3 MiB read stay alive, as replies on their way to the kernel
        // do: a finished part's buffer is given back only after the next part has started.
        var replies: [Data] = []
        while true {
            let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 128 << 10)
            if d.isEmpty { break }
            out.append(d)
            replies.append(d)
            if replies.count > 24 { replies.removeFirst() }
        }
        replies = []
        try await h.fs.release(ino: ino, fh: fh)
        #expect(out == content)
        #expect(h.store.count("read") >= 48)
        let fresh = h.fs.readBuffers.freshTakes
        #expect(fresh <= 8 + 4, "\(fresh) fresh buffers for 48 parts")
        #expect(h.fs.readBuffers.invariantViolations().isEmpty)
    }

    /// A link whose every stream carries only so much (8 MB/s here): a reader faster than its
    /// streams waits for parts on their way, and gets one more in flight at a time, up to the
    /// most allowed (`readStreamsMax`, the mount's connections), never past it; the bytes are
    /// the object's. With the most allowed at the first count, the count stays there.
    @Test func aReaderWaitingOnSlowStreamsGetsMoreOfThem() async throws {
        for (most, grows) in [(6, true), (2, false)] {
            let h = Harness {
                $0.readPartFirst = 1 << 20; $0.readPartMax = 1 << 20; $0.readStreams = 2; $0.readStreamsMax = most
                $0.readAheadBudget = 64 << 20
            }
            h.store.setStreamRate(8e6)
            let (content, ino, fh) = try await openedBig(h, size: 12 << 20, seed: 23)
            var out = Data()
            while true {
                let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 128 << 10)
                if d.isEmpty { break }
                out += d
            }
            let stream = try #require(h.fs.superblock.handle(fh)?.stream)
            let streams = stream.currentStreams
            try await h.fs.release(ino: ino, fh: fh)
            #expect(out == content)
            #expect(h.store.mostStreamsAtOnce <= most, "at most \(most) streams")
            if grows {
                #expect(streams > 2 && streams <= most, "grew from 2 to \(streams) of \(most)")
                #expect(h.store.mostStreamsAtOnce > 2, "streams in flight at once: \(h.store.mostStreamsAtOnce)")
            } else {
                #expect(streams == 2)
            }
            #expect(h.fs.readBudget.inUse == 0)
        }
    }

    /// Once the reader has moved into a second part the read is sequential: parts that landed no
    /// longer count against `--read-streams`, so the next ones go while the reader works through
    /// the first, up to a window of twice the streams' largest parts ahead of it; before that, a
    /// reader of the first bytes costs one request.
    @Test func anEvidentlySequentialReadKeepsItsStreamsGoingWithinTheWindow() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4 }
        let size = 64 << 20
        let window = Int64(2 * 4 * (4 << 20))
        let (content, ino, fh) = try await openedBig(h, size: size, seed: 17)
        var out = Data()
        while out.count < 1 << 20 {
            out += try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 128 << 10)
        }
        #expect(h.store.reads.map(\.range) == [0..<Int64(1 << 20)])
        // Into the second part: the reader stays in it, reading little, and the parts reach the
        // window ahead of it all the same (with landed parts counted, 4 parts: 7 MiB).
        func furthest() -> Int64 { h.store.reads.compactMap { $0.range?.upperBound }.max() ?? 0 }
        let margin = Int64(1 << 20)
        while out.count < 3 << 20, furthest() < Int64(out.count) + window - margin {
            out += try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 4096)
            try await Task.sleep(for: .milliseconds(2))
        }
        #expect(out.count < 3 << 20)
        #expect(furthest() >= Int64(out.count) + window - margin)
        // And no further: more reads in the same part start nothing past the window.
        for _ in 0..<20 {
            out += try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 4096)
            try await Task.sleep(for: .milliseconds(2))
        }
        #expect(furthest() <= Int64(out.count) + window + (4 << 20))
        let stream = try #require(h.fs.superblock.handle(fh)?.stream)
        #expect(stream.reservedBytes <= Int(window) + (4 << 20) + (1 << 20))
        while true {
            let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 1 << 20)
            if d.isEmpty { break }
            out += d
        }
        try await h.fs.release(ino: ino, fh: fh)
        #expect(out == content)
        // Each byte fetched once, in parts (1 + 2 MiB, then 4 MiB each).
        #expect(h.store.reads.reduce(0) { $0 + ($1.range?.count ?? 0) } == size)
        #expect(h.store.count("read") <= 18)
        #expect(h.fs.readBudget.inUse == 0)
    }

    /// A first read at the start that asks for a whole first part or more (a reader taking
    /// 1 MiB at a time: `dd bs=1M`, a data loader) is sequential at once: the rest of a file of a
    /// few parts goes in flight with it, before any second read. A first read of less stays one
    /// request until the reader moves on. Each byte is fetched once either way.
    @Test func aFirstReadOfAWholePartStartsTheStreamsAtOnce() async throws {
        for (first, atOnce) in [(1 << 20, true), (128 << 10, false)] {
            let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4 }
            let size = 5 << 20
            let (content, ino, fh) = try await openedBig(h, size: size, seed: 29)
            var out = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: first)
            #expect(out.count == first)
            func furthest() -> Int64 { h.store.reads.compactMap { $0.range?.upperBound }.max() ?? 0 }
            if atOnce {
                #expect(await eventually { furthest() == Int64(size) }, "the parts after the first read went with it")
            } else {
                try await Task.sleep(for: .milliseconds(50))
                #expect(h.store.reads.map(\.range) == [0..<Int64(1 << 20)])
            }
            while true {
                let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: first)
                if d.isEmpty { break }
                out += d
            }
            try await h.fs.release(ino: ino, fh: fh)
            #expect(out == content)
            #expect(h.store.reads.reduce(0) { $0 + ($1.range?.count ?? 0) } == size)
            #expect(h.fs.readBudget.inUse == 0)
        }
    }

    /// The kernel's read-ahead sends several requests at once and they may arrive in any order
    /// within its window: the reader is still sequential, no part is dropped, nothing is read twice.
    @Test func requestsOutOfOrderWithinTheKernelsReadAheadKeepTheParts() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4; $0.kernelReadAhead = 4 << 20 }
        let size = 41 << 20
        let (content, ino, fh) = try await openedBig(h, size: size, seed: 13)
        var out = Data(count: size)
        func read(_ mib: Int) async throws {
            let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(mib << 20), size: 1 << 20)
            out.replaceSubrange((mib << 20)..<((mib << 20) + d.count), with: d)
        }
        try await read(0)
        // Windows of 4 MiB, each window's requests arriving last first.
        for window in stride(from: 1, to: 41, by: 4) {
            for k in [3, 1, 2, 0] { try await read(window + k) }
        }
        try await h.fs.release(ino: ino, fh: fh)
        #expect(out == content)
        // The parts alone (1 + 2 + 4 MiB, then 4 MiB each), each byte fetched once: no part
        // was dropped as if the reader had seeked, none re-read on demand.
        #expect(h.store.count("read") <= 13)
        #expect(h.store.reads.reduce(0) { $0 + ($1.range?.count ?? 0) } == size)
        #expect(h.fs.readBudget.inUse == 0)
    }

    @Test func aSeekStopsTheReadAhead() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4 }
        let content = Data.pattern(72 << 20, seed: 12)
        h.store.put("big.bin", content)
        let ino = try await h.ino("big.bin")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        var off = 0
        while off < 4 << 20 {
            off += try await h.fs.read(ino: ino, fh: fh, offset: UInt64(off), size: 128 << 10).count
        }
        let stream = try #require(h.fs.superblock.handle(fh)?.stream)
        #expect(!stream.partRanges.isEmpty)
        #expect(h.fs.readBudget.inUse > 0)
        h.store.resetCounts()
        // A jump far ahead, past the window the parts may reach (2 × 4 streams × 4 MiB): the
        // parts are dropped and only the bytes asked for are read.
        let at = 66 << 20
        let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(at), size: 4096)
        #expect(d == content.subdata(in: at..<(at + 4096)))
        #expect(stream.partRanges.isEmpty)
        #expect(h.fs.readBudget.inUse == 0)
        #expect(h.store.reads.map(\.range) == [Int64(at)..<Int64(at + 4096)])
        // Reading on from there starts over with one small part.
        let d2 = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(at + 4096), size: 4096)
        #expect(d2 == content.subdata(in: (at + 4096)..<(at + 8192)))
        #expect(stream.partRanges == [Int64(at + 4096)..<Int64(at + 4096 + (1 << 20))])
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.fs.readBudget.inUse == 0)
    }

    @Test func sixteenReadersShareOneBudget() async throws {
        let budget = 8 << 20
        let h = Harness { $0.readAheadBudget = budget; $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20 }
        var contents: [Data] = []
        for i in 0..<16 {
            contents.append(Data.pattern(6 << 20, seed: UInt32(100 + i)))
            h.store.put("f\(i)", contents[i])
        }
        var open: [(ino: UInt64, fh: UInt64)] = []
        for i in 0..<16 {
            let ino = try await h.ino("f\(i)")
            open.append((ino, try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))))
        }
        var got = Array(repeating: Data(), count: 16)
        var highest = 0
        var done = false
        while !done {
            done = true
            for i in 0..<16 where got[i].count < contents[i].count {
                done = false
                got[i] += try await h.fs.read(ino: open[i].ino, fh: open[i].fh, offset: UInt64(got[i].count), size: 256 << 10)
                highest = max(highest, h.fs.readBudget.inUse, h.fs.statistics().readAheadBytes)
            }
        }
        for i in 0..<16 {
            #expect(got[i] == contents[i])
            try await h.fs.release(ino: open[i].ino, fh: open[i].fh)
        }
        #expect(highest > 0)
        #expect(highest <= budget)
        #expect(h.fs.readBudget.inUse == 0)
    }

    // MARK: - walk-ahead

    /// A directory of small files, listed.
    func walkHarness(files: Int = 20, _ configure: @escaping (inout MountConfig) -> Void = { _ in }) async throws -> (Harness, [Data]) {
        let h = Harness { $0.walkAheadFiles = 4; $0.walkAheadTTL = 60; configure(&$0) }
        var contents: [Data] = []
        for i in 0..<files {
            contents.append(Data.pattern(10_000 + i, seed: UInt32(i + 1)))
            h.store.put(String(format: "d/f%02d", i), contents[i])
        }
        _ = try await h.readdirAll(Harness.root)
        _ = try await h.readdirAll(try await h.ino("d"))
        h.store.resetCounts()
        return (h, contents)
    }

    func reads(_ h: Harness, _ name: String) -> Int { h.store.reads.filter { $0.name == name }.count }

    @Test func aWalkReadsEachSmallFileWithOneRequestFetchedAhead() async throws {
        let (h, contents) = try await walkHarness()
        for i in 0..<4 { #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i]) }
        // Three neighbours made a walk evident; the guess taken widened it: the next files in
        // listing order, four at once and up to 4 + 4 × 4 past the reader (here, the rest of the
        // directory), are on their way before anyone opens them.
        let rest = Set((4...19).map { String(format: "d/f%02d", $0) })
        #expect(await eventually { Set(h.fs.walkAhead.pending) == rest })
        #expect(await eventually { (4...19).allSatisfy { self.reads(h, String(format: "d/f%02d", $0)) == 1 } })
        for i in 4..<20 {
            #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i])
        }
        // One read per file, whatever was fetched ahead and when; nothing else.
        for i in 0..<20 { #expect(reads(h, String(format: "d/f%02d", i)) == 1, "f\(i)") }
        #expect(h.store.totalRequests == 20)
        #expect(h.fs.walkAhead.pending.isEmpty)
        // The last files read stay for a reopen (at most twice the window), until the TTL.
        #expect(h.fs.walkAhead.kept.count <= 8)
        h.clock.advance(61)
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.kept.isEmpty)
        #expect(h.fs.readBudget.inUse == 0)
    }

    @Test func bytesFetchedAheadAreNeverServedForAnotherGeneration() async throws {
        let (h, contents) = try await walkHarness()
        for i in 0..<3 { #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i]) }
        #expect(await eventually { self.reads(h, "d/f03") == 1 && h.fs.walkAhead.pending.contains("d/f03") })
        let fetched = try #require(h.store.reads.first { $0.name == "d/f03" })
        // f01 is replaced behind the mount; once the TTL has passed, the open sees the new
        // generation and must not be handed the old bytes fetched ahead.
        let v2 = h.store.replaceBehind("d/f03", Data("the second version".utf8))
        #expect(fetched.generation != v2.generation)
        h.clock.advance(10)
        #expect(try await h.readAll("d/f03") == Data("the second version".utf8))
        #expect(h.store.reads.last { $0.name == "d/f03" }?.generation == v2.generation)
        #expect(!h.fs.walkAhead.pending.contains("d/f03"))
    }

    @Test func filesFetchedAheadButNeverOpenedAreDropped() async throws {
        let (h, contents) = try await walkHarness { $0.walkAheadTTL = 10 }
        for i in 0..<3 { #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i]) }
        #expect(await eventually { h.fs.walkAhead.pending.count == 2 })
        #expect(h.fs.readBudget.inUse > 0)
        // Nobody opens them: the sweep (which the walk-ahead runs by itself once the TTL has
        // passed, on the mount's clock: theWalkAheadSweepsByItselfOnTheClock) drops them and
        // frees their memory; not before the TTL.
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.pending.count == 2)
        h.clock.advance(11)
        // Reading the statistics changes nothing.
        #expect(h.fs.statistics().readAheadBytes > 0)
        #expect(h.fs.walkAhead.pending.count == 2)
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.fs.readBudget.inUse == 0)
    }

    /// The walk-ahead's own sweep waits on the mount's clock: a manual one moved past the TTL
    /// drops the files nobody opened, with no real time waited.
    @Test func theWalkAheadSweepsByItselfOnTheClock() async throws {
        let clock = ManualClock()
        let (h, contents) = try await walkHarness { $0.walkAheadTTL = 10; $0.clock = clock.clock }
        for i in 0..<3 { #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i]) }
        #expect(await eventually { h.fs.walkAhead.pending.count == 2 })
        try await clock.waitForSleepers(1)
        #expect(h.fs.walkAhead.pending.count == 2)
        clock.advance(by: .seconds(11))
        #expect(await eventually { h.fs.walkAhead.pending.isEmpty && h.fs.readBudget.inUse == 0 })
    }

    @Test func aWalkThatSkipsAheadDropsWhatItPassedOver() async throws {
        let (h, contents) = try await walkHarness()
        for i in 0..<3 { #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i]) }
        #expect(await eventually { h.fs.walkAhead.pending.count == 2 })
        // The reader jumps to f10: f03 and f04 were passed over and go (misses) at its open.
        #expect(try await h.readAll("d/f10") == contents[10])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.fs.walkAhead.outcomes(in: "d").misses == 2)
        // It reads on in order: once that is evident again (four steps now), what comes after
        // it is fetched.
        for i in 11...14 { #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i]) }
        #expect(Set(h.fs.walkAhead.pending) == ["d/f15", "d/f16"])
    }

    @Test func aFileReadInPartsOrLargeIsNotAWalk() async throws {
        let (h, contents) = try await walkHarness()
        // Only the first bytes of f00: not read whole, nothing is fetched ahead.
        let ino = try await h.ino("d/f00")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 100) == contents[0].prefix(100))
        // A walk-ahead starts within the read that completes a file (its fetches are registered
        // before that read returns): none is registered now, so none was started.
        #expect(h.fs.walkAhead.pending.isEmpty)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.fs.walkAhead.pending.isEmpty)
        // The one part of f00 (the file is smaller than a part) was its only request.
        #expect(h.store.count("read") == 1)
    }

    // MARK: - readers that do not follow the listing

    /// Reads `order` (indices into the walk harness's files) whole, one after another; checks
    /// each file's bytes.
    func readInOrder(_ h: Harness, _ contents: [Data], _ order: [Int]) async throws {
        for i in order {
            #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i], "f\(i)")
        }
    }

    @Test func filesOpenedInInodeOrderCostOneReadEach() async throws {
        // borg reads a directory in inode-number order; ours are hashes of the path.
        let (h, contents) = try await walkHarness(files: 40)
        var inos: [(Int, UInt64)] = []
        for i in 0..<40 { inos.append((i, try await h.ino(String(format: "d/f%02d", i)))) }
        let order = inos.sorted { $0.1 < $1.1 }.map(\.0)
        #expect(order != Array(0..<40))
        try await readInOrder(h, contents, order)
        for i in 0..<40 { #expect(reads(h, String(format: "d/f%02d", i)) == 1, "f\(i) read \(reads(h, String(format: "d/f%02d", i))) times") }
        #expect(h.store.count("read") == 40)
        // Most were fetched ahead, in inode order, before borg opened them.
        #expect(h.fs.walkAhead.outcomes(in: "d").hits >= 30)
    }

    @Test func filesOpenedTwoAtATimeCostOneReadEach() async throws {
        // restic reads two files of a directory at once, in listing order; their opens and
        // whole reads interleave, sometimes a step out of order.
        let (h, contents) = try await walkHarness(files: 40)
        var i = 0
        while i < 40 {
            let pair = i % 6 == 2 ? [i + 1, i] : [i, i + 1]
            var handles: [(Int, UInt64, UInt64)] = []
            for k in pair {
                let ino = try await h.ino(String(format: "d/f%02d", k))
                handles.append((k, ino, try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))))
            }
            // The second opened finishes first.
            for (k, ino, fh) in handles.reversed() {
                var out = Data()
                while true {
                    let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 512 << 10)
                    if d.isEmpty { break }
                    out += d
                }
                #expect(out == contents[k])
                try await h.fs.release(ino: ino, fh: fh)
            }
            i += 2
        }
        for k in 0..<40 { #expect(reads(h, String(format: "d/f%02d", k)) == 1, "f\(k) read \(reads(h, String(format: "d/f%02d", k))) times") }
        #expect(h.store.count("read") == 40)
    }

    /// A data loader's workers (`xargs -P4 -n8`): four readers each take a run of eight files
    /// in listing order and read them in turn, so their reads land eight places apart. They are
    /// one walk: files are fetched ahead of them (guesses read, none wasted), each file once.
    @Test func readersTakingRunsOfFilesAreOneWalk() async throws {
        let (h, contents) = try await walkHarness(files: 64) { $0.walkAheadFiles = 8 }
        for round in 0..<2 {
            for step in 0..<8 {
                for reader in 0..<4 {
                    let k = 32 * round + 8 * reader + step
                    #expect(try await h.readAll(String(format: "d/f%02d", k)) == contents[k])
                }
            }
        }
        let (hits, misses) = h.fs.walkAhead.outcomes(in: "d")
        #expect(hits >= 32, "\(hits) files read from what was fetched ahead")
        #expect(misses == 0)
        for k in 0..<64 { #expect(reads(h, String(format: "d/f%02d", k)) == 1, "f\(k) read \(reads(h, String(format: "d/f%02d", k))) times") }
        #expect(h.store.count("read") == 64)
    }

    @Test func aFileOpenedTwiceForTheSameGenerationCostsOneRead() async throws {
        let (h, contents) = try await walkHarness()
        // Read on demand (the walk is not evident yet), then fetched ahead: both kept for a
        // reopen (borg's posix_fadvise(DONTNEED) empties the page cache behind it).
        #expect(try await h.readAll("d/f03") == contents[3])
        #expect(try await h.readAll("d/f04") == contents[4])
        #expect(try await h.readAll("d/f05") == contents[5])
        #expect(try await h.readAll("d/f05") == contents[5])
        #expect(await eventually { self.reads(h, "d/f06") == 1 })
        #expect(try await h.readAll("d/f06") == contents[6])
        #expect(try await h.readAll("d/f06") == contents[6])
        // Two handles of one file at once (an open for stat, then the chunker's).
        let ino = try await h.ino("d/f07")
        let a = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        let b = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        #expect(try await h.fs.read(ino: ino, fh: b, offset: 0, size: 1 << 20) == contents[7])
        #expect(try await h.fs.read(ino: ino, fh: a, offset: 0, size: 1 << 20) == contents[7])
        try await h.fs.release(ino: ino, fh: a)
        try await h.fs.release(ino: ino, fh: b)
        #expect(reads(h, "d/f05") == 1)
        #expect(reads(h, "d/f06") == 1)
        #expect(reads(h, "d/f07") == 1)
        // Another generation is never served from what was kept.
        let v2 = h.store.replaceBehind("d/f05", Data("the second version".utf8))
        h.clock.advance(10)
        #expect(try await h.readAll("d/f05") == Data("the second version".utf8))
        #expect(h.store.reads.last { $0.name == "d/f05" }?.generation == v2.generation)
    }

    @Test func aReaderInNoOrderStopsTheGuessing() async throws {
        // A fixed shuffle that follows neither the listing nor the inode numbers: a few guesses,
        // then none once they keep missing; every file still read whole, once.
        let (h, contents) = try await walkHarness(files: 40)
        var order = Array(0..<40)
        var seed: UInt64 = 7
        for k in stride(from: 39, to: 0, by: -1) {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            order.swapAt(k, Int((seed >> 33) % UInt64(k + 1)))
        }
        try await readInOrder(h, contents, order)
        // Old behaviour: a window of 4 after every file, about 5 reads per file.
        #expect(h.store.count("read") <= 40 + 12, "\(h.store.count("read")) reads for 40 files")
        #expect(h.fs.readBudget.inUse <= 16 * 10_100)
    }

    @Test func aSmallFileReadFromTheMiddleFirstIsOneRequest() async throws {
        // The kernel's requests for one read(2) may arrive out of order: the first one seen is
        // not at offset 0.
        let h = Harness { $0.walkAheadFiles = 0 }
        let content = Data.pattern(32 << 10, seed: 21)
        h.store.put("small", content)
        let ino = try await h.ino("small")
        h.store.resetCounts()
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        let tail = try await h.fs.read(ino: ino, fh: fh, offset: 16 << 10, size: 16 << 10)
        let head = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 16 << 10)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(head + tail == content)
        #expect(h.store.count("read") == 1)
    }
}
