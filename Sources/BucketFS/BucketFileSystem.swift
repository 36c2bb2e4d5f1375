import Foundation
import FuseKit
import Logging
import StorageModel

/// The filesystem core: a bucket as a directory tree (SPEC.md §3, §4, §6). It implements
/// FuseKit's `FuseFileSystem`, so tests drive the very entry points the kernel adapter calls,
/// with an injected store and clock and no kernel.
///
/// Locking: one lock, `lock`, guards `nodes`, `byPath`, `handles`, `dirHandles`, `nextIno`,
/// `nextFh` and every field of every `Node`. It is never held across an `await`.
public final class BucketFileSystem: FuseFileSystem, @unchecked Sendable {
    public static let rootIno: UInt64 = 1

    let store: any ObjectStore
    public let config: MountConfig
    let logger: Logger
    let hiddenLog = WarnOnce()

    private let lock = NSLock()
    private var nodes: [UInt64: Node] = [:]
    /// "d:" / "f:" + path → inode, so a path keeps its number for the life of the mount.
    private var byPath: [String: UInt64] = [:]
    private var nextIno: UInt64 = 2
    private var handles: [UInt64: Handle] = [:]
    private var dirHandles: [UInt64: DirHandle] = [:]
    private var nextFh: UInt64 = 1
    private let mountTime: Double
    /// Cache hits and misses, for the metrics endpoint (`statistics()`).
    public let cacheCounters = CacheCounters()

    public init(store: any ObjectStore, config: MountConfig = MountConfig(), logger: Logger = Logger(label: "bucketfs")) {
        self.store = store
        self.config = config
        self.logger = logger
        self.mountTime = config.now()
        let root = Node(ino: Self.rootIno, path: "", type: .directory)
        root.lookups = 1
        nodes[Self.rootIno] = root
        byPath["d:"] = Self.rootIno
        try? FileManager.default.createDirectory(atPath: config.cacheDirectory, withIntermediateDirectories: true)
    }

    @inline(__always)
    private func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    private var now: Double { config.now() }

    // MARK: - inode table

    /// Returns the inode for a path and type, creating it if needed. Caller holds `lock`.
    private func nodeLocked(path: String, type: FileType) -> Node {
        let key = (type == .directory ? "d:" : "f:") + path
        if let ino = byPath[key], let n = nodes[ino] { return n }
        let n = Node(ino: nextIno, path: path, type: type)
        nextIno += 1
        nodes[n.ino] = n
        byPath[key] = n.ino
        return n
    }

    private func node(_ ino: UInt64) throws(Errno) -> Node {
        guard let n = locked({ nodes[ino] }) else { throw .ENOENT }
        return n
    }

    private func key(_ n: Node) -> String { (n.type == .directory ? "d:" : "f:") + n.path }

    // MARK: - attributes

    private func mtime(of info: ObjectInfo?) -> Double {
        guard let info else { return mountTime }
        if let s = info.customMetadata[XattrName.mtimeKey], let v = Double(s) { return v }
        if let s = info.customMetadata["gcsfuse_mtime"], let d = RFC3339.parse(s) { return d.timeIntervalSince1970 }
        return info.updated.timeIntervalSince1970
    }

    /// Caller holds `lock`.
    private func attributesLocked(_ n: Node) -> FileAttributes {
        let info: ObjectInfo? = n.info
        var size: Int64 = info?.size ?? 0
        var mtime = self.mtime(of: info)
        if let s = n.staged {
            size = s.size
            if let m = s.metadata.customMetadata[XattrName.mtimeKey], let v = Double(m) { mtime = v }
            else if s.dirty { mtime = max(mtime, now) }
        }
        var ctime = info?.updated.timeIntervalSince1970 ?? mountTime
        let dir = n.type == .directory
        if dir {
            // A listing shows child directories without their placeholders' metadata, so a
            // directory's times would change once its placeholder is read: directories show the
            // mount's start time, always, so `rsync -a` and `find -newer` see stable times.
            mtime = mountTime
            ctime = mountTime
        }
        return FileAttributes(
            ino: n.ino, type: n.type, size: dir ? 0 : UInt64(max(0, size)),
            permissions: (dir ? config.dirMode : config.fileMode) & (config.readOnly ? 0o555 : 0o7777),
            nlink: 1, uid: config.uid, gid: config.gid, atime: mtime, mtime: mtime, ctime: ctime)
    }

    private func entryLocked(_ n: Node) -> FuseEntry {
        FuseEntry(attributes: attributesLocked(n), entryTimeout: config.metadataTTL, attrTimeout: config.metadataTTL)
    }

    // MARK: - errors

    /// Maps a store error to errno, logging it once with the object name and the cause.
    func fail(_ error: any Error, _ op: String, _ path: String) -> Errno {
        let e = errno(for: error)
        switch e {
        case .ENOENT: logger.debug("\(op) \(path): not found")
        default: logger.error("\(op) '\(path)' failed: \(error) → \(e)")
        }
        return e
    }

    // MARK: - names

