import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Errors (docs/SEMANTICS.md §5).
@Suite struct CoreErrorTests {
    /// Security Rules may let a user list `users/` but not read an object named `users`: a lookup
    /// of a name not listed yet (GET and a one-item list at once, on a store that cannot list
    /// under a partial name, as Firebase's v0) that the list shows to be a directory is that
    /// directory, whatever the GET said. A refused GET of a name with nothing below it stays
    /// EACCES.
    @Test func aRefusedGetDoesNotHideADirectory() async throws {
        let h = Harness(store: MemoryStore(listsUnderPartialNames: false))
        h.store.put("users/u1/a.txt", "alpha")
        // Both the GET of `users` and that of its placeholder `users/` are refused.
        h.store.failNext("get", times: 2, with: .unauthorized(path: "users", message: "No READ permission."))
        let e = try await h.fs.lookup(parent: Harness.root, name: "users")
        #expect(e.attributes.type == .directory)
        #expect(e.attributes.permissions & 0o777 == h.config.dirMode & 0o777)
        #expect(try await h.names("users") == ["u1"])
        h.store.failNext("get", with: .unauthorized(path: "other", message: "No READ permission."))
        await #expect(throws: Errno.EACCES) { try await h.fs.lookup(parent: Harness.root, name: "other") }
    }

    /// An operation that could not reach the store (no HTTP answer) says in its log line where
    /// the requests went and which setting chose it, as the commands' refusals do; one the store
    /// answered (a 503) does not.
    @Test func anUnreachableStoreIsNamedInTheLogLine() async throws {
        let store = MemoryStore()
        store.put("a.txt", "x")
        store.put("b.txt", "y")
        let logs = LogLines()
        var c = MountConfig()
        c.cacheDirectory = NSTemporaryDirectory() + "bucketfs-core-tests-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: c.cacheDirectory) }
        c.storageAddress = "http://127.0.0.1:1, set by --endpoint"
        let fs = try BucketFileSystem(store: store, config: c, logger: capturingLogger(logs))
        for op in ["get", "list"] { store.failNext(op, times: 4, with: .unknown(status: 0, message: "Connection refused")) }
        await #expect(throws: Errno.EIO) { try await fs.lookup(parent: BucketFileSystem.rootIno, name: "a.txt") }
        let named = logs.all.filter { $0.contains("Connection refused (storage at http://127.0.0.1:1, set by --endpoint) → Input/output error") }
        #expect(!named.isEmpty, "\(logs.all)")
        for op in ["get", "list"] { store.clearFaults(op) }
        for op in ["get", "list"] { store.failNext(op, times: 4, with: .unknown(status: 503, message: "busy")) }
        await #expect(throws: Errno.EIO) { try await fs.lookup(parent: BucketFileSystem.rootIno, name: "b.txt") }
        let busy = logs.all.filter { $0.contains("busy") }
        #expect(!busy.isEmpty && busy.allSatisfy { !$0.contains("storage at") }, "\(busy)")
    }

    @Test func errnoMapping() {
        #expect(errno(for: StorageError.objectNotFound(path: "x")) == .ENOENT)
        #expect(errno(for: StorageError.unauthenticated(message: "")) == .EACCES)
        #expect(errno(for: StorageError.unauthorized(path: "x", message: "")) == .EACCES)
        #expect(errno(for: StorageError.preconditionFailed(path: "x")) == .ESTALE)
        #expect(errno(for: StorageError.unknown(status: 503, message: "")) == .EIO)
        #expect(errno(for: StorageError.retryLimitExceeded(message: "")) == .EIO)
        #expect(errno(for: StorageError.quotaExceeded(message: "")) == .EIO)
        #expect(errno(for: StorageError.timeout(message: "")) == .EIO)
        #expect(errno(for: StorageError.pathError(path: "x", problem: .segmentTooLong(segment: "x", bytes: 300))) == .ENAMETOOLONG)
        #expect(errno(for: StorageError.pathError(path: "x", problem: .tooLong(bytes: 2000))) == .ENAMETOOLONG)
        #expect(errno(for: StorageError.pathError(path: "x", problem: .containsNewline)) == .EINVAL)
        #expect(errno(for: Errno.ENOSPC) == .ENOSPC)
    }

