import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import StorageModel

/// A Cloud Storage JSON API server on 127.0.0.1 for tests, in the test process (ObjectStoresTests)
/// or as a process of its own (`gcs-test-server`, the real-mount tier): one bucket of
/// in-memory objects, following the documented API (list pagination over items and prefixes,
/// PATCH merge with null deletion, generation / metageneration preconditions → 412, multipart and
/// resumable uploads, Range downloads, rewrite with rewriteToken rounds, delete), plus fault
/// injection and an OAuth2 token endpoint at `/token`. With `hierarchical`, a bucket with a
/// hierarchical namespace: folders, folder renames as long-running operations, objects.move
/// (GCSTestServer+Folders.swift).
///
/// Object versioning as the documentation describes it, when `versioning` is on (`configure`):
/// a replaced or deleted generation stays, noncurrent, with its `timeDeleted`; `objects.list`
/// with `versions=true` lists every generation (by name, then generation; prefixes of any
/// generation); `generation=` reads and gets a kept one, `sourceGeneration=` rewrites from it, and
/// preconditions are checked against the live generation. `buckets.get` answers `versioning`
/// and, when `softDeleteRetention` is set, `softDeletePolicy`.
public final class GCSTestServer: @unchecked Sendable {
    public struct Object: Sendable {
        public var name: String
        /// The bytes never change once stored (a new generation is a new Object), so their
        /// hashes are taken once, when it is made, not at every answer that shows them.
        public let data: Data
        public var generation: Int64
        public var metageneration: Int64
        public var timeCreated: Date
        public var updated: Date
        /// cacheControl, contentDisposition, contentEncoding, contentLanguage, contentType.
        public var props: [String: String]
        public var metadata: [String: String]
        /// md5Hash and crc32c, base64.
        public let md5: String
        public let crc32c: String

        /// `hashes`: those of `data` already taken (a resumable session's, as its chunks came).
        init(name: String, data: Data, generation: Int64, metageneration: Int64, timeCreated: Date, updated: Date,
             props: [String: String], metadata: [String: String], hashes: (md5: String, crc32c: String)? = nil) {
            self.name = name
            self.data = data
            self.generation = generation
            self.metageneration = metageneration
            self.timeCreated = timeCreated
            self.updated = updated
            self.props = props
            self.metadata = metadata
            let h = hashes ?? (Data(Insecure.MD5.hash(data: data)).base64EncodedString(), CRC32C.base64(CRC32C.checksum(data)))
            md5 = h.md5
            crc32c = h.crc32c
        }
    }

    struct Session {
        var name: String
        var props: [String: String]
        var metadata: [String: String]
        var query: [String: String]
        private(set) var data = Data()
        /// The hashes of `data`, taken as its bytes come (Cloud Storage answers a session's last
        /// request without reading the object again).
        private var md5 = Insecure.MD5()
        private var crc = CRC32C()
        var finished: [String: Any]?

        init(name: String, props: [String: String], metadata: [String: String], query: [String: String]) {
            self.name = name
            self.props = props
            self.metadata = metadata
            self.query = query
        }

        mutating func append(_ bytes: Data) {
            guard !bytes.isEmpty else { return }
            md5.update(data: bytes)
            crc.update(bytes)
            // A session's first bytes are the body itself, shared, not copied (uploads of GiBs).
            if data.isEmpty { data = bytes } else { data.append(bytes) }
        }

        var hashes: (md5: String, crc32c: String) {
            (Data(md5.finalize()).base64EncodedString(), CRC32C.base64(crc.value))
        }
    }

    public struct Recorded: Sendable {
        public var method: String
        public var uri: String
        public var headers: [String: String]
        public var bodyBytes: Int
        /// The first 64 KiB of the body.
        public var body: Data
    }

    public static let writableProps = ["cacheControl", "contentDisposition", "contentEncoding", "contentLanguage", "contentType"]

    public let bucket: String
    public private(set) var port = 0
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    var channel: Channel?
    let lock = NSLock()

    var objects: [String: Object] = [:]
    /// Replaced and deleted generations, with their `timeDeleted` (`versioning` on only).
    var noncurrent: [String: [(object: Object, deleted: Date)]] = [:]
    /// Object versioning (`versioning.enabled`), off by default as for a new bucket.
    public var versioning = false
    /// A soft-delete policy's `retentionDurationSeconds`, reported by `buckets.get` only.
    public var softDeleteRetention: Int64?
    var sessions: [String: Session] = [:]
    var nextGeneration: Int64 = 1_700_000_000_000_000
    var requests: [Recorded] = []

