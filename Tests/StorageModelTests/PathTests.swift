import Foundation
import ObjectStores
import StorageModel
import Testing

/// A facade over a fresh embedded bucket in a temp directory.
struct TempStorage {
    let path: String
    let store: EmbeddedStore
    let storage: Storage
    init(bucket: String = "bucket") throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("model-\(UUID().uuidString)").path
        store = try EmbeddedStore(directory: path, bucket: bucket)
        storage = Storage(store: store)
    }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

/// A storage whose store must never be reached (for checks that happen before any request).
struct UnreachableStore: StoreBackend {
    let bucket: String
    func list(_ request: ListRequest) async throws -> ListPage { Issue.record("list reached the store"); return ListPage() }
    func getMetadata(_ name: String) async throws -> ObjectInfo { Issue.record("get reached the store"); throw StorageError.cancelled }
    func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        Issue.record("patch reached the store"); throw StorageError.cancelled
    }
    func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        Issue.record("read reached the store"); return Data()
    }
    func write(_ name: String, from source: UploadSource, metadata: WritableMetadata, preconditions: Preconditions) async throws -> ObjectInfo {
        Issue.record("write reached the store"); throw StorageError.cancelled
    }
    func delete(_ name: String, preconditions: Preconditions) async throws { Issue.record("delete reached the store") }
    func copy(from source: String, sourceGeneration: Int64?, to destination: String, metadata: WritableMetadata?,
              preconditions: Preconditions) async throws -> ObjectInfo {
        Issue.record("copy reached the store"); throw StorageError.cancelled
    }
}

@Suite struct PathTests {
    let storage = Storage(store: UnreachableStore(bucket: "bucket"))

    @Test func childJoinsAndNormalises() {
        let root = storage.reference()
        #expect(root.child("/a//b///").fullPath == "a/b")
        #expect(root.child("a").child("b/c").fullPath == "a/b/c")
        #expect(root.child("a").child("/b/").fullPath == "a/b")
        #expect(root.child("").fullPath == "")
        #expect(root.child("///").fullPath == "")
        #expect(storage.reference(withPath: "x//y/").fullPath == "x/y")
        #expect(root.child("images").child("uid/file1") == root.child("images/uid/file1"))
    }

    @Test func parentRootAndName() throws {
        let ref = storage.reference().child("a/b/c.txt")
        #expect(ref.name == "c.txt")
        #expect(ref.bucket == "bucket")
        #expect(ref.description == "gs://bucket/a/b/c.txt")
        let parent = try #require(ref.parent())
        #expect(parent.fullPath == "a/b")
        #expect(parent.name == "b")
        let top = try #require(parent.parent())
        #expect(top.fullPath == "a")
        let root = try #require(top.parent())
        #expect(root.fullPath == "")
        #expect(root.name == "")
        #expect(root.parent() == nil)
        #expect(ref.root() == storage.reference())
        #expect(ref.root().fullPath == "")
        #expect(storage.reference().parent() == nil)
    }

    @Test func validationLimits() throws {
        #expect(throws: StorageError.pathError(path: "", problem: .empty)) { try StoragePath.validateObjectName("") }
        let max = String(repeating: "a", count: 1024)
        try StoragePath.validateObjectName(max)
        let over = String(repeating: "a", count: 1025)
        #expect(throws: StorageError.pathError(path: over, problem: .tooLong(bytes: 1025))) { try StoragePath.validateObjectName(over) }
        // Bytes of UTF-8, not characters: 512 × "é" is 1024 bytes, 513 is over.
        try StoragePath.validateObjectName(String(repeating: "é", count: 512))
        let wide = String(repeating: "é", count: 513)
        #expect(throws: StorageError.pathError(path: wide, problem: .tooLong(bytes: 1026))) { try StoragePath.validateObjectName(wide) }
        for bad in ["a\nb", "a\rb", "\n", "dir/x\r\n"] {
            #expect(throws: StorageError.pathError(path: bad, problem: .containsNewline)) { try StoragePath.validateObjectName(bad) }
        }
        for allowed in ["a#b", "x[1]", "star*", "what?", "#[]*?"] {
            try StoragePath.validateObjectName(allowed)
        }
    }

