import Foundation
import PropertyBased
import StorageModel
import Testing

@Suite struct MetadataTests {
    static let info = ObjectInfo(
        bucket: "b", name: "dir/file.txt", generation: 42, metageneration: 3, size: 11,
        timeCreated: Date(timeIntervalSince1970: 1_714_564_800), updated: Date(timeIntervalSince1970: 1_714_564_801),
        md5Hash: "XrY7u+Ae7tCTyyK7j1rNww==", crc32c: "yZRlqg==",
        writable: WritableMetadata(cacheControl: "no-cache", contentType: "text/plain", customMetadata: ["a": "1", "b": "2"]))

    @Test func readOnlyFieldsComeFromTheStore() {
        let m = StorageMetadata(Self.info)
        #expect(m.bucket == "b")
        #expect(m.fullPath == "dir/file.txt")
        #expect(m.name == "file.txt")
        #expect(m.generation == 42 && m.metageneration == 3 && m.size == 11)
        #expect(m.md5Hash == "XrY7u+Ae7tCTyyK7j1rNww==")
        #expect(m.contentType == "text/plain")
        #expect(m.customMetadata == ["a": "1", "b": "2"])
        #expect(m.patch.isEmpty, "nothing changed, nothing to send")
    }

    @Test func patchSendsOnlyChangedFields() {
        var m = StorageMetadata(Self.info)
        m.contentType = "application/json"
        let p = m.patch
        #expect(p.contentType == .set("application/json"))
        #expect(p.cacheControl == .keep)
        #expect(p.contentDisposition == .keep && p.contentEncoding == .keep && p.contentLanguage == .keep)
        #expect(p.customMetadata.isEmpty)
    }

    @Test func nilRemovesAField() {
        var m = StorageMetadata(Self.info)
        m.cacheControl = nil
        #expect(m.patch.cacheControl == .remove)
        #expect(m.patch.contentType == .keep)
    }

    @Test func customKeysMergeAndRemovedKeysBecomeNull() {
        var m = StorageMetadata(Self.info)
        m.customMetadata?["a"] = nil
        m.customMetadata?["c"] = "3"
        let p = m.patch
        let expected: [String: String?] = ["a": nil, "c": "3"]
        #expect(p.customMetadata == expected, "b is unchanged and not sent")
        let merged = p.applied(to: Self.info.writable)
        #expect(merged.customMetadata == ["b": "2", "c": "3"])
        #expect(merged.contentType == "text/plain" && merged.cacheControl == "no-cache")

        var cleared = StorageMetadata(Self.info)
        cleared.customMetadata = nil
        let allNull: [String: String?] = ["a": nil, "b": nil]
        #expect(cleared.patch.customMetadata == allNull)
        #expect(cleared.patch.applied(to: Self.info.writable).customMetadata.isEmpty)
    }

    @Test func newMetadataForAnUpload() {
        var m = StorageMetadata()
        m.contentType = "image/png"
        m.customMetadata = ["k": "v"]
        #expect(m.writable == WritableMetadata(contentType: "image/png", customMetadata: ["k": "v"]))
        #expect(m.patch.contentType == .set("image/png"))
        let set: [String: String?] = ["k": "v"]
        #expect(m.patch.customMetadata == set)
    }

    @Test func patchAppliesEveryField() {
        var p = MetadataPatch()
        #expect(p.isEmpty)
        p.cacheControl = .remove
        p.contentDisposition = .set("attachment")
        p.contentEncoding = .set("gzip")
        p.contentLanguage = .set("en")
        p.contentType = .keep
        #expect(!p.isEmpty)
        let r = p.applied(to: Self.info.writable)
        #expect(r == WritableMetadata(cacheControl: nil, contentDisposition: "attachment", contentEncoding: "gzip",
                                      contentLanguage: "en", contentType: "text/plain", customMetadata: ["a": "1", "b": "2"]))
    }

    @Test func customMetadataLimits() {
        #expect(CustomMetadataLimits.violation(["k": String(repeating: "v", count: 4096)]) == nil)
        #expect(CustomMetadataLimits.violation(["k": String(repeating: "v", count: 4097)]) == .valueTooLong("k"))
        let longKey = String(repeating: "k", count: 1025)
        #expect(CustomMetadataLimits.violation([longKey: "v"]) == .keyTooLong(longKey))
        #expect(CustomMetadataLimits.violation(["": "v"]) == .emptyKey)
        let big = String(repeating: "v", count: 4000)
        #expect(CustomMetadataLimits.violation(["a": big, "b": big]) == nil)
        #expect(CustomMetadataLimits.violation(["a": big, "b": big, "c": String(repeating: "w", count: 200)]) == .totalTooLarge(8203))
        var p = MetadataPatch()
        p.customMetadata = ["k": String(repeating: "v", count: 4097)]
        #expect(throws: StorageError.self) { try CustomMetadataLimits.check(patch: p) }
        p.customMetadata = ["k": nil]
        #expect(throws: Never.self) { try CustomMetadataLimits.check(patch: p) }
    }

    @Test func updateMetadataThroughTheFacadeSendsOnlyChanges() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        let ref = t.storage.reference().child("doc.txt")
        var upload = StorageMetadata()
        upload.contentType = "text/plain"
        upload.customMetadata = ["a": "1", "b": "2"]
        try await ref.putData(Data("hi".utf8), metadata: upload)
        // Two clients read the same metadata; one changes the content type meanwhile.
        var mine = try await ref.getMetadata()
        var theirs = try await ref.getMetadata()
        theirs.contentType = "text/markdown"
        _ = try await ref.updateMetadata(theirs)
        // Mine changes one custom key and removes another: the content type is not sent back.
        mine.customMetadata?["a"] = "one"
        mine.customMetadata?["b"] = nil
        let after = try await ref.updateMetadata(mine)
        #expect(after.contentType == "text/markdown")
        #expect(after.customMetadata == ["a": "one"])
        #expect(after.metageneration == 3)
        // A property set to nil is deleted.
        var clear = after
        clear.contentType = nil
        #expect(try await ref.updateMetadata(clear).contentType == nil)
        #expect(try await ref.getMetadata().contentType == nil)
    }
}

