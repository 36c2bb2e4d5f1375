import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing

/// What the metrics endpoint reads from the core: cache hits and misses, cache sizes, open files,
/// read-ahead memory, staged and dirty files, lost+found entries.
@Suite struct StatisticsTests {
    @Test func listingThenLookupsAreHitsAndExpiryIsAMiss() async throws {
        let h = Harness()
        h.store.put("a.txt", "hello")
        h.store.put("b.txt", "world")
        _ = try await h.names("")  // one listing: a miss
        _ = try await h.lookup("a.txt")  // answered by the listing
        _ = try await h.lookup("b.txt")
        var s = h.fs.statistics()
        #expect(s.misses[.listing] == 1)
        #expect(s.hits[.listing] == 2)
        #expect(s.cachedListings == 1)
        #expect(s.cachedListingEntries == 2)
        #expect(s.cachedAttributes == 2)
        #expect(s.inodes == 3)
        let ino = try await h.ino("a.txt")
        _ = try await h.fs.getattr(ino: ino)
        #expect(h.fs.statistics().hits[.attributes] == 1)
        h.clock.advance(10)
        _ = try await h.fs.getattr(ino: ino)
        s = h.fs.statistics()
        #expect(s.misses[.attributes] == 1)
        // An expired file is refreshed by listing its directory again: all siblings are fresh.
        #expect(s.cachedListings == 1)
        #expect(s.cachedAttributes == 2)
        #expect(h.store.lists.count == 2)
    }

    @Test func openFilesReadAheadAndDirtyFiles() async throws {
        let h = Harness()
        h.store.put("big.bin", Data.pattern(300_000))
        let ino = try await h.ino("big.bin")
        let fh = try await h.fs.open(ino: ino, flags: OpenFlags(O_RDONLY))
        _ = try await h.fs.read(ino: ino, fh: fh, offset: 0, size: 4096)
        var s = h.fs.statistics()
        #expect(s.openFiles == 1)
        #expect(s.readAheadBytes == 300_000)  // the first window (1 MiB) covers the whole object
        try await h.fs.release(ino: ino, fh: fh)
        s = h.fs.statistics()
        #expect(s.openFiles == 0)
        #expect(s.readAheadBytes == 0)

        let (entry, wfh) = try await h.fs.create(parent: Harness.root, name: "new.txt", mode: 0o644, flags: OpenFlags(O_WRONLY))
        _ = try await h.fs.write(ino: entry.attributes.ino, fh: wfh, offset: 0, data: Data("x".utf8))
        s = h.fs.statistics()
        #expect(s.stagedFiles == 1)
        #expect(s.dirtyFiles == 1)
        try await h.fs.release(ino: entry.attributes.ino, fh: wfh)
        s = h.fs.statistics()
        #expect(s.dirtyFiles == 0)
        #expect(s.lostAndFoundEntries == 0)
        try FileManager.default.createDirectory(atPath: h.config.lostAndFound, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: h.config.lostAndFound + "/kept.1", contents: Data("k".utf8))
        #expect(h.fs.statistics().lostAndFoundEntries == 1)
    }
}
