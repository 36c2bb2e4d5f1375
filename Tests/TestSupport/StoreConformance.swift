import Foundation
import StorageModel
import Testing

/// What a backend under test supports. Where a server lacks a capability, the cases assert what
/// it does instead (its known gap), so a server that changes either way fails the suite; only
/// `metadataMerge` and `dotDotNames` still skip their case. A documented difference of an API
/// (Firebase's v0) is a flag too. Every server's flags carry the evidence for each gap.
public struct ConformanceCapabilities: Sendable {
    /// `maxResults` and page tokens. Without: `maxResults` is ignored, and the first page holds
    /// every entry, with no token.
    public var pagination = true
    /// A PATCH of custom metadata merges key by key (a null removes a key). Without: its case is skipped.
    public var metadataMerge = true
    /// The calls whose preconditions the server checks (412 when they do not hold). Without: the
    /// call goes ahead as if it had none (an upload overwrites, a patch applies, a delete deletes,
    /// a copy overwrites its destination).
    public var honoursPreconditions: PreconditionCalls = .all
    /// Names with `..` segments work. Without: their case is skipped.
    public var dotDotNames = true
    /// A range that starts at or past the end is answered 416 with `Content-Range: bytes */SIZE`
    /// (Cloud Storage does; without the size it cannot be told from a 416 inside the object, which
    /// the store retries as a fault until its deadline).
    public var sizeIn416 = true
    /// `maxResults` counts prefixes and items together (the JSON API). The Firebase emulator counts
    /// items only, and sends every prefix on every page.
    public var maxResultsCountsPrefixes = true
    /// Preconditions are checked by the server atomically with the write. v0 has none: the store
    /// checks them first, so racing writers may both get through (last writer wins).
    public var atomicPreconditions = true
    /// The metageneration of a newly uploaded object: 1. A server that applies an upload's
    /// metadata as a patch of its own starts at 2.
    public var firstMetageneration: Int64 = 1
    /// A PATCH adds one to the metageneration. Without: it stays as it was (and an answer that
    /// has none is read as 1).
    public var patchCountsMetageneration = true
    /// A JSON null in a PATCH removes the property (or custom key). Without: a property keeps its
    /// value, and a custom key stays with the value "" (seen where `metadataMerge` holds).
    public var nullRemovesMetadata = true
    /// What a copy (rewrite) does with the metadata in its request body.
    public var copyMetadata: CopyMetadata = .replaces
    /// What the store keeps of its past (`ObjectStore.versions`), checked by the "versions" case.
    public var versioning: Versioning = .absent
    /// A versioned listing gives a name's generations oldest first (Cloud Storage). Without: newest first.
    public var versionsOldestFirst = true
    /// A versioned listing pages with `maxResults` and tokens. Without: the token of a page is
    /// its last name, and the next page starts with that name's newest generation again.
    public var versionPagination = true
    /// A read with `generation=` reads that generation (404 when it is not kept). Without: the
    /// parameter is ignored and the live object is served.
    public var readsByGeneration = true

    /// What `ObjectStore.versions` gives.
    public enum Versioning: Sendable {
        /// nil: the store shows no past (Firebase's v0, a store that does not say).
        case absent
        /// A listing that says the bucket keeps nothing (`enabled == false`) and lists the live
        /// generations only.
        case off
        /// Replaced and deleted generations are kept, listed with their `timeDeleted`, read and
        /// copied from by number.
        case on
    }
    /// `startOffset`/`endOffset` bound a listing to a name range. Without: they are ignored, and
    /// the answer is the listing without them (Firebase's v0 API has no such parameters).
    public var listOffsets = true
    /// Custom metadata keys the server adds to every upload of its own accord, by prefix
    /// (storage-testbench's `x_emulator_…` and `x_testbench_…` annotations). The suite sees the
    /// store without them (`AddedKeysFilter`); empty: none are added, and none are hidden.
    public var addedKeyPrefixes: [String] = []
    /// A versioned listing (`versions=true`) follows the bucket's versioning and the JSON API.
    /// Without: the "versions" case is skipped (storage-testbench keeps and lists every past
    /// generation whether versioning is on or off, with no `timeDeleted` and no prefixes).
    public var versionListings = true
    /// The bucket has a hierarchical namespace (`ObjectStore.folders`): folders made by mkdir and
    /// by uploads under them, kept when emptied, listed as prefixes, renamed at once; object
    /// names ending in "/" refused. Without: `folders` is nil (a flat bucket), and a name ending
    /// in "/" is an object like any other.
    public var folders = false

