import Foundation
import PropertyBased
import StorageModel
import Testing

/// An object's metadata is kept compactly in memory (docs/OPERATING.md, "Memory") and reads
/// back exactly as given.
@Suite struct CompactFieldsTests {
    static func info(md5: String?, _ w: WritableMetadata = WritableMetadata()) -> ObjectInfo {
        ObjectInfo(bucket: "b", name: "n", generation: 1, metageneration: 1, size: 0,
                   timeCreated: Date(timeIntervalSince1970: 0), updated: Date(timeIntervalSince1970: 0),
                   md5Hash: md5, crc32c: nil, writable: w)
    }

    @Test func anMD5ReadsBackAsItCame() {
        // Canonical base64 of 16 bytes (kept as the bytes), and what is not: hex, unpadded,
        // another length, base64 with a non-zero trailing bit (decodes, re-encodes otherwise).
        for text in ["XrY7u+Ae7tCTyyK7j1rNww==", "1B2M2Y8AsgTpgAmY7PhCfg==", "AAAAAAAAAAAAAAAAAAAAAA==",
                     "/////////////////////w==", "5eb63bbbe01eeed093cb22bb8f5acdc3", "XrY7u+Ae7tCTyyK7j1rNww",
                     "XrY7u+Ae7tCTyyK7j1rNwx==", "", "not md5", "é"] {
            #expect(Self.info(md5: text).md5Hash == text)
        }
        #expect(Self.info(md5: nil).md5Hash == nil)
    }

    @Test func aCanonicalMD5IsKeptAsItsBytes() {
        #expect(PackedMD5("XrY7u+Ae7tCTyyK7j1rNww==") == .digest(0x5EB6_3BBB_E01E_EED0, 0x93CB_22BB_8F5A_CDC3))
        #expect(PackedMD5("5eb63bbbe01eeed093cb22bb8f5acdc3") == .text("5eb63bbbe01eeed093cb22bb8f5acdc3"))
        #expect(PackedMD5(nil) == PackedMD5.none)
    }

    /// Any 24 characters of the base64 alphabet ending in `==` are kept as bytes exactly when
    /// Foundation decodes them to 16 bytes that encode back to the same text, and to those bytes.
    @Test func aDigestIsReadAsFoundationReadsIt() async {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        let chars = Gen.int(in: 0...(alphabet.count - 1)).array(of: 22)
        await propertyCheck(input: chars) { picks in
            let text = String(picks.map { alphabet[$0] }) + "=="
            var expected = PackedMD5.text(text)
            if let data = Data(base64Encoded: text), data.count == 16, data.base64EncodedString() == text {
                let hi = data.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                let lo = data.suffix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                expected = .digest(hi, lo)
            }
            #expect(PackedMD5(text) == expected, "\(text)")
        }
    }

    @Test func anyDigestRoundTrips() async {
        await propertyCheck(input: zip(Gen.uint64(in: 0...UInt64.max), Gen.uint64(in: 0...UInt64.max))) { hi, lo in
            Self.checkRoundTrip(hi, lo)
        }
    }

    static func checkRoundTrip(_ hi: UInt64, _ lo: UInt64) {
        var bytes: [UInt8] = []
        for w in [hi, lo] {
            for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: w >> UInt64(56 - 8 * i))) }
        }
        let text = Data(bytes).base64EncodedString()
        #expect(PackedMD5(text) == .digest(hi, lo))
        #expect(Self.info(md5: text).md5Hash == text)
    }

    @Test func rareHeadersAreSetAndClearedOneByOne() {
        var w = WritableMetadata(contentType: "text/plain")
        #expect(w.cacheControl == nil && w.contentDisposition == nil && w.contentEncoding == nil && w.contentLanguage == nil)
        w.cacheControl = "no-cache"
        w.contentLanguage = "fr"
        #expect(w.cacheControl == "no-cache" && w.contentLanguage == "fr" && w.contentDisposition == nil)
        w.contentDisposition = "attachment"
        w.contentEncoding = "gzip"
        w.cacheControl = nil
        #expect(w.cacheControl == nil && w.contentDisposition == "attachment" && w.contentEncoding == "gzip" && w.contentLanguage == "fr")
        #expect(w == WritableMetadata(contentDisposition: "attachment", contentEncoding: "gzip", contentLanguage: "fr", contentType: "text/plain"))
        #expect(w != WritableMetadata(contentDisposition: "attachment", contentEncoding: "gzip", contentType: "text/plain"))
        w.contentDisposition = nil
        w.contentEncoding = nil
        w.contentLanguage = nil
        #expect(w == WritableMetadata(contentType: "text/plain"), "all cleared equals never set")
        #expect(w.contentType == "text/plain")
    }

    @Test func customMetadataOfAnySizeReadsBackAsGiven() {
        for map: [String: String] in [[:], ["i": "1"], ["goog-reserved-file-mtime": "1714564800"], ["a": "1", "b": "2"],
                                      ["a": "", "": "x", "k": String(repeating: "v", count: 300)]] {
            var w = WritableMetadata(customMetadata: map)
            #expect(w.customMetadata == map)
            #expect(Self.info(md5: nil, w).customMetadata == map)
            for (k, v) in map { #expect(w.customValue(k) == v) }
            #expect(w.customValue("absent") == nil)
            w.customMetadata["added"] = "y"
            #expect(w.customMetadata.count == map.count + 1 && w.customValue("added") == "y")
            w.customMetadata["added"] = nil
            #expect(w.customMetadata == map)
            #expect(w == WritableMetadata(customMetadata: map))
        }
        #expect(WritableMetadata(customMetadata: ["a": "1"]) != WritableMetadata(customMetadata: ["a": "2"]))
        #expect(WritableMetadata(customMetadata: ["a": "1"]) != WritableMetadata(customMetadata: ["b": "1"]))
    }

    /// A listing keeps one of these per object: the fields above keep it inside this size (it
    /// was 192 bytes with the MD5 as text, four header optionals and a dictionary, each of which
    /// also cost a heap allocation per object when set).
    @Test func anObjectsInfoStaysSmall() {
        #expect(MemoryLayout<ObjectInfo>.stride <= 176, "ObjectInfo takes \(MemoryLayout<ObjectInfo>.stride) bytes")
    }
}
