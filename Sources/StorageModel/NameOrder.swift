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

extension NameOrder {
    /// Whether `a` sorts before `b` in UTF-8 byte order: `a.utf8.lexicographicallyPrecedes(b.utf8)`,
    /// as one `memcmp` over the strings' contiguous bytes (the generic comparison was a tenth of
    /// the daemon's CPU in a listing of 100,000 names: sorting them and checking their ranges).
    @inlinable
    public static func precedes(_ a: String, _ b: String) -> Bool {
        var a = a, b = b  // withUTF8 copies only a string that is not contiguous (bridged)
        return a.withUTF8 { pa in
            b.withUTF8 { pb in
                let n = min(pa.count, pb.count)
                let c = n == 0 ? 0 : memcmp(pa.baseAddress!, pb.baseAddress!, n)
                return c != 0 ? c < 0 : pa.count < pb.count
            }
        }
    }
}
