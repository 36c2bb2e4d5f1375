import Foundation
import Testing
@testable import bucketfs

/// `CACHE_DIR/.source` records how the mount reached its bucket (never a secret), and `recover`
/// uses it unless the command line or the environment says otherwise (docs/OPERATING.md).
@Suite struct RecordedAccessTests {
    let gs = Source.gcs(bucket: "b", path: "")

    @Test func recordsTheEndpointAndTheKindOfCredentialsNeverATokenItself() throws {
        let token = try GCSOptions.parse(["--endpoint", "http://127.0.0.1:1", "--token", "SECRET"])
        let r = try #require(RecordedAccess.of(gs, gcs: token, environment: [:]))
        #expect(r == RecordedAccess(endpoint: "http://127.0.0.1:1", credentials: "token"))
        #expect(!r.json.values.contains { $0.contains("SECRET") })
        #expect(r.missingSecret?.contains("--token") == true)
        let env = try #require(RecordedAccess.of(gs, gcs: try GCSOptions.parse([]), environment: ["STORAGE_EMULATOR_HOST": "127.0.0.1:2"]))
        #expect(env == RecordedAccess(endpoint: "127.0.0.1:2", credentials: "anonymous"))
        let key = try #require(RecordedAccess.of(gs, gcs: try GCSOptions.parse(["--key-file", "/k/key.json"]), environment: [:]))
        #expect(key == RecordedAccess(credentials: "key-file", keyFile: "/k/key.json"))
        #expect(RecordedAccess.of(.embedded(directory: "/tmp/x", path: ""), gcs: try GCSOptions.parse([]), environment: [:]) == nil)
    }

    @Test func recoverUsesTheRecordUnlessToldOtherwise() throws {
        let r = RecordedAccess(endpoint: "http://127.0.0.1:1", credentials: "anonymous")
        let (g, used) = r.apply(to: try GCSOptions.parse([]), environment: [:])
        #expect(g.endpoint == "http://127.0.0.1:1" && g.anonymous)
        #expect(used?.contains("--endpoint http://127.0.0.1:1") == true)
        // Told otherwise: the command line's endpoint and credentials win.
        let (h, _) = r.apply(to: try GCSOptions.parse(["--endpoint", "http://127.0.0.1:3", "--key-file", "/k.json"]), environment: [:])
        #expect(h.endpoint == "http://127.0.0.1:3" && !h.anonymous && h.keyFile == "/k.json")
        // The environment too.
        let (e, none) = r.apply(to: try GCSOptions.parse([]), environment: ["STORAGE_EMULATOR_HOST": "x:1", "GOOGLE_OAUTH_ACCESS_TOKEN": "t"])
        #expect(e.endpoint == nil && !e.anonymous && none == nil)
    }

    @Test func theSourceFileKeepsTheSourceAndTheAccess() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-source-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        Recover.recordSource("gs://b", access: RecordedAccess(endpoint: "http://h:1", credentials: "anonymous"), in: dir)
        let r = try #require(Recover.recorded(dir))
        #expect(r.source == "gs://b" && r.access == RecordedAccess(endpoint: "http://h:1", credentials: "anonymous"))
        Recover.recordSource("gs://c", in: dir)
        #expect(Recover.recorded(dir)?.source == "gs://c" && Recover.recorded(dir)?.access == nil)
    }
}
