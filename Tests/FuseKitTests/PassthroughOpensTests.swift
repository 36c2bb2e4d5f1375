import Foundation
import Testing
@testable import FuseKit
#if canImport(Glibc)
import Glibc
#endif

/// Every open of one inode agrees with the others, as the kernel requires of passthrough (an open
/// that does not fails with EIO): no kernel here, the device's ioctls are counted instead.
@Suite struct PassthroughOpensTests {
    final class Device: @unchecked Sendable {
        let lock = NSLock()
        var next: Int32 = 0
        var opened: [Int32] = []
        var closed: [Int32] = []
        var refuse: Int32? = nil
        var lines: [String] = []
        func open(_ fd: Int32) -> Int32 {
            lock.withLock {
                if let refuse { return -refuse }
                next += 1
                opened.append(next)
                return next
            }
        }
        func close(_ id: Int32) { lock.withLock { closed.append(id) } }
    }

    func opens(_ d: Device, negotiated: Bool = true) -> PassthroughOpens {
        PassthroughOpens(negotiated: { negotiated }, offered: { negotiated }, open: d.open, close: d.close,
                         log: { line in d.lock.withLock { d.lines.append(line) } })
    }

    /// Two local files (and their descriptors), removed when the test ends.
    func files() throws -> (Int32, Int32, () -> Void) {
        let dir = NSTemporaryDirectory() + "passthrough-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: dir + "/a", contents: Data("a".utf8))
        FileManager.default.createFile(atPath: dir + "/b", contents: Data("b".utf8))
        let a = Glibc.open(dir + "/a", O_RDONLY), b = Glibc.open(dir + "/b", O_RDONLY)
        return (a, b, { Glibc.close(a); Glibc.close(b); try? FileManager.default.removeItem(atPath: dir) })
    }

    @Test func opensOfOneInodeShareOneBackingAndTheLastReleaseClosesIt() throws {
        let (a, b, done) = try files()
        defer { done() }
        let d = Device()
        let p = opens(d)
        #expect(p.answer(ino: 5, fh: 1, file: a, direct: false) == .backed(id: 1, direct: false))
        // The same file again (another descriptor of it): the same id, read by the kernel.
        let a2 = Glibc.open("/proc/self/fd/\(a)", O_RDONLY)
        defer { Glibc.close(a2) }
        #expect(p.answer(ino: 5, fh: 2, file: a2, direct: false) == .backed(id: 1, direct: false))
        // Another file (a newer generation), none (a writer), or a handle wanting its reads itself:
        // the same id, with the handle's reads and writes coming to the filesystem.
        #expect(p.answer(ino: 5, fh: 3, file: b, direct: false) == .backed(id: 1, direct: true))
        #expect(p.answer(ino: 5, fh: 4, file: nil, direct: false) == .backed(id: 1, direct: true))
        #expect(p.answer(ino: 5, fh: 5, file: a, direct: true) == .backed(id: 1, direct: true))
        // Another inode has its own.
        #expect(p.answer(ino: 6, fh: 6, file: b, direct: false) == .backed(id: 2, direct: false))
        for fh in 1...4 { p.ended(fh: UInt64(fh)) }
        #expect(d.closed.isEmpty && p.backedInodes == [5: 1, 6: 1])
        p.ended(fh: 5)
        p.ended(fh: 5)  // a release told twice changes nothing
        #expect(d.closed == [1] && p.backedInodes == [6: 1])
        #expect(d.opened == [1, 2])
    }

    @Test func aBackingStartsOnlyWhenNothingElseHasTheInodeOpen() throws {
        let (a, _, done) = try files()
        defer { done() }
        let d = Device()
        let p = opens(d)
        #expect(p.answer(ino: 9, fh: 1, file: nil, direct: false) == .plain)
        // The inode is open in the kernel's caching mode: a backed open now would fail with EIO.
        #expect(p.answer(ino: 9, fh: 2, file: a, direct: false) == .plain)
        p.ended(fh: 1)
        #expect(p.answer(ino: 9, fh: 3, file: a, direct: false) == .plain)
        p.ended(fh: 2)
        p.ended(fh: 3)
        #expect(p.answer(ino: 9, fh: 4, file: a, direct: false) == .backed(id: 1, direct: false))
        // A handle that wants its reads itself never starts a backing.
        #expect(p.answer(ino: 10, fh: 5, file: a, direct: true) == .plain)
    }

    @Test func withoutTheHandshakeEveryOpenIsPlainAndTheReasonIsSaidOnce() throws {
        let (a, _, done) = try files()
        defer { done() }
        let d = Device()
        let p = opens(d, negotiated: false)
        #expect(p.answer(ino: 1, fh: 1, file: a, direct: false) == .plain)
        #expect(p.answer(ino: 2, fh: 2, file: a, direct: false) == .plain)
        #expect(d.opened.isEmpty && d.lines.count == 1 && d.lines[0].contains("offers no passthrough"))
    }

    @Test func aDeviceThatRefusesBackingFilesIsAskedOnce() throws {
        let (a, b, done) = try files()
        defer { done() }
        let d = Device()
        d.refuse = EPERM
        let p = opens(d)
        #expect(p.answer(ino: 1, fh: 1, file: a, direct: false) == .plain)
        d.refuse = nil
        #expect(p.answer(ino: 2, fh: 2, file: b, direct: false) == .plain)
        #expect(d.opened.isEmpty && d.lines.count == 1 && d.lines[0].contains("Operation not permitted"), "\(d.lines)")
        // One file refused for its own reason (ELOOP: a stacked filesystem) leaves the others.
        let d2 = Device()
        d2.refuse = ELOOP
        let p2 = opens(d2)
        #expect(p2.answer(ino: 1, fh: 1, file: a, direct: false) == .plain)
        d2.refuse = nil
        #expect(p2.answer(ino: 2, fh: 2, file: b, direct: false) == .backed(id: 1, direct: false))
    }
}
