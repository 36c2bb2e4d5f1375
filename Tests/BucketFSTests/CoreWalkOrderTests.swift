@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// The walk-ahead on the open orders real tools make (docs/SEMANTICS.md §3.6), replayed in the
/// core, with no kernel: each event of an order opens a file (`oN`), reads it whole (`rN`) or
/// closes it (`cN`), N being the file's place in the order the tool walks in (the listing's, or
/// inode numbers' for borg). The orders were recorded with `strace -f` of each tool over a
/// directory of 53 files of 32 KiB (Scripts/bench/open_order.py); the others are made from a
/// rule and say so. Store reads are counted: a walk gets each file once and nearly every one
/// fetched ahead; an incremental backup reading k files of 53 costs at most k + 2.
@Suite struct CoreWalkOrderTests {
    static let files = 53

    /// `tar -cf - DIR` (GNU tar 1.34): one file at a time, in the order readdir gives, which is
    /// the listing's through the mount. (On local disk tar follows the file system's own order;
    /// rsync and rdiff-backup sort names, and were recorded as this same order.)
    static let tar = (0..<files).map { "o\($0) r\($0) c\($0)" }.joined(separator: " ")

    /// `restic backup DIR` (0.14.0): its archiver's two file readers take the sorted names in
    /// turn; recorded on local disk.
    static let restic = """
        o0 o1 o2 r0 r1 c0 c1 o3 r2 c2 o4 r3 c3 o5 r4 o6 r5 c5 c4 r6 o7 c6 o8 r7 c7 r8 o9 c8 r9 o10 c9 \
        o11 r10 r11 c11 o12 r12 c12 o13 r13 c13 o14 r14 o15 c14 o16 r15 r16 c15 c16 o17 r17 o18 c17 \
        o19 r18 o20 c18 r19 o21 r20 o22 c20 r21 o23 c21 o24 r23 r22 c22 r24 o25 c24 o26 r25 o27 c25 \
        r26 o28 r27 c27 r28 c28 o29 o30 r29 o31 c29 r30 o32 r31 c31 o33 r32 c32 o34 r33 c33 o35 r34 \
        c34 o36 r35 c35 c30 r36 o37 c36 o38 r37 o39 c37 r38 c38 r39 o40 c39 o41 r40 c40 r41 c41 o42 \
        o43 r42 c42 o44 r43 o45 c43 r44 o46 c44 r45 c45 r46 o47 r47 o48 c47 r48 o49 c48 r49 o50 c49 \
        o51 r50 c50 r51 o52 r52 c52
        """

    /// `rsync -a DIR/ DEST/` (3.2.7), the sender's side, recorded (a few closes fall outside the
    /// trace's window of the file and are left to the end).
    static let rsync = """
        o0 r0 c0 o1 r1 c1 o2 r2 c2 o3 r3 o4 r4 c4 o5 r5 c5 o6 r6 c6 o7 r7 c7 o8 r8 c8 o9 r9 c9 o10 \
        r10 c10 o11 r11 o12 r12 c12 o13 r13 c13 o14 r14 o15 r15 c15 o16 r16 c16 o17 r17 c17 o18 r18 \
        c18 o19 r19 c19 o20 r20 c20 o21 r21 o22 r22 o23 r23 o24 r24 c24 o25 r25 c25 o26 r26 c26 o27 \
        r27 c27 o28 r28 c28 o29 r29 c29 o30 r30 c30 o31 r31 o32 r32 c32 o33 r33 o34 r34 c34 o35 r35 \
        c35 o36 r36 c36 o37 r37 c37 o38 r38 o39 r39 c39 o40 r40 o41 r41 c41 o42 r42 c42 o43 r43 c43 \
        o44 r44 c44 o45 r45 c45 o46 r46 c46 o47 r47 c47 o48 r48 c48 o49 r49 c49 o50 r50 c50 o51 r51 \
        o52 r52 c52
        """

    /// `borg create` (1.2.4), in inode-number order: open, read, `fadvise(DONTNEED)`, close.
    static let borg = (0..<files).map { "o\($0) r\($0) c\($0)" }.joined(separator: " ")

