@testable import BucketFS
import Foundation
import FuseKit
import Logging
@testable import ObjectStores
import GCSStore
import GCSTestServerKit
import StorageModel
import TestSupport

/// Which store a reference run mounts, and with which metadata TTL.
struct RefConfig: Sendable, CustomStringConvertible, CaseIterable {
    /// `memoryHNS`: the in-memory store as a bucket with a hierarchical namespace; `serverHNS`:
    /// the Cloud Storage store over HTTP to the project's test server in that flavour.
    enum Store: String, Sendable, CaseIterable { case memory, embedded, memoryHNS, serverHNS }
    var store: Store
    /// 0: every question goes to the store, so changes behind the mount's back show at once.
    var ttl: Double

    static let defaultTTL = MountConfig.defaults.metadataTTL
    static let allCases: [RefConfig] = [
        RefConfig(store: .memory, ttl: defaultTTL), RefConfig(store: .memory, ttl: 0),
        RefConfig(store: .embedded, ttl: defaultTTL), RefConfig(store: .embedded, ttl: 0),
        RefConfig(store: .memoryHNS, ttl: defaultTTL), RefConfig(store: .memoryHNS, ttl: 0),
        RefConfig(store: .serverHNS, ttl: defaultTTL), RefConfig(store: .serverHNS, ttl: 0),
    ]
    var hierarchical: Bool { store == .memoryHNS || store == .serverHNS }
    var description: String { "\(store) store, metadata TTL \(ttl == 0 ? "0" : "\(Int(ttl)) s")" }
}

/// What went wrong at one step of a run.
struct RefFailure: Error, CustomStringConvertible {
    var step: Int
    var op: RefOp?
    var message: String
    var description: String { op.map { "step \(step) \($0.swift): \(message)" } ?? message }
}

/// One run of a case against the core (`BucketFileSystem` through its `FuseFileSystem` methods,
/// called as the kernel would) and the plain `ReferenceModel`. Every step's own answers (errno,
/// bytes read, entries listed) are checked as it runs, the core's invariants after every step,
/// and everything the mount shows (readdir + lookup + getattr, contents, xattrs) and the bucket's
/// objects at each `.check` step and at the end.
///
/// With a TTL above 0, changes behind the mount's back become visible after the TTL: until the
/// next `.advanceClock` the paths they touched (and their ancestors) are "unsettled": left out of
/// the comparison, and mount operations on them, inside them or above them are skipped (their
/// outcome depends on what the cache still holds, which the model does not describe). A
/// prefix-only directory that loses its last object through the mount may still show (empty)
/// until the TTL; it is unsettled too. With a TTL of 0 nothing is unsettled: every change shows
/// at once.
///
/// Changes behind the mount's back skip paths with local content or open handles (a lost race
/// there is the upload tests' business), and reads through a handle whose generation was replaced
/// are skipped (what they return depends on the store keeping old generations).
final class ReferenceRun {
    let config: RefConfig
    let store: any ObjectStore
    let clock: TestClock
    let fs: BucketFileSystem
    private let cleanupPaths: [String]
    var model = ReferenceModel()
    /// The reply buffer (entries per readdir answer) of the comparisons.
    let buffer: Int
    /// Paths whose state the mount may legitimately not show yet (see the type's comment).
    var unsettled: Set<String> = []
    /// What each step did, for the failure report.
    var trace: [String] = []

    /// The folders of a hierarchical bucket, as the store holds them (for the comparison).
    let folderNames: @Sendable () -> [String]

    /// `server`: the store over HTTP and the server's folders, for `serverHNS`.
    init(_ config: RefConfig, buffer: Int = 4096,
         server: (store: any ObjectStore, folderNames: @Sendable () -> [String])? = nil) throws {
        self.config = config
        self.buffer = buffer
        let base = Self.scratch + "/bucketfs-reftest-" + UUID().uuidString
        var folders: @Sendable () -> [String] = { [] }
        switch config.store {
        case .memory: store = MemoryStore()
        case .memoryHNS:
            let m = MemoryStore(layout: .hierarchical)
            store = m
            folders = { m.folderNames }
        case .serverHNS:
            guard let server else { throw RefFailure(step: 0, op: nil, message: "serverHNS needs a server") }
            store = server.store
            folders = server.folderNames
        case .embedded: store = try EmbeddedStore(directory: base + "/bucket", bucket: "reftest", pageSizeLimit: 1000, durable: false)
        }
        folderNames = folders
        let clock = TestClock()
        self.clock = clock
        var c = MountConfig()
        c.cacheDirectory = base + "/cache"
        c.metadataTTL = config.ttl
        c.clock = clock.bucketClock
        c.uploadRetries = 0
        c.checksInvariantsAtUnlock = true
        c.brokenInvariant = Harness.recordBrokenInvariant
        var logger = Logger(label: "reftest")
        logger.logLevel = .critical
        fs = try BucketFileSystem(store: store, config: c, logger: logger)
        fs.names.hiddenLog.handler = { _ in }  // thousands of runs hide names: no one reads them here
        cleanupPaths = [base]
        model.hierarchical = config.hierarchical
    }

