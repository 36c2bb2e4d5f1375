import FirebaseStore
import Foundation
import StorageModel
import TestSupport
import Testing

/// The store conformance suite over firebase://, against both flavours of the test server. v0's
/// documented differences are capability flags: no server-side preconditions (the store checks
/// first, so racing writers may both get through), and the emulator's `maxResults` counting
/// items only.
@Suite(.serialized) struct FirebaseConformanceTests {
    static let emulator = ConformanceCapabilities(maxResultsCountsPrefixes: false, atomicPreconditions: false, listOffsets: false)
    static let production = ConformanceCapabilities(maxResultsCountsPrefixes: true, atomicPreconditions: false, listOffsets: false)

    @Test func conformanceAgainstTheEmulatorFlavour() async throws {
        try await withFirebase(flavour: .emulator) { f in
            try await runStoreConformance({ f.store }, capabilities: Self.emulator)
        }
    }

    @Test func conformanceAgainstTheProductionFlavour() async throws {
        try await withFirebase(flavour: .production) { f in
            try await runStoreConformance({ f.store }, capabilities: Self.production)
        }
    }

    @Test func conformanceWithABucketPrefix() async throws {
        try await withFirebase(flavour: .emulator, prefix: "/root/sub/") { f in
            #expect(f.store.prefix == "root/sub/")
            try await runStoreConformance({ f.store }, capabilities: Self.emulator)
            let names = f.server.objectNames
            #expect(!names.isEmpty)
            #expect(names.allSatisfy { $0.hasPrefix("root/sub/conformance-") }, "every name lives under the prefix")
        }
    }

    @Test func conformanceUnderPerUserRules() async throws {
        // A user's own prefix, as a mount of firebase://BUCKET/users/UID would see it.
        try await withFirebase(flavour: .production, rules: .perUser, uid: "alice", prefix: "users/alice") { f in
            try await runStoreConformance({ f.store }, capabilities: Self.production)
        }
    }
}
