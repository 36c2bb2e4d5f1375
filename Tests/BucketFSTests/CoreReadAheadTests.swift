@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The read path of issue 10: parts fetched ahead of a sequential reader within one mount-wide
/// budget, a seek that stops them, and small files fetched ahead of a walk in listing order —
/// pinned to the generation listed, dropped when not opened. No timing: background work is
/// awaited by polling its effects.
@Suite struct CoreReadAheadTests {
    /// Polls `condition` until it holds (or 10 s pass, then the caller's expectation fails).
    func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<1000 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    @Test func aSequentialReaderGetsPartsFetchedAhead() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4 }
        let content = Data.pattern(40 << 20, seed: 11)
        h.store.put("big.bin", content)
        let ino = try await h.ino("big.bin")
        h.store.resetCounts()
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
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

    /// The kernel's read-ahead sends several requests at once and they may arrive in any order
    /// within its window: the reader is still sequential, no part is dropped, nothing is read twice.
    @Test func requestsOutOfOrderWithinTheKernelsReadAheadKeepTheParts() async throws {
        let h = Harness { $0.readPartFirst = 1 << 20; $0.readPartMax = 4 << 20; $0.readStreams = 4; $0.kernelReadAhead = 4 << 20 }
        let size = 41 << 20
        let content = Data.pattern(size, seed: 13)
        h.store.put("big.bin", content)
        let ino = try await h.ino("big.bin")
        h.store.resetCounts()
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
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
        let content = Data.pattern(40 << 20, seed: 12)
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
        // A jump far ahead: the parts are dropped and only the bytes asked for are read.
        let at = 30 << 20
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
        #expect(try await h.readAll("d/f00") == contents[0])
        // The next four files in listing order are on their way before anyone opens them.
        #expect(await eventually { Set(h.fs.walkAhead.pending) == ["d/f01", "d/f02", "d/f03", "d/f04"] })
        #expect(await eventually { (1...4).allSatisfy { self.reads(h, String(format: "d/f%02d", $0)) == 1 } })
        #expect(reads(h, "d/f05") == 0)
        for i in 1..<20 {
            #expect(try await h.readAll(String(format: "d/f%02d", i)) == contents[i])
        }
        // One read per file, whatever was fetched ahead and when; nothing else.
        for i in 0..<20 { #expect(reads(h, String(format: "d/f%02d", i)) == 1, "f\(i)") }
        #expect(h.store.totalRequests == 20)
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.fs.readBudget.inUse == 0)
    }

    @Test func bytesFetchedAheadAreNeverServedForAnotherGeneration() async throws {
        let (h, contents) = try await walkHarness()
        #expect(try await h.readAll("d/f00") == contents[0])
        #expect(await eventually { self.reads(h, "d/f01") == 1 && h.fs.walkAhead.pending.contains("d/f01") })
        let fetched = try #require(h.store.reads.first { $0.name == "d/f01" })
        // f01 is replaced behind the mount; once the TTL has passed, the open sees the new
        // generation and must not be handed the old bytes fetched ahead.
        let v2 = h.store.replaceBehind("d/f01", Data("the second version".utf8))
        #expect(fetched.generation != v2.generation)
        h.clock.advance(10)
        #expect(try await h.readAll("d/f01") == Data("the second version".utf8))
        #expect(h.store.reads.last?.generation == v2.generation)
        #expect(!h.fs.walkAhead.pending.contains("d/f01"))
    }

    @Test func filesFetchedAheadButNeverOpenedAreDropped() async throws {
        let (h, contents) = try await walkHarness { $0.walkAheadTTL = 10 }
        #expect(try await h.readAll("d/f00") == contents[0])
        #expect(await eventually { h.fs.walkAhead.pending.count == 4 })
        #expect(h.fs.readBudget.inUse > 0)
        // Nobody opens them: the sweep (which the walk-ahead runs by itself once the TTL has
        // passed, on real time) drops them and frees their memory; not before the TTL.
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.pending.count == 4)
        h.clock.advance(11)
        // Reading the statistics changes nothing.
        #expect(h.fs.statistics().readAheadBytes > 0)
        #expect(h.fs.walkAhead.pending.count == 4)
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.fs.readBudget.inUse == 0)
    }

    @Test func aWalkThatSkipsAheadDropsWhatItPassedOver() async throws {
        let (h, contents) = try await walkHarness()
        #expect(try await h.readAll("d/f00") == contents[0])
        #expect(await eventually { h.fs.walkAhead.pending.count == 4 })
        // The reader jumps to f10: f01…f04 are not in the new window and go.
        #expect(try await h.readAll("d/f10") == contents[10])
        #expect(await eventually { Set(h.fs.walkAhead.pending) == ["d/f11", "d/f12", "d/f13", "d/f14"] })
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
}
