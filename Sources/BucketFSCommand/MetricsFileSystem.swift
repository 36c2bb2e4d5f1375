import Foundation
import FuseKit
import Metrics

/// A decorator over the filesystem that counts FUSE operations for the metrics endpoint:
///
/// - `bucketfs_fuse_operations_total{operation}` and
///   `bucketfs_fuse_operation_duration_seconds{operation}` (a histogram)
/// - `bucketfs_fuse_errors_total{operation, errno}` (e.g. `ENOENT`, `EIO`)
/// - `bucketfs_fuse_read_bytes_total`, `bucketfs_fuse_written_bytes_total`
///
/// Operations are the `FuseFileSystemBase` calls (readdir and readdirplus are both `readdir`);
/// what FuseKit answers by itself (`security.capability`, non-UTF-8 names) is not counted. It
/// conforms to `FuseFileSystemBase`, which has no defaults, so every operation must be forwarded
/// here: one left out is a compile error, not a call that silently does nothing.
final class MetricsFileSystem: FuseFileSystemBase {
    let inner: any FuseFileSystemBase
    private let counters: [String: Counter]
    private let timers: [String: Metrics.Timer]
    private let readBytes = Counter(label: "bucketfs_fuse_read_bytes_total")
    private let writtenBytes = Counter(label: "bucketfs_fuse_written_bytes_total")

    static let operations = ["lookup", "forget", "getattr", "setattr", "opendir", "readdir", "releasedir", "open",
                             "read", "write", "flush", "fsync", "release", "create", "mkdir", "unlink", "rmdir",
                             "rename", "statfs", "getxattr", "listxattr", "setxattr", "removexattr", "readlink", "symlink",
                             "link", "mknod"]

    init(_ inner: any FuseFileSystemBase) {
        self.inner = inner
        var c: [String: Counter] = [:], t: [String: Metrics.Timer] = [:]
        for op in Self.operations {
            c[op] = Counter(label: "bucketfs_fuse_operations_total", dimensions: [("operation", op)])
            t[op] = Metrics.Timer(label: "bucketfs_fuse_operation_duration_seconds", dimensions: [("operation", op)])
        }
        counters = c
        timers = t
        // The errors an alert watches for, at 0 from the start: a failed upload or a full cache
        // directory answers these operations EIO, ENOSPC or EDQUOT.
        for op in Self.alertedOperations {
            for e in Self.alertedErrnos {
                Counter(label: "bucketfs_fuse_errors_total", dimensions: [("operation", op), ("errno", e)]).increment(by: 0)
            }
        }
    }

    static let alertedOperations = ["write", "flush", "fsync", "release", "create"]
    static let alertedErrnos = ["EIO", "ENOSPC", "EDQUOT"]

    /// The errno's symbolic name, for the `errno` label.
    static func name(_ e: Errno) -> String {
        let names: [Int32: String] = [1: "EPERM", 2: "ENOENT", 4: "EINTR", 5: "EIO", 7: "E2BIG", 9: "EBADF",
                                      11: "EAGAIN", 12: "ENOMEM", 13: "EACCES", 16: "EBUSY", 17: "EEXIST", 18: "EXDEV",
                                      20: "ENOTDIR", 21: "EISDIR", 22: "EINVAL", 27: "EFBIG", 28: "ENOSPC", 30: "EROFS",
                                      34: "ERANGE", 36: "ENAMETOOLONG", 38: "ENOSYS", 39: "ENOTEMPTY", 61: "ENODATA",
                                      84: "EILSEQ", 95: "ENOTSUP", 110: "ETIMEDOUT", 116: "ESTALE", 125: "ECANCELED"]
        return names[e.rawValue] ?? "E\(e.rawValue)"
    }

    private func count(_ op: String, error: Errno? = nil) {
        counters[op]?.increment()
        if let error {
            Counter(label: "bucketfs_fuse_errors_total", dimensions: [("operation", op), ("errno", Self.name(error))]).increment()
        }
    }

    private func measure<T>(_ op: String, _ body: () async throws(Errno) -> T) async throws(Errno) -> T {
        let start = ContinuousClock.now
        do {
            let v = try await body()
            timers[op]?.recordInterval(since: start)
            count(op)
            return v
        } catch {
            timers[op]?.recordInterval(since: start)
            count(op, error: error)
            throw error
        }
    }

