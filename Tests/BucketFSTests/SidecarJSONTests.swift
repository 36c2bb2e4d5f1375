@testable import BucketFS
import Foundation
import StorageModel
import Testing

/// The sidecar written by hand reads back as the record it was written from, whatever the names
/// and metadata hold, with its keys in order.
@Suite struct SidecarJSONTests {
    static let awkward = "a \"quoted\" \\ back/slash\nnew line\ttab \u{01} é ✓ 𝄞"

    @Test func readsBackAsTheRecord() throws {
        let meta = WritableMetadata(cacheControl: "no-cache", contentType: "text/plain; charset=\"x\"",
                                    customMetadata: [PosixAttributes.modeKey: "644", PosixAttributes.uidKey: "1000",
                                                     XattrName.mtimeKey: "1600000000", "k": Self.awkward, "": "empty key"])
        for record in [
            StageRecord(bucket: "b", object: "dir/" + Self.awkward, baseGeneration: 1_700_000_000_123_456, closed: true,
                        size: 32768, metadata: meta),
            StageRecord(bucket: "b", object: "plain", baseGeneration: 0, closed: false, size: nil, metadata: WritableMetadata()),
        ] {
            let d = SidecarJSON.data(record, created: "2026-11-26T06:00:00.000Z")
            let o = try #require(try JSONSerialization.jsonObject(with: d) as? [String: Any])
            #expect(StageRecord(json: o) == record)
            #expect(o["created"] as? String == "2026-11-26T06:00:00.000Z")
            // The same object JSONSerialization makes of `record.json`.
            var want = record.json
            want["created"] = "2026-11-26T06:00:00.000Z"
            let reference = try JSONSerialization.data(withJSONObject: want, options: [.sortedKeys])
            #expect(NSDictionary(dictionary: o) == NSDictionary(dictionary: try JSONSerialization.jsonObject(with: reference) as! [String: Any]))
        }
        let text = String(decoding: SidecarJSON.data(StageRecord(bucket: "b", object: "o", baseGeneration: 5, closed: false,
                                                                 size: nil, metadata: WritableMetadata()), created: "c"), as: UTF8.self)
        #expect(text == #"{"baseGeneration":5,"bucket":"b","closed":false,"created":"c","metadata":{"customMetadata":{}},"object":"o"}"#)
    }
}
