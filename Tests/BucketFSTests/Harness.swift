@testable import BucketFS
import Foundation
import Logging
import Synchronization
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A settable calendar for the core's clock (`MountConfig.clock`).
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var t: Double
    init(_ start: Double = 1_800_000_000) { t = start }
    var now: Double {
        lock.lock(); defer { lock.unlock() }
        return t
    }
    func advance(_ seconds: Double) {
        lock.lock(); defer { lock.unlock() }
        t += seconds
    }
    /// The core's clock: this calendar, with pauses in real time (a test that must not wait for a
    /// pause gives the core a `ManualClock`'s clock instead).
    var bucketClock: BucketClock {
        BucketClock(now: { ContinuousClock.now }, date: { [self] in Date(timeIntervalSince1970: now) },
                    sleepUntil: { try await Task.sleep(until: $0, clock: .continuous) })
    }
}

/// A mount over a `MemoryStore` with its own cache directory and an injected clock. `fs` is the
/// core behind a checker: after every call a test makes, the core's invariants are checked.
final class Harness: @unchecked Sendable {
    let store: MemoryStore
    let clock: TestClock
    let fs: CheckedCore
    var core: BucketFileSystem { fs.core }
    let cacheDirectory: String
    var config: MountConfig { fs.config }

    /// `checkEvery`: check the invariants after every call (1), or after every Nth: the check is
    /// O(inodes), so a test that makes thousands of calls over thousands of files samples.
    /// `view`: a store over `store` that the core mounts instead (a view of its past); `store`
    /// stays the one whose requests are counted. `through`: the store the core is given, made
    /// from the memory store (a wrapper that behaves like some server).
    init(store: MemoryStore = MemoryStore(), view: (any ObjectStore)? = nil, checkEvery: Int = 1,
         _ configure: (inout MountConfig) -> Void = { _ in },
         through: (MemoryStore) -> any ObjectStore = { $0 }, logger: Logger? = nil) {
        self.store = store
        let clock = TestClock()
        self.clock = clock
        cacheDirectory = NSTemporaryDirectory() + "bucketfs-core-tests-" + UUID().uuidString
        var c = MountConfig()
        c.cacheDirectory = cacheDirectory
        c.metadataTTL = 5
        c.clock = clock.bucketClock
        // Queued uploads start at once unless a test asks for the delay.
        c.writeBackDelay = 0
        // No hedged walk-ahead downloads unless a test asks (CoreWalkHedgeTests): on a busy
        // machine a read of the memory store can run past the hedge's wait, and the tests that
        // count requests count the store's, not the machine's.
        c.walkHedge = 0
        // The invariants are checked at each release of the superblock's lock (debug builds),
        // unless the test samples them (thousands of files: the check is O(inodes)).
        c.checksInvariantsAtUnlock = checkEvery == 1
        c.brokenInvariant = Self.recordBrokenInvariant
        configure(&c)
        fs = CheckedCore(try! BucketFileSystem(store: view ?? through(store), config: c, logger: logger ?? Logger(label: "bucketfs")), every: checkEvery)
    }

    deinit { try? FileManager.default.removeItem(atPath: cacheDirectory) }

    /// A broken invariant found at a release of the superblock's lock fails the test that broke it,
    /// naming the critical section.
    static let recordBrokenInvariant: @Sendable ([String], String) -> Void = { bad, at in
        Issue.record("the superblock's invariants broke in the critical section at \(at): \(bad.joined(separator: "; "))")
    }

    static let root = BucketFileSystem.rootIno

    /// Walks `a/b/c` from the root with lookups; returns the last entry.
    func lookup(_ path: String) async throws(Errno) -> FuseEntry {
        var parent = Self.root
        var entry: FuseEntry? = nil
        for seg in path.split(separator: "/") {
            let e = try await fs.lookup(parent: parent, name: String(seg))
            parent = e.attributes.ino
            entry = e
        }
        guard let entry else { return try await FuseEntry(attributes: fs.getattr(ino: Self.root).0, entryTimeout: 0, attrTimeout: 0) }
        return entry
    }

    func ino(_ path: String) async throws(Errno) -> UInt64 {
        if path.isEmpty { return Self.root }
        return try await lookup(path).attributes.ino
    }

