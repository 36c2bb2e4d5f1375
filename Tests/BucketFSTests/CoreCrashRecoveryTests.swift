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
    /// The cache directory as a crash leaves it: copied while the first core still holds it,
    /// without its lock file, for a second core to open.
    func crashedCopy(_ h: Harness) throws -> String {
        let copy = h.cacheDirectory + "-crashed-" + UUID().uuidString
        try FileManager.default.copyItem(atPath: h.cacheDirectory, toPath: copy)
        try? FileManager.default.removeItem(atPath: copy + "/.lock")
        return copy
    }

    func entries(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir + "/lost+found")) ?? []).filter { !$0.hasSuffix(".json") }.sorted()
    }

    func sidecar(_ path: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path + ".json"))) as! [String: Any]
    }

    @Test func aClosedFileIsKeptWholeAndAnOpenOneAsCutOff() async throws {
        let clock = ManualClock()
        let h = Harness { $0.retrySleeper = clock.sleeper }
        // Closed: its upload failed at close (503), so the stage waits with a sidecar that says closed.
        let (a, fa) = try await h.fs.create(parent: Harness.root, name: "closed.txt", mode: 0o640, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fa, offset: 0, data: Data("whole file".utf8))
        try await h.fs.setxattr(ino: a.attributes.ino, name: "user.color", value: Array("blue".utf8), flags: 0)
        h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.release(ino: a.attributes.ino, fh: fa) }
        // Open: written, never closed.
        let (b, fb) = try await h.fs.create(parent: Harness.root, name: "open.bin", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: b.attributes.ino, fh: fb, offset: 0, data: Data("half of it".utf8))
        let copy = try crashedCopy(h)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
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
        // Only the complete one is left for the bucket check.
        #expect(second.recovered.map(\.record.object) == ["closed.txt"])
        let all = LostEntry.all(in: copy + "/lost+found")
        #expect(all.entries.count == 2 && all.unreadable.isEmpty)
    }

    @Test func aWriteAfterCloseMarksTheSidecarNotClosedAgain() async throws {
        let clock = ManualClock()
        let h = Harness { $0.retrySleeper = clock.sleeper }
        let (a, fa) = try await h.fs.create(parent: Harness.root, name: "again.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fa, offset: 0, data: Data("one".utf8))
        h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
        await #expect(throws: Errno.EIO) { try await h.fs.release(ino: a.attributes.ino, fh: fa) }
        let fh = try await h.fs.open(ino: a.attributes.ino, flags: OpenFlags(O_WRONLY))
        _ = try await h.fs.write(ino: a.attributes.ino, fh: fh, offset: 3, data: Data(" two".utf8))
        let copy = try crashedCopy(h)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        var c = h.config
        c.cacheDirectory = copy
        _ = try BucketFileSystem(store: h.store, config: c)
        let kept = entries(copy)
        #expect(kept.count == 1 && kept[0].hasSuffix(LostEntry.cutOffSuffix), "\(kept)")
    }

    /// A remount on the same cache directory uploads what a crash left complete: one the bucket
    /// already has is not uploaded again, one it lacks is uploaded with its metadata, one whose
    /// object someone else wrote meanwhile stays in lost+found; nothing else stays.
    @Test func theNextMountUploadsWhatIsCompleteOnceAndNeverOverANewerObject() async throws {
        let clock = ManualClock()
        let h = Harness { $0.retrySleeper = clock.sleeper }
        for name in ["landed.txt", "missing.txt", "raced.txt"] {
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: name, mode: 0o640, flags: OpenFlags(O_WRONLY | O_CREAT))
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("content of \(name)".utf8))
            try await h.fs.setxattr(ino: e.attributes.ino, name: "user.color", value: Array("blue".utf8), flags: 0)
            h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
            await #expect(throws: Errno.EIO) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        }
        let copy = try crashedCopy(h)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        h.store.clearFaults("write")
        // The crash came after landed.txt's upload reached the bucket; someone else wrote raced.txt.
        _ = h.store.put("landed.txt", "content of landed.txt")
        let landed = h.store.object("landed.txt")!.generation
        _ = h.store.put("raced.txt", "theirs")
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
        #expect(entries(copy).count == 3)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let left = entries(copy)
        #expect(left.count == 1 && left[0].hasPrefix("raced.txt."), "\(left)")
        #expect(h.store.object("landed.txt")!.generation == landed, "not uploaded twice")
        #expect(h.store.data("missing.txt") == Data("content of missing.txt".utf8))
        let meta = h.store.object("missing.txt")!.customMetadata
        #expect(meta.values.contains("blue"), "the xattr: \(meta)")
        #expect(meta[PosixAttributes.modeKey] != nil, "\(meta)")
        #expect(h.store.data("raced.txt") == Data("theirs".utf8))
    }

    /// The server still fails every write: missing.txt cannot be uploaded and stays.
    @Test func aFileTheBucketHasIsNotKeptAndOthersAre() async throws {
        let clock = ManualClock()
        let h = Harness { $0.retrySleeper = clock.sleeper }
        for name in ["landed.txt", "missing.txt"] {
            let (e, fh) = try await h.fs.create(parent: Harness.root, name: name, mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
            _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("content of \(name)".utf8))
            h.store.failNext("write", times: 100, with: .unknown(status: 503, message: "busy"))
            await #expect(throws: Errno.EIO) { try await h.fs.release(ino: e.attributes.ino, fh: fh) }
        }
        let copy = try crashedCopy(h)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        // The crash came after landed.txt's upload reached the bucket.
        _ = h.store.put("landed.txt", "content of landed.txt")
        var c = h.config
        c.cacheDirectory = copy
        let second = try BucketFileSystem(store: h.store, config: c)
        #expect(entries(copy).count == 2)
        await second.settleRecovered(recoverCommand: "bucketfs recover \(copy)")
        let left = entries(copy)
        #expect(left.count == 1 && left[0].hasPrefix("missing.txt."), "\(left)")
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