    deinit { for p in cleanupPaths { try? FileManager.default.removeItem(atPath: p) } }

    /// Where runs keep their cache directories and embedded buckets: memory (/dev/shm) when the
    /// machine has it, since thousands of runs each create, fsync and delete files there.
    static let scratch: String = {
        var st = stat()
        return lstat("/dev/shm", &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR && access("/dev/shm", W_OK) == 0
            ? "/dev/shm" : (NSTemporaryDirectory() as NSString).standardizingPath
    }()

    /// Runs a case on a fresh mount over a fresh store; nil when every step matched the model.
    static func failure(of c: RefCase, on config: RefConfig) async -> RefFailure? {
        guard config.store == .serverHNS else { return await failure(of: c, on: config, server: nil) }
        // A server of its own for the case, in its hierarchical flavour, and the store over HTTP.
        let server: GCSTestServer
        do { server = try await GCSTestServer.start(hierarchical: true) } catch {
            return RefFailure(step: 0, op: nil, message: "starting the test server: \(error)")
        }
        var logger = Logger(label: "reftest-gcs")
        logger.logLevel = .critical
        var tuning = GCSStore.Tuning()
        tuning.initialBackoff = .milliseconds(5)
        tuning.maxBackoff = .milliseconds(50)
        let store = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .anonymous, logger: logger,
                             requestTimeout: .seconds(10), deadline: .seconds(20), tuning: tuning, environment: [:])
        var failure: RefFailure?
        do {
            _ = try await store.learnLayout(timeout: .seconds(10))
            failure = await Self.failure(of: c, on: config, server: (store, { server.folderNames }))
        } catch {
            failure = RefFailure(step: 0, op: nil, message: "the bucket's layout: \(error)")
        }
        try? await store.shutdown()
        try? await server.stop()
        return failure
    }

    static func failure(of c: RefCase, on config: RefConfig,
                        server: (store: any ObjectStore, folderNames: @Sendable () -> [String])?) async -> RefFailure? {
        let run: ReferenceRun
        do { run = try ReferenceRun(config, buffer: c.buffer, server: server) } catch { return RefFailure(step: 0, op: nil, message: "setup: \(error)") }
        do {
            try await run.seed(c.tree)
        } catch {
            return RefFailure(step: 0, op: nil, message: "seeding the bucket: \(error)")
        }
        for (i, op) in c.ops.enumerated() {
            do {
                try await run.perform(op)
                try run.checkInvariants("after the step")
                if op == .check { try await run.compare() }
            } catch let f as RefFailure {
                return RefFailure(step: i, op: op, message: f.message + "\n  trace:\n    " + run.trace.joined(separator: "\n    "))
            } catch {
                return RefFailure(step: i, op: op, message: "\(error)")
            }
        }
        do {
            try await run.compare()
            try run.checkInvariants("after the last comparison")
        } catch let f as RefFailure {
            return RefFailure(step: c.ops.count, op: nil, message: "in the comparison after the last step: " + f.message + "\n  trace:\n    " + run.trace.joined(separator: "\n    "))
        } catch {
            return RefFailure(step: c.ops.count, op: nil, message: "in the comparison after the last step: \(error)")
        }
        return nil
    }

    /// Puts the starting tree into the bucket (names the store refuses are left out).
    func seed(_ tree: [RefSeed]) async throws {
        for s in tree {
            let name = s.name
            guard (try? StoragePath.validateObjectName(name)) != nil else { continue }
            if config.hierarchical, name.hasSuffix("/") {
                // No object is named like a folder there: the name is a folder (unless the server
                // refuses it as one: then it is left out, as a refused name is).
                if try await makeFolder(name) { model.put(name, RefObject(data: Data())) }
                continue
            }
            _ = try await store.write(name, from: .data(s.bytes.data), metadata: WritableMetadata(), preconditions: .none)
            model.put(name, RefObject(data: s.bytes.data))
        }
        if !tree.isEmpty { trace.append("bucket: " + model.sortedObjectNames.map { "'\($0.prefix(40))'" }.joined(separator: ", ")) }
    }