    /// opendir + readdir from offset 0 until an empty answer + releasedir, as the kernel does.
    /// `chunk` limits how many entries are taken from each answer (a small reply buffer).
    func readdirAll(_ ino: UInt64, chunk: Int = .max) async throws(Errno) -> [DirectoryEntry] {
        let fh = try await fs.opendir(ino: ino)
        defer { fs.releasedir(ino: ino, fh: fh) }
        var out: [DirectoryEntry] = []
        var offset: UInt64 = 0
        while true {
            let part = try await fs.readdir(ino: ino, fh: fh, offset: offset)
            if part.isEmpty { break }
            let taken = part.prefix(chunk)
            out += taken
            offset = taken.last!.offset
        }
        return out
    }

    func names(_ path: String) async throws(Errno) -> [String] {
        try await readdirAll(ino(path)).map(\.name)
    }

    /// open O_RDONLY, read everything in `chunk`-sized reads, release.
    func readAll(_ path: String, chunk: Int = 128 << 10) async throws(Errno) -> Data {
        try await readAll(ino: ino(path), chunk: chunk)
    }

    /// Like `readAll(_:)` without a lookup (the kernel keeps entries for their timeout).
    func readAll(ino: UInt64, chunk: Int = 128 << 10) async throws(Errno) -> Data {
        let fh = try await fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        var out = Data()
        while true {
            let d = try await fs.read(ino: ino, fh: fh, offset: UInt64(out.count), size: chunk)
            if d.isEmpty { break }
            out += d
        }
        try await fs.release(ino: ino, fh: fh)
        return out
    }

    /// create + write + release (release flushes), in the directory `parent`.
    @discardableResult
    func createFile(_ parentPath: String, _ name: String, _ data: Data) async throws(Errno) -> UInt64 {
        let parent = try await ino(parentPath)
        let (e, fh) = try await fs.create(parent: parent, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        if !data.isEmpty { _ = try await fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: data) }
        try await fs.flush(ino: e.attributes.ino, fh: fh)
        try await fs.release(ino: e.attributes.ino, fh: fh)
        return e.attributes.ino
    }

    func xattr(_ ino: UInt64, _ name: String) async throws(Errno) -> String {
        String(decoding: try await fs.getxattr(ino: ino, name: name), as: UTF8.self)
    }

    func setXattr(_ ino: UInt64, _ name: String, _ value: String, flags: Int32 = 0) async throws(Errno) {
        try await fs.setxattr(ino: ino, name: name, value: Array(value.utf8), flags: flags)
    }

    /// The cache directory as a crash leaves it: copied while this core still holds it, without
    /// its lock file, for a second core to open (the caller removes it).
    func crashedCopy() throws -> String {
        let copy = cacheDirectory + "-crashed-" + UUID().uuidString
        try FileManager.default.copyItem(atPath: cacheDirectory, toPath: copy)
        try? FileManager.default.removeItem(atPath: copy + "/.lock")
        return copy
    }
}

extension Data {
    /// Deterministic non-repeating-ish bytes for content checks.
    static func pattern(_ count: Int, seed: UInt32 = 1) -> Data {
        var d = Data(count: count)
        var x = seed &* 2_654_435_761 | 1
        d.withUnsafeMutableBytes { (p: UnsafeMutableRawBufferPointer) in
            for i in 0..<count {
                x ^= x << 13; x ^= x >> 17; x ^= x << 5
                p[i] = UInt8(truncatingIfNeeded: x)
            }
        }
        return d
    }
}

/// The core as the tests call it: every entry point the kernel calls (and the few the command
/// line does) goes to the `BucketFileSystem`, and once it returns (or throws) the core's
/// invariants (Sources/BucketFS/BucketFileSystem+Invariants.swift) are checked; any that fails is a test issue
/// naming the call. Properties of the core are reached through it unchanged. It conforms to
/// `FuseFileSystemBase` (no defaults), so an operation it forgets to forward does not compile.
@dynamicMemberLookup
final class CheckedCore: FuseFileSystemBase, @unchecked Sendable {
    let core: BucketFileSystem
    private let every: Int
    private let calls = Mutex(0)

    init(_ core: BucketFileSystem, every: Int = 1) {
        self.core = core
        self.every = max(1, every)
    }

    subscript<T>(dynamicMember path: KeyPath<BucketFileSystem, T>) -> T { core[keyPath: path] }

    /// Records an issue for every invariant that does not hold after `call`.
    func check(_ call: @autoclosure () -> String) {
        if every > 1, calls.withLock({ $0 += 1; return $0 % every }) != 0 { return }
        let bad = core.invariantViolations()
        if !bad.isEmpty {
            Issue.record(Comment(rawValue: "after \(call()): the core's invariants do not hold:\n" + bad.joined(separator: "\n")))
        }
    }

