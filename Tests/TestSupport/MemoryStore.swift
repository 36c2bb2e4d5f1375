import Crypto
import Foundation
import StorageModel

// Test support shared by BucketFSTests and ObjectStoresTests (which runs it through the store
// conformance suite).

/// An in-memory `ObjectStore` that follows the Cloud Storage JSON API semantics the core relies
/// on: names sorted in UTF-8 byte order; `list` with prefix / delimiter / maxResults / pageToken
/// (items and prefixes both count towards maxResults, a token only when more remain, placeholder
/// `dir/` objects returned as items of their own listing); generations and metagenerations;
/// PATCH merge with removal; preconditions through `Preconditions.hold(for:)`; copy; delete.
///
/// By default only the live generation is kept, as in a bucket without object versioning:
/// reading, or copying from, a replaced or deleted generation is 404, and `versions` is nil.
/// `MemoryStore(versioning: .on)` keeps every replaced or deleted generation (noncurrent, with
/// its `timeDeleted`) as a versioned Cloud Storage bucket does, and answers `versions`
/// (`MemoryStore+Versions.swift`); `.off` answers `versions` for a bucket that keeps nothing
/// (`enabled == false`, a versioned listing of the live generations only), as an embedded bucket
/// made without `--versioning` does.
///
/// Test hooks, none of which is counted as a request:
/// - `counts["list"]` etc.: calls served per operation (failed and faulted calls included);
/// - `failNext(_:times:with:)`: make the next N calls of an operation throw a given error;
/// - `holdNextWrites`, `holdNextListAnswers`: hold uploads before they happen, or list answers
///   after they were made (in flight);
/// - `put`, `replaceBehind`, `patchBehind`, `removeBehind`: change the bucket behind the mount;
/// - `patches`, `writes`, `reads`, `deletes`, `copies`, `lists`, `gets`: what the store was asked.
public final class MemoryStore: StoreBackend, @unchecked Sendable {
    public let bucket: String
    /// As the JSON API by default: a listing under `dir/name` with `endOffset` is one request.
    /// False: the core asks it as it asks a store that cannot (Firebase's v0).
    public let listsUnderPartialNames: Bool

    struct Stored {
        var info: ObjectInfo
        var data: Data
    }

    public struct PatchCall: Sendable {
        public var name: String
        public var patch: MetadataPatch
        public var preconditions: Preconditions
    }

    public struct WriteCall: Sendable {
        public var name: String
        public var data: Data
        public var metadata: WritableMetadata
        public var preconditions: Preconditions
    }

    public struct ReadCall: Sendable {
        public var name: String
        public var generation: Int64?
        public var range: Range<Int64>?
    }

    public struct DeleteCall: Sendable {
        public var name: String
        public var preconditions: Preconditions
    }

    public struct CopyCall: Sendable {
        public var source: String
        public var sourceGeneration: Int64?
        public var destination: String
        public var preconditions: Preconditions
    }

    /// What the store keeps of the past (fixed at creation).
    public enum Versioning: Sendable { case absent, off, on }
    public let versioning: Versioning
    /// A flat bucket, or one with a hierarchical namespace: folders of their own
    /// (MemoryStore+Folders.swift), made by an upload under them and kept when emptied.
    public let layout: BucketLayout
    /// Whether `move` is answered (objects.move); off: nil, as a server without it.
    public let moves: Bool

