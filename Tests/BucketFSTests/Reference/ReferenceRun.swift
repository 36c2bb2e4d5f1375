@testable import BucketFS
import Foundation
import FuseKit
import Logging
@testable import ObjectStores
import StorageModel
import TestSupport

/// Which store a reference run mounts.
enum RefStoreKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case memory, embedded
    var description: String { rawValue }
}

/// What went wrong at one step of a run.
struct RefFailure: Error, CustomStringConvertible {
    var step: Int
    var op: RefOp?
    var message: String
    var description: String { "step \(step) \(op?.swift ?? "(before the first step)"): \(message)" }
}

/// One run of a sequence against the core (`BucketFileSystem` through its `FuseFileSystem`
/// methods, called as the kernel would) and the plain `ReferenceModel`, compared after every step:
/// the tree (readdir + lookup + getattr sizes), contents (open/read), xattrs (listxattr/getxattr),
/// and the bucket's objects against the model's.
///
/// Changes behind the mount's back become visible after the TTL: until the next `.advanceClock`
/// the paths they touched (and their ancestors) are "unsettled": left out of the comparison, and
/// mount operations on them, inside them or above them are skipped (their outcome depends on what
/// the cache still holds, which the model does not describe). A prefix-only directory that loses
/// its last object through the mount may still show (empty) until the TTL; it is unsettled too.
final class ReferenceRun {
    static let ttl: Double = 5

    /// Core bugs the random runs step around (each has a `regression_*` test that runs strictly
    /// and is marked as a known issue), so that a soak goes on finding new ones.
    enum KnownBug: CaseIterable, Sendable {
        /// A file hidden by a same-named directory stays hidden after this mount renames or
        /// removes that directory, until the parent's listing expires (own changes should show at once).
        case uncoveredFileHiddenUntilTTL
        /// A directory this mount removed (rmdir, or replaced by a rename) keeps its inode, marked
        /// removed; renaming a directory above that path moves the dead inode along with the live
        /// one, and whichever the dictionary yields last takes the new path: then the renamed
        /// directory (or one below it) answers ENOENT. Depends on hash order, so intermittent.
        case renameMovesRemovedDirectory
    }
    /// Directories this mount removed (rmdir, or replaced by a directory rename).
    var removedDirectories: Set<String> = []
    /// The known bugs this run tolerates.
    let tolerated: Set<KnownBug>

    let kind: RefStoreKind
    let store: any ObjectStore
    let clock: TestClock
    let fs: BucketFileSystem
    private let cleanupPaths: [String]
    var model = ReferenceModel()
    /// Paths whose state the mount may legitimately not show yet (see the type's comment).
    var unsettled: Set<String> = []
    /// What each step did, for the failure report.
    var trace: [String] = []

    init(_ kind: RefStoreKind, tolerating tolerated: Set<KnownBug>) throws {
        self.kind = kind
        self.tolerated = tolerated
        let base = NSTemporaryDirectory() + "bucketfs-reftest-" + UUID().uuidString
        switch kind {
        case .memory: store = MemoryStore()
        case .embedded: store = try EmbeddedStore(directory: base + "/bucket", bucket: "reftest", pageSizeLimit: 1000, durable: false)
        }
        let clock = TestClock()
        self.clock = clock
        var c = MountConfig()
        c.cacheDirectory = base + "/cache"
        c.metadataTTL = Self.ttl
        c.now = { clock.now }
        c.uploadRetries = 0
        var logger = Logger(label: "reftest")
        logger.logLevel = .critical
        fs = try BucketFileSystem(store: store, config: c, logger: logger)
        cleanupPaths = [base]
    }

    deinit { for p in cleanupPaths { try? FileManager.default.removeItem(atPath: p) } }