    @inline(__always)
    private func checked<T>(_ call: String, _ body: () -> T) -> T {
        defer { check(call) }
        return body()
    }

    @inline(__always)
    private func checked<T>(_ call: String, _ body: () async throws(Errno) -> T) async throws(Errno) -> T {
        defer { check(call) }
        return try await body()
    }

    func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry {
        try await checked("lookup(\(parent), \(name))") { () async throws(Errno) in try await core.lookup(parent: parent, name: name) }
    }
    func forget(ino: UInt64, nlookup: UInt64) { checked("forget(\(ino), \(nlookup))") { core.forget(ino: ino, nlookup: nlookup) } }
    func noteLookup(ino: UInt64) { checked("noteLookup(\(ino))") { core.noteLookup(ino: ino) } }
    func immediateGetxattrError(name: String) -> Errno? { checked("immediateGetxattrError(\(name))") { core.immediateGetxattrError(name: name) } }
    func perform<T: Sendable>(_ work: @escaping @Sendable () async throws(Errno) -> T) async throws(Errno) -> T {
        try await checked("perform") { () async throws(Errno) in try await core.perform(work) }
    }
    func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        try await checked("getattr(\(ino))") { () async throws(Errno) in try await core.getattr(ino: ino) }
    }
    func keepsCache(ino: UInt64, fh: UInt64) -> Bool { checked("keepsCache(\(ino), \(fh))") { core.keepsCache(ino: ino, fh: fh) } }
    func directIO(ino: UInt64, fh: UInt64) -> Bool { checked("directIO(\(ino), \(fh))") { core.directIO(ino: ino, fh: fh) } }
    func passthroughFile(ino: UInt64, fh: UInt64) async -> Int32? {
        let fd = await core.passthroughFile(ino: ino, fh: fh)
        check("passthroughFile(\(ino), \(fh))")
        return fd
    }
    func directoryCaching(ino: UInt64, fh: UInt64) -> DirectoryCaching {
        checked("directoryCaching(\(ino), \(fh))") { core.directoryCaching(ino: ino, fh: fh) }
    }
    func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? {
        checked("cachedLookup(\(parent), \(name))") { core.cachedLookup(parent: parent, name: name) }
    }
    func cachedGetattr(ino: UInt64) -> (FileAttributes, Double)? { checked("cachedGetattr(\(ino))") { core.cachedGetattr(ino: ino) } }
    func immediateWrite(ino: UInt64, fh: UInt64, offset: UInt64, bytes: UnsafeRawBufferPointer) -> Result<Int, Errno>? {
        checked("immediateWrite(\(ino), \(fh), \(offset), \(bytes.count))") { core.immediateWrite(ino: ino, fh: fh, offset: offset, bytes: bytes) }
    }
    func immediateSetattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) -> Result<(FileAttributes, Double), Errno>? {
        checked("immediateSetattr(\(ino), \(String(describing: fh)), \(changes))") { core.immediateSetattr(ino: ino, fh: fh, changes: changes) }
    }
    func cachedGetxattr(ino: UInt64, name: String) -> Result<[UInt8], Errno>? {
        checked("cachedGetxattr(\(ino), \(name))") { core.cachedGetxattr(ino: ino, name: name) }
    }
    func cachedListxattr(ino: UInt64) -> [String]? { checked("cachedListxattr(\(ino))") { core.cachedListxattr(ino: ino) } }
    func immediateRelease(ino: UInt64, fh: UInt64) -> Result<Void, Errno>? {
        checked("immediateRelease(\(ino), \(fh))") { core.immediateRelease(ino: ino, fh: fh) }
    }
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64, limit: Int) async throws(Errno) -> [DirectoryEntry] {
        try await checked("readdir(\(ino), \(fh), \(offset), limit \(limit))") { () async throws(Errno) in
            try await core.readdir(ino: ino, fh: fh, offset: offset, limit: limit)
        }
    }
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] {
        try await checked("readdir(\(ino), \(fh), \(offset))") { () async throws(Errno) in try await core.readdir(ino: ino, fh: fh, offset: offset) }
    }
    func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) {
        try await checked("setattr(\(ino))") { () async throws(Errno) in try await core.setattr(ino: ino, fh: fh, changes: changes) }
    }
    func opendir(ino: UInt64) async throws(Errno) -> UInt64 {
        try await checked("opendir(\(ino))") { () async throws(Errno) in try await core.opendir(ino: ino) }
    }
    func releasedir(ino: UInt64, fh: UInt64) { checked("releasedir(\(ino), \(fh))") { core.releasedir(ino: ino, fh: fh) } }
    func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        try await checked("open(\(ino), \(flags.rawValue))") { () async throws(Errno) in try await core.open(ino: ino, flags: flags) }
    }
    func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        try await checked("read(\(ino), \(fh), \(offset), \(size))") { () async throws(Errno) in
            try await core.read(ino: ino, fh: fh, offset: offset, size: size)
        }
    }
    func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int {
        try await checked("write(\(ino), \(fh), \(offset), \(data.count) bytes)") { () async throws(Errno) in
            try await core.write(ino: ino, fh: fh, offset: offset, data: data)
        }
    }
    func flush(ino: UInt64, fh: UInt64) async throws(Errno) {
        try await checked("flush(\(ino), \(fh))") { () async throws(Errno) in try await core.flush(ino: ino, fh: fh) }
    }
    func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno) {
        try await checked("fsync(\(ino), \(fh))") { () async throws(Errno) in try await core.fsync(ino: ino, fh: fh, dataOnly: dataOnly) }
    }
    func release(ino: UInt64, fh: UInt64) async throws(Errno) {
        try await checked("release(\(ino), \(fh))") { () async throws(Errno) in try await core.release(ino: ino, fh: fh) }
    }
    func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) {
        try await checked("create(\(parent), \(name))") { () async throws(Errno) in
            try await core.create(parent: parent, name: name, mode: mode, flags: flags)
        }
    }
    func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry {
        try await checked("mkdir(\(parent), \(name))") { () async throws(Errno) in try await core.mkdir(parent: parent, name: name, mode: mode) }
    }
    func readlink(ino: UInt64) async throws(Errno) -> String {
        try await checked("readlink(\(ino))") { () async throws(Errno) in try await core.readlink(ino: ino) }
    }
    func symlink(parent: UInt64, name: String, target: String) async throws(Errno) -> FuseEntry {
        try await checked("symlink(\(parent), \(name))") { () async throws(Errno) in try await core.symlink(parent: parent, name: name, target: target) }
    }
    func link(ino: UInt64, newParent: UInt64, newName: String) async throws(Errno) -> FuseEntry {
        try await checked("link(\(ino), \(newParent), \(newName))") { () async throws(Errno) in
            try await core.link(ino: ino, newParent: newParent, newName: newName)
        }
    }
    func mknod(parent: UInt64, name: String, mode: UInt32, rdev: UInt64) async throws(Errno) -> FuseEntry {
        try await checked("mknod(\(parent), \(name))") { () async throws(Errno) in
            try await core.mknod(parent: parent, name: name, mode: mode, rdev: rdev)
        }
    }
    func unlink(parent: UInt64, name: String) async throws(Errno) {
        try await checked("unlink(\(parent), \(name))") { () async throws(Errno) in try await core.unlink(parent: parent, name: name) }
    }
    func rmdir(parent: UInt64, name: String) async throws(Errno) {
        try await checked("rmdir(\(parent), \(name))") { () async throws(Errno) in try await core.rmdir(parent: parent, name: name) }
    }
    func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) {
        try await checked("rename(\(parent), \(name), \(newParent), \(newName))") { () async throws(Errno) in
            try await core.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
        }
    }
    func statfs(ino: UInt64) async throws(Errno) -> StatFS {
        try await checked("statfs(\(ino))") { () async throws(Errno) in try await core.statfs(ino: ino) }
    }
    func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8] {
        try await checked("getxattr(\(ino), \(name))") { () async throws(Errno) in try await core.getxattr(ino: ino, name: name) }
    }
    func listxattr(ino: UInt64) async throws(Errno) -> [String] {
        try await checked("listxattr(\(ino))") { () async throws(Errno) in try await core.listxattr(ino: ino) }
    }
    func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno) {
        try await checked("setxattr(\(ino), \(name))") { () async throws(Errno) in
            try await core.setxattr(ino: ino, name: name, value: value, flags: flags)
        }
    }
    func removexattr(ino: UInt64, name: String) async throws(Errno) {
        try await checked("removexattr(\(ino), \(name))") { () async throws(Errno) in try await core.removexattr(ino: ino, name: name) }
    }

    // Not kernel calls: the metrics endpoint's and the unmount's.
    func statistics() -> CoreStatistics { checked("statistics()") { core.statistics() } }
    func shutdown(within limit: Duration) async {
        await core.shutdown(within: limit)
        check("shutdown")
    }
}
