import Foundation

/// One object of the reference bucket: its bytes and its custom metadata.
struct RefObject: Equatable, Sendable {
    var data: Data
    var custom: [String: String] = [:]
}

/// The plain model the core is compared with (SPEC.md §3, §4; README "Behaviour where SPEC.md is
/// silent"): the bucket as files (object name → bytes and custom metadata) plus directory
/// placeholders (`dir/` objects, with the custom metadata a directory's xattrs live in).
///
/// What a user sees is derived from it, with the documented rules:
/// - a directory exists when it has a placeholder or any object below it (a prefix);
/// - when `a` is both an object and a prefix the directory wins and the file is hidden;
/// - a prefix-only directory disappears with its last object.
struct ReferenceModel: Sendable {
    /// Object name (never ending in "/") → content.
    var files: [String: RefObject] = [:]
    /// Directory path (no trailing "/") → the custom metadata of its `path/` placeholder.
    var placeholders: [String: [String: String]] = [:]

    enum Kind: Equatable, Sendable { case file, directory }

    /// "a/b/c" → ["a", "a/b"] (the root "" not included).
    static func ancestors(_ path: String) -> [String] {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return (1..<max(1, parts.count)).map { parts[0..<$0].joined(separator: "/") }
    }

    static func parent(_ path: String) -> String {
        guard let i = path.lastIndex(of: "/") else { return "" }
        return String(path[..<i])
    }

    static func name(_ path: String) -> String {
        guard let i = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: i)...])
    }

    static func join(_ dir: String, _ name: String) -> String { dir.isEmpty ? name : dir + "/" + name }

    /// `a` is `b` or inside it.
    static func isWithin(_ a: String, _ b: String) -> Bool { a == b || b.isEmpty || a.hasPrefix(b + "/") }

    /// Every directory the mount shows, the root ("") included.
    var directories: Set<String> {
        var out: Set<String> = [""]
        for p in placeholders.keys {
            out.insert(p)
            out.formUnion(Self.ancestors(p))
        }
        for f in files.keys { out.formUnion(Self.ancestors(f)) }
        return out
    }

    /// The files the mount shows: those no directory of the same name hides.
    var visibleFiles: [String: RefObject] {
        let dirs = directories
        return files.filter { !dirs.contains($0.key) }
    }

    func kind(_ path: String) -> Kind? {
        if directories.contains(path) { return .directory }
        return files[path] == nil ? nil : .file
    }

    /// name → kind of what `readdir` of `dir` shows.
    func children(of dir: String) -> [String: Kind] {
        var out: [String: Kind] = [:]
        let dirs = directories
        for d in dirs where !d.isEmpty && Self.parent(d) == dir { out[Self.name(d)] = .directory }
        for f in files.keys where Self.parent(f) == dir && out[Self.name(f)] == nil { out[Self.name(f)] = .file }
        return out
    }

    /// The bucket's objects as a store lists them: placeholders as `path/` with no bytes.
    var objects: [String: RefObject] {
        var out = files
        for (p, custom) in placeholders { out[p + "/"] = RefObject(data: Data(), custom: custom) }
        return out
    }

    /// Sorted choices for the index arguments of operations (byte order, as listings are).
    static func sorted<S: Sequence>(_ s: S) -> [String] where S.Element == String {
        s.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    var sortedDirectories: [String] { Self.sorted(directories) }
    var sortedVisibleFiles: [String] { Self.sorted(visibleFiles.keys) }
    /// Files and directories, the root excepted.
    var sortedNodes: [String] { Self.sorted(visibleFiles.keys) + Self.sorted(directories.subtracting([""])) }
    var sortedObjectNames: [String] { Self.sorted(objects.keys) }

    // MARK: - changes

    /// Removes a file; the same rules as a DELETE of its object.
    mutating func removeObject(_ name: String) {
        if name.hasSuffix("/") { placeholders.removeValue(forKey: String(name.dropLast())) } else { files.removeValue(forKey: name) }
    }

    /// Moves every object under `src/` (its placeholder included) to `dst/`, as a directory rename does.
    mutating func moveDirectory(_ src: String, to dst: String) {
        var movedAny = false
        for (name, o) in files where name.hasPrefix(src + "/") {
            movedAny = true
            files.removeValue(forKey: name)
            files[dst + name.dropFirst(src.count)] = o
        }
        for (p, custom) in placeholders where p == src || p.hasPrefix(src + "/") {
            movedAny = true
            placeholders.removeValue(forKey: p)
            placeholders[dst + p.dropFirst(src.count)] = custom
        }
        // A directory known only as a name (no object) gets a placeholder under its new name.
        if !movedAny { placeholders[dst] = [:] }
    }

    /// The custom metadata xattrs of a node show: a file's, or its directory placeholder's.
    func custom(of path: String) -> [String: String] {
        kind(path) == .directory ? (placeholders[path] ?? [:]) : (files[path]?.custom ?? [:])
    }

    mutating func setCustom(_ path: String, _ key: String, _ value: String?) {
        if kind(path) == .directory {
            placeholders[path, default: [:]][key] = value
        } else {
            files[path]?.custom[key] = value
        }
    }
}

extension Data {
    /// `self` with `bytes` written at `offset` (zeros fill a gap), as pwrite does: writing
    /// nothing changes nothing, even past the end.
    func writing(_ bytes: Data, at offset: Int) -> Data {
        if bytes.isEmpty { return self }
        var out = Data(self)
        if out.count < offset { out.append(Data(count: offset - out.count)) }
        let end = offset + bytes.count
        if out.count < end { out.append(Data(count: end - out.count)) }
        out.replaceSubrange(offset..<end, with: bytes)
        return out
    }

    /// `self` cut or zero-extended to `size`, as ftruncate does.
    func truncated(to size: Int) -> Data {
        size <= count ? Data(prefix(size)) : self + Data(count: size - count)
    }
}
