import _CryptoExtras
import CloudHTTP
import Foundation
import GCSStore
import GCSTestServerKit
import Logging
import StorageModel
import TestSupport
import Testing

/// Runs `body` against a fresh in-process JSON API server and a store pointed at it.
func withGCSServer(prefix: String = "", credentials: CredentialSource = .anonymous,
                   deadline: Duration = .seconds(10), tuning: GCSStore.Tuning = fastTuning,
                   logger: Logger = Logger(label: "gcs-test"),
                   _ body: (GCSTestServer, GCSStore) async throws -> Void) async throws {
    let server = try await GCSTestServer.start()
    let store = GCSStore(bucket: server.bucket, prefix: prefix, endpoint: server.endpoint, credentials: credentials,
                         logger: logger, requestTimeout: .seconds(5), deadline: deadline, tuning: tuning, environment: [:])
    do {
        try await body(server, store)
    } catch {
        try? await store.shutdown()
        try? await server.stop()
        throw error
    }
    try await store.shutdown()
    try await server.stop()
}

let fastTuning: GCSStore.Tuning = {
    var t = GCSStore.Tuning()
    t.initialBackoff = .milliseconds(5)
    t.maxBackoff = .milliseconds(50)
    return t
}()

/// Many MiB of varied bytes, quickly even in a debug build (a word at a time).
func bigData(_ n: Int, seed: UInt64) -> Data {
    var d = Data(count: n)
    d.withUnsafeMutableBytes { (p: UnsafeMutableRawBufferPointer) in
        var x = seed &* 0x9E37_79B9_7F4A_7C15
        var i = 0
        while i + 8 <= n {
            x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            p.storeBytes(of: x ^ (x >> 29), toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < n { p[i] = UInt8(truncatingIfNeeded: i); i += 1 }
    }
    return d
}

func storageError(_ body: () async throws -> Void) async -> StorageError? {
    do { try await body(); return nil } catch let e as StorageError { return e } catch {
        Issue.record("not a StorageError: \(error)")
        return nil
    }
}

@Suite struct GCSStoreServerTests {
    @Test func conformanceAgainstTestServer() async throws {
        try await withGCSServer { _, store in
            try await runStoreConformance({ store }, capabilities: .init(versioning: .off))
        }
    }

    /// A bucket with object versioning on: every replaced and deleted generation kept.
    @Test func versionedConformanceAgainstTestServer() async throws {
        try await withGCSServer { server, store in
            server.configure { $0.versioning = true }
            try await runStoreConformance({ store }, capabilities: .init(versioning: .on))
        }
    }

    @Test func versionedConformanceWithBucketPrefix() async throws {
        try await withGCSServer(prefix: "/root/sub/") { server, store in
            server.configure { $0.versioning = true }
            try await runStoreConformance({ store }, capabilities: .init(versioning: .on))
        }
    }

    @Test func conformanceWithBucketPrefix() async throws {
        try await withGCSServer(prefix: "/root/sub/") { server, store in
            #expect(store.prefix == "root/sub/")
            try await runStoreConformance({ store }, capabilities: .init(versioning: .off))
            let names = server.objectNames
            #expect(!names.isEmpty)
            #expect(names.allSatisfy { $0.hasPrefix("root/sub/conformance-") }, "every name lives under the prefix")
        }
    }

    @Test func prefixPlaceholderIsTheRootNotAnItem() async throws {
        try await withGCSServer(prefix: "top") { server, store in
            let outside = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .anonymous,
                                   logger: Logger(label: "t"), tuning: fastTuning, environment: [:])
            defer { Task { try? await outside.shutdown() } }
            _ = try await outside.write("top/", from: .data(Data()), metadata: .init(), preconditions: .none)
            _ = try await outside.write("top/a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            _ = try await outside.write("topless", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            let page = try await store.list(ListRequest(prefix: "", delimiter: "/"))
            #expect(page.items.map(\.name) == ["a"])
            #expect(page.prefixes.isEmpty)
            #expect(try await store.getMetadata("a").name == "a")
            let q = server.recorded.last { $0.method == "GET" && $0.uri.contains("/o/top%2Fa") }
            #expect(q != nil, "the store asks for top/a as one segment")
            try await outside.shutdown()
        }
    }

    /// A listing that asks for them gets its subdirectories' placeholders as items, with their
    /// metadata (the JSON API's includeTrailingDelimiter); one that does not, never.
    @Test func subdirectoryPlaceholdersOnRequest() async throws {
        try await withGCSServer { server, store in
            for n in ["p/a", "p/d/", "p/d/x", "p/e/y"] {
                _ = try await store.write(n, from: .data(Data()), metadata: .init(customMetadata: ["k": n]), preconditions: .doesNotExist)
            }
            server.clearRecorded()
            let plain = try await store.list(ListRequest(prefix: "p/", delimiter: "/"))
            #expect(plain.items.map(\.name) == ["p/a"] && plain.prefixes == ["p/d/", "p/e/"])
            let with = try await store.list(ListRequest(prefix: "p/", delimiter: "/", includeTrailingDelimiter: true))
            #expect(with.items.map(\.name) == ["p/a", "p/d/"] && with.prefixes == ["p/d/", "p/e/"])
            #expect(with.items.last?.customMetadata == ["k": "p/d/"])
            let uris = server.recorded.map(\.uri)
            #expect(!uris[0].contains("includeTrailingDelimiter") && uris[1].contains("includeTrailingDelimiter=true"))
        }
    }

    @Test func paginationAcrossPages() async throws {
        try await withGCSServer { server, store in
            let names = (0..<8).map { "p/obj\($0)" } + ["p/dir1/x", "p/dir2/y"]
            for n in names { _ = try await store.write(n, from: .data(Data(n.utf8)), metadata: .init(), preconditions: .doesNotExist) }
            server.clearRecorded()
            var token: String?
            var items: [String] = []
            var prefixes: [String] = []
            var pages = 0
            repeat {
                let page = try await store.list(ListRequest(prefix: "p/", delimiter: "/", maxResults: 3, pageToken: token))
                #expect(page.items.count + page.prefixes.count <= 3)
                items += page.items.map(\.name)
                prefixes += page.prefixes
                token = page.nextPageToken
                pages += 1
            } while token != nil && pages < 10
            #expect(pages == 4, "10 entries at 3 per page")
            #expect(prefixes == ["p/dir1/", "p/dir2/"])
            #expect(items == (0..<8).map { "p/obj\($0)" })
            let uris = server.recorded.map(\.uri)
            #expect(uris.count == 4)
            #expect(uris.allSatisfy { $0.contains("maxResults=3") && $0.contains("delimiter=%2F") && $0.contains("prefix=p%2F") })
            #expect(uris.allSatisfy { $0.contains("fields=items%28") && $0.contains("nextPageToken") }, "fields limited to what ObjectInfo uses")
            #expect(uris.dropFirst().allSatisfy { $0.contains("pageToken=") })
            #expect(!uris[0].contains("pageToken="))
        }
    }

    @Test func metadataMergeSendsNullsAndMerges() async throws {
        try await withGCSServer { server, store in
            let w = try await store.write("doc", from: .data(Data("x".utf8)),
                                          metadata: .init(cacheControl: "no-cache", contentType: "text/plain",
                                                          customMetadata: ["a": "1", "b": "2"]),
                                          preconditions: .doesNotExist)
            server.clearRecorded()
            var patch = MetadataPatch()
            patch.customMetadata = ["a": nil, "c": "3"]
            patch.cacheControl = .remove
            patch.contentLanguage = .set("en")
            let r = try await store.patchMetadata("doc", patch, preconditions: Preconditions(ifMetagenerationMatch: w.metageneration))
            #expect(r.customMetadata == ["b": "2", "c": "3"])
            #expect(r.writable.cacheControl == nil)
            #expect(r.writable.contentLanguage == "en")
            #expect(r.contentType == "text/plain")
            #expect(r.metageneration == 2)
            let req = try #require(server.recorded.first)
            #expect(req.method == "PATCH")
            #expect(req.uri.contains("ifMetagenerationMatch=1"))
            let body = try #require(try JSONSerialization.jsonObject(with: req.body) as? [String: Any])
            #expect(Set(body.keys) == ["cacheControl", "contentLanguage", "metadata"], "only the named fields are sent")
            #expect(body["cacheControl"] is NSNull)
            let meta = try #require(body["metadata"] as? [String: Any])
            #expect(meta["a"] is NSNull)
            #expect(meta["c"] as? String == "3")
            #expect(meta["b"] == nil)
            // A stale metageneration: 412 → preconditionFailed, nothing changes.
            let e = await storageError {
                _ = try await store.patchMetadata("doc", patch, preconditions: Preconditions(ifMetagenerationMatch: 1))
            }
            #expect(e == .preconditionFailed(path: "doc"))
        }
    }

    @Test func transient503IsRetried() async throws {
        try await withGCSServer { server, store in
            _ = try await store.write("o", from: .data(Data("hi".utf8)), metadata: .init(), preconditions: .none)
            server.clearRecorded()
            server.configure { $0.failNext = 3 }
            let info = try await store.getMetadata("o")
            #expect(info.size == 2)
            #expect(server.recorded.count == 4, "three 503s, then the answer")
            #expect(try await store.read("o", generation: info.generation, range: nil) == Data("hi".utf8))

            // A guarded upload is idempotent: retried.
            server.configure { $0.failNext = 1 }
            server.clearRecorded()
            _ = try await store.write("o", from: .data(Data("v2".utf8)), metadata: .init(),
                                      preconditions: Preconditions(ifGenerationMatch: info.generation))
            #expect(server.recorded.count == 2)
        }
    }

    @Test func unguardedWritesAreNotRetried() async throws {
        try await withGCSServer { server, store in
            server.configure { $0.failNext = 1 }
            let e = await storageError {
                _ = try await store.write("w", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            }
            #expect(e == .unknown(status: 503, message: "injected: backend unavailable"))
            #expect(server.recorded.count == 1, "an unguarded insert is sent once")
            _ = try await store.write("w", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            server.clearRecorded()
            server.configure { $0.failNext = 1 }
            let d = await storageError { try await store.delete("w", preconditions: .none) }
            #expect(d?.isTransient == true)
            #expect(server.recorded.count == 1, "an unguarded delete is sent once")
            var patch = MetadataPatch()
            patch.contentType = .set("a/b")
            server.configure { $0.failNext = 1 }
            server.clearRecorded()
            let p = await storageError { _ = try await store.patchMetadata("w", patch, preconditions: .none) }
            #expect(p?.isTransient == true)
            #expect(server.recorded.count == 1)
        }
    }

    /// One rule for every insert, whatever its size: a resumable session's start is retried only
    /// under a precondition, as a multipart upload is (Google's retry scenario 3, objects.insert).
    @Test func unguardedResumableInsertIsNotRetried() async throws {
        var tuning = fastTuning
        tuning.resumableThreshold = 1 << 10
        try await withGCSServer(tuning: tuning) { server, store in
            let data = Conformance.bytes(10_000, seed: 3)
            server.configure { $0.failNext = 1 }
            let e = await storageError {
                _ = try await store.write("big", from: .data(data), metadata: .init(), preconditions: .none)
            }
            #expect(e?.isTransient == true)
            #expect(server.recorded.count == 1, "the session start is sent once: \(server.recorded.map(\.method))")
            await #expect(throws: StorageError.self) { try await store.getMetadata("big") }
            // Guarded (ifGenerationMatch=0): the start is retried, and the upload succeeds.
            server.configure { $0.failNext = 1 }
            server.clearRecorded()
            let info = try await store.write("big", from: .data(data), metadata: .init(), preconditions: .doesNotExist)
            #expect(info.size == 10_000)
            #expect(server.recorded.filter { $0.method == "POST" }.count == 2)
        }
    }

    @Test func persistent503EndsWithinTheDeadline() async throws {
        // 10 s: room for several attempts even when the first one is slow to connect (the whole
        // suite runs in parallel on 2 cores; a 3 s deadline once saw a single attempt, and 5 s
        // and 6 s did once each, with six builds running at a load of 12).
        try await withGCSServer(deadline: .seconds(10)) { server, store in
            server.configure { $0.alwaysStatus = 503 }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await store.getMetadata("x") }
            let took = ContinuousClock.now - start
            guard case .retryLimitExceeded(let m)? = e else {
                Issue.record("expected retryLimitExceeded, got \(String(describing: e))")
                return
            }
            #expect(m.contains("503") || m.contains("injected"), "the last cause is named: \(m)")
            #expect(took < .seconds(14), "bounded by the 10 s deadline, took \(took)")
            #expect(took > .seconds(5), "kept trying until near the deadline, took \(took)")
            #expect(server.recorded.count >= 2, "retried")
        }
    }

    @Test func unauthenticatedHasAClearMessage() async throws {
        try await withGCSServer(credentials: .token("s3cr3t-token")) { server, store in
            server.configure { $0.alwaysStatus = 401 }
            let e = await storageError { _ = try await store.getMetadata("x") }
            guard case .unauthenticated(let m)? = e else {
                Issue.record("expected unauthenticated, got \(String(describing: e))")
                return
            }
            #expect(m.contains("Invalid Credentials"))
            #expect(m.contains("static token"))
            #expect(!m.contains("s3cr3t"), "the token never appears")
            #expect(server.recorded.count == 1, "a static token cannot be refreshed: no retry")
            #expect(server.recorded[0].headers["authorization"] == "Bearer s3cr3t-token")
        }
    }

    @Test func forbiddenAndNotFoundMap() async throws {
        try await withGCSServer { server, store in
            server.configure { $0.alwaysStatus = 403 }
            let e = await storageError { _ = try await store.getMetadata("x") }
            if case .unauthorized(let p, _)? = e { #expect(p == "x") } else { Issue.record("got \(String(describing: e))") }
            server.configure { $0.alwaysStatus = nil }
            #expect(await storageError { _ = try await store.read("nope", generation: nil, range: 0..<4) } == .objectNotFound(path: "nope"))
            let other = GCSStore(bucket: "other-bucket", endpoint: server.endpoint, credentials: .anonymous,
                                 logger: Logger(label: "t"), environment: [:])
            #expect(await storageError { _ = try await other.list(ListRequest()) } == .bucketNotFound(bucket: "other-bucket"))
            try await other.shutdown()
        }
    }

    @Test func serviceAccountTokenIsFetchedCachedAndRefreshed() async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let publicKey = key.publicKey
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gcs-sa-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = try await GCSTestServer.start()
        defer { Task { try? await server.stop() } }
        server.configure {
            $0.requireToken = true
            // Long enough that the first requests finish well inside it on a loaded machine (the
            // whole suite runs beside this test on two cores; 2 s was not always enough).
            $0.tokenLifetime = 8
            $0.verifyAssertion = { jwt in
                let p = jwt.split(separator: ".")
                guard p.count == 3 else { return false }
                var s = String(p[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
                while s.count % 4 != 0 { s += "=" }
                guard let sig = Data(base64Encoded: s) else { return false }
                return publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: sig),
                                                  for: Data("\(p[0]).\(p[1])".utf8), padding: .insecurePKCS1v1_5)
            }
        }
        let keyJSON: [String: Any] = [
            "type": "service_account", "client_email": "tester@example.iam.gserviceaccount.com",
            "private_key_id": "k1", "private_key": key.pkcs8PEMRepresentation,
            "token_uri": "http://127.0.0.1:\(server.port)/token",
        ]
        let path = dir.appendingPathComponent("key.json").path
        try JSONSerialization.data(withJSONObject: keyJSON).write(to: URL(fileURLWithPath: path))
        let logs = LogCapture()
        // The token's lifetime is kept on the store's clock: moved by the test, never waited for.
        let clock = ManualClock()
        var tuning = fastTuning
        tuning.clock = clock.clock
        let store = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .serviceAccount(path: path),
                             logger: logs.logger, deadline: .seconds(10), tuning: tuning, environment: [:])
        _ = try await store.write("a", from: .data(Data("1".utf8)), metadata: .init(), preconditions: .doesNotExist)
        // The token arrived before this (its 8 s count from its arrival, on the clock).
        #expect(server.read { $0.tokenCalls } == 1)
        _ = try await store.getMetadata("a")
        #expect(server.read { $0.tokenCalls } == 1, "the token is cached")
        #expect(await store.tokenFetchCount == 1)
        // expires_in 8 s: refreshed ahead of expiry (a quarter of the lifetime for short tokens:
        // from 6 s after its arrival), so a request 6.3 s after the write gets a new one.
        clock.advance(by: .milliseconds(6300))
        _ = try await store.getMetadata("a")
        #expect(server.read { $0.tokenCalls } == 2, "a second token was fetched before the first expired")
        let auths = Set(server.recorded.compactMap { $0.headers["authorization"] })
        #expect(auths == ["Bearer test-access-token-1", "Bearer test-access-token-2"])
        // A 401 with a refreshable credential fetches a new token once and retries.
        server.configure { $0.tokenLifetime = 3600 }
        server.revokeTokens()
        server.clearRecorded()
        _ = try await store.getMetadata("a")
        #expect(server.read { $0.tokenCalls } == 3)
        #expect(server.recorded.filter { $0.uri != "/token" }.map(\.headers["authorization"]) == ["Bearer test-access-token-2", "Bearer test-access-token-3"],
                "one 401, then the same request with a fresh token")
        #expect(!logs.text.contains("test-access-token"), "tokens never reach the logs")
        #expect(!logs.text.contains("PRIVATE KEY"))
        try await store.shutdown()
    }

    @Test func metadataServerToken() async throws {
        let server = try await GCSTestServer.start()
        server.configure { $0.requireToken = true }
        let store = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .metadataServer,
                             logger: Logger(label: "t"), tuning: fastTuning,
                             environment: ["GCE_METADATA_HOST": "127.0.0.1:\(server.port)"])
        _ = try await store.list(ListRequest())
        _ = try await store.list(ListRequest())
        #expect(server.read { $0.tokenCalls } == 1)
        let fetch = try #require(server.recorded.first { $0.uri.hasPrefix("/computeMetadata/") })
        #expect(fetch.headers["metadata-flavor"] == "Google")
        try await store.shutdown()
        try await server.stop()
    }

    @Test func unreachableMetadataServerFailsFast() async throws {
        let store = GCSStore(bucket: "b", endpoint: URL(string: "http://127.0.0.1:1"), credentials: .metadataServer,
                             logger: Logger(label: "t"), deadline: .seconds(20), tuning: fastTuning,
                             environment: ["GCE_METADATA_HOST": "127.0.0.1:1"])
        let start = ContinuousClock.now
        let e = await storageError { _ = try await store.getMetadata("x") }
        #expect(ContinuousClock.now - start < .seconds(10), "not retried until the 20 s deadline (3 s to give up, more when the machine is busy)")
        guard case .unauthenticated(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
        #expect(m.contains("metadata server") && m.contains("--key-file"))
        try await store.shutdown()
    }

    @Test func badServiceAccountKeyIsUnauthenticated() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bad-\(UUID().uuidString).json").path
        try Data(#"{"type":"service_account","client_email":"x@y","private_key":"not a key","token_uri":"http://127.0.0.1:1/token"}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await withGCSServer(credentials: .serviceAccount(path: path)) { _, store in
            let e = await storageError { _ = try await store.getMetadata("a") }
            guard case .unauthenticated(let m)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(m.contains("x@y"))
            #expect(!m.contains("not a key"))
        }
    }

    @Test func resumableUploadResumesAfterDroppedConnection() async throws {
        var tuning = fastTuning
        tuning.chunkSize = 1 << 20
        tuning.resumableThreshold = 512 << 10
        try await withGCSServer(tuning: tuning) { server, store in
            let data = Conformance.bytes(2_621_440 + 1234, seed: 5)  // 2.5 MiB + a tail
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("big-\(UUID().uuidString)").path
            try data.write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            // The second chunk's connection drops after 600 000 bytes; 512 KiB of it are persisted.
            server.configure { $0.dropUploadAfterBytes = 600_000 }
            let info = try await store.write("big/file.bin", from: .file(path: path),
                                             metadata: .init(contentType: "application/x-test", customMetadata: ["k": "v"]),
                                             preconditions: .doesNotExist)
            #expect(server.read { $0.dropsDone } == 1)
            #expect(info.size == Int64(data.count))
            #expect(info.contentType == "application/x-test")
            #expect(info.customMetadata == ["k": "v"])
            #expect(try await store.read("big/file.bin", generation: info.generation, range: nil) == data)
            let reqs = server.recorded
            let start = try #require(reqs.first { $0.method == "POST" })
            #expect(start.uri.contains("uploadType=resumable") && start.uri.contains("ifGenerationMatch=0"))
            #expect(start.headers["x-upload-content-length"] == String(data.count))
            let puts = reqs.filter { $0.method == "PUT" }
            #expect(puts.contains { $0.headers["content-range"] == "bytes */\(data.count)" }, "the session was asked")
            #expect(puts.contains { $0.headers["content-range"]?.hasPrefix("bytes \((1 << 20) + (512 << 10))-") == true },
                    "resumed where the server said")
            #expect(puts.allSatisfy { $0.headers["content-length"] != nil }, "Content-Length always sent")
            #expect(puts.allSatisfy { $0.bodyBytes <= 1 << 20 }, "one chunk at a time")
        }
    }

    /// The default: a large upload is one streamed PUT of the whole file in its session.
    @Test func largeUploadIsOneStreamedRequest() async throws {
        try await withGCSServer { server, store in
            let data = bigData((21 << 20) + 4321, seed: 21)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("whole-\(UUID().uuidString)").path
            try data.write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let info = try await store.write("whole.bin", from: .file(path: path), metadata: .init(),
                                             preconditions: .doesNotExist)
            #expect(info.size == Int64(data.count))
            #expect(info.crc32c == CRC32C.base64(CRC32C.checksum(data)))
            let reqs = server.recorded
            #expect(reqs.count == 2, "one request to start the session, one with the data: \(reqs.map { "\($0.method) \($0.headers["content-range"] ?? "")" })")
            let puts = reqs.filter { $0.method == "PUT" }
            #expect(puts.count == 1)
            #expect(puts.first?.bodyBytes == data.count)
            #expect(puts.first?.headers["content-length"] == String(data.count))
            #expect(puts.first?.headers["content-range"] == "bytes 0-\(data.count - 1)/\(data.count)")
            #expect(server.read { $0.uploadBytesReceived } == data.count, "every byte sent once")
            #expect(server.object("whole.bin")?.data == data)
        }
    }

    /// A reset in the middle of the one request: the session says what it kept, and only the
    /// bytes after that are sent again.
    @Test func streamedUploadResumesFromPersistedOffset() async throws {
        try await withGCSServer { server, store in
            let data = bigData((20 << 20) + 777, seed: 22)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("reset-\(UUID().uuidString)").path
            try data.write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            server.configure { $0.dropUploadAfterBytes = 7_000_000 }
            let info = try await store.write("reset.bin", from: .file(path: path), metadata: .init(customMetadata: ["k": "v"]),
                                             preconditions: .doesNotExist)
            #expect(server.read { $0.dropsDone } == 1)
            #expect(info.size == Int64(data.count))
            #expect(info.customMetadata == ["k": "v"])
            #expect(server.object("reset.bin")?.data == data)
            let persisted = 7_000_000 / (256 << 10) * (256 << 10)
            let puts = server.recorded.filter { $0.method == "PUT" }
            // The dropped request left no record; what is recorded is the question and the rest.
            #expect(puts.map { $0.headers["content-range"] ?? "" }
                    == ["bytes */\(data.count)", "bytes \(persisted)-\(data.count - 1)/\(data.count)"])
            #expect(puts.last?.bodyBytes == data.count - persisted)
            // Bytes that reached the server: the dropped request's (a little past 7 000 000) and
            // the rest after the persisted offset, nothing before it twice.
            let received = server.read { $0.uploadBytesReceived }
            let dropped = received - (data.count - persisted)
            #expect(dropped > 7_000_000 && dropped < 7_000_000 + (2 << 20), "received \(received)")
        }
    }

    /// A server that stops reading in the middle of the one request: the body stops moving,
    /// the stall timeout ends the attempt (not the request timeout), and the rest goes from
    /// the persisted offset.
    @Test func stalledStreamedUploadResumes() async throws {
        var tuning = fastTuning
        tuning.idleTimeout = .milliseconds(400)
        try await withGCSServer(deadline: .seconds(60), tuning: tuning) { server, store in
            let data = bigData((12 << 20) + 99, seed: 25)
            server.configure { $0.stallUploadAfterBytes = 3_000_000 }
            let start = ContinuousClock.now
            let info = try await store.write("stall.bin", from: .data(data), metadata: .init(), preconditions: .doesNotExist)
            let took = ContinuousClock.now - start
            #expect(server.read { $0.stallsDone } == 1)
            #expect(info.size == Int64(data.count))
            #expect(server.object("stall.bin")?.data == data)
            let persisted = 3_000_000 / (256 << 10) * (256 << 10)
            let puts = server.recorded.filter { $0.method == "PUT" }
            // The first PUT with bytes after the stall resumes at the persisted offset. (On a
            // loaded machine the short 400 ms idle timeout may also end a healthy attempt later;
            // that one resumes from its own offset, so only the first resume is pinned.)
            let resumes = puts.compactMap { $0.headers["content-range"] }.filter { !$0.hasPrefix("bytes */") }
            #expect(resumes.first == "bytes \(persisted)-\(data.count - 1)/\(data.count)", "\(resumes)")
            #expect(took < .seconds(30), "the stall was noticed by the 0.4 s idle timeout, not the 60 s deadline; took \(took)")
        }
    }

    /// A 5xx to the one streamed request: ask, then send what the server does not have.
    @Test func streamedUploadRidesOut5xx() async throws {
        try await withGCSServer { server, store in
            let data = bigData((9 << 20) + 5, seed: 23)
            let task = Task { try await store.write("r5", from: .data(data), metadata: .init(), preconditions: .none) }
            _ = await eventually { server.recorded.contains(where: { $0.method == "POST" }) }
            server.configure { $0.failNext = 1 }
            let info = try await task.value
            #expect(info.size == Int64(data.count))
            #expect(server.object("r5")?.data == data)
            let puts = server.recorded.filter { $0.method == "PUT" }
            #expect(puts.count == 3, "the failed PUT, the question, the whole again (nothing was kept)")
        }
    }

    /// The server's answer must carry the checksums of the bytes sent; a corrupt object is
    /// removed and the write fails.
    @Test(arguments: [1 << 10, (9 << 20) + 1])
    func uploadWhoseChecksumDiffersFails(size: Int) async throws {
        try await withGCSServer { server, store in
            let data = Conformance.bytes(size, seed: 24)
            server.configure { $0.corruptNextUploads = 1 }
            let e = await storageError {
                _ = try await store.write("bad", from: .data(data), metadata: .init(), preconditions: .doesNotExist)
            }
            guard case .nonMatchingChecksum? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(server.object("bad") == nil, "the corrupt generation was removed")
            let info = try await store.write("bad", from: .data(data), metadata: .init(), preconditions: .doesNotExist)
            #expect(info.size == Int64(size))
        }
    }

    @Test func resumableUploadRidesOut5xx() async throws {
        var tuning = fastTuning
        tuning.chunkSize = 256 << 10
        tuning.resumableThreshold = 256 << 10
        try await withGCSServer(tuning: tuning) { server, store in
            let data = Conformance.bytes(700_000, seed: 9)
            let task = Task { try await store.write("r", from: .data(data), metadata: .init(), preconditions: .none) }
            // Wait for the session to start, then inject 2 failures.
            _ = await eventually { server.recorded.contains(where: { $0.method == "PUT" }) }
            server.configure { $0.failNext = 2 }
            let info = try await task.value
            #expect(info.size == 700_000)
            #expect(try await store.read("r", generation: nil, range: 690_000..<800_000) == data[690_000...])
        }
    }

    @Test func namesAreOnePercentEncodedSegment() async throws {
        try await withGCSServer { server, store in
            let names = ["dir/with space/a b.txt", "hash#tag", "what?q=1&x", "plus+percent%20", "ünïcødé/日本語 ✓", "x/../y", "é"]
            for n in names {
                let info = try await store.write(n, from: .data(Data(n.utf8)), metadata: .init(), preconditions: .doesNotExist)
                #expect(info.name == n)
            }
            #expect(Set(server.objectNames) == Set(names), "the server stored the exact names")
            for n in names {
                #expect(try await store.read(n, generation: nil, range: nil) == Data(n.utf8))
                #expect(try await store.getMetadata(n).name == n)
            }
            server.clearRecorded()
            _ = try await store.getMetadata("dir/with space/a b.txt")
            _ = try await store.getMetadata("hash#tag")
            _ = try await store.getMetadata("what?q=1&x")
            _ = try await store.getMetadata("ünïcødé/日本語 ✓")
            let uris = server.recorded.map(\.uri)
            #expect(uris[0].hasPrefix("/storage/v1/b/test-bucket/o/dir%2Fwith%20space%2Fa%20b.txt?"))
            #expect(uris[1].hasPrefix("/storage/v1/b/test-bucket/o/hash%23tag?"))
            #expect(uris[2].hasPrefix("/storage/v1/b/test-bucket/o/what%3Fq%3D1%26x?"))
            #expect(uris[3].hasPrefix("/storage/v1/b/test-bucket/o/%C3%BCn%C3%AFc%C3%B8d%C3%A9%2F%E6%97%A5%E6%9C%AC%E8%AA%9E%20%E2%9C%93?"))
            let copied = try await store.copy(from: "hash#tag", sourceGeneration: nil, to: "what?q=1&x/copy #2",
                                              metadata: nil, preconditions: .doesNotExist)
            #expect(copied.name == "what?q=1&x/copy #2")
            #expect(server.recorded.last?.uri.hasPrefix("/storage/v1/b/test-bucket/o/hash%23tag/rewriteTo/b/test-bucket/o/what%3Fq%3D1%26x%2Fcopy%20%232?") == true)
            try await store.delete("plus+percent%20", preconditions: .none)
            #expect(server.object("plus+percent%20") == nil)
            let flat = try await store.list(ListRequest(prefix: "", delimiter: nil))
            #expect(flat.items.map(\.name).contains("ünïcødé/日本語 ✓"))
            let sub = try await store.list(ListRequest(prefix: "what?", delimiter: "/"))
            #expect(sub.prefixes == ["what?q=1&x/"])
            #expect(sub.items.map(\.name) == ["what?q=1&x"])
        }
    }

    @Test func rewriteFollowsRewriteTokens() async throws {
        try await withGCSServer { server, store in
            let src = try await store.write("s", from: .data(Conformance.bytes(3000)), metadata: .init(contentType: "a/b"),
                                            preconditions: .none)
            server.configure { $0.rewriteRounds = 3 }
            server.clearRecorded()
            let dst = try await store.copy(from: "s", sourceGeneration: src.generation, to: "d", metadata: nil,
                                           preconditions: .doesNotExist)
            #expect(dst.size == 3000 && dst.contentType == "a/b")
            let uris = server.recorded.map(\.uri)
            #expect(uris.count == 3)
            #expect(uris.allSatisfy { $0.contains("sourceGeneration=\(src.generation)") && $0.contains("ifGenerationMatch=0") })
            #expect(!uris[0].contains("rewriteToken"))
            #expect(uris[1].contains("rewriteToken=rt-1") && uris[2].contains("rewriteToken=rt-2"))
        }
    }

    @Test func rangesAndGenerationPinning() async throws {
        try await withGCSServer { server, store in
            let data = Conformance.bytes(100)
            let v1 = try await store.write("r", from: .data(data), metadata: .init(), preconditions: .none)
            server.clearRecorded()
            #expect(try await store.read("r", generation: v1.generation, range: 10..<20) == data[10..<20])
            let req = try #require(server.recorded.first)
            #expect(req.headers["range"] == "bytes=10-19")
            #expect(req.uri.contains("alt=media") && req.uri.contains("generation=\(v1.generation)"))
            #expect(try await store.read("r", generation: nil, range: 100..<200).isEmpty, "416 → empty")
            #expect(try await store.read("r", generation: nil, range: 50..<50).isEmpty)
            _ = try await store.write("r", from: .data(Data("v2".utf8)), metadata: .init(), preconditions: .none)
            #expect(await storageError { _ = try await store.read("r", generation: v1.generation, range: nil) } == .objectNotFound(path: "r"),
                    "a read pinned to a replaced generation fails rather than mixing versions")
        }
    }

    @Test func cancellationStopsRetries() async throws {
        // The retries' pauses are kept on a clock the test holds: once the first attempt's bound
        // and the first pause have begun, the call sits in that pause until it is cancelled.
        let clock = ManualClock()
        var tuning = fastTuning
        tuning.clock = clock.clock
        try await withGCSServer(deadline: .seconds(30), tuning: tuning) { server, store in
            server.configure { $0.alwaysStatus = 503 }
            let start = ContinuousClock.now
            let task = Task { try await store.getMetadata("x") }
            let ceiling = ContinuousClock.now + .seconds(60)  // how long work may take to arrive, not a product bound
            while clock.pauses.count < 2 {
                try #require(ContinuousClock.now < ceiling, "the call never reached its first pause")
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(clock.sleeping == 1, "in the pause before the second attempt")
            task.cancel()
            let r = await task.result
            // Well before the 30 s the retries would go on for (not a tight bound: a loaded
            // 2-core machine took 4.4 s to schedule the cancelled task's end).
            #expect(ContinuousClock.now - start < .seconds(10))
            if case .failure(let e) = r { #expect(e as? StorageError == .cancelled) } else { Issue.record("succeeded?") }
        }
    }

    @Test func logsRedactAuthorization() async throws {
        let logs = LogCapture()
        try await withGCSServer(credentials: .token("ya29.very-secret"), logger: logs.logger) { server, store in
            _ = try await store.write("l", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            _ = try await store.read("l", generation: nil, range: nil)
            #expect(server.recorded.allSatisfy { $0.headers["authorization"] == "Bearer ya29.very-secret" })
        }
        #expect(logs.text.contains("Authorization: <redacted>"), "trace logs show the header, redacted")
        #expect(!logs.text.contains("very-secret"))
    }

    @Test func storeDroppedWithoutShutdownReleasesItsClient() async throws {
        let server = try await GCSTestServer.start()
        do {
            let store = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .anonymous,
                                 logger: Logger(label: "t"), environment: [:])
            _ = try await store.list(ListRequest())
            try await store.shutdown()
            try await store.shutdown()  // a second call is harmless
        }
        do {
            let dropped = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .anonymous,
                                   logger: Logger(label: "t"), environment: [:])
            _ = try await dropped.list(ListRequest())
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(server.recorded.count == 2)
        try await server.stop()
    }

    @Test func uploadsCarryContentLengthAndMultipartShape() async throws {
        try await withGCSServer { server, store in
            _ = try await store.write("m", from: .data(Data("body".utf8)),
                                      metadata: .init(contentType: "text/plain", customMetadata: ["x": "y"]),
                                      preconditions: Preconditions(ifGenerationMatch: 0))
            let r = try #require(server.recorded.first)
            #expect(r.uri.hasPrefix("/upload/storage/v1/b/test-bucket/o?uploadType=multipart&ifGenerationMatch=0"))
            #expect(r.headers["content-length"] == String(r.bodyBytes))
            #expect(r.headers["content-type"]?.hasPrefix("multipart/related; boundary=") == true)
            #expect(server.object("m")?.props["contentType"] == "text/plain")
            #expect(server.object("m")?.metadata == ["x": "y"])
            // A status-less POST still carries Content-Length: 0 (rewrite without a body).
            server.clearRecorded()
            _ = try await store.copy(from: "m", sourceGeneration: nil, to: "m2", metadata: nil, preconditions: .none)
            #expect(server.recorded.first?.headers["content-length"] == "0")
        }
    }
}

@Suite struct GCSPureTests {
    /// A Retry-After date counts from the transport's clock (docs/ARCHITECTURE.md, "One clock").
    @Test func retryAfterAsADateCountsFromTheClocksNow() {
        let now = Date(timeIntervalSince1970: 1_795_000_000)  // Wed, 18 Nov 2026 11:06:40 GMT
        #expect(HTTPTransport.retryAfter("Wed, 18 Nov 2026 11:07:10 GMT", now: now) == .seconds(30))
        #expect(HTTPTransport.retryAfter("Wed, 18 Nov 2026 11:00:00 GMT", now: now) == .zero)
        #expect(HTTPTransport.retryAfter("2.5", now: now) == .milliseconds(2500))
        #expect(HTTPTransport.retryAfter("soon", now: now) == nil)
    }

    @Test func credentialResolutionOrder() {
        let env = ["GOOGLE_OAUTH_ACCESS_TOKEN": "envtok", "GOOGLE_APPLICATION_CREDENTIALS": "/env/key.json",
                   "STORAGE_EMULATOR_HOST": "127.0.0.1:9023"]
        #expect(CredentialSource.resolve(anonymous: true, token: "t", keyFile: "/k", environment: env) == .anonymous)
        #expect(CredentialSource.resolve(anonymous: false, token: "t", keyFile: "/k", environment: env) == .token("t"))
        #expect(CredentialSource.resolve(anonymous: false, token: nil, keyFile: "/k", environment: env) == .token("envtok"))
        var e2 = env
        e2["GOOGLE_OAUTH_ACCESS_TOKEN"] = nil
        #expect(CredentialSource.resolve(anonymous: false, token: nil, keyFile: "/k", environment: e2) == .serviceAccount(path: "/k"))
        #expect(CredentialSource.resolve(anonymous: false, token: nil, keyFile: nil, environment: e2)
                == .file(path: "/env/key.json", from: "GOOGLE_APPLICATION_CREDENTIALS"))
        e2["GOOGLE_APPLICATION_CREDENTIALS"] = nil
        #expect(CredentialSource.resolve(anonymous: false, token: nil, keyFile: nil, environment: e2) == .anonymous)
        #expect(CredentialSource.resolve(anonymous: false, token: nil, keyFile: nil, environment: [:]) == .metadataServer)
        #expect(CredentialSource.resolve(anonymous: false, token: nil, keyFile: nil, environment: [:], explicitEndpoint: true) == .anonymous)
        #expect(CredentialSource.resolve(anonymous: false, token: "", keyFile: "", environment: [:]) == .metadataServer)
        #expect(!"\(CredentialSource.token("abc123"))".contains("abc123"))
    }

    @Test func endpointResolution() {
        #expect(GCSStore.resolveEndpoint(nil, environment: [:]) == "https://storage.googleapis.com")
        #expect(GCSStore.resolveEndpoint(nil, environment: ["STORAGE_EMULATOR_HOST": "localhost:9023"]) == "http://localhost:9023")
        #expect(GCSStore.resolveEndpoint(nil, environment: ["STORAGE_EMULATOR_HOST": "http://h:1/"]) == "http://h:1")
        #expect(GCSStore.resolveEndpoint(URL(string: "https://x.example/"), environment: ["STORAGE_EMULATOR_HOST": "h:1"]) == "https://x.example")
    }

    @Test func percentEncoding() {
        #expect(CloudURL.encode("a/b c#d?e") == "a%2Fb%20c%23d%3Fe")
        #expect(CloudURL.encode("AZaz09-._~") == "AZaz09-._~")
        #expect(CloudURL.encode("é+%") == "%C3%A9%2B%25")
    }

    @Test func backoffIsJitteredExponentialAndCapped() {
        let p = RetryPolicy()
        #expect(p.delay(beforeRetry: 1, random: 1) == .milliseconds(100))
        #expect(p.delay(beforeRetry: 1, random: 0) == .milliseconds(50))
        #expect(p.delay(beforeRetry: 3, random: 1) == .milliseconds(400))
        #expect(p.delay(beforeRetry: 30, random: 1) == .seconds(5))
        for status in [408, 429, 500, 502, 503, 504] { #expect(RetryPolicy.isRetryable(status: status)) }
        for status in [400, 401, 403, 404, 409, 412, 416] { #expect(!RetryPolicy.isRetryable(status: status)) }
        #expect(RetryPolicy.isGuarded(.doesNotExist))
        #expect(RetryPolicy.isGuarded(Preconditions(ifMetagenerationMatch: 3)))
        #expect(!RetryPolicy.isGuarded(.none))
        #expect(!RetryPolicy.isGuarded(Preconditions(ifGenerationNotMatch: 3)))
    }

    @Test func patchBodyNamesOnlyChangedFields() throws {
        var p = MetadataPatch()
        p.contentType = .remove
        p.customMetadata = ["gone": nil, "new": "v"]
        let o = try #require(try JSONSerialization.jsonObject(with: ObjectResource.patchBody(p)) as? [String: Any])
        #expect(Set(o.keys) == ["contentType", "metadata"])
        #expect(o["contentType"] is NSNull)
        #expect(String(decoding: ObjectResource.patchBody(MetadataPatch()), as: UTF8.self) == "{}")
    }
}

/// Collects log lines (all levels) to check what reaches the logs.
final class LogCapture: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    var text: String { lock.lock(); defer { lock.unlock() }; return lines.joined(separator: "\n") }

    var logger: Logger {
        var l = Logger(label: "gcs-capture") { _ in Handler(capture: self) }
        l.logLevel = .trace
        return l
    }

    func append(_ s: String) { lock.lock(); lines.append(s); lock.unlock() }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            capture.append("\(event.level) \(event.message) \(event.metadata ?? [:])")
        }
    }
}
