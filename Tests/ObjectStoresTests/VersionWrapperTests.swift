import Foundation
@testable import ObjectStores
import StorageModel
import TestSupport
import Testing

/// The wrappers forward a store's past: a wrapper that forgot `versions` would answer nil (the
/// protocol's default) and fail the versioned conformance case; its listings are list requests.
@Suite struct VersionWrapperTests {
    @Test func wrappedVersionedStorePassesConformance() async throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("versions-log-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let inner = MemoryStore(versioning: .on)
        let wrapped = MetricsStore(try RequestLogStore(inner, path: log))
        try await runStoreConformance({ wrapped }, capabilities: .init(versioning: .on))
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(inner.count("list") == lines.filter { $0.hasPrefix("list ") }.count, "each versioned listing is one list line")
        #expect(lines.contains { $0 == "get " }, "the versioning state is the bucket's get")
    }

    @Test func wrappersOfAStoreWithoutAPastAnswerNil() throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("versions-log-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        #expect(MetricsStore(try RequestLogStore(MemoryStore(), path: log)).versions == nil)
        #expect(MetricsStore(MemoryStore(versioning: .off)).versions != nil)
    }

    /// A move logs a line when it was asked of the server, none when the store has no move and
    /// says nil without a request (the copy and delete that follow are the requests).
    @Test func aMoveIsLoggedOnlyWhenItWasARequest() async throws {
        for moves in [false, true] {
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("move-log-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let inner = MemoryStore(moves: moves)
            let o = inner.put("a", "x")
            let wrapped = MetricsStore(try RequestLogStore(inner, path: log))
            let moved = try await wrapped.move(from: "a", sourceGeneration: o.generation, to: "b", preconditions: .doesNotExist)
            #expect((moved != nil) == moves)
            let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            #expect(lines == (moves ? ["move a"] : []), "\(lines)")
        }
    }
}