    let lock = NSLock()
    var objects: [String: Stored] = [:]
    /// The folders (hierarchical layout only), by name ending in "/".
    var folderTable: [String: FolderInfo] = [:]
    var _moveCalls: [(String, String)] = []
    /// Replaced and deleted generations (`versioning == .on` only), oldest first per name.
    var noncurrent: [String: [(stored: Stored, timeDeleted: Date)]] = [:]
    private var nextGeneration: Int64 = 1_000_000
    private var _counts: [String: Int] = [:]
    private var faults: [String: [StorageError]] = [:]
    private var writeHolds: [WriteHold] = []
    private var answerHolds: [WriteHold] = []
    /// Damage done to the next read answers (as a lying network would): each closure gets the
    /// right bytes and returns what is answered instead.
    private var readDamage: [@Sendable (Data) -> Data] = []
    private var streamCuts: [Int] = []
    private var _streamRate: Double?
    private var streamsNow = 0
    private var _mostStreamsAtOnce = 0
    private var _patches: [PatchCall] = []
    private var _writes: [WriteCall] = []
    private var _reads: [ReadCall] = []
    private var _deletes: [DeleteCall] = []
    private var _copies: [CopyCall] = []
    var _lists: [ListRequest] = []
    private var _gets: [String] = []
    /// Streamed uploads are answered (`beginGrowingUpload`); off: nil, as a store that cannot.
    private var _streams = false
    private var _streamEvents: [StreamEvent] = []
    /// The store's clock for `timeCreated` / `updated`: starts at the real time (whole seconds),
    /// as a bucket's timestamps do, and advances one second per change.
    private var clock = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))

    public init(bucket: String = "test-bucket", versioning: Versioning = .absent, listsUnderPartialNames: Bool = true,
                layout: BucketLayout = .flat, moves: Bool? = nil) {
        self.bucket = bucket
        self.versioning = versioning
        self.listsUnderPartialNames = listsUnderPartialNames
        self.layout = layout
        self.moves = moves ?? (layout == .hierarchical)
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: - observation

    public var counts: [String: Int] { withLock { _counts } }
    /// Total number of requests of any kind.
    public var totalRequests: Int { withLock { _counts.values.reduce(0, +) } }
    public var patches: [PatchCall] { withLock { _patches } }
    public var writes: [WriteCall] { withLock { _writes } }
    public var reads: [ReadCall] { withLock { _reads } }
    public var deletes: [DeleteCall] { withLock { _deletes } }
    public var copies: [CopyCall] { withLock { _copies } }
    public var lists: [ListRequest] { withLock { _lists } }
    public var gets: [String] { withLock { _gets } }

    public func count(_ op: String) -> Int { withLock { _counts[op] ?? 0 } }

    /// Whether `beginGrowingUpload` answers a session (off by default, as for a store that cannot stream).
    public var streams: Bool {
        get { withLock { _streams } }
        set { withLock { _streams = newValue } }
    }
    /// What the streamed uploads' sessions were asked, in order.
    public var streamEvents: [StreamEvent] { withLock { _streamEvents } }

    /// Forgets counters and recorded calls (not objects, not faults).
    public func resetCounts() {
        withLock {
            _counts = [:]
            _patches = []; _writes = []; _reads = []; _deletes = []; _copies = []; _lists = []; _gets = []
            _mostStreamsAtOnce = streamsNow
        }
    }

    /// The next `times` calls of `op` ("list", "get", "patch", "read", "write", "delete", "copy")
    /// throw `error` (and are counted).
    /// The next `times` reads answer `damage(rightBytes)` instead of the right bytes.
    public func damageNextReads(times: Int = 1, _ damage: @escaping @Sendable (Data) -> Data) {
        withLock { readDamage += Array(repeating: damage, count: times) }
    }

    /// The next `times` streamed reads deliver their first `after` bytes and then fail as a
    /// connection that closed mid-body does (`GCSStore.stream` throws after the bytes it delivered).
    public func cutNextStreams(times: Int = 1, after: Int) {
        withLock { streamCuts += Array(repeating: after, count: times) }
    }

    /// Each streamed read delivers at most `bytesPerSecond` (nil: at once), on its own: a link
    /// whose every connection carries only so much, whatever the others do.
    public func setStreamRate(_ bytesPerSecond: Double?) {
        withLock { _streamRate = bytesPerSecond }
    }

    /// The most streamed reads that were delivering at once since the last `resetCounts`.
    public var mostStreamsAtOnce: Int { withLock { _mostStreamsAtOnce } }

    /// The next `times` writes are held before they read their source, as uploads to a server
    /// that does not answer, until `WriteHold.release` (with an error, or to go on); a held write
    /// ends as a real request does when its operation's deadline passes (`.timeout`) or its task
    /// is cancelled (`.cancelled`). Returns the hold, shared by those writes.
    public func holdNextWrites(times: Int = 1) -> WriteHold {
        let hold = WriteHold()
        withLock { writeHolds += Array(repeating: hold, count: times) }
        return hold
    }

    /// The answers of the next `times` listings are held after they were made (answers in
    /// flight, which say what the bucket held when they were asked), until `WriteHold.release`.
    public func holdNextListAnswers(times: Int = 1) -> WriteHold {
        let hold = WriteHold()
        withLock { answerHolds += Array(repeating: hold, count: times) }
        return hold
    }

    /// Access rules for new objects, as Firebase's Security Rules: `probeCreate` asks them (with
    /// the 1 byte `FirebaseStore`'s probe declares, counted as "probe") and `write` enforces
    /// them with the real size (403 → `unauthorized`). nil (the default): no rules, and
    /// `probeCreate` answers nil at no cost, as the Cloud Storage and embedded stores do.
    public func setWriteRules(_ rules: (@Sendable (_ name: String, _ contentType: String?, _ size: Int64) -> Bool)?) {
        withLock { writeRules = rules }
    }
    private var writeRules: (@Sendable (String, String?, Int64) -> Bool)?

    public func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        try withLock {
            guard let rules = writeRules else { return nil }
            try enter("probe")
            return rules(name, metadata.contentType, 1) ? .allowed : .refused(message: "Permission denied.")
        }
    }

    /// Runs before each copy (its destination's name), outside the store's lock: a copy that
    /// takes time (a test's clock moved on), or one held until its task is cancelled (a thrown
    /// error fails the copy). nil: none.
    public func setCopyHook(_ hook: (@Sendable (String) async throws -> Void)?) {
        withLock { copyHook = hook }
    }
    private var copyHook: (@Sendable (String) async throws -> Void)?

    public func failNext(_ op: String, times: Int = 1, with error: StorageError) {
        withLock { faults[op, default: []] += Array(repeating: error, count: times) }
    }

    /// Forgets the faults still queued for `op` (the server is well again).
    public func clearFaults(_ op: String) {
        withLock { faults[op] = nil }
    }

    public var names: [String] { withLock { objects.keys.sorted(by: Self.byteLess) } }
    public func object(_ name: String) -> ObjectInfo? { withLock { objects[name]?.info } }
    public func data(_ name: String) -> Data? { withLock { objects[name]?.data } }

    // MARK: - behind the mount's back (not counted)

    /// Creates or replaces an object (new generation, metageneration 1).
    @discardableResult
    public func put(_ name: String, _ data: Data = Data(), contentType: String? = nil,
             custom: [String: String] = [:]) -> ObjectInfo {
        withLock {
            // A hierarchical bucket has no objects named like a folder: "dir/" is the folder.
            if layout == .hierarchical, name.hasSuffix("/") {
                let t = tick()
                makeAncestorFoldersLocked(of: name, at: t)
                return ObjectInfo(bucket: bucket, name: name, generation: 0, metageneration: 0, size: 0, timeCreated: t, updated: t,
                                  md5Hash: nil, crc32c: nil, writable: WritableMetadata())
            }
            return commitLocked(name, data: data, metadata: WritableMetadata(contentType: contentType, customMetadata: custom))
        }
    }

    /// Creates or replaces an object with all of `metadata` (as a server that adds properties of its own would).
    @discardableResult
    public func put(_ name: String, _ data: Data = Data(), metadata: WritableMetadata) -> ObjectInfo {
        withLock { commitLocked(name, data: data, metadata: metadata) }
    }

    @discardableResult
    public func put(_ name: String, _ text: String, contentType: String? = nil, custom: [String: String] = [:]) -> ObjectInfo {
        put(name, Data(text.utf8), contentType: contentType, custom: custom)
    }

    /// Another writer replaces the bytes (new generation), keeping the object's metadata.
    @discardableResult
    public func replaceBehind(_ name: String, _ data: Data) -> ObjectInfo {
        withLock {
            let old = objects[name]?.info.writable ?? WritableMetadata()
            return commitLocked(name, data: data, metadata: old)
        }
    }

    /// Another writer patches the metadata (metageneration + 1).
    @discardableResult
    public func patchBehind(_ name: String, _ patch: MetadataPatch) -> ObjectInfo? {
        withLock {
            guard let cur = objects[name] else { return nil }
            return patchLocked(cur, patch)
        }
    }

    public func removeBehind(_ name: String) {
        withLock { retireLocked(name, at: tick()) }
    }

    // MARK: - ObjectStore

    public func list(_ request: ListRequest) async throws -> ListPage {
        let page = try listNow(request)
        // An answer in flight: it says what the bucket held when it was asked.
        if let hold = withLock({ answerHolds.isEmpty ? nil : answerHolds.removeFirst() }) {
            try await hold.wait()
        }
        return page
    }

    /// Within the request's [startOffset, endOffset).
    static func inRange(_ name: String, _ request: ListRequest) -> Bool {
        request.startOffset.map { !byteLess(name, $0) } ?? true && request.endOffset.map { byteLess(name, $0) } ?? true
    }

    private func listNow(_ request: ListRequest) throws -> ListPage {
        try withLock {
            try enter("list")
            _lists.append(request)
            let limit = min(max(request.maxResults, 1), 1000)
            let delimiter = request.delimiter.flatMap { $0.isEmpty ? nil : $0 }
            // Every entry of the whole answer, in order: (key, item or prefix).
            var entries: [(key: String, item: ObjectInfo?)] = []
            var seenPrefixes = Set<String>()
            // [startOffset, endOffset) bounds the objects listed, before they roll up into prefixes.
            // A hierarchical bucket lists its folders as prefixes too (includeFoldersAsPrefixes),
            // empty ones included; only with a delimiter, as the JSON API.
            let folderKeys = delimiter == nil ? [] : folderTable.keys.filter { $0 != request.prefix }
            for name in (Array(objects.keys) + folderKeys).sorted(by: Self.byteLess) where name.utf8.starts(with: request.prefix.utf8)
                && Self.inRange(name, request) {
                if let cp = Self.commonPrefix(of: name, prefix: request.prefix, delimiter: delimiter) {
                    // A prefix before startOffset is left out even when some of its objects are
                    // in range (fake-gcs-server does so; the JSON API's documentation does not say).
                    if seenPrefixes.insert(cp).inserted, request.startOffset.map({ !Self.byteLess(cp, $0) }) ?? true {
                        entries.append((cp, nil))
                    }
                } else if let o = objects[name] {
                    entries.append((name, o.info))
                }
            }
            var start = 0
            if let token = request.pageToken {
                guard let d = Data(base64Encoded: token), let after = String(data: d, encoding: .utf8) else {
                    throw StorageError.invalidArgument(message: "invalid page token")
                }
                start = entries.firstIndex { Self.byteLess(after, $0.key) } ?? entries.count
            }
            let end = min(entries.count, start + limit)
            var page = ListPage()
            for e in entries[start..<end] {
                if let item = e.item {
                    page.items.append(item)
                } else {
                    page.prefixes.append(e.key)
                    // includeTrailingDelimiter: the object named like the prefix, as an item too.
                    if request.includeTrailingDelimiter, let o = objects[e.key], Self.inRange(e.key, request) {
                        page.items.append(o.info)
                    }
                }
            }
            if end < entries.count {
                page.nextPageToken = Data(entries[end - 1].key.utf8).base64EncodedString()
            }
            return page
        }
    }

    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        try withLock {
            try enter("get")
            _gets.append(name)
            guard let o = objects[name] else { throw StorageError.objectNotFound(path: name) }
            return o.info
        }
    }

    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        try withLock {
            try enter("patch")
            _patches.append(PatchCall(name: name, patch: patch, preconditions: preconditions))
            guard let cur = objects[name] else { throw StorageError.objectNotFound(path: name) }
            guard preconditions.hold(for: cur.info) else { throw StorageError.preconditionFailed(path: name) }
            try CustomMetadataLimits.check(patch.applied(to: cur.info.writable).customMetadata)
            return patchLocked(cur, patch)
        }
    }

    /// One `read` (counted as one), delivered in pieces of at most 64 KiB, cut short by
    /// `cutNextStreams`.
    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        let data = try await read(name, generation: generation, range: range)
        let (cut, rate) = withLock { () -> (Int?, Double?) in
            streamsNow += 1
            _mostStreamsAtOnce = max(_mostStreamsAtOnce, streamsNow)
            return (streamCuts.isEmpty ? nil : streamCuts.removeFirst(), _streamRate)
        }
        // A stream stops counting before its last bytes are handed over: the reader may start
        // the next part as soon as they are in (a server has sent its answer by then too).
        var counted = true
        defer { if counted { withLock { streamsNow -= 1 } } }
        let n = min(data.count, cut ?? data.count)
        var at = 0
        while at < n {
            let k = min(n - at, 1 << 16)
            if let rate { try await Task.sleep(for: .seconds(Double(k) / rate)) }
            if at + k == data.count, counted {
                withLock { streamsNow -= 1 }
                counted = false
            }
            try deliver(data.subdata(in: (data.startIndex + at)..<(data.startIndex + at + k)))
            at += k
        }
        if n < data.count, cut != nil {
            throw StorageError.unknown(status: 0, message: "the connection closed after \(n) of \(data.count) bytes")
        }
    }

    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        try withLock {
            try enter("read")
            _reads.append(ReadCall(name: name, generation: generation, range: range))
            guard let o = storedLocked(name, generation: generation) else { throw StorageError.objectNotFound(path: name) }
            let bytes = o.data
            let size = Int64(bytes.count)
            let lo = min(max(range?.lowerBound ?? 0, 0), size)
            let hi = min(max(range?.upperBound ?? size, lo), size)
            let answer = bytes.subdata(in: Int(lo)..<Int(hi))
            if !readDamage.isEmpty { return readDamage.removeFirst()(answer) }
            return answer
        }
    }

    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
               preconditions: Preconditions) async throws -> ObjectInfo {
        if let hold = withLock({ writeHolds.isEmpty ? nil : writeHolds.removeFirst() }) {
            try await hold.wait()
        }
        let data: Data
        switch source {
        case .data(let d): data = d
        case .file(let path):
            guard let d = FileManager.default.contents(atPath: path) else {
                throw StorageError.invalidArgument(message: "cannot read upload source \(path)")
            }
            data = d
        }
        return try withLock {
            try enter("write")
            _writes.append(WriteCall(name: name, data: data, metadata: metadata, preconditions: preconditions))
            try StoragePath.validateObjectName(name)
            try refuseFolderNameLocked(name)
            try CustomMetadataLimits.check(metadata.customMetadata)
            guard preconditions.hold(for: objects[name]?.info) else { throw StorageError.preconditionFailed(path: name) }
            if let rules = writeRules, !rules(name, metadata.contentType, Int64(data.count)) {
                throw StorageError.unauthorized(path: name, message: "Permission denied.")
            }
            return commitLocked(name, data: data, metadata: metadata)
        }
    }

    public func delete(_ name: String, preconditions: Preconditions) async throws {
        try withLock {
            try enter("delete")
            _deletes.append(DeleteCall(name: name, preconditions: preconditions))
            guard let cur = objects[name] else { throw StorageError.objectNotFound(path: name) }
            guard preconditions.hold(for: cur.info) else { throw StorageError.preconditionFailed(path: name) }
            retireLocked(name, at: tick())
        }
    }

    public func copy(from source: String, sourceGeneration: Int64?, to destination: String,
              metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        if let hook = withLock({ copyHook }) { try await hook(destination) }
        return try withLock {
            try enter("copy")
            _copies.append(CopyCall(source: source, sourceGeneration: sourceGeneration, destination: destination,
                                    preconditions: preconditions))
            // Any kept generation of the source; the preconditions are the destination's live one's.
            guard let src = storedLocked(source, generation: sourceGeneration) else {
                throw StorageError.objectNotFound(path: source)
            }
            try refuseFolderNameLocked(destination)
            guard preconditions.hold(for: objects[destination]?.info) else {
                throw StorageError.preconditionFailed(path: destination)
            }
            return commitLocked(destination, data: src.data, metadata: metadata ?? src.info.writable)
        }
    }

    // MARK: - internals (caller holds `lock`)

    func enter(_ op: String) throws {
        _counts[op, default: 0] += 1
        if var queue = faults[op], !queue.isEmpty {
            let e = queue.removeFirst()
            faults[op] = queue
            throw e
        }
    }

    func tick() -> Date {
        clock = clock.addingTimeInterval(1)
        return clock
    }

    func commitLocked(_ name: String, data: Data, metadata: WritableMetadata) -> ObjectInfo {
        let t = tick()
        makeAncestorFoldersLocked(of: name, at: t)
        nextGeneration += 1
        let info = ObjectInfo(bucket: bucket, name: name, generation: nextGeneration, metageneration: 1,
                              size: Int64(data.count), timeCreated: t, updated: t,
                              md5Hash: Self.md5(data), crc32c: CRC32C.base64(CRC32C.checksum(data)), writable: metadata)
        retireLocked(name, at: t)
        objects[name] = Stored(info: info, data: data)
        return info
    }

    /// The live generation of `name` stops being live at `moment`: kept as noncurrent when
    /// versioning is on, dropped otherwise.
    func retireLocked(_ name: String, at moment: Date) {
        guard let old = objects.removeValue(forKey: name) else { return }
        if versioning == .on { noncurrent[name, default: []].append((old, moment)) }
    }

    /// The live generation (nil `generation`), or that generation when it is live or kept.
    func storedLocked(_ name: String, generation: Int64?) -> Stored? {
        if let o = objects[name], generation == nil || generation == o.info.generation { return o }
        guard let g = generation else { return nil }
        return noncurrent[name]?.first { $0.stored.info.generation == g }?.stored
    }

    private func patchLocked(_ cur: Stored, _ patch: MetadataPatch) -> ObjectInfo {
        let i = cur.info
        let info = ObjectInfo(bucket: bucket, name: i.name, generation: i.generation, metageneration: i.metageneration + 1,
                              size: i.size, timeCreated: i.timeCreated, updated: tick(), md5Hash: i.md5Hash,
                              crc32c: i.crc32c, writable: patch.applied(to: i.writable))
        objects[i.name] = Stored(info: info, data: cur.data)
        return info
    }

    /// The real checksums, as a bucket reports them: the core verifies reads against them.
    public static func md5(_ d: Data) -> String {
        Data(Insecure.MD5.hash(data: d)).base64EncodedString()
    }

    public static func byteLess(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

    /// prefix + everything up to and including the first delimiter after it, or nil for an item.
    public static func commonPrefix(of name: String, prefix: String, delimiter: String?) -> String? {
        guard let delimiter else { return nil }
        let bytes = Array(name.utf8)
        let d = Array(delimiter.utf8)
        var i = prefix.utf8.count
        while i + d.count <= bytes.count {
            if Array(bytes[i..<(i + d.count)]) == d {
                return String(decoding: bytes[0..<(i + d.count)], as: UTF8.self)
            }
            i += 1
        }
        return nil
    }
}

