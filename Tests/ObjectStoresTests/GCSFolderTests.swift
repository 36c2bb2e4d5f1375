import CloudHTTP
import Foundation
import GCSStore
import GCSTestServerKit
import Logging
import ObjectStores
import StorageModel
import TestSupport
import Testing

/// Runs `body` against a fresh in-process server with a hierarchical namespace and a store that
/// has learned it.
func withHNSServer(prefix: String = "", deadline: Duration = .seconds(10), tuning: GCSStore.Tuning = fastTuning,
                   logger: Logger = Logger(label: "gcs-hns-test"),
                   _ body: (GCSTestServer, GCSStore) async throws -> Void) async throws {
    try await withGCSServer(prefix: prefix, deadline: deadline, tuning: tuning, logger: logger) { server, store in
        server.configure { $0.hierarchical = true }
        #expect(try await store.learnLayout(timeout: .seconds(5)) == .hierarchical)
        try await body(server, store)
    }
}

/// A hierarchical-namespace bucket through `GCSStore` (GCSStore+Folders.swift): the bucket's
/// layout, folders over the JSON API, a rename followed through its long-running operation, the
/// listing's folders, objects.move and the fallback where a server has none.
@Suite struct GCSFolderTests {
    static let operationName = "projects/_/buckets/test-bucket/operations/op-1"

    func operationPolls(_ server: GCSTestServer) -> Int {
        server.recorded.filter { $0.method == "GET" && $0.uri.contains("/operations/") }.count
    }

    // MARK: layout

    @Test func layoutIsLearnedFromStorageLayout() async throws {
        try await withGCSServer { server, store in
            #expect(store.folders == nil, "nothing learned yet: flat")
            #expect(try await store.learnLayout(timeout: .seconds(5)) == .flat)
            #expect(store.folders == nil)
            _ = try await store.list(ListRequest(prefix: "", delimiter: "/"))
            #expect(server.recorded.last?.uri.contains("includeFoldersAsPrefixes") == false)
            server.configure { $0.hierarchical = true }
            #expect(try await store.learnLayout(timeout: .seconds(5)) == .hierarchical)
            #expect(store.layout == .hierarchical)
            #expect(store.folders != nil)
            #expect(server.recorded.filter { $0.uri.hasSuffix("/b/test-bucket/storageLayout") }.count == 2)
            _ = try await store.list(ListRequest(prefix: "", delimiter: "/"))
            #expect(server.recorded.last?.uri.contains("includeFoldersAsPrefixes=true") == true)
            _ = try await store.list(ListRequest(prefix: "", delimiter: nil))
            #expect(server.recorded.last?.uri.contains("includeFoldersAsPrefixes") == false, "only with the delimiter")
        }
    }

    @Test func layoutRefusedCredentialIsAnError() async throws {
        try await withGCSServer { server, store in
            server.configure { $0.alwaysStatus = 403 }
            let e = await storageError { _ = try await store.learnLayout(timeout: .seconds(5)) }
            guard case .unauthorized? = e else { Issue.record("expected unauthorized, got \(String(describing: e))"); return }
            #expect(store.folders == nil)
        }
    }

    @Test func layoutRouteMissingIsFlat() async throws {
        try await withGCSServer { server, store in
            server.configure { $0.alwaysStatus = 501 }
            let layout = try await store.learnLayout(timeout: .seconds(5))
            #expect(layout == .flat)
            #expect(store.folders == nil)
        }
    }

    // MARK: conformance: the double and the server agree

    @Test func conformanceOnHNSServer() async throws {
        try await withHNSServer { _, store in
            try await runStoreConformance({ store }, capabilities: .init(versioning: .off, folders: true))
        }
    }

    @Test func conformanceOnHNSServerWithBucketPrefix() async throws {
        try await withHNSServer(prefix: "root/sub") { server, store in
            try await runStoreConformance({ store }, capabilities: .init(versioning: .off, folders: true))
            #expect(server.folderNames.allSatisfy { "root/sub/".hasPrefix($0) || $0.hasPrefix("root/sub/conformance-") })
            #expect(server.objectNames.allSatisfy { $0.hasPrefix("root/sub/conformance-") })
        }
    }

