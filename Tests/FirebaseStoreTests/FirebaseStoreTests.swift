import FirebaseStore
import Foundation
import NIOCore
import StorageModel
import TestSupport
import Testing

/// What the v0 store does beyond the conformance suite: listing cost and concurrency, download
/// tokens, patches of only what changed, pinned generations, client-side preconditions, copies
/// streamed through a file, and the faults of the network.
@Suite(.serialized) struct FirebaseStoreTests {
    /// Pages like the core's: 1000 at a time to the end.
    static func listAll(_ store: FirebaseStore, prefix: String) async throws -> (items: [ObjectInfo], prefixes: [String]) {
        var items: [ObjectInfo] = []
        var prefixes: [String] = []
        var token: String? = nil
        repeat {
            let p = try await store.list(ListRequest(prefix: prefix, delimiter: "/", maxResults: 1000, pageToken: token))
            items += p.items
            prefixes += p.prefixes
            token = p.nextPageToken
        } while token != nil
        return (items, prefixes)
    }

    @Test(arguments: [FirebaseTestServer.Flavour.emulator, .production])
    func aListingOfNItemsCostsItsPagesAndNConcurrentGets(flavour: FirebaseTestServer.Flavour) async throws {
        try await withFirebase(flavour: flavour, maxConnections: 16) { f in
            // Two pages on one flavour, one on the other: more would only load the machine that runs
            // the other suites' timing tests beside this one.
            let n = flavour == .production ? 1001 : 300
            for i in 0..<n { f.server.seed(String(format: "obj%05d", i), Data("x\(i)".utf8)) }
            f.server.seed("sub/a", Data("a".utf8))
            f.server.configure { $0.latency = .milliseconds(20) }
            f.server.clearRecorded()
            let start = ContinuousClock.now
            let (items, prefixes) = try await Self.listAll(f.store, prefix: "")
            let took = ContinuousClock.now - start
            let rec = f.server.recorded
            #expect(items.count == n)
            #expect(items.map(\.name) == (0..<n).map { String(format: "obj%05d", $0) })
            #expect(items.allSatisfy { $0.size > 0 && $0.generation > 0 && $0.md5Hash != nil }, "full metadata, as from gs://")
            #expect(prefixes == ["sub/"])
            #expect(rec.filter(\.isList).count == (n + 999) / 1000, "ceil(N/1000) list pages")
            #expect(rec.filter(\.isMetadataGet).count == n, "one metadata GET per item, nothing more")
            // The server answers each request 20 ms after it came: requests in flight at once are
            // requests sent before the earlier ones were answered. (How long the listing takes is
            // printed, not checked: a debug build on a machine shared with other builds is
            // CPU-bound here, and a 300-object listing was seen taking 7 s.)
            let overlap = f.server.read { $0.maxMetadataGetsInFlight }
            #expect(overlap >= 4, "the GETs overlap (at most 16 at once): \(overlap)")
            #expect(overlap <= 16, "bounded by maxConnections: \(overlap)")
            print("listing \(n) objects at 20 ms per request, 16 at once: \(took), \(overlap) GETs in flight at most")
        }
    }

    @Test func aDirectoryListingAlsoLooksUpItsPlaceholder() async throws {
        try await withFirebase { f in
            f.server.seed("dir/", Data(), metadata: ["goog-reserved-posix-mode": "750"])
            for i in 0..<10 { f.server.seed("dir/f\(i)", Data("\(i)".utf8)) }
            f.server.seed("empty/", Data())
            f.server.clearRecorded()
            let page = try await f.store.list(ListRequest(prefix: "dir/", delimiter: "/", maxResults: 1000))
            #expect(page.items.map(\.name) == ["dir/"] + (0..<10).map { "dir/f\($0)" })
            #expect(page.items.first?.customMetadata["goog-reserved-posix-mode"] == "750")
            let rec = f.server.recorded
            #expect(rec.filter(\.isList).count == 1)
            #expect(rec.filter(\.isMetadataGet).count == 11, "10 items and the placeholder")
            // An empty directory (placeholder only): v0 lists nothing, the store shows it as the JSON API does.
            let empty = try await f.store.list(ListRequest(prefix: "empty/", delimiter: "/", maxResults: 1))
            #expect(empty.items.map(\.name) == ["empty/"])
            let root = try await f.store.list(ListRequest(prefix: "", delimiter: "/", maxResults: 1000))
            #expect(root.prefixes == ["dir/", "empty/"])
            #expect(root.items.isEmpty)
        }
    }

