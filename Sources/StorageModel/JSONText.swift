import Foundation

/// Small JSON objects written by hand, keys in UTF-8 byte order (the same text every time, as
/// `JSONSerialization` with `.sortedKeys` gave). For what every file written through the mount
/// costs: its upload's metadata (`ObjectResource.resourceBody`) and its stage's sidecar. There,
/// `JSONSerialization` sorted the keys through ICU collation and cast every value: about a
/// tenth of the daemon's CPU in a `tar -x` of small files (docs/BENCHMARKS.md).
public enum JSONText {
    public indirect enum Value: Sendable {
        case string(String)
        case int(Int64)
        case bool(Bool)
        case object([(String, Value)])
    }

    /// `fields` as a JSON object.
    public static func object(_ fields: [(String, Value)]) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(.object(fields), to: &out)
        return Data(out)
    }

    /// Strings by their keys, as a JSON object's fields.
    public static func strings(_ d: [String: String]) -> Value { .object(d.map { ($0.key, .string($0.value)) }) }

    static func write(_ v: Value, to out: inout [UInt8]) {
        switch v {
        case .string(let s): string(s, to: &out)
        case .int(let i): out += Array(String(i).utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            for (i, (k, v)) in fields.sorted(by: { NameOrder.precedes($0.0, $1.0) }).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                string(k, to: &out)
                out.append(UInt8(ascii: ":"))
                write(v, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    /// `s` as a JSON string literal (for a line of JSON written by hand, as the JSON log is).
    public static func quoted(_ s: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count + 2)
        string(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\u00XX`, the rest as UTF-8.
    static func string(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(b)
            case 0..<0x20:
                out += Array("\\u00".utf8)
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 15)])
            default:
                out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