    // Fault injection and auth (set through `configure`).
    /// The next N API requests answer 503.
    public var failNext = 0
    /// Every API request answers this status (e.g. 401).
    public var alwaysStatus: Int?
    /// API requests need `Authorization: Bearer <token from /token, unexpired>`.
    public var requireToken = false
    public var tokenLifetime = 3600
    public var tokenCalls = 0
    /// Checks the JWT assertion (signature etc.); nil accepts any well-formed one.
    public var verifyAssertion: (@Sendable (String) -> Bool)?
    var validTokens: [String: Date] = [:]
    /// Forgets every issued token (as if revoked): the next API request answers 401.
    public func revokeTokens() { configure { $0.validTokens = [:] } }
    /// The next resumable chunk PUT that has received more than this many body bytes persists what came
    /// (rounded down to 256 KiB) and the connection is closed without an answer.
    public var dropUploadAfterBytes: Int?
    public var dropsDone = 0
    /// The next resumable PUT that has received more than this many body bytes persists what came
    /// (rounded down to 256 KiB), then stops reading: the connection stays open, silent.
    public var stallUploadAfterBytes: Int?
    public var stallsDone = 0
    /// Body bytes that reached the server in resumable PUTs, dropped ones included.
    public var uploadBytesReceived = 0
    /// A slow link for uploads: the server reads a PUT's body at this many bytes a second (the
    /// client's bytes move, slowly, and the whole body takes at least its size over this pace).
    public var uploadPace: Int?
    /// The next N finished uploads store their data with the first byte flipped (a corruption in
    /// transit that the answer's checksums then show).
    public var corruptNextUploads = 0
    /// A session asked what it holds (`Content-Range: bytes */N`) finishes the object with the
    /// bytes it holds, as fake-gcs-server 1.54.0 does (the documented answer is a 308): worse
    /// than Cloud Storage, for the client's check of what it was told is finished.
    public var finishWhenAsked = false
    /// How the next `times` media downloads misbehave (docs/SEMANTICS.md §5 faults).
    public typealias MediaFault = TestMediaFault
    public var mediaFault: MediaFault?
    public var mediaFaultTimes = 0
    /// How the next `rangeAnswerTimes` ranged downloads are answered instead of a 206.
    public enum RangeAnswer: Sendable {
        /// 200 with the whole object (HTTP lets a server, or a front, ignore a Range header).
        case wholeObject
        /// 200 with the range's bytes and its Content-Range (storage-testbench's injected faults).
        case rangeUnder200
    }
    public var rangeAnswer: RangeAnswer?
    public var rangeAnswerTimes = 0
    /// The next request with this method is carried out, then the connection closes with no answer.
    public var loseAnswerTo: String?
    /// The next N API requests answer 429 with this Retry-After.
    public var retryAfterNext = 0
    public var retryAfterValue = "1"
    /// Rewrites take this many calls (the first ones answer `done: false` with a rewriteToken).
    public var rewriteRounds = 1

    /// A bucket with a hierarchical namespace (GCSTestServer+Folders.swift): folders of their own,
    /// made by uploads under them and kept when emptied; object names ending in "/" refused.
    public var hierarchical = false
    /// objects.move is answered (on either flavour); off: its route is unknown (404), as on a
    /// server without it.
    public var moves = true
    /// The folders (hierarchical only), by name ending in "/".
    var folders: [String: Folder] = [:]
    /// Folder renames, pending and done, by operation id.
    var operations: [String: PendingRename] = [:]
    var nextOperation = 0
    /// A rename's operation is done at its Nth `operations.get` (1: the first poll says done; 0:
    /// the rename's own answer says done).
    public var renamePolls = 1
    /// How the next folder rename ends instead (then cleared).
    public var nextRenameFault: RenameFault?
    /// The status a non-empty folder's delete is answered (the reference does not say; 409 here).
    public var notEmptyStatus = 409
    /// The next N `operations.get` are carried out, then the connection closes with no answer.
    public var losePollAnswers = 0
    /// The next N `operations.get` answer 503 without looking at the operation.
    public var failPolls = 0

    /// TCP connections accepted so far (TLS handshakes begun, when serving TLS).
    public var connectionsAccepted = 0
    /// Serving https (a TLS server context given to `start`).
    public private(set) var tls = false

    public init(bucket: String) { self.bucket = bucket }

    /// `tls`: serve https with this context (certificate and key) instead of plain HTTP. `port`: 0
    /// takes a free one (`port` then says which).
    public static func start(bucket: String = "test-bucket", port: Int = 0, tls: NIOSSLContext? = nil,
                             hierarchical: Bool = false) async throws -> GCSTestServer {
        let s = GCSTestServer(bucket: bucket)
        s.hierarchical = hierarchical
        s.tls = tls != nil
        let bootstrap = ServerBootstrap(group: s.group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { ch in
                s.configure { $0.connectionsAccepted += 1 }
                let secured: EventLoopFuture<Void> = tls.map { ctx in
                    ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: ctx)) }
                } ?? ch.eventLoop.makeSucceededVoidFuture()
                return secured.flatMap { ch.pipeline.configureHTTPServerPipeline(withErrorHandling: true) }.flatMap {
                    ch.pipeline.addHandler(GCSTestHandler(server: s))
                }
            }
        let ch = try await bootstrap.bind(host: "127.0.0.1", port: port).get()
        s.channel = ch
        s.port = ch.localAddress?.port ?? 0
        return s
    }

    public func stop() async throws {
        try await channel?.close()
        try await group.shutdownGracefully()
    }

    public var endpoint: URL { URL(string: "\(tls ? "https" : "http")://127.0.0.1:\(port)")! }

    public func configure(_ f: (GCSTestServer) -> Void) {
        lock.lock(); defer { lock.unlock() }
        f(self)
    }

    public func read<T>(_ f: (GCSTestServer) -> T) -> T {
        lock.lock(); defer { lock.unlock() }
        return f(self)
    }

    public var recorded: [Recorded] { read { $0.requests } }
    public func clearRecorded() { configure { $0.requests = [] } }
    public func object(_ name: String) -> Object? { read { $0.objects[name] } }
    public var objectNames: [String] { read { $0.objects.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } } }

}
