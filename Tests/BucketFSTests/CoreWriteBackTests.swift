@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// `--write-back` (docs/SEMANTICS.md §3): close returns once the data is staged, uploads run in the
/// background in the order files were closed, fsync and shutdown still wait, failures end in
/// the bucket or in lost+found as in the default mode.
@Suite struct CoreWriteBackTests {
    static func harness(concurrency: Int = 8, retries: Int = 5) -> Harness {
        Harness { c in
            c.writeBack = true
            c.uploadConcurrency = concurrency
            c.uploadRetries = retries
            c.retryBackoffMax = 0.05
        }
    }

    /// create + write + close, returning the inode.
    static func write(_ h: Harness, _ name: String, _ data: Data, parent: UInt64 = Harness.root) async throws -> UInt64 {
        let (e, fh) = try await h.fs.create(parent: parent, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: data)
        try await h.fs.flush(ino: e.attributes.ino, fh: fh)
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        return e.attributes.ino
    }

    @Test func closeReturnsBeforeTheUploadAndTheStagedFileShowsMeanwhile() async throws {
        let h = Self.harness()
        let hold = h.store.holdNextWrites()
        let data = Data.pattern(100_000, seed: 3)
        let ino = try await Self.write(h, "a.bin", data)
        // close returned; the upload waits in the store.
        _ = await eventually { hold.waiting > 0 }
        #expect(hold.waiting == 1)
        #expect(h.store.object("a.bin") == nil)
        #expect(try await h.getattr(ino).size == 100_000)
        #expect(try await h.names("").contains("a.bin"))
        #expect(try await h.readAll("a.bin") == data)
        let s = h.core.statistics()
        #expect(s.uploadingFiles == 1 && s.dirtyFiles == 1 && s.pendingBytes == 100_000)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.data("a.bin") == data)
        #expect(h.store.writes.first?.preconditions == Preconditions(ifGenerationMatch: 0))
        let after = h.core.statistics()
        #expect(after.dirtyFiles == 0 && after.pendingBytes == 0 && after.stagedFiles == 0 && after.failedUploads == 0)
    }

    @Test func uploadsStartInTheOrderFilesWereClosed() async throws {
        let h = Self.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        for i in 0..<6 { _ = try await Self.write(h, "f\(i)", Data("\(i)".utf8)) }
        #expect(h.core.statistics().queuedUploads == 5)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name) == (0..<6).map { "f\($0)" })
    }

    @Test func atMostConcurrencyUploadsAtOnce() async throws {
        let h = Self.harness(concurrency: 3)
        let hold = h.store.holdNextWrites(times: 10)
        for i in 0..<10 { _ = try await Self.write(h, "f\(i)", Data("\(i)".utf8)) }
        _ = await eventually { hold.waiting >= 3 }
        try await Task.sleep(for: .milliseconds(50))
        #expect(hold.waiting == 3)
        #expect(h.core.statistics().queuedUploads == 7)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.count("write") == 10)
    }

