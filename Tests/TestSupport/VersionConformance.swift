import Foundation
import StorageModel
import Testing

/// The conformance case of a store's past (`ObjectStore.versions`), as `ConformanceCapabilities.versioning`
/// says the store keeps it. docs/SEMANTICS.md "Versions".
extension Conformance {
    static func versions(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        switch caps.versioning {
        case .absent:
            #expect(s.versions == nil, "a store that shows no past answers nil")
        case .off:
            let v = try #require(s.versions, "the store should answer a listing that says it keeps nothing")
            #expect(try await v.versioningState().enabled == false)
            let a1 = try await put(s, p + "a", Data("one".utf8))
            let a2 = try await put(s, p + "a", Data("two".utf8))
            try await put(s, p + "gone/x", Data("x".utf8))
            try await s.delete(p + "gone/x", preconditions: .none)
            let page = try await v.listVersions(ListRequest(prefix: p, delimiter: "/", maxResults: 1000))
            #expect(page.versions.map(\.info.generation) == [a2.generation], "only the live generation")
            #expect(page.versions.allSatisfy { $0.isLive })
            #expect(page.prefixes.isEmpty, "nothing is kept under a deleted folder")
            if caps.readsByGeneration {
                await expectStorageError("objectNotFound", isNotFound) { try await s.read(p + "a", generation: a1.generation, range: nil) }
            } else {
                // The known gap: the live object is served for any generation.
                #expect(try await s.read(p + "a", generation: a1.generation, range: nil) == Data("two".utf8))
            }
        case .on:
            try await versionsKept(s, p, caps)
        }
    }

    /// Every page of a versioned listing.
    public static func allVersions(_ v: any VersionListing, prefix: String, delimiter: String?,
                            maxResults: Int = 1000) async throws -> (prefixes: [String], versions: [ObjectVersion], pages: Int) {
        var prefixes: [String] = []
        var versions: [ObjectVersion] = []
        var token: String?
        var pages = 0
        repeat {
            let page = try await v.listVersions(ListRequest(prefix: prefix, delimiter: delimiter, maxResults: maxResults,
                                                            pageToken: token))
            #expect(page.prefixes.count + page.versions.count <= maxResults)
            prefixes += page.prefixes
            versions += page.versions
            token = page.nextPageToken
            pages += 1
            try #require(pages <= 50, "pagination does not end")
        } while token != nil
        return (prefixes, versions, pages)
    }

