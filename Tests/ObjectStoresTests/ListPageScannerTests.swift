import Foundation
@testable import GCSStore
import Testing

/// `ListPageScanner` reads a list page into exactly what `JSONDecoder` makes of it, and gives up
/// (nil: the store then decodes with `JSONDecoder`) on anything else.
@Suite struct ListPageScannerTests {
    static func decoded(_ json: String) throws -> ListPageJSON {
        try JSONDecoder().decode(ListPageJSON.self, from: Data(json.utf8))
    }

    /// Pages as servers send them, and the corners of JSON a page may hold.
    static let pages: [String] = [
        #"{}"#,
        #"{"kind": "storage#objects"}"#,
        #" { "prefixes" : [ "a/" , "b/" ] , "nextPageToken" : "dG9r" } "#,
        #"{"prefixes": null, "items": null, "nextPageToken": null}"#,
        #"{"items": [], "prefixes": []}"#,
        // the formula server's shape (whole resources, unknown keys among the known)
        #"{"kind": "storage#objects", "items": [{"kind": "storage#object", "id": "b/d/f0/1700000000000000", "name": "d/f0", "bucket": "b", "generation": "1700000000000000", "metageneration": "1", "contentType": "application/octet-stream", "storageClass": "STANDARD", "size": "1", "md5Hash": "k7iFrf4NoInN9jSQT9WfcQ==", "etag": "AAYKJBgeQAA=", "timeCreated": "2026-01-01T00:00:00.000Z", "updated": "2026-01-01T00:00:00.000Z", "metadata": {"i": "0"}, "crc32c": "Un1TUQ==", "selfLink": "http://h/x", "mediaLink": "http://h/y?alt=media"}], "nextPageToken": "aWQ="}"#,
        // numbers as numbers, nulls, nested unknown values of every kind
        #"{"items":[{"name":"n","size":12,"generation":-3,"metageneration":null,"acl":[{"entity":"x","role":"R"},[],{}],"owner":{"entity":"u"},"eventBasedHold":false,"temporaryHold":true,"x":null,"f":-1.5e3,"g":0.25,"metadata":{"a":null,"b":"","c":"v"}}]}"#,
        // escapes and non-ASCII text in names, values and metadata keys
        #"{"items":[{"name":"q\"uo\\te\/d\b\f\n\r\t","contentType":"t\u00e9\u0041","metadata":{"ké":"\ud83d\ude00 ☃","k2":"\u20ac"}},{"name":"日本/é😀"}],"prefixes":["p\u002f/"]}"#,
        // unknown keys' strings passed over: plain, escaped, non-ASCII
        #"{"kind":"caf\u00e9 ☃ \"q\" \\","items":[{"etag":"é\n","name":"n","selfLink":"http://h/x?y=1&z=%2F"}],"x":["日本", "\ud83d\ude00"]}"#,
        // placeholders and versioned-listing fields
        #"{"items":[{"name":"d/","size":"0","timeDeleted":"2026-01-02T00:00:00Z","cacheControl":"","contentDisposition":"inline","contentEncoding":"gzip","contentLanguage":"en"}]}"#,
    ]

    @Test func readsWhatJSONDecoderReads() throws {
        for json in Self.pages {
            let scanned = try #require(ListPageScanner.page(Data(json.utf8)), "gave up on \(json)")
            #expect(scanned == (try Self.decoded(json)), "\(json)")
        }
    }

    @Test func aPageOfAThousandObjects() throws {
        var items: [String] = []
        for i in 0..<1000 {
            items.append(#"{"kind":"storage#object","name":"big/f\#(i)","bucket":"b","generation":"\#(1_700_000_000_000_000 + i)","metageneration":"1","size":"\#(i * 37)","md5Hash":"k7iFrf4NoInN9jSQT9WfcQ==","crc32c":"Un1TUQ==","timeCreated":"2026-01-01T00:00:00.000Z","updated":"2026-01-01T00:00:\#(i % 60).000Z","metadata":{"i":"\#(i)"},"selfLink":"http://h/\#(i)"}"#)
        }
        let json = #"{"kind":"storage#objects","items":["# + items.joined(separator: ",") + #"],"nextPageToken":"dA=="}"#
        let scanned = try #require(ListPageScanner.page(Data(json.utf8)))
        #expect(scanned.items?.count == 1000)
        #expect(scanned == (try Self.decoded(json)))
        // and into the same ObjectInfo
        #expect(try scanned.items?[999].info(stripPrefix: "big/") == (try Self.decoded(json)).items?[999].info(stripPrefix: "big/"))
    }

    /// What it gives up on: left to JSONDecoder, which decodes it as before (or refuses it as before).
    @Test func givesUpOnTheUnexpected() throws {
        let unexpected: [String] = [
            #"{"items":[{"name":"\ud83d"}]}"#,          // lone high surrogate
            #"{"items":[{"name":"\ude00"}]}"#,          // lone low surrogate
            #"{"items":[{"name":"a\u00zz"}]}"#,         // bad hex
            #"{"items":[{"name":"a\qb"}]}"#,            // unknown escape
            "{\"items\":[{\"name\":\"a\u{01}b\"}]}",    // control character
            #"{"items":[{"name":5}]}"#,                 // a number for a string
            #"{"items":[{"size":1.5}]}"#,               // a fraction for an int64
            #"{"items":[{"size":"x"}]}"#,               // not digits
            #"{"items":[{"size":true}]}"#,
            #"{"items":{"name":"n"}}"#,                 // an object for the array
            #"{"prefixes":["a/",null]}"#,
            #"{"we\"ird":1}"#,                          // a key with an escape
            #"{"items":[{"name":"n"}]"#,                // cut short
            #"{"items":[{"name":"n"}]} x"#,             // something after it
            #"{"items":[{"name":"n",}]}"#,              // trailing comma
            #"{"x":tru}"#,
            #"{"items":[{"etag":"\ud83d","name":"n"}]}"#,   // a lone surrogate in a value passed over
            "{\"kind\":\"a\u{01}b\",\"items\":[]}",       // a control character in one
            #"{"kind":"unterminated}"#,
            #"["not","an","object"]"#,
        ]
        for json in unexpected {
            #expect(ListPageScanner.page(Data(json.utf8)) == nil, "\(json)")
        }
        // Bytes that are not UTF-8.
        var bad = Data(#"{"items":[{"name":"a"#.utf8)
        bad.append(contentsOf: [0xFF, 0xFE])
        bad.append(contentsOf: Data(#""}]}"#.utf8))
        #expect(ListPageScanner.page(bad) == nil)
        var badSkipped = Data(#"{"items":[{"etag":"a"#.utf8)  // in a value passed over
        badSkipped.append(contentsOf: [0xC3, 0x28])
        badSkipped.append(contentsOf: Data(#"","name":"n"}]}"#.utf8))
        #expect(ListPageScanner.page(badSkipped) == nil)
    }

    /// What the scanner gives up on and JSONDecoder reads is read as before.
    @Test func theStoreFallsBackToJSONDecoder() throws {
        let escapedKey = #"{"items":[{"na\u006de":"x","size":"3"}]}"#
        #expect(ListPageScanner.page(Data(escapedKey.utf8)) == nil)
        let page = try ListPageJSON.decode(Data(escapedKey.utf8))
        #expect(page.items?.first?.name == "x")
        #expect(page.items?.first?.size?.value == 3)
        #expect(throws: (any Error).self) { try ListPageJSON.decode(Data(#"{"items":[{"name":5}]}"#.utf8)) }
    }
}
