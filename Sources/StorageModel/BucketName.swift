/// Cloud Storage's bucket naming rules (docs/SEMANTICS.md §2), checked before any request: a name
/// that breaks them cannot name a bucket, so a request for it could only fail later, or reach
/// another path on the server (`..`). Pure rules, no I/O.
public enum BucketName {
    /// Why `name` cannot be a bucket's name; nil when it can.
    ///
    /// - 3 to 63 characters; a name with dots up to 222, each dot-separated part 1 to 63;
    /// - lowercase letters, digits, `-`, `_` and `.` only, beginning and ending with a letter or
    ///   a digit;
    /// - not an IP address in dotted-decimal form;
    /// - not beginning with `goog`, and not containing `google` (or `g00gle`).
    public static func violation(_ name: String) -> String? {
        let chars = Array(name.unicodeScalars)
        if chars.isEmpty { return "it is empty" }
        let allowed = chars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" || $0 == "." }
        if !allowed { return "only lowercase letters, digits, '-', '_' and '.' are allowed" }
        let alnum: (Unicode.Scalar) -> Bool = { ("a"..."z").contains($0) || ("0"..."9").contains($0) }
        if !alnum(chars.first!) || !alnum(chars.last!) { return "it must begin and end with a letter or a digit" }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count > 1 {
            if chars.count > 222 { return "a name with dots has at most 222 characters" }
            if parts.contains(where: { $0.isEmpty }) { return "it has two dots in a row" }
            if parts.contains(where: { $0.count > 63 }) { return "each part between dots has at most 63 characters" }
            if parts.count == 4, parts.allSatisfy({ p in p.count <= 3 && p.allSatisfy(\.isNumber) && (Int(p) ?? 256) <= 255 }) {
                return "it has the form of an IP address"
            }
        }
        if chars.count < 3 { return "it has fewer than 3 characters" }
        if parts.count == 1, chars.count > 63 { return "it has more than 63 characters" }
        if name.hasPrefix("goog") { return "it begins with 'goog'" }
        if name.contains("google") || name.contains("g00gle") { return "it contains 'google'" }
        return nil
    }

    /// Throws `invalidArgument`, saying which rule `name` breaks, unless it can name a bucket.
    public static func validate(_ name: String) throws(StorageError) {
        if let why = violation(name) {
            throw .invalidArgument(message: "'\(name)' is not a bucket name: \(why) (Cloud Storage's naming rules)")
        }
    }
}
