import Foundation

/// The order object names sort in (UTF-8 bytes, as Cloud Storage lists them), and the bounds the
/// listings of a name range are cut at.
public enum NameOrder {
    /// The least string greater than every string that starts with `p`, in UTF-8 byte order
    /// (nil when there is none, e.g. `p` is all U+10FFFF). Incrementing the last scalar works
    /// because UTF-8 preserves code point order and no scalar's encoding prefixes another's.
    public static func upperBound(ofStringsStartingWith p: String) -> String? {
        var scalars = Array(p.unicodeScalars)
        while let last = scalars.popLast() {
            var v = last.value + 1
            if v == 0xD800 { v = 0xE000 }
            if let next = Unicode.Scalar(v) {
                scalars.append(next)
                var s = String.UnicodeScalarView()
                s.append(contentsOf: scalars)
                return String(s)
            }
        }
        return nil
    }
}
