@testable import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Content types from names, and default-valued properties left out of listxattr (docs/SEMANTICS.md §4.1).
@Suite struct CoreContentTypeTests {
    /// A table only this test knows, so a type that comes out can only have come from it.
    private static let table = ContentTypes(table: ["jpg": "image/jpeg", "weird": "application/x-weird"])

    private func harness(writeBack: Bool = false, _ configure: (inout MountConfig) -> Void = { _ in }) -> Harness {
        Harness { c in
            c.contentTypes = ContentTypePolicy(table: Self.table)
            c.writeBack = writeBack
            configure(&c)
        }
    }

    // MARK: - the table

    @Test func theSystemTableIsMimeTypesOverTheBuiltInOne() throws {
        let text = """
        # comment
        application/x-weird\tweird  wrd
        image/x-override jpg # a file entry wins over the built-in one
        text/plain
        """
        let parsed = ContentTypes.parse(text)
        #expect(parsed == ["weird": "application/x-weird", "wrd": "application/x-weird", "jpg": "image/x-override"])
        let dir = NSTemporaryDirectory() + "ctypes-table-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try text.write(toFile: dir + "/mime.types", atomically: true, encoding: .utf8)
        let loaded = ContentTypes.load(paths: [dir + "/mime.types"])
        #expect(loaded.type(forName: "a/b.WRD") == "application/x-weird")
        #expect(loaded.type(forName: "x.jpg") == "image/x-override")
        #expect(loaded.type(forName: "x.png") == "image/png")  // the built-in fallback
        // No file: the built-in table alone.
        let fallback = ContentTypes.load(paths: [dir + "/missing"])
        #expect(fallback.table == ContentTypes.builtIn)
        #expect(fallback.type(forName: "x.jpg") == "image/jpeg")
        // Names as Python's mimetypes splits them: the last dot; a leading dot is no extension.
        #expect(loaded.type(forName: ".weird") == nil)
        #expect(loaded.type(forName: "..weird") == nil)
        #expect(loaded.type(forName: ".pic.jpg.AbC123") == nil)
        #expect(loaded.type(forName: "d.jpg/noext") == nil)
        #expect(loaded.type(forName: "x.") == nil)
    }

    @Test func theSystemTableComesFromEtcMimeTypes() throws {
        try #require(FileManager.default.fileExists(atPath: "/etc/mime.types"), "Scripts/setup.sh installs media-types")
        // An entry of /etc/mime.types that the built-in table does not have.
        #expect(ContentTypes.builtIn["odt"] == nil)
        #expect(ContentTypes.system.type(forName: "report.odt") == "application/vnd.oasis.opendocument.text")
        #expect(ContentTypes.system.type(forName: "pic.JPG") == "image/jpeg")
    }

    // MARK: - create and rename

    @Test func aNewFileGetsTheTypeOfItsName() async throws {
        let h = harness()
        try await h.createFile("", "x.weird", Data("x".utf8))
        #expect(h.store.object("x.weird")?.contentType == "application/x-weird")
        try await h.createFile("", "noext", Data("x".utf8))
        #expect(h.store.object("noext")?.contentType == "application/octet-stream")
    }

