import Foundation
import ObjectStores
import PropertyBased
import StorageModel
import Testing

@Suite struct ListTests {
    @Test(arguments: [0, -1, 1001, 5000])
    func maxResultsOutOfRangeIsRejectedBeforeAnyRequest(_ n: Int) async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        await #expect(throws: StorageError.invalidArgument(message: "maxResults must be 1…1000, got \(n)")) {
            try await t.storage.reference().list(maxResults: n)
        }
        #expect(t.store.requestCounts["list"] == nil)
    }

    @Test func maxResultsBoundsAreAccepted() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        _ = try await t.storage.reference().list(maxResults: 1)
        _ = try await t.storage.reference().list(maxResults: 1000)
        await #expect(throws: StorageError.self) { try await t.storage.reference().list(maxResults: 10, pageToken: "") }
        #expect(t.store.requestCounts["list"] == 2)
    }

    @Test func seedImagesExample() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        let root = t.storage.reference()
        try await root.child("images/uid/file1").putData(Data("x".utf8))
        let images = try await root.child("images").listAll()
        #expect(images.prefixes.map(\.fullPath) == ["images/uid"])
        #expect(images.items.isEmpty)
        let uid = try await root.child("images/uid").listAll()
        #expect(uid.prefixes.isEmpty)
        #expect(uid.items == [root.child("images/uid/file1")])
        #expect(uid.items.first?.name == "file1")
        let top = try await root.listAll()
        #expect(top.prefixes.map(\.fullPath) == ["images"])
        #expect(top.items.isEmpty)
    }

    @Test func seedSlashExamples() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        // Objects the SDK cannot show are created directly through the store.
        for name in ["correctPrefix/happyItem", "wrongPrefix//sadItem", "lonelyItem/"] {
            _ = try await t.store.write(name, from: .data(Data()), metadata: .init(), preconditions: .none)
        }
        let root = t.storage.reference()
        let top = try await root.listAll()
        #expect(Set(top.prefixes.map(\.fullPath)) == ["correctPrefix", "wrongPrefix", "lonelyItem"])
        #expect(top.items.isEmpty)
        let correct = try await root.child("correctPrefix").listAll()
        #expect(correct.items.map(\.fullPath) == ["correctPrefix/happyItem"])
        #expect(correct.prefixes.isEmpty)
        let wrong = try await root.child("wrongPrefix").listAll()
        #expect(wrong.items.isEmpty && wrong.prefixes.isEmpty, "wrongPrefix//sadItem has two consecutive slashes")
        let lonely = try await root.child("lonelyItem").listAll()
        #expect(lonely.items.isEmpty && lonely.prefixes.isEmpty, "lonelyItem/ ends in a slash")
        // The store itself returns them, as the JSON API does; the facade filters.
        let raw = try await t.store.list(ListRequest(prefix: "lonelyItem/", delimiter: "/"))
        #expect(raw.items.map(\.name) == ["lonelyItem/"])
        let rawWrong = try await t.store.list(ListRequest(prefix: "wrongPrefix/", delimiter: "/"))
        #expect(rawWrong.prefixes == ["wrongPrefix//"])
    }

    @Test func pagesThroughTheFacade() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        let dir = t.storage.reference().child("files/uid")
        for i in 0..<7 { try await dir.child("f\(i)").putData(Data([UInt8(i)])) }
        try await dir.child("sub/a").putData(Data())
        try await dir.child("sub2/b").putData(Data())
        var items: [String] = []
        var prefixes: [String] = []
        var token: String?
        var pages = 0
        repeat {
            let page = try await dir.list(maxResults: 2, pageToken: token)
            #expect(page.items.count + page.prefixes.count <= 2)
            items += page.items.map(\.name)
            prefixes += page.prefixes.map(\.name)
            token = page.pageToken
            pages += 1
        } while token != nil
        #expect(pages == 5)
        #expect(items == (0..<7).map { "f\($0)" })
        #expect(prefixes == ["sub", "sub2"])
        let all = try await dir.listAll()
        #expect(all.items.map(\.name) == items && all.prefixes.map(\.name) == prefixes && all.pageToken == nil)
    }

    @Test func dataMaxSizeAndDelete() async throws {
        let t = try TempStorage()
        defer { t.cleanup() }
        let ref = t.storage.reference().child("blob")
        let meta = try await ref.putData(Data(repeating: 1, count: 100))
        #expect(meta.size == 100 && meta.generation > 0 && meta.fullPath == "blob" && meta.bucket == "bucket")
        await #expect(throws: StorageError.self) { try await ref.data(maxSize: 99) }
        #expect(try await ref.data(maxSize: 100).count == 100)
        try await ref.delete()
        await #expect(throws: StorageError.objectNotFound(path: "blob")) { try await ref.getMetadata() }
    }
}

/// `NameOrder.precedes` is the UTF-8 byte order of the generic comparison it replaces, for
/// strings of any scalars (ASCII, two to four bytes, a common prefix, one a prefix of the
/// other, the empty string, small and heap-stored).
@Suite struct NameOrderTests {
    static let pieces = ["", "a", "ab", "z", "/", "-", "é", "e\u{301}", "日本", "😀", "\u{FFFF}", "\u{10FFFF}",
                         "\u{7F}", "\u{80}", "file-0000", String(repeating: "x", count: 20)]

    @Test func precedesIsTheUTF8ByteOrder() async {
        let string = Gen.int(in: 0...(Self.pieces.count - 1)).array(of: 0...4).map { $0.map { Self.pieces[$0] }.joined() }
        await propertyCheck(input: zip(string, string)) { a, b in
            #expect(NameOrder.precedes(a, b) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(a) \(b)")
            #expect(NameOrder.precedes(a, a) == false)
        }
    }
}
