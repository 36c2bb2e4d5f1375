@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing

/// The cache directory is private (docs/SECURITY.md): the directory and lost+found 0700; stage
/// files, their sidecars, the lock and everything kept in lost+found 0600, whatever the umask.
@Suite struct CachePrivacyTests {
    static func mode(_ p: String) -> mode_t? {
        var st = stat()
        return lstat(p, &st) == 0 ? st.st_mode & 0o7777 : nil
    }

    @Test func everythingInTheCacheDirectoryIsPrivateWhateverTheUmask() async throws {
        let old = umask(0)  // the widest: a mode not set exactly would come out 0777 or 0666
        defer { umask(old) }
        let h = Harness { $0.retryBackoffMax = 0.02; $0.uploadRetries = 1 }
        let (e, fh) = try await h.fs.create(parent: Harness.root, name: "kept.txt", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("secret".utf8))
        let dir = h.cacheDirectory
        #expect(Self.mode(dir) == 0o700)
        #expect(Self.mode(dir + "/.lock") == 0o600)
        let stages = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix("stage-") }
        #expect(stages.contains { $0.hasSuffix(".json") }, "a dirty stage has its sidecar: \(stages)")
        #expect(stages.contains { !$0.contains(".") })
        for s in stages { #expect(Self.mode(dir + "/" + s) == 0o600, "\(s)") }
        // The upload never works: its data is kept in lost+found.
        for _ in 0..<2 { h.store.failNext("write", with: .unknown(status: 503, message: "busy")) }
        await #expect(throws: Errno.EIO) { try await h.fs.flush(ino: e.attributes.ino, fh: fh) }
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        try await waitUntil { !lostFiles(h).isEmpty }
        let lf = h.config.lostAndFound
        #expect(Self.mode(lf) == 0o700)
        let kept = try FileManager.default.contentsOfDirectory(atPath: lf)
        #expect(kept.count == 2, "the data and its sidecar: \(kept)")
        for k in kept { #expect(Self.mode(lf + "/" + k) == 0o600, "\(k)") }
        #expect(StagingArea.exposedFiles(dir).isEmpty)
    }

    @Test func aCacheDirectoryOthersCanReadIsReported() throws {
        let base = NSTemporaryDirectory() + "bucketfs-cachedir-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: base + "/lost+found", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        chmod(base, 0o755)
        chmod(base + "/lost+found", 0o755)
        #expect(FileManager.default.createFile(atPath: base + "/bucketfs.log", contents: nil))
        chmod(base + "/bucketfs.log", 0o644)
        // Accepted (it is ours), left as it is, and reported: each path with its mode.
        try StagingArea.prepare(base)
        #expect(Self.mode(base) == 0o755)
        #expect(StagingArea.exposedFiles(base) == [
            PrivateFiles.Exposed(path: base, mode: 0o755), PrivateFiles.Exposed(path: base + "/lost+found", mode: 0o755),
            PrivateFiles.Exposed(path: base + "/bucketfs.log", mode: 0o644),
        ])
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/chmod")
        p.arguments = ["-R", "go-rwx", base]
        try p.run()
        p.waitUntilExit()
        #expect(StagingArea.exposedFiles(base).isEmpty)
    }
}
