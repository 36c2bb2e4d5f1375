import Foundation
import GCSStore
import Logging
import StorageModel
import TestSupport
import Testing

/// `host:port` of a running gcp-storage-emulator (`Scripts/emulator.sh start`), or nil to skip.
let gcsEmulatorAddress = ProcessInfo.processInfo.environment["BUCKETFS_EMULATOR"].flatMap { $0.isEmpty ? nil : $0 }
let gcsEmulatorBucket = ProcessInfo.processInfo.environment["BUCKETFS_EMULATOR_BUCKET"] ?? "bucketfs-test"

/// Against the real gcp-storage-emulator: the same conformance suite as every store, with the
/// emulator's gaps as capability flags (`capabilities`), where each case asserts what the
/// emulator does instead, so a fixed gap fails the suite as surely as a new one.
@Suite(.enabled(if: gcsEmulatorAddress != nil, "set BUCKETFS_EMULATOR=host:port (Scripts/emulator.sh start) to run"),
       .serialized)
struct GCSEmulatorTests {
    static func makeStore(prefix: String = "") -> GCSStore {
        GCSStore(bucket: gcsEmulatorBucket, prefix: prefix, endpoint: URL(string: "http://\(gcsEmulatorAddress ?? "")"),
                 credentials: .anonymous, logger: Logger(label: "gcs-emulator-test"), deadline: .seconds(20),
                 environment: [:])
    }

    /// gcp-storage-emulator's gaps (2024.8.3 … 2026.7.19), each seen with plain HTTP requests
    /// (Python's urllib against `Scripts/emulator.sh start`) and by this suite:
    static let capabilities = ConformanceCapabilities(
        // `maxResults=2` over 3 items and 3 prefixes → all 3 items, all 3 prefixes, no nextPageToken.
        pagination: false,
        // PATCH `{"metadata": {"c": "3", "a": null}}` over `{"a": "1", "b": "2"}` → `{"c": "3", "a": null}`:
        // the map is replaced, and the null stored.
        metadataMerge: false,
        // Ignored everywhere: a multipart upload with `ifGenerationMatch=0` onto an existing object →
        // 200, overwritten; PATCH with `ifMetagenerationMatch=99` → 200, applied; DELETE with
        // `ifGenerationMatch=1` → 200, deleted; rewrite with `ifGenerationMatch=0` onto an existing
        // object → 200, overwritten.
        honoursPreconditions: [],
        // A name with a `..` segment: the emulator drops the connection (the store retries until its deadline).
        dotDotNames: false,
        // Every upload carries metadata (at least the name), which the emulator applies as a
        // patch of its own: a multipart upload's answer has `"metageneration": "2"`; each PATCH adds one.
        firstMetageneration: 2,
        // PATCH `{"cacheControl": null}` → 200, `cacheControl` unchanged.
        nullRemovesMetadata: false,
        // rewrite with the body `{"contentType": "text/html"}` → the copy has the source's contentType
        // and custom metadata.
        copyMetadata: .ignored,
        // Keeps no versions: its bucket resource has no `versioning`, so the store answers
        // `enabled == false`, and a listing with `versions=true` lists the live generations only.
        versioning: .off,
        // `generation=` is ignored on downloads: curl `?alt=media&generation=1` → 200, the live bytes.
        readsByGeneration: false,
        // `startOffset` and `endOffset` are ignored: the listing of `[b, d)` over a…e is all of it
        // (the emulator's source names neither parameter).
        listOffsets: false)

    static func conformance(prefix: String) async throws {
        let store = Self.makeStore(prefix: prefix)
        try await runStoreConformance({ store }, capabilities: capabilities)
        try await store.shutdown()
    }

    @Test func conformance() async throws {
        try await Self.conformance(prefix: "")
    }

    /// The emulator has no `storageLayout` (404: flat) and no objects.move (501 with an empty
    /// body, seen with curl): the store learns both, and a rename copies and deletes.
    @Test func flatWithoutMove() async throws {
        let store = Self.makeStore(prefix: "hns-\(UUID().uuidString.prefix(6))")
        #expect(try await store.learnLayout(timeout: .seconds(10)) == .flat)
        #expect(store.folders == nil)
        let a = try await store.write("a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
        #expect(try await store.move(from: "a", sourceGeneration: a.generation, to: "b", preconditions: .none) == nil)
        #expect(try await store.move(from: "a", sourceGeneration: a.generation, to: "b", preconditions: .none) == nil)
        #expect(try await store.getMetadata("a").generation == a.generation, "nothing moved")
        try await store.delete("a", preconditions: .none)
        try await store.shutdown()
    }

    @Test func conformanceWithPrefix() async throws {
        try await Self.conformance(prefix: "prefixed-\(UUID().uuidString.prefix(6))")
    }

    /// The default: an upload over the resumable threshold goes as one streamed request, and
    /// the server's object has exactly its bytes (its crc32c and md5 confirmed by the store).
    @Test func streamedResumableUpload() async throws {
        try await checkStreamedResumableUpload(Self.makeStore())
    }

    @Test func resumableUploadAndEncodedNames() async throws {
        var tuning = GCSStore.Tuning()
        tuning.chunkSize = 256 << 10
        tuning.resumableThreshold = 256 << 10
        let store = GCSStore(bucket: gcsEmulatorBucket, endpoint: URL(string: "http://\(gcsEmulatorAddress ?? "")"),
                             credentials: .anonymous, logger: Logger(label: "gcs-emulator-test"), deadline: .seconds(20),
                             tuning: tuning, environment: [:])
        defer { Task { try? await store.shutdown() } }
        let run = "emu-\(UUID().uuidString.prefix(8))/"
        let data = Conformance.bytes(700_000, seed: 4)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("emu-\(UUID().uuidString)").path
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let big = try await store.write(run + "big file.bin", from: .file(path: path),
                                        metadata: .init(contentType: "application/x-test", customMetadata: ["k": "v"]),
                                        preconditions: .doesNotExist)
        #expect(big.size == 700_000)
        #expect(try await store.read(run + "big file.bin", generation: nil, range: nil) == data)
        #expect(try await store.getMetadata(run + "big file.bin").customMetadata == ["k": "v"])
        for n in ["with space", "hash#tag", "q?x=1&y", "ünï/日本 ✓"] {
            _ = try await store.write(run + n, from: .data(Data(n.utf8)), metadata: .init(), preconditions: .none)
            #expect(try await store.read(run + n, generation: nil, range: nil) == Data(n.utf8))
            #expect(try await store.getMetadata(run + n).name == run + n)
        }
        let flat = try await store.list(ListRequest(prefix: run, delimiter: "/"))
        #expect(flat.prefixes == [run + "ünï/"])
        #expect(flat.items.map(\.name) == [run + "big file.bin", run + "hash#tag", run + "q?x=1&y", run + "with space"])
    }
}
