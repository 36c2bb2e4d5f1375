import BucketFS
import Foundation
import FuseKit
import StorageModel
import TestSupport
import Testing

/// Extended attributes (docs/SEMANTICS.md §4).
@Suite struct CoreXattrTests {
    private static let XATTR_CREATE: Int32 = 1
    private static let XATTR_REPLACE: Int32 = 2

    /// A mount with one file `f` (looked up, so its metadata is cached) and counters reset.
    private func fixture(custom: [String: String] = ["color": "blue", "size": "xl"],
                         contentType: String? = "text/plain") async throws -> (Harness, UInt64) {
        let h = Harness()
        h.store.put("f.txt", "hello", contentType: contentType, custom: custom)
        let ino = try await h.ino("f.txt")
        h.store.resetCounts()
        return (h, ino)
    }

    @Test func customKeysGetListSetRemove() async throws {
        let (h, ino) = try await fixture()
        #expect(try await h.xattr(ino, "user.color") == "blue")
        // text/plain is what f.txt's name means: not listed (docs/SEMANTICS.md §4.1).
        #expect(Set(try await h.fs.listxattr(ino: ino)) == ["user.color", "user.size"])
        try await h.setXattr(ino, "user.new", "value ü")
        #expect(h.store.object("f.txt")!.customMetadata["new"] == "value ü")
        #expect(try await h.xattr(ino, "user.new") == "value ü")
        try await h.setXattr(ino, "user.color", "red")
        #expect(h.store.object("f.txt")!.customMetadata["color"] == "red")
        try await h.fs.removexattr(ino: ino, name: "user.size")
        #expect(h.store.object("f.txt")!.customMetadata == ["color": "red", "new": "value ü"])
        #expect(h.store.patches.last?.patch.customMetadata["size"] == .some(nil))
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "user.size") }
        #expect(!(try await h.fs.listxattr(ino: ino)).contains("user.size"))
        #expect(h.store.counts == ["patch": 3])
    }

    @Test func setxattrIsOnePatchWithTheWholeMapAndAMetagenerationPrecondition() async throws {
        let (h, ino) = try await fixture(custom: ["a": "1", "b": "2", XattrName.mtimeKey: "1600000000"])
        let before = h.store.object("f.txt")!
        try await h.setXattr(ino, "user.c", "3")
        #expect(h.store.counts == ["patch": 1])
        let call = try #require(h.store.patches.first)
        #expect(call.name == "f.txt")
        #expect(call.preconditions.ifMetagenerationMatch == before.metageneration)
        #expect(call.patch.customMetadata == ["a": "1", "b": "2", "c": "3", XattrName.mtimeKey: "1600000000"])
        #expect(call.patch.contentType == .keep)
        let after = h.store.object("f.txt")!
        #expect(after.customMetadata == ["a": "1", "b": "2", "c": "3", XattrName.mtimeKey: "1600000000"])
        #expect(after.contentType == "text/plain")
        #expect(after.generation == before.generation)
        // The cache took the answer: reading it back costs nothing, and the next set uses the new metageneration.
        #expect(try await h.xattr(ino, "user.c") == "3")
        try await h.setXattr(ino, "user.d", "4")
        #expect(h.store.counts == ["patch": 2])
        #expect(h.store.patches.last?.preconditions.ifMetagenerationMatch == after.metageneration)
    }

    @Test func contentTypeGetSetRemove() async throws {
        let (h, ino) = try await fixture()
        #expect(try await h.xattr(ino, "user.storage.contentType") == "text/plain")
        try await h.setXattr(ino, "user.storage.contentType", "application/json")
        #expect(h.store.object("f.txt")!.contentType == "application/json")
        #expect(h.store.patches.last?.patch.contentType == .set("application/json"))
        #expect(h.store.patches.last?.patch.customMetadata.isEmpty == true)
        try await h.fs.removexattr(ino: ino, name: "user.storage.contentType")
        #expect(h.store.patches.last?.patch.contentType == .remove)
        #expect(h.store.object("f.txt")!.contentType == nil)
        #expect(!(try await h.fs.listxattr(ino: ino)).contains("user.storage.contentType"))
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "user.storage.contentType") }
        #expect(h.store.counts == ["patch": 2])
        // Other writable properties work the same way.
        try await h.setXattr(ino, "user.storage.cacheControl", "no-cache")
        #expect(h.store.object("f.txt")!.writable.cacheControl == "no-cache")
        #expect(try await h.fs.listxattr(ino: ino).contains("user.storage.cacheControl"))
    }

    @Test func readOnlyPropertiesAreReadableButNotSettableNorListed() async throws {
        let (h, ino) = try await fixture()
        let info = h.store.object("f.txt")!
        #expect(try await h.xattr(ino, "user.storage.md5Hash") == info.md5Hash)
        #expect(try await h.xattr(ino, "user.storage.generation") == String(info.generation))
        #expect(try await h.xattr(ino, "user.storage.metageneration") == String(info.metageneration))
        #expect(try await h.xattr(ino, "user.storage.size") == "5")
        #expect(try await h.xattr(ino, "user.storage.fullPath") == "f.txt")
        #expect(try await h.xattr(ino, "user.storage.bucket") == "test-bucket")
        for name in ["user.storage.md5Hash", "user.storage.generation", "user.storage.size", "user.storage.updated"] {
            await #expect(throws: Errno.EPERM) { try await h.setXattr(ino, name, "1") }
            await #expect(throws: Errno.EPERM) { try await h.fs.removexattr(ino: ino, name: name) }
        }
        let listed = try await h.fs.listxattr(ino: ino)
        #expect(!listed.contains { $0.hasPrefix("user.storage.") && $0 != "user.storage.contentType" })
        #expect(h.store.totalRequests == 0)
    }

    @Test func hiddenKeysAreNeitherListedNorReadableNorSettable() async throws {
        let (h, ino) = try await fixture(custom: ["firebaseStorageDownloadTokens": "secret-token",
                                                  XattrName.mtimeKey: "1600000000", "gcsfuse_mtime": "x", "shown": "y"])
        let listed = try await h.fs.listxattr(ino: ino)
        #expect(listed.contains("user.shown"))
        #expect(!listed.contains { $0.contains("firebase") || $0.contains("goog-reserved") || $0.contains("gcsfuse") })
        for name in ["user.firebaseStorageDownloadTokens", "user." + XattrName.mtimeKey, "user.gcsfuse_mtime"] {
            await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: name) }
            await #expect(throws: Errno.EPERM) { try await h.setXattr(ino, name, "1") }
            await #expect(throws: Errno.EPERM) { try await h.fs.removexattr(ino: ino, name: name) }
        }
        #expect(h.store.totalRequests == 0)
        #expect(h.store.object("f.txt")!.customMetadata["firebaseStorageDownloadTokens"] == "secret-token")
    }

    @Test func localNamespacesCostNoRequest() async throws {
        let h = Harness()
        h.store.put("f", "1")
        let ino = try await h.ino("f")
        h.clock.advance(100)  // even with stale caches
        h.store.resetCounts()
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "security.capability") }
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "trusted.x") }
        // system.* and the rest of security.* are not supported: `ls -l` then asks once per
        // mount, not per file.
        await #expect(throws: Errno.ENOTSUP) { try await h.fs.getxattr(ino: ino, name: "security.selinux") }
        await #expect(throws: Errno.ENOTSUP) { try await h.fs.getxattr(ino: ino, name: "system.posix_acl_access") }
        // docs/SEMANTICS.md §4: answered locally; setting such a name is not supported here.
        await #expect(throws: Errno.ENOTSUP) { try await h.setXattr(ino, "security.selinux", "x") }
        await #expect(throws: Errno.ENOTSUP) { try await h.setXattr(ino, "trusted.x", "x") }
        await #expect(throws: Errno.ENOTSUP) { try await h.fs.removexattr(ino: ino, name: "system.posix_acl_access") }
        #expect(h.store.totalRequests == 0)
    }

    @Test func limitsAreCheckedBeforeAnyRequest() async throws {
        let (h, ino) = try await fixture(custom: ["big": String(repeating: "b", count: 4000),
                                                  "big2": String(repeating: "c", count: 4000)])
        await #expect(throws: Errno.EINVAL) {
            try await h.fs.setxattr(ino: ino, name: "user.bad", value: [0xff, 0xfe, 0x41], flags: 0)
        }
        await #expect(throws: Errno.E2BIG) { try await h.setXattr(ino, "user.huge", String(repeating: "v", count: 4097)) }
        // 8 KiB total: 3 + 4000 + 4 + 4000 + 4 + 300 > 8192.
        await #expect(throws: Errno.ENOSPC) { try await h.setXattr(ino, "user.more", String(repeating: "m", count: 300)) }
        #expect(h.store.count("patch") == 0)
        #expect(h.store.totalRequests == 0)
        // Exactly 4096 bytes is fine when it fits.
        let (h2, ino2) = try await fixture(custom: [:])
        try await h2.setXattr(ino2, "user.v", String(repeating: "v", count: 4096))
        #expect(h2.store.object("f.txt")!.customMetadata["v"]?.utf8.count == 4096)
    }

    @Test func createAndReplaceFlagsAndMissingAttributes() async throws {
        let (h, ino) = try await fixture()
        await #expect(throws: Errno.EEXIST) { try await h.setXattr(ino, "user.color", "x", flags: Self.XATTR_CREATE) }
        await #expect(throws: Errno.ENODATA) { try await h.setXattr(ino, "user.nope", "x", flags: Self.XATTR_REPLACE) }
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "user.nope") }
        await #expect(throws: Errno.ENODATA) { try await h.fs.removexattr(ino: ino, name: "user.nope") }
        #expect(h.store.count("patch") == 0)
        try await h.setXattr(ino, "user.fresh", "1", flags: Self.XATTR_CREATE)
        try await h.setXattr(ino, "user.color", "green", flags: Self.XATTR_REPLACE)
        #expect(h.store.object("f.txt")!.customMetadata == ["color": "green", "size": "xl", "fresh": "1"])
    }

    @Test func setxattrOnAPrefixOnlyDirectoryCreatesThePlaceholder() async throws {
        let h = Harness()
        h.store.put("photos/1.jpg", "x")
        let ino = try await h.ino("photos")
        #expect(try await h.fs.listxattr(ino: ino) == [])
        await #expect(throws: Errno.ENODATA) { try await h.fs.getxattr(ino: ino, name: "user.album") }
        #expect(h.store.object("photos/") == nil)
        try await h.setXattr(ino, "user.album", "summer")
        let ph = try #require(h.store.object("photos/"))
        #expect(ph.size == 0)
        #expect(ph.customMetadata == ["album": "summer"])
        #expect(h.store.writes.last?.preconditions == .doesNotExist)
        #expect(try await h.xattr(ino, "user.album") == "summer")
        // The directory still lists its file, not the placeholder.
        #expect(try await h.names("photos") == ["1.jpg"])
        // A second attribute is a patch of the placeholder.
        h.store.resetCounts()
        try await h.setXattr(ino, "user.year", "2024")
        #expect(h.store.counts == ["patch": 1])
        #expect(h.store.object("photos/")!.customMetadata == ["album": "summer", "year": "2024"])
    }

    @Test func aConcurrentMetadataChangeIsNotLost() async throws {
        let (h, ino) = try await fixture(custom: ["mine": "0"])
        // Another writer changes the metadata after our cache was filled.
        var other = MetadataPatch()
        other.customMetadata = ["theirs": "kept"]
        let bumped = h.store.patchBehind("f.txt", other)!
        try await h.setXattr(ino, "user.mine", "1")
        let final = h.store.object("f.txt")!
        #expect(final.customMetadata == ["mine": "1", "theirs": "kept"])
        #expect(h.store.count("patch") == 2)  // the 412, then the retry
        #expect(h.store.count("get") == 1)    // the re-read
        #expect(h.store.patches.last?.preconditions.ifMetagenerationMatch == bumped.metageneration)
        #expect(try await h.xattr(ino, "user.theirs") == "kept")
    }

    @Test func readOnlyMountRefusesChanges() async throws {
        let h = Harness { $0.readOnly = true }
        h.store.put("f", "1", custom: ["k": "v"])
        let ino = try await h.ino("f")
        h.store.resetCounts()
        #expect(try await h.xattr(ino, "user.k") == "v")
        await #expect(throws: Errno.EROFS) { try await h.setXattr(ino, "user.k", "w") }
        await #expect(throws: Errno.EROFS) { try await h.fs.removexattr(ino: ino, name: "user.k") }
        #expect(h.store.totalRequests == 0)
    }
}

