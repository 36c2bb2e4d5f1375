import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import StorageModel
import TestSupport

/// An in-process Cloud Storage JSON API server on 127.0.0.1 (port 0) for tests: one bucket of
/// in-memory objects, following the documented API (list pagination over items and prefixes,
/// PATCH merge with null deletion, generation / metageneration preconditions → 412, multipart and
/// resumable uploads, Range downloads, rewrite with rewriteToken rounds, delete), plus fault
/// injection and an OAuth2 token endpoint at `/token`.
///
/// Object versioning as the documentation describes it, when `versioning` is on (`configure`):
/// a replaced or deleted generation stays, noncurrent, with its `timeDeleted`; `objects.list`
/// with `versions=true` lists every generation (by name, then generation; prefixes of any
/// generation); `generation=` reads and gets a kept one, `sourceGeneration=` rewrites from it, and
/// preconditions are checked against the live generation. `buckets.get` answers `versioning`
/// and, when `softDeleteRetention` is set, `softDeletePolicy`.
final class GCSTestServer: @unchecked Sendable {
    struct Object {
        var name: String
        var data: Data
        var generation: Int64
        var metageneration: Int64
        var timeCreated: Date
        var updated: Date
        /// cacheControl, contentDisposition, contentEncoding, contentLanguage, contentType.
        var props: [String: String]
        var metadata: [String: String]
    }

    struct Session {
        var name: String
        var props: [String: String]
        var metadata: [String: String]
        var query: [String: String]
        var data = Data()
        var finished: [String: Any]?
    }

    struct Recorded: Sendable {
        var method: String
        var uri: String
        var headers: [String: String]
        var bodyBytes: Int
        /// The first 64 KiB of the body.
        var body: Data
    }

    static let writableProps = ["cacheControl", "contentDisposition", "contentEncoding", "contentLanguage", "contentType"]

    let bucket: String
    private(set) var port = 0
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private var channel: Channel?
    private let lock = NSLock()

    private var objects: [String: Object] = [:]
    /// Replaced and deleted generations, with their `timeDeleted` (`versioning` on only).
    private var noncurrent: [String: [(object: Object, deleted: Date)]] = [:]
    /// Object versioning (`versioning.enabled`), off by default as for a new bucket.
    var versioning = false
    /// A soft-delete policy's `retentionDurationSeconds`, reported by `buckets.get` only.
    var softDeleteRetention: Int64?
    private var sessions: [String: Session] = [:]
    private var nextGeneration: Int64 = 1_700_000_000_000_000
    private var requests: [Recorded] = []

    // Fault injection and auth (set through `configure`).
    /// The next N API requests answer 503.
    var failNext = 0
    /// Every API request answers this status (e.g. 401).
    var alwaysStatus: Int?
    /// API requests need `Authorization: Bearer <token from /token, unexpired>`.
    var requireToken = false
    var tokenLifetime = 3600
    var tokenCalls = 0
    /// Checks the JWT assertion (signature etc.); nil accepts any well-formed one.
    var verifyAssertion: (@Sendable (String) -> Bool)?
    private var validTokens: [String: Date] = [:]
    /// Forgets every issued token (as if revoked): the next API request answers 401.
    func revokeTokens() { configure { $0.validTokens = [:] } }
    /// The next resumable chunk PUT that has received more than this many body bytes persists what came
    /// (rounded down to 256 KiB) and the connection is closed without an answer.
    var dropUploadAfterBytes: Int?
    var dropsDone = 0
    /// The next resumable PUT that has received more than this many body bytes persists what came
    /// (rounded down to 256 KiB), then stops reading: the connection stays open, silent.
    var stallUploadAfterBytes: Int?
    var stallsDone = 0
    /// Body bytes that reached the server in resumable PUTs, dropped ones included.
    var uploadBytesReceived = 0
    /// A slow link for uploads: after each piece of a PUT's body, the server stops reading for
    /// this long (the client's bytes move, slowly).
    var uploadReadPause: Duration?
    /// The next N finished uploads store their data with the first byte flipped (a corruption in
    /// transit that the answer's checksums then show).
    var corruptNextUploads = 0
    /// A session asked what it holds (`Content-Range: bytes */N`) finishes the object with the
    /// bytes it holds, as fake-gcs-server 1.54.0 does (the documented answer is a 308): worse
    /// than Cloud Storage, for the client's check of what it was told is finished.
    var finishWhenAsked = false
    /// How the next `times` media downloads misbehave (docs/SEMANTICS.md §5 faults).
    enum MediaFault: Sendable {
        /// Headers, then nothing (the socket stays open until the client gives up).
        case stallAfterHeaders
        /// Headers without Content-Length (close-delimited, HTTP/1.0 framing), `keep` bytes, clean close.
        case truncateUnframed(keep: Int)
        /// The whole body, `piece` bytes at a time, one piece every `every` (a slow link).
        case trickle(piece: Int, every: Duration)
    }
    var mediaFault: MediaFault?
    var mediaFaultTimes = 0
    /// The next request with this method is carried out, then the connection closes with no answer.
    var loseAnswerTo: String?
    /// The next N API requests answer 429 with this Retry-After.
    var retryAfterNext = 0
    var retryAfterValue = "1"
    /// Rewrites take this many calls (the first ones answer `done: false` with a rewriteToken).
    var rewriteRounds = 1

