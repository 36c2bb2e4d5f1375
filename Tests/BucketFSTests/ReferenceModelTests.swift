import Foundation
import Testing

/// Random operation sequences against the core and a plain model, compared after every step
/// (mountpoint-s3's reftests, for bucketfs: see `Reference/`). Every failure found is shrunk and
/// printed as Swift code, and kept below as a named `regression_*` test.
///
/// Environment:
/// - `BUCKETFS_REFTEST_SEED=N`: run only the sequence of seed N (a failure prints its seed);
/// - `BUCKETFS_REFTEST_SOAK=N`: run N sequences from a random first seed (printed), up to
///   `BUCKETFS_REFTEST_MAX_OPS` steps each (default 60).
@Suite struct ReferenceModelTests {
    static let env = ProcessInfo.processInfo.environment
    static let defaultSequences = 50
    static let defaultMaxOps = 30

    /// The seeds of this run, and the longest sequence.
    static func plan() -> (seeds: [UInt64], maxOps: Int) {
        if let s = env["BUCKETFS_REFTEST_SEED"].flatMap(UInt64.init) {
            return ([s], Int(env["BUCKETFS_REFTEST_MAX_OPS"] ?? "") ?? defaultMaxOps)
        }
        if let n = env["BUCKETFS_REFTEST_SOAK"].flatMap(Int.init) {
            let first = UInt64.random(in: 0..<(1 << 40))
            print("reftest soak: \(n) sequences from seed \(first)")
            return ((0..<UInt64(n)).map { first + $0 }, Int(env["BUCKETFS_REFTEST_MAX_OPS"] ?? "") ?? 60)
        }
        return ((1...UInt64(defaultSequences)).map { $0 }, defaultMaxOps)
    }

    @Test(arguments: RefStoreKind.allCases)
    func randomSequencesMatchTheModel(_ kind: RefStoreKind) async throws {
        let (seeds, maxOps) = Self.plan()
        var failures = 0
        for seed in seeds {
            let ops = RefOp.sequence(seed: seed, maxLength: maxOps)
            guard let first = await ReferenceRun.failure(of: ops, on: kind) else { continue }
            let (shrunk, failure) = await Self.shrink(ops, first, on: kind)
            Issue.record(Comment(rawValue: """
                reference run failed on the \(kind) store: seed \(seed) (BUCKETFS_REFTEST_SEED=\(seed)), \
                \(ops.count) steps, shrunk to \(shrunk.count):
                \(failure)
                As a regression test:
                    @Test func regression_NAME() async {
                        await expectMatchesModel([
                \(shrunk.map { "            " + $0.swift + "," }.joined(separator: "\n"))
                        ])
                    }
                """))
            failures += 1
            if failures >= 3 { break }  // each is shrunk; a few say enough
        }
    }

    /// Drops steps one at a time while the run still fails, then makes written bytes small.
    static func shrink(_ ops: [RefOp], _ failure: RefFailure, on kind: RefStoreKind) async -> ([RefOp], RefFailure) {
        var ops = ops
        var failure = failure
        // Steps after the failing one play no part.
        ops = Array(ops.prefix(failure.step + 1))
        var changed = true
        while changed {
            changed = false
            var i = ops.count - 1
            while i >= 0 {
                var candidate = ops
                candidate.remove(at: i)
                if let f = await ReferenceRun.failure(of: candidate, on: kind) {
                    ops = Array(candidate.prefix(f.step + 1))
                    failure = f
                    changed = true
                }
                i = min(i - 1, ops.count - 1)
            }
            for i in ops.indices {
                guard let b = ops[i].bytes, b.size > 1 else { continue }
                for size in [0, 1] {
                    var candidate = ops
                    candidate[i] = ops[i].withBytes(RefBytes(size: size, seed: b.seed))!
                    if let f = await ReferenceRun.failure(of: candidate, on: kind) {
                        ops = Array(candidate.prefix(f.step + 1))
                        failure = f
                        changed = true
                        break
                    }
                }
            }
        }
        return (ops, failure)
    }
}