    /// The wrappers a mount puts around its store hand folders and moves through to the client:
    /// one that forgot them would answer nil (a flat bucket, no move) and fail the folders case.
    @Test func wrappedStorePassesTheFoldersCase() async throws {
        try await withHNSServer { server, store in
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("hns-log-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: log) }
            let wrapped = MetricsStore(try RequestLogStore(store, path: log))
            try await runStoreConformance({ wrapped }, capabilities: .init(versioning: .off, folders: true))
            let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
            for op in ["folder_create", "folder_get", "folder_delete", "folder_rename", "move"] {
                #expect(lines.contains { $0.hasPrefix(op + " ") }, "\(op) is logged")
            }
            #expect(server.recorded.contains { $0.method == "POST" && $0.uri.contains("/moveTo/o/") })
            #expect(server.recorded.contains { $0.method == "POST" && $0.uri.contains("/renameTo/folders/") })
        }
    }

    @Test func flatServerConformanceHasNoFolders() async throws {
        try await withGCSServer { _, store in
            _ = try await store.learnLayout(timeout: .seconds(5))
            try await runStoreConformance({ store }, capabilities: .init(versioning: .off))
        }
    }

    // MARK: folders on the wire

    @Test func createGetDeleteOnTheWire() async throws {
        try await withHNSServer(prefix: "top") { server, store in
            // The layout's permission (storage.objects.list) is checked under the prefix.
            #expect(server.recorded.contains { $0.uri == "/storage/v1/b/test-bucket/storageLayout?prefix=top%2F" })
            let f = try #require(store.folders)
            server.clearRecorded()
            let made = try await f.createFolder("a b/c/")
            #expect(made.name == "a b/c/" && made.metageneration == 1 && made.createTime != nil)
            let post = try #require(server.recorded.last)
            #expect(post.method == "POST" && post.uri == "/storage/v1/b/test-bucket/folders?recursive=true")
            let sent = try JSONSerialization.jsonObject(with: post.body) as? [String: Any]
            #expect(sent?["name"] as? String == "top/a b/c/")
            #expect(server.folderNames == ["top/", "top/a b/", "top/a b/c/"])
            #expect(try await f.getFolder("a b/").name == "a b/")
            #expect(server.recorded.last?.uri == "/storage/v1/b/test-bucket/folders/top%2Fa%20b%2F")
            await expectStorageError("conflict", isConflict) { try await f.createFolder("a b/c/") }
            await expectStorageError("notEmpty", isNotEmpty) { try await f.deleteFolder("a b/") }
            try await f.deleteFolder("a b/c/")
            #expect(server.recorded.last?.method == "DELETE")
            await expectStorageError("objectNotFound", isNotFound) { try await f.deleteFolder("a b/c/") }
            await expectStorageError("objectNotFound", isNotFound) { try await f.getFolder("a b/c/") }
        }
    }

    /// The reference does not give the status of a non-empty folder's delete: a 400 or 412 that
    /// says so is `.notEmpty` too; a 400 about something else is not.
    @Test(arguments: [400, 412, 409])
    func notEmptyWhateverTheStatus(status: Int) async throws {
        try await withHNSServer { server, store in
            server.configure { $0.notEmptyStatus = status }
            let f = try #require(store.folders)
            _ = try await store.write("d/x", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            await expectStorageError("notEmpty", isNotEmpty) { try await f.deleteFolder("d/") }
            #expect(server.folderNames == ["d/"])
        }
    }

    // MARK: rename, a long-running operation

    @Test(arguments: [0, 1, 3])
    func renameIsFollowedThroughItsPolls(polls: Int) async throws {
        try await withHNSServer { server, store in
            server.configure { $0.renamePolls = polls }
            let f = try #require(store.folders)
            let a = try await store.write("src/sub/a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            server.clearRecorded()
            let moved = try await f.renameFolder("src/", to: "dst/")
            #expect(moved.name == "dst/")
            #expect(operationPolls(server) == polls, "polled until done, no more")
            #expect(server.recorded.filter { $0.method == "POST" }.map(\.uri) == ["/storage/v1/b/test-bucket/folders/src%2F/renameTo/folders/dst%2F"])
            #expect(server.object("dst/sub/a")?.generation == a.generation)
            #expect(server.object("src/sub/a") == nil)
            #expect(server.folderNames == ["dst/", "dst/sub/"])
        }
    }

    @Test func renameFailureNamesTheOperation() async throws {
        try await withHNSServer { server, store in
            let f = try #require(store.folders)
            _ = try await f.createFolder("src/")
            server.configure { $0.nextRenameFault = .fails(code: 13, message: "internal error while renaming") }
            let e = await storageError { _ = try await f.renameFolder("src/", to: "dst/") }
            #expect(e == .operationFailed(operation: Self.operationName, message: "code 13: internal error while renaming"))
            #expect(server.folderNames == ["src/"], "nothing moved")
            // ALREADY_EXISTS from the operation: a conflict.
            server.configure { $0.nextRenameFault = .fails(code: 6, message: "already exists") }
            let c = await storageError { _ = try await f.renameFolder("src/", to: "dst/") }
            #expect(c == .conflict(path: "dst/", message: "already exists"))
        }
    }

    @Test func renameThatNeverFinishesIsBoundedByTheDeadline() async throws {
        try await withHNSServer(deadline: .seconds(1)) { server, store in
            let f = try #require(store.folders)
            _ = try await f.createFolder("src/")
            server.configure { $0.nextRenameFault = .neverFinishes }
            let start = ContinuousClock.now
            let e = await storageError { _ = try await f.renameFolder("src/", to: "dst/") }
            let took = ContinuousClock.now - start
            guard case .operationFailed(let op, let message)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(op == Self.operationName)
            #expect(message.contains("may still finish"))
            #expect(took < .seconds(3), "bounded by the 1 s deadline, took \(took)")
            #expect(operationPolls(server) >= 3)
        }
    }

    /// The operation's own deadline (a filesystem operation's) bounds the polls too.
    @Test func renameIsBoundedByTheOperationsDeadline() async throws {
        try await withHNSServer(deadline: .seconds(30)) { server, store in
            let f = try #require(store.folders)
            _ = try await f.createFolder("src/")
            server.configure { $0.nextRenameFault = .neverFinishes }
            let start = ContinuousClock.now
            let e = await storageError {
                _ = try await OperationContext.run(timeout: .milliseconds(700)) { try await f.renameFolder("src/", to: "dst/") }
            }
            guard case .operationFailed? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(ContinuousClock.now - start < .seconds(3))
        }
    }

    /// The default schedule, on an injected clock: polls 50 ms apart, doubling to 1 s, until the
    /// store's 10 s deadline: 13 polls, and never a pause past the deadline.
    @Test func pollScheduleOnAnInjectedClock() async throws {
        let manual = ManualClock()
        var tuning = fastTuning
        tuning.clock = manual.clock
        try await withHNSServer(deadline: .seconds(10), tuning: tuning) { server, store in
            let f = try #require(store.folders)
            _ = try await f.createFolder("src/")
            server.configure { $0.nextRenameFault = .neverFinishes }
            let schedule: Set<Duration> = [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(400),
                                           .milliseconds(800), .seconds(1)]
            // Advance the clock over each pause between polls as it begins, and only over those (an
            // exchange's own bound is 5 s or what is left of the deadline, never one of them).
            let base = manual.pauses.count
            let rename = Task { await storageError { _ = try await f.renameFolder("src/", to: "dst/") } }
            let driver = Task {
                var handled = base
                while !Task.isCancelled {
                    let pauses = manual.pauses
                    if let i = pauses.indices.last(where: { schedule.contains(pauses[$0]) }), i >= handled {
                        handled = i + 1
                        manual.advance(by: pauses[i])
                    }
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            let e = await rename.value
            driver.cancel()
            guard case .operationFailed(let op, let message)? = e else { Issue.record("got \(String(describing: e))"); return }
            #expect(op == Self.operationName && message.contains("after 13 polls"))
            let pauses = manual.pauses.filter { schedule.contains($0) }
            #expect(pauses == [.milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800)]
                + Array(repeating: .seconds(1), count: 8))
            #expect(operationPolls(server) == 13)
            #expect(manual.elapsed <= .seconds(10), "no pause past the deadline")
        }
    }

    enum PollFault: String, CaseIterable, Sendable { case answerLost, unavailable }

    /// A poll whose answer is lost (the operation's state was read, the answer never came) or
    /// answered 503 is asked again: two of either, then the poll that reads the operation done.
    @Test(arguments: PollFault.allCases)
    func aPollThatFailsIsRetried(_ fault: PollFault) async throws {
        try await withHNSServer { server, store in
            server.configure {
                switch fault {
                case .answerLost:
                    $0.renamePolls = 2
                    $0.losePollAnswers = 2
                case .unavailable:
                    $0.renamePolls = 1
                    $0.failPolls = 2
                }
            }
            let f = try #require(store.folders)
            _ = try await store.write("src/a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            #expect(try await f.renameFolder("src/", to: "dst/").name == "dst/")
            #expect(operationPolls(server) == 3, "two polls failed, the third read the operation done")
            #expect(server.objectNames == ["dst/a"] && server.folderNames == ["dst/"])
        }
    }

    @Test func writesUnderAFolderBeingRenamedAreRefused() async throws {
        try await withHNSServer(deadline: .seconds(2)) { server, store in
            let f = try #require(store.folders)
            _ = try await store.write("src/a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            server.configure { $0.nextRenameFault = .neverFinishes }
            let rename = Task { await storageError { _ = try await f.renameFolder("src/", to: "dst/") } }
            #expect(await eventually { operationPolls(server) > 0 })
            let w = await storageError {
                _ = try await store.write("src/b", from: .data(Data("b".utf8)), metadata: .init(), preconditions: .none)
            }
            guard case .conflict? = w else { Issue.record("expected a conflict, got \(String(describing: w))"); return }
            #expect(try await store.read("src/a", generation: nil, range: nil) == Data("a".utf8))
            #expect(try await store.list(ListRequest(prefix: "src/", delimiter: "/")).items.map(\.name) == ["src/a"])
            guard case .operationFailed? = await rename.value else { Issue.record("the rename should not finish"); return }
        }
    }

    // MARK: listing

    @Test func emptyFoldersAreListedAsPrefixes() async throws {
        try await withHNSServer { server, store in
            let f = try #require(store.folders)
            _ = try await f.createFolder("empty/")
            _ = try await store.write("full/x", from: .data(Data()), metadata: .init(), preconditions: .none)
            try await store.delete("full/x", preconditions: .none)
            let page = try await store.list(ListRequest(prefix: "", delimiter: "/"))
            #expect(page.prefixes == ["empty/", "full/"])
            #expect(page.items.isEmpty)
            // A client that did not ask for them (flat as far as it knows) does not see them, as
            // on the real service.
            let unaware = GCSStore(bucket: server.bucket, endpoint: server.endpoint, credentials: .anonymous,
                                   logger: Logger(label: "t"), tuning: fastTuning, environment: [:])
            #expect(try await unaware.list(ListRequest(prefix: "", delimiter: "/")).prefixes.isEmpty)
            try await unaware.shutdown()
        }
    }

    // MARK: objects.move

    @Test func moveIsOneRequest() async throws {
        try await withHNSServer(prefix: "p") { server, store in
            let src = try await store.write("a/x", from: .data(Data("x".utf8)), metadata: .init(contentType: "text/plain"),
                                            preconditions: .none)
            server.clearRecorded()
            let moved = try #require(try await store.move(from: "a/x", sourceGeneration: src.generation, to: "b/y",
                                                          preconditions: .doesNotExist))
            #expect(server.recorded.count == 1)
            let r = try #require(server.recorded.first)
            #expect(r.method == "POST")
            #expect(r.uri.hasPrefix("/storage/v1/b/test-bucket/o/p%2Fa%2Fx/moveTo/o/p%2Fb%2Fy?ifSourceGenerationMatch=\(src.generation)&ifGenerationMatch=0"))
            #expect(moved.name == "b/y" && moved.generation != src.generation && moved.metageneration == 1)
            #expect(moved.contentType == "text/plain" && moved.md5Hash == src.md5Hash)
            #expect(server.objectNames == ["p/b/y"])
            #expect(server.folderNames.contains("p/b/"), "the move made the destination's folder")
        }
    }

    @Test func movePreconditionsAre412() async throws {
        try await withHNSServer { server, store in
            let src = try await store.write("x", from: .data(Data("x".utf8)), metadata: .init(), preconditions: .none)
            let dst = try await store.write("y", from: .data(Data("y".utf8)), metadata: .init(), preconditions: .none)
            let stale = await storageError {
                _ = try await store.move(from: "x", sourceGeneration: src.generation - 1, to: "z", preconditions: .none)
            }
            #expect(stale.map(isPreconditionFailed) == true)
            let taken = await storageError {
                _ = try await store.move(from: "x", sourceGeneration: src.generation, to: "y", preconditions: .doesNotExist)
            }
            #expect(taken.map(isPreconditionFailed) == true)
            #expect(server.object("x")?.generation == src.generation && server.object("y")?.generation == dst.generation)
            // A real 404: the source is missing; the store still moves afterwards.
            let missing = await storageError {
                _ = try await store.move(from: "nope", sourceGeneration: 1, to: "z", preconditions: .none)
            }
            #expect(missing == .objectNotFound(path: "nope"))
            #expect(try await store.move(from: "x", sourceGeneration: src.generation, to: "z", preconditions: .none) != nil)
        }
    }

    /// A server without objects.move (404 for the route while the source is there): learned on
    /// the first rename, with one look at the source; never asked again.
    @Test func serverWithoutMoveIsLearnedOnce() async throws {
        try await withHNSServer { server, store in
            server.configure { $0.moves = false }
            let a = try await store.write("a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            let b = try await store.write("b", from: .data(Data("b".utf8)), metadata: .init(), preconditions: .none)
            // A missing source is a missing source, whether the server moves or not.
            let missing = await storageError { _ = try await store.move(from: "nope", sourceGeneration: 1, to: "z", preconditions: .none) }
            #expect(missing == .objectNotFound(path: "nope"))
            server.clearRecorded()
            #expect(try await store.move(from: "a", sourceGeneration: a.generation, to: "a2", preconditions: .none) == nil)
            #expect(server.recorded.map(\.method) == ["POST", "GET"], "the move, then one look at the source")
            server.clearRecorded()
            #expect(try await store.move(from: "b", sourceGeneration: b.generation, to: "b2", preconditions: .none) == nil)
            #expect(server.recorded.isEmpty, "learned: no request")
            #expect(server.objectNames == ["a", "b"])
        }
    }

    /// A flat bucket's file rename copies and deletes: no move is asked of its server, even one that
    /// has the route (the servers a flat bucket's move can be checked against do not move as the
    /// service documents it).
    @Test func aFlatBucketIsNeverAskedToMove() async throws {
        try await withGCSServer { server, store in
            #expect(try await store.learnLayout(timeout: .seconds(5)) == .flat)
            let a = try await store.write("a", from: .data(Data("a".utf8)), metadata: .init(), preconditions: .none)
            server.clearRecorded()
            #expect(try await store.move(from: "a", sourceGeneration: a.generation, to: "b", preconditions: .none) == nil)
            #expect(server.recorded.isEmpty)
            #expect(server.objectNames == ["a"])
        }
    }

    @Test func routeErrorsOf400AreToldApart() {
        #expect(GCSStore.isAboutTheRoute("Method not implemented: moveTo"))
        #expect(GCSStore.isAboutTheRoute("This operation is only supported for buckets with hierarchical namespace enabled."))
        #expect(!GCSStore.isAboutTheRoute("The object name 'a/' is invalid"))
    }
}