    // MARK: - helpers

    func fail(_ message: String) -> RefFailure { RefFailure(step: 0, op: nil, message: message) }

    /// The core's invariants (Sources/BucketFS/BucketFileSystem+Invariants.swift) hold.
    func checkInvariants(_ when: String) throws {
        let bad = fs.invariantViolations()
        if !bad.isEmpty { throw fail("\(when): the core's invariants do not hold:\n  " + bad.joined(separator: "\n  ")) }
    }

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

    func pick<T>(_ list: [T], _ index: Int) -> T? { list.isEmpty ? nil : list[index % list.count] }

    /// The open handle a step names: 0 is the most recently opened.
    func pickHandle(_ index: Int) -> Int? {
        model.handles.isEmpty ? nil : model.handles.count - 1 - index % model.handles.count
    }

    /// Whether a mount operation on `path` could meet state the mount does not show yet.
    func isUnsettled(_ path: String) -> Bool {
        unsettled.contains { ReferenceModel.isWithin($0, path) || ReferenceModel.isWithin(path, $0) }
    }

    /// A path changed behind the mount's back: it and its ancestors are unsettled until the TTL.
    func unsettle(_ path: String) {
        guard config.ttl > 0 else { return }
        unsettled.insert(path)
        unsettled.formUnion(ReferenceModel.ancestors(path))
    }

