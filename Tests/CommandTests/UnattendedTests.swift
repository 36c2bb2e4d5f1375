import BucketFS
import Foundation
import Testing
@testable import bucketfs

/// The command line's pure parts of unattended operation: mountinfo, the mount point's refusals,
/// the mount helper's `nonempty`, failure messages as JSON, and the record of cache directories.
@Suite struct MountPointCheckTests {
    static let mountinfo = """
        22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
        90 22 0:50 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:60 - fuse.bucketfs bucketfs:gs://b/p rw,user_id=0,group_id=0
        91 22 0:51 / /mnt/x rw,relatime shared:61 - tmpfs tmpfs rw,size=1024k
        95 90 0:52 / /tmp/a\\040b rw,relatime shared:62 - fuse.bucketfs bucketfs:/srv/bucket rw
        """

    @Test func mountsAtAPathComeFromMountinfo() {
        let at = MountPointCheck.mounts(at: "/tmp/a b", mountinfo: Self.mountinfo)
        #expect(at.map(\.id) == [90, 95])
        #expect(at.map(\.type) == ["fuse.bucketfs", "fuse.bucketfs"])
        #expect(at.first?.source == "bucketfs:gs://b/p")
        #expect(MountPointCheck.mounts(at: "/mnt/x", mountinfo: Self.mountinfo) == [.init(id: 91, mountPoint: "/mnt/x", type: "tmpfs", source: "tmpfs")])
        #expect(MountPointCheck.mounts(at: "/mnt", mountinfo: Self.mountinfo).isEmpty)
        #expect(MountPointCheck.unescape("a\\040b\\134c") == "a b\\c")
    }

    @Test func aNonEmptyDirectoryIsRefusedUnlessAllowed() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-mp-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(MountPointCheck.problem(dir, allowNonEmpty: false) == nil)
        FileManager.default.createFile(atPath: dir + "/mine.txt", contents: Data("x".utf8))
        let p = try #require(MountPointCheck.problem(dir, allowNonEmpty: false))
        #expect(p.contains("not empty") && p.contains("mine.txt") && p.contains("--allow-non-empty"))
        #expect(MountPointCheck.problem(dir, allowNonEmpty: true) == nil)
        #expect(MountPointCheck.problem(dir + "/mine.txt", allowNonEmpty: true)?.contains("not a directory") == true)
        #expect(MountPointCheck.problem(dir + "/none", allowNonEmpty: true)?.contains("does not exist") == true)
    }

    @Test func theMountHelperTakesLibfuse2sNonempty() {
        #expect(MountHelper.translate(["gs://b", "/mnt", "-o", "rw,nonempty,allow_non_empty"])
                == ["gs://b", "/mnt", "--allow-non-empty", "--allow-non-empty"])
    }

    @Test func aFailedMountsMessageIsJSONWhenTheLogIs() throws {
        let line = JSONLogHandler.line(time: Date(timeIntervalSince1970: 0), level: .critical, label: "bucketfs",
                                       message: "mount point /m is \"dead\"", source: "bucketfs", metadata: [:])
        let o = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(o["level"] == "critical" && o["message"] == "mount point /m is \"dead\"")
    }
}

@Suite struct CacheDirectoryRegistryTests {
    @Test func theStateDirectoryFollowsXDGThenRootThenHome() {
        #expect(CacheDirectoryRegistry.stateDirectory(environment: ["XDG_STATE_HOME": "/s"]) == "/s/bucketfs")
        let other = CacheDirectoryRegistry.stateDirectory(environment: ["HOME": "/home/u"])
        #expect(other == (geteuid() == 0 ? "/var/lib/bucketfs" : "/home/u/.local/state/bucketfs"))
    }

