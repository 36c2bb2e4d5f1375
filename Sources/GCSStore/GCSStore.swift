import Foundation
import CloudHTTP
import Logging
import NIOCore
import NIOHTTP1
import NIOFoundationCompat
import StorageModel

/// `gs://BUCKET[/PREFIX]` through the Cloud Storage JSON API (`/storage/v1`, uploads under `/upload`).
///
/// - Names are sent percent-encoded as one path segment; with a `prefix`, `PREFIX/` is prepended to
///   every name and stripped from every result, so the store looks like a bucket rooted there.
/// - Idempotent calls (reads, list, get, and writes guarded by a generation or metageneration
///   precondition) are retried on 408, 429, 5xx, resets and timeouts with jittered exponential backoff;
///   every call ends within its deadline (`retryLimitExceeded` or `timeout`). Resumable uploads resume
///   from what the server persisted; their deadline restarts whenever the server has persisted more.
public final class GCSStore: StoreBackend, ConnectionCounting {
    public let bucket: String
    public var listsUnderPartialNames: Bool { true }
    /// "" or `PREFIX/`.
    public let prefix: String
    /// `scheme://host[:port]` without a trailing slash.
    public let endpoint: String
    public let tuning: Tuning
    let transport: HTTPTransport
    let tokens: StoreTokens
    let logger: Logger
    /// Token requests, on the API's clients (docs/CREDENTIALS.md).
    let tokenRequests: CredentialRequests
    /// The bucket's layout and the server's objects.move, once learned (GCSStore+Folders.swift).
    let learned = GCSLearned()

    /// Knobs with production defaults; tests shrink them. The HTTP layer's (backoff, clock,
    /// timeouts, trust) are `http`'s, read and set as this struct's own (`HTTPTuned`).
    public struct Tuning: HTTPTuned, Sendable {
        public var http = HTTPTuning()
        /// Resumable uploads send the whole object in one streamed request (nil, the default) or,
        /// for servers and proxies that need it, one request per chunk of this size (a multiple of
        /// 256 KiB).
        public var chunkSize: Int? = nil
        /// HTTP/1.1 connections kept per host (the emulator is single-threaded HTTP/1.0: keep this small).
        public var maxConnectionsPerHost: Int = 16
        public init() {}
    }

    public static let defaultEndpoint = "https://storage.googleapis.com"

    public init(bucket: String, prefix: String = "", endpoint: URL? = nil, credentials: CredentialSource,
                logger: Logger, requestTimeout: Duration = .seconds(30), deadline: Duration = .seconds(60),
                tuning: Tuning = Tuning(), environment: [String: String] = ProcessInfo.processInfo.environment,
                billingProject: String? = nil) {
        self.bucket = bucket
        let p = prefix.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
        self.prefix = p.isEmpty ? "" : p + "/"
        self.endpoint = Self.resolveEndpoint(endpoint, environment: environment)
        var t = tuning
        let quantum = 256 << 10
        t.chunkSize = t.chunkSize.map { max(quantum, $0 / quantum * quantum) }
        self.tuning = t
        self.logger = logger

        let clients = CloudHTTPClients(tuning: tuning.http, https: self.endpoint.lowercased().hasPrefix("https:"),
                                       maxConnections: tuning.maxConnectionsPerHost)
        let policy = RetryPolicy(tuning: tuning.http, deadline: deadline, requestTimeout: requestTimeout)
        tokenRequests = CredentialRequests(clients: clients, policy: policy, logger: logger, label: "GCS auth")
        let tokens = StoreTokens.make(credentials, billingProject: billingProject, environment: environment,
                                      transport: HTTPTokenTransport(tokenRequests), clock: tuning.clock)
        self.tokens = tokens
        self.transport = HTTPTransport(clients: clients, auth: GCSAuthorization(tokens: tokens, credentials: credentials),
                                       policy: policy, logger: logger, bucket: bucket, dialect: .gcs(bucket: bucket))
        logger.debug("GCS store gs://\(bucket)/\(self.prefix) at \(self.endpoint), credentials: \(credentials)")
    }

    /// Closes the connection pools, after the last request. Later calls do nothing. A store
    /// dropped without it still releases its connections (`CloudHTTPClients`).
    public func shutdown() async throws { try await transport.clients.shutdown() }

    /// The connections and TLS handshakes made so far.
    public var connections: ConnectionCounter.Snapshot { transport.settings.counter.snapshot }

    /// Number of access tokens fetched so far (refreshing credentials).
    public var tokenFetchCount: Int {
        get async { await tokens.cache?.fetchCount ?? 0 }
    }