    /// rsync writes `.pic.jpg.XXXXXX`, closes it, then renames it: the copy (or, with write-back,
    /// the upload under the final name) carries the final name's type.
    @Test(arguments: [false, true]) func aRenameFromATemporaryNameTakesTheFinalNamesType(writeBack: Bool) async throws {
        let h = harness(writeBack: writeBack)
        try await h.createFile("", ".pic.jpg.AbC123", Data("jpeg bytes".utf8))
        if !writeBack { #expect(h.store.object(".pic.jpg.AbC123")?.contentType == "application/octet-stream") }
        try await h.fs.rename(parent: Harness.root, name: ".pic.jpg.AbC123", newParent: Harness.root, newName: "pic.jpg", flags: 0)
        await h.core.uploads.drained()
        let o = try #require(h.store.object("pic.jpg"))
        #expect(o.contentType == "image/jpeg")
        #expect(h.store.object(".pic.jpg.AbC123") == nil)
        #expect(h.store.count("patch") == 0)  // the copy carried it
        let ino = try await h.ino("pic.jpg")
        #expect(try await h.fs.listxattr(ino: ino) == [])
        #expect(try await h.xattr(ino, "user.storage.contentType") == "image/jpeg")
        // Renamed again: the type is still the name's.
        try await h.fs.rename(parent: Harness.root, name: "pic.jpg", newParent: Harness.root, newName: "pic.weird", flags: 0)
        #expect(h.store.object("pic.weird")?.contentType == "application/x-weird")
    }

    @Test func anExplicitTypeWinsAtCreateAndRename() async throws {
        let h = harness()
        // Set before the first close (cp -a, rsync -X): it goes into the upload, and stays at the rename.
        let parent = Harness.root
        let (e, fh) = try await h.fs.create(parent: parent, name: ".a.jpg.Xy12Zq", mode: 0o644, flags: OpenFlags(O_WRONLY | O_CREAT))
        _ = try await h.fs.write(ino: e.attributes.ino, fh: fh, offset: 0, data: Data("x".utf8))
        try await h.setXattr(e.attributes.ino, "user.storage.contentType", "application/octet-stream")
        try await h.fs.release(ino: e.attributes.ino, fh: fh)
        try await h.fs.rename(parent: parent, name: ".a.jpg.Xy12Zq", newParent: parent, newName: "a.jpg", flags: 0)
        #expect(h.store.object("a.jpg")?.contentType == "application/octet-stream")
        // Set after the upload (a PATCH): the same.
        let b = try await h.createFile("", ".b.jpg.Qw34Er", Data("x".utf8))
        try await h.setXattr(b, "user.storage.contentType", "text/x-mine")
        try await h.fs.rename(parent: parent, name: ".b.jpg.Qw34Er", newParent: parent, newName: "b.jpg", flags: 0)
        #expect(h.store.object("b.jpg")?.contentType == "text/x-mine")
        #expect(try await h.fs.listxattr(ino: h.ino("b.jpg")) == ["user.storage.contentType"])
        // An object this mount did not type keeps its type.
        h.store.put("other.bin", "x", contentType: "application/octet-stream")
        // (The root was listed after the first name found missing: the new object shows after the TTL.)
        h.clock.advance(6)
        _ = try await h.ino("other.bin")
        try await h.fs.rename(parent: parent, name: "other.bin", newParent: parent, newName: "other.jpg", flags: 0)
        #expect(h.store.object("other.jpg")?.contentType == "application/octet-stream")
    }

    @Test func withoutInferenceEveryNewFileGetsTheDefault() async throws {
        let h = harness { $0.contentTypes = ContentTypePolicy(infer: false, defaultType: "text/x-default", table: Self.table) }
        let ino = try await h.createFile("", "a.jpg", Data("x".utf8))
        #expect(h.store.object("a.jpg")?.contentType == "text/x-default")
        #expect(try await h.fs.listxattr(ino: ino) == [])
        let d = harness { $0.contentTypes = ContentTypePolicy(defaultType: "text/x-default", table: Self.table) }
        try await d.createFile("", "a.jpg", Data("x".utf8))
        try await d.createFile("", "a.unknown", Data("x".utf8))
        #expect(d.store.object("a.jpg")?.contentType == "image/jpeg")
        #expect(d.store.object("a.unknown")?.contentType == "text/x-default")
    }

    // MARK: - default-valued properties

    @Test func propertiesEveryObjectHasAnywayAreNotListed() async throws {
        let h = harness()
        let defaults = WritableMetadata(contentDisposition: "inline; filename*=utf-8''a%20b.jpg", contentEncoding: "identity",
                                        contentType: "image/jpeg", customMetadata: ["k": "v"])
        h.store.put("d/a b.jpg", Data("x".utf8), metadata: defaults)
        h.store.put("d/plain", Data("x".utf8), metadata: WritableMetadata(contentDisposition: "inline", contentType: "application/octet-stream"))
        let chosen = WritableMetadata(cacheControl: "no-cache", contentDisposition: "inline; filename*=utf-8''other.jpg",
                                      contentEncoding: "gzip", contentLanguage: "en", contentType: "text/plain")
        h.store.put("d/c.jpg", Data("x".utf8), metadata: chosen)
        let a = try await h.ino("d/a b.jpg")
        #expect(try await h.fs.listxattr(ino: a) == ["user.k"])
        // Still readable by name, and settable.
        #expect(try await h.xattr(a, "user.storage.contentEncoding") == "identity")
        #expect(try await h.xattr(a, "user.storage.contentDisposition") == "inline; filename*=utf-8''a%20b.jpg")
        #expect(try await h.xattr(a, "user.storage.contentType") == "image/jpeg")
        try await h.setXattr(a, "user.storage.contentType", "image/png")
        #expect(try await h.fs.listxattr(ino: a) == ["user.k", "user.storage.contentType"])
        #expect(try await h.fs.listxattr(ino: h.ino("d/plain")) == [])
        #expect(Set(try await h.fs.listxattr(ino: h.ino("d/c.jpg"))) == Set(XattrName.WritableProperty.allCases.map { "user.storage." + $0.rawValue }))
    }

    @Test func firebasesDefaultDispositionIsTheObjectsOwnName() {
        #expect(ContentDisposition.firebaseDefault(forObject: "users/u/Fabián Murillo - CV.pdf")
                == "inline; filename*=utf-8''Fabi%C3%A1n%20Murillo%20-%20CV.pdf")
        #expect(ContentDisposition.isDefault("inline; filename*=utf-8''Fabi%C3%A1n%20Murillo%20-%20CV.pdf", forObject: "x/Fabián Murillo - CV.pdf"))
        #expect(ContentDisposition.isDefault("inline", forObject: "x/y"))
        #expect(ContentDisposition.isDefault("Inline; filename*=UTF-8''y", forObject: "x/y"))
        #expect(!ContentDisposition.isDefault("inline; filename*=utf-8''.y.AbC123", forObject: "x/y"))
        #expect(!ContentDisposition.isDefault("attachment", forObject: "x/y"))
        #expect(!ContentDisposition.isDefault("attachment; filename*=utf-8''y", forObject: "x/y"))
    }
}
