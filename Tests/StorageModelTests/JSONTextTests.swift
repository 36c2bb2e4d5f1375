import Foundation
import StorageModel
import Testing

/// JSON written by hand reads back as what it was written from, whatever the strings hold, keys
/// in byte order.
@Suite struct JSONTextTests {
    static let awkward = "a \"quoted\" \\ back/slash\nnew line\ttab \u{01}\u{1F} é ✓ 𝄞 \u{2028}"

    @Test func readsBackWhatWasWritten() throws {
        let d = JSONText.object([
            ("s", .string(Self.awkward)), ("n", .int(-1_700_000_000_123_456)), ("t", .bool(true)), ("f", .bool(false)),
            ("o", JSONText.strings(["k": Self.awkward, "": "empty key", Self.awkward: "v"])), ("e", .object([])),
        ])
        let o = try #require(try JSONSerialization.jsonObject(with: d) as? [String: Any])
        #expect(o["s"] as? String == Self.awkward)
        #expect((o["n"] as? NSNumber)?.int64Value == -1_700_000_000_123_456)
        #expect(o["t"] as? Bool == true && o["f"] as? Bool == false)
        #expect(o["o"] as? [String: String] == ["k": Self.awkward, "": "empty key", Self.awkward: "v"])
        #expect((o["e"] as? [String: Any])?.isEmpty == true)
        let text = String(decoding: JSONText.object([("b", .int(2)), ("a", .string("x\"y")), ("B", .bool(true))]), as: UTF8.self)
        #expect(text == #"{"B":true,"a":"x\"y","b":2}"#)
    }
}