    @Test func facadeChecksPathsBeforeAnyRequest() async {
        let root = storage.reference()
        await #expect(throws: StorageError.pathError(path: "", problem: .empty)) { try await root.getMetadata() }
        await #expect(throws: StorageError.pathError(path: "", problem: .empty)) { try await root.putData(Data()) }
        let newline = root.child("a\nb")
        await #expect(throws: StorageError.pathError(path: "a\nb", problem: .containsNewline)) { try await newline.delete() }
        let long = root.child(String(repeating: "x", count: 1100))
        await #expect(throws: StorageError.pathError(path: long.fullPath, problem: .tooLong(bytes: 1100))) {
            try await long.data(maxSize: 10)
        }
    }

    @Test func discouragedCharactersAreAllowedThroughTheFacade() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        let ref = t.storage.reference().child("odd/#[]*?")
        try await ref.putData(Data("ok".utf8))
        #expect(try await ref.data(maxSize: 10) == Data("ok".utf8))
        #expect(try await t.storage.reference().child("odd").listAll().items == [ref])
    }

    @Test func warnOnceWarnsOnce() {
        let w = WarnOnce()
        let seen = Counter()
        w.handler = { _ in seen.add() }
        #expect(w.warn("name 'a#' is discouraged"))
        #expect(!w.warn("name 'a#' is discouraged"))
        #expect(w.warn("another", key: "k"))
        #expect(!w.warn("another message, same key", key: "k"))
        #expect(seen.value == 2)
    }

    @Test func mountProblems() {
        #expect(StoragePath.mountProblem("a/b") == nil)
        #expect(StoragePath.mountProblem("dir/") == nil)
        #expect(StoragePath.mountProblem("dir/", allowTrailingSlash: false) == .unrepresentableSegment(""))
        #expect(StoragePath.mountProblem("a//b") == .unrepresentableSegment(""))
        #expect(StoragePath.mountProblem("a/../b") == .unrepresentableSegment(".."))
        #expect(StoragePath.mountProblem("./b") == .unrepresentableSegment("."))
        let seg = String(repeating: "s", count: 256)
        #expect(StoragePath.mountProblem("a/" + seg) == .segmentTooLong(segment: seg, bytes: 256))
        #expect(StoragePath.mountProblem("a\nb") == .containsNewline)
        #expect(StoragePath.mountProblem("a\u{0}b") == .containsNul)
        #expect(StoragePath.mountProblem("d/a\u{0}") == .containsNul)
        #expect(StoragePath.mountProblem("/") == .unrepresentableSegment(""))
        #expect(StoragePath.mountProblem("a//") == .unrepresentableSegment(""))
        #expect(StoragePath.mountProblem("a/./") == .unrepresentableSegment("."))
        #expect(StoragePath.mountProblem("a/.../..b/b..") == nil)
        #expect(StoragePath.mountProblem("a/" + String(repeating: "é", count: 127) + "/") == nil)  // 254 bytes
        #expect(StoragePath.mountProblem("a/" + String(repeating: "é", count: 128)) == .segmentTooLong(segment: String(repeating: "é", count: 128), bytes: 256))
    }

    /// Segments end at the byte `/`, as the kernel splits a path: a `/` followed by a combining
    /// mark (one Character with it) still ends one, so `.` + U+0301 is a name of its own and
    /// `a/\u{301}b`'s file is `\u{301}b` in the directory `a`.
    @Test func segmentsEndAtTheSlashByte() {
        #expect(StoragePath.lastSegment("a/\u{301}b") == "\u{301}b")
        #expect(StoragePath.parent("a/\u{301}b") == "a")
        #expect(StoragePath.lastSegment("ab") == "ab")
        #expect(StoragePath.lastSegment("") == "")
        #expect(StoragePath.lastSegment("a/") == "")
        #expect(StoragePath.parent("x/y/z") == "x/y")
        #expect(StoragePath.parent("x") == "")
        #expect(StoragePath.parent("") == nil)
        #expect(StoragePath.mountProblem("a/\u{301}b") == nil)
        #expect(StoragePath.mountProblem("a/.\u{301}") == nil)
        #expect(StoragePath.mountProblem("a//\u{301}") == .unrepresentableSegment(""))
        let seg = "\u{301}" + String(repeating: "s", count: 254)  // 256 bytes after the slash
        #expect(StoragePath.mountProblem("a/" + seg) == .segmentTooLong(segment: seg, bytes: 256))
    }
}

final class Counter: @unchecked Sendable {
    private var n = 0
    private let lock = NSLock()
    func add() { lock.withLock { n += 1 } }
    var value: Int { lock.withLock { n } }
}
