@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The walk-ahead guesses only on evidence (docs/SEMANTICS.md §3.6): reads of a few files far
/// apart (an incremental backup reading what changed), or opens not followed by reads (borg),
/// get nothing fetched ahead; three files read whole in a row that are neighbours make a walk
/// evident, and the guesses start small and widen as they are read; a guess gone unread stops
/// them, and the walk needs more evidence to start again. Store reads are counted. A walk-ahead registers its fetches within the read that completes a file,
/// so "nothing pending" right after the reads is timing-free.
@Suite struct CoreWalkEvidenceTests {

    /// A listed directory `d` of `files` small files f00…; the window's limit is `limit`.
    func harness(files: Int = 50, limit: Int = 8, size: Int = 8_000) async throws -> (Harness, [Data]) {
        let h = Harness { $0.walkAheadFiles = limit; $0.walkAheadTTL = 60 }
        var contents: [Data] = []
        for i in 0..<files {
            contents.append(Data.pattern(size + i, seed: UInt32(i + 1)))
            h.store.put(name(i), contents[i])
        }
        _ = try await h.readdirAll(Harness.root)
        _ = try await h.readdirAll(try await h.ino("d"))
        h.store.resetCounts()
        return (h, contents)
    }

    func name(_ i: Int) -> String { String(format: "d/f%02d", i) }

