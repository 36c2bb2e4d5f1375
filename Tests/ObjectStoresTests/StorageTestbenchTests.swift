import Foundation
import GCSStore
import Logging
import StorageModel
import TestSupport
import Testing

/// `host:port` of a running storage-testbench (`Scripts/testbench.sh start`), or nil to skip.
let testbenchAddress = ProcessInfo.processInfo.environment["BUCKETFS_TESTBENCH"].flatMap { $0.isEmpty ? nil : $0 }
let testbenchBucket = ProcessInfo.processInfo.environment["BUCKETFS_TESTBENCH_BUCKET"] ?? "bucketfs-test"
let testbenchVersionedBucket = ProcessInfo.processInfo.environment["BUCKETFS_TESTBENCH_VERSIONED_BUCKET"] ?? testbenchBucket + "-versioned"

/// Against storage-testbench, Google's own test server for the JSON API (the one Google's client
/// libraries run their integration tests against; the copy named in `Scripts/testbench.sh`). It
/// is the strictest of the three servers: it checks every precondition, counts generations and
/// metagenerations, keeps resumable sessions with their 308 answers and keeps past generations in
/// a versioned bucket. Its gaps are capability flags (`capabilities`), each with its evidence.
@Suite(.enabled(if: testbenchAddress != nil, "set BUCKETFS_TESTBENCH=host:port (Scripts/testbench.sh start) to run"),
       .serialized)
struct StorageTestbenchTests {
    static func makeStore(bucket: String = testbenchBucket, prefix: String = "", deadline: Duration = .seconds(20), tuning: GCSStore.Tuning = .init()) -> GCSStore {
        GCSStore(bucket: bucket, prefix: prefix, endpoint: URL(string: "http://\(testbenchAddress ?? "")"),
                 credentials: .anonymous, logger: Logger(label: "testbench-test"), deadline: deadline,
                 tuning: tuning, environment: [:])
    }

    /// storage-testbench's gaps (commit e8c8507), each seen with curl against
    /// `Scripts/testbench.sh start` and by this suite:
    static let capabilities: ConformanceCapabilities = {
        // A range at or past the end is answered `416` with a JSON error and no Content-Range
        // (curl: `Range: bytes=2000000-2000009` of a 1 MiB object → 416, `Content-Type:
        // application/json`; Cloud Storage sends `Content-Range: bytes */SIZE`).
        // `maxResults` is ignored: one page holds every entry, with no token (curl:
        // `objects?maxResults=1` → every item).
        var c = ConformanceCapabilities(pagination: false, sizeIn416: false,
                                        // rewrite with a body: its properties replace the
                                        // source's, its custom metadata is merged over them.
                                        copyMetadata: .mergesCustom, versioning: .off)
        // `versions=true` lists every past generation in either bucket (versioning on or off:
        // two uploads of a name in the unversioned bucket list two generations), without
        // `timeDeleted` and without prefixes under a delimiter.
        c.versionListings = false
        // Every upload gets annotations in its custom metadata: a multipart upload
        // `x_emulator_upload` and `x_testbench_upload` ("multipart"), a resumable one also
        // `x_emulator_no_crc32c`, `x_emulator_no_md5`, `x_emulator_custom_header`,
        // `x_emulator_transfer_encoding` and their `x_testbench_` twins (`bucketfs put` then
        // `stat --json`; gcs/upload.py "Add some annotations to make it easier to write tests").
        c.addedKeyPrefixes = ["x_emulator_", "x_testbench_"]
        return c
    }()

    static func conformance(prefix: String) async throws {
        let store = Self.makeStore(prefix: prefix)
        try await runStoreConformance({ store }, capabilities: capabilities)
        try await store.shutdown()
    }

    @Test func conformance() async throws {
        try await Self.conformance(prefix: "")
    }

    @Test func conformanceWithPrefix() async throws {
        try await Self.conformance(prefix: "prefixed-\(UUID().uuidString.prefix(6))")
    }

    /// The default: an upload over the resumable threshold goes as one streamed request, and
    /// the server's object has exactly its bytes (its crc32c and md5 confirmed by the store).
    @Test func streamedResumableUpload() async throws {
        try await checkStreamedResumableUpload(Self.makeStore(), addedKeyPrefixes: Self.capabilities.addedKeyPrefixes)
    }

    /// A chunked resumable upload (256 KiB chunks, each answered 308 with the range held), and
    /// names that need encoding.
    @Test func resumableUploadAndEncodedNames() async throws {
        var tuning = GCSStore.Tuning()
        tuning.chunkSize = 256 << 10
        tuning.resumableThreshold = 256 << 10
        let store = Self.makeStore(tuning: tuning)
        let run = "tb-\(UUID().uuidString.prefix(8))/"
        let data = Conformance.bytes(700_000, seed: 4)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tb-\(UUID().uuidString)").path
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let big = try await store.write(run + "big file.bin", from: .file(path: path),
                                        metadata: .init(contentType: "application/x-test", customMetadata: ["k": "v"]),
                                        preconditions: .doesNotExist)
        #expect(big.size == 700_000)
        #expect(try await store.read(run + "big file.bin", generation: nil, range: nil) == data)
        #expect(try await store.getMetadata(run + "big file.bin").customMetadata["k"] == "v")
        // The session checks its precondition when it finishes: a second upload of the name with
        // ifGenerationMatch=0 fails 412, and the object keeps its bytes.
        await #expect(throws: StorageError.preconditionFailed(path: run + "big file.bin")) {
            _ = try await store.write(run + "big file.bin", from: .file(path: path), metadata: .init(), preconditions: .doesNotExist)
        }
        #expect(try await store.getMetadata(run + "big file.bin").generation == big.generation)
        for n in ["with space", "hash#tag", "q?x=1&y", "ünï/日本 ✓"] {
            _ = try await store.write(run + n, from: .data(Data(n.utf8)), metadata: .init(), preconditions: .none)
            #expect(try await store.read(run + n, generation: nil, range: nil) == Data(n.utf8))
            #expect(try await store.getMetadata(run + n).name == run + n)
        }
        let flat = try await store.list(ListRequest(prefix: run, delimiter: "/"))
        #expect(flat.prefixes == [run + "ünï/"])
        #expect(flat.items.map(\.name) == [run + "big file.bin", run + "hash#tag", run + "q?x=1&y", run + "with space"])
        try await store.shutdown()
    }
}