    private static func versionsKept(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let v = try #require(s.versions, "a store that keeps versions answers a listing")
        #expect(try await v.versioningState().enabled == true)
        let one = Data("one".utf8), two = Data("two!".utf8)
        let a1 = try await put(s, p + "a", one)
        let a2 = try await put(s, p + "a", two, .init(), Preconditions(ifGenerationMatch: a1.generation))
        let x = try await put(s, p + "dir/x", Data("x".utf8))
        try await s.delete(p + "dir/x", preconditions: .none)
        let b = try await put(s, p + "b", Data("b".utf8))

        // The live listing shows what is live; the versioned one what is kept, with the prefixes
        // of every version (the deleted folder too).
        let live = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 1000))
        #expect(live.prefixes.isEmpty && live.items.map(\.name) == [p + "a", p + "b"])
        let all = try await allVersions(v, prefix: p, delimiter: "/")
        #expect(all.prefixes == [p + "dir/"])
        let aGens = caps.versionsOldestFirst ? [a1.generation, a2.generation] : [a2.generation, a1.generation]
        #expect(all.versions.map { "\($0.info.name)#\($0.info.generation)" }
                == aGens.map { p + "a#\($0)" } + [p + "b#\(b.generation)"])
        let old = try #require(all.versions.first { $0.info.generation == a1.generation })
        #expect(old.info.size == 3 && old.info.md5Hash == a1.md5Hash, "a kept generation keeps its metadata")
        let oldGone = try #require(old.timeDeleted, "a replaced generation has its timeDeleted")
        #expect(oldGone >= a1.timeCreated)
        #expect(old.wasLive(at: a1.timeCreated) && !old.wasLive(at: oldGone))
        #expect(Set(all.versions.filter(\.isLive).map(\.info.generation)) == [a2.generation, b.generation])

        // Flat, in pages of 2: name then generation, the deleted name's generation included.
        if caps.versionPagination {
            let flat = try await allVersions(v, prefix: p, delimiter: nil, maxResults: 2)
            #expect(flat.versions.map(\.info.generation) == aGens + [b.generation, x.generation])
            #expect(flat.pages >= 2)
        } else {
            // The known gap: the second page starts again at the first page's last name.
            let first = try await v.listVersions(ListRequest(prefix: p, delimiter: nil, maxResults: 1))
            let token = try #require(first.nextPageToken)
            let second = try await v.listVersions(ListRequest(prefix: p, delimiter: nil, maxResults: 1, pageToken: token))
            #expect(second.versions.map(\.info.generation) == first.versions.map(\.info.generation))
            let flat = try await allVersions(v, prefix: p, delimiter: nil)
            #expect(flat.versions.map(\.info.generation) == aGens + [b.generation, x.generation])
        }
        let deleted = try await allVersions(v, prefix: p + "dir/", delimiter: "/")
        #expect(deleted.versions.map(\.info.generation) == [x.generation])
        #expect(deleted.versions.first?.timeDeleted != nil, "a deleted generation has its timeDeleted")

        // Kept generations are read by number, whole, in ranges and streamed.
        #expect(try await s.read(p + "a", generation: a1.generation, range: nil) == one)
        #expect(try await s.read(p + "a", generation: a1.generation, range: 1..<3) == Data("ne".utf8))
        let streamed = Streamed()
        try await s.stream(p + "a", generation: a1.generation, range: 0..<3) { streamed.append($0) }
        #expect(streamed.data == one)
        #expect(try await s.read(p + "dir/x", generation: x.generation, range: nil) == Data("x".utf8))
        #expect(try await s.read(p + "dir/x", generation: x.generation, range: 0..<0).isEmpty,
                "an empty read of a deleted name's kept generation finds it")
        #expect(try await s.read(p + "a", generation: nil, range: nil) == two, "the live one is still the newest")

        // A copy from a kept generation checks its preconditions against the live destination.
        if caps.honours(.copy) {
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await s.copy(from: p + "a", sourceGeneration: a1.generation, to: p + "a", metadata: nil,
                                 preconditions: Preconditions(ifGenerationMatch: a1.generation))
            }
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await s.copy(from: p + "a", sourceGeneration: a1.generation, to: p + "a", metadata: nil,
                                 preconditions: .doesNotExist)
            }
        }
        let a3 = try await s.copy(from: p + "a", sourceGeneration: a1.generation, to: p + "a", metadata: nil,
                                  preconditions: Preconditions(ifGenerationMatch: a2.generation))
        #expect(a3.generation > a2.generation && a3.size == 3)
        #expect(try await s.read(p + "a", generation: nil, range: nil) == one)
        // A deleted name comes back from its kept generation, under "does not exist".
        let x2 = try await s.copy(from: p + "dir/x", sourceGeneration: x.generation, to: p + "dir/x", metadata: nil,
                                  preconditions: .doesNotExist)
        #expect(x2.generation > x.generation)
        if caps.honours(.copy) {
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await s.copy(from: p + "dir/x", sourceGeneration: x.generation, to: p + "dir/x", metadata: nil,
                                 preconditions: .doesNotExist)
            }
        }
        await expectStorageError("objectNotFound", isNotFound) {
            try await s.copy(from: p + "b", sourceGeneration: b.generation - 1, to: p + "c", metadata: nil, preconditions: .none)
        }
        await expectStorageError("objectNotFound", isNotFound) { try await s.read(p + "b", generation: b.generation - 1, range: nil) }
        let after = try await allVersions(v, prefix: p + "a", delimiter: nil).versions.sorted { $0.info.generation < $1.info.generation }
        #expect(after.map(\.info.generation) == [a1.generation, a2.generation, a3.generation])
        #expect(after.map(\.isLive) == [false, false, true])
    }
}

/// Bytes delivered by a stream, gathered.
final class Streamed: @unchecked Sendable {
    private let lock = NSLock()
    private var bytes = Data()
    func append(_ d: Data) { lock.withLock { bytes += d } }
    var data: Data { lock.withLock { bytes } }
}