    /// Runs `ops` on a fresh mount over a fresh store; nil when every step matched the model.
    static func failure(of ops: [RefOp], on kind: RefStoreKind,
                        tolerating tolerated: Set<KnownBug> = Set(KnownBug.allCases)) async -> RefFailure? {
        let run: ReferenceRun
        do { run = try ReferenceRun(kind, tolerating: tolerated) } catch { return RefFailure(step: 0, op: nil, message: "setup: \(error)") }
        for (i, op) in ops.enumerated() {
            do {
                try await run.perform(op)
                try run.checkInvariants("after the step")
                try await run.compare()
                try run.checkInvariants("after the comparison")
            } catch let f as RefFailure {
                return RefFailure(step: i, op: op, message: f.message + "\n  trace:\n    " + run.trace.joined(separator: "\n    "))
            } catch {
                return RefFailure(step: i, op: op, message: "\(error)")
            }
        }
        return nil
    }

    // MARK: - helpers

    func fail(_ message: String) -> RefFailure { RefFailure(step: 0, op: nil, message: message) }

    /// A mount call's result as a value.
    func attempt<T>(_ body: () async throws(Errno) -> T) async -> Result<T, Errno> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    /// Walks `path` from the root with lookups, as the kernel resolves a path.
    func ino(_ path: String) async throws -> UInt64 {
        var ino = BucketFileSystem.rootIno
        if path.isEmpty { return ino }
        for seg in path.split(separator: "/") {
            switch await attempt({ () async throws(Errno) in try await fs.lookup(parent: ino, name: String(seg)) }) {
            case .success(let e): ino = e.attributes.ino
            case .failure(let e): throw fail("lookup of '\(path)' failed at '\(seg)': \(e)")
            }
        }
        return ino
    }

    /// The core's invariants (Sources/BucketFS/Invariants.swift) hold.
    func checkInvariants(_ when: String) throws {
        let bad = fs.invariantViolations()
        if !bad.isEmpty { throw fail("\(when): the core's invariants do not hold:\n  " + bad.joined(separator: "\n  ")) }
    }

    func pick<T>(_ list: [T], _ index: Int) -> T? { list.isEmpty ? nil : list[index % list.count] }

    /// Whether a mount operation on `path` could meet state the mount does not show yet.
    func isUnsettled(_ path: String) -> Bool {
        unsettled.contains { ReferenceModel.isWithin($0, path) || ReferenceModel.isWithin(path, $0) }
    }

    /// A path changed behind the mount's back: it and its ancestors are unsettled until the TTL.
    func unsettle(_ path: String) {
        unsettled.insert(path)
        unsettled.formUnion(ReferenceModel.ancestors(path))
    }

    /// Expects `result` to match the model's expected errno (nil: success).
    func check<T>(_ what: String, _ result: Result<T, Errno>, expected: Errno?) throws -> T? {
        switch (result, expected) {
        case (.success(let v), nil): return v
        case (.failure(let e), let x?) where e == x: return nil
        case (.success, let x?): throw fail("\(what): expected \(x), but it succeeded")
        case (.failure(let e), let x): throw fail("\(what): expected \(x.map { "\($0)" } ?? "success"), got \(e)")
        }
    }

    // MARK: - steps

    func perform(_ op: RefOp) async throws {
        let before = model.directories
        var removedOnPurpose: [String] = []
        let note: String
        switch op {
        case let .writeFile(dirIndex, nameIndex, bytes):
            let dir = pick(model.sortedDirectories, dirIndex)!
            let path = ReferenceModel.join(dir, RefOp.names[nameIndex % RefOp.names.count])
            // The kernel answers EISDIR for a directory itself.
            if isUnsettled(path) || model.kind(path) == .directory { trace.append("skip \(op.swift)"); return }
            note = "write '\(path)' (\(bytes.size) bytes)"
            try await writeWholeFile(path, bytes.data)
            let custom = model.files[path]?.custom ?? [:]
            model.files[path] = RefObject(data: bytes.data, custom: custom)

        case let .writeAt(fileIndex, percent, bytes):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            let old = model.files[path]!.data
            let offset = old.count * percent / 100
            note = "write \(bytes.size) bytes at \(offset) of '\(path)'"
            try await writeInPlace(path, bytes.data, append: false, offset: offset)
            model.files[path]!.data = old.writing(bytes.data, at: offset)

        case let .append(fileIndex, bytes):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            note = "append \(bytes.size) bytes to '\(path)'"
            try await writeInPlace(path, bytes.data, append: true, offset: 0)
            model.files[path]!.data.append(bytes.data)

        case let .truncate(fileIndex, percent):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            let size = model.files[path]!.data.count * percent / 100
            note = "truncate '\(path)' to \(size)"
            let ino = try await ino(path)
            _ = try check("truncate '\(path)'", await attempt { () async throws(Errno) in
                try await fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: UInt64(size)))
            }, expected: nil)
            model.files[path]!.data = model.files[path]!.data.truncated(to: size)

