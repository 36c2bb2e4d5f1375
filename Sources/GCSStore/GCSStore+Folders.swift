import CloudHTTP
import Foundation
import NIOCore
import StorageModel

/// What a store learns about its bucket and server once, and keeps: the bucket's layout (asked
/// by `learnLayout`) and whether the server has objects.move.
final class GCSLearned: @unchecked Sendable {
    private let lock = NSLock()
    private var _layout: BucketLayout?
    private var _noMove = false

    /// nil until `learnLayout` has asked (the store is then flat as far as anyone can tell).
    var layout: BucketLayout? {
        get { lock.withLock { _layout } }
        set { lock.withLock { _layout = newValue } }
    }

    /// The server has no objects.move: every rename copies and deletes.
    var noMove: Bool { lock.withLock { _noMove } }

    /// Records that the server has no objects.move; true for the first caller only (who logs it).
    func learnNoMove() -> Bool {
        lock.withLock {
            if _noMove { return false }
            _noMove = true
            return true
        }
    }
}

/// A bucket with a hierarchical namespace (docs/SEMANTICS.md, "Hierarchical-namespace buckets"):
/// the bucket's `storageLayout`, its folders (`folders.*` of the JSON API, followed through the
/// long-running operation a rename is) and objects.move.
extension GCSStore {
    /// The bucket's folders, once `learnLayout` has found a hierarchical namespace; nil otherwise.
    public var folders: (any FolderStore)? { learned.layout == .hierarchical ? GCSFolders(store: self) : nil }

    /// The layout `learnLayout` found (nil before it asked).
    public var layout: BucketLayout? { learned.layout }

    var bucketRoot: String { "\(endpoint)/storage/v1/b/\(CloudURL.segment(bucket))" }

    /// Asks the bucket's `storageLayout` (one GET, bounded by `timeout` like `probe`, retries of
    /// transient failures included) and remembers the answer: `folders` is given out only for a
    /// hierarchical namespace. A server without the route (404, 400, 405, 501: the emulators) has
    /// flat buckets only; a refusal of the credential is an error. It needs the permission the
    /// probe's list needs (`storage.objects.list`), checked under the store's prefix when it has
    /// one (`prefix=`), so a credential that may list only there can ask it too.
    @discardableResult
    public func learnLayout(timeout: Duration) async throws -> BucketLayout {
        let url = bucketRoot + "/storageLayout" + CloudURL.query([("prefix", prefix.isEmpty ? nil : prefix)])
        let r = try await transport.send("layout", path: "", idempotent: true, deadline: transport.clock.now + timeout,
                                         expect: Expect(accept: { [400, 404, 405, 501].contains($0) }), CloudRequest(.GET, url))
        var layout = BucketLayout.flat
        if (200..<300).contains(r.status) {
            let o = try r.json()
            if let hns = o["hierarchicalNamespace"] as? [String: Any], (hns["enabled"] as? Bool) == true { layout = .hierarchical }
        } else {
            logger.debug("GCS storageLayout of gs://\(bucket): HTTP \(r.status) (\(HTTPTransport.errorMessage(r.body) ?? "")); taken as flat")
        }
        learned.layout = layout
        return layout
    }