    /// Incremental runs, 2 of the 53 changed (s0013 and s0040), recorded: rdiff-backup 2.2.2
    /// and restic open only what changed; borg opens every file (in inode order) and read three.
    static let rdiffIncremental = "o13 r13 c13 o40 r40 c40"
    static let resticIncremental = "o13 r13 o40 c13 r40 c40"
    static let borgIncremental = (0..<files).map { i in
        [14, 17, 34].contains(i) ? "o\(i) r\(i) c\(i)" : "o\(i) c\(i)"
    }.joined(separator: " ")

    /// Two readers of which one waits while the other races ahead: each takes the next name
    /// when it is done with its file; the second reader's files 1, 5, 9... take as long as the
    /// first reader takes for `lag` files (a file read on demand while the others were fetched
    /// ahead). Made, not recorded: restic through a slow mount. (With the rule before this one,
    /// the late read of file 1 looked like a start over and stopped the guesses each time.)
    static func laggingPair(lag: Int) -> String {
        var events: [String] = []
        var next = 0
        func take() -> Int? {
            guard next < files else { return nil }
            defer { next += 1 }
            events.append("o\(next)")
            return next
        }
        var a = take(), b = take()
        var left = b.map { $0 % 4 == 1 ? lag : 0 } ?? 0
        while a != nil || b != nil {
            if let f = a {
                events += ["r\(f)", "c\(f)"]
                a = take()
            }
            if let f = b {
                if left <= 0 || a == nil {
                    events += ["r\(f)", "c\(f)"]
                    b = take()
                    left = b.map { $0 % 4 == 1 ? lag : 0 } ?? 0
                } else {
                    left -= 1
                }
            }
        }
        return events.joined(separator: " ")
    }

    /// Eight readers taking the sorted names in turn from one queue, each file finishing in a
    /// shuffled order within the eight open at once (made, seeded).
    static func eightReaders() -> String {
        var rng = SplitMix(seed: 8)
        var events: [String] = []
        var open: [Int] = []
        var next = 0
        while next < files || !open.isEmpty {
            while open.count < 8, next < files {
                events.append("o\(next)")
                open.append(next)
                next += 1
            }
            let f = open.remove(at: Int(rng.next() % UInt64(open.count)))
            events += ["r\(f)", "c\(f)"]
        }
        return events.joined(separator: " ")
    }

