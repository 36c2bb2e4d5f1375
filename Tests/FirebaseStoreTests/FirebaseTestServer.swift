import Crypto
import Foundation
import GCSTestServerKit
import NIOCore
import NIOHTTP1
import NIOPosix
import StorageModel
import TestSupport

/// An in-process Cloud Storage for Firebase v0 API and Firebase Auth REST API on 127.0.0.1 (port
/// 0), serving the protocol of Tests/FirebaseProtocol/cases.json (played against it by
/// FirebaseProtocolCasesTests, and against Tests/e2e/firebase_server.py by the pytest tier), and
/// never kinder than the service it describes:
///
/// - Storage (`/v0/b/B/o…`): list pages of names only (`prefix` empty or ending in `/`; the
///   delimiter is always `/`; names with empty segments or a trailing `/` never listed), metadata
///   with numbers as strings and download tokens (minted by the first GET of an object that has
///   none, which bumps metageneration and `updated`), PATCH merging custom keys with null deleting,
///   custom metadata within the GCS limits, Range downloads (suffix ranges too) with
///   `x-goog-generation` and `x-goog-hash`, multipart, media and resumable uploads (offsets
///   checked; rules checked at finalize with the Authorization of the start, and in the
///   production flavour at the start too, as the Python server does; a download token
///   minted; tokens in the reserved key `firebaseStorageDownloadTokens` moved into the download
///   tokens), delete, no preconditions (ignored), no copy.
/// - Auth (`/identitytoolkit.googleapis.com/v1/accounts:…`, `/securetoken.googleapis.com/v1/token`,
///   emulator-style addressing): users with passwords, custom-token and anonymous sign-in, ID
///   tokens whose lifetime is configurable down to seconds (expired → 401 on Storage), refresh
///   tokens that can be revoked, users that can be disabled.
/// - Security Rules (`TestRules`): a denial is 403 whether or not the object exists; no ruleset
///   loaded denies everything; listing under rules_version 1 is refused.
/// - Flavours: `.emulator` has the Firebase emulator's quirks the document names (`maxResults`
///   counts items only and every page carries every prefix, the page token is the next item's
///   name (items in JavaScript's UTF-16 order), 404 bodies are plain text, crc32c is decimal, a
///   range past the end gets the whole object); `.production` counts prefixes and items together,
///   leaves empty arrays out of list pages,
///   has opaque page tokens and JSON errors, and answers a range past the end with 416.
/// - Faults: 503s, 402s, 401s, latency on every answer, stalled and cut download bodies, an answer
///   lost after the request was carried out, a slow or failing token endpoint.
final class FirebaseTestServer: @unchecked Sendable {
    enum Flavour: Sendable { case emulator, production }

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
        var downloadTokens: [String]
    }

    struct User {
        var uid: String
        var email: String?
        var password: String?
        var disabled = false
        var provider: String
    }

    struct IDToken {
        var uid: String
        var expires: Date
    }

    struct Session {
        var name: String
        var resource: [String: Any]
        var contentType: String?
        var total: Int?
        var data = Data()
        /// The Authorization header of the start: rules are checked with it at finalize.
        var authorization: String?
        var finished: Response?
    }

    struct Recorded: Sendable {
        var method: String
        var uri: String
        var headers: [String: String]
        var bodyBytes: Int
        /// The first 64 KiB of the body.
        var body: Data
        /// The status answered (0 while not answered).
        var status = 0
        var path: String { String(uri.split(separator: "?", maxSplits: 1).first ?? "") }
        var isStorage: Bool { uri.hasPrefix("/v0/") }
        var isList: Bool { method == "GET" && path.hasSuffix("/o") }
        var isMetadataGet: Bool { method == "GET" && !path.hasSuffix("/o") && !uri.contains("alt=media") && isStorage }
    }

    static let writableProps = ["cacheControl", "contentDisposition", "contentEncoding", "contentLanguage", "contentType"]

    let bucket: String
    let projectId = "bucketfs-test"
    private(set) var port = 0
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private var channel: Channel?
    private let lock = NSLock()

    // Storage state.
    var flavour: Flavour
    /// nil: no ruleset loaded (every Storage request is refused).
    var rules: TestRules?
    private var objects: [String: Object] = [:]
    private var sessions: [String: Session] = [:]
    private var nextGeneration: Int64 = 1_700_000_000_000_000
    private var requests: [Recorded] = []

    // Auth state.
    var users: [String: User] = [:]
    var idTokens: [String: IDToken] = [:]
    var refreshTokens: [String: String] = [:]  // token → uid
    var revokedRefreshTokens: Set<String> = []
    /// Lifetime of the ID tokens issued from now on, in seconds.
    var tokenLifetime = 3600
    /// The clock ID tokens are issued and expire on (a test's `ManualClock` moves both sides' time).
    var tokenClock: BucketClock = .real
    var anonymousSignIn = true
    var refreshCalls = 0
    var signInCalls = 0

    // Faults (set through `configure`).
    /// The next N Storage requests answer 503.
    var failNext = 0
    /// The next N Storage requests answer 402 (quota).
    var quotaNext = 0
    /// Every Storage request answers this status.
    var alwaysStatus: Int?
    /// The next N Storage requests answer 401 whatever their token (as for a token that just expired).
    var unauthorizedNext = 0
    /// Every answer (Storage and Auth) is sent this long after its request came in.
    var latency: TimeAmount = .zero
    /// Answers of the token endpoint are sent this long after the request came in.
    var refreshLatency: TimeAmount = .zero
    /// The next N refresh requests answer 503.
    var refreshFailNext = 0
    /// How the next media downloads misbehave (the writer is shared with the JSON API's test server).
    typealias MediaFault = TestMediaFault
    var mediaFault: MediaFault?
    var mediaFaultTimes = 0
    /// The next request with this method is carried out, then the connection closes with no answer.
    var loseAnswerTo: String?
    /// The next resumable `upload` command that has received more than this many body bytes keeps
    /// what came (rounded down to 256 KiB) and the connection is closed without an answer.
    var dropUploadAfterBytes: Int?
    /// Downloads carry `x-goog-generation` (the emulator's do; production's are not documented).
    var sendsGenerationHeader = true

    // Concurrency seen (metadata GETs answered with latency).
    private var metadataGetsInFlight = 0
    private(set) var maxMetadataGetsInFlight = 0

    init(bucket: String, flavour: Flavour, rules: TestRules?) {
        self.bucket = bucket
        self.flavour = flavour
        self.rules = rules
    }

    static func start(bucket: String = "bucketfs-test.appspot.com", flavour: Flavour = .emulator,
                      rules: TestRules? = .signedIn) async throws -> FirebaseTestServer {
        let s = FirebaseTestServer(bucket: bucket, flavour: flavour, rules: rules)
        let bootstrap = ServerBootstrap(group: s.group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { ch in
                ch.pipeline.configureHTTPServerPipeline(withErrorHandling: true).flatMap {
                    ch.pipeline.addHandler(FirebaseTestHandler(server: s))
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

    var base: URL { URL(string: "http://127.0.0.1:\(port)")! }

    func configure(_ f: (FirebaseTestServer) -> Void) {
        lock.lock(); defer { lock.unlock() }
        f(self)
    }

    func read<T>(_ f: (FirebaseTestServer) -> T) -> T {
        lock.lock(); defer { lock.unlock() }
        return f(self)
    }

    var recorded: [Recorded] { read { $0.requests } }
    func clearRecorded() { configure { $0.requests = []; $0.maxMetadataGetsInFlight = 0 } }
    func object(_ name: String) -> Object? { read { $0.objects[name] } }
    /// Resumable upload sessions started and neither finalized nor cancelled.
    var openSessions: Int { read { $0.sessions.values.filter { $0.finished == nil }.count } }
    var objectNames: [String] { read { $0.objects.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } } }

    // MARK: admin hooks (no rules, no request)

    /// An object written behind the API (as through gs:// by an admin): no download token, unless
    /// its custom metadata carries `firebaseStorageDownloadTokens`.
    @discardableResult
    func seed(_ name: String, _ data: Data, props: [String: String] = [:], metadata: [String: String] = [:]) -> Object {
        read { s in s.store(name: name, data: data, props: props, metadata: metadata, tokens: []) }
    }

    func addUser(email: String, password: String, uid: String? = nil) -> String {
        read { s in
            let id = uid ?? "uid-" + UUID().uuidString.prefix(12).lowercased()
            s.users[id] = User(uid: id, email: email, password: password, provider: "password")
            return id
        }
    }

    func disable(uid: String) { configure { $0.users[uid]?.disabled = true } }
    func deleteUser(uid: String) { configure { $0.users[uid] = nil } }
    /// Every refresh token of `uid` stops working (ID tokens already issued work until they expire).
    func revokeRefreshTokens(uid: String) {
        configure { s in for (t, u) in s.refreshTokens where u == uid { s.revokedRefreshTokens.insert(t) } }
    }
    /// Every ID token issued so far has expired.
    func expireIDTokens() {
        configure { s in for k in s.idTokens.keys { s.idTokens[k]?.expires = Date(timeIntervalSince1970: 0) } }
    }
    /// Every ID token and refresh token issued so far (lock held).
    var issuedSecrets: [String] { Array(idTokens.keys) + Array(refreshTokens.keys) }

    /// An ID token for `uid`, as Auth would issue one (for tests that need one without signing in).
    func issueIDToken(uid: String, provider: String = "custom", lifetime: Int? = nil) -> String {
        read { s in s.mintIDToken(uid: uid, provider: provider, email: nil, lifetime: lifetime) }
    }

    // MARK: shared helpers (lock held)

    struct Response {
        var status: Int
        var headers: [(String, String)] = []
        var body = Data()
        /// Answer after this long (the server's latency).
        var delay: TimeAmount = .zero

        static func json(_ status: Int, _ o: Any) -> Response {
            let d = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data()
            return Response(status: status, headers: [("Content-Type", "application/json; charset=utf-8")], body: d)
        }

        static func error(_ status: Int, _ message: String) -> Response {
            json(status, ["error": ["code": status, "message": message]])
        }

        static func text(_ status: Int, _ text: String) -> Response {
            Response(status: status, headers: [("Content-Type", "text/plain; charset=utf-8")], body: Data(text.utf8))
        }
    }

    static func parseQuery(_ q: Substring?) -> [String: String] {
        var out: [String: String] = [:]
        for part in (q ?? "").split(separator: "&") {
            let kv = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            // The backend reads `+` as a space.
            let k = String(kv[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(kv[0])
            let v = kv.count > 1 ? (String(kv[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "") : ""
            out[k] = v
        }
        return out
    }

    func newGeneration() -> Int64 {
        nextGeneration += 1
        return nextGeneration
    }

    @discardableResult
    func store(name: String, data: Data, props: [String: String], metadata: [String: String], tokens: [String]) -> Object {
        let now = Date()
        var p = props
        if p["contentType"] == nil { p["contentType"] = "application/octet-stream" }
        let o = Object(name: name, data: data, generation: newGeneration(), metageneration: 1, timeCreated: now,
                       updated: now, props: p, metadata: metadata, downloadTokens: tokens)
        objects[name] = o
        return o
    }

    func record(_ method: String, _ uri: String, _ headers: HTTPHeaders, _ body: Data) {
        var hd: [String: String] = [:]
        for (k, v) in headers { hd[k.lowercased()] = hd[k.lowercased()].map { $0 + ", " + v } ?? v }
        requests.append(Recorded(method: method, uri: uri, headers: hd, bodyBytes: body.count, body: body.prefix(64 << 10)))
    }

    // MARK: routing

    func handle(method: String, uri: String, headers: HTTPHeaders, body: Data) -> Response {
        lock.lock(); defer { lock.unlock() }
        record(method, uri, headers, body)
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let rawPath = DotSegments.remove(String(parts[0]))
        let q = Self.parseQuery(parts.count > 1 ? parts[1] : nil)
        var r: Response
        if rawPath.hasPrefix("/identitytoolkit.googleapis.com/") || rawPath.hasPrefix("/securetoken.googleapis.com/") {
            r = auth(method: method, path: rawPath, q, headers, body)
            if rawPath.hasPrefix("/securetoken") { r.delay = refreshLatency }
        } else {
            r = storage(method: method, rawPath: rawPath, q, headers, body)
        }
        if latency > r.delay { r.delay = latency }
        requests[requests.count - 1].status = r.status
        return r
    }

    /// Counts metadata GETs in flight (from request to answer), for the concurrency tests.
    func metadataGetStarted() {
        configure { s in
            s.metadataGetsInFlight += 1
            s.maxMetadataGetsInFlight = max(s.maxMetadataGetsInFlight, s.metadataGetsInFlight)
        }
    }
    func metadataGetEnded() { configure { $0.metadataGetsInFlight -= 1 } }

    // MARK: fault hooks (called on the event loop)

    typealias Fault = TestAnswerFault

    func takeFault(method: String, uri: String, status: Int) -> Fault? {
        lock.lock(); defer { lock.unlock() }
        if let m = loseAnswerTo, m == method, uri.hasPrefix("/v0/") {
            loseAnswerTo = nil
            return .lose
        }
        if uri.contains("alt=media"), (200..<300).contains(status), mediaFaultTimes > 0, let f = mediaFault {
            mediaFaultTimes -= 1
            return .media(f)
        }
        return nil
    }

    /// Whether to drop the connection mid-body of a resumable `upload` command.
    func shouldDrop(method: String, uri: String, headers: HTTPHeaders, received: Data) -> Bool {
        lock.lock(); defer { lock.unlock() }
        guard method == "POST", let limit = dropUploadAfterBytes, received.count > limit,
              headers.first(name: "X-Goog-Upload-Command")?.contains("upload") == true else { return false }
        let q = Self.parseQuery(uri.split(separator: "?", maxSplits: 1).dropFirst().first)
        guard let id = q["upload_id"], var s = sessions[id],
              headers.first(name: "X-Goog-Upload-Offset").flatMap({ Int($0) }) == s.data.count else { return false }
        dropUploadAfterBytes = nil
        let keep = received.count / (256 << 10) * (256 << 10)
        s.data.append(received.prefix(keep))
        sessions[id] = s
        return true
    }
}

// MARK: - Storage

extension FirebaseTestServer {
    /// The uid of a valid `Authorization: Firebase <ID token>` (nil without one), or the 401 to answer.
    private func caller(_ headers: HTTPHeaders) -> (uid: String?, refusal: Response?) {
        guard let h = headers.first(name: "Authorization") else { return (nil, nil) }
        let parts = h.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0] == "Firebase" else {
            return (nil, .error(401, "Invalid authorization header."))
        }
        guard let t = idTokens[String(parts[1])] else { return (nil, .error(401, "Invalid Firebase ID token.")) }
        guard t.expires > tokenClock.date else { return (nil, .error(401, "Firebase ID token has expired.")) }
        return (t.uid, nil)
    }

    private func denied(_ what: String) -> Response {
        .error(403, flavour == .emulator ? "Permission denied. No \(what) permission." : "Permission denied.")
    }

    private func notFound() -> Response {
        flavour == .emulator ? .text(404, "Not Found") : .error(404, "Not Found.")
    }

    private func allowed(_ op: TestRules.Op, _ path: String, _ uid: String?) -> Bool {
        rules?.allows(op, path: path, uid: uid) ?? false
    }

    func storage(method: String, rawPath: String, _ q: [String: String], _ headers: HTTPHeaders, _ body: Data) -> Response {
        // ["", "v0", "b", BUCKET, "o", OBJECT?]: the object is one percent-encoded segment.
        let segs = rawPath.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard segs.count >= 5, segs.count <= 6, segs[1] == "v0", segs[2] == "b", segs[4] == "o",
              segs[3].removingPercentEncoding == bucket else { return notFound() }
        if rules == nil { return .error(403, "Permission denied. Storage Emulator has no loaded ruleset.") }
        if let s = alwaysStatus { return .error(s, "injected HTTP \(s)") }
        if failNext > 0 { failNext -= 1; return .error(503, "injected: backend unavailable") }
        if quotaNext > 0 { quotaNext -= 1; return .error(402, "Quota exceeded.") }
        if unauthorizedNext > 0 { unauthorizedNext -= 1; return .error(401, "Firebase ID token has expired.") }
        let (uid, refusal) = caller(headers)
        if let refusal { return refusal }
        let name = segs.count == 6 ? segs[5].removingPercentEncoding : nil
        if segs.count == 6, name == nil || name!.isEmpty { return notFound() }
        var m = method
        if m == "PUT", headers.first(name: "X-HTTP-Method-Override")?.uppercased() == "PATCH" { m = "PATCH" }
        switch (m, name) {
        case ("GET", nil): return list(q, uid)
        case ("GET", let n?): return get(n, q, headers, uid)
        case ("PATCH", let n?): return patch(n, body, uid)
        case ("DELETE", let n?): return delete(n, uid)
        case ("POST", _), ("PUT", _): return upload(name ?? q["name"], q, headers, body, uid)
        default: return notFound()
        }
    }

    // MARK: list

    /// Valid when no segment is empty (a leading `/` aside).
    static func isValidPath(_ p: String) -> Bool {
        var s = Substring(p)
        if s.hasPrefix("/") { s = s.dropFirst() }
        return !s.isEmpty && !s.split(separator: "/", omittingEmptySubsequences: false).contains { $0.isEmpty }
    }

    private func list(_ q: [String: String], _ uid: String?) -> Response {
        let prefix = q["prefix"] ?? ""
        guard prefix.isEmpty || (prefix.hasSuffix("/") && !prefix.hasSuffix("//")) else {
            return .error(400, "The prefix parameter is required to be empty or ends with a single / character.")
        }
        let maxResults = Int(q["maxResults"] ?? "1000") ?? 0
        guard (1...1000).contains(maxResults) else { return .error(400, "maxResults must be between 1 and 1000.") }
        guard allowed(.list, String(prefix.dropLast(prefix.isEmpty ? 0 : 1)), uid) else {
            if flavour == .production, let r = rules, r.version < 2 {
                return .error(403, "Listing objects in a bucket is disallowed for rules_version = \"1\". Please update storage security rules to rules_version = \"2\" to use list.")
            }
            return denied("LIST")
        }
        // The delimiter is always `/`: the SDKs always send it.
        var items: [String] = []
        var prefixes = Set<String>()
        for n in objects.keys where n.hasPrefix(prefix) {
            let rest = n.dropFirst(prefix.count)
            if let slash = rest.firstIndex(of: "/") {
                let p = prefix + rest[...slash]
                if Self.isValidPath(String(p.dropLast())) { prefixes.insert(p) }
            } else if Self.isValidPath(n) {
                items.append(n)
            }
        }
        let before = { (a: String, b: String) in a.utf8.lexicographicallyPrecedes(b.utf8) }
        var out: [String: Any] = [:]
        switch flavour {
        case .emulator:
            // JavaScript's sort: UTF-16 code units.
            items.sort { $0.utf16.lexicographicallyPrecedes($1.utf16) }
            // maxResults counts items; every page has every prefix; the token is the next item,
            // and a token no longer found starts over.
            if let t = q["pageToken"], let i = items.firstIndex(of: t) { items = Array(items[i...]) }
            if items.count > maxResults {
                out["nextPageToken"] = items[maxResults]
                items = Array(items[..<maxResults])
            }
            out["prefixes"] = prefixes.sorted(by: before)
            out["items"] = items.map { ["name": $0, "bucket": bucket] }
        case .production:
            items.sort(by: before)
            // Prefixes and items count together; the token (opaque) resumes after the last entry.
            var entries = (items.map { ($0, false) } + prefixes.map { ($0, true) }).sorted { before($0.0, $1.0) }
            if let t = q["pageToken"] {
                guard let d = Data(base64Encoded: t), let after = String(data: d, encoding: .utf8) else {
                    return .error(400, "Invalid page token.")
                }
                entries = entries.filter { before(after, $0.0) }
            }
            if entries.count > maxResults {
                entries = Array(entries[..<maxResults])
                out["nextPageToken"] = Data(entries.last!.0.utf8).base64EncodedString()
            }
            // Empty repeated fields are left out, as in every Google JSON API.
            let p = entries.filter(\.1).map(\.0), i = entries.filter { !$0.1 }.map { ["name": $0.0, "bucket": bucket] }
            if !p.isEmpty { out["prefixes"] = p }
            if !i.isEmpty { out["items"] = i }
        }
        return .json(200, out)
    }

    // MARK: objects

    func resource(_ o: Object) -> [String: Any] {
        var r: [String: Any] = [
            "name": o.name, "bucket": bucket, "generation": String(o.generation), "metageneration": String(o.metageneration),
            "timeCreated": RFC3339.format(o.timeCreated), "updated": RFC3339.format(o.updated), "storageClass": "STANDARD",
            "size": String(o.data.count), "md5Hash": Data(Insecure.MD5.hash(data: o.data)).base64EncodedString(),
            "etag": "etag-\(o.generation)-\(o.metageneration)", "downloadTokens": o.downloadTokens.joined(separator: ","),
        ]
        let crc = CRC32C.checksum(o.data)
        r["crc32c"] = flavour == .emulator ? String(crc) : CRC32C.base64(crc)
        // Both flavours show an object with no contentEncoding as `identity` (the emulator's
        // OutgoingFirebaseMetadata; production's recorded answers, also for objects written
        // through the JSON API, which stores none).
        r["contentEncoding"] = "identity"
        for (k, v) in o.props { r[k] = v }
        // The GCS key `firebaseStorageDownloadTokens` is shown as `downloadTokens`, never in `metadata`.
        if !o.metadata.isEmpty { r["metadata"] = o.metadata }
        return r
    }

    /// A GET of an object without a download token mints one (moving the GCS key's tokens in):
    /// metageneration and `updated` move on.
    private func mintIfNeeded(_ name: String) {
        guard var o = objects[name] else { return }
        if let legacy = o.metadata.removeValue(forKey: "firebaseStorageDownloadTokens") {
            o.downloadTokens += legacy.split(separator: ",").map(String.init)
        }
        if o.downloadTokens.isEmpty {
            o.downloadTokens = [UUID().uuidString.lowercased()]
            o.metageneration += 1
            o.updated = Date()
        }
        objects[name] = o
    }

    private func get(_ name: String, _ q: [String: String], _ headers: HTTPHeaders, _ uid: String?) -> Response {
        let byToken = q["token"].map { t in objects[name]?.downloadTokens.contains(t) == true } ?? false
        guard byToken || allowed(.get, name, uid) else { return denied("READ") }
        guard objects[name] != nil else { return notFound() }
        mintIfNeeded(name)
        let o = objects[name]!
        guard q["alt"] == "media" else { return .json(200, resource(o)) }
        let size = o.data.count
        var h: [(String, String)] = [
            ("Accept-Ranges", "bytes"), ("Content-Type", o.props["contentType"] ?? "application/octet-stream"),
            ("ETag", "etag-\(o.generation)-\(o.metageneration)"),
            ("x-goog-metadatageneration", String(o.metageneration)), ("x-goog-storage-class", "STANDARD"),
            ("x-goog-hash", "crc32c=\(CRC32C.base64(CRC32C.checksum(o.data))),md5=\(Data(Insecure.MD5.hash(data: o.data)).base64EncodedString())"),
        ]
        if sendsGenerationHeader { h.append(("x-goog-generation", String(o.generation))) }
        let leaf = String(o.name.split(separator: "/", omittingEmptySubsequences: false).last ?? "")
        let rfc5987 = leaf.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$&+-.^_`|~")) ?? leaf
        let disposition = o.props["contentDisposition"] ?? "inline"
        h.append(("Content-Disposition", disposition.contains("filename") ? disposition : "\(disposition); filename*=utf-8''\(rfc5987)"))
        if let cc = o.props["cacheControl"] { h.append(("Cache-Control", cc)) }
        guard let range = headers.first(name: "Range") else { return Response(status: 200, headers: h, body: o.data) }
        let spec = range.replacingOccurrences(of: "bytes=", with: "").split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2 else { return Response(status: 200, headers: h, body: o.data) }
        if spec[0].isEmpty, let n = Int(spec[1]), n > 0, size > 0 {
            // A suffix range: the last n bytes.
            let a = max(0, size - n)
            h.append(("Content-Range", "bytes \(a)-\(size - 1)/\(size)"))
            return Response(status: 206, headers: h, body: o.data.subdata(in: a..<size))
        }
        guard let a = Int(spec[0]) else { return Response(status: 200, headers: h, body: o.data) }
        if a >= size {
            if flavour == .emulator { return Response(status: 200, headers: h, body: o.data) }
            return Response(status: 416, headers: [("Content-Range", "bytes */\(size)")], body: Data("Requested range not satisfiable".utf8))
        }
        let b = min(Int(spec[1]) ?? (size - 1), size - 1)
        h.append(("Content-Range", "bytes \(a)-\(b)/\(size)"))
        return Response(status: 206, headers: h, body: o.data.subdata(in: a..<(b + 1)))
    }

    private func patch(_ name: String, _ body: Data, _ uid: String?) -> Response {
        guard allowed(.update, name, uid) else { return denied("WRITE") }
        guard var o = objects[name] else { return notFound() }
        guard let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            return .error(400, "Invalid JSON payload.")
        }
        for k in Self.writableProps {
            switch j[k] {
            case nil: break
            case is NSNull: o.props[k] = nil
            case let s as String: o.props[k] = s
            default: return .error(400, "Invalid value for \(k).")
            }
        }
        switch j["metadata"] {
        case nil: break
        case is NSNull: o.metadata = [:]
        case let m as [String: Any]:
            for (k, v) in m {
                if v is NSNull { o.metadata[k] = nil } else { o.metadata[k] = (v as? String) ?? "\(v)" }
            }
        default: return .error(400, "Invalid metadata.")
        }
        if Self.tooLarge(o.metadata) { return .error(400, "Metadata part is too large.") }
        o.metageneration += 1
        o.updated = Date()
        objects[name] = o
        return .json(200, resource(o))
    }

    private func delete(_ name: String, _ uid: String?) -> Response {
        // Rules before existence: a denied delete of a missing object is 403.
        guard allowed(.delete, name, uid) else { return denied("WRITE") }
        guard objects[name] != nil else { return notFound() }
        objects[name] = nil
        return Response(status: 204)
    }

    // MARK: uploads

    /// The GCS limits on custom metadata: 1 KiB a key, 4 KiB a value, 8 KiB in all.
    static func tooLarge(_ m: [String: String]) -> Bool {
        m.contains { $0.key.utf8.count > 1024 || $0.value.utf8.count > 4096 }
            || m.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count } > 8192
    }

    /// Writable fields and custom metadata of an upload's JSON (custom values as strings).
    private static func split(_ j: [String: Any]) -> ([String: String], [String: String]) {
        var props: [String: String] = [:]
        for k in writableProps { if let v = j[k] as? String { props[k] = v } }
        var meta: [String: String] = [:]
        for (k, v) in (j["metadata"] as? [String: Any]) ?? [:] where !(v is NSNull) { meta[k] = (v as? String) ?? "\(v)" }
        return (props, meta)
    }

    /// Stores an upload when the rules allow it (create, or update when the name exists).
    private func finish(_ name: String, data: Data, resource j: [String: Any], contentType: String?, uid: String?) -> Response {
        let op: TestRules.Op = objects[name] == nil ? .create : .update
        guard allowed(op, name, uid) else {
            var r = denied("WRITE")
            r.headers.append(("X-Goog-Upload-Status", "final"))
            return r
        }
        var (props, meta) = Self.split(j)
        if props["contentType"] == nil, let ct = contentType { props["contentType"] = ct }
        // A v0 upload with no contentDisposition stores one: the emulator `inline` (its
        // finalizeOneShotUpload), production `inline; filename*=utf-8''LEAF`.
        if props["contentDisposition"] == nil {
            props["contentDisposition"] = flavour == .emulator ? "inline" : ContentDisposition.firebaseDefault(forObject: name)
        }
        // The reserved GCS key is not custom metadata: its tokens are moved into the download
        // tokens (a copied token is a live secret of the new object), and a new one is added.
        let moved = meta.removeValue(forKey: "firebaseStorageDownloadTokens")?.split(separator: ",").map(String.init) ?? []
        if Self.tooLarge(meta) { return .error(400, "Metadata part is too large.") }
        let o = store(name: name, data: data, props: props, metadata: meta, tokens: moved + [UUID().uuidString.lowercased()])
        var r = Response.json(200, resource(o))
        r.headers.append(("X-Goog-Upload-Status", "final"))
        return r
    }

    private func upload(_ objectName: String?, _ q: [String: String], _ headers: HTTPHeaders, _ body: Data, _ uid: String?) -> Response {
        let proto = headers.first(name: "X-Goog-Upload-Protocol")?.lowercased()
        if let id = q["upload_id"] { return resumable(id, headers, body, uid) }
        guard let name = objectName, !name.isEmpty else { return .error(400, "No object name.") }
        switch proto ?? "" {
        case "multipart":
            guard let ct = headers.first(name: "Content-Type"), ct.hasPrefix("multipart/related"),
                  let b = ct.components(separatedBy: "boundary=").last?.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
            else { return .error(400, "multipart/related with a boundary expected") }
            let parts = Self.multipartParts(body, boundary: b)
            guard parts.count == 2, let j = try? JSONSerialization.jsonObject(with: parts[0].body) as? [String: Any] else {
                return .error(400, "expected a JSON metadata part and a media part")
            }
            return finish(name, data: parts[1].body, resource: j, contentType: parts[1].contentType, uid: uid)
        case "resumable":
            guard headers.first(name: "X-Goog-Upload-Command")?.lowercased() == "start" else {
                return .error(400, "X-Goog-Upload-Command: start expected")
            }
            let j = (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:]
            // Production checks the write rule at the start, with the resource it declares (the
            // emulator only at finalize); both check again at finalize, with the bytes.
            if flavour == .production, !allowed(objects[name] == nil ? .create : .update, name, uid) {
                return denied("WRITE")
            }
            let id = UUID().uuidString.lowercased()
            sessions[id] = Session(name: name, resource: j, contentType: headers.first(name: "X-Goog-Upload-Header-Content-Type"),
                                   total: headers.first(name: "X-Goog-Upload-Header-Content-Length").flatMap { Int($0) },
                                   authorization: headers.first(name: "Authorization"))
            let enc = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name
            return Response(status: 200, headers: [
                ("X-Goog-Upload-Status", "active"),
                ("X-Goog-Upload-URL", "http://127.0.0.1:\(port)/v0/b/\(bucket)/o?name=\(enc)&upload_id=\(id)&upload_protocol=resumable"),
                ("X-Goog-Upload-Chunk-Granularity", String(256 << 10)),
            ])
        case "":
            // No protocol header: a media upload, the raw body typed by its Content-Type.
            return finish(name, data: body, resource: [:], contentType: headers.first(name: "Content-Type"), uid: uid)
        default:
            return .error(400, "Unsupported upload protocol.")
        }
    }

    private func resumable(_ id: String, _ headers: HTTPHeaders, _ body: Data, _ uid: String?) -> Response {
        guard var s = sessions[id] else { return notFound() }
        let command = (headers.first(name: "X-Goog-Upload-Command") ?? "").lowercased()
        let verbs = Set(command.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        if verbs.contains("query") {
            var h = [("X-Goog-Upload-Size-Received", String(s.data.count))]
            h.append(("X-Goog-Upload-Status", s.finished == nil ? "active" : "final"))
            return Response(status: 200, headers: h)
        }
        if verbs.contains("cancel") {
            sessions[id] = nil
            return Response(status: 200)
        }
        if let done = s.finished { return done }  // a repeated finalize replays the answer
        if verbs.contains("upload") {
            // The emulator ignores the offset; a checked one is what the protocol promises.
            guard let offset = headers.first(name: "X-Goog-Upload-Offset").flatMap({ Int($0) }), offset == s.data.count else {
                return .error(400, "X-Goog-Upload-Offset does not match the \(s.data.count) bytes received.")
            }
            // Chunks are multiples of 256 KiB, but the last.
            if !verbs.contains("finalize"), body.count % (256 << 10) != 0 {
                return .error(400, "An upload chunk of \(body.count) bytes is not a multiple of 262144.")
            }
            s.data.append(body)
            if let total = s.total, s.data.count > total { return .error(400, "More bytes than X-Goog-Upload-Header-Content-Length.") }
        }
        guard verbs.contains("finalize") else {
            sessions[id] = s
            guard verbs.contains("upload") else { return .error(400, "Unsupported upload command.") }
            return Response(status: 200, headers: [("X-Goog-Upload-Status", "active")])
        }
        if let total = s.total, s.data.count != total {
            sessions[id] = s
            return .error(400, "Finalize with \(s.data.count) of \(total) bytes.")
        }
        // Rules are checked now, as the user of the start (with the header stored then).
        let startToken = (s.authorization ?? "").split(separator: " ", maxSplits: 1).last.map(String.init) ?? ""
        let startUID = idTokens[startToken]?.uid
        let r = finish(s.name, data: s.data, resource: s.resource, contentType: s.contentType, uid: startUID)
        s.finished = r
        sessions[id] = s
        return r
    }

    /// The parts of a multipart/related body: each part's Content-Type and body.
    static func multipartParts(_ body: Data, boundary: String) -> [(contentType: String?, body: Data)] {
        let delim = Data("--\(boundary)".utf8)
        var starts: [Range<Data.Index>] = []
        var cursor = body.startIndex
        while let r = body.range(of: delim, in: cursor..<body.endIndex) {
            starts.append(r)
            cursor = r.upperBound
        }
        var out: [(String?, Data)] = []
        for (i, r) in starts.enumerated() where i + 1 < starts.count {
            let part = body.subdata(in: r.upperBound..<starts[i + 1].lowerBound)
            guard let sep = part.range(of: Data("\r\n\r\n".utf8)) else { continue }
            let head = String(decoding: part.subdata(in: part.startIndex..<sep.lowerBound), as: UTF8.self)
            var content = part.subdata(in: sep.upperBound..<part.endIndex)
            if content.suffix(2) == Data("\r\n".utf8) { content = content.dropLast(2) }
            let ct = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-type:") }
                .map { $0.dropFirst("content-type:".count).trimmingCharacters(in: .whitespaces) }
            out.append((ct, Data(content)))
        }
        return out
    }
}
