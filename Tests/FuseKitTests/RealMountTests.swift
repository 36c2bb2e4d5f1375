import CFuse  // getxattr & co. (sys/xattr.h is not in Glibc)
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Real mounts of fusekit-demo in a child process, driven with ordinary tools and syscalls.
@Suite("real mount", .serialized)
struct RealMountTests {
    static let expectedNames = Set((0..<3000).map { String(format: "f%04d", $0) })

    static func noted(_ m: DemoMount) throws -> Int {
        let r = try Shell.run(["getfattr", "--only-values", "-n", "user.demo.noted", m.mountpoint])
        return Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test("ls -l of 3000 entries through readdirplus: all, once each, each counted as a lookup")
    func listingReaddirplus() throws {
        try withDemoMount(["--readdirplus", "always"]) { m in
            let r = try Shell.run(["ls", "-l", m.path("many")])
            #expect(r.status == 0, "\(r.stderr)")
            let names = r.stdout.split(separator: "\n").dropFirst().map { String($0.split(separator: " ").last!) }
            #expect(names.count == 3000)
            #expect(Set(names) == Self.expectedNames)
            #expect(try Self.noted(m) >= 3000)
        }
    }

    @Test("ls -la of 3000 entries through plain readdir: . and .. first, no duplicates, no lookup notes")
    func listingReaddir() throws {
        try withDemoMount(["--readdirplus", "off"]) { m in
            let r = try Shell.run(["ls", "-a", "-1", "-U", m.path("many")])
            #expect(r.status == 0, "\(r.stderr)")
            let names = r.stdout.split(separator: "\n").map(String.init)
            #expect(Array(names.prefix(2)) == [".", ".."])
            #expect(names.count == 3002)
            #expect(Set(names.dropFirst(2)) == Self.expectedNames)
            let long = try Shell.run(["ls", "-l", m.path("many")])
            #expect(long.stdout.split(separator: "\n").count == 3001)
            #expect(try Self.noted(m) == 0)
        }
    }

    @Test("getxattr: size probe, ERANGE, getfattr -d, listxattr")
    func xattrs() throws {
        try withDemoMount { m in
            let file = m.path("hello.txt")
            #expect(getxattr(file, "user.big", nil, 0) == 300)
            var small = [UInt8](repeating: 0, count: 10)
            #expect(getxattr(file, "user.big", &small, small.count) == -1)
            #expect(errno == ERANGE)
            var exact = [UInt8](repeating: 0, count: 300)
            #expect(getxattr(file, "user.big", &exact, exact.count) == 300)
            #expect(exact == [UInt8](repeating: UInt8(ascii: "x"), count: 300))
            #expect(getxattr(file, "user.none", nil, 0) == -1 && errno == ENODATA)
            #expect(listxattr(file, nil, 0) == "user.big\0user.color\0".utf8.count)
            var tiny = [CChar](repeating: 0, count: 4)
            #expect(listxattr(file, &tiny, tiny.count) == -1 && errno == ERANGE)

            let dump = try Shell.run(["getfattr", "-d", file])
            #expect(dump.stdout.contains("user.color=\"blue\""))
            #expect(dump.stdout.contains("user.big=\"xxxx"))

            #expect(try Shell.run(["setfattr", "-n", "user.new", "-v", "0x00ff10", file]).status == 0)
            var raw = [UInt8](repeating: 0, count: 8)
            #expect(getxattr(file, "user.new", &raw, raw.count) == 3)
            #expect(Array(raw.prefix(3)) == [0x00, 0xff, 0x10])
            #expect(try Shell.run(["setfattr", "-x", "user.new", file]).status == 0)
            #expect(getxattr(file, "user.new", nil, 0) == -1 && errno == ENODATA)
            // Answered by FuseKit itself.
            #expect(getxattr(file, "security.capability", nil, 0) == -1 && errno == ENODATA)
        }
    }

    @Test("a non-UTF-8 name is refused with EILSEQ before the filesystem sees it")
    func nonUTF8Names() throws {
        try withDemoMount { m in
            let file = m.path("hello.txt")
            let badName: [CChar] = Array("user.\u{1}".utf8CString.dropLast(2)) + [CChar(bitPattern: 0xff), 0]
            #expect(getxattr(file, badName, nil, 0) == -1)
            #expect(errno == EILSEQ)
            var v: UInt8 = 1
            #expect(setxattr(file, badName, &v, 1, 0) == -1)
            #expect(errno == EILSEQ)
            let badPath = Array(m.path("caf").utf8CString.dropLast()) + [CChar(bitPattern: 0xe9), 0]
            var st = stat()
            #expect(lstat(badPath, &st) == -1)
            #expect(errno == EILSEQ)
        }
    }

    @Test("write, read back, truncate, times with nanoseconds, mkdir/rename/unlink")
    func writeAndReadBack() throws {
        try withDemoMount { m in
            let file = m.path("data.bin")
            var bytes = [UInt8](repeating: 0, count: 300_000)
            for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 8) }
            #expect(FileManager.default.createFile(atPath: file, contents: nil))
            let h = try #require(FileHandle(forWritingAtPath: file))
            try h.write(contentsOf: Data(bytes))
            try h.close()
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data(bytes))
            let cat = try Shell.run(["sh", "-c", "cat \"$0\" | cksum", file])
            let local = try Shell.run(["sh", "-c", "printf '' | cksum"])  // sanity: tools run
            #expect(cat.status == 0 && local.status == 0)

