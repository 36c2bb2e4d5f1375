import Foundation
import FuseKit
import KernelFiles
import Testing

/// Lifecycle of a FuseSession in this process. The test never touches the mount itself
/// (STYLE trap 7): it only mounts, waits for INIT and ends the session.
@Suite("session lifecycle", .serialized)
struct SessionTests {
    final class EmptyFS: FuseFileSystem, @unchecked Sendable {
        func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry { throw .ENOENT }
        func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
            (FileAttributes(ino: 1, type: .directory, size: 0, permissions: 0o755, nlink: 2, uid: 0, gid: 0,
                            atime: 0, mtime: 0, ctime: 0), 1)
        }
        func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] { [] }
    }

    final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { lock.withLock { value = true } }
        var isSet: Bool { lock.withLock { value } }
    }

    static func wait(_ timeout: TimeInterval, until condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition() && Date() < deadline { usleep(10_000) }
        return condition()
    }

    @Test("exit() ends run() without any request arriving, and run() unmounts")
    func exitEndsRun() throws {
        let dir = NSTemporaryDirectory() + "fusekit-session-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer {
            _ = try? Shell.run(["fusermount3", "-u", "-z", "-q", dir])
            try? FileManager.default.removeItem(atPath: dir)
        }
        let session = FuseSession(filesystem: EmptyFS(), mountpoint: dir, options: ["fsname=fusekit-test"])
        let ready = Flag(), finished = Flag()
        session.onReady = { ready.set() }
        try session.mount()
        #expect(session.isMounted)
        let thread = Thread {
            session.run()
            finished.set()
        }
        thread.start()
        #expect(Self.wait(60) { ready.isSet })
        #expect(session.isReady)
        session.exit()
        #expect(Self.wait(60) { finished.isSet })
        #expect(!session.isMounted)
        let mounts = KernelFile.text("/proc/self/mountinfo") ?? ""
        #expect(!mounts.contains(" \(dir) "))
    }

    @Test("mount() refuses a missing mount point and unknown options")
    func mountErrors() throws {
        let missing = FuseSession(filesystem: EmptyFS(), mountpoint: "/nonexistent/fusekit")
        #expect(throws: Errno.ENOENT) { try missing.mount() }
        let dir = NSTemporaryDirectory() + "fusekit-session-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let bad = FuseSession(filesystem: EmptyFS(), mountpoint: dir, options: ["no_such_option"])
        #expect(throws: Errno.EINVAL) { try bad.mount() }
    }
}