    /// The calls that check preconditions on the server.
    public struct PreconditionCalls: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// Uploads as this suite makes them: multipart (every object here is smaller than the
        /// stores' resumable threshold).
        public static let upload = PreconditionCalls(rawValue: 1)
        public static let patch = PreconditionCalls(rawValue: 2)
        public static let delete = PreconditionCalls(rawValue: 4)
        public static let copy = PreconditionCalls(rawValue: 8)
        public static let all: PreconditionCalls = [.upload, .patch, .delete, .copy]
    }

    public enum CopyMetadata: Sendable {
        /// The body's metadata replaces the source's (the JSON API).
        case replaces
        /// The body is ignored: the copy has the source's metadata.
        case ignored
        /// The body's properties replace the source's, its custom metadata is merged over the source's.
        case mergesCustom
    }

    public init(pagination: Bool = true, metadataMerge: Bool = true, honoursPreconditions: PreconditionCalls = .all,
                dotDotNames: Bool = true, sizeIn416: Bool = true, maxResultsCountsPrefixes: Bool = true,
                atomicPreconditions: Bool = true, firstMetageneration: Int64 = 1, patchCountsMetageneration: Bool = true,
                nullRemovesMetadata: Bool = true, copyMetadata: CopyMetadata = .replaces, versioning: Versioning = .absent,
                versionsOldestFirst: Bool = true, versionPagination: Bool = true, readsByGeneration: Bool = true,
                listOffsets: Bool = true, folders: Bool = false) {
        self.pagination = pagination
        self.metadataMerge = metadataMerge
        self.honoursPreconditions = honoursPreconditions
        self.dotDotNames = dotDotNames
        self.sizeIn416 = sizeIn416
        self.maxResultsCountsPrefixes = maxResultsCountsPrefixes
        self.atomicPreconditions = atomicPreconditions
        self.firstMetageneration = firstMetageneration
        self.patchCountsMetageneration = patchCountsMetageneration
        self.nullRemovesMetadata = nullRemovesMetadata
        self.copyMetadata = copyMetadata
        self.versioning = versioning
        self.versionsOldestFirst = versionsOldestFirst
        self.versionPagination = versionPagination
        self.readsByGeneration = readsByGeneration
        self.listOffsets = listOffsets
        self.folders = folders
    }

    /// The metageneration an object has after `patches` PATCHes since its upload.
    public func metageneration(afterPatches patches: Int64) -> Int64 {
        firstMetageneration + (patchCountsMetageneration ? patches : 0)
    }

    public func honours(_ calls: PreconditionCalls) -> Bool { honoursPreconditions.isSuperset(of: calls) }
}

/// Runs every case against fresh stores from `make`; each case uses its own name prefix so one
/// store may be shared. Uses Swift Testing #expect / #require.
public func runStoreConformance(_ make: @Sendable () async throws -> any ObjectStore,
                         capabilities: ConformanceCapabilities = .init()) async throws {
    let run = "conformance-\(UUID().uuidString.prefix(8).lowercased())"
    for c in StoreConformanceCase.all {
        if let needs = c.needs, !needs(capabilities) { continue }
        var store = try await make()
        if !capabilities.addedKeyPrefixes.isEmpty { store = AddedKeysFilter(base: store, prefixes: capabilities.addedKeyPrefixes) }
        try await c.body(store, "\(run)/\(c.name)/", capabilities)
    }
}

/// One named case of the conformance suite.
struct StoreConformanceCase: Sendable {
    let name: String
    let needs: (@Sendable (ConformanceCapabilities) -> Bool)?
    let body: @Sendable (any ObjectStore, String, ConformanceCapabilities) async throws -> Void

    init(_ name: String, needs: (@Sendable (ConformanceCapabilities) -> Bool)? = nil,
         _ body: @escaping @Sendable (any ObjectStore, String, ConformanceCapabilities) async throws -> Void) {
        self.name = name
        self.needs = needs
        self.body = body
    }

    static let all: [StoreConformanceCase] = [
        .init("bytes-and-ranges", Conformance.bytesAndRanges),
        .init("file-upload", Conformance.fileUpload),
        .init("metadata-fields", Conformance.metadataFields),
        .init("generation-zero-on-existing", Conformance.generationZeroOnExisting),
        .init("overwrite-with-generation", Conformance.overwriteWithGeneration),
        .init("patch-fields", Conformance.patchFields),
        .init("patch-custom-merge", needs: { $0.metadataMerge }, Conformance.patchCustomMerge),
        .init("metageneration-precondition", Conformance.metagenerationPrecondition),
        .init("precondition-race", Conformance.preconditionRace),
        .init("list-prefix-delimiter", Conformance.listPrefixDelimiter),
        .init("list-pagination", Conformance.listPagination),
        .init("list-offsets", Conformance.listOffsets),
        .init("list-under-a-partial-name", Conformance.listUnderAPartialName),
        .init("delete", Conformance.deleteThenGet),
        .init("copy", Conformance.copyKeepsBytesAndMetadata),
        .init("missing-object", Conformance.missingObject),
        .init("dot-segments", needs: { $0.dotDotNames }, Conformance.dotSegments),
        .init("versions", needs: { $0.versionListings }, Conformance.versions),
        .init("folders", Conformance.folders),
    ]
}

/// Expects `body` to throw a `StorageError` that `matches` accepts.
public func expectStorageError<T>(_ expected: String, sourceLocation: SourceLocation = #_sourceLocation,
                           _ matches: (StorageError) -> Bool, _ body: () async throws -> T) async {
    do {
        _ = try await body()
        Issue.record("expected \(expected), but the call succeeded", sourceLocation: sourceLocation)
    } catch let e as StorageError {
        #expect(matches(e), "expected \(expected), got \(e)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(expected), got a non-storage error \(error)", sourceLocation: sourceLocation)
    }
}

