import Foundation

/// Which content type a file name means (docs/SEMANTICS.md §4.1): the system's `mime.types`
/// table (Debian's `media-types` package), read as Python's `mimetypes` and gsutil read it (the
/// last dot's extension, as written, then in lower case; a name that only begins with a dot has
/// none), over a small built-in table for a machine without the file. Pure lookups; `load`
/// reads the file once.
public struct ContentTypes: Sendable, Equatable {
    /// Extension (no dot) → type.
    public let table: [String: String]

    public init(table: [String: String]) {
        self.table = table
    }

    /// The table of this machine: `/etc/mime.types` over the built-in one, read once.
    public static let system = load(paths: ["/etc/mime.types"])

    /// The built-in table over which each readable file of `paths` is laid (a file's entry
    /// wins, a later line over an earlier one, as in Python's `mimetypes`).
    public static func load(paths: [String]) -> ContentTypes {
        var t = builtIn
        for p in paths {
            guard let text = try? String(contentsOfFile: p, encoding: .utf8) else { continue }
            t.merge(parse(text)) { _, file in file }
        }
        return ContentTypes(table: t)
    }

    /// The entries of a `mime.types` file: `type ext ext …` per line, `#` starts a comment.
    public static func parse(_ text: String) -> [String: String] {
        var t: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let content = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let words = content.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 2, words[0].contains("/") else { continue }
            for ext in words.dropFirst() { t[String(ext.hasPrefix(".") ? ext.dropFirst() : ext)] = String(words[0]) }
        }
        return t
    }

    /// The fallback when no `mime.types` can be read: the types a bucket's web files most need.
    public static let builtIn: [String: String] = [
        "txt": "text/plain", "md": "text/markdown", "csv": "text/csv", "html": "text/html", "htm": "text/html",
        "css": "text/css", "js": "text/javascript", "mjs": "text/javascript", "json": "application/json",
        "xml": "application/xml", "pdf": "application/pdf", "zip": "application/zip", "gz": "application/gzip",
        "tar": "application/x-tar", "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg",
        "gif": "image/gif", "webp": "image/webp", "svg": "image/svg+xml", "ico": "image/vnd.microsoft.icon",
        "mp3": "audio/mpeg", "wav": "audio/x-wav", "mp4": "video/mp4", "webm": "video/webm",
        "wasm": "application/wasm", "woff": "font/woff", "woff2": "font/woff2",
    ]

    /// The type a name's extension means, nil when the table has none. `path` may be a whole
    /// object name: only its last segment counts.
    public func type(forName path: String) -> String? {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard let dot = name.lastIndex(of: "."), name[..<dot].contains(where: { $0 != "." }) else { return nil }
        let ext = String(name[name.index(after: dot)...])
        guard !ext.isEmpty else { return nil }
        return table[ext] ?? table[ext.lowercased()]
    }
}