    /// The emulator pages in UTF-16 order, Cloud Storage in UTF-8 byte order: "😀" and "ｆ" come
    /// in opposite orders. A delimited listing across pages still returns each name once.
    @Test(arguments: [FirebaseTestServer.Flavour.emulator, .production])
    func pagesInEitherOrderLoseNoName(flavour: FirebaseTestServer.Flavour) async throws {
        try await withFirebase(flavour: flavour) { f in
            let names = ["x/a", "x/\u{1F600}", "x/\u{FF46}", "x/z", "x/d1/q", "x/d2/q"]
            for n in names { f.server.seed(n, Data(n.utf8)) }
            var items: [String] = []
            var prefixes: [String] = []
            var token: String? = nil
            var pages = 0
            repeat {
                let p = try await f.store.list(ListRequest(prefix: "x/", delimiter: "/", maxResults: 1, pageToken: token))
                items += p.items.map(\.name)
                prefixes += p.prefixes
                token = p.nextPageToken
                pages += 1
            } while token != nil && pages < 20
            #expect(items.sorted() == ["x/a", "x/\u{1F600}", "x/\u{FF46}", "x/z"].sorted())
            #expect(prefixes == ["x/d1/", "x/d2/"])
        }
    }

    /// A walk over many small server pages, either order, either way of sending prefixes: every
    /// name once, placeholders included; in byte order where the server pages in byte order.
    @Test(arguments: [FirebaseTestServer.Flavour.emulator, .production])
    func aWalkOverManyPagesLosesNoName(flavour: FirebaseTestServer.Flavour) async throws {
        var t = fastTuning
        t.walkPageSize = 2
        try await withFirebase(flavour: flavour, tuning: t) { f in
            let names = ["w/", "w/a", "w/\u{1F600}", "w/\u{FF46}", "w/b/", "w/b/1", "w/b/2", "w/b/3", "w/c/d/e", "w/c-x", "w/z", "w/zz/", "w/zz/y"]
            for n in names { f.server.seed(n, Data(n.utf8)) }
            var got: [String] = []
            var token: String? = nil
            var pages = 0
            repeat {
                let p = try await f.store.list(ListRequest(prefix: "w/", delimiter: nil, maxResults: 3, pageToken: token))
                #expect(p.items.count <= 3)
                got += p.items.map(\.name)
                token = p.nextPageToken
                pages += 1
            } while token != nil && pages < 100
            #expect(got.sorted() == names.sorted(), "every name once")
            if flavour == .production {
                #expect(got == names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }, "in byte order")
            }
        }
    }

    @Test func aFlatListingWalksDirectoriesAndFindsPlaceholders() async throws {
        try await withFirebase { f in
            for n in ["t/", "t/a", "t/b/", "t/b/c", "t/b/d/e", "t/c-d", "t/z"] { f.server.seed(n, Data(n.utf8)) }
            var names: [String] = []
            var token: String? = nil
            var pages = 0
            repeat {
                let p = try await f.store.list(ListRequest(prefix: "t/", delimiter: nil, maxResults: 2, pageToken: token))
                #expect(p.items.count <= 2)
                #expect(p.prefixes.isEmpty)
                names += p.items.map(\.name)
                token = p.nextPageToken
                pages += 1
            } while token != nil && pages < 50
            #expect(names == ["t/", "t/a", "t/b/", "t/b/c", "t/b/d/e", "t/c-d", "t/z"])
        }
    }

