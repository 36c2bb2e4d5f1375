@testable import FirebaseStorage
import Foundation
import StorageModel
import Testing

/// What an update sends (docs/LIBRARY.md, "The Apple SDK's API"): what changed, nil deletes, custom
/// keys merge; and the dictionary form the SDK reads and writes.
@Suite struct StorageMetadataTests {
    @Test func aPropertySetToNilOnANewMetadataIsDeleted() {
        let m = FirebaseStorage.StorageMetadata()
        m.contentType = nil
        let p = m.patch
        #expect(p.contentType == .remove && p.cacheControl == .keep && p.customMetadata.isEmpty)
    }

    @Test func readMetadataSendsOnlyWhatChangedAndCustomKeysMerge() {
        let m = FirebaseStorage.StorageMetadata(dictionary: [
            "name": "a/b.png", "bucket": "bkt", "size": "3000", "generation": 12, "contentType": "image/png",
            "cacheControl": "no-cache", "metadata": ["keep": "1", "drop": "2"] as [String: String],
            "timeCreated": "2020-09-18T00:31:33.328Z",
        ])
        #expect(m.name == "b.png" && m.path == "a/b.png" && m.size == 3000 && m.generation == 12)
        #expect(m.timeCreated == Date(timeIntervalSince1970: 1_600_389_093.328))
        #expect(m.patch.isEmpty)
        m.contentType = "image/jpeg"
        m.customMetadata?["drop"] = nil
        m.customMetadata?["new"] = "3"
        let p = m.patch
        #expect(p.contentType == .set("image/jpeg") && p.cacheControl == .keep)
        let merged: [String: String?] = ["drop": nil, "new": "3"]
        #expect(p.customMetadata == merged)
        m.customMetadata = nil
        let cleared: [String: String?] = ["drop": nil, "keep": nil]
        #expect(m.patch.customMetadata == cleared)
    }

    @Test func theDictionaryFormRoundTrips() {
        let m = FirebaseStorage.StorageMetadata(dictionary: ["name": "x/y.txt", "bucket": "bkt", "size": 5, "md5Hash": "abc=",
                                                              "contentType": "text/plain", "metadata": ["k": "v"] as [String: String]])
        let copy = FirebaseStorage.StorageMetadata(dictionary: m.dictionaryRepresentation())
        #expect(copy == m && copy.customMetadata == ["k": "v"] && copy.md5Hash == "abc=")
        #expect(m.writable.contentType == "text/plain" && m.writable.customMetadata == ["k": "v"])
    }

    @Test func uploadsWithNoTypeAreTypedByTheFileExtension() {
        #expect(MIMETypes.type(forExtension: "JPG") == "image/jpeg")
        #expect(MIMETypes.type(forExtension: nil) == "application/octet-stream")
        #expect(MIMETypes.type(forExtension: "unheard-of") == "application/octet-stream")
    }
}
