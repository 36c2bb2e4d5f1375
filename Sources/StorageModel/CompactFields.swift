import Foundation

/// How an object's MD5 is kept in memory: the 16 bytes themselves when the text is their
/// canonical base64 (what Cloud Storage sends), else the text as it came. A listing holds one
/// `ObjectInfo` per object (docs/OPERATING.md, "Memory"): 24 characters of base64 would cost a
/// heap allocation each; two words inline cost none. The text read back is always the text given.
public enum PackedMD5: Sendable, Equatable {
    case none
    case digest(UInt64, UInt64)
    case text(String)

    public init(_ text: String?) {
        guard let text else { self = .none; return }
        if let (hi, lo) = Self.digest(base64: text) {
            self = .digest(hi, lo)
        } else {
            self = .text(text)
        }
    }

    /// The 16 bytes of a digest in canonical base64 (24 characters, `==` at the end, no stray
    /// bits), as two big-endian halves; nil for any other text. By hand: Foundation's decoder and
    /// the re-encoding that checked it cost more than the rest of a listed object's fields.
    static func digest(base64 text: String) -> (UInt64, UInt64)? {
        var text = text
        return text.withUTF8 { b -> (UInt64, UInt64)? in
            guard b.count == 24, b[22] == UInt8(ascii: "="), b[23] == UInt8(ascii: "=") else { return nil }
            // 22 characters of 6 bits: 128 bits, then 4 zero bits in canonical form.
            var hi: UInt64 = 0, acc: UInt64 = 0
            for k in 0..<22 {
                guard let v = sextet(b[k]) else { return nil }
                switch k {
                case 10:  // 60 bits so far and this one's first 4: the first half
                    hi = acc << 4 | UInt64(v >> 2)
                    acc = UInt64(v & 0x3)
                case 21:  // 62 bits so far and this one's first 2; its last 4 are the padding
                    guard v & 0xF == 0 else { return nil }
                    acc = acc << 2 | UInt64(v >> 4)
                default:
                    acc = acc << 6 | UInt64(v)
                }
            }
            return (hi, acc)
        }
    }

    private static func sextet(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): c - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): c - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }

    public var text: String? {
        switch self {
        case .none: return nil
        case .text(let s): return s
        case .digest(let hi, let lo):
            var bytes = [UInt8](repeating: 0, count: 16)
            for i in 0..<8 {
                bytes[i] = UInt8(truncatingIfNeeded: hi >> (56 - 8 * UInt64(i)))
                bytes[8 + i] = UInt8(truncatingIfNeeded: lo >> (56 - 8 * UInt64(i)))
            }
            return Data(bytes).base64EncodedString()
        }
    }
}

/// The four writable headers most objects never set (cache control, disposition, encoding,
/// language).
struct RareFields: Sendable, Equatable {
    var cacheControl: String?
    var contentDisposition: String?
    var contentEncoding: String?
    var contentLanguage: String?
}

/// `RareFields` kept out of line: an object without any of them costs one nil reference instead
/// of four empty optionals (docs/OPERATING.md, "Memory"). Immutable; a change makes a new one.
final class RareHeaders: Sendable {
    let fields: RareFields
    private init(_ fields: RareFields) { self.fields = fields }

    /// nil when none is set.
    static func make(_ fields: RareFields) -> RareHeaders? {
        fields == RareFields() ? nil : RareHeaders(fields)
    }
}

/// How an object's custom metadata is kept: most objects carry none or one key (a tool's
/// modification time, gsutil's `goog-reserved-file-mtime`); those two strings live inline, and
/// only two keys or more make a dictionary (docs/OPERATING.md, "Memory").
enum CustomMetadataStorage: Sendable {
    case none
    case one(String, String)
    case map([String: String])

    init(_ map: [String: String]) {
        switch map.count {
        case 0: self = .none
        case 1: let (k, v) = map.first!; self = .one(k, v)
        default: self = .map(map)
        }
    }

    var dictionary: [String: String] {
        switch self {
        case .none: return [:]
        case .one(let k, let v): return [k: v]
        case .map(let m): return m
        }
    }

    subscript(_ key: String) -> String? {
        switch self {
        case .none: return nil
        case .one(let k, let v): return k == key ? v : nil
        case .map(let m): return m[key]
        }
    }
}
