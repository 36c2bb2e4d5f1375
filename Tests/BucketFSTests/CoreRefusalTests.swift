@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Refusals a shell sees (docs/SEMANTICS.md §3 "Refused creates", §5 "lost+found"): a create the
/// store's rules refuse fails at create with EACCES, asked once per directory and content type;
/// one lost+found entry per refused file, never an empty one. And a listing that costs what it
/// shows: a store whose listings carry names only is asked for no metadata by readdir.
@Suite struct CoreRefusalTests {
    /// `ro/` refuses every write; `img/` only takes `image/…`; the rest takes anything.
    static func rules(_ name: String, _ contentType: String?, _ size: Int64) -> Bool {
        if name.hasPrefix("ro/") { return false }
        if name.hasPrefix("img/") { return contentType?.hasPrefix("image/") == true }
        if name.hasPrefix("small/") { return size < 10 }
        return true
    }

    func create(_ h: Harness, _ dir: String, _ name: String) async throws(Errno) -> (UInt64, UInt64) {
        let (e, fh) = try await h.fs.create(parent: try await h.ino(dir), name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        return (e.attributes.ino, fh)
    }

    @Test func aCreateTheRulesRefuseFailsAtOnceAndTheAnswerIsKeptPerDirectory() async throws {
        let h = Harness()
        h.store.setWriteRules(Self.rules)
        h.store.put("ro/readme.txt", "x")
        h.store.put("img/a.png", "x")
        await #expect(throws: Errno.EACCES) { try await create(h, "ro", "new.txt") }
        #expect(h.store.count("probe") == 1)
        // The same directory and type: the kept answer, no request.
        await #expect(throws: Errno.EACCES) { try await create(h, "ro", "other.txt") }
        #expect(h.store.count("probe") == 1)
        // Nothing staged, nothing written, nothing in lost+found.
        #expect(stageFiles(h).isEmpty && lostFiles(h).isEmpty)
        #expect(h.store.count("write") == 0)
        // Another type in the same directory is asked on its own: img/ refuses text, takes images.
        await #expect(throws: Errno.EACCES) { try await create(h, "img", "notes.txt") }
        let (ino, fh) = try await create(h, "img", "b.png")
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("png".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.object("img/b.png") != nil)
        #expect(h.store.count("probe") == 3)
        // After the answer's time, the next create asks again.
        h.clock.advance(h.config.createAnswerTTL + 1)
        await #expect(throws: Errno.EACCES) { try await create(h, "ro", "third.txt") }
        #expect(h.store.count("probe") == 4)
    }

    @Test func aStoreWithoutRulesIsNeverAsked() async throws {
        let h = Harness()
        try await h.createFile("", "f.txt", Data("1".utf8))
        #expect(h.store.count("probe") == 0)
        #expect(h.core.createAnswers.count == 0)
    }

    @Test func aProbeThatFailsLeavesTheJudgementToTheUpload() async throws {
        let h = Harness()
        h.store.setWriteRules(Self.rules)
        h.store.failNext("probe", with: .timeout(message: "no answer"))
        let (ino, fh) = try await create(h, "", "f.txt")
        #expect(h.core.createAnswers.count == 0)
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("1".utf8))
        try await h.fs.release(ino: ino, fh: fh)
        #expect(h.store.object("f.txt") != nil)
    }

