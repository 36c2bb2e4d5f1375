import Foundation
import CloudHTTP
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import StorageModel

/// `firebase://BUCKET[/PREFIX]`: Cloud Storage for Firebase as the Firebase SDKs reach it, the v0
/// REST API (`/v0/b/BUCKET/o…`) with `Authorization: Firebase <ID token>`, so the project's
/// Security Rules decide what is seen and done (firebase-v0.md).
///
/// It answers as the JSON API would, so the filesystem core needs nothing of its own:
/// - Listings: v0 pages carry names only; the store GETs each item's metadata, many at once
///   (at most `maxConnections`), and a directory's own placeholder `dir/` (which v0 never lists).
///   Flat listings (no delimiter) and prefixes that end mid-name, which v0 cannot ask for, are
///   walked directory by directory. Page tokens are the store's own.
/// - Preconditions: v0 has none; before a write, patch or delete that carries one, the store reads
///   the object and checks it (412 → `preconditionFailed`). This narrows the window of a lost race
///   but cannot close it: between the check and the write, another writer may still win.
/// - Copy: v0 has none; the source generation is streamed to a temporary file (checked against its
///   MD5) and uploaded with its metadata. Download tokens are never shown, copied or sent.
/// - Reads of a generation: v0 cannot ask for one; the answer's `x-goog-generation` must match,
///   else the read fails (`objectNotFound`, as the JSON API answers for a generation gone).
/// - Every call is retried on 402, 408, 429, 5xx, resets and stalls, within the deadline (v0 writes
///   are last-writer-wins, so repeating one does what the first would have); a 401 refreshes the
///   ID token once.
public final class FirebaseStore: StoreBackend, ConnectionCounting, InnerRequestReporting, @unchecked Sendable {
    public let bucket: String
    /// "" or `PREFIX/`.
    public let prefix: String
    public let endpoints: FirebaseEndpoints
    public let tuning: Tuning
    /// Metadata GETs of one listing page in flight at once.
    public let maxConnections: Int
    /// v0 lists have no `startOffset`/`endOffset`: a listing walks its page tokens from the first.
    public var boundsListsByOffsets: Bool { false }
    let transport: HTTPTransport
    let logger: Logger
    let once = OnceLog()
    /// Its own requests beside the one a call names: the GETs that stand in for v0's missing
    /// preconditions and generations, a probe's cancel (`guardGet`, `probeCreate`).
    public let innerRequests = InnerRequestObservers()

    /// Knobs with production defaults; tests shrink them. The HTTP layer's (backoff, clock,
    /// timeouts, trust) are `http`'s, read and set as this struct's own (`HTTPTuned`).
    public struct Tuning: HTTPTuned, Sendable {
        public var http = HTTPTuning()
        /// Resumable upload chunk size; a multiple of 256 KiB.
        public var chunkSize: Int = 8 << 20
        /// Where copies are staged (default: the system's temporary directory).
        public var temporaryDirectory: String? = nil
        /// Names per list request of a walk (a listing without a delimiter), 1…1000.
        public var walkPageSize: Int = 1000
        public init() {}
    }

    public init(bucket: String, prefix: String, endpoints: FirebaseEndpoints,
                tokens: any FirebaseIDTokenSource, logger: Logger,
                requestTimeout: Duration, deadline: Duration, maxConnections: Int,
                tuning: Tuning = Tuning()) {
        self.bucket = bucket
        let p = prefix.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
        self.prefix = p.isEmpty ? "" : p + "/"
        self.endpoints = endpoints
        var t = tuning
        let quantum = 256 << 10
        t.chunkSize = max(quantum, t.chunkSize / quantum * quantum)
        self.tuning = t
        self.maxConnections = max(1, maxConnections)
        self.logger = logger

        let clients = CloudHTTPClients(tuning: t.http, https: endpoints.storage.scheme?.lowercased() == "https",
                                       maxConnections: self.maxConnections)
        self.transport = HTTPTransport(clients: clients, auth: FirebaseAuthorization(source: tokens, bucket: bucket, clock: t.clock),
                                       policy: RetryPolicy(tuning: t.http, deadline: deadline, requestTimeout: requestTimeout),
                                       logger: logger, bucket: bucket, dialect: V0Errors.dialect(bucket: bucket))
        logger.debug("Firebase store firebase://\(bucket)/\(self.prefix) at \(endpoints.storage.absoluteString)")
    }

