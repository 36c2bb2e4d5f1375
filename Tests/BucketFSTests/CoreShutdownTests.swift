@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// Every way a stage file can end (unmount or SIGTERM in each retry state, unlink,
/// rename over it, a second write) either uploads it, keeps its data in lost+found, or discards
/// it because the user deleted the file — never silently. With the DEFAULT retry schedule
/// (background attempts 1 s, 2 s, 4 s… after a failed close), where unmount meets an attempt in
/// flight.
@Suite struct CoreShutdownTests {
    static let busy = StorageError.unknown(status: 503, message: "busy")

    /// create + write + flush that fails (503): the data is staged, the background attempts start.
    func failedClose(_ h: Harness, _ name: String, _ data: Data) async throws -> (UInt64, UInt64) {
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: data)
        h.store.failNext("write", with: Self.busy)
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        return (e.attributes.ino, fh)
    }

    func stageFiles(_ h: Harness) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory)) ?? []).filter { $0.hasPrefix("stage-") && !$0.contains(".") }
    }

    func lostData(_ h: Harness) -> [Data] {
        lostFiles(h).compactMap { FileManager.default.contents(atPath: h.config.lostAndFound + "/" + $0) }
    }

    @Test func defaultTimingsAreTheOnesTested() {
        let c = MountConfig()
        #expect(c.operationTimeout == 60 && c.uploadRetries == 5 && c.retryBackoffMax == 30)
    }

    @Test func unmountDuringABackgroundAttemptInFlightUploadsTheData() async throws {
        let h = Harness()
        let data = Data.pattern(300_000, seed: 22)
        let (ino, fh) = try await failedClose(h, "up.bin", data)
        try await h.fs.release(ino: ino, fh: fh)
        // The first background attempt (1 s later) reaches a server that does not answer.
        let hold = h.store.holdNextWrites()
        try await waitUntil { hold.waiting == 1 }
        let shutdown = Task { await h.fs.shutdown(within: .seconds(60)) }
        // While that attempt is in flight, nothing is deleted.
        try await Task.sleep(for: .milliseconds(300))
        #expect(stageFiles(h).count == 1, "the stage file went while its upload was in flight")
        hold.release(failing: Self.busy)
        await shutdown.value
        // Unmount's own attempt then succeeds: the data is in the bucket, nothing is left.
        #expect(h.store.data("up.bin") == data)
        #expect(stageFiles(h).isEmpty)
        #expect(lostFiles(h).isEmpty)
    }

    @Test func unmountDuringAnAttemptThatTimesOutKeepsTheDataInLostAndFound() async throws {
        let h = Harness { $0.operationTimeout = 3 }
        let data = Data("precious".utf8)
        let (ino, fh) = try await failedClose(h, "up.txt", data)
        try await h.fs.release(ino: ino, fh: fh)
        let hold = h.store.holdNextWrites(times: 10)  // a server that hangs from now on
        try await waitUntil { hold.waiting == 1 }
        let started = ContinuousClock.now
        await h.fs.shutdown(within: .seconds(3))
        // Bounded: the attempt in flight ends by its deadline (3 s), the rest within the bound.
        #expect(ContinuousClock.now - started < .seconds(8))
        #expect(h.store.data("up.txt") == nil)
        #expect(lostData(h) == [data])
        #expect(stageFiles(h).isEmpty)
    }

    @Test func unmountWhileWaitingForTheNextAttemptTriesOnceMoreThenKeeps() async throws {
        let h = Harness()
        let a = Data("waiting".utf8)
        let (ino, fh) = try await failedClose(h, "a.txt", a)
        try await h.fs.release(ino: ino, fh: fh)
        // In the 1 s pause before the first background attempt, unmount; its attempt fails.
        h.store.failNext("write", times: 1, with: Self.busy)
        let before = h.store.count("write")
        await h.fs.shutdown(within: .seconds(60))
        #expect(h.store.count("write") == before + 1, "unmount's one more attempt")
        #expect(lostData(h) == [a])
        #expect(stageFiles(h).isEmpty)
    }

    @Test func unmountWithAFileStillOpenAndNeverClosedUploadsIt() async throws {
        // The kernel forgets open files at a forced unmount: no flush, no release.
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "open.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("never closed".utf8))
        await h.fs.shutdown(within: .seconds(60))
        #expect(h.store.data("open.txt") == Data("never closed".utf8))
        #expect(stageFiles(h).isEmpty)
    }

    @Test func unmountAfterTheDataWentToLostAndFoundLeavesNothingBehind() async throws {
        let h = Harness { $0.uploadRetries = 1; $0.retryBackoffMax = 0.05 }
        let data = Data("given up".utf8)
        let (ino, fh) = try await failedClose(h, "g.txt", data)
        try await h.fs.release(ino: ino, fh: fh)
        h.store.failNext("write", times: 1, with: Self.busy)
        try await waitUntil { lostFiles(h).count == 1 }
        await h.fs.shutdown(within: .seconds(60))
        #expect(lostData(h) == [data], "kept once, not twice")
        #expect(h.store.data("g.txt") == nil, "given up means not uploaded later behind the user's back")
        #expect(stageFiles(h).isEmpty)
        // No sidecar either: a crash after this would not keep the data a second time.
        let sidecars = ((try? FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory)) ?? []).filter { $0.hasSuffix(".json") }
        #expect(sidecars.isEmpty)
    }

    @Test func unlinkWhileAnUploadIsInFlightDoesNotBringTheNameBack() async throws {
        let h = Harness()
        let (ino, fh) = try await failedClose(h, "gone.txt", Data("soon deleted".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        let hold = h.store.holdNextWrites()
        try await waitUntil { hold.waiting == 1 }
        let unlink = Task { try await h.fs.unlink(parent: Harness.root, name: "gone.txt") }
        try await Task.sleep(for: .milliseconds(200))
        hold.release()  // the in-flight upload lands after all
        try await unlink.value
        // What the upload left is deleted: the name is gone, as `rm` said.
        #expect(h.store.data("gone.txt") == nil)
        await #expect(throws: Errno.ENOENT) { try await h.fs.lookup(parent: Harness.root, name: "gone.txt") }
        try await waitUntil { stageFiles(h).isEmpty }
        #expect(lostFiles(h).isEmpty, "the user deleted it: nothing to keep")
    }

    @Test func unlinkWithAnAttemptPendingStopsTheAttempts() async throws {
        let clock = ManualClock()
        let h = Harness { $0.clock = clock.clock }
        let (ino, fh) = try await failedClose(h, "x.txt", Data("x".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        try await waitUntil { clock.sleeping == 1 }  // the first attempt's pause
        try await h.fs.unlink(parent: Harness.root, name: "x.txt")
        try await waitUntil { stageFiles(h).isEmpty }
        let writes = h.store.count("write")
        #expect(clock.sleeping == 0, "the pending attempt was not stopped")
        clock.advance(by: .seconds(60))  // past any pause: nothing waits to go on
        #expect(h.store.count("write") == writes, "a deleted file was uploaded")
        #expect(h.store.data("x.txt") == nil)
    }

    @Test func renameOverAFileWithAnAttemptPendingStopsItsAttempts() async throws {
        let clock = ManualClock()
        let h = Harness { $0.clock = clock.clock }
        let (ino, fh) = try await failedClose(h, "dst.txt", Data("old local".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        try await waitUntil { clock.sleeping == 1 }  // the first attempt's pause
        try await h.createFile("", "src.txt", Data("new".utf8))
        try await h.fs.rename(parent: Harness.root, name: "src.txt", newParent: Harness.root, newName: "dst.txt", flags: 0)
        try await waitUntil { stageFiles(h).isEmpty }
        #expect(clock.sleeping == 0, "the pending attempt was not stopped")
        clock.advance(by: .seconds(60))  // past any pause: nothing waits to go on
        #expect(h.store.data("dst.txt") == Data("new".utf8))
        #expect(h.store.data("src.txt") == nil)
    }

    @Test func aSecondWriteWhileAttemptsArePendingIsUploadedByItsClose() async throws {
        let h = Harness()
        let (ino, fh) = try await failedClose(h, "w.txt", Data("first".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh2, offset: 0, data: Data("second".utf8))
        try await h.fs.flush(ino: ino, fh: fh2)
        try await h.fs.release(ino: ino, fh: fh2)
        #expect(h.store.data("w.txt") == Data("second".utf8))
        try await waitUntil { stageFiles(h).isEmpty }
        #expect(lostFiles(h).isEmpty)
    }

    @Test func aWriteDuringAnUploadInFlightIsUploadedNext() async throws {
        let h = Harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "r.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("aaaa".utf8))
        let hold = h.store.holdNextWrites()
        let flush = Task { try await h.fs.flush(ino: ino, fh: fh) }
        try await waitUntil { hold.waiting == 1 }
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("bbbb".utf8))
        hold.release()
        try await flush.value
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("r.txt") == Data("bbbb".utf8))
        #expect(stageFiles(h).isEmpty)
    }
}