    /// A shell's `echo x > f`: open, dup2 and close (a flush of the empty file), write, close.
    /// The first flush sends nothing (the empty file waits for its release); the second is the
    /// one upload, refused, and keeps the data: one request, one entry.
    @Test func aShellRedirectRefusedAtCloseIsOneUploadAndOneEntry() async throws {
        let h = Harness { $0.retryBackoffMax = 0.02 }
        // The rules refuse at the upload only (as the emulator does: no probe answer).
        h.store.failNext("write", times: 2, with: .unauthorized(path: "f", message: "Permission denied."))
        let (ino, fh) = try await create(h, "", "f")
        try await h.fs.flush(ino: ino, fh: fh)
        #expect(h.store.count("write") == 0, "the first close of an empty new file uploads nothing")
        #expect(lostFiles(h).isEmpty)
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("x\n".utf8))
        await #expect(throws: Errno.EACCES) { try await h.fs.flush(ino: ino, fh: fh) }
        await #expect(throws: Errno.EACCES) { try await h.fs.release(ino: ino, fh: fh) }
        #expect(h.store.count("write") == 1)
        let lost = lostFiles(h)
        #expect(lost.count == 1)
        #expect(FileManager.default.contents(atPath: h.config.lostAndFound + "/" + lost[0]) == Data("x\n".utf8))
    }

    /// Refused by size at an fsync: every later write, flush and close of that open file says
    /// EACCES too, and the entry holds what the fsync handed over.
    @Test func aRefusedOpenFileRefusesEveryLaterWriteAndClose() async throws {
        let h = Harness { $0.retryBackoffMax = 0.02 }
        h.store.setWriteRules(Self.rules)
        h.store.put("small/keep", "x")
        let (ino, fh) = try await create(h, "small", "big")
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data(repeating: 1, count: 20))
        await #expect(throws: Errno.EACCES) { try await h.fs.fsync(ino: ino, fh: fh, dataOnly: false) }
        #expect(lostFiles(h).count == 1)
        await #expect(throws: Errno.EACCES) { _ = try await h.fs.write(ino: ino, fh: fh, offset: 20, data: Data(repeating: 2, count: 5)) }
        await #expect(throws: Errno.EACCES) { try await h.fs.flush(ino: ino, fh: fh) }
        await #expect(throws: Errno.EACCES) { try await h.fs.release(ino: ino, fh: fh) }
        #expect(h.store.count("write") == 1, "refused once, never sent again")
        let lost = lostFiles(h)
        #expect(lost.count == 1)
        #expect(FileManager.default.contents(atPath: h.config.lostAndFound + "/" + lost[0])?.count == 20)
        let sidecars = ((try? FileManager.default.contentsOfDirectory(atPath: h.config.lostAndFound)) ?? []).filter { $0.hasSuffix(".json") }
        #expect(sidecars.count == 1)
    }

    /// A server that checks the rules only with the bytes (as the Firebase emulator does: the
    /// probe says allowed): the first `.txt` refused at its close turns the directory's answer for
    /// `.txt` to refused at once, so the next create of a `.txt` there fails at open, with no
    /// request; another type still asks.
    @Test func aRefusalAtCloseRefusesTheNextCreateAtOpen() async throws {
        let h = Harness()
        h.store.failNext("write", with: .unauthorized(path: "pub/a.txt", message: "Permission denied."))
        h.store.put("pub/keep", "x")
        let (ino, fh) = try await create(h, "pub", "a.txt")
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("refused\n".utf8))
        await #expect(throws: Errno.EACCES) { try await h.fs.flush(ino: ino, fh: fh) }
        await #expect(throws: Errno.EACCES) { try await h.fs.release(ino: ino, fh: fh) }
        let writes = h.store.count("write"), probes = h.store.count("probe")
        await #expect(throws: Errno.EACCES) { _ = try await create(h, "pub", "b.txt") }
        #expect(h.store.count("write") == writes && h.store.count("probe") == probes, "refused at open, with no request")
        // The same name again (a shell running the same command): EACCES, not ENOENT.
        await #expect(throws: Errno.EACCES) { _ = try await create(h, "pub", "a.txt") }
        // Another content type is its own question.
        let (ino2, fh2) = try await create(h, "pub", "c.jpg")
        _ = try await h.fs.write(ino: ino2, fh: fh2, offset: 0, data: Data("img".utf8))
        try await h.fs.release(ino: ino2, fh: fh2)
        #expect(h.store.data("pub/c.jpg") == Data("img".utf8))
    }

    /// A store whose listings carry names only (v0) and would read each item's metadata: readdir
    /// asks for names only; a stat reads metadata, of the next files listed too.
    @Test func readdirAsksForNamesOnlyAndStatsReadMetadata() async throws {
        let store = NamesOnlyStore()
        for i in 0..<40 { store.inner.put(String(format: "d/f%02d", i), "x") }
        var c = MountConfig()
        c.cacheDirectory = NSTemporaryDirectory() + "bucketfs-core-tests-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: c.cacheDirectory) }
        let fs = CheckedCore(try BucketFileSystem(store: store, config: c), every: 1)
        let d = try await fs.lookup(parent: Harness.root, name: "d").attributes.ino
        store.inner.resetCounts()
        let fh = try await fs.opendir(ino: d)
        let entries = try await fs.readdir(ino: d, fh: fh, offset: 0, limit: 1000)
        fs.releasedir(ino: d, fh: fh)
        #expect(entries.count == 40)
        #expect(entries.allSatisfy { !$0.attributesKnown && $0.entry.attributes.type == .regular })
        #expect(store.inner.count("get") == 0)
        #expect(store.inner.count("list") >= 1)
        // ls -l: a lookup of each, in order; all 40 read, each once.
        for e in entries {
            let got = try await fs.lookup(parent: d, name: e.name)
            #expect(got.attributes.size == 1)
        }
        #expect(store.inner.count("get") == 40)
    }
}

/// A `MemoryStore` answering as `FirebaseStore` does for `namesOnly`: items by name, no
/// placeholder read.
final class NamesOnlyStore: ForwardingStore, @unchecked Sendable {
    let inner = MemoryStore()
    func list(_ request: ListRequest) async throws -> ListPage {
        var page = try await inner.list(request)
        guard request.namesOnly else { return page }
        page.names = page.items.filter { $0.name != request.prefix && !$0.name.hasSuffix("/") }.map(\.name)
        page.items = page.items.filter { $0.name.hasSuffix("/") && $0.name != request.prefix }
        page.metadataSkipped = true
        return page
    }
}
