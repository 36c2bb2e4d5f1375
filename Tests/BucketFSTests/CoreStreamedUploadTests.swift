@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// Uploads that stream while a new file is written (docs/SEMANTICS.md §3.3, "Streamed uploads"):
/// an in-order writer's session starts and sends chunks before close, and close sends only the
/// rest; whatever could make the streamed bytes differ from the file's (a seek back, a truncate,
/// a rename, another writer, changed metadata, a failed request) cancels the session, and the
/// file is uploaded whole at close, exactly its bytes, once.
@Suite struct CoreStreamedUploadTests {
    static let mib = 1 << 20

    /// A mount whose store streams, starting after 1 MiB and sending 1 MiB chunks.
    func harness(_ configure: (inout MountConfig) -> Void = { _ in }) -> Harness {
        let store = MemoryStore()
        store.streams = true
        return Harness(store: store) { c in
            c.streamUploads = true
            c.streamUploadStart = Int64(Self.mib)
            c.streamUploadChunk = Int64(Self.mib)
            configure(&c)
        }
    }

    /// Deterministic bytes, different at every offset of a few MiB.
    func bytes(_ count: Int, seed: UInt8 = 7) -> Data {
        Data((0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 9) ^ Int(seed)) })
    }

    /// Writes `data` from `offset` in 128 KiB writes (as the kernel hands them over).
    func write(_ h: Harness, _ ino: UInt64, _ fh: UInt64, _ data: Data, at offset: Int = 0) async throws {
        var at = 0
        while at < data.count {
            let n = min(128 << 10, data.count - at)
            #expect(try await h.fs.write(ino: ino, fh: fh, offset: UInt64(offset + at), data: data.subdata(in: at..<(at + n))) == n)
            at += n
        }
    }

    /// Waits (a bound on liveness, not on speed) until `condition` holds.
    func eventually(_ what: Comment, _ condition: () -> Bool) async throws {
        let end = ContinuousClock.now + .seconds(60)
        while !condition() {
            if ContinuousClock.now > end { Issue.record("never: \(what)"); return }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func chunks(_ h: Harness) -> [StreamEvent] { h.store.streamEvents.filter { $0.kind == .chunk } }

    @Test func anInOrderWriterUploadsBeforeCloseAndCloseSendsOnlyTheRest() async throws {
        let h = harness()
        let data = bytes(5 * Self.mib + 1234)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "ckpt.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        try await write(h, ino, fh, data)
        // Before close: the session started and its chunks went, the object is not there yet.
        try await eventually("4 MiB sent before close") { (chunks(h).last?.to ?? 0) >= Int64(4 * Self.mib) }
        #expect(h.store.object("ckpt.bin") == nil)
        #expect(h.store.count("write") == 0)
        let sentBeforeClose = chunks(h).last?.to ?? 0
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("ckpt.bin") == data)
        let events = h.store.streamEvents
        #expect(events.first?.kind == .start)
        #expect(!events.contains { $0.kind == .cancel })
        let finish = try #require(events.last)
        #expect(finish.kind == .finish)
        // Close sent the rest only: from what the chunks had brought, to the end.
        #expect(finish.from == sentBeforeClose && finish.to == Int64(data.count))
        #expect(finish.to - finish.from < Int64(2 * Self.mib))
        // Chunks are contiguous from 0, each on the 256 KiB grain, nothing sent twice.
        var at: Int64 = 0
        for c in chunks(h) {
            #expect(c.from == at && c.to % (256 << 10) == 0)
            at = c.to
        }
        #expect(h.store.count("write") == 1, "one generation")
        let w = try #require(h.store.writes.first)
        #expect(w.preconditions == Preconditions(ifGenerationMatch: 0))
        #expect(w.metadata.contentType == "application/octet-stream")
        #expect(try await h.readAll(ino: ino) == data)
    }

    @Test func aSmallFileAndAStoreThatCannotStreamUploadWholeAtClose() async throws {
        let h = harness()
        let small = bytes(Self.mib / 2)
        try await h.createFile("", "small.bin", small)
        #expect(h.store.streamEvents.isEmpty)
        #expect(h.store.data("small.bin") == small)
        h.store.streams = false
        let big = bytes(3 * Self.mib)
        try await h.createFile("", "big.bin", big)
        #expect(h.store.streamEvents.isEmpty)
        #expect(h.store.data("big.bin") == big)
        #expect(h.store.count("write") == 2)
    }

    @Test func writeBackAndTheOptionOffDoNotStream() async throws {
        for wb in [true, false] {
            let h = harness { c in if wb { c.writeBack = true } else { c.streamUploads = false } }
            let data = bytes(3 * Self.mib)
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
            try await write(h, e.attributes.ino, fh, data)
            try await h.fs.fsync(ino: e.attributes.ino, fh: fh, dataOnly: false)
            try await h.fs.release(ino: e.attributes.ino, fh: fh)
            #expect(h.store.streamEvents.isEmpty)
            #expect(h.store.data("f.bin") == data)
        }
    }

    /// What each way of leaving the in-order path does: the session is cancelled, never
    /// finished, and close uploads the file whole, exactly its bytes, once.
    enum Departure: String, CaseIterable { case seekBack, hole, truncate, rename, secondWriter, xattr }

    @Test(arguments: Departure.allCases)
    func leavingTheInOrderPathCancelsTheStream(_ how: Departure) async throws {
        let h = harness()
        var data = bytes(3 * Self.mib)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_RDWR | O_CREAT))
        let ino = e.attributes.ino
        try await write(h, ino, fh, data)
        try await eventually("a chunk sent") { !chunks(h).isEmpty }
        var name = "f.bin"
        var other: UInt64? = nil
        switch how {
        case .seekBack:
            let patch = bytes(1000, seed: 99)
            try await write(h, ino, fh, patch, at: 100)
            data.replaceSubrange(100..<1100, with: patch)
        case .hole:
            let tail = bytes(10, seed: 3)
            try await write(h, ino, fh, tail, at: data.count + 5000)
            data.append(Data(count: 5000))
            data.append(tail)
        case .truncate:
            _ = try await h.fs.setattr(ino: ino, fh: fh, changes: SetAttributes(size: UInt64(2 * Self.mib)))
            data = data.prefix(2 * Self.mib)
        case .rename:
            try await h.fs.rename(parent: Harness.root, name: "f.bin", newParent: Harness.root, newName: "g.bin", flags: 0)
            name = "g.bin"
        case .secondWriter:
            let fh2 = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY))
            other = fh2
            let more = bytes(300_000, seed: 5)
            try await write(h, ino, fh2, more, at: data.count)
            data.append(more)
        case .xattr:
            try await h.fs.setxattr(ino: ino, name: "user.color", value: Array("blue".utf8), flags: 0)
        }
        // More in-order writes after it do not bring the stream back.
        let tail = bytes(2 * Self.mib, seed: 11)
        try await write(h, ino, fh, tail, at: data.count)
        data.append(tail)
        if let other { try await h.fs.release(ino: ino, fh: other) }
        try await h.fs.flush(ino: ino, fh: fh)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data(name) == data, "\(how)")
        if how == .rename { #expect(h.store.object("f.bin") == nil) }
        if how == .xattr { #expect(h.store.object(name)?.customMetadata["color"] == "blue") }
        let events = h.store.streamEvents
        #expect(events.contains { $0.kind == .cancel }, "\(how): the session is cancelled")
        #expect(!events.contains { $0.kind == .finish }, "\(how): never finished")
        #expect(h.store.count("write") == 1, "\(how): one generation")
        #expect(h.store.writes.first?.data == data)
    }

    @Test func anUnlinkCancelsTheStreamAndMakesNoObject() async throws {
        let h = harness()
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "gone.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, bytes(3 * Self.mib))
        try await eventually("a chunk sent") { !chunks(h).isEmpty }
        try await h.fs.unlink(parent: Harness.root, name: "gone.bin")
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        try await eventually("the session cancelled") { h.store.streamEvents.contains { $0.kind == .cancel } }
        #expect(h.store.object("gone.bin") == nil)
        #expect(h.store.count("write") == 0)
    }

    /// A chunk refused mid-stream (a 503 after the store's own retries): the stream is given up
    /// and close uploads the whole file. Its start refused: the same.
    @Test(arguments: ["chunk", "start upload"])
    func aFailedStreamRequestFallsBackToTheWholeUpload(_ op: String) async throws {
        let h = harness()
        h.store.failNext(op, with: .unknown(status: 503, message: "Service Unavailable"))
        let data = bytes(4 * Self.mib + 77)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, data)
        try await eventually("the failed request") { h.store.count(op) >= 1 }
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.data("f.bin") == data)
        #expect(h.store.count("write") == 1)
        #expect(!h.store.streamEvents.contains { $0.kind == .finish })
    }

    /// A session start the server refuses for good (400, 401, 403): the start is the insert the
    /// whole upload would send, so that refusal is the close's result; the file is not sent again
    /// (a second insert after a non-retryable answer), the data is in lost+found.
    @Test(arguments: [("start upload", StorageError.invalidArgument(message: "400")),
                      ("start upload", .unauthenticated(message: "401")),
                      ("start upload", .unauthorized(path: "f.bin", message: "403"))])
    func aRefusedStreamStartIsTheClosesResult(_ op: String, _ error: StorageError) async throws {
        let h = harness()
        h.store.failNext(op, with: error)
        let data = bytes(4 * Self.mib + 77)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, data)
        try await eventually("the refused request") { h.store.count(op) >= 1 }
        let refused = errno(for: error)
        #expect(BucketFileSystem.isRefusal(refused))
        await #expect(throws: refused) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        #expect(h.store.count("write") == 0)
        #expect(h.store.object("f.bin") == nil)
        let lost = try FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound).filter { !$0.hasSuffix(".json") }
        #expect(lost.count == 1)
    }

    /// A chunk refused (a server or proxy that does not take chunks of unknown total answers
    /// 400): the stream falls back, and the file is uploaded whole at close.
    @Test func aRefusedChunkFallsBackToTheWholeUpload() async throws {
        let h = harness()
        h.store.failNext("chunk", with: .invalidArgument(message: "Content-Range bytes 0-1048575/* is not accepted"))
        let data = bytes(4 * Self.mib + 77)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, data)
        try await eventually("the refused chunk") { h.store.count("chunk") >= 1 }
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        #expect(h.store.data("f.bin") == data)
        #expect(h.store.count("write") == 1)
    }

    /// The last request fails: close reports EIO, the data stays staged, and the background
    /// attempt uploads the whole file: the bucket gets exactly its bytes, never a wrong object.
    @Test func aFailedFinishIsRetriedWhole() async throws {
        let h = harness()
        h.store.failNext("finish", with: .unknown(status: 503, message: "Service Unavailable"))
        let data = bytes(3 * Self.mib + 5)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, data)
        try await eventually("a chunk sent") { !chunks(h).isEmpty }
        await #expect(throws: Errno.EIO) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        #expect(h.store.object("f.bin") == nil)
        try await eventually("the background attempt") { h.store.object("f.bin") != nil }
        #expect(h.store.data("f.bin") == data)
        #expect(h.store.streamEvents.contains { $0.kind == .cancel })
    }

    /// Another writer creates the object while the stream runs: the finish is refused by its
    /// precondition (ifGenerationMatch=0, set at the session's start): ESTALE, the other object
    /// stays, the data is in lost+found.
    @Test func aLostRaceKeepsTheDataInLostAndFound() async throws {
        let h = harness()
        let data = bytes(3 * Self.mib)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, data)
        try await eventually("a chunk sent") { !chunks(h).isEmpty }
        _ = h.store.put("f.bin", Data("theirs".utf8))
        await #expect(throws: Errno.ESTALE) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        #expect(h.store.data("f.bin") == Data("theirs".utf8))
        let lost = try FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound).filter { !$0.hasSuffix(".json") }
        #expect(lost.count == 1)
        #expect(FileManager.default.contents(atPath: h.config.lostAndFound + "/" + lost[0]) == data)
    }

    /// fsync mid-stream finishes it: the object exists with what was written; later writes are
    /// uploaded whole at close (a second generation, as any fsync then close makes).
    @Test func fsyncFinishesTheStream() async throws {
        let h = harness()
        let data = bytes(3 * Self.mib)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        let ino = e.attributes.ino
        try await write(h, ino, fh, data)
        try await eventually("a chunk sent") { !chunks(h).isEmpty }
        try await h.fs.fsync(ino: ino, fh: fh, dataOnly: false)
        #expect(h.store.data("f.bin") == data)
        #expect(h.store.streamEvents.last?.kind == .finish)
        let more = bytes(1000, seed: 1)
        try await write(h, ino, fh, more, at: data.count)
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.data("f.bin") == data + more)
        #expect(h.store.streamEvents.filter { $0.kind == .finish }.count == 1)
    }

    /// A crash mid-stream: the session never got its size, so the bucket has no object; the
    /// next mount keeps the stage as cut off in lost+found (the writer never closed it).
    @Test func aCrashMidStreamLeavesNoObjectAndTheDataCutOff() async throws {
        let h = harness()
        let data = bytes(3 * Self.mib)
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "f.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        try await write(h, e.attributes.ino, fh, data)
        try await eventually("a chunk sent") { !chunks(h).isEmpty }
        let copy = try h.crashedCopy()
        defer { try? FileManager.default.removeItem(atPath: copy) }
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        #expect(h.store.object("f.bin") == nil)
        let kept = try FileManager.default.contentsOfDirectory(atPath: copy + "/lost+found").filter { !$0.hasSuffix(".json") }
        #expect(kept.count == 1 && kept[0].hasSuffix(LostEntry.cutOffSuffix), "\(kept)")
        #expect(FileManager.default.contents(atPath: copy + "/lost+found/" + kept[0]) == data)
        _ = fh
    }
}