    /// objects.move (`ObjectStore.move`), on a bucket with a hierarchical namespace only (docs/SEMANTICS.md
    /// §3.9): one request, `ifSourceGenerationMatch` on the source and `preconditions` on the
    /// destination. A flat bucket gets nil without a request, and the caller copies and deletes as
    /// it always has: the servers we can test a flat bucket's move against do not move as the
    /// service documents it (storage-testbench copies, then deletes the source under the
    /// destination's preconditions: 412; fake-gcs-server refuses it with a 400), so the one way
    /// that is checked everywhere stays. A hierarchical server without it (a 404 while the source
    /// is there, or a 400/405/501 about the route) is learned once: nil from then on.
    public func move(from source: String, sourceGeneration: Int64, to destination: String,
                     preconditions: Preconditions) async throws -> ObjectInfo? {
        guard learned.layout == .hierarchical else { return nil }
        if learned.noMove { return nil }
        let url = "\(objectURL(source))/moveTo/o/\(CloudURL.segment(prefix + destination))"
            + CloudURL.query([("ifSourceGenerationMatch", String(sourceGeneration))]
                + GCSJSONAPI.preconditionItems(preconditions) + [("fields", GCSJSONAPI.objectFields)])
        // Guarded by the source's generation, a repeat cannot move anything else: retried like a
        // guarded write. After a lost answer, a 404 (the source gone) or 412 (the destination
        // there) may be the earlier attempt's doing: confirmed below.
        let r = try await transport.send("move", path: source, idempotent: true,
                                         expect: Expect(accept: { [400, 404, 405, 501].contains($0) },
                                                        doneAfterLostAnswer: { $0 == 404 || $0 == 412 }),
                                         CloudRequest(.POST, url))
        if r.afterLostAnswer { return try await confirmMoved(source, sourceGeneration, to: destination, status: r.status) }
        if (200..<300).contains(r.status) { return try parseObject(r) }
        let message = HTTPTransport.errorMessage(r.body) ?? "an empty answer"
        switch r.status {
        case 404:
            // The source is there: the route is not.
            do { _ = try await getMetadata(source) } catch StorageError.objectNotFound { throw StorageError.objectNotFound(path: source) }
        case 400 where !Self.isAboutTheRoute(message):
            throw StorageError.invalidArgument(message: message)
        default:
            break
        }
        if learned.learnNoMove() {
            logger.info("GCS gs://\(bucket): the server has no objects.move (HTTP \(r.status): \(message)); a rename copies and deletes")
        }
        return nil
    }

    /// Whether a 400 to objects.move says the server does not know the request (not that the
    /// request is wrong).
    package static func isAboutTheRoute(_ message: String) -> Bool {
        let m = message.lowercased()
        return ["not implemented", "unimplemented", "not supported", "only supported", "unsupported", "no route",
                "unknown method", "moveto", "no such method"].contains { m.contains($0) }
    }

    /// After a lost answer: the move happened when the source's generation is gone and the
    /// destination is there.
    private func confirmMoved(_ source: String, _ generation: Int64, to destination: String, status: Int) async throws -> ObjectInfo {
        let sourceGone: Bool
        do { sourceGone = try await getMetadata(source).generation != generation } catch StorageError.objectNotFound { sourceGone = true }
        if sourceGone, let there = try? await getMetadata(destination) {
            logger.info("GCS move \(source): an earlier attempt's answer was lost; the source is gone and \(destination) is there, so it moved")
            return there
        }
        if status == 404 { throw StorageError.objectNotFound(path: source) }
        throw StorageError.preconditionFailed(path: destination)
    }
}

/// The folders of a hierarchical-namespace bucket over the JSON API (`folders.insert`, `get`,
/// `delete`, `rename` and `operations.get`), each name `prefix`ed on the way out and stripped on
/// the way back, as the store's objects are.
struct GCSFolders: FolderStore {
    let store: GCSStore

    var transport: HTTPTransport { store.transport }
    var foldersURL: String { store.bucketRoot + "/folders" }
    func folderURL(_ name: String) -> String { "\(foldersURL)/\(CloudURL.segment(store.prefix + name))" }

    func createFolder(_ name: String) async throws -> FolderInfo {
        let url = foldersURL + CloudURL.query([("recursive", "true")])
        let body = try JSONSerialization.data(withJSONObject: ["name": store.prefix + name])
        let r = try await transport.send("folder_create", path: name, idempotent: false,
                                         CloudRequest(.POST, url, headers: GCSStore.jsonHeaders, body: ByteBuffer(data: body)))
        return try folderInfo(r.json(), status: r.status)
    }

    func getFolder(_ name: String) async throws -> FolderInfo {
        let r = try await transport.send("folder_get", path: name, idempotent: true, CloudRequest(.GET, folderURL(name)))
        return try folderInfo(r.json(), status: r.status)
    }

    /// The reference does not say what a non-empty folder's delete is answered: a 409, or a
    /// 400/412 whose message says it is not empty, is `.notEmpty` (docs/TESTING.md).
    func deleteFolder(_ name: String) async throws {
        let r = try await transport.send("folder_delete", path: name, idempotent: false,
                                         expect: Expect(accept: { [400, 409, 412].contains($0) },
                                                        doneAfterLostAnswer: { $0 == 404 }),
                                         CloudRequest(.DELETE, folderURL(name)))
        if r.afterLostAnswer { return }
        guard (200..<300).contains(r.status) else {
            let message = HTTPTransport.errorMessage(r.body) ?? "HTTP \(r.status)"
            if r.status == 409 || message.lowercased().contains("not empty") { throw StorageError.notEmpty(path: name) }
            throw StorageError.fromHTTP(status: r.status, message: message, path: name, bucket: store.bucket)
        }
    }