extension CoreXattrTests {
    @Test func directoryXattrsFollowThePlaceholderAfterTheTTL() async throws {
        let h = Harness { $0.metadataTTL = 5 }
        h.store.put("d/", Data(), custom: ["k": "1"])
        h.store.put("d/file", "x")
        let ino = try await h.ino("d")
        #expect(try await h.xattr(ino, "user.k") == "1")
        var p = MetadataPatch()
        p.customMetadata = ["k": "2"]
        h.store.patchBehind("d/", p)
        h.store.resetCounts()
        h.clock.advance(1)
        #expect(try await h.xattr(ino, "user.k") == "1")  // within the TTL: cached, no request
        #expect(h.store.totalRequests == 0)
        h.clock.advance(10)
        #expect(try await h.xattr(ino, "user.k") == "2")
        #expect(h.store.counts == ["get": 1])
        #expect(try await h.fs.listxattr(ino: ino) == ["user.k"])
        #expect(h.store.counts == ["get": 1])
        // A placeholder removed behind the back: the directory (still a prefix) has no xattrs.
        h.store.removeBehind("d/")
        h.clock.advance(10)
        #expect(try await h.fs.listxattr(ino: ino) == [])
        _ = try await h.fs.getattr(ino: ino)
        #expect(h.store.counts == ["get": 2])
        // Setting one re-creates the placeholder.
        try await h.setXattr(ino, "user.k", "3")
        #expect(h.store.object("d/")?.customMetadata == ["k": "3"])
    }
}
