import Foundation
import PropertyBased
@testable import ObjectStores
import StorageModel
import TestSupport
import Testing

/// A fresh directory under the system temp dir, removed by `cleanup()`.
struct TempDir {
    let path: String
    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("embedded-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
    func files(_ sub: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path + "/" + sub)) ?? []).sorted()
    }
}

@Suite struct EmbeddedStoreTests {
    @Test func conformance() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        // A new instance per case on one directory: instances share everything through it.
        try await runStoreConformance({ try EmbeddedStore(directory: dir.path + "/bucket") },
                                      capabilities: .init(versioning: .off))
    }

    /// Made with `--versioning`: every replaced and deleted generation kept.
    @Test func versionedConformance() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        try EmbeddedStore(directory: dir.path + "/bucket").setVersionSettings(.init(versioning: true))
        try await runStoreConformance({ try EmbeddedStore(directory: dir.path + "/bucket") },
                                      capabilities: .init(versioning: .on))
    }

    @Test func crc32cKnownVectors() {
        #expect(CRC32C.checksum(Data("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum(Data()) == 0)
        // RFC 3720 (iSCSI) B.4 test vectors.
        #expect(CRC32C.checksum(Data(repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum(Data(repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum(Data((0..<32).map { UInt8($0) })) == 0x46DD_794E)
        var c = CRC32C()
        c.update(Data("hello ".utf8))
        c.update(Data("world".utf8))
        #expect(c.base64 == "yZRlqg==")
    }

    @Test func checksumsOfEmptyObject() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        let info = try await s.write("empty", from: .data(Data()), metadata: .init(), preconditions: .none)
        #expect(info.md5Hash == "1B2M2Y8AsgTpgAmY7PhCfg==")
        #expect(info.crc32c == "AAAAAA==")
    }

    @Test func createsMissingDirectoryAndPersists() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let path = dir.path + "/a/b/c"
        let w: ObjectInfo
        do {
            let s = try EmbeddedStore(directory: path, bucket: "mine")
            #expect(s.bucket == "mine")
            w = try await s.write("x/y", from: .data(Data("abc".utf8)), metadata: .init(contentType: "text/plain"),
                                  preconditions: .none)
            #expect(w.bucket == "mine")
        }
        #expect(FileManager.default.fileExists(atPath: path + "/bucket.sqlite"))
        let again = try EmbeddedStore(directory: path, bucket: "mine")
        let info = try await again.getMetadata("x/y")
        #expect(info == w)
        #expect(try await again.read("x/y", generation: nil, range: nil) == Data("abc".utf8))
    }

    @Test func twoInstancesOnOneDirectorySeeEachOther() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let a = try EmbeddedStore(directory: dir.path)
        let b = try EmbeddedStore(directory: dir.path)
        let w = try await a.write("shared", from: .data(Data("from a".utf8)), metadata: .init(customMetadata: ["k": "a"]),
                                  preconditions: .doesNotExist)
        #expect(try await b.read("shared", generation: nil, range: nil) == Data("from a".utf8))
        var patch = MetadataPatch()
        patch.customMetadata = ["k": "b"]
        _ = try await b.patchMetadata("shared", patch, preconditions: Preconditions(ifMetagenerationMatch: 1))
        let seen = try await a.getMetadata("shared")
        #expect(seen.metageneration == 2)
        #expect(seen.customMetadata == ["k": "b"])
        // A stale metageneration from a is refused after b's patch.
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await a.patchMetadata("shared", patch, preconditions: Preconditions(ifMetagenerationMatch: 1))
        }
        let w2 = try await b.write("shared", from: .data(Data("from b".utf8)), metadata: .init(),
                                   preconditions: Preconditions(ifGenerationMatch: w.generation))
        #expect(w2.generation > w.generation)
        #expect(try await a.read("shared", generation: nil, range: nil) == Data("from b".utf8))
        try await a.delete("shared", preconditions: .none)
        await expectStorageError("objectNotFound", isNotFound) { try await b.getMetadata("shared") }
    }

    @Test func concurrentCreatesFromTwoInstancesHaveOneWinner() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let stores = [try EmbeddedStore(directory: dir.path), try EmbeddedStore(directory: dir.path)]
        let outcomes = try await withThrowingTaskGroup(of: (Int, Int64?).self) { group in
            for i in 0..<16 {
                group.addTask {
                    do {
                        let info = try await stores[i % 2].write("race", from: .data(Data("writer \(i)".utf8)),
                                                                 metadata: .init(), preconditions: .doesNotExist)
                        return (i, info.generation)
                    } catch StorageError.preconditionFailed {
                        return (i, nil)
                    }
                }
            }
            var r: [(Int, Int64?)] = []
            for try await o in group { r.append(o) }
            return r
        }
        let winners = outcomes.filter { $0.1 != nil }
        try #require(winners.count == 1)
        let winner = winners[0].0
        #expect(try await stores[1].read("race", generation: nil, range: nil) == Data("writer \(winner)".utf8))
        #expect(dir.files("blobs").count == 1, "losers' staged blobs are deleted")
    }

    @Test func generationsStrictlyIncreaseAcrossInstances() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let stores = [try EmbeddedStore(directory: dir.path), try EmbeddedStore(directory: dir.path)]
        let gens = try await withThrowingTaskGroup(of: Int64.self) { group in
            for i in 0..<30 {
                group.addTask {
                    try await stores[i % 2].write("g\(i)", from: .data(Data([UInt8(i)])), metadata: .init(),
                                                  preconditions: .none).generation
                }
            }
            var r: [Int64] = []
            for try await g in group { r.append(g) }
            return r
        }
        #expect(Set(gens).count == 30, "every write gets its own generation")
        var last: Int64 = 0
        for i in 0..<5 {
            let g = try await stores[i % 2].write("seq", from: .data(Data()), metadata: .init(), preconditions: .none).generation
            #expect(g > last)
            #expect(g > gens.max()!)
            last = g
        }
    }

    @Test func generationsIncreaseEvenWhenClocksStopOrDisagree() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        // One instance's clock is stuck in the future, the other's runs backwards (dates in
        // microseconds since 1970).
        func clock(_ micros: @escaping @Sendable () -> Int64) -> BucketClock {
            BucketClock(now: { BucketClock.real.now }, date: { Date(timeIntervalSince1970: Double(micros()) / 1_000_000) },
                        sleepUntil: { _ in })
        }
        let ahead = try EmbeddedStore(directory: dir.path, bucket: "local", pageSizeLimit: 1000, durable: false,
                                      clock: clock { 5_000_000_000_000_000 })
        let behind = Counter()
        let late = try EmbeddedStore(directory: dir.path, bucket: "local", pageSizeLimit: 1000, durable: false,
                                     clock: clock { 1_000_000 - Int64(behind.next()) })
        var last: Int64 = 0
        for i in 0..<10 {
            let s = i % 3 == 0 ? ahead : late
            let w = try await s.write("g", from: .data(Data([UInt8(i)])), metadata: .init(), preconditions: .none)
            #expect(w.generation > last)
            #expect(w.metageneration == 1)
            last = w.generation
        }
        #expect(last >= 5_000_000_000_000_000)
    }

    @Test func replacedBlobsAreDeletedAndStrayFilesIgnored() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        var gens: [Int64] = []
        for i in 0..<5 {
            gens.append(try await s.write("obj", from: .data(Data("v\(i)".utf8)), metadata: .init(), preconditions: .none).generation)
        }
        #expect(dir.files("blobs").count == 1, "one blob per live generation")
        #expect(dir.files("tmp").isEmpty)
        // Only the live generation is kept.
        await expectStorageError("objectNotFound", isNotFound) { try await s.read("obj", generation: gens[0], range: nil) }
        #expect(try await s.read("obj", generation: gens[4], range: nil) == Data("v4".utf8))
        // A patch keeps the blob; copy adds one; delete removes one.
        var patch = MetadataPatch()
        patch.contentType = .set("text/plain")
        _ = try await s.patchMetadata("obj", patch, preconditions: .none)
        #expect(dir.files("blobs").count == 1)
        _ = try await s.copy(from: "obj", sourceGeneration: nil, to: "obj2", metadata: nil, preconditions: .none)
        #expect(dir.files("blobs").count == 2)
        _ = try await s.copy(from: "obj", sourceGeneration: nil, to: "obj2", metadata: nil, preconditions: .none)
        #expect(dir.files("blobs").count == 2)
        try await s.delete("obj", preconditions: .none)
        #expect(dir.files("blobs").count == 1)
        #expect(try await s.read("obj2", generation: nil, range: nil) == Data("v4".utf8), "the copy outlives its source")
        // A failed precondition leaves nothing behind.
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await s.write("obj2", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .doesNotExist)
        }
        #expect(dir.files("blobs").count == 1)
        #expect(dir.files("tmp").isEmpty)

        // What a crash leaves: a half-written temp file and a blob whose row was never committed.
        let fm = FileManager.default
        _ = fm.createFile(atPath: dir.path + "/tmp/crashed.tmp", contents: Data("torn".utf8))
        _ = fm.createFile(atPath: dir.path + "/blobs/orphan", contents: Data("never committed".utf8))
        _ = fm.createFile(atPath: dir.path + "/tmp/in-flight.tmp", contents: Data("another process".utf8))
        let old = Date(timeIntervalSinceNow: -7200)
        try fm.setAttributes([.modificationDate: old], ofItemAtPath: dir.path + "/tmp/crashed.tmp")
        try fm.setAttributes([.modificationDate: old], ofItemAtPath: dir.path + "/blobs/orphan")
        // Ignored while present…
        let page = try await s.list(ListRequest(prefix: "", delimiter: nil))
        #expect(page.items.map(\.name) == ["obj2"])
        // …and collected at the next open, except what may still be another process's upload.
        let reopened = try EmbeddedStore(directory: dir.path)
        #expect(dir.files("tmp") == ["in-flight.tmp"])
        #expect(dir.files("blobs").count == 1)
        #expect(try await reopened.read("obj2", generation: nil, range: nil) == Data("v4".utf8))
        #expect(try await reopened.list(ListRequest(prefix: "", delimiter: nil)).items.map(\.name) == ["obj2"])
    }

    @Test func hugeAndNegativeRangesAreClamped() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        let data = Data("0123456789".utf8)
        _ = try await s.write("r", from: .data(data), metadata: .init(), preconditions: .none)
        #expect(try await s.read("r", generation: nil, range: 4..<Int64.max) == data[4...])
        #expect(try await s.read("r", generation: nil, range: -5..<3) == data[0..<3])
        #expect(try await s.read("r", generation: nil, range: Int64.max - 1..<Int64.max).isEmpty)
    }

    @Test func customMetadataOverLimitAfterMergeIsRejected() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        let big = String(repeating: "v", count: 4000)
        _ = try await s.write("m", from: .data(Data()), metadata: .init(customMetadata: ["a": big, "b": big]), preconditions: .none)
        var patch = MetadataPatch()
        patch.customMetadata = ["c": String(repeating: "w", count: 500)]
        await expectStorageError("invalidArgument", { if case .invalidArgument = $0 { true } else { false } }) {
            try await s.patchMetadata("m", patch, preconditions: .none)
        }
        let info = try await s.getMetadata("m")
        #expect(info.metageneration == 1)
        #expect(info.customMetadata.keys.sorted() == ["a", "b"])
        // Removing a key in the same patch makes room.
        patch.customMetadata["a"] = .some(nil)
        let ok = try await s.patchMetadata("m", patch, preconditions: .none)
        #expect(ok.customMetadata.keys.sorted() == ["b", "c"])
        await expectStorageError("invalidArgument", { if case .invalidArgument = $0 { true } else { false } }) {
            try await s.write("n", from: .data(Data()), metadata: .init(customMetadata: ["a": big, "b": big, "c": big]),
                              preconditions: .none)
        }
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata("n") }
    }

    @Test func patchKeepsCreationTimeAndMovesUpdated() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        let w = try await s.write("t", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
        try await Task.sleep(for: .milliseconds(5))
        var patch = MetadataPatch()
        patch.contentLanguage = .set("en")
        let p = try await s.patchMetadata("t", patch, preconditions: .none)
        #expect(p.timeCreated == w.timeCreated)
        #expect(p.updated > w.updated)
        #expect(p.md5Hash == w.md5Hash && p.crc32c == w.crc32c && p.size == w.size)
        #expect(try await s.getMetadata("t") == p)
    }

    @Test func invalidNamesAndTokensAreTypedErrors() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        func isPathError(_ e: StorageError) -> Bool { if case .pathError = e { true } else { false } }
        await expectStorageError("pathError", isPathError) {
            try await s.write("", from: .data(Data()), metadata: .init(), preconditions: .none)
        }
        await expectStorageError("pathError", isPathError) {
            try await s.write("a\nb", from: .data(Data()), metadata: .init(), preconditions: .none)
        }
        await expectStorageError("pathError", isPathError) {
            try await s.write(String(repeating: "x", count: 1025), from: .data(Data()), metadata: .init(), preconditions: .none)
        }
        _ = try await s.write(String(repeating: "x", count: 1024), from: .data(Data()), metadata: .init(), preconditions: .none)
        await expectStorageError("invalidArgument", { if case .invalidArgument = $0 { true } else { false } }) {
            try await s.list(ListRequest(prefix: "", pageToken: "not a token!"))
        }
        await expectStorageError("invalidArgument", { if case .invalidArgument = $0 { true } else { false } }) {
            try await s.write("from-missing-file", from: .file(path: dir.path + "/no-such-file"), metadata: .init(), preconditions: .none)
        }
    }

    @Test func pageSizeLimitCapsMaxResults() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path, pageSizeLimit: 3)
        for i in 0..<7 { _ = try await s.write("o\(i)", from: .data(Data()), metadata: .init(), preconditions: .none) }
        let first = try await s.list(ListRequest(prefix: "", maxResults: 1000))
        #expect(first.items.map(\.name) == ["o0", "o1", "o2"])
        let token = try #require(first.nextPageToken)
        let second = try await s.list(ListRequest(prefix: "", maxResults: 2, pageToken: token))
        #expect(second.items.map(\.name) == ["o3", "o4"])
        // The facade's listAll follows the tokens to the end.
        let all = try await Storage(store: s).reference().listAll()
        #expect(all.items.map(\.fullPath) == (0..<7).map { "o\($0)" })
        // maxResults 0 is treated as 1 by the store (the facade rejects it first).
        #expect(try await s.list(ListRequest(prefix: "", maxResults: 0)).items.count == 1)
    }

    @Test func requestCountsCountEachCall() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let s = try EmbeddedStore(directory: dir.path)
        #expect(s.requestCounts.isEmpty)
        _ = try await s.write("a", from: .data(Data("1".utf8)), metadata: .init(), preconditions: .none)
        _ = try await s.write("b", from: .data(Data("2".utf8)), metadata: .init(), preconditions: .none)
        _ = try await s.getMetadata("a")
        _ = try await s.read("a", generation: nil, range: nil)
        _ = try await s.list(ListRequest())
        _ = try await s.patchMetadata("a", MetadataPatch(), preconditions: .none)
        _ = try await s.copy(from: "a", sourceGeneration: nil, to: "c", metadata: nil, preconditions: .none)
        try await s.delete("b", preconditions: .none)
        _ = try? await s.getMetadata("b")
        #expect(s.requestCounts == ["write": 2, "get": 2, "read": 1, "list": 1, "patch": 1, "copy": 1, "delete": 1])
    }

    @Test func listKeysUpperBound() throws {
        #expect(NameOrder.upperBound(ofStringsStartingWith: "dir/") == "dir0")
        #expect(NameOrder.upperBound(ofStringsStartingWith: "a\u{D7FF}") == "a\u{E000}")
        #expect(NameOrder.upperBound(ofStringsStartingWith: "a\u{10FFFF}") == "b")
        #expect(NameOrder.upperBound(ofStringsStartingWith: "\u{10FFFF}") == nil)
        #expect(ListKeys.commonPrefix(of: "p/a/b", prefix: "p/", delimiter: "/") == "p/a/")
        #expect(ListKeys.commonPrefix(of: "p/a", prefix: "p/", delimiter: "/") == nil)
        #expect(ListKeys.commonPrefix(of: "p/a--b--c", prefix: "p/", delimiter: "--") == "p/a--")
        #expect(ListKeys.commonPrefix(of: "p/a/b", prefix: "p/", delimiter: nil) == nil)
        for r in [ListKeys.Resume.afterItem("a/é"), .afterPrefix("x/")] {
            #expect(try ListKeys.resume(fromToken: ListKeys.token(r)) == r)
        }
    }
}
