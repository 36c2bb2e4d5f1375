import Foundation
import StorageModel

/// One object of the reference bucket: its bytes and its custom metadata.
struct RefObject: Equatable, Sendable {
    var data: Data
    var custom: [String: String] = [:]
}

/// The plain model the core is compared with (docs/SEMANTICS.md §1, §3, §4, §8): the bucket as objects, and what the mount holds locally (files open for
/// writing, files created here and not uploaded yet, open handles).
///
/// What a user sees is derived from it, with the documented rules:
/// - objects whose names the mount cannot show (`//`, `.`/`..` segments, CR/LF, a segment over
///   255 bytes) are hidden, never renamed or mangled; the directories above their first bad
///   segment show;
/// - a directory exists when it has a placeholder (`dir/`) or any object below it (a prefix);
/// - when `a` is both an object and a prefix the directory wins and the file is hidden;
/// - a prefix-only directory disappears with its last object;
/// - in a bucket with a hierarchical namespace (`hierarchical`) every directory is a folder: an
///   object makes the folders above it, a folder stays when emptied, and a folder holds no
///   metadata (its xattrs cannot be set); folders are kept here as the names `dir/`, as
///   placeholders are;
/// - a file being written shows its local content, and so does every handle open on it;
///   close (and fsync) uploads it; a file created here shows before its first upload.
struct ReferenceModel: Sendable {
    /// The bucket: object name → content. Placeholders are names ending in "/" (no bytes).
    var objects: [String: RefObject] = [:] { didSet { memo.clear() } }
    /// A bucket with a hierarchical namespace (see above).
    var hierarchical = false
    /// Bumped each time an object's bytes change in the bucket (a new generation): a handle opened
    /// for reading is pinned to the generation it opened.
    var generation: [String: Int] = [:]
    private var nextGeneration = 1

    /// The mount's files with an identity (what the core calls an inode): handles and local content
    /// belong to a file, which moves with renames and outlives an unlink while it is open.
    var files: [Int: RefFile] = [:] { didSet { memo.clear() } }
    /// path → the file living there now (only files something local refers to).
    var fileAt: [String: Int] = [:] { didSet { memo.clear() } }
    /// What is derived from the above, kept until they change (the runs ask for it at every step).
    private let memo = Memo()

    private final class Memo: @unchecked Sendable {
        var directories: Set<String>?
        var visibleFiles: [String: RefObject]?
        func clear() {
            directories = nil
            visibleFiles = nil
        }
    }
    private var nextFile = 1
    /// Open handles, oldest first (steps pick them by index).
    var handles: [RefHandle] = []

    enum Kind: Equatable, Sendable { case file, directory }

    // MARK: - names

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

    /// Whether the mount shows an object of this name (placeholders end in "/").
    static func isShown(_ object: String) -> Bool {
        StoragePath.mountProblem(object, allowTrailingSlash: object.hasSuffix("/")) == nil
    }

    /// The directories an object makes (a placeholder its own): its leading segments up to the
    /// first one the mount cannot show.
    static func directories(of object: String) -> [String] {
        var segs = object.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        segs.removeLast()  // the object's own name ("" for a placeholder)
        var out: [String] = []
        var path = ""
        for s in segs {
            path = out.isEmpty ? s : path + "/" + s
            guard StoragePath.mountProblem(path + "/", allowTrailingSlash: true) == nil else { break }
            out.append(path)
        }
        return out
    }

