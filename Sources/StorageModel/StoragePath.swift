import Foundation

/// Path rules of the reference model. All checks run before any request.
public enum StoragePath {
    public static let maxFullPathBytes = 1024
    public static let maxSegmentBytes = 255

    /// `child()` normalisation: joins, drops empty segments (`/a//b///` → `a/b`).
    public static func normalize(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
    }

    public static func join(_ parent: String, _ child: String) -> String {
        normalize(parent + "/" + child)
    }

    /// The last segment, "" for the root. Segments end at the byte `/`, as the kernel's do (a
    /// `/` followed by a combining mark still ends one), and the search runs over UTF-8 bytes: a
    /// listing asks this once per name.
    public static func lastSegment(_ path: String) -> String {
        guard let i = path.utf8.lastIndex(of: slash) else { return path }
        return String(Substring(path.utf8[path.utf8.index(after: i)...]))
    }

    /// The parent path, nil for the root ("").
    public static func parent(_ path: String) -> String? {
        if path.isEmpty { return nil }
        guard let i = path.utf8.lastIndex(of: slash) else { return "" }
        return String(Substring(path.utf8[..<i]))
    }

    static let slash = UInt8(ascii: "/")

    /// Validates an object name for the model: 1…1024 UTF-8 bytes, no CR or LF.
    public static func validateObjectName(_ name: String) throws(StorageError) {
        if name.isEmpty { throw .pathError(path: name, problem: .empty) }
        let n = name.utf8.count
        if n > maxFullPathBytes { throw .pathError(path: name, problem: .tooLong(bytes: n)) }
        if name.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) {
            throw .pathError(path: name, problem: .containsNewline)
        }
        warnAboutDiscouragedCharacters(name)
    }

    /// Stricter check for names the mount can show: additionally no empty, `.` or `..`
    /// segments, and no segment over 255 bytes. `allowTrailingSlash` admits `dir/` placeholders.
    public static func mountProblem(_ name: String, allowTrailingSlash: Bool = true) -> PathProblem? {
        if name.isEmpty { return .empty }
        let n = name.utf8.count
        if n > maxFullPathBytes { return .tooLong(bytes: n) }
        if name.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) { return .containsNewline }
        // A C string ends at NUL: shown, `a\0b` would reach the kernel as `a`, another object's name.
        if name.utf8.contains(0) { return .containsNul }
        // Segments end at the byte `/` (as the kernel splits a path), read in one pass.
        return name.utf8.withContiguousStorageIfAvailable { segmentProblem(in: $0, allowTrailingSlash: allowTrailingSlash) }
            ?? segmentProblem(in: Array(name.utf8), allowTrailingSlash: allowTrailingSlash)
    }

    /// The first empty, `.`, `..` or over-long segment of a name's bytes, nil when none.
    private static func segmentProblem<C: RandomAccessCollection<UInt8>>(in bytes: C, allowTrailingSlash: Bool) -> PathProblem?
        where C.Index == Int {
        var start = bytes.startIndex
        let end = bytes.endIndex
        while true {
            var i = start
            while i < end, bytes[i] != slash { i += 1 }
            let n = i - start
            // `dir/`: a placeholder's trailing slash ends the name, not an empty segment.
            if n == 0, i == end, allowTrailingSlash, start > bytes.startIndex { return nil }
            let dots = n <= 2 && bytes[start..<i].allSatisfy { $0 == UInt8(ascii: ".") }
            if n == 0 || dots {
                return .unrepresentableSegment(String(decoding: bytes[start..<i], as: UTF8.self))
            }
            if n > maxSegmentBytes {
                return .segmentTooLong(segment: String(decoding: bytes[start..<i], as: UTF8.self), bytes: n)
            }
            if i == end { return nil }
            start = i + 1
        }
    }

    /// `#`, `[`, `]`, `*`, `?` are allowed but discouraged by Cloud Storage; warned about once.
    public static let discouragedCharacters: Set<Character> = ["#", "[", "]", "*", "?"]
    private static let warned = WarnOnce()

    static func warnAboutDiscouragedCharacters(_ name: String) {
        if name.contains(where: { discouragedCharacters.contains($0) }) {
            warned.warn("object name '\(name.prefix(200))' contains one of # [ ] * ?, which Cloud Storage discourages")
        }
    }
}

/// Logs a message once per process (by key). Thread-safe.
public final class WarnOnce: @unchecked Sendable {
    private var seen = Set<String>()
    private let lock = NSLock()
    public init() {}
    public var handler: @Sendable (String) -> Void = { msg in
        FileHandle.standardError.write(Data("bucketfs: warning: \(msg)\n".utf8))
    }
    /// Returns true the first time the key is seen.
    @discardableResult
    public func warn(_ message: String, key: String? = nil) -> Bool {
        let k = key ?? message
        lock.lock()
        let first = seen.insert(k).inserted
        lock.unlock()
        if first { handler(message) }
        return first
    }
}