    /// The connections and TLS handshakes made so far.
    public var connections: ConnectionCounter.Snapshot { transport.settings.counter.snapshot }

    /// Closes the connection pools, after the last request. Later calls do nothing. A store
    /// dropped without it still releases its connections (`CloudHTTPClients`).
    public func shutdown() async throws { try await transport.clients.shutdown() }

    /// Lists at most one name under the store's prefix, within `timeout` whatever the endpoint
    /// does: a bucket the rules do not let this user list, a refused sign-in or an endpoint that
    /// never answers is refused within seconds.
    public func probe(timeout: Duration) async throws {
        let url = bucketURL + CloudURL.query([("prefix", prefix), ("delimiter", "/"), ("maxResults", "1")])
        do {
            _ = try await transport.send("list", path: "", idempotent: true, deadline: transport.clock.now + timeout,
                                         CloudRequest(.GET, url))
        } catch StorageError.unauthorized(_, let m) {
            throw StorageError.unauthorized(path: shown(prefix), message: m)
        }
    }

    // MARK: URLs

    var storageBase: String {
        var s = endpoints.storage.absoluteString
        while s.hasSuffix("/") { s.removeLast() }
        return s
    }
    var bucketURL: String { "\(storageBase)/v0/b/\(CloudURL.segment(bucket))/o" }
    /// The object path as one percent-encoded segment (`/` → `%2F`; `..` → `%2E%2E`).
    func objectURL(_ name: String) -> String { "\(bucketURL)/\(CloudURL.segment(prefix + name))" }
    /// A name as log lines and messages show it.
    func shown(_ fullName: String) -> String { "firebase://\(bucket)/\(fullName)" }

    func parseObject(_ r: CloudResponse) throws -> ObjectInfo {
        try V0Metadata.objectInfo(try r.json(), stripPrefix: prefix)
    }