    @Test func unsavedDataInAnotherCacheDirectoryIsFound() throws {
        let base = NSTemporaryDirectory() + "bucketfs-registry-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: base) }
        let env = ["XDG_STATE_HOME": base + "/state"]
        let (a, b) = (base + "/a", base + "/b")
        for d in [a, b] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        #expect(CacheDirectoryRegistry.record(.init(source: "gs://x", cacheDirectory: a, mountPoint: "/m1"), environment: env) == nil)
        #expect(CacheDirectoryRegistry.record(.init(source: "gs://x", cacheDirectory: b, mountPoint: "/m2"), environment: env) == nil)
        #expect(CacheDirectoryRegistry.record(.init(source: "gs://y", cacheDirectory: a, mountPoint: "/m3"), environment: env) == nil)
        #expect(Set(CacheDirectoryRegistry.entries(of: "gs://x", environment: env).map(\.cacheDirectory)) == [a, b])
        #expect(CacheDirectoryRegistry.entries(environment: env).count == 3)
        // Nothing unsaved yet; a stage file without a sidecar is not unsaved data.
        FileManager.default.createFile(atPath: a + "/stage-AAAAAA", contents: Data("clean".utf8))
        #expect(CacheDirectoryRegistry.elsewhere(source: "gs://x", own: b, environment: env).isEmpty)
        // A stage with its sidecar, and a cut-off lost+found entry.
        FileManager.default.createFile(atPath: a + "/stage-BBBBBB", contents: Data("dirty".utf8))
        FileManager.default.createFile(atPath: a + "/stage-BBBBBB.json", contents: Data(#"{"object":"o"}"#.utf8))
        try FileManager.default.createDirectory(atPath: a + "/lost+found", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: a + "/lost+found/o.1.cut-off", contents: Data("cut".utf8))
        FileManager.default.createFile(atPath: a + "/lost+found/o.1.cut-off.json",
                                       contents: Data(#"{"object":"o","complete":false,"closed":false}"#.utf8))
        let u = CacheDirectoryRegistry.unsaved(in: a)
        #expect(u == .init(staged: 1, stagedCutOff: 1, lost: 1, cutOff: 1))
        let lines = CacheDirectoryRegistry.elsewhere(source: "gs://x", own: b, environment: env)
        #expect(lines.count == 1)
        #expect(lines.first?.contains(a) == true && lines.first?.contains("bucketfs recover \(a)") == true)
        // Its own directory, and another source's, say nothing.
        #expect(CacheDirectoryRegistry.elsewhere(source: "gs://x", own: a, environment: env).isEmpty)
        #expect(CacheDirectoryRegistry.elsewhere(source: "gs://z", own: b, environment: env).isEmpty)
    }

    /// Files the store refused (its rules, IAM) are complete, but `recover` to the same name is
    /// refused again: `status` says "refused", with the command that uploads them where the
    /// rules allow.
    @Test func statusSaysRefusedWithTheRecoveryCommand() throws {
        let dir = NSTemporaryDirectory() + "bucketfs-refused-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/lost+found", withIntermediateDirectories: true)
        func keep(_ name: String, reason: String, complete: Bool = true) {
            FileManager.default.createFile(atPath: dir + "/lost+found/" + name, contents: Data("twelve bytes".utf8))
            let side = #"{"object":"public/\#(name)","closed":true,"size":12,"bytes":12,"complete":\#(complete),"reason":"\#(reason)"}"#
            FileManager.default.createFile(atPath: dir + "/lost+found/" + name + ".json", contents: Data(side.utf8))
        }
        keep("public%2Fa.txt.1764358212345", reason: "the server refused the upload: unauthorized(path: public/a.txt, message: Permission denied.)")
        keep("public%2Fb.txt.1764358212346", reason: "the server refused the upload: unauthorized(path: public/b.txt, message: Permission denied.)")
        keep("public%2Fc.txt.1764358212347", reason: "the upload failed 4 times (last: EIO)")
        let u = CacheDirectoryRegistry.unsaved(in: dir)
        #expect(u.description == "3 file(s) in lost+found (2 refused by the store)")
        let run = Status.whatToRun(dir, u, busy: false, source: "firebase://app.appspot.com/public")
        #expect(run.contains("`bucketfs recover \(dir)` uploads 1 complete file(s)"), "\(run)")
        #expect(run.contains("2 file(s) the store refused"), "\(run)")
        #expect(run.contains("`bucketfs recover \(dir) --to firebase://app.appspot.com/PREFIX`"), "\(run)")
    }
}
