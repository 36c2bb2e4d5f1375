import BucketFS
import Foundation
import FuseKit
import GCSStore
import GCSTestServerKit
import Logging
import StorageModel
import TestSupport
import Testing

/// The filesystem core over `GCSStore` and the in-process server's hierarchical namespace: what
/// a mount of such a bucket sends, counted on the server (the core's own HNS tests run on
/// `MemoryStore`; these show the client and the server carry them out on the wire).
@Suite struct GCSFolderCoreTests {
    func withCore(_ body: (GCSTestServer, GCSStore, BucketFileSystem) async throws -> Void) async throws {
        try await withHNSServer { server, store in
            let cache = FileManager.default.temporaryDirectory.appendingPathComponent("hns-core-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: cache) }
            var config = MountConfig()
            config.cacheDirectory = cache
            config.metadataTTL = 0
            config.failureTTL = 0
            let core = try BucketFileSystem(store: store, config: config, logger: Logger(label: "hns-core"))
            do { try await body(server, store, core) } catch {
                await core.shutdown(within: .seconds(5))
                throw error
            }
            await core.shutdown(within: .seconds(5))
        }
    }

    func posts(_ server: GCSTestServer) -> [String] {
        server.recorded.filter { $0.method == "POST" }.map { $0.uri.split(separator: "?").first.map(String.init) ?? $0.uri }
    }

    @Test func mkdirRmdirAndADirectoryRenameAreFolderRequests() async throws {
        try await withCore { server, store, core in
            let root = BucketFileSystem.rootIno
            server.clearRecorded()
            let d = try await core.mkdir(parent: root, name: "d", mode: 0o755)
            #expect(posts(server) == ["/storage/v1/b/test-bucket/folders"], "mkdir is one folder create")
            #expect(server.folderNames == ["d/"] && server.objectNames.isEmpty, "no placeholder object")
            _ = try await store.write("d/sub/f", from: .data(Data("f".utf8)), metadata: .init(), preconditions: .none)
            let f = try await store.getMetadata("d/sub/f")
            // A directory rename: one rename request, followed through its operation; no copy.
            server.clearRecorded()
            try await core.rename(parent: root, name: "d", newParent: root, newName: "e", flags: 0)
            #expect(posts(server) == ["/storage/v1/b/test-bucket/folders/d%2F/renameTo/folders/e%2F"])
            #expect(server.recorded.contains { $0.method == "GET" && $0.uri.contains("/operations/") })
            #expect(server.objectNames == ["e/sub/f"] && server.object("e/sub/f")?.generation == f.generation)
            #expect(server.folderNames == ["e/", "e/sub/"])
            _ = d
            // rmdir of a folder that holds something: ENOTEMPTY, nothing deleted.
            let e = try await core.lookup(parent: root, name: "e")
            do { try await core.rmdir(parent: root, name: "e"); Issue.record("rmdir of a full folder succeeded") } catch {
                #expect((error as? Errno) == .ENOTEMPTY, "\(error)")
            }
            // A file rename: one objects.move.
            let sub = try await core.lookup(parent: e.attributes.ino, name: "sub")
            server.clearRecorded()
            try await core.rename(parent: sub.attributes.ino, name: "f", newParent: sub.attributes.ino, newName: "g", flags: 0)
            #expect(posts(server) == ["/storage/v1/b/test-bucket/o/e%2Fsub%2Ff/moveTo/o/e%2Fsub%2Fg"])
            #expect(server.objectNames == ["e/sub/g"])
            // Emptied, the folder stays, and is listed; rmdir deletes it with one request.
            try await core.unlink(parent: sub.attributes.ino, name: "g")
            #expect(server.folderNames == ["e/", "e/sub/"])
            #expect(try await core.lookup(parent: e.attributes.ino, name: "sub").attributes.type == .directory)
            server.clearRecorded()
            try await core.rmdir(parent: e.attributes.ino, name: "sub")
            #expect(server.recorded.filter { $0.method == "DELETE" }.map(\.uri) == ["/storage/v1/b/test-bucket/folders/e%2Fsub%2F"])
            #expect(server.folderNames == ["e/"])
        }
    }

    /// On a server without objects.move the core's file rename copies and deletes; it learns that
    /// once.
    @Test func fileRenamesFallBackToCopyOnAServerWithoutMove() async throws {
        try await withCore { server, store, core in
            server.configure { $0.moves = false }
            let root = BucketFileSystem.rootIno
            _ = try await store.write("a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            _ = try await store.write("b", from: .data(Data("b".utf8)), metadata: .init(), preconditions: .none)
            _ = try await core.lookup(parent: root, name: "a")
            _ = try await core.lookup(parent: root, name: "b")
            server.clearRecorded()
            try await core.rename(parent: root, name: "a", newParent: root, newName: "a2", flags: 0)
            #expect(posts(server).filter { $0.contains("/moveTo/") }.count == 1)
            #expect(posts(server).filter { $0.contains("/rewriteTo/") }.count == 1)
            server.clearRecorded()
            try await core.rename(parent: root, name: "b", newParent: root, newName: "b2", flags: 0)
            #expect(posts(server).filter { $0.contains("/moveTo/") }.isEmpty, "learned: not asked again")
            #expect(server.objectNames == ["a2", "b2"])
        }
    }
}
