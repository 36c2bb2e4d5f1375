import Foundation
@testable import GCSStore
import GCSTestServerKit
import StorageModel
import TestSupport
import Testing

/// `gs://` versions: the decoding of versioned list pages and bucket resources as the JSON API
/// documents them, and the requests the store sends.
@Suite struct GCSVersionsTests {
    @Test func versionedPageCarriesTimeDeletedAndStripsTheBucketPrefix() throws {
        let json = """
            {"kind": "storage#objects", "prefixes": ["root/dir/"], "nextPageToken": "next",
             "items": [
              {"bucket": "b", "name": "root/a", "generation": "1700000000000001", "metageneration": "1", "size": "3",
               "timeCreated": "2026-11-20T10:00:00.000Z", "updated": "2026-11-20T10:00:00.000Z",
               "timeDeleted": "2026-11-21T10:00:00.500Z", "md5Hash": "x", "contentType": "text/plain"},
              {"bucket": "b", "name": "root/a", "generation": "1700000000000002", "metageneration": "2", "size": "4",
               "timeCreated": "2026-11-21T10:00:00.500Z", "updated": "2026-11-22T10:00:00.000Z"},
              {"bucket": "b", "name": "root/", "generation": "1700000000000003", "size": "0",
               "timeCreated": "2026-11-21T10:00:00.500Z", "updated": "2026-11-22T10:00:00.000Z"}
             ]}
            """
        let page = try GCSStore.versionPage(Data(json.utf8), status: 200, stripPrefix: "root/")
        #expect(page.prefixes == ["dir/"])
        #expect(page.nextPageToken == "next")
        #expect(page.versions.map(\.info.name) == ["a", "a"], "the prefix's own placeholder is the root")
        let old = try #require(page.versions.first)
        #expect(old.info.generation == 1_700_000_000_000_001 && old.info.contentType == "text/plain")
        #expect(old.timeDeleted == RFC3339.parse("2026-11-21T10:00:00.500Z"))
        #expect(!old.isLive && page.versions[1].isLive)
        #expect(old.wasLive(at: RFC3339.parse("2026-11-21T10:00:00.499Z")!))
        #expect(!old.wasLive(at: RFC3339.parse("2026-11-21T10:00:00.500Z")!))
        #expect(page.versions[1].wasLive(at: RFC3339.parse("2026-11-21T10:00:00.500Z")!))
    }

    @Test func bucketResourceSaysWhatItKeeps() throws {
        let on = #"{"versioning": {"enabled": true}, "softDeletePolicy": {"retentionDurationSeconds": "604800", "effectiveTime": "2024-03-01T00:00:00Z"}}"#
        #expect(try GCSStore.versioningState(Data(on.utf8), status: 200) == VersioningState(enabled: true, softDeleteRetention: 604_800))
        let off = #"{"softDeletePolicy": {"retentionDurationSeconds": "0"}}"#
        #expect(try GCSStore.versioningState(Data(off.utf8), status: 200) == VersioningState(enabled: false))
        #expect(try GCSStore.versioningState(Data("{}".utf8), status: 200) == VersioningState(enabled: false))
        #expect(throws: StorageError.self) { try GCSStore.versioningState(Data("[]".utf8), status: 200) }
    }

    /// The requests: `versions=true` with the page's parameters and `timeDeleted` among the
    /// fields; `buckets.get` with the two fields; a restore's rewrite with `sourceGeneration` and
    /// the live generation's `ifGenerationMatch`, refused (412) when the live one moved on.
    @Test func requestsAndCopyFromAGenerationUnderAPrecondition() async throws {
        try await withGCSServer(prefix: "/root/") { server, store in
            server.configure { $0.versioning = true; $0.softDeleteRetention = 604_800 }
            let v = try #require(store.versions)
            #expect(try await v.versioningState() == VersioningState(enabled: true, softDeleteRetention: 604_800))
            let a1 = try await store.write("a", from: .data(Data("one".utf8)), metadata: .init(), preconditions: .none)
            let a2 = try await store.write("a", from: .data(Data("two".utf8)), metadata: .init(), preconditions: .none)
            server.clearRecorded()
            let page = try await v.listVersions(ListRequest(prefix: "", delimiter: "/", maxResults: 7, pageToken: "t0"))
            _ = page
            let list = try #require(server.recorded.last)
            #expect(list.uri.contains("versions=true") && list.uri.contains("maxResults=7") && list.uri.contains("pageToken=t0"))
            #expect(list.uri.contains("prefix=root%2F") && list.uri.contains("timeDeleted"))
            // A restore that did not see a2 is refused and changes nothing.
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await store.copy(from: "a", sourceGeneration: a1.generation, to: "a", metadata: nil,
                                     preconditions: Preconditions(ifGenerationMatch: a1.generation))
            }
            let copy = try #require(server.recorded.last)
            #expect(copy.uri.contains("sourceGeneration=\(a1.generation)") && copy.uri.contains("ifGenerationMatch=\(a1.generation)"))
            #expect(try await store.read("a", generation: nil, range: nil) == Data("two".utf8))
            let a3 = try await store.copy(from: "a", sourceGeneration: a1.generation, to: "a", metadata: nil,
                                          preconditions: Preconditions(ifGenerationMatch: a2.generation))
            #expect(a3.generation > a2.generation)
            #expect(try await store.read("a", generation: nil, range: nil) == Data("one".utf8))
        }
    }
}
