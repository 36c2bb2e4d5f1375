import CloudHTTP
import Foundation
import GCSStore
import GCSTestServerKit
import StorageModel
import TestSupport
import Testing

/// Every path segment of every JSON API URL is percent-encoded: names with dot segments, `%`, `#`,
/// `?`, spaces and non-ASCII reach their own object, copies (rewriteTo) included. The test server
/// resolves a raw `.` or `..` segment as HTTP front ends do.
@Suite struct GCSNameEncodingTests {
    @Test func everyNameReachesItsOwnObject() async throws {
        try await withGCSServer { server, store in
            let problems = await AwkwardNames.roundTrip(store)
            #expect(problems.isEmpty, "\(problems)")
            let paths = server.recorded.map { String($0.uri.split(separator: "?", maxSplits: 1).first ?? "") }
            #expect(paths.contains { $0.hasSuffix("/o/%2E%2E") }, "a name '..' is sent as %2E%2E")
            #expect(paths.contains { $0.contains("/o/%2E%2E/rewriteTo/b/\(server.bucket)/o/") }, "a copy's source too")
            #expect(!paths.contains { $0.hasSuffix("/..") || $0.hasSuffix("/.") || $0.contains("/../") || $0.contains("/./") })
        }
    }

    @Test func aSegmentIsNeverADotSegment() {
        #expect(CloudURL.segment("..") == "%2E%2E")
        #expect(CloudURL.segment(".") == "%2E")
        #expect(CloudURL.segment("...") == "...")
        #expect(CloudURL.segment("a/../b c#d?e%f") == "a%2F..%2Fb%20c%23d%3Fe%25f")
        #expect(DotSegments.remove("/b/B/o/..") == "/b/B/")
        #expect(DotSegments.remove("/b/B/o/%2E%2E") == "/b/B/o/%2E%2E")
    }
}