    /// TCP connections accepted so far (TLS handshakes begun, when serving TLS).
    var connectionsAccepted = 0
    /// Serving https (a TLS server context given to `start`).
    private(set) var tls = false

    init(bucket: String) { self.bucket = bucket }

    /// `tls`: serve https with this context (certificate and key) instead of plain HTTP.
    static func start(bucket: String = "test-bucket", tls: NIOSSLContext? = nil) async throws -> GCSTestServer {
        let s = GCSTestServer(bucket: bucket)
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
        let ch = try await bootstrap.bind(host: "127.0.0.1", port: 0).get()
        s.channel = ch
        s.port = ch.localAddress?.port ?? 0
        return s
    }

    func stop() async throws {
        try await channel?.close()
        try await group.shutdownGracefully()
    }

    var endpoint: URL { URL(string: "\(tls ? "https" : "http")://127.0.0.1:\(port)")! }

    func configure(_ f: (GCSTestServer) -> Void) {
        lock.lock(); defer { lock.unlock() }
        f(self)
    }

    func read<T>(_ f: (GCSTestServer) -> T) -> T {
        lock.lock(); defer { lock.unlock() }
        return f(self)
    }

    var recorded: [Recorded] { read { $0.requests } }
    func clearRecorded() { configure { $0.requests = [] } }
    func object(_ name: String) -> Object? { read { $0.objects[name] } }
    var objectNames: [String] { read { $0.objects.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } } }

    // MARK: helpers

    struct Response {
        var status: Int
        var headers: [(String, String)] = []
        var body = Data()

        static func json(_ status: Int, _ o: Any) -> Response {
            let d = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data()
            return Response(status: status, headers: [("Content-Type", "application/json; charset=UTF-8")], body: d)
        }

        static func error(_ status: Int, _ message: String) -> Response {
            json(status, ["error": ["code": status, "message": message, "errors": [["message": message]]]])
        }
    }

    private static func parseQuery(_ q: Substring?) -> [String: String] {
        var out: [String: String] = [:]
        for part in (q ?? "").split(separator: "&") {
            let kv = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let k = String(kv[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(kv[0])
            let v = kv.count > 1 ? (String(kv[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "") : ""
            out[k] = v
        }
        return out
    }

    private func newGeneration() -> Int64 {
        nextGeneration += 1
        return nextGeneration
    }

    private func resource(_ o: Object, deleted: Date? = nil) -> [String: Any] {
        var r: [String: Any] = [
            "kind": "storage#object", "id": "\(bucket)/\(o.name)/\(o.generation)", "bucket": bucket, "name": o.name,
            "generation": String(o.generation), "metageneration": String(o.metageneration),
            "size": String(o.data.count), "timeCreated": RFC3339.format(o.timeCreated), "updated": RFC3339.format(o.updated),
            "md5Hash": Data(Insecure.MD5.hash(data: o.data)).base64EncodedString(),
            "crc32c": CRC32C.base64(CRC32C.checksum(o.data)),
        ]
        for (k, v) in o.props { r[k] = v }
        if !o.metadata.isEmpty { r["metadata"] = o.metadata }
        if let deleted { r["timeDeleted"] = RFC3339.format(deleted) }
        return r
    }

    /// The live object stops being live now: kept as noncurrent when versioning is on.
    private func retire(_ name: String) {
        guard let old = objects.removeValue(forKey: name) else { return }
        if versioning { noncurrent[name, default: []].append((old, Date())) }
    }

    /// The live object (no `generation` parameter), or that generation, live or kept.
    private func object(_ name: String, _ q: [String: String], key: String = "generation") -> Object? {
        guard let g = q[key].map({ Int64($0) ?? -1 }) else { return objects[name] }
        if let o = objects[name], o.generation == g { return o }
        return noncurrent[name]?.first { $0.object.generation == g }?.object
    }

    /// The documented precondition parameters against the live object.
    private func preconditionsHold(_ q: [String: String], _ cur: Object?) -> Bool {
        if let g = q["ifGenerationMatch"].flatMap({ Int64($0) }) {
            if g == 0 { if cur != nil { return false } } else if cur?.generation != g { return false }
        }
        if let g = q["ifGenerationNotMatch"].flatMap({ Int64($0) }), let c = cur, c.generation == g { return false }
        if let m = q["ifMetagenerationMatch"].flatMap({ Int64($0) }), cur?.metageneration != m { return false }
        if let m = q["ifMetagenerationNotMatch"].flatMap({ Int64($0) }), let c = cur, c.metageneration == m { return false }
        return true
    }

    private func store(name: String, data: Data, props: [String: String], metadata: [String: String]) -> Object {
        var data = data
        if corruptNextUploads > 0, !data.isEmpty {
            corruptNextUploads -= 1
            data[data.startIndex] ^= 0xFF
        }
        let now = Date()
        let o = Object(name: name, data: data, generation: newGeneration(), metageneration: 1, timeCreated: now,
                       updated: now, props: props, metadata: metadata)
        retire(name)
        objects[name] = o
        return o
    }

    private static func splitResource(_ j: [String: Any]) -> ([String: String], [String: String]) {
        var props: [String: String] = [:]
        for k in writableProps { if let v = j[k] as? String { props[k] = v } }
        var meta: [String: String] = [:]
        for (k, v) in (j["metadata"] as? [String: Any]) ?? [:] { if let s = v as? String { meta[k] = s } }
        return (props, meta)
    }

    // MARK: fault hooks (called on the event loop, mid-body)

    /// Whether to drop the connection now, having received `received` body bytes of this request.
    enum Fault { case lose, media(MediaFault) }

    /// The fault to apply to this answer, if any (counts it down).
    func takeFault(method: String, uri: String, status: Int) -> Fault? {
        lock.lock(); defer { lock.unlock() }
        if let m = loseAnswerTo, m == method {
            loseAnswerTo = nil
            return .lose
        }
        if uri.contains("alt=media"), (200..<300).contains(status), mediaFaultTimes > 0, let f = mediaFault {
            mediaFaultTimes -= 1
            return .media(f)
        }
        return nil
    }

    enum BodyFault { case drop, stall }

    func bodyFault(method: String, uri: String, headers: HTTPHeaders, received: Data, new: Int) -> BodyFault? {
        lock.lock(); defer { lock.unlock() }
        if method == "PUT", uri.contains("upload_id=") { uploadBytesReceived += new }
        if method == "PUT", let limit = stallUploadAfterBytes, received.count > limit, persistPart(uri, headers, received) {
            stallUploadAfterBytes = nil
            stallsDone += 1
            return .stall
        }
        if method == "PUT", let limit = dropUploadAfterBytes, received.count > limit, persistPart(uri, headers, received) {
            dropUploadAfterBytes = nil
            dropsDone += 1
            return .drop
        }
        return nil
    }

    /// Keeps the 256 KiB multiples of a session's PUT received so far, as a server does when the
    /// request breaks; false when this is not a PUT that continues its session.
    private func persistPart(_ uri: String, _ headers: HTTPHeaders, _ received: Data) -> Bool {
        let q = Self.parseQuery(uri.split(separator: "?", maxSplits: 1).dropFirst().first)
        guard let id = q["upload_id"], var s = sessions[id],
              let cr = headers.first(name: "Content-Range"), let start = Self.rangeStart(cr), start == Int64(s.data.count)
        else { return false }
        let keep = received.count / (256 << 10) * (256 << 10)
        s.data.append(received.prefix(keep))
        sessions[id] = s
        return true
    }

    private static func rangeStart(_ contentRange: String) -> Int64? {
        // "bytes a-b/N"
        let r = contentRange.replacingOccurrences(of: "bytes ", with: "")
        guard let dash = r.firstIndex(of: "-") else { return nil }
        return Int64(r[..<dash])
    }

    // MARK: routing

    func handle(method: String, uri: String, headers: HTTPHeaders, body: Data) -> Response {
        lock.lock(); defer { lock.unlock() }
        var hd: [String: String] = [:]
        for (k, v) in headers { hd[k.lowercased()] = v }
        requests.append(Recorded(method: method, uri: uri, headers: hd, bodyBytes: body.count, body: body.prefix(64 << 10)))

        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let rawPath = DotSegments.remove(String(parts[0]))
        let q = Self.parseQuery(parts.count > 1 ? parts[1] : nil)
        let segs = rawPath.split(separator: "/", omittingEmptySubsequences: false).map { String($0).removingPercentEncoding ?? String($0) }

        if rawPath == "/token", method == "POST" { return token(body) }
        if rawPath == "/computeMetadata/v1/instance/service-accounts/default/token", method == "GET" {
            guard hd["metadata-flavor"] == "Google" else { return .error(403, "Missing Metadata-Flavor:Google header") }
            tokenCalls += 1
            let t = "test-access-token-\(tokenCalls)"
            validTokens[t] = Date().addingTimeInterval(TimeInterval(tokenLifetime))
            return .json(200, ["access_token": t, "expires_in": tokenLifetime, "token_type": "Bearer"])
        }

        if let s = alwaysStatus { return .error(s, s == 401 ? "Invalid Credentials" : "injected HTTP \(s)") }
        if retryAfterNext > 0 {
            retryAfterNext -= 1
            var r = Response.error(429, "injected: slow down")
            r.headers.append(("Retry-After", retryAfterValue))
            return r
        }
        if failNext > 0 {
            failNext -= 1
            return .error(503, "injected: backend unavailable")
        }
        if requireToken {
            let auth = hd["authorization"] ?? ""
            let tok = auth.hasPrefix("Bearer ") ? String(auth.dropFirst(7)) : ""
            guard let exp = validTokens[tok], exp > Date() else { return .error(401, "Invalid Credentials") }
        }

        if segs.count == 5, segs[1] == "storage", segs[2] == "v1", segs[3] == "b", method == "GET" {
            guard segs[4] == bucket else { return .error(404, "The specified bucket does not exist.") }
            var r: [String: Any] = ["kind": "storage#bucket", "name": bucket, "versioning": ["enabled": versioning]]
            if let d = softDeleteRetention { r["softDeletePolicy"] = ["retentionDurationSeconds": String(d)] }
            return .json(200, r)
        }
        // ["", "storage", "v1", "b", B, "o", ...] and ["", "upload", "storage", "v1", "b", B, "o"]
        if segs.count >= 6, segs[1] == "storage", segs[2] == "v1", segs[3] == "b", segs[5] == "o" {
            guard segs[4] == bucket else { return .error(404, "The specified bucket does not exist.") }
            switch (method, segs.count) {
            case ("GET", 6): return q["versions"] == "true" ? listVersions(q) : list(q)
            case ("GET", 7): return q["alt"] == "media" ? media(segs[6], q, hd) : get(segs[6], q)
            case ("PATCH", 7): return patch(segs[6], q, body)
            case ("DELETE", 7): return delete(segs[6], q)
            case ("POST", 12) where segs[7] == "rewriteTo" && segs[8] == "b" && segs[10] == "o":
                guard segs[9] == bucket else { return .error(404, "no such destination bucket") }
                return rewrite(segs[6], to: segs[11], q, body)
            default: return .error(404, "no route for \(method) \(rawPath)")
            }
        }
        if segs.count == 7, segs[1] == "upload", segs[2] == "storage", segs[3] == "v1", segs[4] == "b", segs[6] == "o" {
            guard segs[5] == bucket else { return .error(404, "The specified bucket does not exist.") }
            if method == "POST", q["uploadType"] == "multipart" { return multipart(q, hd, body) }
            if method == "POST", q["uploadType"] == "resumable", q["upload_id"] == nil { return startResumable(q, hd, body) }
            if method == "PUT", let id = q["upload_id"] { return chunk(id, hd, body) }
            return .error(400, "unsupported upload")
        }
        return .error(404, "no route for \(method) \(rawPath)")
    }

    private func token(_ body: Data) -> Response {
        let form = Self.parseQuery(Substring(String(decoding: body, as: UTF8.self)))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"] else {
            return .json(400, ["error": "unsupported_grant_type", "error_description": "expected the jwt-bearer grant"])
        }
        let p = assertion.split(separator: ".", omittingEmptySubsequences: false)
        func b64(_ s: Substring) -> Data? {
            var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while t.count % 4 != 0 { t += "=" }
            return Data(base64Encoded: t)
        }
        guard p.count == 3, let h = b64(p[0]).flatMap({ try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }),
              let c = b64(p[1]).flatMap({ try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }),
              h["alg"] as? String == "RS256", c["iss"] is String, (c["aud"] as? String)?.hasSuffix("/token") == true,
              c["scope"] is String, let exp = c["exp"] as? Int, exp > Int(Date().timeIntervalSince1970),
              verifyAssertion?(assertion) ?? true
        else { return .json(400, ["error": "invalid_grant", "error_description": "Invalid JWT Signature."]) }
        tokenCalls += 1
        let t = "test-access-token-\(tokenCalls)"
        validTokens[t] = Date().addingTimeInterval(TimeInterval(tokenLifetime))
        return .json(200, ["access_token": t, "expires_in": tokenLifetime, "token_type": "Bearer"])
    }

    private func list(_ q: [String: String]) -> Response {
        let prefix = q["prefix"] ?? ""
        let delimiter = q["delimiter"].flatMap { $0.isEmpty ? nil : $0 }
        let maxResults = min(max(Int(q["maxResults"] ?? "") ?? 1000, 1), 1000)
        // The token names the last entry returned: "P<prefix>" or "I<item name>".
        let token = q["pageToken"].flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) }
        let after = token.map { String($0.dropFirst()) }
        let afterPrefix = token?.hasPrefix("P") == true
        // startOffset (inclusive) and endOffset (exclusive) bound the objects, before they roll
        // up into prefixes; a prefix before startOffset is left out (as fake-gcs-server does).
        let start = q["startOffset"], end = q["endOffset"]
        let names = objects.keys.filter { n in
            n.hasPrefix(prefix) && start.map { s in !n.utf8.lexicographicallyPrecedes(s.utf8) } ?? true
                && end.map { e in n.utf8.lexicographicallyPrecedes(e.utf8) } ?? true
        }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var items: [[String: Any]] = []
        var prefixes: [String] = []
        var last: String?
        var more = false
        for n in names {
            if let after {
                if !after.utf8.lexicographicallyPrecedes(n.utf8) { continue }  // n <= after
                if afterPrefix, n.hasPrefix(after) { continue }  // inside a returned prefix
            }
            var entryPrefix: String?
            if let d = delimiter, let r = n.dropFirst(prefix.count).range(of: d) {
                entryPrefix = String(n[..<r.upperBound])
            }
            if let p = entryPrefix, prefixes.last == p { continue }
            if let p = entryPrefix, let start, p.utf8.lexicographicallyPrecedes(start.utf8) { continue }
            if items.count + prefixes.count == maxResults { more = true; break }
            if let p = entryPrefix {
                prefixes.append(p)
                last = "P" + p
                // includeTrailingDelimiter: an object named exactly like the prefix (it sorts
                // first under it) comes as an item too.
                if q["includeTrailingDelimiter"] == "true", n == p { items.append(resource(objects[n]!)) }
            } else {
                items.append(resource(objects[n]!))
                last = "I" + n
            }
        }
        var r: [String: Any] = ["kind": "storage#objects"]
        if !items.isEmpty { r["items"] = items }
        if !prefixes.isEmpty { r["prefixes"] = prefixes }
        if more, let last { r["nextPageToken"] = Data(last.utf8).base64EncodedString() }
        return .json(200, r)
    }

    /// `objects.list` with `versions=true`: every generation, by name then generation, counted
    /// one entry each with the prefixes; the token names the last entry ("P<prefix>" or
    /// "V<generation>:<name>").
    private func listVersions(_ q: [String: String]) -> Response {
        let prefix = q["prefix"] ?? ""
        let delimiter = q["delimiter"].flatMap { $0.isEmpty ? nil : $0 }
        let maxResults = min(max(Int(q["maxResults"] ?? "") ?? 1000, 1), 1000)
        var entries: [(key: String, generation: Int64?, item: [String: Any]?)] = []
        let names = Set(objects.keys).union(noncurrent.keys).filter { $0.hasPrefix(prefix) }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for n in names {
            if let d = delimiter, let r = n.dropFirst(prefix.count).range(of: d) {
                let p = String(n[..<r.upperBound])
                if entries.last?.key != p || entries.last?.generation != nil { entries.append((p, nil, nil)) }
                continue
            }
            var versions = (noncurrent[n] ?? []).map { ($0.object.generation, resource($0.object, deleted: $0.deleted)) }
            if let o = objects[n] { versions.append((o.generation, resource(o))) }
            for (g, r) in versions.sorted(by: { $0.0 < $1.0 }) { entries.append((key: n, generation: Optional(g), item: Optional(r))) }
        }
        var start = 0
        if let t = q["pageToken"].flatMap({ Data(base64Encoded: $0) }).map({ String(decoding: $0, as: UTF8.self) }) {
            let afterPrefix = t.hasPrefix("P")
            var key = String(t.dropFirst())
            var generation = Int64.min
            if !afterPrefix, let colon = t.firstIndex(of: ":") {
                key = String(t[t.index(after: colon)...])
                generation = Int64(t[t.index(after: t.startIndex)..<colon]) ?? Int64.min
            }
            start = entries.firstIndex { e in
                if afterPrefix { return e.key.utf8.lexicographicallyPrecedes(key.utf8) == false && !e.key.hasPrefix(key) }
                if e.key == key { return (e.generation ?? Int64.min) > generation }
                return key.utf8.lexicographicallyPrecedes(e.key.utf8)
            } ?? entries.count
        }
        let end = min(entries.count, start + maxResults)
        var items: [[String: Any]] = []
        var prefixes: [String] = []
        for e in entries[start..<end] {
            if let item = e.item { items.append(item) } else { prefixes.append(e.key) }
        }
        var r: [String: Any] = ["kind": "storage#objects"]
        if !items.isEmpty { r["items"] = items }
        if !prefixes.isEmpty { r["prefixes"] = prefixes }
        if end < entries.count {
            let last = entries[end - 1]
            let text = last.generation.map { "V\($0):\(last.key)" } ?? "P\(last.key)"
            r["nextPageToken"] = Data(text.utf8).base64EncodedString()
        }
        return .json(200, r)
    }

    private func get(_ name: String, _ q: [String: String]) -> Response {
        guard let o = object(name, q) else {
            return .error(404, "No such object: \(bucket)/\(name)")
        }
        guard preconditionsHold(q, objects[name]) else { return .error(412, "Precondition Failed") }
        return .json(200, resource(o))
    }

    private func media(_ name: String, _ q: [String: String], _ hd: [String: String]) -> Response {
        guard let o = object(name, q) else {
            return .error(404, "No such object: \(bucket)/\(name)")
        }
        let size = o.data.count
        var headers = [("Content-Type", o.props["contentType"] ?? "application/octet-stream"),
                       ("x-goog-generation", String(o.generation)),
                       // As Cloud Storage does: the whole object's size and checksums.
                       ("x-goog-stored-content-length", String(o.data.count)),
                       ("x-goog-hash", "crc32c=\(CRC32C.base64(CRC32C.checksum(o.data)))"),
                       ("x-goog-hash", "md5=\(Data(Insecure.MD5.hash(data: o.data)).base64EncodedString())")]
        guard let range = hd["range"] else { return Response(status: 200, headers: headers, body: o.data) }
        // bytes=a-b | bytes=a-
        let spec = range.replacingOccurrences(of: "bytes=", with: "").split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2, let a = Int(spec[0]) else { return Response(status: 200, headers: headers, body: o.data) }
        if a >= size {
            return Response(status: 416, headers: [("Content-Range", "bytes */\(size)")],
                            body: Data("The requested range cannot be satisfied.".utf8))
        }
        let b = min(Int(spec[1]) ?? (size - 1), size - 1)
        headers.append(("Content-Range", "bytes \(a)-\(b)/\(size)"))
        return Response(status: 206, headers: headers, body: o.data.subdata(in: a..<(b + 1)))
    }

    private func patch(_ name: String, _ q: [String: String], _ body: Data) -> Response {
        guard var o = objects[name] else { return .error(404, "No such object: \(bucket)/\(name)") }
        guard preconditionsHold(q, o) else { return .error(412, "Precondition Failed") }
        guard let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            return .error(400, "Invalid JSON payload")
        }
        for k in Self.writableProps {
            switch j[k] {
            case nil: break
            case is NSNull: o.props[k] = nil
            case let s as String: o.props[k] = s
            default: return .error(400, "Invalid value for \(k)")
            }
        }
        switch j["metadata"] {
        case nil: break
        case is NSNull: o.metadata = [:]
        case let m as [String: Any]:
            for (k, v) in m {
                if v is NSNull { o.metadata[k] = nil } else if let s = v as? String { o.metadata[k] = s } else {
                    return .error(400, "Invalid metadata value for \(k)")
                }
            }
        default: return .error(400, "Invalid metadata")
        }
        o.metageneration += 1
        o.updated = Date()
        objects[name] = o
        return .json(200, resource(o))
    }

    private func delete(_ name: String, _ q: [String: String]) -> Response {
        guard let o = objects[name] else { return .error(404, "No such object: \(bucket)/\(name)") }
        guard preconditionsHold(q, o) else { return .error(412, "Precondition Failed") }
        retire(name)
        return Response(status: 204)
    }

    private func rewrite(_ src: String, to dst: String, _ q: [String: String], _ body: Data) -> Response {
        guard let s = object(src, q, key: "sourceGeneration") else {
            return .error(404, "No such object: \(bucket)/\(src)")
        }
        guard preconditionsHold(q, objects[dst]) else { return .error(412, "Precondition Failed") }
        let round = Int(q["rewriteToken"]?.replacingOccurrences(of: "rt-", with: "") ?? "0") ?? 0
        let size = String(s.data.count)
        if round + 1 < rewriteRounds {
            let done = String(s.data.count * (round + 1) / rewriteRounds)
            return .json(200, ["kind": "storage#rewriteResponse", "totalBytesRewritten": done, "objectSize": size,
                               "done": false, "rewriteToken": "rt-\(round + 1)"])
        }
        var props = s.props, meta = s.metadata
        if !body.isEmpty, let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any], !j.isEmpty {
            (props, meta) = Self.splitResource(j)
        }
        let o = store(name: dst, data: s.data, props: props, metadata: meta)
        return .json(200, ["kind": "storage#rewriteResponse", "totalBytesRewritten": size, "objectSize": size,
                           "done": true, "resource": resource(o)])
    }

    private func multipart(_ q: [String: String], _ hd: [String: String], _ body: Data) -> Response {
        guard let ct = hd["content-type"], ct.hasPrefix("multipart/related"),
              let b = ct.components(separatedBy: "boundary=").last?.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        else { return .error(400, "multipart/related with a boundary expected") }
        let parts = Self.multipartParts(body, boundary: b)
        guard parts.count == 2, let j = try? JSONSerialization.jsonObject(with: parts[0]) as? [String: Any],
              let name = (j["name"] as? String) ?? q["name"] else {
            return .error(400, "expected a JSON metadata part with a name and a media part")
        }
        guard preconditionsHold(q, objects[name]) else { return .error(412, "Precondition Failed") }
        let (props, meta) = Self.splitResource(j)
        return .json(200, resource(store(name: name, data: parts[1], props: props, metadata: meta)))
    }

    /// The bodies of `--boundary` parts (headers stripped).
    static func multipartParts(_ body: Data, boundary: String) -> [Data] {
        let delim = Data("--\(boundary)".utf8)
        var out: [Data] = []
        var cursor = body.startIndex
        var starts: [Range<Data.Index>] = []
        while let r = body.range(of: delim, in: cursor..<body.endIndex) {
            starts.append(r)
            cursor = r.upperBound
        }
        for (i, r) in starts.enumerated() where i + 1 < starts.count {
            var part = body.subdata(in: r.upperBound..<starts[i + 1].lowerBound)
            guard let sep = part.range(of: Data("\r\n\r\n".utf8)) else { continue }
            part = part.subdata(in: sep.upperBound..<part.endIndex)
            if part.suffix(2) == Data("\r\n".utf8) { part = part.dropLast(2) }
            out.append(Data(part))
        }
        return out
    }

    private func startResumable(_ q: [String: String], _ hd: [String: String], _ body: Data) -> Response {
        let j = (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:]
        guard let name = (j["name"] as? String) ?? q["name"] else { return .error(400, "no object name") }
        var (props, meta) = Self.splitResource(j)
        if props["contentType"] == nil, let t = hd["x-upload-content-type"] { props["contentType"] = t }
        let id = UUID().uuidString
        sessions[id] = Session(name: name, props: props, metadata: meta, query: q)
        return Response(status: 200, headers: [
            ("Location", "http://127.0.0.1:\(port)/upload/storage/v1/b/\(bucket)/o?uploadType=resumable&upload_id=\(id)"),
        ])
    }

    private func chunk(_ id: String, _ hd: [String: String], _ body: Data) -> Response {
        guard var s = sessions[id] else { return .error(404, "No such upload session") }
        if let done = s.finished { return .json(200, done) }
        guard let cr = hd["content-range"], cr.hasPrefix("bytes ") else { return .error(400, "Content-Range required") }
        let spec = cr.dropFirst(6).split(separator: "/", maxSplits: 1)
        guard spec.count == 2 else { return .error(400, "bad Content-Range \(cr)") }
        let total = Int(spec[1])
        if spec[0] != "*" {
            let ab = spec[0].split(separator: "-")
            guard ab.count == 2, let a = Int(ab[0]), let b = Int(ab[1]), b - a + 1 == body.count else {
                return .error(400, "Content-Range \(cr) does not match the body of \(body.count) bytes")
            }
            guard a <= s.data.count else { return .error(400, "chunk starts at \(a), but only \(s.data.count) bytes are persisted") }
            let skip = s.data.count - a
            if skip < body.count { s.data.append(body.dropFirst(skip)) }
        }
        if let total, s.data.count == total || (spec[0] == "*" && finishWhenAsked) {
            guard preconditionsHold(s.query, objects[s.name]) else {
                sessions[id] = nil
                return .error(412, "Precondition Failed")
            }
            let o = store(name: s.name, data: s.data, props: s.props, metadata: s.metadata)
            s.finished = resource(o)
            sessions[id] = s
            return .json(200, resource(o))
        }
        sessions[id] = s
        var headers: [(String, String)] = []
        if !s.data.isEmpty { headers.append(("Range", "bytes=0-\(s.data.count - 1)")) }
        return Response(status: 308, headers: headers)
    }
}

