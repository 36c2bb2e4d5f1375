/// RFC 3986 §5.2.4 remove_dot_segments, as HTTP front ends apply it to a request's path before
/// routing: a literal `.` or `..` segment is resolved (`/b/B/o/..` is `/b/B/`), while `%2E%2E` is
/// an ordinary segment. The test servers route what real ones would, so a client that sends a
/// name `..` unescaped reaches another path, as it would in production.
public enum DotSegments {
    public static func remove(_ path: String) -> String {
        var out: [Substring] = []
        let segs = path.split(separator: "/", omittingEmptySubsequences: false)
        for (i, s) in segs.enumerated() {
            let last = i == segs.count - 1
            if s == "." {
                if last { out.append("") }
            } else if s == ".." {
                if out.count > 1 { out.removeLast() }
                if last { out.append("") }
            } else {
                out.append(s)
            }
        }
        return out.joined(separator: "/")
    }
}
