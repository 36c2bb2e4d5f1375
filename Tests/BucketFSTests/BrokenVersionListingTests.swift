@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import Testing
import TestSupport

/// A versioned listing as storage-testbench gives it (its `list_object` with `versions=true`
/// returns every generation it holds, none with a `timeDeleted`; its `delete_object` drops the
/// live generation itself and leaves the older ones): over a versioned `MemoryStore`, every
/// generation loses its `timeDeleted`, and a deleted name loses its last generation.
struct TimelessListing: VersionListing {
    let base: any VersionListing

    func listVersions(_ request: ListRequest) async throws -> VersionPage {
        var page = try await base.listVersions(request)
        var newest: [String: ObjectVersion] = [:]
        for v in page.versions where v.info.generation > newest[v.info.name]?.info.generation ?? .min {
            newest[v.info.name] = v
        }
        page.versions = page.versions
            .filter { v in !(newest[v.info.name]!.timeDeleted != nil && newest[v.info.name]!.info.generation == v.info.generation) }
            .map { ObjectVersion(info: $0.info, timeDeleted: nil) }
        return page
    }

    func versioningState() async throws -> VersioningState { try await base.versioningState() }
}

/// Its first answer is one taken earlier (before a change behind it); then the store's own.
final class StaleOnceListing: VersionListing, @unchecked Sendable {
    let base: any VersionListing
    private var stale: VersionPage?
    private let lock = NSLock()

    init(base: any VersionListing, stale: VersionPage) {
        self.base = base
        self.stale = stale
    }

    func listVersions(_ request: ListRequest) async throws -> VersionPage {
        if let page = lock.withLock({ () -> VersionPage? in defer { stale = nil }; return stale }) { return page }
        return try await base.listVersions(request)
    }

    func versioningState() async throws -> VersioningState { try await base.versioningState() }
}

/// A versioned listing that breaks the versioning rules (docs/SEMANTICS.md §10.3, `VersionRules`)
/// is reported by name, never shown as a past nor restored from.
@Suite struct BrokenVersionListingTests {
    static func moment(_ mem: MemoryStore) async throws -> Date {
        let page = try await mem.listVersions(ListRequest(prefix: "", delimiter: nil))
        return page.versions.map { max($0.info.updated, $0.timeDeleted ?? .distantPast) }.max()!.addingTimeInterval(0.5)
    }

    /// The case met on storage-testbench: files written with a shell's `>` (an empty generation,
    /// then the content), then their directory deleted. The server's listing keeps the empty
    /// generations, with no `timeDeleted`, and drops the deleted ones: read as it comes, a
    /// moment before the delete shows the files empty, and `restore` finds them "already equal".
    @Test func deletedFilesAreNotShownAsEmptyFilesOfAnEarlierMoment() async throws {
        let mem = MemoryStore(versioning: .on)
        let empty = mem.put("docs/a.txt", Data())
        mem.put("docs/a.txt", "the content")
        mem.put("docs/b.txt", "b")
        let moment = try await Self.moment(mem)
        try await mem.delete("docs/a.txt", preconditions: .none)
        try await mem.delete("docs/b.txt", preconditions: .none)
        let listing = TimelessListing(base: mem.versions!)
        let view = PastStore(base: mem, listing: listing, moment: moment)
        let h = Harness(store: mem, view: view) {
            $0.readOnly = true
            $0.pastMoment = moment
        }
        await #expect(throws: Errno.EIO) { try await h.lookup("docs/a.txt") }
        await #expect(throws: Errno.EIO) { try await h.names("") }
        do {
            _ = try await view.snapshot()
            Issue.record("a listing that breaks the rules was shown as a past")
        } catch let broken as BrokenVersionListing {
            #expect(broken.faults == [.liveDiffers(name: "docs/a.txt", listed: empty.generation, live: nil)])
            #expect(broken.description.contains("'docs/a.txt': generation \(empty.generation) is listed as live"))
            #expect(broken.description.contains("no live object"))
        }
        // Kept broken: not listed again at every operation.
        let lists = mem.counts["list", default: 0]
        await #expect(throws: Errno.EIO) { try await h.lookup("docs") }
        #expect(mem.counts["list", default: 0] == lists)
        // restore plans nothing from it.
        await #expect(throws: BrokenVersionListing.self) {
            _ = try await Restorer.load(listing, live: mem, prefix: "docs/", moment: moment)
        }
        #expect(mem.copies.isEmpty)
    }

    @Test func overwrittenGenerationsListedWithoutTimeDeletedAreReported() async throws {
        let mem = MemoryStore(versioning: .on)
        let one = mem.put("f.txt", "one")
        let two = mem.put("f.txt", "two")
        let moment = try await Self.moment(mem)
        let view = PastStore(base: mem, listing: TimelessListing(base: mem.versions!), moment: moment)
        do {
            _ = try await view.snapshot()
            Issue.record("several live generations were shown as a past")
        } catch let broken as BrokenVersionListing {
            #expect(broken.faults == [.severalLive(name: "f.txt", generations: [one.generation, two.generation])])
            #expect(broken.description.contains("generations \(one.generation), \(two.generation) are all listed without a timeDeleted"))
        }
    }

    @Test func theRulesOnTheirOwn() {
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        func v(_ name: String, _ g: Int64, deleted: Bool) -> ObjectVersion {
            ObjectVersion(info: ObjectInfo(bucket: "b", name: name, generation: g, metageneration: 1, size: 1, timeCreated: t0,
                                           updated: t0, md5Hash: nil, crc32c: nil, writable: WritableMetadata()),
                          timeDeleted: deleted ? t0.addingTimeInterval(1) : nil)
        }
        // As a bucket keeps them: the newest live, the rest deleted; a name all deleted; a
        // generation listed twice (fake-gcs-server's pages repeat).
        #expect(VersionRules.faults([v("a", 1, deleted: true), v("a", 2, deleted: false), v("b", 3, deleted: true),
                                     v("c", 4, deleted: false), v("c", 4, deleted: false)]).isEmpty)
        #expect(VersionRules.faults([v("z", 2, deleted: false), v("a", 1, deleted: false), v("a", 5, deleted: false)])
                == [.severalLive(name: "a", generations: [1, 5])])
        #expect(VersionRules.faults([v("a", 1, deleted: false), v("a", 2, deleted: true)])
                == [.liveNotNewest(name: "a", live: 1, newest: 2)])
    }

    /// A name deleted between the versioned listing and the live one is asked again, found
    /// deleted in a fresh listing, and shown as that fresh listing says: not a fault.
    @Test func aChangeBetweenTheTwoListingsIsNotAFault() async throws {
        let mem = MemoryStore(versioning: .on)
        mem.put("keep.txt", "k")
        let f = mem.put("f.txt", "one")
        let stale = try await mem.listVersions(ListRequest(prefix: "", delimiter: nil))
        try await mem.delete("f.txt", preconditions: .none)
        let moment = try await Self.moment(mem)
        let checked = try await PastListing.load(StaleOnceListing(base: mem.versions!, stale: stale), live: mem, prefix: "")
        #expect(checked.versions.first { $0.info.generation == f.generation }?.timeDeleted != nil)
        let snapshot = PastSnapshot(moment: moment, scope: "", versions: checked.versions, requests: checked.requests)
        #expect(snapshot.entries.map(\.name) == ["keep.txt"])
        // The versioned listing, the live one, then for the one suspect: two GETs and its versions.
        #expect(checked.requests == 5)
    }
}