/// Collects one request (head + body), asks the server, writes the answer. May drop the connection
/// mid-body when the server says so.
final class GCSTestHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: GCSTestServer
    private var head: HTTPRequestHead?
    private var body = Data()
    private var dropped = false

    init(server: GCSTestServer) { self.server = server }

    static func nanos(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// Sends `body` from `at`, a piece at a time, `every` apart, then the end of the answer.
    static func trickle(_ body: Data, from at: Int, piece: Int, every: Duration, channel: any Channel) {
        guard at < body.count else {
            channel.writeAndFlush(HTTPServerResponsePart.end(nil), promise: nil)
            return
        }
        let lo = body.startIndex + at, hi = body.startIndex + min(at + piece, body.count)
        channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: body[lo..<hi]))), promise: nil)
        channel.eventLoop.scheduleTask(in: .nanoseconds(nanos(every))) {
            trickle(body, from: at + piece, piece: piece, every: every, channel: channel)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if dropped { return }
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = Data()
        case .body(var buf):
            let new = buf.readableBytes
            body.append(contentsOf: buf.readBytes(length: buf.readableBytes) ?? [])
            guard let h = head else { return }
            switch server.bodyFault(method: h.method.rawValue, uri: h.uri, headers: h.headers, received: body, new: new) {
            case .drop?:
                dropped = true
                context.close(promise: nil)
            case .stall?:
                dropped = true  // reads nothing more, answers nothing; the client gives up
                context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
            case nil:
                if h.method == .PUT, let pause = server.read({ $0.uploadReadPause }) {
                    let channel = context.channel
                    // Reads of 64 KiB, so the pace is 64 KiB per pause whatever NIO would adapt to.
                    channel.setOption(ChannelOptions.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 1 << 16))
                        .whenComplete { _ in }
                    channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in
                        channel.eventLoop.scheduleTask(in: .nanoseconds(Self.nanos(pause))) {
                            channel.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in }
                            channel.read()
                        }
                    }
                }
            }
        case .end:
            guard let h = head else { return }
            let r = server.handle(method: h.method.rawValue, uri: h.uri, headers: h.headers, body: body)
            switch server.takeFault(method: h.method.rawValue, uri: h.uri, status: r.status) {
            case .lose?:
                context.close(promise: nil)
                return
            case .media(.stallAfterHeaders)?:
                var headers = HTTPHeaders(r.headers)
                headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
                let head = HTTPResponseHead(version: h.version, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.writeAndFlush(wrapOutboundOut(.head(head)), promise: nil)
                dropped = true  // nothing more, ever
                return
            case .media(.trickle(let piece, let every))?:
                var headers = HTTPHeaders(r.headers)
                headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
                let head = HTTPResponseHead(version: h.version, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.writeAndFlush(wrapOutboundOut(.head(head)), promise: nil)
                Self.trickle(r.body, from: 0, piece: piece, every: every, channel: context.channel)
                return
            case .media(.truncateUnframed(let keep))?:
                var headers = HTTPHeaders(r.headers)
                headers.remove(name: "Content-Length")
                headers.replaceOrAdd(name: "Connection", value: "close")
                let channel = context.channel
                let head = HTTPResponseHead(version: .http1_0, status: HTTPResponseStatus(statusCode: r.status), headers: headers)
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: r.body.prefix(keep))))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
                dropped = true
                return
            case nil:
                break
            }
            var headers = HTTPHeaders(r.headers)
            headers.replaceOrAdd(name: "Content-Length", value: String(r.body.count))
            let keepAlive = h.isKeepAlive
            if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
            let status = HTTPResponseStatus(statusCode: r.status)
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: h.version, status: status, headers: headers))), promise: nil)
            if !r.body.isEmpty {
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: r.body)))), promise: nil)
            }
            if keepAlive {
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            } else {
                let channel = context.channel
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            }
            head = nil
            body = Data()
        }
    }
}
