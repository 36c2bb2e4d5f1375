@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// A failure that repeats is logged once a minute (docs/OPERATING.md, "Logs"): five `ls` of a
/// directory while signed out made five identical error lines; now one, and the next one after
/// the minute says how many were left out. Different failures are each logged.
@Suite struct CoreRepeatedFailureTests {
    @Test func identicalFailureLinesAreLoggedOnceAMinute() async throws {
        let store = MemoryStore()
        store.put("d/a.txt", "x")
        let logs = LogLines()
        let clock = TestClock()
        var c = MountConfig()
        c.cacheDirectory = NSTemporaryDirectory() + "bucketfs-core-tests-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: c.cacheDirectory) }
        c.clock = clock.bucketClock
        c.failureTTL = 0  // every call asks the store again, as for a refusal
        let fs = try BucketFileSystem(store: store, config: c, logger: capturingLogger(logs))
        let refused = StorageError.unauthenticated(message: "Invalid Credentials")
        func errors() -> [String] { logs.all.filter { $0.hasPrefix("error ") } }
        func ls() async throws(Errno) {
            let fh = try await fs.opendir(ino: BucketFileSystem.rootIno)
            defer { fs.releasedir(ino: BucketFileSystem.rootIno, fh: fh) }
            _ = try await fs.readdir(ino: BucketFileSystem.rootIno, fh: fh, offset: 0)
        }
        store.failNext("list", times: 5, with: refused)
        for _ in 0..<5 {
            await #expect(throws: Errno.EACCES) { try await ls() }
        }
        #expect(errors().count == 1, "\(errors())")
        #expect(logs.all.filter { $0.contains("(again)") }.count == 4, "the others at debug: \(logs.all)")
        // Another failure (another name) is its own line.
        store.failNext("get", times: 1, with: refused)
        store.failNext("list", times: 1, with: refused)
        _ = try? await fs.lookup(parent: BucketFileSystem.rootIno, name: "other.txt")
        #expect(errors().count >= 2, "\(errors())")
        // After the minute the same line is logged again, with the count of those left out.
        clock.advance(61)
        store.failNext("list", times: 1, with: refused)
        await #expect(throws: Errno.EACCES) { try await ls() }
        let last = try #require(errors().last)
        #expect(last.contains("list ''") && last.contains("and 4 more time(s) in the 60 s before this"), "\(last)")
    }
}