    func read(_ h: Harness, _ contents: [Data], _ order: [Int]) async throws {
        for i in order { #expect(try await h.readAll(name(i)) == contents[i], "f\(i)") }
    }

    @Test func filesFarApartGetNothingFetchedAhead() async throws {
        // An incremental backup: 2 of 50 changed, then 5 of 50, scattered.
        let (h, contents) = try await harness()
        try await read(h, contents, [9, 30])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 2)
        try await read(h, contents, [2, 14, 21, 37, 44])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 7)
        #expect(h.store.totalRequests == 7)
    }

    @Test func twoNeighboursAreNotAWalk() async throws {
        let (h, contents) = try await harness()
        try await read(h, contents, [9, 10])
        #expect(h.fs.walkAhead.pending.isEmpty)
        try await read(h, contents, [30, 31])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 4)
    }

    @Test func threeNeighboursStartAWalkThatWidensWithEachHit() async throws {
        let (h, contents) = try await harness(limit: 8)
        try await read(h, contents, [0, 1])
        #expect(h.fs.walkAhead.pending.isEmpty)
        // The third neighbour: a walk; two files guessed.
        try await read(h, contents, [2])
        #expect(Set(h.fs.walkAhead.pending) == [name(3), name(4)])
        // Each guess taken doubles the width (files fetched at once), up to the limit; once a
        // guess was read, the width stays in flight while what landed waits for the reader (up
        // to sixteen limits of files: here the rest of the directory).
        try await read(h, contents, [3])
        #expect(await eventually { Set(h.fs.walkAhead.pending) == Set((4...49).map(name)) })
        try await read(h, contents, [4])
        #expect(await eventually { Set(h.fs.walkAhead.pending) == Set((5...49).map(name)) })
        try await read(h, contents, Array(5..<50))
        for i in 0..<50 { #expect(h.store.reads.filter { $0.name == name(i) }.count == 1, "f\(i)") }
        #expect(h.store.totalRequests == 50)
        #expect(h.fs.walkAhead.outcomes(in: "d") == (hits: 47, misses: 0))
    }

    /// What lands and waits for the reader (a reader busy with a large file met halfway through
    /// the directory) is bounded twice: sixteen limits of files, and four MiB per unit of the
    /// limit, whichever comes first (a reader that stops costs at most that).
    @Test func whatWaitsForTheReaderIsBoundedInFilesAndInBytes() async throws {
        // Small files: the width (2) and sixteen limits (32) past it.
        let (small, smallContents) = try await harness(files: 60, limit: 2)
        try await read(small, smallContents, [0, 1, 2, 3])
        #expect(await eventually { Set(small.fs.walkAhead.pending) == Set((4...37).map(name)) })
        #expect(await eventually { small.store.count("read") == 4 + 34 })
        // 1 MB files: the width, then 8 MiB of them (8 files), not 32.
        let (large, largeContents) = try await harness(files: 40, limit: 2, size: 1_000_000)
        try await read(large, largeContents, [0, 1, 2, 3])
        #expect(await eventually { Set(large.fs.walkAhead.pending) == Set((4...13).map(name)) })
        #expect(await eventually { large.store.count("read") == 4 + 10 })
    }

    @Test func aFalseStartCostsTwoGuessesThenBacksOffAndRecovers() async throws {
        let (h, contents) = try await harness()
        // Three neighbours changed: indistinguishable from a walk, two guesses.
        try await read(h, contents, [9, 10, 11])
        #expect(Set(h.fs.walkAhead.pending) == [name(12), name(13)])
        #expect(await eventually { h.store.count("read") == 5 })
        // The next changed file is far on: the guesses went unread and go.
        try await read(h, contents, [30])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.fs.walkAhead.outcomes(in: "d") == (hits: 0, misses: 2))
        // k = 4 files opened, k + 2 reads.
        #expect(h.store.count("read") == 6)
        // Four neighbours are not enough now: the evidence doubled.
        try await read(h, contents, [31, 32])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 8)
        try await read(h, contents, [33])
        #expect(h.fs.walkAhead.pending.isEmpty)
        // The walk goes on (five opens in a row): guessed for again.
        try await read(h, contents, [34])
        #expect(Set(h.fs.walkAhead.pending) == [name(35), name(36)])
        try await read(h, contents, Array(35..<50))
        for i in 30..<50 { #expect(h.store.reads.filter { $0.name == name(i) }.count == 1, "f\(i)") }
        #expect(h.fs.walkAhead.outcomes(in: "d").hits == 15)
    }

    @Test func filesOpenedButNotReadAreNoWalk() async throws {
        // borg opens every file of a directory in inode order (to fstat it) and reads only the
        // changed ones: the opens walk, the reads do not.
        let (h, contents) = try await harness()
        var inos: [(Int, UInt64)] = []
        for i in 0..<50 { inos.append((i, try await h.ino(name(i)))) }
        for (i, ino) in inos.sorted(by: { $0.1 < $1.1 }) {
            let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
            if i == 9 || i == 30 {
                #expect(try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 1 << 20) == contents[i])
            }
            try await h.fs.release(ino: ino, fh: fh)
        }
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 2)
    }

    @Test func aGuessOpenedAndClosedUnreadStopsTheWalk() async throws {
        let (h, contents) = try await harness()
        try await read(h, contents, [0, 1, 2])
        #expect(Set(h.fs.walkAhead.pending) == [name(3), name(4)])
        #expect(await eventually { h.store.count("read") == 5 })
        let ino = try await h.ino(name(3))
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.fs.walkAhead.outcomes(in: "d").misses == 1)
        // f04, fetched already, is read: one step of the longer evidence, nothing more guessed.
        try await read(h, contents, [4])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 5)
        try await read(h, contents, [5, 6])
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.store.count("read") == 7)
    }

    @Test func guessesNobodyOpensStopTheWalkAtTheirTTL() async throws {
        let (h, contents) = try await harness()
        try await read(h, contents, [20, 21, 22])
        #expect(h.fs.walkAhead.pending.count == 2)
        h.clock.advance(61)
        h.fs.walkAhead.sweep()
        #expect(h.fs.walkAhead.pending.isEmpty)
        #expect(h.fs.walkAhead.outcomes(in: "d").misses == 2)
        // One more neighbour is not a walk any more.
        try await read(h, contents, [23])
        #expect(h.fs.walkAhead.pending.isEmpty)
    }

    @Test func theWindowReachesSeventeenLimits() async throws {
        // The limit is the fetches at once (CoreWalkWidthTests); what landed waits for the
        // reader within sixteen limits more: 4 + 64 files past the reader, however fast it reads.
        // (Two-digit names: f00…f98 are listed in the order they are read.)
        let (h, contents) = try await harness(files: 99, limit: 4)
        for i in 0..<10 { #expect(try await h.readAll(name(i)) == contents[i]) }
        #expect(await eventually { Set(h.fs.walkAhead.pending) == Set((10..<78).map(name)) })
        for i in 10..<99 { #expect(try await h.readAll(name(i)) == contents[i]) }
        #expect(h.store.totalRequests == 99)
    }

    /// A second walk of the same directory soon after the first (`tar` run again, its page cache
    /// gone): the files the first walk opened are fetched ahead of the second once it shows a walk,
    /// not read one at a time on demand. What was opened since the reader started over is still
    /// left to its own reader (two readers at once).
    @Test func aSecondWalkSoonAfterTheFirstIsFetchedAheadToo() async throws {
        let (h, contents) = try await harness(files: 50)
        try await read(h, contents, Array(0..<50))
        #expect(await eventually { h.fs.walkAhead.pending.isEmpty })
        let first = h.fs.walkAhead.outcomes(in: "d")
        #expect(first.hits == 47)
        h.store.resetCounts()
        try await read(h, contents, Array(0..<50))
        // Some files the first walk read are kept for a reopen (at most 16); the rest, after the
        // three that make the walk evident again, were fetched ahead and read.
        let second = h.fs.walkAhead.outcomes(in: "d")
        #expect(second.hits - first.hits >= 50 - 3 - 16)
        #expect(second.misses == 0)
        // One request a file at most, as in the first walk.
        #expect(h.store.count("read") <= 50)
        for i in 0..<50 { #expect(h.store.reads.filter { $0.name == self.name(i) }.count <= 1, "f\(i)") }
    }
}
