import Foundation
import StorageModel
import Testing

@Suite struct URLTests {
    let storage = Storage(store: UnreachableStore(bucket: "my-bucket"))

    @Test func gsURLs() throws {
        #expect(try storage.reference(forURL: "gs://my-bucket/images/stars.jpg").fullPath == "images/stars.jpg")
        #expect(try storage.reference(forURL: "gs://my-bucket").fullPath == "")
        #expect(try storage.reference(forURL: "gs://my-bucket/").fullPath == "")
        #expect(try storage.reference(forURL: "gs://my-bucket//a//b/").fullPath == "a/b")
        #expect(try storage.reference(forURL: "gs://my-bucket/a b/ü").fullPath == "a b/ü")
        #expect(try storage.reference(forURL: "gs://my-bucket/x").bucket == "my-bucket")
    }

    @Test func httpURLs() throws {
        let https = "https://firebasestorage.googleapis.com/v0/b/my-bucket/o/images%2Fstars.jpg"
        #expect(try storage.reference(forURL: https).fullPath == "images/stars.jpg")
        #expect(try storage.reference(forURL: https + "?alt=media&token=abc").fullPath == "images/stars.jpg")
        #expect(try storage.reference(forURL: "http://127.0.0.1:9199/v0/b/my-bucket/o/a%20b%2F%C3%BC").fullPath == "a b/ü")
        #expect(try storage.reference(forURL: "HTTPS://host/v0/b/my-bucket/o/x").fullPath == "x")
        #expect(try storage.reference(forURL: "https://host/v0/b/my-bucket/o").fullPath == "")
        #expect(try storage.reference(forURL: "https://host/v0/b/my%2Dbucket/o/x").bucket == "my-bucket")
        // Percent-encoded slashes normalise like child().
        #expect(try storage.reference(forURL: "https://host/v0/b/my-bucket/o/%2Fa%2F%2Fb%2F").fullPath == "a/b")
    }

    @Test(arguments: [
        "", "my-bucket/path", "gs://", "gs:///path", "s3://my-bucket/x", "ftp://host/v0/b/my-bucket/o/x",
        "https://host", "https://host/", "https:///v0/b/my-bucket/o/x", "https://host/v1/b/my-bucket/o/x",
        "https://host/v0/b/my-bucket/x/y", "https://host/v0/b//o/x", "https://host/v0/my-bucket/o/x",
        "https://host/v0/b/my-bucket/o/bad%zzescape", "https://host/storage/v1/b/my-bucket/o/x", "file:///tmp/x",
    ])
    func rejectsOtherURLs(url: String) {
        do {
            let ref = try storage.reference(forURL: url)
            Issue.record("accepted '\(url)' as \(ref)")
        } catch {
            guard case .invalidArgument = error else {
                Issue.record("'\(url)': expected invalidArgument, got \(error)")
                return
            }
        }
    }

    @Test func rejectsOtherBuckets() {
        #expect(throws: StorageError.bucketMismatch(expected: "my-bucket", got: "other")) {
            try storage.reference(forURL: "gs://other/x")
        }
        #expect(throws: StorageError.bucketMismatch(expected: "my-bucket", got: "other")) {
            try storage.reference(forURL: "https://firebasestorage.googleapis.com/v0/b/other/o/x%2Fy")
        }
        // Parsing alone reports the bucket.
        let parsed = try? Storage.parse(url: "gs://other/a//b")
        #expect(parsed?.bucket == "other")
        #expect(parsed?.path == "a/b")
    }
}