    @Test(arguments: [FirebaseTestServer.Flavour.emulator, .production])
    func downloadTokensAreNeverShownCopiedOrSent(flavour: FirebaseTestServer.Flavour) async throws {
        try await withFirebase(flavour: flavour) { f in
            // Written behind v0 with the GCS key, and without any token.
            f.server.seed("legacy", Data("l".utf8), metadata: ["firebaseStorageDownloadTokens": "secret-1", "k": "v"])
            f.server.seed("bare", Data("b".utf8))
            let legacy = try await f.store.getMetadata("legacy")
            #expect(legacy.customMetadata == ["k": "v"])
            let bare = try await f.store.getMetadata("bare")
            #expect(bare.customMetadata.isEmpty)
            #expect(bare.metageneration == 2, "the first GET minted a token: v0 moves metageneration on")
            #expect(f.server.object("bare")?.downloadTokens.count == 1)
            let copy = try await f.store.copy(from: "legacy", sourceGeneration: nil, to: "copied", metadata: nil, preconditions: .none)
            #expect(copy.customMetadata == ["k": "v"])
            let src = try #require(f.server.object("legacy")), dst = try #require(f.server.object("copied"))
            #expect(Set(dst.downloadTokens).isDisjoint(with: src.downloadTokens), "the copy has its own token")
            var patch = MetadataPatch()
            patch.customMetadata = ["firebaseStorageDownloadTokens": "mine"]
            let e = await storageError { _ = try await f.store.patchMetadata("legacy", patch, preconditions: .none) }
            guard case .invalidArgument? = e else { Issue.record("got \(String(describing: e))"); return }
            _ = try await f.store.write("up", from: .data(Data("u".utf8)),
                                        metadata: .init(customMetadata: ["firebaseStorageDownloadTokens": "x", "a": "b"]),
                                        preconditions: .none)
            #expect(f.server.object("up")?.metadata == ["a": "b"])
            for r in f.server.recorded where r.method != "GET" {
                let body = String(decoding: r.body, as: UTF8.self)
                #expect(!body.contains("downloadTokens") && !body.contains("firebaseStorageDownloadTokens") && !body.contains("secret-1"),
                        "\(r.method) \(r.path) sent a download token")
                #expect(!r.uri.contains("token="), "no request uses a download token")
            }
        }
    }

    @Test func aPatchSendsOnlyWhatChanges() async throws {
        try await withFirebase { f in
            _ = try await f.store.write("doc", from: .data(Data("x".utf8)),
                                        metadata: .init(contentType: "text/plain", customMetadata: ["a": "1", "b": "2"]),
                                        preconditions: .none)
            // Another writer changes another key meanwhile.
            var theirs = MetadataPatch()
            theirs.customMetadata = ["b": "theirs"]
            _ = try await f.store.patchMetadata("doc", theirs, preconditions: .none)
            f.server.clearRecorded()
            var mine = MetadataPatch()
            mine.customMetadata = ["a": nil, "c": "3"]
            let r = try await f.store.patchMetadata("doc", mine, preconditions: .none)
            #expect(r.customMetadata == ["b": "theirs", "c": "3"], "the other writer's key survives")
            let patches = f.server.recorded.filter { $0.method == "PATCH" }
            #expect(patches.count == 1)
            let body = try #require(try JSONSerialization.jsonObject(with: patches[0].body) as? [String: Any])
            #expect(Set(body.keys) == ["metadata"])
            let m = try #require(body["metadata"] as? [String: Any])
            #expect(Set(m.keys) == ["a", "c"])
            #expect(m["a"] is NSNull)
            #expect(patches[0].headers["content-type"]?.hasPrefix("application/json") == true)
            #expect(patches[0].headers["authorization"]?.hasPrefix("Firebase ") == true)
            #expect(f.server.recorded.count == 1, "no precondition asked, no GET before the PATCH")
        }
    }

    /// Collects what a streamed read delivers.
    final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var bytes = Data()
        var data: Data { lock.withLock { bytes } }
        func add(_ d: Data) { lock.withLock { bytes.append(d) } }
    }

    @Test func readsOfAGenerationNeverReturnAnotherOnesBytes() async throws {
        try await withFirebase { f in
            let v1 = try await f.store.write("o", from: .data(Conformance.bytes(5000, seed: 1)), metadata: .init(), preconditions: .none)
            #expect(try await f.store.read("o", generation: v1.generation, range: 10..<20) == Conformance.bytes(5000, seed: 1)[10..<20])
            _ = try await f.store.write("o", from: .data(Conformance.bytes(5000, seed: 2)), metadata: .init(), preconditions: .none)
            let e = await storageError { _ = try await f.store.read("o", generation: v1.generation, range: 0..<100) }
            #expect(e == .objectNotFound(path: "o"))
            let got = Received()
            let s = await storageError {
                try await f.store.stream("o", generation: v1.generation, range: 0..<100) { got.add($0) }
            }
            #expect(s == .objectNotFound(path: "o"))
            #expect(got.data.isEmpty, "not one byte of the other generation")
            let gets = f.server.recorded.filter { $0.uri.contains("alt=media") }
            #expect(gets.count == 3, "a changed generation is not retried: \(gets.count)")
        }
    }

    @Test func withoutAGenerationHeaderTheGenerationIsCheckedAfterTheRead() async throws {
        try await withFirebase(configure: { $0.sendsGenerationHeader = false }) { f in
            let v1 = try await f.store.write("o", from: .data(Data("one".utf8)), metadata: .init(), preconditions: .none)
            #expect(try await f.store.read("o", generation: v1.generation, range: nil) == Data("one".utf8))
            let got = Received()
            try await f.store.stream("o", generation: v1.generation, range: 0..<3) { got.add($0) }
            #expect(got.data == Data("one".utf8))
            _ = try await f.store.write("o", from: .data(Data("two".utf8)), metadata: .init(), preconditions: .none)
            let e = await storageError { _ = try await f.store.read("o", generation: v1.generation, range: nil) }
            #expect(e == .objectNotFound(path: "o"), "the bytes that came are not taken")
            let s = await storageError { try await f.store.stream("o", generation: v1.generation, range: 0..<3) { _ in } }
            #expect(s == .objectNotFound(path: "o"), "the stream ends in an error")
        }
    }

    @Test func preconditionsAreCheckedBeforeTheWrite() async throws {
        try await withFirebase { f in
            let v1 = try await f.store.write("p", from: .data(Data("1".utf8)), metadata: .init(), preconditions: .doesNotExist)
            f.server.clearRecorded()
            let e = await storageError {
                _ = try await f.store.write("p", from: .data(Data("2".utf8)), metadata: .init(), preconditions: .doesNotExist)
            }
            #expect(e == .preconditionFailed(path: "p"))
            #expect(f.server.recorded.map(\.method) == ["GET"], "one GET, and no upload")
            // Someone else overwrites: the generation read is stale.
            let theirs = try await f.store.write("p", from: .data(Data("theirs".utf8)), metadata: .init(), preconditions: .none)
            let e2 = await storageError {
                _ = try await f.store.write("p", from: .data(Data("mine".utf8)), metadata: .init(),
                                            preconditions: Preconditions(ifGenerationMatch: v1.generation))
            }
            #expect(e2 == .preconditionFailed(path: "p"))
            #expect(f.server.object("p")?.data == Data("theirs".utf8))
            let ok = try await f.store.write("p", from: .data(Data("mine".utf8)), metadata: .init(),
                                             preconditions: Preconditions(ifGenerationMatch: theirs.generation))
            #expect(ok.generation > theirs.generation)
            // No precondition ever reaches the server.
            #expect(!f.server.recorded.contains { $0.uri.contains("ifGeneration") || $0.uri.contains("ifMetageneration") })
        }
    }

    @Test func aCopyIsStreamedThroughAFileInParts() async throws {
        var t = fastTuning
        t.chunkSize = 256 << 10
        t.resumableThreshold = 512 << 10
        // A directory of its own: copies of tests running beside this one use the shared one.
        let tmp = NSTemporaryDirectory() + "bucketfs-copy-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: tmp) }
        t.temporaryDirectory = tmp
        try await withFirebase(tuning: t) { f in
            let data = Conformance.bytes(1_300_000, seed: 3)
            let src = try await f.store.write("big", from: .data(data), metadata: .init(contentType: "image/png", customMetadata: ["k": "v"]),
                                              preconditions: .none)
            f.server.clearRecorded()
            let dst = try await f.store.copy(from: "big", sourceGeneration: src.generation, to: "big-copy", metadata: nil,
                                             preconditions: .doesNotExist)
            #expect(dst.md5Hash == src.md5Hash)
            #expect(dst.contentType == "image/png" && dst.customMetadata == ["k": "v"])
            #expect(f.server.object("big-copy")?.data == data)
            let reads = f.server.recorded.filter { $0.uri.contains("alt=media") }
            #expect(reads.count == 5, "ceil(1.3 MB / 256 KiB) ranged reads, never the whole object at once: \(reads.count)")
            #expect(reads.allSatisfy { $0.headers["range"] != nil })
            let chunks = f.server.recorded.filter { $0.headers["x-goog-upload-command"]?.contains("upload") == true }
            #expect(chunks.count == 5, "uploaded resumable in 256 KiB chunks: \(chunks.count)")
            #expect(chunks.allSatisfy { $0.bodyBytes <= 256 << 10 })
            // A source that changed since it was read is not copied.
            let e = await storageError {
                _ = try await f.store.copy(from: "big", sourceGeneration: src.generation - 1, to: "other", metadata: nil, preconditions: .none)
            }
            #expect(e == .objectNotFound(path: "big"))
            #expect(f.server.object("other") == nil)
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: tmp)
            #expect(leftovers.isEmpty, "temporary files removed: \(leftovers)")
        }
    }
}