    /// The queue's bound (`--write-back-max-files`): a close that queues its file past it waits
    /// until an upload starts, so no more files wait than the bound.
    @Test func aQueuePastItsBoundHoldsTheCloseUntilAnUploadStarts() async throws {
        let h = Harness { c in
            c.writeBack = true
            c.uploadConcurrency = 1
            c.writeBackMaxFiles = 3
        }
        let hold = h.store.holdNextWrites(times: 10)
        for i in 0..<4 { _ = try await Self.write(h, "f\(i)", Data("\(i)".utf8)) }
        _ = await eventually { hold.waiting >= 1 }
        #expect(h.core.statistics().queuedUploads == 3, "f0 under way, three waiting: every close returned")
        let closed = Flag()
        let fifth = Task {
            _ = try await Self.write(h, "f4", Data("4".utf8))
            closed.set()
        }
        // Wait until f4 is queued (polled: on a loaded machine the task may take a while to get
        // there), then give its close time to return if it wrongly would.
        #expect(await eventually { h.core.statistics().queuedUploads >= 4 })
        #expect(h.core.statistics().queuedUploads == 4)
        try await Task.sleep(for: .milliseconds(300))
        #expect(!closed.value, "the close past the bound waits")
        hold.release()
        try await fifth.value
        #expect(closed.value)
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name).sorted() == (0..<5).map { "f\($0)" })
    }

    /// A close waiting for room is woken, not polling: cancelled (an interrupted close), it returns
    /// at once, though no upload started; and an upload's start wakes the others.
    @Test func anInterruptedCloseStopsWaitingForRoom() async throws {
        let h = Harness { c in
            c.writeBack = true
            c.uploadConcurrency = 1
            c.writeBackMaxFiles = 1
        }
        let hold = h.store.holdNextWrites(times: 10)
        for i in 0..<2 { _ = try await Self.write(h, "f\(i)", Data("\(i)".utf8)) }
        _ = await eventually { hold.waiting >= 1 }
        let closed = Flag()
        let third = Task {
            _ = try await Self.write(h, "f2", Data("2".utf8))
            closed.set()
        }
        #expect(await eventually { h.core.statistics().queuedUploads >= 2 })
        #expect(!closed.value, "the close past the bound waits")
        third.cancel()
        #expect(await eventually { closed.value }, "an interrupted close stops waiting")
        #expect(hold.waiting == 1, "no upload started meanwhile")
        #expect(h.core.uploads.invariantViolations().isEmpty)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name).sorted() == ["f0", "f1", "f2"])
    }

    /// Bytes waiting count too (`--write-back-max-mb`).
    @Test func bytesWaitingPastTheBoundHoldTheClose() async throws {
        let h = Harness { c in
            c.writeBack = true
            c.uploadConcurrency = 1
            c.writeBackMaxBytes = 150_000
        }
        let hold = h.store.holdNextWrites(times: 10)
        _ = try await Self.write(h, "a", Data.pattern(100_000, seed: 1))   // under way
        _ = try await Self.write(h, "b", Data.pattern(100_000, seed: 2))   // waits: 100,000 bytes
        let closed = Flag()
        let third = Task {
            _ = try await Self.write(h, "c", Data.pattern(100_000, seed: 3))  // 200,000 waiting: past
            closed.set()
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(!closed.value)
        hold.release()
        try await third.value
        await h.core.uploads.drained()
        #expect(h.store.count("write") == 3)
    }

    @Test func fsyncWaitsForItsFile() async throws {
        let h = Self.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        _ = try await Self.write(h, "first", Data("1".utf8))  // holds the one upload slot
        // (Once its upload is held: else the fsync below could reach the store first and be the held one.)
        while hold.waiting < 1 { try await Task.sleep(nanoseconds: 1_000_000) }
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "second", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("2".utf8))
        try await h.fs.fsync(ino: e.attributes.ino, fh: fh, dataOnly: false)
        #expect(h.store.data("second") == Data("2".utf8), "fsync returned with the object in the bucket")
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.count("write") == 2, "the close after fsync uploaded nothing more")
    }

    @Test func aFileDeletedBeforeItsUploadStartsIsNeverUploaded() async throws {
        let h = Self.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        _ = try await Self.write(h, "first", Data("1".utf8))
        _ = try await Self.write(h, "doomed", Data("x".utf8))
        try await h.fs.unlink(parent: Harness.root, name: "doomed")
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.writes.map(\.name) == ["first"])
        #expect(h.store.object("doomed") == nil)
        #expect(try await !h.names("").contains("doomed"))
    }

    @Test func aFileWrittenAgainBeforeItsUploadUploadsTheNewContentOnce() async throws {
        let h = Self.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        _ = try await Self.write(h, "first", Data("1".utf8))
        let ino = try await Self.write(h, "again", Data("old".utf8))
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("new!".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        hold.release()
        await h.core.uploads.drained()
        #expect(h.store.data("again") == Data("new!".utf8))
        #expect(h.store.writes.filter { $0.name == "again" }.count == 1, "queued once, uploaded once")
    }

    @Test func aRenamedFileIsUploadedUnderItsNewNameOnly() async throws {
        let h = Self.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        _ = try await Self.write(h, "first", Data("1".utf8))
        _ = try await Self.write(h, "old-name", Data("data".utf8))
        let renamed = Task { try await h.fs.rename(parent: Harness.root, name: "old-name", newParent: Harness.root, newName: "new-name", flags: 0) }
        try await Task.sleep(for: .milliseconds(20))
        hold.release()
        try await renamed.value
        await h.core.uploads.drained()
        #expect(h.store.object("old-name") == nil)
        #expect(h.store.data("new-name") == Data("data".utf8))
    }

    @Test func aFailedUploadIsRetriedThenKeptInLostAndFound() async throws {
        let h = Self.harness(retries: 2)
        h.store.failNext("write", times: 10, with: .unknown(status: 503, message: "injected"))
        let data = Data("precious".utf8)
        let ino = try await Self.write(h, "f", data)  // close succeeds: the data is staged
        await h.core.uploads.drained()
        #expect(h.core.statistics().failedUploads == 1)
        // The background attempts run out, then the data is in lost+found.
        _ = await eventually { h.core.statistics().lostAndFoundEntries == 1 }
        #expect(h.core.statistics().lostAndFoundEntries == 1)
        let kept = try FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound).filter { !$0.hasSuffix(".json") && !$0.hasPrefix(".") }
        #expect(kept.count == 1)
        #expect(kept.first.flatMap { FileManager.default.contents(atPath: h.config.lostAndFound + "/" + $0) } == data)
        #expect(h.store.object("f") == nil)
        // Given up, the file shows the bucket's state again: a new file that never got there is gone
        // (the entry is counted as soon as it is written, just before the file is given up and its
        // stage dropped).
        _ = await eventually { h.core.statistics().stagedFiles == 0 }
        await #expect(throws: Errno.ENOENT) { _ = try await h.fs.getattr(ino: ino) }
    }

    @Test func shutdownUploadsEveryQueuedFile() async throws {
        let h = Self.harness(concurrency: 1)
        let hold = h.store.holdNextWrites()
        for i in 0..<5 { _ = try await Self.write(h, "f\(i)", Data("\(i)".utf8)) }
        let done = Task { await h.core.shutdown(within: .seconds(10)) }
        try await Task.sleep(for: .milliseconds(20))
        hold.release()
        await done.value
        #expect(Set(h.store.writes.map(\.name)) == Set((0..<5).map { "f\($0)" }))
        #expect(h.store.count("write") == 5)
        #expect(h.core.statistics().stagedFiles == 0)
    }

    @Test func withoutWriteBackCloseStillReportsTheUpload() async throws {
        let h = Harness()
        h.store.failNext("write", times: 1, with: .preconditionFailed(path: "f"))
        await #expect(throws: Errno.self) { _ = try await Self.write(h, "f", Data("x".utf8)) }
    }
}

/// A flag set from one task and read from another.
final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var set_ = false
    func set() { lock.withLock { set_ = true } }
    var value: Bool { lock.withLock { set_ } }
}
