import Foundation
import GRDB
@testable import ObjectStores
import StorageModel
import TestSupport
import Testing

/// The embedded bucket's past beyond the conformance case: its retention and cleanup (rows and
/// blob files), a bucket made before versions existed, and the blobs the open-time garbage
/// collection must leave alone.
@Suite struct EmbeddedVersionsTests {
    /// A clock the test moves, from a fixed date (2027-01-15, whole seconds).
    static func testClock() -> ManualClock { ManualClock(date: Date(timeIntervalSince1970: 1_800_000_000)) }

    private func store(_ dir: TempDir, _ clock: ManualClock) throws -> EmbeddedStore {
        try EmbeddedStore(directory: dir.path, bucket: "local", pageSizeLimit: 1000, durable: false, clock: clock.clock)
    }

    private func write(_ s: EmbeddedStore, _ name: String, _ text: String) async throws -> ObjectInfo {
        try await s.write(name, from: .data(Data(text.utf8)), metadata: .init(), preconditions: .none)
    }

    private func kept(_ s: EmbeddedStore, _ prefix: String = "") async throws -> [ObjectVersion] {
        try await Conformance.allVersions(s, prefix: prefix, delimiter: nil).versions
    }

    @Test func keepVersionsRemovesTheOldestRowsAndBlobs() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let clock = Self.testClock()
        let s = try store(dir, clock)
        try s.setVersionSettings(.init(versioning: true, keepVersions: 2))
        var gens: [Int64] = []
        for i in 0..<5 {
            clock.advance(by: .seconds(1))
            gens.append(try await write(s, "f", "v\(i)").generation)
        }
        // The live one and the 2 newest noncurrent ones.
        #expect(try await kept(s).map(\.info.generation) == Array(gens[2...]))
        #expect(dir.files("blobs").count == 3, "the blobs of removed generations are deleted")
        await expectStorageError("objectNotFound", isNotFound) { try await s.read("f", generation: gens[1], range: nil) }
        #expect(try await s.read("f", generation: gens[2], range: nil) == Data("v2".utf8))
        // A delete makes the live one noncurrent: 2 kept, the oldest goes.
        clock.advance(by: .seconds(1))
        try await s.delete("f", preconditions: .none)
        #expect(try await kept(s).map(\.info.generation) == Array(gens[3...]))
        #expect(dir.files("blobs").count == 2)
        // Lowering the count later applies at once.
        try s.setVersionSettings(.init(versioning: true, keepVersions: 0))
        #expect(try await kept(s).isEmpty)
        #expect(dir.files("blobs").isEmpty)
    }

    @Test func keepForRemovesGenerationsOlderThanItAtOpenAndAfterWrites() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let clock = Self.testClock()
        let s = try store(dir, clock)
        try s.setVersionSettings(.init(versioning: true, keepFor: 3600))
        let a1 = try await write(s, "a", "a1")
        clock.advance(by: .seconds(10))
        let a2 = try await write(s, "a", "a2")  // a1 noncurrent since now
        let b1 = try await write(s, "b", "b1")
        clock.advance(by: .seconds(1800))
        try await s.delete("b", preconditions: .none)  // b1 noncurrent since now
        #expect(try await kept(s).map(\.info.generation) == [a1.generation, a2.generation, b1.generation])
        // An hour after a1 stopped being live, but not b1: a reopen sweeps a1 away.
        clock.advance(by: .seconds(1801))
        let again = try store(dir, clock)
        #expect(try await kept(again).map(\.info.generation) == [a2.generation, b1.generation])
        #expect(dir.files("blobs").count == 2)
        // Later, a write of another name sweeps b1 (its sweep is due: ten minutes since the last).
        clock.advance(by: .seconds(1800))
        _ = try await write(again, "c", "c1")
        #expect(try await kept(again).map(\.info.generation).contains(b1.generation) == false)
        #expect(dir.files("blobs").count == 2, "a2 and c1")
    }

    @Test func unversionedBucketKeepsNothingAndSaysSo() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        #expect(try await s.versioningState().enabled == false)
        let a1 = try await write(s, "a", "1")
        let a2 = try await write(s, "a", "2")
        #expect(try await kept(s).map(\.info.generation) == [a2.generation])
        await expectStorageError("objectNotFound", isNotFound) { try await s.read("a", generation: a1.generation, range: nil) }
        #expect(dir.files("blobs").count == 1)
    }

    /// A bucket made before versions existed (its schema, rows and blobs as that version wrote
    /// them) opens unchanged, keeps working, and can be made versioned later.
    @Test func bucketMadeBeforeVersionsOpensAndCanBeVersionedLater() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        try FileManager.default.createDirectory(atPath: dir.path + "/blobs", withIntermediateDirectories: true)
        try Data("old bytes".utf8).write(to: URL(fileURLWithPath: dir.path + "/blobs/blob-1"))
        let old = Date(timeIntervalSinceNow: -7200)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: dir.path + "/blobs/blob-1")
        try Self.writeOldSchema(dir.path + "/bucket.sqlite")
        let s = try EmbeddedStore(directory: dir.path)
        #expect(try await s.read("docs/old.txt", generation: nil, range: nil) == Data("old bytes".utf8))
        #expect(dir.files("blobs") == ["blob-1"], "the open's garbage collection keeps the live blob")
        #expect(try s.versionSettings() == .init())
        #expect(try await s.versioningState().enabled == false)
        #expect(try await kept(s).map(\.info.name) == ["docs/old.txt"])
        // Made versioned later (`bucketfs mb DIR --versioning` on it): the old generation is kept.
        try s.setVersionSettings(.init(versioning: true))
        _ = try await write(s, "docs/old.txt", "new bytes")
        let all = try await kept(s)
        #expect(all.map(\.info.generation).first == 1_700_000_000_000_000)
        #expect(all.map(\.isLive) == [false, true])
        #expect(try await s.read("docs/old.txt", generation: 1_700_000_000_000_000, range: nil) == Data("old bytes".utf8))
        // The kept blob is old and not live: a reopen's garbage collection must leave it.
        _ = try EmbeddedStore(directory: dir.path)
        #expect(dir.files("blobs").contains("blob-1"))
        #expect(try await s.read("docs/old.txt", generation: 1_700_000_000_000_000, range: nil) == Data("old bytes".utf8))
        // A local read of the kept generation opens its own blob.
        let fd = try #require(try await s.openLocal("docs/old.txt", generation: 1_700_000_000_000_000))
        var buf = [UInt8](repeating: 0, count: 16)
        let n = read(fd, &buf, 16)
        close(fd)
        #expect(Data(buf[0..<max(n, 0)]) == Data("old bytes".utf8))
    }

    /// The schema, a row and a counter as a bucketfs without versions wrote them.
    private static func writeOldSchema(_ path: String) throws {
        let q = try DatabaseQueue(path: path)
        try q.write { db in
            try db.execute(sql: """
                CREATE TABLE objects (name TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,
                    metageneration INTEGER NOT NULL, size INTEGER NOT NULL, md5 TEXT, crc32c TEXT,
                    created_us INTEGER NOT NULL, updated_us INTEGER NOT NULL, cache_control TEXT,
                    content_disposition TEXT, content_encoding TEXT, content_language TEXT, content_type TEXT,
                    custom_metadata TEXT NOT NULL, blob TEXT NOT NULL) WITHOUT ROWID;
                CREATE TABLE counters (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
                INSERT INTO objects VALUES ('docs/old.txt', 1700000000000000, 1, 9, NULL, NULL, 1700000000000000,
                    1700000000000000, NULL, NULL, NULL, NULL, 'text/plain', '{}', 'blob-1');
                INSERT INTO counters VALUES ('generation', 1700000000000000);
                """)
        }
    }

    @Test func versionedListingPagesAcrossGenerationsAndPrefixes() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path, bucket: "local", pageSizeLimit: 1000, durable: false)
        try s.setVersionSettings(.init(versioning: true))
        for i in 0..<3 { _ = try await write(s, "d/x", "x\(i)") }
        for i in 0..<3 { _ = try await write(s, "y", "y\(i)") }
        try await s.delete("d/x", preconditions: .none)
        let one = try await Conformance.allVersions(s, prefix: "", delimiter: "/", maxResults: 1)
        #expect(one.prefixes == ["d/"])
        #expect(one.versions.map(\.info.name) == ["y", "y", "y"])
        #expect(one.pages == 4)
        let flat = try await Conformance.allVersions(s, prefix: "", delimiter: nil, maxResults: 2)
        #expect(flat.versions.map(\.info.name) == ["d/x", "d/x", "d/x", "y", "y", "y"])
        #expect(flat.versions.filter(\.isLive).map(\.info.name) == ["y"])
        await expectStorageError("invalidArgument", { if case .invalidArgument = $0 { return true } else { return false } }) {
            try await s.listVersions(ListRequest(pageToken: "not a token"))
        }
    }

    /// 10,000 names with 3 generations each: the versioned listing against the live one, whole,
    /// in pages of 1,000 (`BUCKETFS_BENCH_VERSIONS=1`; prints the times). Both must list
    /// everything: 30,000 versions in 30 pages, 10,000 items in 10.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["BUCKETFS_BENCH_VERSIONS"] == "1"))
    func versionedListingOfTenThousandNamesAgainstTheLiveOne() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path, bucket: "local", pageSizeLimit: 1000, durable: false)
        try s.setVersionSettings(.init(versioning: true))
        for g in 0..<3 {
            for i in 0..<10_000 {
                _ = try await write(s, String(format: "d%02d/f%05d", i % 100, i), "g\(g)")
            }
        }
        let clock = ContinuousClock()
        var livePages = 0, items = 0
        let live = try await clock.measure {
            var token: String?
            repeat {
                let page = try await s.list(ListRequest(prefix: "", delimiter: nil, maxResults: 1000, pageToken: token))
                items += page.items.count
                livePages += 1
                token = page.nextPageToken
            } while token != nil
        }
        var all: (prefixes: [String], versions: [ObjectVersion], pages: Int) = ([], [], 0)
        let versioned = try await clock.measure {
            all = try await Conformance.allVersions(s, prefix: "", delimiter: nil)
        }
        #expect(items == 10_000 && livePages == 10)
        #expect(all.versions.count == 30_000 && all.pages == 30)
        print("embedded listing, 10,000 names x 3 generations: live \(live) (\(livePages) pages), versioned \(versioned) (\(all.pages) pages)")
    }
}