/// The network lies (docs/SEMANTICS.md §5) on v0 too: each case runs the store against one injected fault.
@Suite struct FirebaseFaultTests {
    static let payload = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })

    static var quickIdle: FirebaseStore.Tuning {
        var t = fastTuning
        t.idleTimeout = .milliseconds(500)
        return t
    }

    @Test func fiveOhThreesAndQuotaAreRetried() async throws {
        try await withFirebase { f in
            _ = try await f.store.write("o", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            f.server.configure { $0.failNext = 2; $0.quotaNext = 0 }
            #expect(try await f.store.getMetadata("o").size == 1)
            f.server.configure { $0.quotaNext = 2 }
            #expect(try await f.store.read("o", generation: nil, range: nil) == Data("x".utf8))
            f.server.configure { $0.failNext = 1 }
            _ = try await f.store.write("o", from: .data(Data("y".utf8)), metadata: .init(), preconditions: .none)
            #expect(f.server.object("o")?.data == Data("y".utf8))
        }
    }

    @Test func fiveOhThreeForeverEndsWithinTheDeadline() async throws {
        try await withFirebase(deadline: .seconds(2)) { f in
            f.server.configure { $0.alwaysStatus = 503 }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await f.store.getMetadata("o") }
            #expect(ContinuousClock.now - start < .seconds(6))
            guard case .retryLimitExceeded(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("injected HTTP 503"), "the server's message is quoted: \(m)")
            f.server.configure { $0.alwaysStatus = 402 }
            let q = await storageError { _ = try await f.store.getMetadata("o") }
            guard case .retryLimitExceeded(let qm)? = q else { Issue.record("got \(String(describing: q))"); return }
            #expect(qm.contains("quota exceeded"))
        }
    }

    @Test func stallsAndCutBodiesAreNeverData() async throws {
        try await withFirebase(tuning: Self.quickIdle) { f in
            let info = try await f.store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            f.server.configure { $0.mediaFault = .stallAfterHeaders; $0.mediaFaultTimes = 1 }
            #expect(try await f.store.read("o", generation: info.generation, range: nil) == Self.payload)
            f.server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1 }
            #expect(try await f.store.read("o", generation: info.generation, range: 0..<200_000) == Self.payload.prefix(200_000))
            // A stream: retried until its first byte, never after.
            f.server.configure { $0.mediaFault = .stallAfterHeaders; $0.mediaFaultTimes = 1 }
            let got = FirebaseStoreTests.Received()
            try await f.store.stream("o", generation: info.generation, range: 1000..<250_000) { got.add($0) }
            #expect(got.data == Self.payload.subdata(in: 1000..<250_000))
            f.server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1 }
            let cut = FirebaseStoreTests.Received()
            let e = await storageError { try await f.store.stream("o", generation: info.generation, range: 0..<200_000) { cut.add($0) } }
            #expect(e != nil)
            #expect(Self.payload.starts(with: cut.data) && cut.data.count <= 1000)
        }
        try await withFirebase(deadline: .seconds(2), tuning: Self.quickIdle) { f in
            let info = try await f.store.write("o", from: .data(Self.payload), metadata: .init(), preconditions: .none)
            f.server.configure { $0.mediaFault = .truncateUnframed(keep: 1000); $0.mediaFaultTimes = 1000 }
            let e = await storageError { _ = try await f.store.read("o", generation: info.generation, range: 10..<200_000) }
            #expect(e != nil, "always cut: an error, never the short bytes")
        }
    }

    @Test func aLostDeleteAnswerIsASuccess() async throws {
        try await withFirebase { f in
            _ = try await f.store.write("d", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            f.server.configure { $0.loseAnswerTo = "DELETE" }
            try await f.store.delete("d", preconditions: .none)
            #expect(f.server.object("d") == nil)
            #expect(f.server.recorded.filter { $0.method == "DELETE" }.count == 2, "the retry found 404")
            let e = await storageError { try await f.store.delete("d", preconditions: .none) }
            #expect(e == .objectNotFound(path: "d"))
        }
    }

    @Test func aLostUploadAnswerIsRetried() async throws {
        try await withFirebase { f in
            f.server.configure { $0.loseAnswerTo = "POST" }
            let info = try await f.store.write("new", from: .data(Self.payload), metadata: .init(), preconditions: .doesNotExist)
            #expect(info.size == Int64(Self.payload.count))
            #expect(f.server.object("new")?.data == Self.payload)
        }
    }

    @Test func aResumableUploadResumesFromWhatTheSessionHolds() async throws {
        var t = fastTuning
        t.chunkSize = 512 << 10
        t.resumableThreshold = 256 << 10
        try await withFirebase(tuning: t) { f in
            let data = Conformance.bytes(1_500_000, seed: 8)
            f.server.configure { $0.dropUploadAfterBytes = 300_000 }
            let info = try await f.store.write("r", from: .data(data), metadata: .init(contentType: "a/b", customMetadata: ["m": "1"]),
                                               preconditions: .none)
            #expect(info.size == 1_500_000)
            let o = try #require(f.server.object("r"))
            #expect(o.data == data)
            #expect(o.metadata == ["m": "1"] && o.props["contentType"] == "a/b")
            let queries = f.server.recorded.filter { $0.headers["x-goog-upload-command"] == "query" }
            #expect(queries.count == 1, "asked the session once")
            let starts = f.server.recorded.filter { $0.headers["x-goog-upload-command"] == "start" }
            #expect(starts.count == 1, "the session was kept")
        }
    }
}