    /// Each store failure reaches the caller as its errno through the real entry points.
    @Test(arguments: [
        (StorageError.objectNotFound(path: "f"), Errno.ENOENT),
        (StorageError.unauthorized(path: "f", message: "denied"), Errno.EACCES),
        (StorageError.unauthenticated(message: "no token"), Errno.EACCES),
        (StorageError.unknown(status: 503, message: "unavailable"), Errno.EIO),
        (StorageError.retryLimitExceeded(message: "gave up"), Errno.EIO),
        (StorageError.preconditionFailed(path: "f"), Errno.ESTALE),
    ])
    func storeErrorsBecomeErrno(error: StorageError, expected: Errno) async throws {
        // getattr after the TTL (a get).
        let h = Harness()
        h.store.put("d/f", "x")
        h.store.put("d/g", "y")
        let ino = try await h.ino("d/f")
        h.clock.advance(60)
        h.store.failNext("get", with: error)
        await #expect(throws: expected) { try await h.fs.getattr(ino: ino) }
        // readdir (a list).
        let dir = try await h.ino("d")
        h.clock.advance(60)
        h.store.failNext("list", with: error)
        await #expect(throws: expected) { try await h.readdirAll(dir) }
        // read (a read).
        let g = try await h.fs.lookup(parent: dir, name: "g").attributes.ino
        let fh = try await h.fs.open(ino: g, flags: OpenFlags(O_RDONLY))
        h.store.failNext("read", with: error)
        await #expect(throws: expected) { try await h.fs.read(ino: g, fh: fh, offset: 0, size: 10) }
        try await h.fs.release(ino: g, fh: fh)
        // an upload (a write).
        let (e, wfh) = try await h.fs.create(parent: dir, name: "new", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: wfh, offset: 0, data: Data("1".utf8))
        h.store.failNext("write", with: error)
        await #expect(throws: expected) { try await h.fs.flush(ino: e.attributes.ino, fh: wfh) }
        try? await h.fs.release(ino: e.attributes.ino, fh: wfh)
        // a lookup on a directory without a listing (get + list).
        let h2 = Harness(store: h.store)
        h.store.failNext("list", with: error)
        await #expect(throws: expected) { try await h2.fs.lookup(parent: Harness.root, name: "d") }
    }