@Suite struct RFC3339Tests {
    /// The seconds counted by hand are `timegm`'s, for any stamp of years 1 to 9999 (a day past
    /// its month's end included), with and without an offset.
    @Test func parsesAsTimegmDoes() async {
        let fields = zip(Gen.int(in: 1...9999), Gen.int(in: 1...12), Gen.int(in: 0...31), Gen.int(in: 0...23),
                         Gen.int(in: 0...59), Gen.int(in: 0...60))
        await propertyCheck(input: zip(fields, Gen.int(in: -1...1))) { f, sign in
            let (y, mo, d, h, mi, se) = f
            func pad(_ v: Int, _ w: Int) -> String { String(repeating: "0", count: max(0, w - String(v).count)) + String(v) }
            let zone = sign == 0 ? "Z" : (sign > 0 ? "+" : "-") + "05:30"
            let text = "\(pad(y, 4))-\(pad(mo, 2))-\(pad(d, 2))T\(pad(h, 2)):\(pad(mi, 2)):\(pad(se, 2)).25" + zone
            var tmv = tm()
            tmv.tm_year = Int32(y - 1900); tmv.tm_mon = Int32(mo - 1); tmv.tm_mday = Int32(d)
            tmv.tm_hour = Int32(h); tmv.tm_min = Int32(mi); tmv.tm_sec = Int32(se)
            let expected = Double(timegm(&tmv) - sign * 19_800) + 0.25
            #expect(RFC3339.parse(text)?.timeIntervalSince1970 == expected, "\(text)")
        }
    }

    @Test func formatsWithMillisecondsInUTC() {
        #expect(RFC3339.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: 1_714_564_800.123)) == "2024-05-01T12:00:00.123Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: 1_714_564_800.9999)) == "2024-05-01T12:00:00.999Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
        #expect(RFC3339.format(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00.000Z")
    }

    @Test func parses() throws {
        let d = try #require(RFC3339.parse("2024-05-01T12:00:00.123Z"))
        #expect(abs(d.timeIntervalSince1970 - 1_714_564_800.123) < 1e-6)
        #expect(RFC3339.parse("2024-05-01T12:00:00Z") == Date(timeIntervalSince1970: 1_714_564_800))
        let offset = try #require(RFC3339.parse("2024-05-01T14:00:00.123+02:00"))
        #expect(abs(offset.timeIntervalSince(d)) < 1e-6)
        let west = try #require(RFC3339.parse("2024-05-01T07:30:00.123-04:30"))
        #expect(abs(west.timeIntervalSince(d)) < 1e-6)
        let micros = try #require(RFC3339.parse("2024-05-01T12:00:00.123456Z"))
        #expect(abs(micros.timeIntervalSince1970 - 1_714_564_800.123456) < 1e-6)
        #expect(RFC3339.parse("2024-05-01t12:00:00.5z") != nil)
    }

    @Test(arguments: ["", "garbage", "2024-05-01", "2024-05-01T12:00:00", "2024-05-01T12:00:00.123",
                      "2024-05-01T12:00:00.123Zjunk", "2024-5-1T12:00:00Z", "2024-05-01T12:00:00+0200", "x024-05-01T12:00:00Z"])
    func rejectsMalformed(_ s: String) {
        #expect(RFC3339.parse(s) == nil)
    }

    @Test func roundTripsToTheMillisecond() async {
        await propertyCheck(input: Gen.int64(in: -2_000_000_000_000 ... 4_000_000_000_000)) { ms in
            let d = Date(timeIntervalSince1970: Double(ms) / 1000)
            let s = RFC3339.format(d)
            #expect(s.count == 24 && s.hasSuffix("Z"))
            let back = RFC3339.parse(s)
            #expect(back.map { abs($0.timeIntervalSince(d)) < 0.0011 } == true, "\(s)")
            #expect(back.map(RFC3339.format) == s)
        }
    }
}
