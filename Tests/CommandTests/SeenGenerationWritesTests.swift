import Foundation
import StorageModel
import TestSupport
import Testing
@testable import bucketfs

/// The command line's writes carry the generation they saw (docs/SEMANTICS.md §5.7), and `cat`
/// resumes a broken download from the last byte received.
@Suite struct SeenGenerationWritesTests {
    @Test func putSendsTheGenerationItSaw() async throws {
        let store = MemoryStore()
        let storage = Storage(store: store)
        // A new name: ifGenerationMatch=0.
        _ = try await SeenGenerationWrites.put(store, "a", noClobber: false) { pre in
            try await storage.reference(withPath: "a").putData(Data("1".utf8), preconditions: pre)
        }
        #expect(store.writes.last?.preconditions == .doesNotExist)
        let first = try #require(store.object("a"))
        // Over an object: its generation.
        _ = try await SeenGenerationWrites.put(store, "a", noClobber: false) { pre in
            try await storage.reference(withPath: "a").putData(Data("2".utf8), preconditions: pre)
        }
        #expect(store.writes.last?.preconditions == Preconditions(ifGenerationMatch: first.generation))
        #expect(store.data("a") == Data("2".utf8))
    }

    /// Another writer between the look and the upload: the 412 makes it look again, and the
    /// user's put still replaces what is there.
    @Test func putLooksAgainAfterAnotherWriter() async throws {
        let store = MemoryStore()
        let storage = Storage(store: store)
        store.put("a", "old")
        var calls = 0
        _ = try await SeenGenerationWrites.put(store, "a", noClobber: false) { pre in
            calls += 1
            if calls == 1 { _ = store.replaceBehind("a", Data("theirs".utf8)) }
            return try await storage.reference(withPath: "a").putData(Data("mine".utf8), preconditions: pre)
        }
        #expect(calls == 2)
        #expect(store.data("a") == Data("mine".utf8))
    }

    @Test func noClobberStaysIfGenerationMatchZero() async throws {
        let store = MemoryStore()
        store.put("a", "there")
        await #expect(throws: StorageError.preconditionFailed(path: "a")) {
            _ = try await SeenGenerationWrites.put(store, "a", noClobber: true) { pre in
                try await store.write("a", from: .data(Data("x".utf8)), metadata: .init(), preconditions: pre)
            }
        }
        #expect(store.data("a") == Data("there".utf8))
    }

    @Test func rmAndMetaSetSendWhatTheySaw() async throws {
        let store = MemoryStore()
        let info = store.put("a", "x")
        var patch = MetadataPatch()
        patch.customMetadata["k"] = .some("v")
        _ = try await SeenGenerationWrites.patch(Storage(store: store).reference(withPath: "a"), patch)
        #expect(store.patches.last?.preconditions == Preconditions(ifMetagenerationMatch: info.metageneration))
        let now = try #require(store.object("a"))
        try await SeenGenerationWrites.delete(store, "a")
        #expect(store.deletes.last?.preconditions == Preconditions(ifGenerationMatch: now.generation))
        #expect(store.object("a") == nil)
        await #expect(throws: StorageError.objectNotFound(path: "a")) { try await SeenGenerationWrites.delete(store, "a") }
    }

    /// A download that breaks after some bytes asks for the rest from the last byte received,
    /// not from byte 0 (Google's retry scenario 8, `return-broken-stream`).
    @Test func catResumesFromTheLastByteReceived() async throws {
        let store = MemoryStore()
        let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let info = store.put("big", bytes)
        store.cutNextStreams(times: 2, after: 100_000)
        var out = Data()
        let resumed = try await ResumedDownload.copy(store, "big", info) { out.append($0) }
        #expect(out == bytes)
        #expect(resumed == 2)
        #expect(store.reads.map(\.range) == [0..<300_000, 100_000..<300_000, 200_000..<300_000])
    }

    /// Bytes that do not match the object's crc32c fail the command (after they were written).
    @Test func catChecksTheWholeObject() async throws {
        let store = MemoryStore()
        let info = store.put("f", Data("hello world".utf8))
        store.damageNextReads { d in var d = d; d[d.startIndex] ^= 1; return d }
        await #expect(throws: StorageError.self) {
            try await ResumedDownload.copy(store, "f", info) { _ in }
        }
    }
}
