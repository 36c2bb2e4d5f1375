import Foundation
import GCSStore
import StorageModel
import TestSupport
import Testing

/// What the store's versioned listing gives, against what the official Python client
/// (google-cloud-storage, `list_blobs(versions=True)`) lists of the same versioned bucket of
/// fake-gcs-server: the same generations of the same names, the same `timeDeleted`, the same
/// sizes and hashes (three generations of one name, a deleted one, a live one).
@Suite(.enabled(if: fakeGCSAddress != nil, "set BUCKETFS_FAKE_GCS=host:port (Scripts/fake-gcs.sh start) to run"),
       .serialized)
struct FakeGCSVersionsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// name, generation, timeDeleted (RFC 3339 or ""), size, md5 of each generation under
    /// `prefix`, one per line, as the official client lists them.
    static func officialListing(prefix: String) throws -> [String] {
        let script = """
            import sys
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage
            endpoint, bucket, prefix = sys.argv[1:4]
            c = storage.Client(project="test", client_options={"api_endpoint": endpoint}, credentials=AnonymousCredentials())
            # versions="true", not True: the client sends a bool as "True", which fake-gcs-server
            # 1.54 does not read as true (it then lists live objects only; docs/TESTING.md).
            for b in c.list_blobs(bucket, prefix=prefix, versions="true"):
                deleted = b.time_deleted.isoformat() if b.time_deleted else ""
                print("\\t".join([b.name, str(b.generation), deleted, str(b.size), b.md5_hash or ""]))
            """
        let p = Process()
        p.executableURL = root.appendingPathComponent(".venv/bin/python")
        p.arguments = ["-c", script, "http://\(fakeGCSAddress ?? "")", fakeGCSVersionedBucket, prefix]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        try #require(p.terminationStatus == 0, "the official client failed")
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init).sorted()
    }

    @Test func storeListsWhatTheOfficialClientLists() async throws {
        let store = FakeGCSServerTests.makeStore(bucket: fakeGCSVersionedBucket)
        let p = "cross-\(UUID().uuidString.prefix(8).lowercased())/"
        for i in 0..<3 {
            _ = try await store.write(p + "a", from: .data(Data("a\(i)".utf8)), metadata: .init(), preconditions: .none)
        }
        _ = try await store.write(p + "dir/x", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
        try await store.delete(p + "dir/x", preconditions: .none)
        _ = try await store.write(p + "b", from: .data(Conformance.bytes(5000)), metadata: .init(), preconditions: .none)
        let v = try #require(store.versions)
        #expect(try await v.versioningState().enabled)
        let ours = try await Conformance.allVersions(v, prefix: p, delimiter: nil).versions
        let theirs = try Self.officialListing(prefix: p)
        func line(_ v: ObjectVersion) -> (String, Date?) {
            ([v.info.name, String(v.info.generation), "", String(v.info.size), v.info.md5Hash ?? ""].joined(separator: "\t"),
             v.timeDeleted)
        }
        #expect(ours.count == 5 && theirs.count == 5)
        // The lines without times, then the times to the microsecond.
        #expect(ours.map { line($0).0 }.sorted() == theirs.map { l in
            var f = l.split(separator: "\t", omittingEmptySubsequences: false).map(String.init); f[2] = ""; return f.joined(separator: "\t")
        }.sorted())
        for t in theirs {
            let fields = t.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            let mine = try #require(ours.first { String($0.info.generation) == fields[1] })
            if fields[2].isEmpty {
                #expect(mine.timeDeleted == nil, "\(fields[0])#\(fields[1]) is live for the official client")
            } else {
                let theirTime = try #require(RFC3339.parse(fields[2].replacingOccurrences(of: "+00:00", with: "Z")))
                let myTime = try #require(mine.timeDeleted, "\(fields[0])#\(fields[1]) is noncurrent for the official client")
                #expect(abs(myTime.timeIntervalSince(theirTime)) < 0.000_002)
            }
        }
        try await store.shutdown()
    }
}
