import Foundation

/// A moment in a bucket's past, as `--at TIME` takes it (docs/SEMANTICS.md "Versions"): an
/// RFC 3339 time (`2026-11-20T10:00:00Z`, `2026-11-20T10:00:00.250+01:00`) or a duration back
/// from now: a whole number followed by `s`, `m`, `h`, `d` or `w` (`90m`, `2h`, `3d`).
public struct PointInTime: Sendable, Equatable, CustomStringConvertible {
    public let date: Date
    /// What the user wrote.
    public let text: String

    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case unreadable(String)
        case inTheFuture(String)
        public var description: String {
            switch self {
            case .unreadable(let t):
                return "'\(t)' is not a time: give an RFC 3339 time (2026-11-20T10:00:00Z) or a duration back from now (90m, 2h, 3d)"
            case .inTheFuture(let t):
                return "'\(t)' is in the future: a bucket's past ends now"
            }
        }
    }

    /// Parses `text`; durations count back from `now`. A time later than `now` is refused.
    public init(parsing text: String, now: Date) throws {
        let t = text.trimmingCharacters(in: .whitespaces)
        if let d = Self.duration(t) {
            self.date = now.addingTimeInterval(-d)
        } else if let d = Self.rfc3339(t) {
            guard d <= now else { throw ParseError.inTheFuture(text) }
            self.date = d
        } else {
            throw ParseError.unreadable(text)
        }
        self.text = text
    }

    public init(date: Date) {
        self.date = date
        self.text = Self.format(date)
    }

    public var description: String { Self.format(date) }

    /// The time in RFC 3339, UTC, with milliseconds.
    public static func format(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: date)
    }

    /// A duration as `--at` takes it (`90m`, `2h`, `3d`, `1w`), in seconds; nil for anything else.
    public static func duration(_ t: String) -> TimeInterval? {
        guard let unit = t.last, let n = Int(t.dropLast()), n >= 0, t.count >= 2,
              t.dropLast().allSatisfy(\.isASCII) else { return nil }
        let seconds: Double
        switch unit {
        case "s": seconds = 1
        case "m": seconds = 60
        case "h": seconds = 3600
        case "d": seconds = 86400
        case "w": seconds = 7 * 86400
        default: return nil
        }
        return Double(n) * seconds
    }

    static func rfc3339(_ t: String) -> Date? {
        // RFC 3339 allows a lowercase 't'/'z' and a space for 'T'; ISO8601DateFormatter does not.
        var s = t.replacingOccurrences(of: " ", with: "T")
        s = s.replacingOccurrences(of: "t", with: "T").replacingOccurrences(of: "z", with: "Z")
        let whole = ISO8601DateFormatter()
        whole.formatOptions = [.withInternetDateTime]
        if let d = whole.date(from: s) { return d }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return fractional.date(from: s)
    }
}