/// `body`'s result, or nil with the error recorded as an issue (so a case goes on after it).
public func succeeds<T>(sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> T) async -> T? {
    do { return try await body() } catch {
        Issue.record("the call failed: \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

public func isNotFound(_ e: StorageError) -> Bool { if case .objectNotFound = e { return true } else { return false } }
public func isPreconditionFailed(_ e: StorageError) -> Bool { if case .preconditionFailed = e { return true } else { return false } }
public func isConflict(_ e: StorageError) -> Bool { if case .conflict = e { return true } else { return false } }
public func isNotEmpty(_ e: StorageError) -> Bool { if case .notEmpty = e { return true } else { return false } }
public func isInvalidArgument(_ e: StorageError) -> Bool { if case .invalidArgument = e { return true } else { return false } }

public enum Conformance {
    public static let helloWorld = Data("hello world".utf8)
    /// base64(MD5("hello world")) and base64(big-endian CRC32C("hello world")).
    static let helloWorldMD5 = "XrY7u+Ae7tCTyyK7j1rNww=="
    static let helloWorldCRC32C = "yZRlqg=="

    /// Deterministic, non-repeating-looking bytes.
    public static func bytes(_ n: Int, seed: UInt8 = 7) -> Data {
        var x = UInt32(seed) &* 2_654_435_761
        return Data((0..<n).map { _ in x = x &* 1_103_515_245 &+ 12345; return UInt8(truncatingIfNeeded: x >> 16) })
    }

    @discardableResult
    static func put(_ s: any ObjectStore, _ name: String, _ data: Data = helloWorld,
                    _ meta: WritableMetadata = .init(), _ pre: Preconditions = .none) async throws -> ObjectInfo {
        try await s.write(name, from: .data(data), metadata: meta, preconditions: pre)
    }

    static func bytesAndRanges(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let data = bytes(1000)
        let info = try await put(s, p + "blob", data)
        #expect(info.size == 1000)
        #expect(try await s.read(p + "blob", generation: nil, range: nil) == data)
        #expect(try await s.read(p + "blob", generation: info.generation, range: nil) == data)
        #expect(try await s.read(p + "blob", generation: nil, range: 0..<5) == data[0..<5])
        #expect(try await s.read(p + "blob", generation: nil, range: 100..<300) == data[100..<300])
        // Clamped to the size; at or past the end: empty.
        #expect(try await s.read(p + "blob", generation: nil, range: 995..<2000) == data[995..<1000])
        if caps.sizeIn416 {
            #expect(try await s.read(p + "blob", generation: nil, range: 1000..<1010).isEmpty)
            #expect(try await s.read(p + "blob", generation: nil, range: 5000..<6000).isEmpty)
        }
        // An empty object.
        let empty = try await put(s, p + "empty", Data())
        #expect(empty.size == 0)
        #expect(try await s.read(p + "empty", generation: nil, range: nil).isEmpty)
        if caps.sizeIn416 { #expect(try await s.read(p + "empty", generation: nil, range: 0..<10).isEmpty) }
    }

    static func fileUpload(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let data = bytes(300_000, seed: 3)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-\(UUID().uuidString)").path
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let info = try await s.write(p + "from-file", from: .file(path: path), metadata: .init(contentType: "application/octet-stream"),
                                     preconditions: .doesNotExist)
        #expect(info.size == 300_000)
        #expect(try await s.read(p + "from-file", generation: nil, range: nil) == data)
        #expect(try await s.read(p + "from-file", generation: nil, range: 299_990..<400_000) == data[299_990..<300_000])
    }

    static func metadataFields(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let meta = WritableMetadata(cacheControl: "no-cache", contentType: "text/plain", customMetadata: ["colour": "blue", "k2": "v2"])
        let written = try await put(s, p + "hello.txt", helloWorld, meta)
        let info = try await s.getMetadata(p + "hello.txt")
        #expect(info.name == p + "hello.txt")
        #expect(info.bucket == s.bucket)
        #expect(info.size == 11)
        #expect(info.md5Hash == helloWorldMD5)
        if let crc = info.crc32c { #expect(crc == helloWorldCRC32C) }
        #expect(info.generation > 0)
        #expect(info.generation == written.generation)
        #expect(info.metageneration == caps.metageneration(afterPatches: 0))
        #expect(info.contentType == "text/plain")
        #expect(info.writable.cacheControl == "no-cache")
        #expect(info.customMetadata == ["colour": "blue", "k2": "v2"])
        #expect(info.updated >= info.timeCreated)
        #expect(abs(info.timeCreated.timeIntervalSinceNow) < 24 * 3600)
        #expect(written.md5Hash == helloWorldMD5)
        #expect(written.size == 11)
    }

    static func generationZeroOnExisting(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let first = try await put(s, p + "once", helloWorld, .init(), .doesNotExist)
        guard caps.honours(.upload) else {
            // The known gap: the precondition is ignored, and the upload overwrites.
            let second = await succeeds { try await put(s, p + "once", Data("other".utf8), .init(), .doesNotExist) }
            #expect(try await s.getMetadata(p + "once").generation == second?.generation)
            #expect(try await s.read(p + "once", generation: nil, range: nil) == Data("other".utf8))
            return
        }
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await put(s, p + "once", Data("other".utf8), .init(), .doesNotExist)
        }
        let after = try await s.getMetadata(p + "once")
        #expect(after.generation == first.generation)
        #expect(try await s.read(p + "once", generation: nil, range: nil) == helloWorld)
    }

    static func overwriteWithGeneration(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let first = try await put(s, p + "obj", Data("v1".utf8))
        let second = try await put(s, p + "obj", Data("version 2".utf8), .init(),
                                   Preconditions(ifGenerationMatch: first.generation))
        #expect(second.generation > first.generation)
        #expect(second.metageneration == caps.metageneration(afterPatches: 0))
        #expect(second.size == 9)
        #expect(try await s.read(p + "obj", generation: nil, range: nil) == Data("version 2".utf8))
        #expect(try await s.getMetadata(p + "obj").generation == second.generation)
        if caps.honours(.upload) {
            // The generation read before is stale now: a lost race is an error, not an overwrite.
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await put(s, p + "obj", Data("v3".utf8), .init(), Preconditions(ifGenerationMatch: first.generation))
            }
            #expect(try await s.read(p + "obj", generation: nil, range: nil) == Data("version 2".utf8))
        } else {
            // The known gap: the stale generation is ignored, and the upload overwrites.
            _ = await succeeds { try await put(s, p + "obj", Data("v3".utf8), .init(), Preconditions(ifGenerationMatch: first.generation)) }
            #expect(try await s.read(p + "obj", generation: nil, range: nil) == Data("v3".utf8))
        }
    }

    static func patchFields(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let w = try await put(s, p + "doc", helloWorld, .init(contentType: "text/plain"))
        var patch = MetadataPatch()
        patch.contentType = .set("application/json")
        patch.cacheControl = .set("max-age=60")
        let a = try await s.patchMetadata(p + "doc", patch, preconditions: .none)
        #expect(a.contentType == "application/json")
        #expect(a.writable.cacheControl == "max-age=60")
        #expect(a.generation == w.generation)
        #expect(a.metageneration == caps.metageneration(afterPatches: 1))
        var remove = MetadataPatch()
        remove.cacheControl = .remove
        let b = try await s.patchMetadata(p + "doc", remove, preconditions: .none)
        // Without `nullRemovesMetadata`, the known gap: the null is ignored.
        let removed: String? = caps.nullRemovesMetadata ? nil : "max-age=60"
        #expect(b.writable.cacheControl == removed)
        #expect(b.contentType == "application/json", "fields the patch does not name stay")
        #expect(b.metageneration == caps.metageneration(afterPatches: 2))
        let got = try await s.getMetadata(p + "doc")
        #expect(got.writable.cacheControl == removed)
        #expect(got.contentType == "application/json")
        #expect(got.metageneration == caps.metageneration(afterPatches: 2))
        #expect(got.generation == w.generation)
        #expect(try await s.read(p + "doc", generation: nil, range: nil) == helloWorld, "a patch leaves the bytes")
    }

    static func patchCustomMerge(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        try await put(s, p + "m", helloWorld, .init(contentType: "text/plain", customMetadata: ["a": "1", "b": "2"]))
        var patch = MetadataPatch()
        patch.customMetadata = ["c": "3", "a": nil]
        let r = try await s.patchMetadata(p + "m", patch, preconditions: .none)
        // Without `nullRemovesMetadata`, the known gap: the key stays, with the value "".
        let a: [String: String] = caps.nullRemovesMetadata ? [:] : ["a": ""]
        #expect(r.customMetadata == a.merging(["b": "2", "c": "3"]) { $1 })
        #expect(r.contentType == "text/plain")
        var change = MetadataPatch()
        change.customMetadata = ["b": "two"]
        _ = try await s.patchMetadata(p + "m", change, preconditions: .none)
        #expect(try await s.getMetadata(p + "m").customMetadata == a.merging(["b": "two", "c": "3"]) { $1 })
    }

    static func metagenerationPrecondition(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let w = try await put(s, p + "guarded", helloWorld, .init(customMetadata: ["k": "v"]))
        var patch = MetadataPatch()
        patch.customMetadata = ["k": "changed"]
        let patches = caps.honours(.patch)
        if patches {
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await s.patchMetadata(p + "guarded", patch, preconditions: Preconditions(ifMetagenerationMatch: w.metageneration + 1))
            }
            #expect(try await s.getMetadata(p + "guarded").customMetadata == ["k": "v"])
        } else {
            // The known gap: the precondition is ignored, and the patch applies.
            _ = await succeeds { try await s.patchMetadata(p + "guarded", patch, preconditions: Preconditions(ifMetagenerationMatch: w.metageneration + 1)) }
            #expect(try await s.getMetadata(p + "guarded").customMetadata == ["k": "changed"])
        }
        let ok = try await s.patchMetadata(p + "guarded", patch, preconditions: Preconditions(ifMetagenerationMatch: w.metageneration))
        #expect(ok.customMetadata == ["k": "changed"])
        #expect(ok.metageneration == caps.metageneration(afterPatches: patches ? 1 : 2))
        // The old metageneration is stale now.
        if patches {
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await s.patchMetadata(p + "guarded", patch, preconditions: Preconditions(ifMetagenerationMatch: w.metageneration))
            }
        } else {
            _ = await succeeds { try await s.patchMetadata(p + "guarded", patch, preconditions: Preconditions(ifMetagenerationMatch: w.metageneration)) }
        }
        // Generation preconditions on delete.
        guard caps.honours(.delete) else {
            // The known gap: the precondition is ignored, and the object is deleted.
            _ = await succeeds { try await s.delete(p + "guarded", preconditions: Preconditions(ifGenerationMatch: w.generation + 1)) }
            await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "guarded") }
            return
        }
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await s.delete(p + "guarded", preconditions: Preconditions(ifGenerationMatch: w.generation + 1))
        }
        // (recorded, not thrown: a server that ignored the precondition deleted the object, and
        // the cases after this one still run)
        #expect(await succeeds { try await s.getMetadata(p + "guarded").generation } == w.generation,
                "the object survives a delete whose generation precondition fails")
        _ = await succeeds { try await s.delete(p + "guarded", preconditions: Preconditions(ifGenerationMatch: w.generation)) }
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "guarded") }
    }

    /// Writers racing with the same generation precondition: with atomic preconditions exactly one
    /// wins; without (v0), at least one does, every loser is told so (412), and the object ends as one
    /// winner wrote it — never torn, never a loser's bytes.
    static func preconditionRace(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let base = try await put(s, p + "raced", Data("base".utf8))
        let contents = (0..<6).map { Data("writer \($0) ".utf8) + bytes(2000, seed: UInt8($0)) }
        let outcomes = await withTaskGroup(of: (Int, Result<ObjectInfo, any Error>).self) { group in
            for (i, d) in contents.enumerated() {
                group.addTask {
                    do { return (i, .success(try await put(s, p + "raced", d, .init(), Preconditions(ifGenerationMatch: base.generation)))) }
                    catch { return (i, .failure(error)) }
                }
            }
            var all: [(Int, Result<ObjectInfo, any Error>)] = []
            for await o in group { all.append(o) }
            return all
        }
        let winners = outcomes.compactMap { i, r in (try? r.get()).map { _ in i } }
        for (_, r) in outcomes {
            if case .failure(let e) = r { #expect((e as? StorageError).map(isPreconditionFailed) == true, "a loser gets 412, got \(e)") }
        }
        if !caps.honours(.upload) {
            // The known gap: the precondition is ignored, and every writer gets through.
            #expect(winners.count == contents.count, "every conditional writer gets through")
        } else if caps.atomicPreconditions {
            #expect(winners.count == 1, "exactly one conditional writer wins")
        } else {
            #expect(winners.count >= 1, "at least one conditional writer gets through")
        }
        let final = try await s.read(p + "raced", generation: nil, range: nil)
        #expect(winners.contains { contents[$0] == final }, "the object holds a winner's bytes")
        // The base generation is stale now for everyone.
        guard caps.honours(.upload) else {
            _ = await succeeds { try await put(s, p + "raced", Data("late".utf8), .init(), Preconditions(ifGenerationMatch: base.generation)) }
            #expect(try await s.read(p + "raced", generation: nil, range: nil) == Data("late".utf8))
            return
        }
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await put(s, p + "raced", Data("late".utf8), .init(), Preconditions(ifGenerationMatch: base.generation))
        }
    }

    static func listPrefixDelimiter(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        var names = ["a", "b", "Z", "d1/x", "d1/y", "d2/deep/z", "d3/", "é"]
        if caps.folders {
            // A hierarchical namespace has no object named like a folder: d3/ is a folder.
            names.removeAll { $0 == "d3/" }
            await expectStorageError("invalidArgument", isInvalidArgument) { try await put(s, p + "d3/", Data()) }
            _ = try await #require(s.folders).createFolder(p + "d3/")
        }
        for n in names { try await put(s, p + n, Data(n.utf8)) }
        let page = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 1000))
        #expect(page.prefixes == [p + "d1/", p + "d2/", p + "d3/"])
        // Byte order of UTF-8: "Z" < "a" < "b" < "é".
        #expect(page.items.map(\.name) == [p + "Z", p + "a", p + "b", p + "é"])
        #expect(page.items.first(where: { $0.name == p + "a" })?.size == 1)
        #expect(page.nextPageToken == nil)
        // The placeholder named exactly like the prefix is an item of its own listing.
        let d3 = try await s.list(ListRequest(prefix: p + "d3/", delimiter: "/", maxResults: 1000))
        #expect(d3.items.map(\.name) == (caps.folders ? [] : [p + "d3/"]))
        #expect(d3.prefixes.isEmpty)
        let d2 = try await s.list(ListRequest(prefix: p + "d2/", delimiter: "/", maxResults: 1000))
        #expect(d2.prefixes == [p + "d2/deep/"])
        #expect(d2.items.isEmpty)
        // No delimiter: every name under the prefix, flat and sorted.
        let flat = try await s.list(ListRequest(prefix: p, delimiter: nil, maxResults: 1000))
        #expect(flat.prefixes.isEmpty)
        #expect(flat.items.map(\.name) == names.map { p + $0 }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        // A prefix that is not a directory boundary.
        let partial = try await s.list(ListRequest(prefix: p + "d", delimiter: "/", maxResults: 1000))
        #expect(partial.prefixes == [p + "d1/", p + "d2/", p + "d3/"])
        #expect(partial.items.isEmpty)
        // Nothing under an unused prefix.
        let none = try await s.list(ListRequest(prefix: p + "nothing/", delimiter: "/", maxResults: 1000))
        #expect(none.prefixes.isEmpty && none.items.isEmpty && none.nextPageToken == nil)
    }

    static func listPagination(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let names = ["i1", "i2", "i3", "i4", "i5", "dirA/x", "dirA/y", "dirB/z"]
        for n in names { try await put(s, p + n, Data(n.utf8)) }
        let whole = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 1000))
        #expect(whole.prefixes == [p + "dirA/", p + "dirB/"])
        #expect(whole.items.count == 5)
        guard caps.pagination else {
            // The known gap: maxResults is ignored; the first page holds everything, with no token.
            let page = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 2))
            #expect(page.prefixes == whole.prefixes)
            #expect(page.items.map(\.name) == whole.items.map(\.name))
            #expect(page.nextPageToken == nil)
            return
        }
        var prefixes: [String] = []
        var items: [String] = []
        var token: String?
        var pages = 0
        repeat {
            let page = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 2, pageToken: token))
            if caps.maxResultsCountsPrefixes {
                #expect(page.prefixes.count + page.items.count <= 2)
            } else {
                #expect(page.items.count <= 2)
            }
            prefixes += page.prefixes
            items += page.items.map(\.name)
            token = page.nextPageToken
            pages += 1
            try #require(pages <= 20, "pagination does not end")
        } while token != nil
        if caps.maxResultsCountsPrefixes {
            #expect(pages >= 4, "7 entries at 2 per page need at least 4 pages")
        } else {
            #expect(pages >= 3, "5 items at 2 per page need at least 3 pages")
        }
        #expect(prefixes == whole.prefixes)
        #expect(items == whole.items.map(\.name))
        // Without a delimiter, 8 names at 3 per page.
        var flat: [String] = []
        token = nil
        pages = 0
        repeat {
            let page = try await s.list(ListRequest(prefix: p, delimiter: nil, maxResults: 3, pageToken: token))
            #expect(page.items.count <= 3)
            flat += page.items.map(\.name)
            token = page.nextPageToken
            pages += 1
            try #require(pages <= 20, "pagination does not end")
        } while token != nil
        #expect(flat == names.map { p + $0 }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
    }

    /// startOffset (inclusive) and endOffset (exclusive) bound the objects listed, on their full
    /// names; prefixes are rolled up from the objects in range only.
    static func listOffsets(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let names = ["a", "b", "b/x", "b/y", "c", "d/1", "d/2", "e"]
        for n in names { try await put(s, p + n, Data(n.utf8)) }
        func list(_ start: String?, _ end: String?, delimiter: String? = "/", max: Int = 1000,
                  token: String? = nil) async throws -> ListPage {
            try await s.list(ListRequest(prefix: p, delimiter: delimiter, maxResults: max, pageToken: token,
                                         startOffset: start.map { p + $0 }, endOffset: end.map { p + $0 }))
        }
        let whole = try await list(nil, nil)
        #expect(whole.items.map(\.name) == ["a", "b", "c", "e"].map { p + $0 })
        #expect(whole.prefixes == ["b/", "d/"].map { p + $0 })
        guard caps.listOffsets else {
            // The known gap: the offsets are ignored.
            let page = try await list("b", "d")
            #expect(page.items.map(\.name) == whole.items.map(\.name))
            #expect(page.prefixes == whole.prefixes)
            return
        }
        // [b, d): b and c, and the prefix b/ of b/x and b/y; not d/ (d/1 ≥ d).
        let bd = try await list("b", "d")
        #expect(bd.items.map(\.name) == ["b", "c"].map { p + $0 })
        #expect(bd.prefixes == [p + "b/"])
        // An offset inside a prefix's run: d/ comes from d/1 alone. Whether b/ (before
        // startOffset, from b/y) is listed, servers differ (fake-gcs-server leaves it out; the
        // documentation does not say), so a caller cuts ranges at a prefix, never inside one.
        let inner = try await list("b/y", "d/2")
        #expect(inner.items.map(\.name) == [p + "c"])
        #expect(inner.prefixes.last == p + "d/")
        #expect(inner.prefixes.allSatisfy { $0 == p + "b/" || $0 == p + "d/" })
        // A range that starts at a prefix lists it, with all its objects.
        let atB = try await list("b/", "c")
        #expect(atB.items.isEmpty)
        #expect(atB.prefixes == [p + "b/"])
        let before = try await list(nil, "b/y")
        #expect(before.items.map(\.name) == ["a", "b"].map { p + $0 })
        #expect(before.prefixes == [p + "b/"])
        // Without a delimiter: the names themselves, start inclusive, end exclusive.
        let flat = try await list("b/y", "e", delimiter: nil)
        #expect(flat.items.map(\.name) == ["b/y", "c", "d/1", "d/2"].map { p + $0 })
        #expect(try await list("a", "a", delimiter: nil).items.isEmpty)
        guard caps.pagination else { return }
        // Pages within a range: the token goes on inside it.
        var got: [String] = []
        var token: String?
        var pages = 0
        repeat {
            let page = try await list("a", "c", delimiter: nil, max: 1, token: token)
            got += page.items.map(\.name)
            token = page.nextPageToken
            pages += 1
            try #require(pages <= 10, "pagination does not end")
        } while token != nil
        #expect(got == ["a", "b", "b/x", "b/y"].map { p + $0 })
    }

    /// A store that says it lists under a partial name (`listsUnderPartialNames`, what a lookup
    /// asks: docs/SEMANTICS.md §6) answers prefix `n`, no delimiter, up to `n0`, with the object
    /// `n`, its look-alikes and everything under `n/`, in UTF-8 byte order, with metadata. A
    /// server that ignores endOffset adds the names after it (`n0`, `na`), still in order.
    static func listUnderAPartialName(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        guard s.listsUnderPartialNames else { return }
        // (a hierarchical namespace has no object n/: the folder n/ is not listed without a delimiter)
        for n in ["m", "n", "n-1", "n.txt", "n/", "n/in", "n0", "na"] where !(caps.folders && n == "n/") {
            try await put(s, p + n, Data(n.utf8))
        }
        let page = try await s.list(ListRequest(prefix: p + "n", delimiter: nil, maxResults: 16, endOffset: p + "n0"))
        let want = ["n", "n-1", "n.txt", "n/", "n/in"].filter { !(caps.folders && $0 == "n/") }.map { p + $0 }
        let names = page.items.map(\.name)
        #expect(Array(names.prefix(want.count)) == want)
        #expect(names.dropFirst(want.count).allSatisfy { !$0.utf8.lexicographicallyPrecedes((p + "n0").utf8) })
        if caps.listOffsets { #expect(names == want) }
        #expect(page.nextPageToken == nil && page.prefixes.isEmpty)
        #expect(page.items.first?.size == 1 && page.items.first?.generation ?? 0 > 0)
    }

    static func deleteThenGet(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        try await put(s, p + "gone", helloWorld)
        try await put(s, p + "stays", helloWorld)
        try await s.delete(p + "gone", preconditions: .none)
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "gone") }
        await expectStorageError("objectNotFound", isNotFound) { try await s.read(p + "gone", generation: nil, range: nil) }
        await expectStorageError("objectNotFound", isNotFound) { try await s.delete(p + "gone", preconditions: .none) }
        let page = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 1000))
        #expect(page.items.map(\.name) == [p + "stays"])
        // A new object under the old name starts over.
        let again = try await put(s, p + "gone", Data("new".utf8), .init(), .doesNotExist)
        #expect(again.metageneration == caps.metageneration(afterPatches: 0))
        #expect(try await s.read(p + "gone", generation: nil, range: nil) == Data("new".utf8))
    }

    static func copyKeepsBytesAndMetadata(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        let data = bytes(5000, seed: 11)
        let src = try await put(s, p + "src", data, .init(contentType: "image/png", customMetadata: ["owner": "me"]))
        let dst = try await s.copy(from: p + "src", sourceGeneration: nil, to: p + "dst", metadata: nil, preconditions: .doesNotExist)
        #expect(dst.name == p + "dst")
        #expect(dst.size == 5000)
        #expect(dst.md5Hash == src.md5Hash)
        #expect(dst.contentType == "image/png")
        #expect(dst.customMetadata == ["owner": "me"])
        #expect(dst.generation > 0)
        #expect(try await s.read(p + "dst", generation: nil, range: nil) == data)
        #expect(try await s.read(p + "src", generation: nil, range: nil) == data, "the source stays")
        let got = try await s.getMetadata(p + "dst")
        #expect(got.contentType == "image/png")
        #expect(got.customMetadata == ["owner": "me"])
        // Copy of a given source generation with new metadata.
        let renamed = try await s.copy(from: p + "src", sourceGeneration: src.generation, to: p + "dst2",
                                       metadata: WritableMetadata(contentType: "text/plain"), preconditions: .none)
        switch caps.copyMetadata {
        case .replaces:
            #expect(renamed.contentType == "text/plain")
            #expect(renamed.customMetadata.isEmpty)
        case .ignored:
            #expect(renamed.contentType == "image/png")
            #expect(renamed.customMetadata == ["owner": "me"])
        case .mergesCustom:
            #expect(renamed.contentType == "text/plain")
            #expect(renamed.customMetadata == ["owner": "me"])
        }
        #expect(try await s.read(p + "dst2", generation: nil, range: nil) == data)
        await expectStorageError("objectNotFound", isNotFound) {
            try await s.copy(from: p + "no-such-source", sourceGeneration: nil, to: p + "dst3", metadata: nil, preconditions: .none)
        }
        // Preconditions apply to the destination.
        if caps.honours(.copy) {
            await expectStorageError("preconditionFailed", isPreconditionFailed) {
                try await s.copy(from: p + "src", sourceGeneration: nil, to: p + "dst", metadata: nil, preconditions: .doesNotExist)
            }
            let over = try await s.copy(from: p + "src", sourceGeneration: nil, to: p + "dst", metadata: nil,
                                        preconditions: Preconditions(ifGenerationMatch: dst.generation))
            #expect(over.generation > dst.generation)
        } else {
            // The known gap: the precondition is ignored, and the copy overwrites the destination.
            let again = await succeeds {
                try await s.copy(from: p + "src", sourceGeneration: nil, to: p + "dst", metadata: nil, preconditions: .doesNotExist)
            }
            #expect((again?.generation ?? 0) > dst.generation)
        }
    }

    static func missingObject(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        await expectStorageError("objectNotFound", isNotFound) { try await s.read(p + "missing", generation: nil, range: nil) }
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "missing") }
        var patch = MetadataPatch()
        patch.contentType = .set("text/plain")
        await expectStorageError("objectNotFound", isNotFound) { try await s.patchMetadata(p + "missing", patch, preconditions: .none) }
        let page = try await s.list(ListRequest(prefix: p, delimiter: "/", maxResults: 10))
        #expect(page.items.isEmpty && page.prefixes.isEmpty)
    }

    /// Names with `.`/`..` segments are object names like any other: never normalised away.
    static func dotSegments(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        try await put(s, p + "x/../y", Data("dotdot".utf8))
        try await put(s, p + "./z", Data("dot".utf8))
        #expect(try await s.read(p + "x/../y", generation: nil, range: nil) == Data("dotdot".utf8))
        #expect(try await s.read(p + "./z", generation: nil, range: nil) == Data("dot".utf8))
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "y") }
        let flat = try await s.list(ListRequest(prefix: p, delimiter: nil, maxResults: 1000))
        #expect(flat.items.map(\.name) == [p + "./z", p + "x/../y"])
    }

    /// A hierarchical namespace's folders (`caps.folders`), as the JSON API reference describes
    /// them; a flat bucket has none.
    static func folders(_ s: any ObjectStore, _ p: String, _ caps: ConformanceCapabilities) async throws {
        guard caps.folders else {
            #expect(s.folders == nil, "a flat bucket has no folders")
            return
        }
        let f = try #require(s.folders, "a hierarchical bucket has folders")
        // Create, with the parents (recursive); again: a conflict.
        let made = try await f.createFolder(p + "made/deep/")
        #expect(made.name == p + "made/deep/")
        #expect(made.metageneration >= 1)
        #expect(try await f.getFolder(p + "made/").name == p + "made/")
        #expect(try await f.getFolder(p + "made/deep/").name == p + "made/deep/")
        await expectStorageError("conflict", isConflict) { try await f.createFolder(p + "made/deep/") }
        await expectStorageError("objectNotFound", isNotFound) { try await f.getFolder(p + "none/") }
        await expectStorageError("objectNotFound", isNotFound) { try await f.deleteFolder(p + "none/") }
        // An upload makes the folders above it; an object name ending in "/" is refused.
        try await put(s, p + "up/a/b.txt")
        #expect(try await f.getFolder(p + "up/a/").name == p + "up/a/")
        await expectStorageError("invalidArgument", isInvalidArgument) { try await put(s, p + "up/x/", Data()) }
        await expectStorageError("objectNotFound", isNotFound) { try await f.getFolder(p + "up/x/") }
        // Folders are listed as prefixes, empty ones too.
        let top = try await s.list(ListRequest(prefix: p, delimiter: "/"))
        #expect(top.prefixes == [p + "made/", p + "up/"])
        #expect(top.items.isEmpty)
        let inMade = try await s.list(ListRequest(prefix: p + "made/", delimiter: "/"))
        #expect(inMade.prefixes == [p + "made/deep/"] && inMade.items.isEmpty)
        // A folder that holds a folder or an object is not deleted.
        await expectStorageError("notEmpty", isNotEmpty) { try await f.deleteFolder(p + "made/") }
        await expectStorageError("notEmpty", isNotEmpty) { try await f.deleteFolder(p + "up/a/") }
        // A folder stays when its last object goes; then it can be deleted.
        try await s.delete(p + "up/a/b.txt", preconditions: .none)
        #expect(try await f.getFolder(p + "up/a/").name == p + "up/a/")
        #expect(try await s.list(ListRequest(prefix: p + "up/", delimiter: "/")).prefixes == [p + "up/a/"])
        try await f.deleteFolder(p + "up/a/")
        await expectStorageError("objectNotFound", isNotFound) { try await f.getFolder(p + "up/a/") }
        #expect(try await s.list(ListRequest(prefix: p + "up/", delimiter: "/")).prefixes.isEmpty)
        // A rename moves everything under the folder at once, each object keeping its generation.
        let deep = try await put(s, p + "src/in/f", Data("f".utf8))
        let g = try await put(s, p + "src/g", Data("g".utf8), .init(contentType: "text/plain"))
        let renamed = try await f.renameFolder(p + "src/", to: p + "dst/")
        #expect(renamed.name == p + "dst/")
        await expectStorageError("objectNotFound", isNotFound) { try await f.getFolder(p + "src/") }
        await expectStorageError("objectNotFound", isNotFound) { try await f.getFolder(p + "src/in/") }
        #expect(try await f.getFolder(p + "dst/in/").name == p + "dst/in/")
        #expect(try await s.getMetadata(p + "dst/in/f").generation == deep.generation)
        #expect(try await s.read(p + "dst/in/f", generation: nil, range: nil) == Data("f".utf8))
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "src/in/f") }
        #expect(try await s.list(ListRequest(prefix: p, delimiter: "/")).prefixes == [p + "dst/", p + "made/", p + "up/"])
        // Onto an existing folder: a conflict; from a missing one: not found. Nothing moves.
        await expectStorageError("conflict", isConflict) { try await f.renameFolder(p + "dst/", to: p + "made/") }
        await expectStorageError("objectNotFound", isNotFound) { try await f.renameFolder(p + "src/", to: p + "other/") }
        #expect(try await s.getMetadata(p + "dst/g").generation == g.generation)
        // objects.move, where the store offers it: one step, a new generation, metageneration 1,
        // the same bytes and metadata; the folders above the destination made.
        guard let moved = try await s.move(from: p + "dst/g", sourceGeneration: g.generation, to: p + "moved/g",
                                           preconditions: .doesNotExist) else { return }
        #expect(moved.name == p + "moved/g")
        #expect(moved.generation != g.generation)
        #expect(moved.metageneration == 1)
        #expect(moved.md5Hash == g.md5Hash && moved.contentType == "text/plain")
        #expect(try await s.read(p + "moved/g", generation: nil, range: nil) == Data("g".utf8))
        #expect(try await f.getFolder(p + "moved/").name == p + "moved/")
        await expectStorageError("objectNotFound", isNotFound) { try await s.getMetadata(p + "dst/g") }
        // The source's generation is a precondition; so is the destination's.
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await s.move(from: p + "moved/g", sourceGeneration: g.generation, to: p + "again", preconditions: .none)
        }
        let other = try await put(s, p + "other", Data("o".utf8))
        await expectStorageError("preconditionFailed", isPreconditionFailed) {
            try await s.move(from: p + "moved/g", sourceGeneration: moved.generation, to: p + "other", preconditions: .doesNotExist)
        }
        #expect(try await s.getMetadata(p + "moved/g").generation == moved.generation, "a refused move leaves the source")
        let over = try await s.move(from: p + "moved/g", sourceGeneration: moved.generation, to: p + "other",
                                    preconditions: Preconditions(ifGenerationMatch: other.generation))
        #expect(over?.generation ?? 0 > other.generation)
        #expect(try await s.read(p + "other", generation: nil, range: nil) == Data("g".utf8))
        await expectStorageError("objectNotFound", isNotFound) {
            try await s.move(from: p + "no-such", sourceGeneration: 1, to: p + "x", preconditions: .none)
        }
    }
}