/// Runs `ops` on both stores and records any difference from the model (known bugs included:
/// nothing is tolerated).
func expectMatchesModel(_ ops: [RefOp], sourceLocation: SourceLocation = #_sourceLocation) async {
    for kind in RefStoreKind.allCases {
        if let f = await ReferenceRun.failure(of: ops, on: kind, tolerating: []) {
            Issue.record("\(kind) store: \(f)", sourceLocation: sourceLocation)
        }
    }
}

/// Failures the random runs found, shrunk; each stays as a test of its own.
@Suite struct ReferenceModelRegressionTests {
    /// The model itself: a few hand-written sequences that must pass.
    @Test func regression_basicTreeOperations() async {
        await expectMatchesModel([
            .mkdir(dir: 0, name: 0),
            .writeFile(dir: 1, name: 1, .init(size: 100, seed: 1)),
            .append(file: 0, .init(size: 7, seed: 2)),
            .setxattr(node: 0, key: 0, value: 1),
            .rename(node: 1, toDir: 0, name: 2),
            .truncate(file: 0, percent: 50),
            .remotePut(dir: 0, name: 1, child: 0, .init(size: 5, seed: 3)),
            .advanceClock,
            .rmdir(dir: 0),
        ])
    }

    /// The first failure of the random runs (seeds 24 and 52) was the model's: a write of no
    /// bytes past the end extended the model's file; pwrite(2) of nothing changes nothing.
    @Test func regression_emptyWritePastTheEndChangesNothing() async {
        await expectMatchesModel([
            .writeFile(dir: 11, name: 0, .init(size: 100, seed: 762)),
            .writeAt(file: 11, percent: 120, .init(size: 0, seed: 769)),
        ])
    }

    /// Found by seed 740995785819 (memory store), 50 steps shrunk to 4: `mkdir b; rmdir b;
    /// mkdir b; mv b a`, then `a` answers ENOENT (expected: an empty directory). The inode of the
    /// removed `b` stayed in the table and was moved to `a` with the live one; whichever the
    /// dictionary yielded last took the path, so it failed about every other run. Fixed: only
    /// live inodes move. Repeated, since the failure depended on dictionary order.
    @Test(.bug(id: "reftest-2", "a directory rename moved the inode of a removed directory along"))
    func regression_renameAfterRmdirAndMkdirOfTheSameName() async {
        for _ in 0..<8 {
            await expectMatchesModel([
                .mkdir(dir: 7, name: 1),
                .rmdir(dir: 1),
                .mkdir(dir: 8, name: 1),
                .rename(node: 1, toDir: 6, name: 0),
            ])
        }
    }

    /// Found by seed 220237408095 (memory store), 48 steps shrunk to 8: a file `a` hidden by a
    /// directory `a` (the directory wins) stays hidden after `mv a b` through the mount, until
    /// the TTL (expected at once: SPEC §6, own changes invalidate at once; readdir of the root
    /// gave only `b`, the model `a` (file) and `b`). The same happens after `rmdir a`.
    @Test(.bug(id: "reftest-1", "a file uncovered by renaming or removing the directory that hid it shows only after the TTL"))
    func regression_fileUncoveredByADirectoryRenameShowsAtOnce() async {
        do {
            await expectMatchesModel([
                .writeFile(dir: 5, name: 2, .init(size: 0, seed: 949)),
                .remotePut(dir: 12, name: 1, child: nil, .init(size: 0, seed: 500)),
                .remoteDelete(object: 7),
                .mkdir(dir: 2, name: 0),
                .remoteDelete(object: 11),
                .remotePut(dir: 2, name: 0, child: nil, .init(size: 0, seed: 225)),
                .advanceClock,
                .rename(node: 13, toDir: 6, name: 1),
            ])
        }
    }

    /// The same bug through rmdir: `mkdir a`, a file `a` put behind the mount's back (hidden by
    /// the directory), then `rmdir a`: the file should show at once.
    @Test(.bug(id: "reftest-1"))
    func regression_fileUncoveredByRmdirShowsAtOnce() async {
        do {
            await expectMatchesModel([
                .mkdir(dir: 0, name: 0),
                .remotePut(dir: 0, name: 0, child: nil, .init(size: 3, seed: 1)),
                .advanceClock,
                .rmdir(dir: 0),
            ])
        }
    }
}
