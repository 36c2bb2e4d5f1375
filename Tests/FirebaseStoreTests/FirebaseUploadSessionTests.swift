import FirebaseStore
import Foundation
import StorageModel
import Testing

/// The upload session the SDK-shaped upload task drives a chunk at a time, and the download URL
/// (docs/LIBRARY.md, "The Apple SDK's API"), against the in-process v0 server.
@Suite struct FirebaseUploadSessionTests {
    static let quarter = 256 << 10

    static func bytes(_ n: Int) -> Data { Data((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7) }) }

    @Test func eachSendNextSendsOneChunkAndTheLastMakesTheObject() async throws {
        try await withFirebase { f in
            let data = Self.bytes(3 * Self.quarter + 1000)
            let session = try f.store.beginUpload("tasks/one.bin", from: .data(data), metadata: WritableMetadata(contentType: "x/y"),
                                                  chunkSize: Int64(Self.quarter))
            #expect(session.size == Int64(data.count) && session.persisted == 0)
            var held: [Int64] = []
            var object: ObjectInfo?
            while object == nil {
                object = try await session.sendNext()
                held.append(session.persisted)
            }
            let q = Int64(Self.quarter)
            #expect(held == [q, 2 * q, 3 * q, Int64(data.count)])
            #expect(object?.size == Int64(data.count) && object?.contentType == "x/y")
            #expect(f.server.object("tasks/one.bin")?.data == data)
            // one start, then one request per chunk: nothing sent twice
            let uploads = f.server.recorded.filter { $0.method == "POST" && $0.uri.hasPrefix("/v0/") }
            #expect(uploads.count == 1 + 4, "\(uploads.map(\.uri))")
        }
    }

    @Test func aChunkRefusedWith503GoesOnFromWhatTheSessionHolds() async throws {
        try await withFirebase { f in
            let data = Self.bytes(2 * Self.quarter)
            let session = try f.store.beginUpload("tasks/two.bin", from: .data(data), metadata: WritableMetadata(),
                                                  chunkSize: Int64(Self.quarter))
            #expect(try await session.sendNext() == nil)
            f.server.configure { $0.failNext = 1 }
            let object = try await session.sendNext()
            #expect(object?.size == Int64(data.count))
            #expect(f.server.object("tasks/two.bin")?.data == data)
            // the session was asked what it held after the 503
            #expect(f.server.recorded.contains { $0.headers["x-goog-upload-command"] == "query" })
        }
    }

    @Test func aCancelledSessionMakesNoObject() async throws {
        try await withFirebase { f in
            let session = try f.store.beginUpload("tasks/three.bin", from: .data(Self.bytes(2 * Self.quarter)),
                                                  metadata: WritableMetadata(), chunkSize: Int64(Self.quarter))
            #expect(try await session.sendNext() == nil)
            await session.cancel()
            #expect(f.server.object("tasks/three.bin") == nil)
            #expect(f.server.recorded.contains { $0.headers["x-goog-upload-command"] == "cancel" })
        }
    }

    @Test func theDownloadURLCarriesTheObjectsTokenAndARefusalIsUnauthorized() async throws {
        try await withFirebase(rules: .perUser, uid: "alice") { f in
            _ = f.server.seed("users/alice/a.txt", Data("a".utf8))
            let url = try await f.store.downloadURL("users/alice/a.txt")
            let token = try #require(f.server.object("users/alice/a.txt")?.downloadTokens.first)
            #expect(url.absoluteString.hasPrefix(f.server.base.absoluteString + "/v0/b/\(f.server.bucket)/o/users%2Falice%2Fa.txt?"))
            #expect(url.query?.contains("alt=media") == true && url.query?.contains("token=\(token)") == true)
            _ = f.server.seed("users/bob/b.txt", Data("b".utf8))
            await #expect(throws: StorageError.self) { _ = try await f.store.downloadURL("users/bob/b.txt") }
            do {
                _ = try await f.store.downloadURL("users/bob/b.txt")
            } catch let e as StorageError {
                guard case .unauthorized(let path, _) = e else { Issue.record("not unauthorized: \(e)"); return }
                #expect(path == "users/bob/b.txt")
            }
        }
    }
}