    /// Whether something local (an open handle, local content) lives at, in or above `path`:
    /// changes behind the mount's back leave those alone.
    func isLocal(_ path: String) -> Bool {
        model.fileAt.keys.contains { ReferenceModel.isWithin($0, path) || ReferenceModel.isWithin(path, $0) }
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

    func skip(_ op: RefOp) { trace.append("skip \(op.swift)") }

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
            if isUnsettled(path) || model.kind(path) == .directory { return skip(op) }
            note = "write '\(path)' (\(bytes.size) bytes)"
            try await create(path)
            let h = model.handles.count - 1
            try await write(h, bytes.data, at: 0)
            try await close(h)

        case let .create(dirIndex, nameIndex):
            let dir = pick(model.sortedDirectories, dirIndex)!
            let path = ReferenceModel.join(dir, RefOp.names[nameIndex % RefOp.names.count])
            if isUnsettled(path) || model.kind(path) == .directory { return skip(op) }
            note = "create '\(path)' (handle \(model.handles.count))"
            try await create(path)

        case let .open(fileIndex, mode):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { return skip(op) }
            note = "open '\(path)' \(mode) (handle \(model.handles.count))"
            try await open(path, mode)

        case let .write(handleIndex, percent, bytes):
            guard let h = pickHandle(handleIndex), model.handles[h].writable else { return skip(op) }
            guard let current = model.content(of: model.handles[h]) else { return skip(op) }
            let offset = model.handles[h].append ? current.count : current.count * percent / 100
            note = "write \(bytes.size) bytes at \(offset) through handle \(h)"
            try await write(h, bytes.data, at: offset)

        case let .read(handleIndex, percent, size):
            guard let h = pickHandle(handleIndex), model.handles[h].readable,
                  let want = model.content(of: model.handles[h]) else { return skip(op) }
            let offset = want.count * percent / 100
            note = "read \(size) bytes at \(offset) through handle \(h)"
            let handle = model.handles[h]
            let got = try check(note, await attempt { () async throws(Errno) in
                try await fs.read(ino: handle.ino, fh: handle.fh, offset: UInt64(offset), size: size)
            }, expected: nil)!
            let expected = offset >= want.count ? Data() : want.subdata(in: offset..<min(want.count, offset + size))
            if got != expected { throw fail("\(note): \(got.count) bytes \(got.prefix(8).map { $0 }), model \(expected.count) bytes \(expected.prefix(8).map { $0 })") }

        case let .fsync(handleIndex):
            guard let h = pickHandle(handleIndex) else { return skip(op) }
            let handle = model.handles[h]
            note = "fsync handle \(h)"
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.fsync(ino: handle.ino, fh: handle.fh, dataOnly: false)
            }, expected: nil)
            model.upload(handle.file)

        case let .close(handleIndex):
            guard let h = pickHandle(handleIndex) else { return skip(op) }
            note = "close handle \(h)"
            try await close(h)

        case let .truncate(fileIndex, percent):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { return skip(op) }
            let size = model.visibleFiles[path]!.data.count * percent / 100
            note = "truncate '\(path)' to \(size)"
            let ino = try await ino(path)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: UInt64(size)))
            }, expected: nil)
            let id = model.file(at: path)
            if model.files[id]!.stage != nil {
                // Local content: truncated there. Open for writing here, the change stays local
                // until the writer's close uploads it; kept by readers only, no close that
                // uploads follows, so the truncate uploads it now (docs/SEMANTICS.md §3.3).
                model.files[id]!.stage!.data = model.files[id]!.stage!.data.truncated(to: size)
                model.files[id]!.stage!.dirty = true
                if !model.handles.contains(where: { $0.file == id && $0.writable }) { model.upload(id) }
            } else {
                let o = model.objects[path]!
                model.put(path, RefObject(data: o.data.truncated(to: size), custom: o.custom))
                model.dropIfUnused(id)
            }

        case let .rename(nodeIndex, toDirIndex, nameIndex):
            guard let src = pick(model.sortedNodes, nodeIndex) else { return skip(op) }
            let toDir = pick(model.sortedDirectories, toDirIndex)!
            let dst = ReferenceModel.join(toDir, RefOp.names[nameIndex % RefOp.names.count])
            let srcKind = model.kind(src)!
            // The kernel itself answers a rename onto itself (nothing), into its own subtree
            // (EINVAL) and onto an ancestor (ENOTEMPTY).
            if dst == src || ReferenceModel.isWithin(dst, src) || ReferenceModel.isWithin(src, dst)
                || isUnsettled(src) || isUnsettled(dst) {
                return skip(op)
            }
            note = "rename '\(src)' → '\(dst)'"
            let dstKind = model.kind(dst)
            var expected: Errno? = nil
            if srcKind == .file, dstKind == .directory { expected = .EISDIR }
            if srcKind == .directory, dstKind == .file { expected = .ENOTDIR }
            if srcKind == .directory, dstKind == .directory, model.hasContent(dst) { expected = .ENOTEMPTY }
            let p = try await ino(ReferenceModel.parent(src))
            let np = try await ino(toDir)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.rename(parent: p, name: ReferenceModel.name(src), newParent: np,
                                    newName: ReferenceModel.name(dst), flags: 0)
            }, expected: expected)
            if expected == nil {
                if srcKind == .file {
                    // Content never uploaded (created here) moves where it waits, and is uploaded
                    // under the new name later; other unsaved content is uploaded first, and the
                    // object is copied, then deleted (docs/SEMANTICS.md §3.4).
                    let id = model.file(at: src)
                    if let s = model.files[id]?.stage, s.createdHere, s.dirty, !s.deleted {} else { model.upload(id) }
                    model.detach(dst)
                    if let o = model.objects[src] {
                        model.remove(src)
                        model.put(dst, o)
                    }
                    model.fileAt.removeValue(forKey: src)
                    model.fileAt[dst] = id
                    model.files[id]!.path = dst
                    model.dropIfUnused(id)
                    removedOnPurpose = [src]
                } else {
                    if dstKind == .directory { model.remove(dst + "/") }
                    removedOnPurpose = model.directories.filter { ReferenceModel.isWithin($0, src) }
                    model.moveDirectory(src, to: dst)
                }
            }

        case let .unlink(fileIndex):
            guard let path = pick(model.sortedVisibleFiles, fileIndex), !isUnsettled(path) else { return skip(op) }
            note = "unlink '\(path)'"
            let p = try await ino(ReferenceModel.parent(path))
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.unlink(parent: p, name: ReferenceModel.name(path))
            }, expected: nil)
            model.remove(path)
            model.detach(path)

        case let .mkdir(dirIndex, nameIndex):
            let dir = pick(model.sortedDirectories, dirIndex)!
            let path = ReferenceModel.join(dir, RefOp.names[nameIndex % RefOp.names.count])
            if isUnsettled(path) { return skip(op) }
            note = "mkdir '\(path)'"
            let expected: Errno? = model.kind(path) == nil ? nil : .EEXIST
            let p = try await ino(dir)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.mkdir(parent: p, name: ReferenceModel.name(path), mode: 0o755)
            }, expected: expected)
            // The placeholder carries its mode (POSIX metadata is on; no caller here, so no owner).
            // (A folder keeps no metadata.)
            if expected == nil { model.put(path + "/", RefObject(data: Data(), custom: config.hierarchical ? [:] : [PosixAttributes.modeKey: "755"])) }

        case let .rmdir(dirIndex):
            let dirs = model.sortedDirectories.filter { !$0.isEmpty }
            guard let path = pick(dirs, dirIndex), !isUnsettled(path) else { return skip(op) }
            note = "rmdir '\(path)'"
            let expected: Errno? = model.hasContent(path) ? .ENOTEMPTY : nil
            let p = try await ino(ReferenceModel.parent(path))
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.rmdir(parent: p, name: ReferenceModel.name(path))
            }, expected: expected)
            if expected == nil {
                model.remove(path + "/")
                removedOnPurpose = [path]
            }

        case let .setxattr(nodeIndex, keyIndex, valueIndex):
            guard let path = pick(model.sortedNodes, nodeIndex), !isUnsettled(path) else { return skip(op) }
            let key = RefOp.keys[keyIndex % RefOp.keys.count], value = RefOp.values[valueIndex % RefOp.values.count]
            note = "setxattr '\(path)' user.\(key)=\(value)"
            let ino = try await ino(path)
            // A folder keeps no metadata: refused, as on the root of a whole bucket.
            let refused = config.hierarchical && model.kind(path) == .directory
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.setxattr(ino: ino, name: "user." + key, value: Array(value.utf8), flags: 0)
            }, expected: refused ? .ENOTSUP : nil)
            if !refused { setCustom(path, key, value) }

        case let .removexattr(nodeIndex, keyIndex):
            guard let path = pick(model.sortedNodes, nodeIndex), !isUnsettled(path) else { return skip(op) }
            let key = RefOp.keys[keyIndex % RefOp.keys.count]
            note = "removexattr '\(path)' user.\(key)"
            let expected: Errno? = config.hierarchical && model.kind(path) == .directory ? .ENOTSUP
                : model.custom(of: path)[key] == nil ? .ENODATA : nil
            let ino = try await ino(path)
            _ = try check(note, await attempt { () async throws(Errno) in
                try await fs.removexattr(ino: ino, name: "user." + key)
            }, expected: expected)
            if expected == nil { setCustom(path, key, nil) }

        case let .readdir(dirIndex, buffer):
            guard let dir = pick(model.sortedDirectories, dirIndex), !isUnsettled(dir) else { return skip(op) }
            note = "readdir '\(dir)' (\(buffer) entries per answer)"
            _ = try await listDirectory(dir, ino: try await ino(dir), buffer: buffer)

        case .check:
            note = "check"

        case let .remotePut(dirIndex, nameIndex, child, bytes):
            let dir = pick(model.sortedDirectories, dirIndex)!
            var path = ReferenceModel.join(dir, RefOp.remoteNames[nameIndex % RefOp.remoteNames.count])
            if let child { path += "/" + RefOp.names[child % RefOp.names.count] }
            if isLocal(path) || (try? StoragePath.validateObjectName(path)) == nil { return skip(op) }
            note = "remote put '\(path.prefix(60))' (\(bytes.size) bytes)"
            if config.hierarchical, path.hasSuffix("/") {
                // No object is named like a folder there: the name is a folder.
                guard try await makeFolder(path) else { return skip(op) }
                model.put(path, RefObject(data: Data()))
            } else {
                _ = try await store.write(path, from: .data(bytes.data), metadata: WritableMetadata(), preconditions: .none)
                model.put(path, RefObject(data: bytes.data))
            }
            unsettle(path)

        case let .remoteDelete(objectIndex):
            guard let name = pick(model.sortedObjectNames, objectIndex) else { return skip(op) }
            let path = name.hasSuffix("/") ? String(name.dropLast()) : name
            if isLocal(path) { return skip(op) }
            note = "remote delete '\(name.prefix(60))'"
            if config.hierarchical, name.hasSuffix("/") {
                // A folder goes only when empty.
                guard !model.objects.keys.contains(where: { $0 != name && $0.hasPrefix(name) }) else { return skip(op) }
                try await store.folders!.deleteFolder(name)
            } else {
                try await store.delete(name, preconditions: .none)
            }
            model.remove(name)
            unsettle(path)

        case let .remotePatch(objectIndex, keyIndex, valueIndex):
            guard let name = pick(model.sortedObjectNames, objectIndex) else { return skip(op) }
            let path = name.hasSuffix("/") ? String(name.dropLast()) : name
            if isLocal(path) || (config.hierarchical && name.hasSuffix("/")) { return skip(op) }
            let key = RefOp.keys[keyIndex % RefOp.keys.count]
            let value = valueIndex.map { RefOp.values[$0 % RefOp.values.count] }
            note = "remote patch '\(name.prefix(60))' \(key)=\(value ?? "null")"
            var patch = MetadataPatch()
            patch.customMetadata = [key: value]
            _ = try await store.patchMetadata(name, patch, preconditions: .none)
            model.objects[name]?.custom[key] = value
            unsettle(path)

        case .advanceClock:
            note = "clock +\(RefConfig.defaultTTL + 1) s"
            clock.advance(RefConfig.defaultTTL + 1)
            unsettled = []
        }
        // Prefix-only directories that lost their last object through the mount may show until the TTL.
        if !op.isRemote {
            for gone in before.subtracting(model.directories) where !removedOnPurpose.contains(gone) { unsettle(gone) }
        }
        trace.append(note)
    }

    /// A custom key set or removed through the mount: on a file with unsaved local content (or
    /// created here) it waits for the upload; otherwise it is one PATCH (a directory without a
    /// placeholder gets one).
    func setCustom(_ path: String, _ key: String, _ value: String?) {
        if model.kind(path) == .directory {
            if model.objects[path + "/"] == nil { model.put(path + "/", RefObject(data: Data())) }
            model.objects[path + "/"]!.custom[key] = value
            return
        }
        if let id = model.fileAt[path], let s = model.files[id]?.stage {
            model.files[id]!.stage!.custom[key] = value
            if s.dirty || s.createdHere {
                model.files[id]!.stage!.dirty = true
                return
            }
        }
        model.objects[path]?.custom[key] = value
    }

    /// create, or open O_TRUNC when a file is there (as the kernel's create does); the handle
    /// stays open.
    func create(_ path: String) async throws {
        let p = try await ino(ReferenceModel.parent(path))
        let name = ReferenceModel.name(path)
        let (e, fh) = try check("create '\(path)'", await attempt { () async throws(Errno) in
            try await fs.create(parent: p, name: name, mode: 0o644, flags: OpenFlags(O_RDWR | O_CREAT))
        }, expected: nil)!
        if e.attributes.type != .regular { throw fail("create '\(path)': made a \(e.attributes.type)") }
        let existed = model.visibleFiles[path] != nil
        let id = model.file(at: path)
        if existed {
            openStage(id, path, truncate: true)
        } else {
            model.files[id]!.stage = RefStage(data: Data(), custom: [PosixAttributes.modeKey: "644"], dirty: true, createdHere: true)
        }
        model.files[id]!.stage!.holders += 1
        model.handles.append(RefHandle(fh: fh, ino: e.attributes.ino, file: id, readable: true, writable: true, append: false,
                                       holdsStage: true, openedGeneration: nil))
    }

    /// A file opened for writing gets local content: a copy of the bucket's, or empty.
    func openStage(_ id: Int, _ path: String, truncate: Bool) {
        if model.files[id]!.stage != nil {
            if truncate {
                model.files[id]!.stage!.data = Data()
                model.files[id]!.stage!.dirty = true
            }
            return
        }
        let o = model.objects[path]!
        model.files[id]!.stage = RefStage(data: truncate ? Data() : o.data, custom: o.custom,
                                          dirty: truncate && !o.data.isEmpty, createdHere: false)
    }

    func open(_ path: String, _ mode: RefOpenMode) async throws {
        let ino = try await ino(path)
        let fh = try check("open '\(path)' \(mode)", await attempt { () async throws(Errno) in
            try await fs.open(ino: ino, flags: OpenFlags(mode.flags))
        }, expected: nil)!
        let id = model.file(at: path)
        let writable = mode != .read
        if writable { openStage(id, path, truncate: mode == .truncate) }
        let holds = model.files[id]!.stage != nil
        if holds { model.files[id]!.stage!.holders += 1 }
        model.handles.append(RefHandle(fh: fh, ino: ino, file: id, readable: mode != .append, writable: writable,
                                       append: mode == .append, holdsStage: holds,
                                       openedGeneration: holds ? nil : model.generation[path]))
    }

    func write(_ h: Int, _ data: Data, at offset: Int) async throws {
        let handle = model.handles[h]
        if !data.isEmpty {
            let n = try check("write through handle \(h)", await attempt { () async throws(Errno) in
                try await fs.write(ino: handle.ino, fh: handle.fh, offset: UInt64(offset), data: data)
            }, expected: nil)!
            if n != data.count { throw fail("write through handle \(h): wrote \(n) of \(data.count) bytes") }
        }
        guard var s = model.files[handle.file]?.stage else { throw fail("the model has no local content for handle \(h)") }
        s.data = s.data.writing(data, at: offset)
        if !data.isEmpty { s.dirty = true }
        model.files[handle.file]!.stage = s
    }

    /// flush + release, as close(2) does.
    func close(_ h: Int) async throws {
        let handle = model.handles[h]
        let flushed = await attempt { () async throws(Errno) in try await fs.flush(ino: handle.ino, fh: handle.fh) }
        let released = await attempt { () async throws(Errno) in try await fs.release(ino: handle.ino, fh: handle.fh) }
        _ = try check("flush of handle \(h)", flushed, expected: nil)
        _ = try check("release of handle \(h)", released, expected: nil)
        model.close(h)
    }

    // MARK: - comparison

    /// What a user sees, and what the bucket holds, against the model.
    func compare() async throws {
        try await compareDirectory("", ino: BucketFileSystem.rootIno)
        try await compareStore()
    }

    /// opendir + readdir (`buffer` entries per answer) + releasedir, compared with the model's
    /// settled children; returns what was listed.
    func listDirectory(_ dir: String, ino: UInt64, buffer: Int) async throws -> [String: ReferenceModel.Kind] {
        let fh = try check("opendir '\(dir)'", await attempt { () async throws(Errno) in try await fs.opendir(ino: ino) }, expected: nil)!
        var entries: [DirectoryEntry] = []
        var offset: UInt64 = 0
        while true {
            let part = try check("readdir '\(dir)'", await attempt { () async throws(Errno) in
                try await fs.readdir(ino: ino, fh: fh, offset: offset, limit: buffer)
            }, expected: nil)!
            if part.isEmpty { break }
            if part.count > buffer { throw fail("readdir '\(dir)' answered \(part.count) entries for a buffer of \(buffer)") }
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
        return expected
    }

    func compareDirectory(_ dir: String, ino: UInt64) async throws {
        let expected = try await listDirectory(dir, ino: ino, buffer: buffer)
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
            let want = model.visibleFiles[path]!.data
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
        // A read-only close: flush and release (a flush uploads the file's unsaved content, as
        // close(2) of any descriptor does).
        _ = try check("flush '\(path)'", await attempt { () async throws(Errno) in try await fs.flush(ino: ino, fh: fh) }, expected: nil)
        _ = try check("release '\(path)'", await attempt { () async throws(Errno) in try await fs.release(ino: ino, fh: fh) }, expected: nil)
        if let id = model.fileAt[path] { model.upload(id) }
        return out
    }

    func compareXattrs(_ path: String, ino: UInt64) async throws {
        // Keys `stat` shows (the mode key of what was created here) are not xattrs.
        let want = model.custom(of: path).filter { !XattrName.isHiddenKey($0.key) }
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

    /// A folder made behind the mount's back (with its parents); false when the store refuses
    /// the name as a folder's. One that exists already is fine.
    func makeFolder(_ name: String) async throws -> Bool {
        do {
            _ = try await store.folders!.createFolder(name)
        } catch StorageError.conflict {
        } catch StorageError.invalidArgument {
            return false
        }
        return true
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
        // A hierarchical bucket's folders, which the model keeps as `dir/` names.
        if config.hierarchical { for f in folderNames() { got[f] = RefObject(data: Data()) } }
        let want = model.objects
        if got != want {
            var diff: [String] = []
            for name in ReferenceModel.sorted(Set(got.keys).union(want.keys)) where got[name] != want[name] {
                func show(_ o: RefObject?) -> String { o.map { "\($0.data.count) bytes \($0.custom.sorted { $0.key < $1.key })" } ?? "absent" }
                diff.append("'\(name.prefix(60))': bucket \(show(got[name])), model \(show(want[name]))")
            }
            throw fail("bucket differs from the model: " + diff.joined(separator: "; "))
        }
    }
}
