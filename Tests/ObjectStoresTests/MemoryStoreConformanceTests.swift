import Foundation
import StorageModel
import TestSupport
import Testing

/// The in-memory double the core tests run on answers like the real stores: the same
/// conformance cases as the embedded store, the in-process GCS server and the emulator, plus
/// what only a store without object versioning does (a replaced or deleted generation is gone).
@Suite struct MemoryStoreConformanceTests {
    @Test func conformance() async throws {
        let store = MemoryStore()
        try await runStoreConformance({ store })
    }

    /// Versioned: every replaced and deleted generation kept, listed, read and copied from.
    @Test func versionedConformance() async throws {
        let store = MemoryStore(versioning: .on)
        try await runStoreConformance({ store }, capabilities: .init(versioning: .on))
    }

    /// A bucket that says it keeps nothing (as an embedded bucket made without `--versioning`).
    @Test func unversionedListingConformance() async throws {
        let store = MemoryStore(versioning: .off)
        try await runStoreConformance({ store }, capabilities: .init(versioning: .off))
    }

    /// A bucket with a hierarchical namespace: the same cases, with folders, as the in-process
    /// server's HNS flavour answers them (GCSFolderTests.conformanceOnHNSServer).
    @Test func hierarchicalConformance() async throws {
        let store = MemoryStore(layout: .hierarchical)
        try await runStoreConformance({ store }, capabilities: .init(folders: true))
    }

    @Test func onlyTheLiveGenerationIsKept() async throws {
        let s = MemoryStore()
        let v1 = try await s.write("f", from: .data(helloWorldBytes), metadata: .init(), preconditions: .doesNotExist)
        let v2 = try await s.write("f", from: .data(helloWorldBytes + helloWorldBytes), metadata: .init(),
                                   preconditions: Preconditions(ifGenerationMatch: v1.generation))
        await expectStorageError("objectNotFound", isNotFound) { try await s.read("f", generation: v1.generation, range: nil) }
        await expectStorageError("objectNotFound", isNotFound) {
            try await s.copy(from: "f", sourceGeneration: v1.generation, to: "g", metadata: nil, preconditions: .none)
        }
        #expect(try await s.read("f", generation: v2.generation, range: nil).count == 22)
        try await s.delete("f", preconditions: .none)
        await expectStorageError("objectNotFound", isNotFound) { try await s.read("f", generation: v2.generation, range: nil) }
        // A new object under the name has a new generation; the deleted one stays gone.
        let v3 = try await s.write("f", from: .data(helloWorldBytes), metadata: .init(), preconditions: .doesNotExist)
        #expect(v3.generation > v2.generation)
        await expectStorageError("objectNotFound", isNotFound) { try await s.read("f", generation: v2.generation, range: nil) }
    }

    private var helloWorldBytes: Data { Conformance.helloWorld }
}