    struct SplitMix {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9e37_79b9_7f4a_7c15
            var z = state
            z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
            z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
            return z ^ (z >> 31)
        }
    }

    enum Walked { case listing, inode }

    func name(_ i: Int) -> String { String(format: "d/s%04d", i) }

    /// A listed directory `d` of 53 files of 32 KiB, walk-ahead limit `limit`; the files' names
    /// in the order walked.
    func harness(limit: Int = 16, order: Walked) async throws -> (Harness, [String: Data], [String]) {
        let h = Harness { $0.walkAheadFiles = limit; $0.walkAheadTTL = 60 }
        var contents: [String: Data] = [:]
        for i in 0..<Self.files {
            contents[name(i)] = Data.pattern(32 << 10, seed: UInt32(i + 1))
            h.store.put(name(i), contents[name(i)]!)
        }
        _ = try await h.readdirAll(Harness.root)
        _ = try await h.readdirAll(try await h.ino("d"))
        var names = (0..<Self.files).map(name)
        if order == .inode {
            var inos: [String: UInt64] = [:]
            for n in names { inos[n] = try await h.ino(n) }
            names.sort { inos[$0]! < inos[$1]! }
        }
        h.store.resetCounts()
        return (h, contents, names)
    }

    /// Replays `events` over `names` (N: the N-th name); every file read is checked whole.
    func replay(_ events: String, _ h: Harness, _ contents: [String: Data], _ names: [String]) async throws {
        var handles: [Int: (ino: UInt64, fh: UInt64)] = [:]
        for e in events.split(separator: " ") {
            let i = Int(e.dropFirst())!
            switch e.first {
            case "o":
                let ino = try await h.ino(names[i])
                handles[i] = (ino, try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY)))
            case "r":
                let (ino, fh) = try #require(handles[i], "\(e): not open")
                var got = Data()
                while true {
                    let d = try await h.fs.read(ino: ino, fh: fh, offset: UInt64(got.count), size: 128 << 10)
                    if d.isEmpty { break }
                    got += d
                }
                #expect(got == contents[names[i]], "\(names[i])")
            default:
                let open = handles.removeValue(forKey: i)
                let (ino, fh) = try #require(open, "\(e): not open")
                try await h.fs.release(ino: ino, fh: fh)
            }
        }
        for (_, (ino, fh)) in handles { try await h.fs.release(ino: ino, fh: fh) }
    }

    func readsPerFile(_ h: Harness) -> [String: Int] {
        Dictionary(h.store.reads.map { ($0.name, 1) }, uniquingKeysWith: +)
    }

    /// A whole walk: every file once, and all but the first few fetched ahead.
    func expectWalk(_ events: String, order: Walked, firstOnDemand: Int, _ label: String) async throws {
        let (h, contents, names) = try await harness(order: order)
        try await replay(events, h, contents, names)
        let reads = readsPerFile(h)
        #expect(reads.count == Self.files && reads.values.allSatisfy { $0 == 1 }, "\(label): \(reads.filter { $0.value != 1 })")
        #expect(h.store.totalRequests == Self.files, "\(label): \(h.store.counts)")
        let (hits, misses) = h.fs.walkAhead.outcomes(in: "d")
        #expect(misses == 0, "\(label): \(misses) guesses unread")
        #expect(hits >= Self.files - firstOnDemand, "\(label): \(hits) of \(Self.files) fetched ahead")
    }

    @Test func tarIsAWalk() async throws {
        try await expectWalk(Self.tar, order: .listing, firstOnDemand: 3, "tar")
    }

    @Test func resticsTwoReadersAreAWalk() async throws {
        try await expectWalk(Self.restic, order: .listing, firstOnDemand: 5, "restic")
    }

    @Test func rsyncIsAWalk() async throws {
        try await expectWalk(Self.rsync, order: .listing, firstOnDemand: 3, "rsync")
    }

    @Test func borgInInodeOrderIsAWalk() async throws {
        try await expectWalk(Self.borg, order: .inode, firstOnDemand: 3, "borg")
    }

    /// One reader far behind the other is still the same walk: its read is not a start over
    /// (which would stop the guesses and ask for the evidence again).
    @Test func aReaderFarBehindTheOtherIsTheSameWalk() async throws {
        for lag in [3, 6, 12, 24] {
            try await expectWalk(Self.laggingPair(lag: lag), order: .listing, firstOnDemand: 8, "two readers, one \(lag) behind")
        }
    }

    /// Read on demand: the eight opened at once, the few opened while three reads make the
    /// walk evident, and those opened while its width grows from 2.
    @Test func eightReadersAreAWalk() async throws {
        try await expectWalk(Self.eightReaders(), order: .listing, firstOnDemand: 16, "eight readers")
    }

    /// The k + 2 rule: an incremental run reading k files of 53 costs at most k + 2 reads.
    @Test func incrementalBackupsCostWhatTheyRead() async throws {
        for (label, events, order, k) in [("rdiff-backup", Self.rdiffIncremental, Walked.listing, 2),
                                          ("restic", Self.resticIncremental, .listing, 2),
                                          ("borg", Self.borgIncremental, .inode, 3)] {
            let (h, contents, names) = try await harness(order: order)
            try await replay(events, h, contents, names)
            #expect(h.store.count("read") <= k + 2, "\(label): \(h.store.count("read")) reads for \(k) files read")
            #expect(h.fs.walkAhead.pending.isEmpty, "\(label)")
        }
    }

    /// A reader in no order (seeded shuffles, reading 10, 25 and all 53): nothing like a walk,
    /// so at most the first guesses of a false start or two beyond what it reads.
    @Test func aRandomReaderGetsLittleFetchedAhead() async throws {
        var rng = SplitMix(seed: 53)
        for count in [10, 25, Self.files] {
            var order = Array(0..<Self.files)
            for i in stride(from: order.count - 1, to: 0, by: -1) { order.swapAt(i, Int(rng.next() % UInt64(i + 1))) }
            let events = order.prefix(count).map { "o\($0) r\($0) c\($0)" }.joined(separator: " ")
            let (h, contents, names) = try await harness(order: .listing)
            try await replay(events, h, contents, names)
            #expect(h.store.count("read") <= count + 4, "\(count) random: \(h.store.count("read")) reads")
        }
    }
}