    // MARK: ObjectStore

    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        try parseObject(try await transport.send("get", path: name, idempotent: true, CloudRequest(.GET, objectURL(name))))
    }

    /// Sends only what the patch names (v0 merges custom keys; null deletes), never a download token.
    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        var p = patch
        if p.customMetadata.removeValue(forKey: V0Metadata.downloadTokensKey) != nil {
            throw StorageError.invalidArgument(message: "\(V0Metadata.downloadTokensKey) is reserved for download tokens; it is never set through bucketfs")
        }
        try await check(preconditions, on: name, for: "patch")
        let body = ByteBuffer(data: ObjectResource.patchBody(p))
        let r = try await transport.send("patch", path: name, idempotent: true,
                                         CloudRequest(.PATCH, objectURL(name), headers: Self.jsonHeaders, body: body))
        return try parseObject(r)
    }

    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        if let range, range.isEmpty {
            _ = try await guardGet(name)  // still report a missing object
            return Data()
        }
        let r = try await transport.send("read", path: name, idempotent: true, expect: MediaRequests.downloadExpect(range: range),
                                         CloudRequest(.GET, objectURL(name) + "?alt=media", headers: MediaRequests.downloadHeaders(range: range)))
        if let g = generation {
            if let e = generationProblem(r.headers, want: g, name: name) { throw e }
            if r.headers.first(name: "x-goog-generation") == nil { try await confirmGeneration(name, g) }
        }
        // A 200 for a range is cut locally (v0 answers a range past the end with the whole object).
        return MediaRequests.bytes(of: r, range: range)
    }

    /// A ranged GET streamed as it arrives: a 206 for exactly the bytes asked (or a 200 with the
    /// whole object, passed over up to them), of exactly `generation`, is taken.
    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        guard !range.isEmpty else { return }
        let unconfirmed = Flag()
        let logger = self.logger
        try await transport.stream("read", path: name,
                                   CloudRequest(.GET, objectURL(name) + "?alt=media", headers: MediaRequests.downloadHeaders(range: range)),
                                   length: Int(range.upperBound - range.lowerBound), check: { status, headers in
                if headers.first(name: "x-goog-generation") == nil { unconfirmed.set() }
                if let e = Self.generationProblem(headers, want: generation, name: name, logger: logger) { return .rejected(e) }
                return MediaRequests.streamPlan(status: status, headers: headers, range: range)
            }, deliver: { buffer in
                try deliver(Data(buffer: buffer, byteTransferStrategy: .noCopy))
            })
        if unconfirmed.value { try await confirmGeneration(name, generation) }
    }

    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
                      preconditions: Preconditions) async throws -> ObjectInfo {
        let size = try MediaRequests.sourceSize(source)
        try await check(preconditions, on: name, for: "upload")
        let meta = V0Metadata.writable(metadata)
        if size > tuning.resumableThreshold {
            return try await resumableUpload(name, from: source, size: size, metadata: meta)
        }
        return try await multipartUpload(name, from: source, size: size, metadata: meta)
    }

    public func delete(_ name: String, preconditions: Preconditions) async throws {
        try await check(preconditions, on: name, for: "delete")
        // A retry that finds the object gone after an attempt whose answer was lost: that attempt
        // deleted it.
        let r = try await transport.send("delete", path: name, idempotent: true,
                                         expect: Expect(doneAfterLostAnswer: { $0 == 404 }), CloudRequest(.DELETE, objectURL(name)))
        if r.afterLostAnswer { logger.info("Firebase delete \(name): an earlier attempt's answer was lost; the object is gone, so it was deleted") }
    }

    // MARK: preconditions

    /// v0 has no preconditions: read the object and check them here. A 412 is due when they do not
    /// hold. A create (`ifGenerationMatch: 0`) where the rules deny reading goes ahead unchecked
    /// (write-only areas), logged.
    func check(_ p: Preconditions, on name: String, for what: String) async throws {
        guard !p.isEmpty else { return }
        let current: ObjectInfo?
        do {
            current = try await guardGet(name)
        } catch StorageError.objectNotFound {
            current = nil
        } catch StorageError.unauthorized(_, let m) where p == .doesNotExist {
            if once.first("precheck:" + name) {
                logger.info("Firebase \(what) \(shown(prefix + name)): cannot check that it does not exist yet (the rules deny reading it: \(m)); going ahead")
            }
            return
        }
        guard p.hold(for: current) else {
            logger.debug("Firebase \(what) \(name): precondition \(p) does not hold (now generation \(current.map { String($0.generation) } ?? "none"), metageneration \(current.map { String($0.metageneration) } ?? "none"))")
            throw StorageError.preconditionFailed(path: name)
        }
    }

    // MARK: generations

    /// v0 cannot ask for a generation: the answer's own must be the one wanted. Another one is
    /// `objectNotFound`, as the JSON API answers for a generation that is gone (never retried).
    static func generationProblem(_ headers: HTTPHeaders, want: Int64, name: String, logger: Logger) -> StorageError? {
        guard let got = headers.first(name: "x-goog-generation").flatMap({ Int64($0) }), got != want else { return nil }
        logger.debug("Firebase read \(name): generation \(want) asked, \(got) is live; no bytes taken")
        return .objectNotFound(path: name)
    }

    func generationProblem(_ headers: HTTPHeaders, want: Int64, name: String) -> StorageError? {
        Self.generationProblem(headers, want: want, name: name, logger: logger)
    }

    /// For an answer without `x-goog-generation`: the live generation must still be `want`.
    func confirmGeneration(_ name: String, _ want: Int64) async throws {
        let now = try await guardGet(name)
        guard now.generation == want else {
            logger.debug("Firebase read \(name): generation \(want) asked, \(now.generation) is live")
            throw StorageError.objectNotFound(path: name)
        }
    }

    /// A GET the store sends of its own (a precondition, a generation, a copy's source), reported
    /// to `innerRequests` so that the request log and the metrics count it.
    func guardGet(_ name: String) async throws -> ObjectInfo {
        do {
            let info = try await getMetadata(name)
            innerRequests.report("get", name, nil)
            return info
        } catch {
            innerRequests.report("get", name, error)
            throw error
        }
    }

    static let jsonHeaders: HTTPHeaders = ["Content-Type": "application/json; charset=utf-8"]
}

/// Set once, read later (from any thread).
final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var on = false
    func set() { lock.withLock { on = true } }
    var value: Bool { lock.withLock { on } }
}