    /// Posts the rename, then follows its operation (`operations.get`) with backoff
    /// (`pollDelay`) until it is done, within the call's deadline: the operation's own
    /// (`OperationContext`) or the store's. A poll that fails transiently is retried (the
    /// operation goes on on the server either way).
    func renameFolder(_ source: String, to destination: String) async throws -> FolderInfo {
        let clock = transport.clock
        let end = OperationContext.deadline(capping: clock.now + transport.policy.deadline)
        let url = "\(folderURL(source))/renameTo/folders/\(CloudURL.segment(store.prefix + destination))"
        let r = try await transport.send("folder_rename", path: source, idempotent: false, deadline: end, CloudRequest(.POST, url))
        var op = try r.json()
        guard let name = op["name"] as? String, name.contains("/operations/") else {
            // A server that renamed at once and answered the folder.
            return try folderInfo(op, status: r.status)
        }
        let id = String(name[name.range(of: "/operations/", options: .backwards)!.upperBound...])
        let pollURL = "\(store.bucketRoot)/operations/\(CloudURL.segment(id))"
        var polls = 0
        while (op["done"] as? Bool) != true {
            let pause = Self.pollDelay(after: polls)
            if clock.now + pause >= end {
                throw StorageError.operationFailed(operation: name, message: Self.unfinished(polls, source, destination))
            }
            try await transport.policy.pause(pause)
            polls += 1
            do {
                op = try await transport.send("folder_rename_poll", path: source, idempotent: true, deadline: end,
                                              CloudRequest(.GET, pollURL)).json()
            } catch let e as StorageError where e != .cancelled {
                // The transport retried a transient failure until the deadline: that is what ended it.
                if clock.now >= end { throw StorageError.operationFailed(operation: name, message: Self.unfinished(polls, source, destination)) }
                throw StorageError.operationFailed(operation: name, message: "cannot follow the rename of \(source) to \(destination) (poll \(polls)): \(e); it goes on on the server and may still finish")
            }
        }
        if let error = op["error"] as? [String: Any] {
            let code = (error["code"] as? NSNumber)?.intValue ?? Int((error["code"] as? String) ?? "") ?? -1
            let message = (error["message"] as? String) ?? "no message"
            switch code {
            case 6: throw StorageError.conflict(path: destination, message: message)  // ALREADY_EXISTS
            case 5: throw StorageError.objectNotFound(path: source)                  // NOT_FOUND
            default: throw StorageError.operationFailed(operation: name, message: "code \(code): \(message)")
            }
        }
        if let folder = op["response"] as? [String: Any], folder["name"] is String { return try folderInfo(folder, status: 200) }
        return try await getFolder(destination)
    }

    /// The pause before poll number `n + 1` of a rename's operation: 50 ms, doubling, at most 1 s.
    static func pollDelay(after n: Int) -> Duration {
        .milliseconds(min(1000, 50 << min(n, 5)))
    }

    static func unfinished(_ polls: Int, _ source: String, _ destination: String) -> String {
        "the rename of \(source) to \(destination) was not done after \(polls) polls within the deadline; it goes on on the server and may still finish"
    }

    /// A Folder resource, its name stripped of the store's prefix.
    func folderInfo(_ o: [String: Any], status: Int) throws -> FolderInfo {
        guard var name = o["name"] as? String else {
            throw StorageError.unknown(status: status, message: "the server's answer is not a folder resource")
        }
        if !store.prefix.isEmpty, name.hasPrefix(store.prefix) { name = String(name.dropFirst(store.prefix.count)) }
        let meta: Int64 = (o["metageneration"] as? String).flatMap { Int64($0) } ?? (o["metageneration"] as? NSNumber)?.int64Value ?? 1
        return FolderInfo(name: name, metageneration: meta,
                          createTime: (o["createTime"] as? String).flatMap(RFC3339.parse),
                          updateTime: (o["updateTime"] as? String).flatMap(RFC3339.parse))
    }
}