            #expect(try Shell.run(["truncate", "-s", "10", file]).status == 0)
            var st = stat()
            #expect(lstat(file, &st) == 0)
            #expect(st.st_size == 10)
            #expect(st.st_blocks == 1 && st.st_blksize == 1 << 20)  // FileAttributes.preferredIOSize
            #expect(st.st_mode & S_IFMT == S_IFREG)

            #expect(try Shell.run(["touch", "-m", "-d", "2001-02-03 04:05:06.25", file]).status == 0)
            #expect(lstat(file, &st) == 0)
            #expect(st.st_mtim.tv_nsec == 250_000_000)
            let before = Date().timeIntervalSince1970 - 2
            #expect(try Shell.run(["touch", file]).status == 0)  // ATIME_NOW | MTIME_NOW
            #expect(lstat(file, &st) == 0)
            #expect(Double(st.st_mtim.tv_sec) > before)

            #expect(mkdir(m.path("d"), 0o750) == 0)
            #expect(rename(file, m.path("d/moved.bin")) == 0)
            #expect(lstat(m.path("d/moved.bin"), &st) == 0 && st.st_size == 10)
            #expect(rmdir(m.path("d")) == -1 && errno == ENOTEMPTY)
            #expect(unlink(m.path("d/moved.bin")) == 0)
            #expect(rmdir(m.path("d")) == 0)

            let echo = try Shell.run(["sh", "-c", "echo hi > \"$0\" && cat \"$0\"", m.path("x.txt")])
            #expect(echo.stdout == "hi\n")
        }
    }

    @Test("an errno thrown by the filesystem reaches the caller")
    func thrownErrno() throws {
        try withDemoMount { m in
            var st = stat()
            for code in [EACCES, EIO, ENAMETOOLONG, ETIMEDOUT] {
                #expect(lstat(m.path("errno-\(code)"), &st) == -1)
                #expect(errno == code)
            }
            let r = try Shell.run(["stat", m.path("errno-13")])
            #expect(r.status != 0 && r.stderr.contains("Permission denied"))
        }
    }

    @Test("fusermount3 -u ends run() and the process exits cleanly")
    func unmountEndsProcess() throws {
        let m = try DemoMount()
        defer { m.close() }
        _ = try Shell.run(["ls", m.mountpoint])
        let r = try Shell.run(["fusermount3", "-u", m.mountpoint])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(m.waitForExit(timeout: 60) == 0)
        #expect(m.output().contains("exited 0"))
        #expect(!m.isMounted)
    }

    @Test("SIGTERM ends run(), which unmounts")
    func sigtermEndsProcess() throws {
        let m = try DemoMount()
        defer { m.close() }
        _ = try Shell.run(["ls", "-l", m.path("many")])
        kill(m.process.processIdentifier, SIGTERM)  // the demo starts with signals blocked by its spawner
        #expect(m.waitForExit(timeout: 60) == 0)
        #expect(m.output().contains("exited \(SIGTERM)"))
        #expect(!m.isMounted)
    }
}
