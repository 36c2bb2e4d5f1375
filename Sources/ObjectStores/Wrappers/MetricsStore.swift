import Foundation
import Metrics
import StorageModel

/// A decorator that counts every store request for the metrics endpoint (`--metrics-address`),
/// through swift-metrics (the executable bootstraps the backend; unbootstrapped, it costs little):
///
/// - `bucketfs_store_requests_total{operation, status}`: `status` is `ok` or the error's kind
///   (`not_found`, `precondition_failed`, `unauthenticated`, `unauthorized`, `timeout`, …)
/// - `bucketfs_store_request_duration_seconds{operation}`: a histogram, retries included
/// - `bucketfs_store_read_bytes_total`, `bucketfs_store_written_bytes_total`
///
/// Operations are the `ObjectStore` calls, named as `RequestLogStore` names them: list, get,
/// patch, read, write, delete, copy, and probe (a create probe, `ObjectStore.probeCreate`).
public final class MetricsStore: StoreWrapper {
    let inner: any ObjectStore
    public var wrapped: any ObjectStore { inner }
    public var isLocal: Bool { inner.isLocal }
    public var listsUnderPartialNames: Bool { inner.listsUnderPartialNames }
    public var boundsListsByOffsets: Bool { inner.boundsListsByOffsets }
    /// A local store's reads of an open file count as one read request (its file, opened); the
    /// bytes then go from that file to the reader and are counted by the FUSE read metrics only.
    public func openLocal(_ name: String, generation: Int64) async throws -> Int32? {
        try await measure("read") { try await inner.openLocal(name, generation: generation) }
    }
    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        let counter = readBytes
        try await measure("read") {
            try await inner.stream(name, generation: generation, range: range) { d in
                counter.increment(by: Int64(d.count))
                try deliver(d)
            }
        }
    }
    /// Counted only when the store asked (a store without rules answers nil at no cost).
    public func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        let start = ContinuousClock.now
        do {
            guard let answer = try await inner.probeCreate(name, metadata: metadata) else { return nil }
            timers["probe"]?.recordInterval(since: start)
            Counter(label: "bucketfs_store_requests_total", dimensions: [("operation", "probe"), ("status", "ok")]).increment()
            return answer
        } catch {
            timers["probe"]?.recordInterval(since: start)
            Counter(label: "bucketfs_store_requests_total", dimensions: [("operation", "probe"), ("status", Self.status(of: error))]).increment()
            throw error
        }
    }
    public var bucket: String { inner.bucket }
    /// The inner store's past, measured: a versioned listing is a "list" request, the bucket's
    /// versioning state a "get".
    public var versions: (any VersionListing)? {
        guard let listing = inner.versions else { return nil }
        return MeasuredVersions(inner: listing, store: self)
    }
    private let timers: [String: Metrics.Timer]
    private let readBytes = Counter(label: "bucketfs_store_read_bytes_total")
    private let writtenBytes = Counter(label: "bucketfs_store_written_bytes_total")

    public static let operations = ["list", "get", "patch", "read", "write", "delete", "copy", "move", "probe",
                                    "folder_create", "folder_get", "folder_delete", "folder_rename"]

    public init(_ inner: any ObjectStore) {
        self.inner = inner
        var t: [String: Metrics.Timer] = [:]
        for op in Self.operations {
            t[op] = Metrics.Timer(label: "bucketfs_store_request_duration_seconds", dimensions: [("operation", op)])
        }
        timers = t
        // The store's own requests (v0's guard GETs, a probe's cancel), counted as the request log writes them.
        (inner.innermost as? any InnerRequestReporting)?.innerRequests.add { op, _, error in
            Counter(label: "bucketfs_store_requests_total", dimensions: [("operation", op), ("status", MetricsStore.status(of: error))]).increment()
        }
    }

    /// The `status` label of an outcome.
    public static func status(of error: (any Error)?) -> String {
        guard let error else { return "ok" }
        guard let e = error as? StorageError else { return error is CancellationError ? "cancelled" : "error" }
        switch e {
        case .objectNotFound: return "not_found"
        case .bucketNotFound: return "bucket_not_found"
        case .unauthenticated: return "unauthenticated"
        case .unauthorized: return "unauthorized"
        case .quotaExceeded: return "quota_exceeded"
        case .invalidArgument, .pathError, .bucketMismatch: return "invalid_argument"
        case .retryLimitExceeded: return "retry_limit_exceeded"
        case .nonMatchingChecksum: return "checksum_mismatch"
        case .preconditionFailed: return "precondition_failed"
        case .conflict: return "conflict"
        case .notEmpty: return "not_empty"
        case .operationFailed: return "operation_failed"
        case .timeout: return "timeout"
        case .tls: return "tls_error"
        case .cancelled: return "cancelled"
        case .unknown: return "error"
        }
    }

    /// `counts`: whether an answer was a request at all (a store without `move` answers nil
    /// without one).
    func measure<T>(_ op: String, counts: (T) -> Bool = { _ in true }, _ body: () async throws -> T) async throws -> T {
        let start = ContinuousClock.now
        var failure: (any Error)? = nil
        var counted = true
        defer {
            if counted {
                timers[op]?.recordInterval(since: start)
                Counter(label: "bucketfs_store_requests_total", dimensions: [("operation", op), ("status", Self.status(of: failure))])
                    .increment()
            }
        }
        do {
            let answer = try await body()
            counted = counts(answer)
            return answer
        } catch {
            failure = error
            throw error
        }
    }

    public func list(_ r: ListRequest) async throws -> ListPage {
        try await measure("list") { try await inner.list(r) }
    }
    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        try await measure("get") { try await inner.getMetadata(name) }
    }
    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        try await measure("patch") { try await inner.patchMetadata(name, patch, preconditions: preconditions) }
    }
    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        let data = try await measure("read") { try await inner.read(name, generation: generation, range: range) }
        readBytes.increment(by: Int64(data.count))
        return data
    }
    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata, preconditions: Preconditions) async throws -> ObjectInfo {
        let info = try await measure("write") { try await inner.write(name, from: source, metadata: metadata, preconditions: preconditions) }
        writtenBytes.increment(by: info.size)
        return info
    }
    /// A streamed upload counts as one "write", measured around its last request.
    public func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                                   preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        guard let upload = try await inner.beginGrowingUpload(name, file: path, metadata: metadata, preconditions: preconditions) else { return nil }
        let written = writtenBytes
        return WrappedGrowingUpload(upload) { [self] finish in
            let info = try await measure("write") { try await finish() }
            written.increment(by: info.size)
            return info
        }
    }
    public func delete(_ name: String, preconditions: Preconditions) async throws {
        try await measure("delete") { try await inner.delete(name, preconditions: preconditions) }
    }
    public func copy(from source: String, sourceGeneration: Int64?, to destination: String, metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        try await measure("copy") { try await inner.copy(from: source, sourceGeneration: sourceGeneration, to: destination, metadata: metadata, preconditions: preconditions) }
    }
    public func move(from source: String, sourceGeneration: Int64, to destination: String, preconditions: Preconditions) async throws -> ObjectInfo? {
        try await measure("move", counts: { $0 != nil }) {
            try await inner.move(from: source, sourceGeneration: sourceGeneration, to: destination, preconditions: preconditions)
        }
    }
    /// The inner store's folders, measured: each call an operation of its own ("folder_rename"...).
    public var folders: (any FolderStore)? {
        guard let f = inner.folders else { return nil }
        return WrappedFolders(f) { [self] op, _, call in try await measure(op) { try await call() } }
    }
}

/// `MetricsStore.versions`.
struct MeasuredVersions: VersionListing {
    let inner: any VersionListing
    let store: MetricsStore

    func listVersions(_ request: ListRequest) async throws -> VersionPage {
        try await store.measure("list") { try await inner.listVersions(request) }
    }
    func versioningState() async throws -> VersioningState {
        try await store.measure("get") { try await inner.versioningState() }
    }
}

extension Metrics.Timer {
    func recordInterval(since start: ContinuousClock.Instant) {
        let d = (ContinuousClock.now - start).components
        recordNanoseconds(d.seconds * 1_000_000_000 + d.attoseconds / 1_000_000_000)
    }
}
