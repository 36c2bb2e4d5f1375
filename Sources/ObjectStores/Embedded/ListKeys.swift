import Foundation
import StorageModel

/// Pure helpers for `objects.list` over names sorted in UTF-8 byte order (as Cloud Storage
/// sorts them): page tokens, prefix ranges, delimiter grouping.
enum ListKeys {
    /// Where the previous page stopped: after an item (continue strictly after its name) or
    /// after a common prefix (continue after every name that starts with it).
    enum Resume: Equatable {
        case afterItem(String)
        case afterPrefix(String)
    }

    /// Opaque token: base64 of a kind byte (`i` or `p`) followed by the key's UTF-8 bytes.
    static func token(_ r: Resume) -> String {
        switch r {
        case .afterItem(let n): return Data([UInt8(ascii: "i")] + Array(n.utf8)).base64EncodedString()
        case .afterPrefix(let p): return Data([UInt8(ascii: "p")] + Array(p.utf8)).base64EncodedString()
        }
    }

    static func resume(fromToken t: String) throws(StorageError) -> Resume {
        guard let d = Data(base64Encoded: t), let kind = d.first,
              let key = String(validating: d.dropFirst(), as: UTF8.self), !key.isEmpty else {
            throw .invalidArgument(message: "invalid page token")
        }
        switch kind {
        case UInt8(ascii: "i"): return .afterItem(key)
        case UInt8(ascii: "p"): return .afterPrefix(key)
        default: throw .invalidArgument(message: "invalid page token")
        }
    }

    /// Byte-wise prefix test (String.hasPrefix compares by canonical equivalence, names do not).
    static func hasBytePrefix(_ name: String, _ prefix: String) -> Bool {
        name.utf8.starts(with: prefix.utf8)
    }

    /// Byte-wise order, as Cloud Storage sorts names.
    static func byteLess(_ a: String, _ b: String) -> Bool {
        NameOrder.precedes(a, b)
    }

    /// The common prefix `name` rolls up into (prefix + up to and including the first delimiter
    /// after the prefix), or nil when `name` is listed as an item.
    static func commonPrefix(of name: String, prefix: String, delimiter: String?) -> String? {
        guard let delimiter, !delimiter.isEmpty else { return nil }
        let bytes = Array(name.utf8)
        let d = Array(delimiter.utf8)
        let start = prefix.utf8.count
        guard bytes.count >= start + d.count else { return nil }
        var i = start
        while i + d.count <= bytes.count {
            if bytes[i] == d[0], Array(bytes[i..<(i + d.count)]) == d {
                return String(decoding: bytes[0..<(i + d.count)], as: UTF8.self)
            }
            i += 1
        }
        return nil
    }
}