    @Test func aFailedReadIsRememberedBrieflyAndDoesNotBreakTheHandle() async throws {
        let h = Harness { $0.failureTTL = 5 }
        h.store.put("f", "hello world")
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.failNext("read", with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 5) }
        // The kernel's immediate repeat fails at once, with no request (one deadline, not two).
        let before = h.store.reads.count
        await #expect(throws: Errno.EIO) { try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 5) }
        #expect(h.store.reads.count == before)
        h.clock.advance(5.1)
        #expect(try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 5) == Data("hello".utf8))
        try await h.fs.release(ino: ino, fh: fh)
    }

    /// A read the server refuses (400: EINVAL; 401, 403: EACCES) is remembered like one that
    /// failed: the kernel's page-by-page repeat of a failed read-ahead window asks no more (Google's
    /// retry scenarios 5 and 6 through a mount: a 1 MiB window was asked again in 4 KiB pages).
    @Test(arguments: [
        (StorageError.invalidArgument(message: "Retry Test: Caused a 400"), Errno.EINVAL),
        (StorageError.unauthenticated(message: "Retry Test: Caused a 401"), Errno.EACCES),
        (StorageError.unauthorized(path: "f", message: "denied"), Errno.EACCES),
    ])
    func aRefusedReadIsRememberedBriefly(error: StorageError, expected: Errno) async throws {
        let h = Harness { $0.failureTTL = 5 }
        h.store.put("f", "hello world")
        let ino = try await h.ino("f")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        h.store.failNext("read", with: error)
        await #expect(throws: expected) { try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 5) }
        let before = h.store.reads.count
        for page in 0..<4 {
            await #expect(throws: expected) { try await h.fs.read(ino: ino, fh: fh, offset: UInt64(page), size: 1) }
        }
        #expect(h.store.reads.count == before, "the repeats asked the store again")
        h.clock.advance(5.1)
        #expect(try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 5) == Data("hello".utf8))
        try await h.fs.release(ino: ino, fh: fh)
    }

    @Test func aFailedListingIsRememberedBriefly() async throws {
        let h = Harness { $0.failureTTL = 5 }
        h.store.put("d/f", "x")
        h.store.failNext("list", with: .unknown(status: 503, message: "busy"))
        let fh = try await h.fs.opendir(ino: Harness.root)
        await #expect(throws: Errno.EIO) { _ = try await h.fs.readdir(ino: Harness.root, fh: fh, offset: 0) }
        let lists = h.store.lists.count
        await #expect(throws: Errno.EIO) { _ = try await h.fs.readdir(ino: Harness.root, fh: fh, offset: 0) }
        #expect(h.store.lists.count == lists, "no second wait for the same failure")
        h.clock.advance(6)
        #expect(try await h.fs.readdir(ino: Harness.root, fh: fh, offset: 0).map(\.name) == ["d"])
    }

    @Test func aFailedUploadIsRetriedInTheBackgroundAndNothingIsLost() async throws {
        let h = Harness { $0.retryBackoffMax = 0.05; $0.uploadRetries = 3 }
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("abc".utf8))
        h.store.failNext("write", with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        #expect(h.store.object("f") == nil)
        // close does not upload again right away (its flush just said EIO)…
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.counts["write"] == 1)
        // …the background attempt does.
        try await waitUntil { h.store.data("f") == Data("abc".utf8) }
        #expect(h.store.counts["write"] == 2)
        try await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory).filter { $0.hasPrefix("stage-") }) == [] }
    }

    @Test func anUploadThatNeverWorksEndsInLostAndFound() async throws {
        let h = Harness { $0.retryBackoffMax = 0.02; $0.uploadRetries = 2 }
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "dir-less.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("precious".utf8))
        for _ in 0..<3 { h.store.failNext("write", with: .unknown(status: 503, message: "busy")) }
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        try await waitUntil { !lostFiles(h).isEmpty }
        #expect(h.store.counts["write"] == 3, "the flush and two background attempts")
        let kept = lostFiles(h)
        #expect(kept.count == 1)
        #expect(kept.first.flatMap { FileManager.default.contents(atPath: h.config.lostAndFound + "/" + $0) } == Data("precious".utf8))
        #expect(h.store.object("dir-less.txt") == nil)
        // The file no longer shows content that is not in the bucket.
        try await waitUntil { (try? await h.fs.lookup(parent: Harness.root, name: "dir-less.txt")) == nil }
    }

    /// After an outage, the lost+found entry's reason names the cause and where the store was
    /// (before: `last: Input/output error (5)`, the cause only in the log).
    @Test func anOutagesLostAndFoundReasonNamesTheCauseAndTheStore() async throws {
        let h = Harness {
            $0.retryBackoffMax = 0.02
            $0.uploadRetries = 2
            $0.storageAddress = "http://127.0.0.1:1, set by --endpoint"
        }
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "night.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("a night's work".utf8))
        h.store.failNext("write", times: 3, with: .unknown(status: 0, message: "Connection refused"))
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        try await waitUntil { !lostFiles(h).isEmpty }
        let side = try #require(FileManager.default.contents(atPath: h.config.lostAndFound + "/" + lostFiles(h)[0] + ".json"))
        let reason = try #require((try JSONSerialization.jsonObject(with: side) as? [String: Any])?["reason"] as? String)
        #expect(reason.contains("the upload failed 3 times (last: Connection refused (storage at http://127.0.0.1:1, set by --endpoint) → Input/output error"),
                "\(reason)")
    }

    @Test func aRefusedUploadIsNotRetriedAndItsDataIsKept() async throws {
        let h = Harness { $0.retryBackoffMax = 0.02 }
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("abc".utf8))
        h.store.failNext("write", with: .unauthorized(path: "f", message: "denied"))
        await #expect(throws: Errno.EACCES) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        await #expect(throws: Errno.EACCES) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        // What close said stays true: nothing can land later. The last close discarded the
        // stage (every upload reads it), so no attempt, now or in the background, has data to send.
        #expect(stageFiles(h).isEmpty)
        #expect(h.store.counts["write"] == 1)
        #expect(h.store.object("f") == nil)
        #expect(lostFiles(h).count == 1)
    }

    @Test func patchPreconditionFailuresEndAsESTALE() async throws {
        let h = Harness()
        h.store.put("f", "x")
        let ino = try await h.ino("f")
        h.store.failNext("patch", times: 100, with: .preconditionFailed(path: "f"))
        await #expect(throws: Errno.ESTALE) { try await h.setXattr(ino, "user.k", "v") }
        #expect(h.store.count("patch") < 10)
    }

    @Test func badNames() async throws {
        let h = Harness()
        let long = String(repeating: "n", count: 256)
        let longUTF8 = String(repeating: "é", count: 128)  // 256 bytes
        for name in [long, longUTF8] {
            await #expect(throws: Errno.ENAMETOOLONG) { try await h.fs.lookup(parent: Harness.root, name: name) }
            await #expect(throws: Errno.ENAMETOOLONG) {
                try await h.fs.create(parent: Harness.root, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
            }
            await #expect(throws: Errno.ENAMETOOLONG) { try await h.fs.mkdir(parent: Harness.root, name: name, mode: 0o755) }
        }
        for name in ["a\nb", "a\rb", "\n"] {
            await #expect(throws: Errno.EINVAL) {
                try await h.fs.create(parent: Harness.root, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
            }
            await #expect(throws: Errno.EINVAL) { try await h.fs.mkdir(parent: Harness.root, name: name, mode: 0o755) }
        }
        // 255 bytes is fine.
        let ok = String(repeating: "k", count: 255)
        try await h.createFile("", ok, Data("1".utf8))
        #expect(h.store.object(ok) != nil)
        #expect(h.store.count("write") == 1)
        // A full path over 1024 bytes.
        var parent = Harness.root
        for i in 0..<4 {
            parent = try await h.fs.mkdir(parent: parent, name: String(repeating: Character(String(i)), count: 250), mode: 0o755).attributes.ino
        }
        await #expect(throws: Errno.ENAMETOOLONG) {
            try await h.fs.create(parent: parent, name: String(repeating: "z", count: 60), mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        }
    }

    @Test func readOnlyMountReturnsEROFSForEveryChange() async throws {
        let h = Harness { $0.readOnly = true }
        h.store.put("d/f", "x")
        let dir = try await h.ino("d")
        let ino = try await h.ino("d/f")
        h.store.resetCounts()
        await #expect(throws: Errno.EROFS) { try await h.fs.create(parent: dir, name: "n", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT)) }
        await #expect(throws: Errno.EROFS) { try await h.fs.mkdir(parent: dir, name: "m", mode: 0o755) }
        await #expect(throws: Errno.EROFS) { try await h.fs.unlink(parent: dir, name: "f") }
        await #expect(throws: Errno.EROFS) { try await h.fs.rmdir(parent: Harness.root, name: "d") }
        await #expect(throws: Errno.EROFS) { try await h.fs.rename(parent: dir, name: "f", newParent: dir, newName: "g", flags: 0) }
        await #expect(throws: Errno.EROFS) { try await h.setXattr(ino, "user.k", "v") }
        await #expect(throws: Errno.EROFS) { try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY)) }
        await #expect(throws: Errno.EROFS) { try await h.fs.open(ino: ino, flags: OpenFlags(O_RDWR)) }
        await #expect(throws: Errno.EROFS) { try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(size: 0)) }
        await #expect(throws: Errno.EROFS) { try await h.fs.setattr(ino: ino, fh: nil, changes: SetAttributes(mtime: 1)) }
        #expect(h.store.count("write") + h.store.count("patch") + h.store.count("delete") + h.store.count("copy") == 0)
        // Reading still works, and permissions show no write bits.
        #expect(try await h.readAll(ino: ino) == Data("x".utf8))
        #expect(try await h.getattr(ino).permissions & 0o222 == 0)
    }

    @Test func missingThings() async throws {
        let h = Harness()
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: Harness.root, name: "nope") }
        await #expect(throws: Errno.ENOENT) { try await h.fs.getattr(ino: 9999) }
        await #expect(throws: Errno.EBADF) { try await h.fs.read(ino: 1, fh: 4242, offset: 0, size: 1) }
        h.store.put("f", "x")
        let ino = try await h.ino("f")
        h.store.removeBehind("f")
        h.clock.advance(60)
        await #expect(throws: Errno.ENOENT) { try await h.fs.getattr(ino: ino) }
        await #expect(throws: Errno.ENOENT) { try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY)) }
    }
}

/// Stage files (not sidecars) in a harness's cache directory: the files with local content.
func stageFiles(_ h: Harness) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory)) ?? []).filter { $0.hasPrefix("stage-") && !$0.contains(".") }
}

/// Files (not sidecars) in a harness's lost+found.
func lostFiles(_ h: Harness) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound)) ?? []).filter { !$0.hasSuffix(".json") }
}

/// Waits for background work (it runs on real time) to make `condition` hold: polled until it
/// does, within the generous `eventuallyCeiling` (Tests/TestSupport/Eventually.swift), else the
/// test fails here.
func waitUntil(_ condition: () async -> Bool, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    if await eventually(condition) { return }
    Issue.record("condition not met within \(eventuallyCeiling)", sourceLocation: sourceLocation)
}
