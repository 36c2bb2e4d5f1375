@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// Lookups of one directory that find its listing expired share one relist (docs/SEMANTICS.md
/// §6): the kernel sends them at once now (FUSE_PARALLEL_DIROPS), and each listing again would
/// multiply a large directory's pages by the lookups waiting.
@Suite struct CoreSharedRelistTests {
    @Test func lookupsThatFindTheListingExpiredWaitForOneRelist() async throws {
        let store = MemoryStore()
        for i in 0..<8 { store.put("d/f\(i)", Data("\(i)".utf8)) }
        let h = Harness(store: store)
        let dir = try await h.ino("d")
        #expect(try await h.names("d").count == 8)
        h.clock.advance(h.config.metadataTTL + 1)
        store.resetCounts()
        // The first relist's answer is held until every lookup has come.
        let hold = store.holdNextListAnswers(times: 8)
        try await withThrowingTaskGroup(of: UInt64.self) { group in
            for i in 0..<8 {
                group.addTask { try await h.fs.lookup(parent: dir, name: "f\(i)").attributes.ino }
            }
            // Every lookup waits for the one relist (each listing on its own, they never would).
            #expect(await eventually { h.core.relists.count == 1 && h.core.relists.waiting == 8 && hold.waiting == 1 })
            hold.release()
            var inos: Set<UInt64> = []
            for try await ino in group { inos.insert(ino) }
            #expect(inos.count == 8)
        }
        #expect(store.count("list") == 1)
        #expect(hold.entered == 1)
        #expect(h.core.relists.count == 0)
    }
}