    /// Validates a child name and returns the child's full path. Errors: ENAMETOOLONG, EINVAL.
    private func childPath(_ parent: Node, _ name: String) throws(Errno) -> String {
        if name.utf8.count > StoragePath.maxSegmentBytes { throw .ENAMETOOLONG }
        if name.isEmpty || name == "." || name == ".." || name.contains("/") { throw .EINVAL }
        if name.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) { throw .EINVAL }
        let p = parent.path.isEmpty ? name : parent.path + "/" + name
        // A directory's placeholder adds one byte ("dir/"): keep room for it.
        if p.utf8.count + 1 > StoragePath.maxFullPathBytes { throw .ENAMETOOLONG }
        return p
    }

    /// A name from a listing the mount can show, or nil (hidden and logged once).
    private func visibleName(_ full: String, relativeTo prefix: String, isPrefix: Bool) -> String? {
        var rel = String(full.dropFirst(prefix.count))
        if isPrefix { rel = String(rel.dropLast()) }
        if let problem = StoragePath.mountProblem(full, allowTrailingSlash: isPrefix) ?? segmentProblem(rel) {
            hiddenLog.warn("hiding object '\(full.prefix(200))' from the mount: \(problem)", key: full)
            return nil
        }
        return rel
    }

    private func segmentProblem(_ rel: String) -> PathProblem? {
        if rel.isEmpty || rel == "." || rel == ".." || rel.contains("/") { return .unrepresentableSegment(rel) }
        if rel.utf8.count > StoragePath.maxSegmentBytes { return .segmentTooLong(segment: rel, bytes: rel.utf8.count) }
        return nil
    }

    // MARK: - listing

    /// Lists a directory (all pages) and fills the attribute cache of every child.
    private func loadListing(_ dir: Node) async throws(Errno) {
        let prefix = locked { dir.childPrefix }
        var token: String? = nil
        var dirs: [String] = []
        var files: [String: ObjectInfo] = [:]
        var placeholder: ObjectInfo? = nil
        do {
            repeat {
                let page = try await store.list(ListRequest(prefix: prefix, delimiter: "/",
                                                            maxResults: config.listPageSize, pageToken: token))
                for p in page.prefixes {
                    if let name = visibleName(p, relativeTo: prefix, isPrefix: true) { dirs.append(name) }
                }
                for item in page.items {
                    if item.name == prefix { placeholder = item; continue }
                    if let name = visibleName(item.name, relativeTo: prefix, isPrefix: false) { files[name] = item }
                }
                token = page.nextPageToken
            } while token != nil
        } catch {
            throw fail(error, "list", prefix)
        }
        let t = now
        locked {
            var children: [String: UInt64] = [:]
            for name in dirs {
                let n = nodeLocked(path: prefix + name, type: .directory)
                children[name] = n.ino
                if files[name] != nil {
                    hiddenLog.warn("'\(prefix + name)' is both an object and a prefix: the directory is shown; the object stays reachable through `bucketfs cat/stat`", key: "clash:" + prefix + name)
                }
            }
            for (name, info) in files where children[name] == nil {
                let n = nodeLocked(path: prefix + name, type: .regular)
                n.removed = false
                if n.staged == nil || !(n.staged!.dirty) { n.info = info }
                n.infoExpiry = t + config.metadataTTL
                children[name] = n.ino
            }
            // Files created here and not yet uploaded stay visible (even when this directory had
            // no listing yet when they were created).
            for n in nodes.values where n.type == .regular && !n.removed && n.staged?.baseGeneration == 0 {
                if StoragePath.parent(n.path) == dir.path, children[n.name] == nil { children[n.name] = n.ino }
            }
            if dir.ino != Self.rootIno {
                dir.info = placeholder
                dir.infoExpiry = t + config.metadataTTL
            }
            dir.listing = Listing(children: children, expiry: t + config.metadataTTL)
        }
    }

    private func freshListing(_ dir: Node) -> Listing? {
        locked { dir.listing.flatMap { $0.expiry > now ? $0 : nil } }
    }

    /// Resolves one name in a directory: from a fresh listing, else with a get and a one-item list.
    private func resolve(_ parent: Node, _ name: String) async throws(Errno) -> Node {
        let path = try childPath(parent, name)
        if let l = freshListing(parent) {
            cacheCounters.count(.listing, hit: true)
            guard let ino = l.children[name], let n = locked({ nodes[ino] }), !n.removed else { throw .ENOENT }
            return n
        }
        if let local = locked({ () -> Node? in
            guard let ino = byPath["f:" + path], let n = nodes[ino], let s = n.staged, s.baseGeneration == 0, !n.removed else { return nil }
            return n
        }) { return local }
        if StoragePath.mountProblem(path) != nil { throw .ENOENT }
        cacheCounters.count(.listing, hit: false)
        async let meta: ObjectInfo? = { () async throws -> ObjectInfo? in
            do { return try await store.getMetadata(path) } catch StorageError.objectNotFound { return nil }
        }()
        async let page = store.list(ListRequest(prefix: path + "/", delimiter: "/", maxResults: 1))
        let info: ObjectInfo?
        let listed: ListPage
        do {
            listed = try await page
            info = try await meta
        } catch {
            throw fail(error, "lookup", path)
        }
        let t = now
        return try locked { () throws(Errno) -> Node in
            if !listed.items.isEmpty || !listed.prefixes.isEmpty {
                let n = nodeLocked(path: path, type: .directory)
                n.removed = false
                if let ph = listed.items.first, ph.name == path + "/" { n.info = ph } else { n.info = nil }
                n.infoExpiry = t + config.metadataTTL
                return n
            }
            guard let info else { throw .ENOENT }
            let n = nodeLocked(path: path, type: .regular)
            n.removed = false
            if n.staged == nil || !(n.staged!.dirty) { n.info = info }
            n.infoExpiry = t + config.metadataTTL
            return n
        }
    }

    /// Refreshes a file's metadata when its TTL has passed (no request while fresh or staged).
    private func refreshed(_ n: Node, force: Bool = false) async throws(Errno) {
        let (need, name) = locked { () -> (Bool, String) in
            let stale = force || n.infoExpiry <= now
            // A staged file keeps its metadata unless forced (rename and 412 retries must re-read).
            if n.ino == Self.rootIno || (n.staged != nil && !force) || n.removed { return (false, n.path) }
            return (stale, n.path)
        }
        cacheCounters.count(.attributes, hit: !need)
        guard need else { return }
        // A directory's attributes and xattrs are those of its `dir/` placeholder.
        if n.type == .directory { try await reloadPlaceholder(n); return }
        do {
            let info = try await store.getMetadata(name)
            locked {
                n.info = info
                n.infoExpiry = now + config.metadataTTL
            }
        } catch {
            if case StorageError.objectNotFound = error { locked { n.removed = true } }
            throw fail(error, "stat", name)
        }
    }

    // MARK: - FuseFileSystem: names and attributes

    public func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry {
        let p = try node(parent)
        guard p.type == .directory else { throw .ENOTDIR }
        let n = try await resolve(p, name)
        return locked {
            n.lookups += 1
            return entryLocked(n)
        }
    }

    public func forget(ino: UInt64, nlookup: UInt64) {
        locked {
            guard ino != Self.rootIno, let n = nodes[ino] else { return }
            n.lookups = n.lookups > nlookup ? n.lookups - nlookup : 0
            // The number stays bound to its path for the life of the mount; only state is dropped.
            if n.lookups == 0, n.staged == nil { n.listing = nil }
        }
    }

    /// readdirplus entries that reached the kernel count as lookups.
    public func noteLookup(ino: UInt64) {
        locked { nodes[ino]?.lookups += 1 }
    }

    public func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        try await refreshed(n)
        return locked { (attributesLocked(n), config.metadataTTL) }
    }

    public func statfs(ino: UInt64) async throws(Errno) -> StatFS {
        var s = StatFS()
        s.nameMax = 255
        return s
    }

    // MARK: - directories

    public func opendir(ino: UInt64) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .directory else { throw .ENOTDIR }
        return locked {
            let fh = nextFh
            nextFh += 1
            dirHandles[fh] = DirHandle(ino: ino)
            return fh
        }
    }

    public func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] {
        let dir = try node(ino)
        guard let h = locked({ dirHandles[fh] }) else { throw .EBADF }
        if offset == 0 || locked({ h.entries == nil }) {
            let cached = freshListing(dir) != nil
            cacheCounters.count(.listing, hit: cached)
            if !cached { try await loadListing(dir) }
            locked {
                let l = dir.listing ?? Listing(children: [:], expiry: 0)
                h.entries = l.sortedNames.map { ($0, l.children[$0]!) }
            }
        }
        return locked {
            let entries = h.entries ?? []
            var out: [DirectoryEntry] = []
            var i = Int(offset)
            while i < entries.count, out.count < 4096 {
                if let n = nodes[entries[i].ino] {
                    out.append(DirectoryEntry(name: entries[i].name, offset: UInt64(i + 1), entry: entryLocked(n)))
                }
                i += 1
            }
            return out
        }
    }

    public func releasedir(ino: UInt64, fh: UInt64) {
        _ = locked { dirHandles.removeValue(forKey: fh) }
    }

    // MARK: - extended attributes

    /// The metadata an xattr call sees: a staged file's pending metadata, else the cached object.
    private func currentMetadata(_ n: Node) async throws(Errno) -> ObjectInfo? {
        try await refreshed(n)
        return locked { n.info }
    }

    /// `security.*`, `system.*`, `trusted.*`, hidden keys and other namespaces need no request.
    public func immediateGetxattrError(name: String) -> Errno? {
        switch XattrName(name) {
        case .local, .hidden: return .ENODATA
        case .unsupported: return .ENOTSUP
        default: return nil
        }
    }

    public func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8] {
        let x = XattrName(name)
        switch x {
        case .local, .hidden: throw .ENODATA
        case .unsupported: throw .ENOTSUP
        default: break
        }
        let n = try node(ino)
        if case .writable(let p) = x, let s = locked({ n.staged }) {
            guard let v = locked({ p.get(s.metadata) }) else { throw .ENODATA }
            return Array(v.utf8)
        }
        if case .custom(let k) = x, let s = locked({ n.staged }) {
            guard let v = locked({ s.metadata.customMetadata[k] }) else { throw .ENODATA }
            return Array(v.utf8)
        }
        guard let info = try await currentMetadata(n), let v = x.value(in: info) else { throw .ENODATA }
        return Array(v.utf8)
    }

    public func listxattr(ino: UInt64) async throws(Errno) -> [String] {
        let n = try node(ino)
        if let s = locked({ n.staged }) { return locked { XattrName.listed(for: s.metadata) } }
        guard let info = try await currentMetadata(n) else { return [] }
        let names = XattrName.listed(for: info.writable)
        // A placeholder's properties (servers give it a default contentType) mean nothing for a
        // directory: list only its custom keys, so rsync -aX / cp -a neither copy nor strip them.
        // They stay readable and settable by name.
        if n.type == .directory { return names.filter { !$0.hasPrefix("user.storage.") } }
        return names
    }

    public func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno) {
        let x = XattrName(name)
        switch x {
        case .local, .unsupported: throw .ENOTSUP
        case .hidden, .readOnly: throw .EPERM
        case .custom(let k):
            if k.utf8.count > CustomMetadataLimits.maxKeyBytes { throw .E2BIG }
        case .writable: break
        }
        if config.readOnly { throw .EROFS }
        guard let v = String(validating: value, as: UTF8.self) else { throw .EINVAL }
        if v.utf8.count > CustomMetadataLimits.maxValueBytes { throw .E2BIG }
        try await changeMetadata(ino: ino, op: "setxattr \(name)") { (m: inout WritableMetadata) throws(Errno) in
            let existing: String?
            switch x {
            case .custom(let k): existing = m.customMetadata[k]
            case .writable(let p): existing = p.get(m)
            default: existing = nil
            }
            if flags & 1 != 0, existing != nil { throw .EEXIST }   // XATTR_CREATE
            if flags & 2 != 0, existing == nil { throw .ENODATA }  // XATTR_REPLACE
            switch x {
            case .custom(let k): m.customMetadata[k] = v
            case .writable(let p): p.set(&m, v)
            default: break
            }
        }
    }

    public func removexattr(ino: UInt64, name: String) async throws(Errno) {
        let x = XattrName(name)
        switch x {
        case .local, .unsupported: throw .ENOTSUP
        case .hidden, .readOnly: throw .EPERM
        default: break
        }
        if config.readOnly { throw .EROFS }
        try await changeMetadata(ino: ino, op: "removexattr \(name)") { (m: inout WritableMetadata) throws(Errno) in
            switch x {
            case .custom(let k):
                guard m.customMetadata.removeValue(forKey: k) != nil else { throw .ENODATA }
            case .writable(let p):
                guard p.get(m) != nil else { throw .ENODATA }
                p.set(&m, nil)
            default: break
            }
        }
    }

    /// Applies a metadata change: into a staged file's pending upload (no request), or as exactly
    /// one PATCH with `ifMetagenerationMatch` of the cached metageneration (on 412: re-read,
    /// re-apply, retry). A prefix-only directory gets its placeholder created.
    func changeMetadata(ino: UInt64, op: String,
                        _ edit: (inout WritableMetadata) throws(Errno) -> Void) async throws(Errno) {
        let n = try node(ino)
        // Pending content (new or modified): the change rides along with the upload. A file that
        // is merely open for writing gets a PATCH like any other (and its stage follows it below).
        if let s = locked({ n.staged.flatMap { $0.dirty || $0.baseGeneration == 0 ? $0 : nil } }) {
            try locked { () throws(Errno) in
                var m = s.metadata
                try edit(&m)
                try Self.checkTotal(m)
                s.metadata = m
                s.dirty = true
            }
            return
        }
        try await refreshed(n)
        var attempt = 0
        while true {
            attempt += 1
            let (info, objectName) = locked { (n.info, n.objectName) }
            guard let info else {
                guard n.type == .directory else { throw .ENOENT }
                // A prefix-only directory: create its placeholder carrying the attribute.
                var m = WritableMetadata()
                try edit(&m)
                try Self.checkTotal(m)
                do {
                    let created = try await store.write(objectName, from: .data(Data()), metadata: m, preconditions: .doesNotExist)
                    locked { n.info = created; n.infoExpiry = now + config.metadataTTL }
                    return
                } catch StorageError.preconditionFailed where attempt < 3 {
                    try await reloadPlaceholder(n)
                    continue
                } catch {
                    throw fail(error, op, objectName)
                }
            }
            var m = info.writable
            try edit(&m)
            try Self.checkTotal(m)
            var patch = customMetadataPatch(from: info.customMetadata, to: m.customMetadata)
            if m.customMetadata == info.customMetadata { patch.customMetadata = [:] }
            for p in XattrName.WritableProperty.allCases where p.get(m) != p.get(info.writable) {
                p.change(&patch, p.get(m))
            }
            if patch.isEmpty { return }
            do {
                let updated = try await store.patchMetadata(objectName, patch,
                                                            preconditions: Preconditions(ifMetagenerationMatch: info.metageneration))
                locked {
                    n.info = updated
                    n.infoExpiry = now + config.metadataTTL
                    n.staged?.metadata = updated.writable
                }
                return
            } catch StorageError.preconditionFailed where attempt < 5 {
                // Changed elsewhere: re-read and apply our edit to what is there now.
                if n.type == .directory { try await reloadPlaceholder(n) } else { try await refreshed(n, force: true) }
                continue
            } catch {
                throw fail(error, op, objectName)
            }
        }
    }

    private func reloadPlaceholder(_ n: Node) async throws(Errno) {
        let name = locked { n.objectName }
        do {
            let info = try await store.getMetadata(name)
            locked { n.info = info; n.infoExpiry = now + config.metadataTTL }
        } catch StorageError.objectNotFound {
            locked { n.info = nil; n.infoExpiry = now + config.metadataTTL }
        } catch {
            throw fail(error, "stat", name)
        }
    }

    static func checkTotal(_ m: WritableMetadata) throws(Errno) {
        if CustomMetadataLimits.totalBytes(m.customMetadata) > CustomMetadataLimits.maxTotalBytes { throw .ENOSPC }
    }

    // MARK: - open, read

    public func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .regular else { throw .EISDIR }
        if flags.isWrite {
            if config.readOnly { throw .EROFS }
            try await stage(n, truncate: flags.truncate)
        } else {
            // Close-to-open: a file opened after its TTL sees the current generation.
            try await refreshed(n)
            // Known to be gone (a stat saw 404, or unlinked) and not being written here.
            if locked({ n.removed && n.staged == nil }) { throw .ENOENT }
        }
        return locked {
            let info = n.info
            if flags.isWrite { n.staged?.openHandles += 1 }
            let h = Handle(ino: ino, writable: flags.isWrite, generation: info?.generation ?? 0,
                           size: info?.size ?? 0, path: n.path, window: config.readAheadInitial)
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            if !flags.isWrite, let s = n.staged { s.openHandles += 1 }
            return fh
        }
    }

    public func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        guard let h = locked({ handles[fh] }), let n = locked({ nodes[ino] }) else { throw .EBADF }
        if let s = locked({ n.staged }) {
            var buf = [UInt8](repeating: 0, count: size)
            let r = buf.withUnsafeMutableBytes { pread(s.fd, $0.baseAddress, size, off_t(offset)) }
            if r < 0 { throw Errno(Glibc.errno) }
            return Data(buf[0..<r])
        }
        let off = Int64(offset)
        if off >= h.size || size == 0 { return Data() }
        let end = min(h.size, off + Int64(size))
        do {
            return try await h.readLock.withLock { () async throws -> Data in
                if off >= h.bufferStart, end <= h.bufferStart + Int64(h.buffer.count) {
                    h.lastEnd = end
                    let lo = Int(off - h.bufferStart)
                    return h.buffer.subdata(in: lo..<(lo + Int(end - off)))
                }
                // Sequential reads double the window; a jump starts over.
                if off == h.lastEnd || (off >= h.bufferStart && off <= h.bufferStart + Int64(h.buffer.count)) {
                    h.window = min(h.window * 2, config.readAheadMax)
                } else {
                    h.window = config.readAheadInitial
                }
                let fetchEnd = min(h.size, max(end, off + Int64(h.window)))
                let data = try await store.read(h.path, generation: h.generation, range: off..<fetchEnd)
                h.buffer = data
                self.locked { h.readAheadBytes = data.count }
                h.bufferStart = off
                h.lastEnd = end
                let n = min(Int(end - off), data.count)
                return data.prefix(n)
            }
        } catch {
            throw fail(error, "read", h.path)
        }
    }

    // MARK: - writing

    /// Gives a file local content: empty (truncate, or new), else a copy of the generation read.
    private func stage(_ n: Node, truncate: Bool) async throws(Errno) {
        if let s = locked({ n.staged }) {
            if truncate {
                locked {
                    ftruncate(s.fd, 0)
                    s.size = 0
                    s.dirty = true
                }
            }
            return
        }
        try await refreshed(n, force: true)
        let (info, path) = locked { (n.info, n.path) }
        guard let info else { throw .ENOENT }
        let staged = try makeStaged(base: info.generation, metadata: info.writable, dirty: truncate && info.size > 0)
        if !truncate, info.size > 0 {
            var off: Int64 = 0
            let chunk = Int64(config.readAheadMax)
            while off < info.size {
                let data: Data
                do {
                    data = try await store.read(path, generation: info.generation, range: off..<min(info.size, off + chunk))
                } catch {
                    staged.close()
                    throw fail(error, "read", path)
                }
                if data.isEmpty { break }
                let w = data.withUnsafeBytes { pwrite(staged.fd, $0.baseAddress, data.count, off_t(off)) }
                if w != data.count { staged.close(); throw .EIO }
                off += Int64(data.count)
            }
            staged.size = off
        }
        let winner = locked { () -> StagedFile in
            if let s = n.staged { return s }
            n.staged = staged
            return staged
        }
        if winner !== staged { staged.close() }
    }

    private func makeStaged(base: Int64, metadata: WritableMetadata, dirty: Bool) throws(Errno) -> StagedFile {
        var template = Array((config.cacheDirectory + "/stage-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd < 0 {
            logger.error("cannot create a staging file in \(config.cacheDirectory): \(Errno(Glibc.errno))")
            throw .EIO
        }
        let path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return StagedFile(fd: fd, path: path, baseGeneration: base, dirty: dirty, size: 0, metadata: metadata)
    }

    public func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int {
        guard let h = locked({ handles[fh] }), h.writable, let s = locked({ nodes[ino]?.staged }) else { throw .EBADF }
        let w = data.withUnsafeBytes { pwrite(s.fd, $0.baseAddress, data.count, off_t(offset)) }
        if w < 0 { throw Errno(Glibc.errno) }
        locked {
            s.dirty = true
            s.size = max(s.size, Int64(offset) + Int64(w))
            touchMtimeLocked(s)
        }
        return w
    }

    /// New content means a new mtime: an mtime key carried over from the object read (gsutil's
    /// convention, or an earlier utimens) would otherwise pin the old time. Caller holds `lock`.
    private func touchMtimeLocked(_ s: StagedFile) {
        if s.metadata.customMetadata[XattrName.mtimeKey] != nil {
            s.metadata.customMetadata[XattrName.mtimeKey] = String(Int64(now.rounded(.down)))
        }
    }

    public func flush(ino: UInt64, fh: UInt64) async throws(Errno) {
        try await upload(ino: ino)
    }

    public func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno) {
        try await upload(ino: ino)
    }

    public func release(ino: UInt64, fh: UInt64) async throws(Errno) {
        guard let h = locked({ handles.removeValue(forKey: fh) }) else { return }
        guard let n = locked({ nodes[ino] }) else { return }
        var uploadError: Errno? = nil
        if h.writable {
            do { try await upload(ino: ino) } catch { uploadError = error }
        }
        locked {
            guard let s = n.staged else { return }
            s.openHandles -= 1
            if s.openHandles <= 0, !s.dirty {
                s.close()
                n.staged = nil
            }
        }
        if let uploadError { throw uploadError }
    }

    /// Uploads a dirty staged file as one object: `ifGenerationMatch` of the generation read
    /// (0 for a new file). A lost race keeps the data in lost+found and fails the writer.
    func upload(ino: UInt64) async throws(Errno) {
        guard let n = locked({ nodes[ino] }), let s = locked({ n.staged }) else { return }
        do {
            try await s.uploadLock.withLock { () async throws -> Void in
                let (dirty, base, path, removed, lost) = self.locked { (s.dirty, s.baseGeneration, n.path, n.removed, s.lostRace) }
                guard dirty, !removed else {
                    if let lost, !removed { throw lost }
                    return
                }
                var meta = self.locked { s.metadata }
                if meta.contentType == nil { meta.contentType = ContentTypes.guess(path) }
                self.locked { s.dirty = false }
                Glibc.fsync(s.fd)
                do {
                    let info = try await self.store.write(path, from: .file(path: s.path), metadata: meta,
                                                          preconditions: Preconditions(ifGenerationMatch: base))
                    self.locked {
                        s.baseGeneration = info.generation
                        s.metadata = info.writable
                        n.info = info
                        n.infoExpiry = self.now + self.config.metadataTTL
                    }
                } catch {
                    self.locked { s.dirty = true }
                    if case StorageError.preconditionFailed = error {
                        let kept = self.keepLost(s, path)
                        self.locked { s.lostRace = errno(for: error) }
                        self.logger.error("upload of '\(path)' lost a race: the object changed since it was opened (generation \(base)); your data is kept in \(kept)")
                    }
                    throw error
                }
            }
        } catch let e as Errno {
            throw e
        } catch {
            throw fail(error, "upload", locked { n.path })
        }
    }

    /// Copies a staged file into lost+found and marks it clean, so nothing is lost silently.
    private func keepLost(_ s: StagedFile, _ path: String) -> String {
        let dir = config.lostAndFound
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let safe = path.replacingOccurrences(of: "/", with: "%2F")
        let dest = "\(dir)/\(safe).\(Int(now * 1000))"
        try? FileManager.default.copyItem(atPath: s.path, toPath: dest)
        locked { s.dirty = false }
        return dest
    }

    public func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let path = try childPath(p, name)
        var existing: Node? = nil
        do { existing = try await resolve(p, name) } catch where error == .ENOENT {}
        if let e = existing {
            if e.type == .directory { throw .EISDIR }
            let fh = try await open(ino: e.ino, flags: OpenFlags(flags.rawValue | O_TRUNC))
            return locked { e.lookups += 1; return (entryLocked(e), fh) }
        }
        let staged = try makeStaged(base: 0, metadata: WritableMetadata(), dirty: true)
        return locked {
            let n = nodeLocked(path: path, type: .regular)
            n.removed = false
            n.info = nil
            n.staged?.close()
            n.staged = staged
            staged.openHandles = 1
            n.lookups += 1
            p.listing?.children[name] = n.ino
            let h = Handle(ino: n.ino, writable: true, generation: 0, size: 0, path: path, window: config.readAheadInitial)
            let fh = nextFh
            nextFh += 1
            handles[fh] = h
            return (entryLocked(n), fh)
        }
    }

    public func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) {
        let n = try node(ino)
        let changesSomething = changes.size != nil || changes.mtime != nil
        if config.readOnly, changesSomething { throw .EROFS }
        if let size = changes.size {
            guard n.type == .regular else { throw .EISDIR }
            let hadStage = locked { n.staged != nil }
            try await stage(n, truncate: size == 0)
            locked {
                if let s = n.staged {
                    ftruncate(s.fd, off_t(size))
                    s.size = Int64(size)
                    s.dirty = true
                    touchMtimeLocked(s)
                }
            }
            if !hadStage {
                // truncate(2) on a path: no close follows, so upload now.
                defer { locked { if let s = n.staged, s.openHandles == 0, !s.dirty { s.close(); n.staged = nil } } }
                try await upload(ino: ino)
            }
        }
        if let mtime = changes.mtime {
            let v = String(Int64(mtime.rounded(.down)))
            try await changeMetadata(ino: ino, op: "utimens") { (m: inout WritableMetadata) throws(Errno) in
                m.customMetadata[XattrName.mtimeKey] = v
            }
        }
        // chmod and chown are accepted and change nothing: modes come from mount options.
        return locked { (attributesLocked(n), config.metadataTTL) }
    }

    // MARK: - namespace changes

    public func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let path = try childPath(p, name)
        // Only "not found" means we may create it; any other failure (EIO, EACCES) is reported.
        var exists = false
        do throws(Errno) {
            _ = try await resolve(p, name)
            exists = true
        } catch {
            if error != .ENOENT { throw error }
        }
        if exists { throw .EEXIST }
        do {
            let info = try await store.write(path + "/", from: .data(Data()), metadata: WritableMetadata(),
                                             preconditions: .doesNotExist)
            return locked {
                let n = nodeLocked(path: path, type: .directory)
                n.removed = false
                n.info = info
                n.infoExpiry = now + config.metadataTTL
                n.listing = Listing(children: [:], expiry: now + config.metadataTTL)
                n.lookups += 1
                p.listing?.children[name] = n.ino
                return entryLocked(n)
            }
        } catch StorageError.preconditionFailed {
            throw .EEXIST
        } catch {
            throw fail(error, "mkdir", path)
        }
    }

    public func unlink(parent: UInt64, name: String) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let n = try await resolve(p, name)
        guard n.type == .regular else { throw .EISDIR }
        let (info, path) = locked { (n.info, n.path) }
        if let info {
            do {
                try await store.delete(path, preconditions: Preconditions(ifGenerationMatch: info.generation))
            } catch StorageError.objectNotFound {
            } catch {
                throw fail(error, "unlink", path)
            }
        }
        locked {
            n.removed = true
            n.info = nil
            if let s = n.staged { s.dirty = false; s.baseGeneration = 0 }
            p.listing?.children.removeValue(forKey: name)
            byPath.removeValue(forKey: key(n))
        }
    }

    public func rmdir(parent: UInt64, name: String) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        let p = try node(parent)
        let n: Node
        do {
            n = try await resolve(p, name)
        } catch where error == .ENOENT {
            // A prefix-only directory stops existing in the bucket once its last object is
            // deleted (as `rm -r` does just before this rmdir): a directory this mount has
            // shown is still removable, and its removal is then only local.
            let path = try childPath(p, name)
            guard let known = locked({ byPath["d:" + path].flatMap { nodes[$0] } }), !known.removed else { throw error }
            n = known
        }
        guard n.type == .directory else { throw .ENOTDIR }
        let prefix = locked { n.childPrefix }
        do {
            let page = try await store.list(ListRequest(prefix: prefix, delimiter: "/", maxResults: 2))
            if !page.prefixes.isEmpty || page.items.contains(where: { $0.name != prefix }) { throw Errno.ENOTEMPTY }
            let localChildren = locked { n.listing?.children.values.contains { nodes[$0]?.staged?.baseGeneration == 0 } ?? false }
            if localChildren { throw Errno.ENOTEMPTY }
            do { try await store.delete(prefix, preconditions: .none) } catch StorageError.objectNotFound {}
        } catch let e as Errno {
            throw e
        } catch {
            throw fail(error, "rmdir", prefix)
        }
        locked {
            n.removed = true
            n.info = nil
            n.listing = nil
            p.listing?.children.removeValue(forKey: name)
            byPath.removeValue(forKey: key(n))
        }
    }

    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) {
        if config.readOnly { throw .EROFS }
        if flags & 2 != 0 { throw .EINVAL }  // RENAME_EXCHANGE
        let p = try node(parent)
        let np = try node(newParent)
        let src = try await resolve(p, name)
        let dstPath = try childPath(np, newName)
        var dst: Node? = nil
        do { dst = try await resolve(np, newName) } catch where error == .ENOENT {}
        if let dst, flags & 1 != 0 { _ = dst; throw .EEXIST }  // RENAME_NOREPLACE
        if src.type == .regular {
            if dst?.type == .directory { throw .EISDIR }
            do {
                try await renameFile(src, to: dstPath, replacing: dst, noReplace: flags & 1 != 0)
            } catch where error == .EEXIST {
                // The destination appeared behind our back: forget the listing that hid it, so
                // the caller's next lookup (mv retries with a plain rename) sees it.
                locked { np.listing = nil }
                throw error
            }
        } else {
            if let dst {
                guard dst.type == .directory else { throw .ENOTDIR }
                try await rmdir(parent: newParent, name: newName)
            }
            try await renameDirectory(src, to: dstPath)
        }
        locked {
            p.listing?.children.removeValue(forKey: name)
            if let ino = byPath[(src.type == .directory ? "d:" : "f:") + dstPath] {
                np.listing?.children[newName] = ino
            }
        }
    }

    private func renameFile(_ src: Node, to dstPath: String, replacing dst: Node?, noReplace: Bool = false) async throws(Errno) {
        try await upload(ino: src.ino)
        let (info, srcPath, staged) = locked { (src.info, src.path, src.staged) }
        let dstGen = locked { dst?.info?.generation }
        if let info {
            do {
                do {
                    _ = try await store.copy(from: srcPath, sourceGeneration: info.generation, to: dstPath, metadata: nil,
                                             preconditions: Preconditions(ifGenerationMatch: dstGen ?? 0))
                } catch StorageError.preconditionFailed where dstGen == nil {
                    if noReplace { throw Errno.EEXIST }
                    // The destination appeared behind this mount's back (within the TTL, so
                    // unseen): rename(2) replaces it, so replace the generation there now, once.
                    let there = try await store.getMetadata(dstPath)
                    _ = try await store.copy(from: srcPath, sourceGeneration: info.generation, to: dstPath, metadata: nil,
                                             preconditions: Preconditions(ifGenerationMatch: there.generation))
                }
                try await store.delete(srcPath, preconditions: Preconditions(ifGenerationMatch: info.generation))
            } catch {
                throw fail(error, "rename", srcPath + " → " + dstPath)
            }
        } else if staged == nil {
            throw .ENOENT
        }
        locked {
            if let dst, dst !== src {
                dst.removed = true
                byPath.removeValue(forKey: key(dst))
            }
            byPath.removeValue(forKey: key(src))
            src.path = dstPath
            byPath[key(src)] = src.ino
            src.infoExpiry = 0
            if let s = src.staged, s.baseGeneration == 0 { src.info = nil }
        }
        if info != nil {
            // The copy has a new generation: read it before the next write or stat.
            try? await refreshed(src, force: true)
            locked { if let s = src.staged, let i = src.info { s.baseGeneration = i.generation } }
        }
    }

    /// Renames every object under a prefix (copy with `ifGenerationMatch=0`, then delete with the
    /// source generation). On a failure part way, what was copied stays in both places and the
    /// error says so; nothing is deleted before its copy exists.
    private func renameDirectory(_ src: Node, to dstPath: String) async throws(Errno) {
        let srcPrefix = locked { src.path + "/" }
        let dstPrefix = dstPath + "/"
        var objects: [ObjectInfo] = []
        var token: String? = nil
        do {
            repeat {
                let page = try await store.list(ListRequest(prefix: srcPrefix, delimiter: nil, maxResults: 1000, pageToken: token))
                objects += page.items
                token = page.nextPageToken
            } while token != nil
        } catch {
            throw fail(error, "rename", srcPrefix)
        }
        var done = 0
        for o in objects {
            let target = dstPrefix + o.name.dropFirst(srcPrefix.count)
            do {
                _ = try await store.copy(from: o.name, sourceGeneration: o.generation, to: target, metadata: nil,
                                         preconditions: .doesNotExist)
                try await store.delete(o.name, preconditions: Preconditions(ifGenerationMatch: o.generation))
                done += 1
            } catch {
                logger.error("rename of directory '\(srcPrefix)' to '\(dstPrefix)' stopped after \(done) of \(objects.count) objects at '\(o.name)': \(error); objects before it are moved, the rest are where they were")
                locked { invalidateLocked(prefix: srcPrefix); invalidateLocked(prefix: dstPrefix) }
                throw errno(for: error)
            }
        }
        if objects.isEmpty {
            // A directory known only here (no objects): give the new name a placeholder.
            _ = try? await store.write(dstPrefix, from: .data(Data()), metadata: WritableMetadata(), preconditions: .doesNotExist)
        }
        locked {
            // Move every known node under the old prefix to the new one.
            let moved = nodes.values.filter { $0.path == src.path || $0.path.hasPrefix(srcPrefix) }
            for n in moved { byPath.removeValue(forKey: key(n)) }
            for n in moved {
                n.path = dstPath + n.path.dropFirst(src.path.count)
                n.infoExpiry = 0
                n.listing = nil
                byPath[key(n)] = n.ino
            }
        }
    }

    /// What the core holds now, for the metrics endpoint. O(inodes).
    public func statistics() -> CoreStatistics {
        var s = locked { () -> CoreStatistics in
            var s = CoreStatistics()
            let t = now
            s.inodes = nodes.count
            for n in nodes.values {
                if n.info != nil, n.infoExpiry > t { s.cachedAttributes += 1 }
                if let l = n.listing, l.expiry > t { s.cachedListings += 1; s.cachedListingEntries += l.children.count }
                if let st = n.staged { s.stagedFiles += 1; if st.dirty { s.dirtyFiles += 1 } }
            }
            s.openFiles = handles.count
            s.readAheadBytes = handles.values.reduce(0) { $0 + $1.readAheadBytes }
            return s
        }
        s.lostAndFoundEntries = (try? FileManager.default.contentsOfDirectory(atPath: config.lostAndFound).count) ?? 0
        (s.hits, s.misses) = cacheCounters.snapshot()
        return s
    }

    /// Drops cached listings under a prefix. Caller holds `lock`.
    private func invalidateLocked(prefix: String) {
        for n in nodes.values where n.path.hasPrefix(prefix) || prefix.hasPrefix(n.childPrefix) {
            n.listing = nil
            n.infoExpiry = 0
        }
    }
}