        case let .rename(nodeIndex, toDirIndex, nameIndex):
            guard let src = pick(model.sortedNodes, nodeIndex) else { trace.append("skip \(op.swift)"); return }
            let toDir = pick(model.sortedDirectories, toDirIndex)!
            let dst = ReferenceModel.join(toDir, RefOp.names[nameIndex % RefOp.names.count])
            let srcKind = model.kind(src)!
            // The kernel itself answers a rename onto itself (nothing), into its own subtree
            // (EINVAL) and onto an ancestor (ENOTEMPTY).
            if dst == src || ReferenceModel.isWithin(dst, src) || ReferenceModel.isWithin(src, dst)
                || isUnsettled(src) || isUnsettled(dst) {
                trace.append("skip \(op.swift)")
                return
            }
            if srcKind == .directory, tolerated.contains(.renameMovesRemovedDirectory),
               removedDirectories.contains(where: { ReferenceModel.isWithin($0, src) }) {
                trace.append("skip (known bug) \(op.swift)")
                return
            }
            note = "rename '\(src)' → '\(dst)'"
            let dstKind = model.kind(dst)
            var expected: Errno? = nil
            if srcKind == .file, dstKind == .directory { expected = .EISDIR }
            if srcKind == .directory, dstKind == .file { expected = .ENOTDIR }
            if srcKind == .directory, dstKind == .directory, !model.children(of: dst).isEmpty { expected = .ENOTEMPTY }
            let p = try await ino(ReferenceModel.parent(src))
            let np = try await ino(toDir)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.rename(parent: p, name: ReferenceModel.name(src), newParent: np,
                                    newName: ReferenceModel.name(dst), flags: 0)
            }, expected: expected)
            if expected == nil {
                if srcKind == .file {
                    model.files[dst] = model.files.removeValue(forKey: src)
                    removedOnPurpose = [src]
                } else {
                    if dstKind == .directory {
                        model.placeholders.removeValue(forKey: dst)
                        removedDirectories.insert(dst)
                    }
                    removedOnPurpose = model.directories.filter { ReferenceModel.isWithin($0, src) }
                    model.moveDirectory(src, to: dst)
                    if tolerated.contains(.uncoveredFileHiddenUntilTTL), model.files[src] != nil { unsettle(src) }
                }
            }

        case let .unlink(fileIndex):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            note = "unlink '\(path)'"
            let p = try await ino(ReferenceModel.parent(path))
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.unlink(parent: p, name: ReferenceModel.name(path))
            }, expected: nil)
            model.files.removeValue(forKey: path)

        case let .mkdir(dirIndex, nameIndex):
            let dir = pick(model.sortedDirectories, dirIndex)!
            let path = ReferenceModel.join(dir, RefOp.names[nameIndex % RefOp.names.count])
            if isUnsettled(path) { trace.append("skip \(op.swift)"); return }
            note = "mkdir '\(path)'"
            let expected: Errno? = model.kind(path) == nil ? nil : .EEXIST
            let p = try await ino(dir)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.mkdir(parent: p, name: ReferenceModel.name(path), mode: 0o755)
            }, expected: expected)
            if expected == nil { model.placeholders[path] = [:] }

        case let .rmdir(dirIndex):
            let dirs = model.sortedDirectories.filter { !$0.isEmpty }
            guard let path = pick(dirs, dirIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            note = "rmdir '\(path)'"
            let expected: Errno? = model.children(of: path).isEmpty ? nil : .ENOTEMPTY
            let p = try await ino(ReferenceModel.parent(path))
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.rmdir(parent: p, name: ReferenceModel.name(path))
            }, expected: expected)
            if expected == nil {
                model.placeholders.removeValue(forKey: path)
                removedOnPurpose = [path]
                removedDirectories.insert(path)
                if tolerated.contains(.uncoveredFileHiddenUntilTTL), model.files[path] != nil { unsettle(path) }
            }

        case let .setxattr(nodeIndex, keyIndex, valueIndex):
            guard let path = pick(model.sortedNodes, nodeIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            let key = RefOp.keys[keyIndex % RefOp.keys.count], value = RefOp.values[valueIndex % RefOp.values.count]
            note = "setxattr '\(path)' user.\(key)=\(value)"
            let ino = try await ino(path)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.setxattr(ino: ino, name: "user." + key, value: Array(value.utf8), flags: 0)
            }, expected: nil)
            model.setCustom(path, key, value)

        case let .removexattr(nodeIndex, keyIndex):
            guard let path = pick(model.sortedNodes, nodeIndex), !isUnsettled(path) else { trace.append("skip \(op.swift)"); return }
            let key = RefOp.keys[keyIndex % RefOp.keys.count]
            note = "removexattr '\(path)' user.\(key)"
            let expected: Errno? = model.custom(of: path)[key] == nil ? .ENODATA : nil
            let ino = try await ino(path)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.removexattr(ino: ino, name: "user." + key)
            }, expected: expected)
            if expected == nil { model.setCustom(path, key, nil) }

        case let .remotePut(dirIndex, nameIndex, child, bytes):
            let dir = pick(model.sortedDirectories, dirIndex)!
            var path = ReferenceModel.join(dir, RefOp.names[nameIndex % RefOp.names.count])
            if let child { path += "/" + RefOp.names[child % RefOp.names.count] }
            note = "remote put '\(path)' (\(bytes.size) bytes)"
            _ = try await store.write(path, from: .data(bytes.data), metadata: WritableMetadata(), preconditions: .none)
            model.files[path] = RefObject(data: bytes.data)
            unsettle(path)

        case let .remoteDelete(objectIndex):
            guard let name = pick(model.sortedObjectNames, objectIndex) else { trace.append("skip \(op.swift)"); return }
            note = "remote delete '\(name)'"
            try await store.delete(name, preconditions: .none)
            model.removeObject(name)
            unsettle(name.hasSuffix("/") ? String(name.dropLast()) : name)

        case let .remotePatch(objectIndex, keyIndex, valueIndex):
            guard let name = pick(model.sortedObjectNames, objectIndex) else { trace.append("skip \(op.swift)"); return }
            let key = RefOp.keys[keyIndex % RefOp.keys.count]
            let value = valueIndex.map { RefOp.values[$0 % RefOp.values.count] }
            note = "remote patch '\(name)' \(key)=\(value ?? "null")"
            var patch = MetadataPatch()
            patch.customMetadata = [key: value]
            _ = try await store.patchMetadata(name, patch, preconditions: .none)
            if name.hasSuffix("/") {
                model.placeholders[String(name.dropLast())]?[key] = value
            } else {
                model.files[name]?.custom[key] = value
            }
            unsettle(name.hasSuffix("/") ? String(name.dropLast()) : name)

        case .advanceClock:
            note = "clock +\(Self.ttl + 1) s"
            clock.advance(Self.ttl + 1)
            unsettled = []
        }
        // Prefix-only directories that lost their last object through the mount may show until the TTL.
        if !op.isRemote {
            for gone in before.subtracting(model.directories) where !removedOnPurpose.contains(gone) { unsettle(gone) }
        }
        trace.append(note)
    }

    /// create (or open O_TRUNC an existing file) + write + flush + release.
    func writeWholeFile(_ path: String, _ data: Data) async throws {
        let p = try await ino(ReferenceModel.parent(path))
        let name = ReferenceModel.name(path)
        let ino: UInt64, fh: UInt64
        switch await attempt({ () async throws(Errno) in try await fs.lookup(parent: p, name: name) }) {
        case .success(let e):
            guard e.attributes.type == .regular else { throw fail("write '\(path)': lookup says directory, the model a file") }
            ino = e.attributes.ino
            fh = try check("open O_TRUNC '\(path)'", await attempt { () async throws(Errno) in
                try await fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
            }, expected: nil)!
        case .failure(.ENOENT):
            let (e, h) = try check("create '\(path)'", await attempt { () async throws(Errno) in
                try await fs.create(parent: p, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
            }, expected: nil)!
            ino = e.attributes.ino
            fh = h
        case .failure(let e):
            throw fail("lookup '\(path)' before writing: \(e)")
        }
        try await finishWrite(path, ino, fh, data, offset: 0)
    }

    func writeInPlace(_ path: String, _ data: Data, append: Bool, offset: Int) async throws {
        let ino = try await ino(path)
        var off = UInt64(offset)
        if append {
            // The kernel writes O_APPEND data at the size it knows.
            let size = try check("getattr '\(path)'", await attempt { () async throws(Errno) in try await fs.getattr(ino: ino) }, expected: nil)!.0.size
            off = size
        }
        let fh = try check("open '\(path)'", await attempt { () async throws(Errno) in
            try await fs.open(ino: ino, flags: OpenFlags(O_WRONLY | (append ? O_APPEND : 0)))
        }, expected: nil)!
        try await finishWrite(path, ino, fh, data, offset: off)
    }

    func finishWrite(_ path: String, _ ino: UInt64, _ fh: UInt64, _ data: Data, offset: UInt64) async throws {
        if !data.isEmpty {
            let n = try check("write '\(path)'", await attempt { () async throws(Errno) in
                try await fs.write(ino: ino, fh: fh, offset: offset, data: data)
            }, expected: nil)!
            if n != data.count { throw fail("write '\(path)': wrote \(n) of \(data.count) bytes") }
        }
        let flushed = await attempt { () async throws(Errno) in try await fs.flush(ino: ino, fh: fh) }
        let released = await attempt { () async throws(Errno) in try await fs.release(ino: ino, fh: fh) }
        _ = try check("flush '\(path)'", flushed, expected: nil)
        _ = try check("release '\(path)'", released, expected: nil)
    }

    // MARK: - comparison

    /// What a user sees, and what the bucket holds, against the model.
    func compare() async throws {
        try await compareDirectory("", ino: BucketFileSystem.rootIno)
        try await compareStore()
    }

    func compareDirectory(_ dir: String, ino: UInt64) async throws {
        let fh = try check("opendir '\(dir)'", await attempt { () async throws(Errno) in try await fs.opendir(ino: ino) }, expected: nil)!
        var entries: [DirectoryEntry] = []
        var offset: UInt64 = 0
        while true {
            let part = try check("readdir '\(dir)'", await attempt { () async throws(Errno) in
                try await fs.readdir(ino: ino, fh: fh, offset: offset)
            }, expected: nil)!
            if part.isEmpty { break }
            entries += part
            offset = part.last!.offset
        }
        fs.releasedir(ino: ino, fh: fh)
        let settled = { (name: String) in !self.unsettled.contains(ReferenceModel.join(dir, name)) }
        var seen: [String: ReferenceModel.Kind] = [:]
        for e in entries where settled(e.name) {
            if seen[e.name] != nil { throw fail("readdir '\(dir)' lists '\(e.name)' twice") }
            seen[e.name] = e.entry.attributes.type == .directory ? .directory : .file
        }
        let expected = model.children(of: dir).filter { settled($0.key) }
        if seen != expected {
            throw fail("readdir '\(dir)': got \(seen.sorted { $0.key < $1.key }), model \(expected.sorted { $0.key < $1.key })")
        }
        for (name, kind) in expected.sorted(by: { $0.key < $1.key }) {
            let path = ReferenceModel.join(dir, name)
            let e = try check("lookup '\(path)'", await attempt { () async throws(Errno) in
                try await fs.lookup(parent: ino, name: name)
            }, expected: nil)!
            let a = e.attributes
            if (a.type == .directory) != (kind == .directory) { throw fail("lookup '\(path)': type \(a.type), model \(kind)") }
            try await compareXattrs(path, ino: a.ino)
            if kind == .directory {
                try await compareDirectory(path, ino: a.ino)
                continue
            }
            let want = model.files[path]!.data
            if a.size != want.count { throw fail("lookup '\(path)': size \(a.size), model \(want.count)") }
            let (g, _) = try check("getattr '\(path)'", await attempt { () async throws(Errno) in try await fs.getattr(ino: a.ino) }, expected: nil)!
            if g.size != want.count { throw fail("getattr '\(path)': size \(g.size), model \(want.count)") }
            let got = try await readAll(path, a.ino)
            if got != want { throw fail("read '\(path)': \(got.count) bytes \(got.prefix(8).map { $0 }), model \(want.count) bytes \(want.prefix(8).map { $0 })") }
        }
    }

    func readAll(_ path: String, _ ino: UInt64) async throws -> Data {
        let fh = try check("open '\(path)'", await attempt { () async throws(Errno) in
            try await fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        }, expected: nil)!
        var out = Data()
        while true {
            let d = try check("read '\(path)' at \(out.count)", await attempt { () async throws(Errno) in
                try await fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: 4096)
            }, expected: nil)!
            if d.isEmpty { break }
            out += d
        }
        _ = try check("release '\(path)'", await attempt { () async throws(Errno) in try await fs.release(ino: ino, fh: fh) }, expected: nil)
        return out
    }

    func compareXattrs(_ path: String, ino: UInt64) async throws {
        let want = model.custom(of: path)
        let listed = try check("listxattr '\(path)'", await attempt { () async throws(Errno) in try await fs.listxattr(ino: ino) }, expected: nil)!
        let custom = listed.filter { $0.hasPrefix("user.") && !$0.hasPrefix("user.storage.") }.sorted()
        if custom != want.keys.map({ "user." + $0 }).sorted() {
            throw fail("listxattr '\(path)': \(custom), model \(want.keys.sorted())")
        }
        for (k, v) in want {
            let got = try check("getxattr '\(path)' user.\(k)", await attempt { () async throws(Errno) in
                try await fs.getxattr(ino: ino, name: "user." + k)
            }, expected: nil)!
            if got != Array(v.utf8) { throw fail("getxattr '\(path)' user.\(k): '\(String(decoding: got, as: UTF8.self))', model '\(v)'") }
        }
    }

    /// Every object of the bucket (bytes and custom metadata) against the model's.
    func compareStore() async throws {
        var got: [String: RefObject] = [:]
        var token: String? = nil
        repeat {
            let page = try await store.list(ListRequest(prefix: "", delimiter: nil, maxResults: 1000, pageToken: token))
            for item in page.items {
                got[item.name] = RefObject(data: try await store.read(item.name, generation: nil, range: nil), custom: item.customMetadata)
            }
            token = page.nextPageToken
        } while token != nil
        let want = model.objects
        if got != want {
            var diff: [String] = []
            for name in ReferenceModel.sorted(Set(got.keys).union(want.keys)) where got[name] != want[name] {
                func show(_ o: RefObject?) -> String { o.map { "\($0.data.count) bytes \($0.custom.sorted { $0.key < $1.key })" } ?? "absent" }
                diff.append("'\(name)': bucket \(show(got[name])), model \(show(want[name]))")
            }
            throw fail("bucket differs from the model: " + diff.joined(separator: "; "))
        }
    }
}