    func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry {
        try await measure("lookup") { () async throws(Errno) in try await inner.lookup(parent: parent, name: name) }
    }
    func forget(ino: UInt64, nlookup: UInt64) {
        count("forget")
        inner.forget(ino: ino, nlookup: nlookup)
    }
    func noteLookup(ino: UInt64) { inner.noteLookup(ino: ino) }
    func immediateGetxattrError(name: String) -> Errno? {
        let e = inner.immediateGetxattrError(name: name)
        if let e { count("getxattr", error: e) }
        return e
    }
    /// The filesystem's scope for each request (its operation deadline) stays in force.
    func perform<T: Sendable>(_ work: @escaping @Sendable () async throws(Errno) -> T) async throws(Errno) -> T {
        try await inner.perform(work)
    }
    func keepsCache(ino: UInt64, fh: UInt64) -> Bool { inner.keepsCache(ino: ino, fh: fh) }
    func directIO(ino: UInt64, fh: UInt64) -> Bool { inner.directIO(ino: ino, fh: fh) }
    func passthroughFile(ino: UInt64, fh: UInt64) async -> Int32? { await inner.passthroughFile(ino: ino, fh: fh) }
    func directoryCaching(ino: UInt64, fh: UInt64) -> DirectoryCaching { inner.directoryCaching(ino: ino, fh: fh) }
    // Answers from cache on the libfuse thread count as operations too; nil (go async) does not.
    func cachedLookup(parent: UInt64, name: String) -> Result<FuseEntry, Errno>? {
        let r = inner.cachedLookup(parent: parent, name: name)
        if let r { count("lookup", error: r.failure) }
        return r
    }
    func cachedGetattr(ino: UInt64) -> (FileAttributes, Double)? {
        let r = inner.cachedGetattr(ino: ino)
        if r != nil { count("getattr") }
        return r
    }
    func cachedGetxattr(ino: UInt64, name: String) -> Result<[UInt8], Errno>? {
        let r = inner.cachedGetxattr(ino: ino, name: name)
        if let r { count("getxattr", error: r.failure) }
        return r
    }
    /// An operation done on the libfuse thread counts like its async form; nil (go async) does not.
    private func measured<T>(_ op: String, since start: ContinuousClock.Instant, _ r: Result<T, Errno>?) -> Result<T, Errno>? {
        guard let r else { return nil }
        timers[op]?.recordInterval(since: start)
        count(op, error: r.failure)
        return r
    }
    func immediateWrite(ino: UInt64, fh: UInt64, offset: UInt64, bytes: UnsafeRawBufferPointer) -> Result<Int, Errno>? {
        let r = measured("write", since: .now, inner.immediateWrite(ino: ino, fh: fh, offset: offset, bytes: bytes))
        if case .success(let n) = r { writtenBytes.increment(by: Int64(n)) }
        return r
    }
    func immediateSetattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) -> Result<(FileAttributes, Double), Errno>? {
        measured("setattr", since: .now, inner.immediateSetattr(ino: ino, fh: fh, changes: changes))
    }
    func immediateRelease(ino: UInt64, fh: UInt64) -> Result<Void, Errno>? {
        measured("release", since: .now, inner.immediateRelease(ino: ino, fh: fh))
    }
    func cachedListxattr(ino: UInt64) -> [String]? {
        let r = inner.cachedListxattr(ino: ino)
        if r != nil { count("listxattr") }
        return r
    }
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64, limit: Int) async throws(Errno) -> [DirectoryEntry] {
        try await measure("readdir") { () async throws(Errno) in try await inner.readdir(ino: ino, fh: fh, offset: offset, limit: limit) }
    }
    func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        try await measure("getattr") { () async throws(Errno) in try await inner.getattr(ino: ino) }
    }
    func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) {
        try await measure("setattr") { () async throws(Errno) in try await inner.setattr(ino: ino, fh: fh, changes: changes) }
    }
    func opendir(ino: UInt64) async throws(Errno) -> UInt64 {
        try await measure("opendir") { () async throws(Errno) in try await inner.opendir(ino: ino) }
    }
    func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] {
        try await measure("readdir") { () async throws(Errno) in try await inner.readdir(ino: ino, fh: fh, offset: offset) }
    }
    func releasedir(ino: UInt64, fh: UInt64) {
        count("releasedir")
        inner.releasedir(ino: ino, fh: fh)
    }
    func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        try await measure("open") { () async throws(Errno) in try await inner.open(ino: ino, flags: flags) }
    }
    func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        let d = try await measure("read") { () async throws(Errno) in try await inner.read(ino: ino, fh: fh, offset: offset, size: size) }
        readBytes.increment(by: Int64(d.count))
        return d
    }
    func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int {
        let n = try await measure("write") { () async throws(Errno) in try await inner.write(ino: ino, fh: fh, offset: offset, data: data) }
        writtenBytes.increment(by: Int64(n))
        return n
    }
    func flush(ino: UInt64, fh: UInt64) async throws(Errno) {
        try await measure("flush") { () async throws(Errno) in try await inner.flush(ino: ino, fh: fh) }
    }
    func fsync(ino: UInt64, fh: UInt64, dataOnly: Bool) async throws(Errno) {
        try await measure("fsync") { () async throws(Errno) in try await inner.fsync(ino: ino, fh: fh, dataOnly: dataOnly) }
    }
    func release(ino: UInt64, fh: UInt64) async throws(Errno) {
        try await measure("release") { () async throws(Errno) in try await inner.release(ino: ino, fh: fh) }
    }
    func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) {
        try await measure("create") { () async throws(Errno) in try await inner.create(parent: parent, name: name, mode: mode, flags: flags) }
    }
    func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry {
        try await measure("mkdir") { () async throws(Errno) in try await inner.mkdir(parent: parent, name: name, mode: mode) }
    }
    func unlink(parent: UInt64, name: String) async throws(Errno) {
        try await measure("unlink") { () async throws(Errno) in try await inner.unlink(parent: parent, name: name) }
    }
    func rmdir(parent: UInt64, name: String) async throws(Errno) {
        try await measure("rmdir") { () async throws(Errno) in try await inner.rmdir(parent: parent, name: name) }
    }
    func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) {
        try await measure("rename") { () async throws(Errno) in
            try await inner.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
        }
    }
    func statfs(ino: UInt64) async throws(Errno) -> StatFS {
        try await measure("statfs") { () async throws(Errno) in try await inner.statfs(ino: ino) }
    }
    func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8] {
        try await measure("getxattr") { () async throws(Errno) in try await inner.getxattr(ino: ino, name: name) }
    }
    func listxattr(ino: UInt64) async throws(Errno) -> [String] {
        try await measure("listxattr") { () async throws(Errno) in try await inner.listxattr(ino: ino) }
    }
    func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno) {
        try await measure("setxattr") { () async throws(Errno) in try await inner.setxattr(ino: ino, name: name, value: value, flags: flags) }
    }
    func removexattr(ino: UInt64, name: String) async throws(Errno) {
        try await measure("removexattr") { () async throws(Errno) in try await inner.removexattr(ino: ino, name: name) }
    }
    func readlink(ino: UInt64) async throws(Errno) -> String {
        try await measure("readlink") { () async throws(Errno) in try await inner.readlink(ino: ino) }
    }
    func symlink(parent: UInt64, name: String, target: String) async throws(Errno) -> FuseEntry {
        try await measure("symlink") { () async throws(Errno) in try await inner.symlink(parent: parent, name: name, target: target) }
    }
    func link(ino: UInt64, newParent: UInt64, newName: String) async throws(Errno) -> FuseEntry {
        try await measure("link") { () async throws(Errno) in try await inner.link(ino: ino, newParent: newParent, newName: newName) }
    }
    func mknod(parent: UInt64, name: String, mode: UInt32, rdev: UInt64) async throws(Errno) -> FuseEntry {
        try await measure("mknod") { () async throws(Errno) in try await inner.mknod(parent: parent, name: name, mode: mode, rdev: rdev) }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let e) = self { return e }
        return nil
    }
}

extension Metrics.Timer {
    func recordInterval(since start: ContinuousClock.Instant) {
        let d = (ContinuousClock.now - start).components
        recordNanoseconds(d.seconds * 1_000_000_000 + d.attoseconds / 1_000_000_000)
    }
}
