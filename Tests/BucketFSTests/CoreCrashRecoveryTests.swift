@testable import BucketFS
import Crypto
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// What a crash leaves (docs/OPERATING.md, "lost+found, and recovering from it"): a file the
/// writer had closed is kept whole, one still open is kept as cut off, and one the bucket already
/// has is not kept; the cache directory's lock names its holder.
@Suite struct CoreCrashRecoveryTests {
    func entries(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir + "/lost+found")) ?? []).filter { !$0.hasSuffix(".json") }.sorted()
    }

    /// Stage files (data, not sidecars) in a cache directory.
    func stages(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasPrefix("stage-") && !$0.contains(".") }.sorted()
    }

    /// Stage sidecars, and any temporary file beside them.
    func sidecars(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasPrefix("stage-") && $0.contains(".") }.sorted()
    }

    func inode(_ path: String) -> UInt64? {
        var st = stat()
        return lstat(path, &st) == 0 ? UInt64(st.st_ino) : nil
    }

    func sidecar(_ path: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path + ".json"))) as! [String: Any]
    }

    @Test func aClosedFileIsKeptWholeAndAnOpenOneAsCutOff() async throws {
        let clock = ManualClock()
        let h = Harness { $0.clock = clock.clock }
        // Closed: its upload failed at close (503), so the stage waits with a sidecar that says closed.
        let (a, fa) = try await h.fs.create(parent: Harness.root, name: "closed.txt", mode: 0o640, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fa, offset: 0, data: Data("whole file".utf8))
        try await h.fs.setxattr(ino: a.attributes.ino, name: "user.color", value: Array("blue".utf8), flags: 0)
        h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.release(ino: a.attributes.ino, fh: fa) }
        // Open: written, never closed.
        let (b, fb) = try await h.fs.create(parent: Harness.root, name: "open.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: b.attributes.ino, fh: fb, offset: 0, data: Data("half of it".utf8))
        let copy = try h.crashedCopy()
        defer { try? FileManager.default.removeItem(atPath: copy) }
        var c = h.config
        c.cacheDirectory = copy
        c.readOnly = true  // uploads nothing: what is complete stays in lost+found
        let second = try BucketFileSystem(store: h.store, config: c)
        #expect(second.leftovers.count == 2)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let kept = entries(copy)
        #expect(kept.count == 2, "\(kept)")
        let whole = try #require(kept.first { $0.hasPrefix("closed.txt.") })
        let cut = try #require(kept.first { $0.hasPrefix("open.bin.") })
        #expect(!whole.hasSuffix(LostEntry.cutOffSuffix))
        #expect(cut.hasSuffix(LostEntry.cutOffSuffix))
        let ws = try sidecar(copy + "/lost+found/" + whole)
        #expect(ws["closed"] as? Bool == true && ws["complete"] as? Bool == true)
        #expect((ws["size"] as? NSNumber)?.intValue == 10 && (ws["bytes"] as? NSNumber)?.intValue == 10)
        let meta = ws["metadata"] as? [String: Any] ?? [:]
        #expect((meta["customMetadata"] as? [String: String])?["color"] == "blue", "\(meta)")
        #expect(meta["mode"] as? String == "640", "\(meta)")
        #expect(ws["md5"] as? String == Data(Insecure_MD5("whole file")).base64EncodedString())
        let cs = try sidecar(copy + "/lost+found/" + cut)
        #expect(cs["closed"] as? Bool == false && cs["complete"] as? Bool == false)
        #expect((cs["reason"] as? String)?.hasPrefix("CUT OFF") == true)
        let all = LostEntry.all(in: copy + "/lost+found")
        #expect(all.entries.count == 2 && all.unreadable.isEmpty)
    }

    @Test func aWriteAfterCloseMarksTheSidecarNotClosedAgain() async throws {
        let clock = ManualClock()
        let h = Harness { $0.clock = clock.clock }
        let (a, fa) = try await h.fs.create(parent: Harness.root, name: "again.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fa, offset: 0, data: Data("one".utf8))
        h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.release(ino: a.attributes.ino, fh: fa) }
        let fh = try await h.fs.open(ino: a.attributes.ino, flags: OpenFlags(O_WRONLY))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fh, offset: 3, data: Data(" two".utf8))
        let copy = try h.crashedCopy()
        defer { try? FileManager.default.removeItem(atPath: copy) }
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let kept = entries(copy)
        #expect(kept.count == 1 && kept[0].hasSuffix(LostEntry.cutOffSuffix), "\(kept)")
        #expect(h.store.data("again.txt") == nil, "a cut-off file was uploaded")
    }

    /// A remount on the same cache directory uploads what a crash left complete: one the bucket
    /// already has is not uploaded again, one it lacks is uploaded with its metadata, one whose
    /// object someone else wrote meanwhile stays in lost+found; nothing else stays.
    @Test func theNextMountUploadsWhatIsCompleteOnceAndNeverOverANewerObject() async throws {
        let clock = ManualClock()
        let h = Harness { $0.clock = clock.clock }
        for name in ["landed.txt", "missing.txt", "raced.txt"] {
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: name, mode: 0o640, flags: OpenFlags(O_WRONLY | O_CREAT))
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("content of \(name)".utf8))
            try await h.fs.setxattr(ino: e.attributes.ino, name: "user.color", value: Array("blue".utf8), flags: 0)
            h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
            await #expect(throws: Errno.EIO) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        }
        let copy = try h.crashedCopy()
        defer { try? FileManager.default.removeItem(atPath: copy) }
        h.store.clearFaults("write")
        // The crash came after landed.txt's upload reached the bucket; someone else wrote raced.txt.
        _ = h.store.put("landed.txt", "content of landed.txt")
        let landed = h.store.object("landed.txt")!.generation
        _ = h.store.put("raced.txt", "theirs")
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
        #expect(stages(copy).count == 3)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let left = entries(copy)
        #expect(left.count == 1 && left[0].hasPrefix("raced.txt."), "\(left)")
        #expect(h.store.object("landed.txt")!.generation == landed, "not uploaded twice")
        #expect(h.store.data("missing.txt") == Data("content of missing.txt".utf8))
        let meta = h.store.object("missing.txt")!.customMetadata
        #expect(meta.values.contains("blue"), "the xattr: \(meta)")
        #expect(meta[PosixAttributes.modeKey] != nil, "\(meta)")
        #expect(h.store.data("raced.txt") == Data("theirs".utf8))
        #expect(stages(copy).isEmpty && sidecars(copy).isEmpty, "\(stages(copy)) \(sidecars(copy))")
    }

    /// The server still fails every write: missing.txt cannot be uploaded and stays.
    @Test func aFileTheBucketHasIsNotKeptAndOthersAre() async throws {
        let clock = ManualClock()
        let h = Harness { $0.clock = clock.clock }
        for name in ["landed.txt", "missing.txt"] {
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("content of \(name)".utf8))
            h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
            await #expect(throws: Errno.EIO) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        }
        let copy = try h.crashedCopy()
        defer { try? FileManager.default.removeItem(atPath: copy) }
        // The crash came after landed.txt's upload reached the bucket.
        _ = h.store.put("landed.txt", "content of landed.txt")
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
        #expect(stages(copy).count == 2)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let left = entries(copy)
        #expect(left.count == 1 && left[0].hasPrefix("missing.txt."), "\(left)")
    }

    /// A cache directory as a crash of a write-back mount leaves it, made by hand: for each
    /// `(object, content, closed)` a stage file and its sidecar (`StageRecord`, as `StagingArea`
    /// writes it), plus one stage file never dirty (no sidecar). Returns the directory.
    func crashedDirectory(_ files: [(String, String, Bool)]) throws -> String {
        let dir = NSTemporaryDirectory() + "bucketfs-crashed-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for (i, (object, content, closed)) in files.enumerated() {
            let stage = dir + "/stage-" + String(format: "%06d", i)
            try Data(content.utf8).write(to: URL(fileURLWithPath: stage))
            let meta = WritableMetadata(customMetadata: [PosixAttributes.modeKey: "600", "n": String(i)])
            let size = closed ? Int64(content.utf8.count) : nil
            let r = StageRecord(bucket: "test-bucket", object: object, baseGeneration: 0, closed: closed, size: size, metadata: meta)
            try JSONSerialization.data(withJSONObject: r.json).write(to: URL(fileURLWithPath: stage + ".json"))
        }
        try Data("clean".utf8).write(to: URL(fileURLWithPath: dir + "/stage-clean0"))
        return dir
    }

    /// A mount's start reads only the names of what a crash left (a write-back queue of many
    /// files): every stage file is where it was when the mount answers. The background then
    /// uploads each complete one from where it lies, once, with its metadata, moves what it
    /// cannot upload into lost+found by a rename (the same inode: no copy), and the one never
    /// closed as cut off; nothing else stays.
    @Test func aMountStartsWithoutTouchingWhatACrashLeftAndSettlesItInTheBackground() async throws {
        let n = 600
        var files = (0..<n).map { ("q/f\($0)", "content of \($0)\n", true) }
        files.append(("q/open", "half of it", false))
        let dir = try crashedDirectory(files)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let before = Dictionary(uniqueKeysWithValues: stages(dir).map { ($0, inode(dir + "/" + $0)) })
        let h = Harness()
        // Someone else wrote f7 since: it is never replaced, and is kept (moved) in lost+found.
        _ = h.store.put("q/f7", "theirs")
        var c = h.config
        c.cacheDirectory = dir
        let second = try BucketFileSystem(store: h.store, config: c)
        #expect(stages(dir).count == n + 2, "the mount's start moved or removed stage files")
        #expect(entries(dir).isEmpty, "the mount's start put entries in lost+found")
        #expect(h.store.count("write") == 0 && h.store.count("get") == 0)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(dir)")
        #expect(stages(dir).isEmpty && sidecars(dir).isEmpty, "\(stages(dir).prefix(5)) \(sidecars(dir).prefix(5))")
        let written = h.store.writes.map(\.name)
        #expect(written.count == n - 1 && Set(written).count == n - 1, "\(written.count) uploads")
        for i in [0, 1, 299, n - 1] {
            #expect(h.store.data("q/f\(i)") == Data("content of \(i)\n".utf8))
            #expect(h.store.object("q/f\(i)")?.customMetadata["n"] == String(i))
        }
        #expect(h.store.data("q/f7") == Data("theirs".utf8))
        #expect(h.store.data("q/open") == nil, "a cut-off file was uploaded")
        let kept = LostEntry.all(in: dir + "/lost+found")
        #expect(kept.unreadable.isEmpty)
        #expect(kept.entries.map(\.record.object).sorted() == ["q/f7", "q/open"])
        for e in kept.entries {
            let stage = files.firstIndex { $0.0 == e.record.object }.map { "stage-" + String(format: "%06d", $0) }
            #expect(stage.flatMap { before[$0] } == inode(e.path), "\(e.path) was copied, not moved")
            #expect(e.complete == (e.record.object == "q/f7"))
            #expect(e.md5 != nil && e.bytes > 0)
        }
    }

    /// A crash during that recovery leaves everything recoverable: one file whose move into
    /// lost+found was cut short after its sidecar said where it goes (its data is still a stage
    /// file), one cut short after its data moved (its sidecar still beside the stage's name), and
    /// what a cut-short copy or sidecar write leaves. The next mount uploads the first, puts the
    /// second's sidecar beside its data in lost+found, and clears the rest.
    @Test func aCrashDuringRecoveryLeavesEverythingRecoverable() async throws {
        let dir = try crashedDirectory([("a.txt", "aaa", true), ("b.txt", "bbb", true), ("c.txt", "ccc", false)])
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func enrich(_ stage: String, lostAs: String, complete: Bool) throws {
            var o = try sidecar(dir + "/" + stage)
            o["lostAs"] = lostAs
            o["complete"] = complete
            o["bytes"] = 3
            o["reason"] = complete ? "unsaved data found at mount time" : "CUT OFF: test"
            try JSONSerialization.data(withJSONObject: o).write(to: URL(fileURLWithPath: dir + "/" + stage + ".json"))
        }
        try enrich("stage-000001", lostAs: "b.txt.5", complete: true)
        try enrich("stage-000002", lostAs: "c.txt.6.cut-off", complete: false)
        try FileManager.default.createDirectory(atPath: dir + "/lost+found", withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: dir + "/stage-000002", toPath: dir + "/lost+found/c.txt.6.cut-off")
        try Data("{\"object\": \"gone\"}".utf8).write(to: URL(fileURLWithPath: dir + "/stage-gone00.json"))
        try Data("part".utf8).write(to: URL(fileURLWithPath: dir + "/.keep-1234"))
        try Data("{".utf8).write(to: URL(fileURLWithPath: dir + "/stage-000000.json.tmp"))
        let h = Harness()
        var c = h.config
        c.cacheDirectory = dir
        let second = try BucketFileSystem(store: h.store, config: c)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(dir)")
        #expect(h.store.data("a.txt") == Data("aaa".utf8))
        #expect(h.store.data("b.txt") == Data("bbb".utf8))
        #expect(h.store.data("c.txt") == nil)
        let kept = LostEntry.all(in: dir + "/lost+found")
        #expect(kept.unreadable.isEmpty, "\(kept.unreadable)")
        #expect(kept.entries.map(\.path) == [dir + "/lost+found/c.txt.6.cut-off"])
        #expect(kept.entries.first?.complete == false)
        let all = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0 != "lost+found" && $0 != ".lock" }
        #expect(all.isEmpty, "\(all)")
    }

    /// An unmount while the recovery's uploads wait on the server: the uploads cut short and
    /// those not started stay as stage files with their sidecars (none goes to lost+found), and
    /// a later mount on the directory uploads every one of them.
    @Test func anUnmountDuringTheRecoveryLeavesTheRestForTheNextMount() async throws {
        let n = 300
        let dir = try crashedDirectory((0..<n).map { ("f\($0)", "content \($0)", true) })
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let h = Harness()
        let hold = h.store.holdNextWrites(times: n)
        var c = h.config
        c.cacheDirectory = dir
        let second = try BucketFileSystem(store: h.store, config: c)
        let settling = Task { await second.settleRecovered(recoverCommand: "bucketfs recover \(dir)") }
        while hold.entered < c.uploadConcurrency { try await Task.sleep(for: .milliseconds(5)) }
        settling.cancel()
        await settling.value
        hold.release()
        #expect(h.store.names.isEmpty)
        #expect(entries(dir).isEmpty, "\(entries(dir).prefix(5))")
        #expect(stages(dir).count == n && sidecars(dir).count == n)
        // The next mount (the lock of this one left behind, as after its exit).
        let copy = dir + "-next"
        try FileManager.default.copyItem(atPath: dir, toPath: copy)
        try? FileManager.default.removeItem(atPath: copy + "/.lock")
        defer { try? FileManager.default.removeItem(atPath: copy) }
        c.cacheDirectory = copy
        let third = try BucketFileSystem(store: h.store, config: c)
        await third.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        #expect(h.store.names.count == n)
        #expect(h.store.data("f123") == Data("content 123".utf8))
        #expect(stages(copy).isEmpty && sidecars(copy).isEmpty && entries(copy).isEmpty)
    }

    @Test func aFileCutOffByAFullCacheIsNeverUploaded() async throws {
        let h = Harness()
        _ = h.store.put("old.txt", "the old content")
        let ino = try await h.ino("old.txt")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_WRONLY | O_TRUNC))
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 0, data: Data("the first part".utf8))
        // The next write finds the cache directory full (as pwrite's ENOSPC makes it).
        let n = try #require(h.core.superblock.node(ino))
        let s = try #require(h.core.superblock.stage(of: n))
        h.core.stageWriteFailed(n, s, Errno(ENOSPC), at: 14)
        // Whatever is written after, the file stays cut off: flush and close report the error.
        _ = try await h.fs.write(ino: ino, fh: fh, offset: 14, data: Data(" and more".utf8))
        await #expect(throws: Errno(ENOSPC)) { try await h.fs.flush(ino: ino, fh: fh) }
        await #expect(throws: Errno(ENOSPC)) { try await h.fs.release(ino: ino, fh: fh) }
        #expect(h.store.count("write") == 0, "a cut-off file was uploaded")
        #expect(h.store.data("old.txt") == Data("the old content".utf8))
        #expect(h.core.statistics().cacheErrors == ["ENOSPC": 1])
        // Its stage file is gone (the room is back), and nothing is kept for a crash to find.
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.cacheDirectory).filter { $0.hasPrefix("stage-") }.isEmpty)
    }

    @Test func theLockFileNamesItsHolder() throws {
        let h = Harness()
        let held = try String(contentsOfFile: h.cacheDirectory + "/.lock", encoding: .utf8)
        #expect(held.trimmingCharacters(in: .whitespacesAndNewlines) == String(getpid()))
        let refusal = try #require(CacheDirectoryLock.refusal(h.cacheDirectory))
        #expect(refusal.contains("bucketfs process \(getpid())") && refusal.contains("wait for it"))
        #expect(!refusal.contains("its own --cache-dir"))
        var c = h.config
        c.cacheDirectory = h.cacheDirectory
        #expect(throws: CacheDirectoryError.self) { _ = try BucketFileSystem(store: h.store, config: c) }
        #expect(CacheDirectoryLock.refusal(NSTemporaryDirectory() + "no-such-" + UUID().uuidString) == nil)
    }

    @Test func aRecordSurvivesItsJSON() {
        var m = WritableMetadata(contentType: "text/plain", customMetadata: ["k": "v", "goog-reserved-posix-mode": "600"])
        m.cacheControl = "no-cache"
        let r = StageRecord(bucket: "b", object: "a/b.txt", baseGeneration: 7, closed: true, size: 12, metadata: m)
        let json = r.json
        #expect(StageRecord(json: json) == r)
        #expect((json["metadata"] as? [String: Any])?["mode"] as? String == "600")
        // An older sidecar (no `closed`): not closed.
        #expect(StageRecord(json: ["object": "x", "bucket": "b", "baseGeneration": 0])?.closed == false)
        #expect(StageRecord(json: ["bucket": "b"]) == nil)
    }
}

func Insecure_MD5(_ s: String) -> Insecure.MD5.Digest { Insecure.MD5.hash(data: Data(s.utf8)) }
