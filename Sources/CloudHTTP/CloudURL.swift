import Foundation

/// URL pieces both APIs build the same way: names as one path segment, query strings.
public enum CloudURL {
    private static let unreserved: Set<UInt8> = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8))

    /// Percent-encodes everything but RFC 3986 unreserved characters, so an object name is one path
    /// segment (`/` → `%2F`, space → `%20`, `#` → `%23`, `?` → `%3F`, UTF-8 bytes → `%XX`).
    public static func encode(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            if unreserved.contains(b) { out.unicodeScalars.append(UnicodeScalar(b)) } else {
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// A name as one URL path segment: `encode`d, and a name that is `.` or `..` as `%2E` / `%2E%2E`,
    /// which no client or server may take as a dot-segment (`/o/..` would be resolved to the
    /// bucket, `/b/../o` to another path). Every path segment of every URL goes through here.
    public static func segment(_ s: String) -> String {
        let e = encode(s)
        return e == "." || e == ".." ? String(repeating: "%2E", count: e.count) : e
    }

    /// `?k=v&…` for the items that have values (in order), or "" when none do.
    package static func query(_ items: [(String, String?)]) -> String {
        let parts = items.compactMap { k, v in v.map { "\(encode(k))=\(encode($0))" } }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }
}
