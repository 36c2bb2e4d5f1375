import StorageModel
import Testing

/// Cloud Storage's bucket naming rules, checked before any request (docs/SEMANTICS.md §2).
@Suite struct BucketNameTests {
    @Test(arguments: [
        "abc", "my-bucket", "my_bucket", "bucketfs-test", "0a9", "my-app.appspot.com", "my-app.firebasestorage.app",
        "demo-my-app.appspot.com", String(repeating: "a", count: 63),
        (0..<3).map { _ in String(repeating: "b", count: 63) }.joined(separator: ".") + "." + String(repeating: "c", count: 30),
        "1.2.3", "1.2.3.4.5", "300.1.1.1",
    ])
    func namesThatCanBeBuckets(_ name: String) {
        #expect(BucketName.violation(name) == nil, "\(name)")
    }

    @Test(arguments: [
        ("", "empty"), ("ab", "fewer than 3"), ("..", "begin and end"), ("Bad_Bucket!", "only lowercase"),
        ("My-Bucket", "only lowercase"), ("a b c", "only lowercase"), ("-abc", "begin and end"), ("abc_", "begin and end"),
        ("a..b", "two dots"), (String(repeating: "a", count: 64), "more than 63"),
        (String(repeating: "a", count: 64) + ".com", "at most 63"),
        ((0..<4).map { _ in String(repeating: "b", count: 60) }.joined(separator: "."), "at most 222"),
        ("192.168.5.4", "IP address"), ("goog-bucket", "begins with 'goog'"), ("my-google-bucket", "contains 'google'"),
        ("my-g00gle-bucket", "contains 'google'"), ("bücket", "only lowercase"),
    ])
    func namesThatCannot(_ name: String, _ rule: String) {
        let why = BucketName.violation(name)
        #expect(why?.contains(rule) == true, "\(name): \(why ?? "accepted")")
    }

    @Test func urlsWithSuchANameAreRefusedAsInvalidArguments() {
        for url in ["gs://Bad_Bucket!/x", "gs://ab", "https://host/v0/b/UPPER/o/x", "http://127.0.0.1:9199/v0/b/%2E%2E/o"] {
            do {
                _ = try Storage.parse(url: url)
                Issue.record("\(url) was accepted")
            } catch {
                guard case .invalidArgument(let message) = error else { Issue.record("\(url): \(error)"); continue }
                #expect(message.contains("is not a bucket name"), "\(url): \(message)")
            }
        }
    }
}
