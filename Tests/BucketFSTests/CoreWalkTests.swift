import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing

/// Metadata walks: cached answers need no request and no Task; an expired directory
/// is revalidated with one listing, not a request per name; readdir builds only what fits.
@Suite struct CoreWalkTests {
    func tree(_ h: Harness, files: Int) {
        for i in 0..<files { h.store.put(String(format: "d/f%04d", i), "content \(i)") }
    }

    @Test func cachedAnswersNeedNoRequestWhileFreshAndStepAsideWhenStale() async throws {
        let h = Harness()
        h.store.put("d/a", "x", custom: ["k": "v"])
        let d = try await h.ino("d")
        _ = try await h.readdirAll(d)
        h.store.resetCounts()
        guard case .success(let e)? = h.fs.cachedLookup(parent: d, name: "a") else {
            Issue.record("a fresh listing answers lookup"); return
        }
        guard case .failure(let missing)? = h.fs.cachedLookup(parent: d, name: "missing") else {
            Issue.record("a name missing from a fresh listing is ENOENT with no request"); return
        }
        #expect(missing == .ENOENT)
        #expect(h.fs.cachedGetattr(ino: e.attributes.ino)?.0.size == 1)
        #expect(try h.fs.cachedGetxattr(ino: e.attributes.ino, name: "user.k")?.get() == Array("v".utf8))
        #expect(h.fs.cachedListxattr(ino: e.attributes.ino)?.contains("user.k") == true)
        #expect(h.store.totalRequests == 0)
        h.clock.advance(6)
        #expect(h.fs.cachedLookup(parent: d, name: "a") == nil)
        #expect(h.fs.cachedGetattr(ino: e.attributes.ino) == nil)
        #expect(h.fs.cachedGetxattr(ino: e.attributes.ino, name: "user.k") == nil)
        #expect(h.fs.cachedListxattr(ino: e.attributes.ino) == nil)
    }

    @Test func anExpiredDirectoryIsRevalidatedWithOneListing() async throws {
        let h = Harness { $0.listPageSize = 100 }
        tree(h, files: 250)
        let d = try await h.ino("d")
        let first = try await h.readdirAll(d)
        #expect(first.count == 250)
        h.clock.advance(6)
        h.store.resetCounts()
        // Every name looked up again and stat'ed after the TTL: one listing (3 pages), no GETs.
        for entry in first {
            let e = try await h.fs.lookup(parent: d, name: entry.name)
            _ = try await h.fs.getattr(ino: e.attributes.ino)
        }
        #expect(h.store.count("list") == 3, "⌈250/100⌉ pages: \(h.store.counts)")
        #expect(h.store.count("get") == 0)
        // A file deleted behind the mount's back is gone at the next revalidation.
        h.store.removeBehind("d/f0007")
        h.clock.advance(6)
        await #expect(throws: Errno.ENOENT) { _ = try await h.fs.getattr(ino: first[7].entry.attributes.ino) }
    }

    @Test func aTarLikeWalkAfterTheTTLCostsOneReadPerFile() async throws {
        let h = Harness()
        tree(h, files: 40)
        let d = try await h.ino("d")
        let listed = try await h.readdirAll(d)
        h.clock.advance(6)
        h.store.resetCounts()
        for entry in listed {
            let e = try await h.fs.lookup(parent: d, name: entry.name)
            _ = try await h.fs.getattr(ino: e.attributes.ino)
            let data = try await h.readAll(ino: e.attributes.ino)
            #expect(!data.isEmpty)
        }
        #expect(h.store.count("read") == 40)
        #expect(h.store.count("get") == 0)
        #expect(h.store.count("list") == 1)
    }

    @Test func readdirBuildsOnlyWhatFits() async throws {
        let h = Harness()
        tree(h, files: 100)
        let d = try await h.ino("d")
        let fh = try await h.fs.opendir(ino: d)
        let part = try await h.fs.readdir(ino: d, fh: fh, offset: 0, limit: 7)
        #expect(part.count == 7)
        let next = try await h.fs.readdir(ino: d, fh: fh, offset: part.last!.offset, limit: 7)
        #expect(next.first?.name == "f0007")
        h.fs.releasedir(ino: d, fh: fh)
    }

    @Test func withATTLOfZeroEachQuestionIsOneRequest() async throws {
        let h = Harness { $0.metadataTTL = 0 }
        tree(h, files: 20)
        let d = try await h.ino("d")
        let listed = try await h.readdirAll(d)
        h.store.resetCounts()
        for entry in listed { _ = try await h.fs.getattr(ino: entry.entry.attributes.ino) }
        #expect(h.store.count("get") == 20, "a GET each, never a re-listing per file")
        #expect(h.store.count("list") == 0)
    }
}
