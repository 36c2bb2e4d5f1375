@testable import BucketFS
import Foundation
import FuseKit
import Synchronization
import Testing

/// The superblock's lock owns what it guards (docs/ARCHITECTURE.md, "The superblock's lock"):
/// the core's tests check the invariants at each release of it, so a critical section that
/// breaks one is named, not the operation that happened to notice it later.
/// glibc's (malloc.h is not in the Glibc module).
@_silgen_name("malloc_usable_size") private func mallocUsableSize(_ p: UnsafeMutableRawPointer) -> Int

@Suite struct LockOwnsStateTests {
    /// What the harness's mount reported at releases of the lock.
    final class Reports: Sendable {
        let seen = Mutex<[(violations: [String], at: String)]>([])
    }

    static func harness(_ reports: Reports) -> Harness {
        Harness { c in
            c.brokenInvariant = { bad, at in reports.seen.withLock { $0.append((bad, at)) } }
        }
    }

    /// A section that marks a node listed when no cached listing names it is reported at its own
    /// release, with its file and line.
    @Test func aBrokenInvariantIsReportedAtTheReleaseThatBrokeIt() async throws {
        let reports = Reports()
        let h = Self.harness(reports)
        _ = try await h.createFile("", "a.txt", Data("x".utf8))
        #expect(reports.seen.withLock { $0.isEmpty }, "the operations themselves keep every invariant")
        let n = try #require(h.core.superblock.node(try await h.lookup("a.txt").attributes.ino))
        let line = #line + 1
        h.core.superblock.locked { held in held[n].listed.toggle() }
        let first = try #require(reports.seen.withLock { $0.first })
        #expect(first.at == "\(#fileID):\(line)")
        #expect(first.violations.contains { $0.hasPrefix("'a.txt': listed ") })
        // Put back, the next release finds nothing wrong again.
        let before = reports.seen.withLock { $0.count }
        h.core.superblock.locked { held in held[n].listed.toggle() }
        #expect(reports.seen.withLock { $0.count } == before)
    }

    /// A node's fields behind the lock cost nothing: it is still a 104-byte object (the
    /// allocator's 112-byte block; docs/BENCHMARKS.md counts a million of them).
    @Test func aNodeIsStill104Bytes() {
        let n = Node(ino: 2, path: "some/file", type: .regular)
        #expect(mallocUsableSize(Unmanaged.passUnretained(n).toOpaque()) <= 104)
    }

    /// Not checked unless asked (a mount does not pay O(inodes) at each release).
    @Test func aMountDoesNotCheckAtEachRelease() {
        #expect(MountConfig().checksInvariantsAtUnlock == false)
    }
}
