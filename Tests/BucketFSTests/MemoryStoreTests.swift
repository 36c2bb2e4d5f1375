import Foundation
import StorageModel
import TestSupport
import Testing

/// The test double must itself follow the JSON API semantics the core relies on.
@Suite struct MemoryStoreTests {
    @Test func listingGroupsPrefixesPaginatesAndReturnsPlaceholders() async throws {
        let s = MemoryStore()
        for n in ["b", "a/", "a/x", "a/y/z", "c", "a/y/w", "ab"] { s.put(n, "1") }
        let root = try await s.list(ListRequest(prefix: "", delimiter: "/", maxResults: 1000))
        #expect(root.prefixes == ["a/"])
        #expect(root.items.map(\.name) == ["ab", "b", "c"])
        #expect(root.nextPageToken == nil)
        let a = try await s.list(ListRequest(prefix: "a/", delimiter: "/", maxResults: 1000))
        #expect(a.items.map(\.name) == ["a/", "a/x"])
        #expect(a.prefixes == ["a/y/"])
        // Pages of 2 over [a/, ab, b, c] (prefix a/ first): tokens continue after the last key.
        var token: String? = nil
        var seen: [String] = []
        var pages = 0
        repeat {
            let p = try await s.list(ListRequest(prefix: "", delimiter: "/", maxResults: 2, pageToken: token))
            seen += p.prefixes + p.items.map(\.name)
            token = p.nextPageToken
            pages += 1
        } while token != nil
        #expect(pages == 2)
        #expect(Set(seen) == ["a/", "ab", "b", "c"])
        let flat = try await s.list(ListRequest(prefix: "a/", delimiter: nil, maxResults: 1000))
        #expect(flat.items.map(\.name) == ["a/", "a/x", "a/y/w", "a/y/z"])
        #expect(s.count("list") == 5)
    }

    @Test func preconditionsGenerationsPatchAndFaults() async throws {
        let s = MemoryStore()
        let w = try await s.write("f", from: .data(Data("x".utf8)), metadata: WritableMetadata(customMetadata: ["k": "v"]),
                                  preconditions: .doesNotExist)
        #expect(w.metageneration == 1)
        await #expect(throws: StorageError.preconditionFailed(path: "f")) {
            try await s.write("f", from: .data(Data()), metadata: WritableMetadata(), preconditions: .doesNotExist)
        }
        var p = MetadataPatch()
        p.customMetadata = ["k": String?.none, "n": "1"]
        p.contentType = .set("text/plain")
        let patched = try await s.patchMetadata("f", p, preconditions: Preconditions(ifMetagenerationMatch: 1))
        #expect(patched.metageneration == 2)
        #expect(patched.generation == w.generation)
        #expect(patched.customMetadata == ["n": "1"])
        #expect(patched.contentType == "text/plain")
        await #expect(throws: StorageError.preconditionFailed(path: "f")) {
            try await s.patchMetadata("f", p, preconditions: Preconditions(ifMetagenerationMatch: 1))
        }
        let newer = s.replaceBehind("f", Data("yy".utf8))
        #expect(newer.generation > w.generation)
        // Only the live generation is kept (no object versioning): the replaced one is gone.
        await #expect(throws: StorageError.objectNotFound(path: "f")) { try await s.read("f", generation: w.generation, range: nil) }
        #expect(try await s.read("f", generation: newer.generation, range: nil) == Data("yy".utf8))
        #expect(try await s.read("f", generation: nil, range: 1..<10) == Data("y".utf8))
        s.failNext("get", times: 2, with: .unknown(status: 503, message: "busy"))
        for _ in 0..<2 {
            await #expect(throws: StorageError.unknown(status: 503, message: "busy")) { try await s.getMetadata("f") }
        }
        _ = try await s.getMetadata("f")
        #expect(s.count("get") == 3)
        let c = try await s.copy(from: "f", sourceGeneration: newer.generation, to: "g", metadata: nil, preconditions: .doesNotExist)
        #expect(c.customMetadata == ["n": "1"])
        try await s.delete("f", preconditions: Preconditions(ifGenerationMatch: newer.generation))
        #expect(s.object("f") == nil)
        await #expect(throws: StorageError.objectNotFound(path: "f")) { try await s.read("f", generation: newer.generation, range: nil) }
        await #expect(throws: StorageError.objectNotFound(path: "f")) { try await s.getMetadata("f") }
    }
}
