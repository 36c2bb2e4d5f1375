import FirebaseAuth
import FirebaseCore
import FirebaseStorage
import Foundation
import Testing

/// The Apple SDK's Storage API (docs/LIBRARY.md, "The Apple SDK's API") against the in-process v0
/// and Auth server: what the guides' samples in the real-mount tier do not reach (observers added
/// late or removed, a cancel before any byte, arguments refused before any request, the two forms
/// of errors).
@Suite struct FirebaseSDKTests {
    /// A configured app signed in as `uid` through the server's Auth, and its Storage, whose
    /// handlers run on a queue of their own (tests have no main queue running).
    static func withStorage(rules: TestRules? = .signedIn, uid: String = "alice",
                            _ body: (FirebaseTestServer, Storage) async throws -> Void) async throws {
        let server = try await FirebaseTestServer.start(rules: rules)
        defer { Task { try? await server.stop() } }
        let options = FirebaseOptions(googleAppID: "1:1:ios:1", gcmSenderID: "1")
        options.apiKey = "test-api-key"
        options.storageBucket = server.bucket
        let name = "sdk-\(UUID().uuidString)"
        FirebaseApp.configure(name: name, options: options)
        let app = try #require(FirebaseApp.app(name: name))
        let auth = Auth.auth(app: app)
        auth.useEmulator(withHost: "127.0.0.1", port: server.port)
        let signedIn = try await auth.signIn(withCustomToken: #"{"uid":"\#(uid)"}"#)
        #expect(signedIn.user.uid == uid && auth.currentUser?.uid == uid)
        let storage = Storage.storage(app: app)
        storage.useEmulator(withHost: "127.0.0.1", port: server.port)
        storage.callbackQueue = DispatchQueue(label: "sdk-tests")
        try await body(server, storage)
        _ = await app.delete()
    }

    /// The snapshot of a task's first `.success` or `.failure`.
    static func end(of task: StorageObservableTask) async -> StorageTaskSnapshot {
        await withCheckedContinuation { c in
            let once = NSLock()
            var done = false
            let finish = { (s: StorageTaskSnapshot) in
                let first = once.withLock { () -> Bool in defer { done = true }; return !done }
                if first { c.resume(returning: s) }
            }
            task.observe(.success, handler: finish)
            task.observe(.failure, handler: finish)
        }
    }

    @Test func anObserverAddedAfterTheEndIsCalledAtOnceAndARemovedOneNever() async throws {
        try await Self.withStorage { server, storage in
            let ref = storage.reference(withPath: "a/one.txt")
            let task = ref.putData(Data("one".utf8))
            let removed = Locked(false)
            let handle = task.observe(.success) { _ in removed.set(true) }
            task.removeObserver(withHandle: handle)
            let end = await Self.end(of: task)
            #expect(end.status == .success && end.metadata?.size == 3 && end.metadata?.path == "a/one.txt")
            #expect(server.object("a/one.txt")?.data == Data("one".utf8))
            // the task has ended: an observer of its end is called at once
            let late = await Self.end(of: task)
            #expect(late.status == .success && late.progress?.completedUnitCount == 3)
            try await Task.sleep(for: .milliseconds(50))
            #expect(!removed.value)
        }
    }

    @Test func aCancelBeforeAnyByteFailsWithCancelledAndMakesNoObject() async throws {
        try await Self.withStorage { server, storage in
            let task = storage.reference(withPath: "a/cancelled.bin").putData(Data(count: 1 << 20))
            task.cancel()
            let end = await Self.end(of: task)
            let error = try #require(end.error as? NSError)
            #expect(end.status == .failure && error.domain == StorageErrorDomain && error.code == StorageErrorCode.cancelled.rawValue)
            try await Task.sleep(for: .milliseconds(100))
            #expect(server.object("a/cancelled.bin") == nil)
            task.cancel()  // a second cancel does nothing
        }
    }

    @Test func argumentsAreRefusedBeforeAnyRequest() async throws {
        try await Self.withStorage { server, storage in
            server.clearRecorded()
            do {
                _ = try await storage.reference(withPath: "a").list(maxResults: 0)
                Issue.record("list(maxResults: 0) was not refused")
            } catch StorageError.invalidArgument(let message) {
                #expect(message.contains("between 1 and 1000"))
            }
            #expect(throws: StorageError.self) { _ = try storage.reference(for: URL(string: "gs://another-bucket/x")!) }
            #expect(throws: StorageError.self) { _ = try storage.reference(for: URL(string: "ftp://nowhere/x")!) }
            let url = try storage.reference(for: URL(string: "gs://\(server.bucket)/a/b.txt")!)
            #expect(url.fullPath == "a/b.txt" && url.name == "b.txt" && url.parent()?.fullPath == "a" && url.root().fullPath == "")
            #expect(server.recorded.filter { $0.uri.hasPrefix("/v0/") }.isEmpty)
        }
    }

    @Test func handlersGetNSErrorsAndAsyncCallsThrowTheEnum() async throws {
        try await Self.withStorage(rules: .perUser, uid: "alice") { server, storage in
            let missing = storage.reference(withPath: "users/alice/missing.txt")
            let viaHandler: Error? = await withCheckedContinuation { c in
                missing.getMetadata { _, error in c.resume(returning: error) }
            }
            let ns = try #require(viaHandler as? NSError)
            #expect(ns.code == StorageErrorCode.objectNotFound.rawValue && ns.userInfo["object"] as? String == "users/alice/missing.txt")
            do {
                _ = try await missing.getMetadata()
                Issue.record("no error")
            } catch StorageError.objectNotFound(let object, _) {
                #expect(object == "users/alice/missing.txt")
            }
            _ = server.seed("users/bob/b.txt", Data("b".utf8))
            do {
                _ = try await storage.reference(withPath: "users/bob/b.txt").data(maxSize: 10)
                Issue.record("no error")
            } catch StorageError.unauthorized(let bucket, let object, _) {
                #expect(bucket == server.bucket && object == "users/bob/b.txt")
            }
        }
    }
}

/// A value set from a handler and read by the test.
final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T { lock.withLock { stored } }
    func set(_ value: T) { lock.withLock { stored = value } }
}
