import Foundation
import GCSStore
import Logging
import StorageModel
import TestSupport
import Testing

/// `host:port` of a running gcp-storage-emulator (`Scripts/emulator.sh start`), or nil to skip.
let gcsEmulatorAddress = ProcessInfo.processInfo.environment["BUCKETFS_EMULATOR"].flatMap { $0.isEmpty ? nil : $0 }
let gcsEmulatorBucket = ProcessInfo.processInfo.environment["BUCKETFS_EMULATOR_BUCKET"] ?? "bucketfs-test"

/// Against the real gcp-storage-emulator. It lacks list pagination, merges nothing on PATCH,
/// ignores ifMetagenerationMatch and contentType null, and drops the connection on a `..` name:
/// exactly those capabilities are off; every other assertion is the same as for the test server.
@Suite(.enabled(if: gcsEmulatorAddress != nil, "set BUCKETFS_EMULATOR=host:port (Scripts/emulator.sh start) to run"),
       .serialized)
struct GCSEmulatorTests {
    static func makeStore(prefix: String = "") -> GCSStore {
        GCSStore(bucket: gcsEmulatorBucket, prefix: prefix, endpoint: URL(string: "http://\(gcsEmulatorAddress ?? "")"),
                 credentials: .anonymous, logger: Logger(label: "gcs-emulator-test"), deadline: .seconds(20),
                 environment: [:])
    }

    static let capabilities = ConformanceCapabilities(pagination: false, metadataMerge: false, preconditions: false,
                                                      dotDotNames: false)

    /// Divergences of gcp-storage-emulator (2024.8.3 … 2026.7.19) that the capability flags do not cover;
    /// each is matched by the exact failing expectation of StoreConformance.swift, so anything else
    /// still fails, and the test fails too if none of them shows up any more (the emulator got fixed):
    /// - every upload carries metadata (at least the name), which the emulator applies as a patch:
    ///   metageneration starts at 2, and every later count is one higher;
    /// - ifGenerationMatch is ignored (ifGenerationMatch=0 overwrites an existing object);
    /// - a JSON null on PATCH is ignored (the property is not deleted);
    /// - rewrite ignores the destination metadata in the request body.
    static let emulatorGaps = [
        "(info.metageneration →", "(second.metageneration →", "(again.metageneration →", "(a.metageneration →",
        "(b.metageneration →", "(got.metageneration →",
        "(after.generation →", "s.read(p + \"once\", generation: nil, range: nil) == helloWorld",
        "expected preconditionFailed, but the call succeeded",
        "(b.writable.cacheControl →", "(got.writable.cacheControl →",
        "(renamed.contentType →", "(renamed.customMetadata →",
    ]

    static func isKnownEmulatorGap(_ issue: Issue) -> Bool {
        guard issue.sourceLocation?.fileName == "StoreConformance.swift" else { return false }
        let text = ([String(describing: issue)] + issue.comments.map(\.rawValue)).joined(separator: " ")
        return emulatorGaps.contains { text.contains($0) }
    }

    static func conformance(prefix: String) async throws {
        let store = Self.makeStore(prefix: prefix)
        try await withKnownIssue("gcp-storage-emulator gaps beyond the capability flags (see emulatorGaps)") {
            try await runStoreConformance({ store }, capabilities: capabilities)
        } matching: { isKnownEmulatorGap($0) }
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
