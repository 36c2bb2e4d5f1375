@testable import CloudHTTP
import Foundation
@testable import GCSStore
import StorageModel
import Testing

/// How object resources decode, whatever the server: an empty writable property is not set (see
/// `ObjectResource.property`). fake-gcs-server 1.54 answers a PATCH with `"cacheControl": ""`,
/// `"contentEncoding": ""`… for every property the object does not have; shown as they are, the
/// mount would list `user.storage.cacheControl` with an empty value where a real bucket has none.
@Suite struct GCSDecodingTests {
    /// The shape of fake-gcs-server's PATCH answer (v1.54.0, captured with curl): unset properties
    /// as "", `created` instead of `timeCreated`, no metageneration.
    static let fakeGCSPatchAnswer = Data("""
        {"bucket":"b","name":"p/a.txt","size":"5","storageClass":"STANDARD","contentType":"text/x",\
        "contentEncoding":"","contentDisposition":"","contentLanguage":"","cacheControl":"",\
        "crc32c":"CVppRw==","md5Hash":"3VyL9RVY/8vlAHBxkI6VJA==","created":"2026-11-23T17:23:20.005499Z",\
        "updated":"2026-11-23T17:23:20.005503Z","generation":"1795454600005521","metadata":{"a":"","b":"2"}}
        """.utf8)

    @Test func emptyPropertiesAreNotSetInObjectResources() throws {
        let o = try #require(try JSONSerialization.jsonObject(with: Self.fakeGCSPatchAnswer) as? [String: Any])
        let info = try ObjectResource.objectInfo(o, stripPrefix: "p/")
        #expect(info.name == "a.txt")
        #expect(info.writable.cacheControl == nil)
        #expect(info.writable.contentEncoding == nil)
        #expect(info.writable.contentDisposition == nil)
        #expect(info.writable.contentLanguage == nil)
        #expect(info.contentType == "text/x")
        // custom values are what the server holds, "" included
        #expect(info.customMetadata == ["a": "", "b": "2"])
        #expect(info.generation == 1_795_454_600_005_521)
    }

    @Test func emptyPropertiesAreNotSetInListPages() throws {
        let page = Data("""
            {"items":[{"bucket":"b","name":"x","generation":"3","metageneration":"1","size":"1",\
            "cacheControl":"","contentLanguage":"","contentType":"","contentDisposition":"inline",\
            "contentEncoding":"gzip","metadata":{"k":""}}],"prefixes":["d/"]}
            """.utf8)
        let decoded = try JSONDecoder().decode(ListPageJSON.self, from: page)
        let info = try #require(try decoded.items?.first?.info(stripPrefix: ""))
        #expect(info.writable.cacheControl == nil)
        #expect(info.writable.contentLanguage == nil)
        #expect(info.contentType == nil)
        #expect(info.writable.contentDisposition == "inline")
        #expect(info.writable.contentEncoding == "gzip")
        #expect(info.customMetadata == ["k": ""])
    }

    @Test func setPropertiesStayAsSent() throws {
        for v in [" ", "no-cache", "public, max-age=60"] {
            let o: [String: Any] = ["name": "n", "cacheControl": v, "contentType": v]
            let info = try ObjectResource.objectInfo(o)
            #expect(info.writable.cacheControl == v)
            #expect(info.contentType == v)
        }
    }

    /// An upload's metadata part, written by hand (`JSONText`), reads back as the metadata.
    @Test func resourceBodyReadsBackAsTheMetadata() throws {
        let odd = "a \"q\" \\ / \n é ✓"
        let w = WritableMetadata(cacheControl: "no-cache", contentDisposition: odd, contentType: "text/plain",
                                 customMetadata: ["goog-reserved-posix-mode": "644", "k": odd])
        let o = try #require(try JSONSerialization.jsonObject(with: ObjectResource.resourceBody(name: "d/" + odd, w)) as? [String: Any])
        #expect(o["name"] as? String == "d/" + odd)
        #expect(o["cacheControl"] as? String == "no-cache" && o["contentDisposition"] as? String == odd)
        #expect(o["contentType"] as? String == "text/plain" && o["contentEncoding"] == nil && o["contentLanguage"] == nil)
        #expect(o["metadata"] as? [String: String] == ["goog-reserved-posix-mode": "644", "k": odd])
        #expect(String(decoding: ObjectResource.resourceBody(name: nil, WritableMetadata()), as: UTF8.self) == "{}")
    }
}