    /// Sorted choices for the index arguments of operations (byte order, as listings are).
    static func sorted<S: Sequence>(_ s: S) -> [String] where S.Element == String {
        s.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    // MARK: - what the mount shows

    /// Every directory the mount shows, the root ("") included.
    var directories: Set<String> {
        if let d = memo.directories { return d }
        var out: Set<String> = [""]
        for name in objects.keys { out.formUnion(Self.directories(of: name)) }
        // A file created here and not uploaded yet keeps the directories above it.
        for path in pendingNew { out.formUnion(Self.ancestors(path)) }
        memo.directories = out
        return out
    }

    /// Files created here and not in the bucket yet: the mount shows them.
    var pendingNew: Set<String> {
        Set(files.values.compactMap { f in f.stage?.createdHere == true && f.path != nil && f.stage?.deleted == false ? f.path : nil })
    }

    /// The files the mount shows, with the content it shows: the bucket's shown objects and the
    /// files created here, except those a directory of the same name hides; a file with local
    /// content shows that.
    var visibleFiles: [String: RefObject] {
        if let v = memo.visibleFiles { return v }
        let dirs = directories
        var out: [String: RefObject] = [:]
        for (name, o) in objects where !name.hasSuffix("/") && Self.isShown(name) && !dirs.contains(name) { out[name] = o }
        for (path, id) in fileAt where !dirs.contains(path) {
            if let s = files[id]?.stage, !s.deleted, s.createdHere || out[path] != nil { out[path] = RefObject(data: s.data, custom: s.custom) }
        }
        memo.visibleFiles = out
        return out
    }

    func kind(_ path: String) -> Kind? {
        if directories.contains(path) { return .directory }
        return visibleFiles[path] == nil ? nil : .file
    }

    /// name → kind of what `readdir` of `dir` shows.
    func children(of dir: String) -> [String: Kind] {
        var out: [String: Kind] = [:]
        for d in directories where !d.isEmpty && Self.parent(d) == dir { out[Self.name(d)] = .directory }
        for f in visibleFiles.keys where Self.parent(f) == dir && out[Self.name(f)] == nil { out[Self.name(f)] = .file }
        return out
    }

    /// Whether rmdir of `dir` must answer ENOTEMPTY: an object below it other than its own
    /// placeholder (shown or hidden), or a file created here anywhere below it (its directories
    /// exist while it does).
    func hasContent(_ dir: String) -> Bool {
        objects.keys.contains { $0 != dir + "/" && $0.hasPrefix(dir + "/") } || pendingNew.contains { $0.hasPrefix(dir + "/") }
    }

    /// The custom metadata xattrs of a node show: a file's (its local content's when it has one),
    /// or its directory placeholder's.
    func custom(of path: String) -> [String: String] {
        if kind(path) == .directory { return hierarchical ? [:] : objects[path + "/"]?.custom ?? [:] }
        return visibleFiles[path]?.custom ?? [:]
    }

    var sortedDirectories: [String] { Self.sorted(directories) }
    var sortedVisibleFiles: [String] { Self.sorted(visibleFiles.keys) }
    /// Files and directories, the root excepted.
    var sortedNodes: [String] { Self.sorted(visibleFiles.keys) + Self.sorted(directories.subtracting([""])) }
    var sortedObjectNames: [String] { Self.sorted(objects.keys) }

    // MARK: - the bucket

    /// An object's bytes (and maybe metadata) change: a new generation.
    mutating func put(_ name: String, _ o: RefObject) {
        if hierarchical {
            for f in ancestorFolders(of: name) where objects[f] == nil && f != name { objects[f] = RefObject(data: Data()) }
        }
        objects[name] = o
        generation[name] = nextGeneration
        nextGeneration += 1
    }

    mutating func remove(_ name: String) {
        objects.removeValue(forKey: name)
        generation.removeValue(forKey: name)
    }

    /// Moves every object under `src/` (its placeholder included, hidden names too) to `dst/`, as
    /// a directory rename does; a directory known only as a name gets a placeholder.
    mutating func moveDirectory(_ src: String, to dst: String) {
        let moving = objects.filter { $0.key.hasPrefix(src + "/") }
        for (name, o) in moving {
            remove(name)
            put(dst + name.dropFirst(src.count), o)
        }
        if moving.isEmpty { put(dst + "/", RefObject(data: Data())) }
        // Local files below move with it.
        for (path, id) in fileAt where Self.isWithin(path, src) {
            fileAt.removeValue(forKey: path)
            let moved = dst + path.dropFirst(src.count)
            fileAt[moved] = id
            files[id]?.path = moved
        }
    }

    // MARK: - local files

    /// The file living at `path`, made when first needed.
    mutating func file(at path: String) -> Int {
        if let id = fileAt[path] { return id }
        let id = nextFile
        nextFile += 1
        files[id] = RefFile(path: path)
        fileAt[path] = id
        return id
    }

    /// The file at `path` leaves its name (unlinked, or renamed over): its local content goes
    /// nowhere, its open handles live on.
    mutating func detach(_ path: String) {
        guard let id = fileAt.removeValue(forKey: path) else { return }
        files[id]?.path = nil
        files[id]?.stage?.deleted = true
        dropIfUnused(id)
    }

    /// Forgets a file nothing refers to any more.
    mutating func dropIfUnused(_ id: Int) {
        guard let f = files[id], f.stage == nil, !handles.contains(where: { $0.file == id }) else { return }
        files.removeValue(forKey: id)
        if let p = f.path, fileAt[p] == id { fileAt.removeValue(forKey: p) }
    }

    /// What a handle reads now: the file's local content, or the generation it opened (nil when
    /// that generation was replaced: the outcome then depends on the store keeping it).
    func content(of h: RefHandle) -> Data? {
        guard let f = files[h.file] else { return nil }
        if let s = f.stage { return s.data }
        guard let p = f.path, let g = h.openedGeneration, generation[p] == g else { return nil }
        return objects[p]?.data
    }

    /// Uploads a file's unsaved local content (flush, fsync, close, rename, truncate).
    mutating func upload(_ id: Int) {
        guard let f = files[id], let s = f.stage, s.dirty, !s.deleted, let p = f.path else { return }
        put(p, RefObject(data: s.data, custom: s.custom))
        files[id]!.stage!.dirty = false
        files[id]!.stage!.createdHere = false
    }

    /// A handle closes (flush, then release).
    mutating func close(_ index: Int) {
        let h = handles.remove(at: index)
        upload(h.file)
        if h.holdsStage, var s = files[h.file]?.stage {
            s.holders -= 1
            files[h.file]!.stage = s.holders == 0 && !(s.dirty && !s.deleted) ? nil : s
        }
        dropIfUnused(h.file)
    }
}

/// A file of the mount with an identity (a core inode): `path` nil once it left its name.
struct RefFile: Equatable, Sendable {
    var path: String?
    var stage: RefStage?
}

/// A file's local content (a core stage file): made when it is opened for writing or created.
struct RefStage: Equatable, Sendable {
    var data: Data
    var custom: [String: String]
    /// Differs from the bucket.
    var dirty: Bool
    /// Created here and not in the bucket yet.
    var createdHere: Bool
    /// The file was unlinked or renamed over: the content goes nowhere.
    var deleted = false
    /// Handles that keep it (opened for writing, or for reading while it existed).
    var holders = 0
}

/// An open file handle.
struct RefHandle: Equatable, Sendable {
    let fh: UInt64
    let ino: UInt64
    let file: Int
    let readable: Bool
    let writable: Bool
    let append: Bool
    let holdsStage: Bool
    /// The generation a handle without local content reads (nil: local content at open).
    let openedGeneration: Int?
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