    /// `--endpoint`, else `STORAGE_EMULATOR_HOST` (`host:port` or a URL), else the public endpoint.
    public static func resolveEndpoint(_ endpoint: URL?, environment: [String: String]) -> String {
        var s = endpoint?.absoluteString ?? environment["STORAGE_EMULATOR_HOST"].flatMap { $0.isEmpty ? nil : $0 }
            ?? defaultEndpoint
        if !s.contains("://") { s = "http://" + s }
        while s.hasSuffix("/") { s.removeLast() }
        return s
    }

    // MARK: URLs

    var bucketPath: String { "\(endpoint)/storage/v1/b/\(CloudURL.segment(bucket))/o" }
    var uploadPath: String { "\(endpoint)/upload/storage/v1/b/\(CloudURL.segment(bucket))/o" }
    func objectURL(_ name: String) -> String { "\(bucketPath)/\(CloudURL.segment(prefix + name))" }

    static let jsonHeaders: HTTPHeaders = ["Content-Type": "application/json; charset=UTF-8"]

    func parseObject(_ r: CloudResponse) throws -> ObjectInfo {
        try ObjectResource.objectInfo(try r.json(), stripPrefix: prefix)
    }

    // MARK: ObjectStore

    public func list(_ request: ListRequest) async throws -> ListPage {
        let full = prefix + request.prefix
        let url = bucketPath + CloudURL.query([
            ("prefix", full.isEmpty ? nil : full), ("delimiter", request.delimiter),
            ("maxResults", String(request.maxResults)), ("pageToken", request.pageToken),
            ("includeTrailingDelimiter", request.includeTrailingDelimiter && request.delimiter != nil ? "true" : nil),
            // A hierarchical namespace's folders, empty ones too, come as prefixes (only with "/").
            ("includeFoldersAsPrefixes", request.delimiter == "/" && learned.layout == .hierarchical ? "true" : nil),
            ("startOffset", request.startOffset.map { prefix + $0 }), ("endOffset", request.endOffset.map { prefix + $0 }),
            ("fields", GCSJSONAPI.listFields),
        ])
        let r = try await transport.send("list", path: "", idempotent: true, CloudRequest(.GET, url))
        let decoded: ListPageJSON
        do {
            decoded = try ListPageJSON.decode(r.data)
        } catch {
            throw StorageError.unknown(status: r.status, message: "the server's list answer is not a list page: \(error)")
        }
        var page = ListPage()
        for p in decoded.prefixes ?? [] {
            let stripped = p.hasPrefix(prefix) ? String(p.dropFirst(prefix.count)) : p
            if !stripped.isEmpty { page.prefixes.append(stripped) }
        }
        page.items.reserveCapacity(decoded.items?.count ?? 0)
        let strings = Interner()
        for item in decoded.items ?? [] {
            let info = try item.info(stripPrefix: prefix, interning: strings)
            // With a prefix, the `PREFIX/` placeholder itself is the root, not an item.
            if !info.name.isEmpty { page.items.append(info) }
        }
        if let t = decoded.nextPageToken, !t.isEmpty { page.nextPageToken = t }
        return page
    }

    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        let url = objectURL(name) + CloudURL.query([("fields", GCSJSONAPI.objectFields)])
        return try parseObject(try await transport.send("get", path: name, idempotent: true, CloudRequest(.GET, url)))
    }

    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        let url = objectURL(name) + CloudURL.query(GCSJSONAPI.preconditionItems(preconditions) + [("fields", GCSJSONAPI.objectFields)])
        let body = ByteBuffer(data: ObjectResource.patchBody(patch))
        let r = try await transport.send("patch", path: name, idempotent: RetryPolicy.isGuarded(preconditions),
                                         CloudRequest(.PATCH, url, headers: Self.jsonHeaders, body: body))
        return try parseObject(r)
    }

    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        if let range, range.isEmpty {
            _ = try await getMetadata(name, generation: generation)  // still report a missing object (or generation)
            return Data()
        }
        let url = objectURL(name) + CloudURL.query([("alt", "media"), ("generation", generation.map(String.init))])
        let r = try await transport.send("read", path: name, idempotent: true, expect: MediaRequests.downloadExpect(range: range),
                                         CloudRequest(.GET, url, headers: MediaRequests.downloadHeaders(range: range)))
        return MediaRequests.bytes(of: r, range: range)
    }

    /// A ranged GET streamed as it arrives. A 206 for exactly the bytes asked is taken, and a 200
    /// with the whole object is passed over up to them (`MediaRequests.streamPlan`); any other
    /// answer is a fault for the caller to read around.
    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        guard !range.isEmpty else { return }
        let url = objectURL(name) + CloudURL.query([("alt", "media"), ("generation", String(generation))])
        try await transport.stream("read", path: name, CloudRequest(.GET, url, headers: MediaRequests.downloadHeaders(range: range)),
                                   length: Int(range.upperBound - range.lowerBound), check: { status, headers in
            MediaRequests.streamPlan(status: status, headers: headers, range: range)
        }, deliver: { buffer in
            try deliver(Data(buffer: buffer, byteTransferStrategy: .noCopy))
        })
    }

    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
                      preconditions: Preconditions) async throws -> ObjectInfo {
        let size = try MediaRequests.sourceSize(source)
        if size > tuning.resumableThreshold {
            return try await resumableUpload(name, from: source, size: size, metadata: metadata, preconditions: preconditions)
        }
        return try await multipartUpload(name, from: source, size: size, metadata: metadata, preconditions: preconditions)
    }

    public func delete(_ name: String, preconditions: Preconditions) async throws {
        let url = objectURL(name) + CloudURL.query(GCSJSONAPI.preconditionItems(preconditions))
        // A retry that finds the object gone after an attempt whose answer was lost: that attempt
        // deleted it.
        let r = try await transport.send("delete", path: name, idempotent: RetryPolicy.isGuarded(preconditions),
                                         expect: Expect(doneAfterLostAnswer: { $0 == 404 }), CloudRequest(.DELETE, url))
        if r.afterLostAnswer { logger.info("GCS delete \(name): an earlier attempt's answer was lost; the object is gone, so it was deleted") }
    }

    public func copy(from source: String, sourceGeneration: Int64?, to destination: String,
                     metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        let base = "\(objectURL(source))/rewriteTo/b/\(CloudURL.segment(bucket))/o/\(CloudURL.segment(prefix + destination))"
        let body = metadata.map { ByteBuffer(data: ObjectResource.resourceBody(name: nil, $0)) }
        let idempotent = RetryPolicy.isGuarded(preconditions)
        var token: String? = nil
        for round in 1...10_000 {
            let url = base + CloudURL.query([("sourceGeneration", sourceGeneration.map(String.init))]
                + GCSJSONAPI.preconditionItems(preconditions) + [("rewriteToken", token)])
            let r = try await transport.send("copy", path: round == 1 ? source : destination, idempotent: idempotent,
                                             expect: Expect(doneAfterLostAnswer: { $0 == 412 }),
                                             CloudRequest(.POST, url, headers: body == nil ? [:] : Self.jsonHeaders, body: body))
            if r.afterLostAnswer {
                // The retry met a destination that the lost attempt may have written: ours when it
                // holds the source's bytes.
                let src = try await getMetadata(source, generation: sourceGeneration)
                return try await confirmOwn(destination, crc32c: src.crc32c, md5: src.md5Hash, size: src.size,
                                            notGeneration: preconditions.ifGenerationMatch)
            }
            let o = try r.json()
            if (o["done"] as? Bool) == true || (o["done"] == nil && o["resource"] == nil && o["name"] != nil) {
                if let res = o["resource"] as? [String: Any] { return try ObjectResource.objectInfo(res, stripPrefix: prefix) }
                return try ObjectResource.objectInfo(o, stripPrefix: prefix)
            }
            guard let next = o["rewriteToken"] as? String, !next.isEmpty else {
                throw StorageError.unknown(status: r.status, message: "rewrite of \(source) not done and no rewriteToken")
            }
            token = next
        }
        throw StorageError.retryLimitExceeded(message: "rewrite of \(source) to \(destination) did not finish")
    }

    /// After a lost answer and a 412 on the retry: the object there now is the earlier attempt's
    /// when it has exactly the bytes sent (size and checksum) and is not the generation the
    /// precondition guarded against. Anything else is a real lost race.
    func confirmOwn(_ name: String, crc32c: String?, md5: String?, size: Int64, notGeneration: Int64?) async throws -> ObjectInfo {
        let there = try await getMetadata(name)
        // Compare every checksum both sides have; at least one must be there.
        let pairs = [(crc32c, there.crc32c), (md5, there.md5Hash)].filter { $0.0 != nil && $0.1 != nil }
        let sameSum = !pairs.isEmpty && pairs.allSatisfy { $0.0 == $0.1 }
        if there.size == size, sameSum, there.generation != notGeneration {
            logger.info("GCS \(name): an earlier attempt's answer was lost; generation \(there.generation) holds exactly the bytes sent, so it succeeded")
            return there
        }
        throw StorageError.preconditionFailed(path: name)
    }
}