/// Writes held by `MemoryStore.holdNextWrites`: how many wait now, and their release.
public final class WriteHold: @unchecked Sendable {
    private let lock = NSLock()
    private var released = false
    private var failure: StorageError?
    private var _waiting = 0
    private var _entered = 0

    /// Writes waiting at this moment / that ever reached the hold.
    public var waiting: Int { lock.withLock { _waiting } }
    public var entered: Int { lock.withLock { _entered } }

    /// Lets the held writes go on, or fail with `error`.
    public func release(failing error: StorageError? = nil) {
        lock.withLock { released = true; failure = error }
    }

    func wait() async throws {
        lock.withLock { _waiting += 1; _entered += 1 }
        defer { lock.withLock { _waiting -= 1 } }
        while true {
            if let outcome = lock.withLock({ released ? Optional(failure) : nil }) {
                if let e = outcome { throw e }
                return
            }
            if Task.isCancelled { throw StorageError.cancelled }
            if let d = OperationContext.deadline, ContinuousClock.now >= d {
                throw StorageError.timeout(message: "no answer before the deadline (held write)")
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// One request of a streamed upload's session (`MemoryStore.streams`): its start, a chunk (the
/// bytes it brought), its finish (the bytes of the last request, the total) or its cancel.
public struct StreamEvent: Sendable, Equatable {
    public enum Kind: String, Sendable { case start, chunk, finish, cancel }
    public var kind: Kind
    public var name: String
    /// The bytes the request brought: `from..<to`.
    public var from: Int64
    public var to: Int64
}

extension MemoryStore {
    /// A session of unknown size, counted as "start upload", "chunk", "finish" (which also counts
    /// as a "write" and records a `WriteCall`, as an upload does) and "cancel upload"; each can be
    /// made to fail with `failNext`. Preconditions are checked at the start and at the finish.
    public func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                                   preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        try withLock { () throws -> (any GrowingUpload)? in
            guard _streams else { return nil }
            try enter("start upload")
            guard preconditions.hold(for: objects[name]?.info) else { throw StorageError.preconditionFailed(path: name) }
            _streamEvents.append(StreamEvent(kind: .start, name: name, from: 0, to: 0))
            return MemoryGrowingUpload(store: self, name: name, path: path, metadata: metadata, preconditions: preconditions)
        }
    }

    fileprivate func streamed(_ upload: MemoryGrowingUpload, _ kind: StreamEvent.Kind, from: Int64, to: Int64) throws {
        try withLock {
            try enter(kind == .chunk ? "chunk" : kind == .finish ? "finish" : "cancel upload")
            _streamEvents.append(StreamEvent(kind: kind, name: upload.name, from: from, to: to))
        }
    }

    fileprivate func finishStream(_ upload: MemoryGrowingUpload, data: Data) throws -> ObjectInfo {
        try withLock {
            try enter("write")
            _writes.append(WriteCall(name: upload.name, data: data, metadata: upload.metadata, preconditions: upload.preconditions))
            guard upload.preconditions.hold(for: objects[upload.name]?.info) else { throw StorageError.preconditionFailed(path: upload.name) }
            return commitLocked(upload.name, data: data, metadata: upload.metadata)
        }
    }
}

final class MemoryGrowingUpload: GrowingUpload, @unchecked Sendable {
    let store: MemoryStore
    let name: String
    let path: String
    let metadata: WritableMetadata
    let preconditions: Preconditions
    private let lock = NSLock()
    private var held = Data()
    private var cancelled = false

    init(store: MemoryStore, name: String, path: String, metadata: WritableMetadata, preconditions: Preconditions) {
        self.store = store
        self.name = name
        self.path = path
        self.metadata = metadata
        self.preconditions = preconditions
    }

    var granularity: Int64 { 256 * 1024 }
    var persisted: Int64 { lock.withLock { Int64(held.count) } }

    private func bytes(_ range: Range<Int64>) throws -> Data {
        guard let h = FileHandle(forReadingAtPath: path) else { throw StorageError.invalidArgument(message: "cannot open \(path)") }
        defer { try? h.close() }
        try h.seek(toOffset: UInt64(range.lowerBound))
        let d = try h.read(upToCount: Int(range.count)) ?? Data()
        guard d.count == range.count else { throw StorageError.invalidArgument(message: "\(path) is shorter than \(range.upperBound)") }
        return d
    }

    func send(upTo end: Int64) async throws {
        precondition(end % granularity == 0)
        let from = persisted
        guard end > from else { return }
        try store.streamed(self, .chunk, from: from, to: end)
        let d = try bytes(from..<end)
        try lock.withLock { () throws in
            guard !cancelled else { throw StorageError.objectNotFound(path: "upload session of \(name)") }
            held.append(d)
        }
    }

    func finish(size: Int64) async throws -> ObjectInfo {
        let from = persisted
        try store.streamed(self, .finish, from: from, to: size)
        let rest = try bytes(from..<size)
        let all = try lock.withLock { () throws -> Data in
            guard !cancelled else { throw StorageError.objectNotFound(path: "upload session of \(name)") }
            cancelled = true
            return held + rest
        }
        return try store.finishStream(self, data: all)
    }

    func cancel() async {
        lock.withLock { cancelled = true }
        try? store.streamed(self, .cancel, from: 0, to: 0)
    }
}
