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
        if text.utf8.count == 24, let data = Data(base64Encoded: text), data.count == 16,
           data.base64EncodedString() == text {
            var hi: UInt64 = 0, lo: UInt64 = 0
            for (i, byte) in data.enumerated() {
                if i < 8 { hi = hi << 8 | UInt64(byte) } else { lo = lo << 8 | UInt64(byte) }
            }
            self = .digest(hi, lo)
        } else {
            self = .text(text)
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
