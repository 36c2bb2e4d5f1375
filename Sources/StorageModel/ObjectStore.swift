import Foundation

/// Generation / metageneration preconditions, as the JSON API's `if*Match` parameters.
public struct Preconditions: Sendable, Equatable {
    /// `ifGenerationMatch`: 0 means "the object must not exist".
    public var ifGenerationMatch: Int64?
    public var ifGenerationNotMatch: Int64?
    public var ifMetagenerationMatch: Int64?
    public var ifMetagenerationNotMatch: Int64?

    public init(ifGenerationMatch: Int64? = nil, ifGenerationNotMatch: Int64? = nil,
                ifMetagenerationMatch: Int64? = nil, ifMetagenerationNotMatch: Int64? = nil) {
        self.ifGenerationMatch = ifGenerationMatch
        self.ifGenerationNotMatch = ifGenerationNotMatch
        self.ifMetagenerationMatch = ifMetagenerationMatch
        self.ifMetagenerationNotMatch = ifMetagenerationNotMatch
    }

    public static let none = Preconditions()
    public static let doesNotExist = Preconditions(ifGenerationMatch: 0)

    public var isEmpty: Bool { self == .none }

    /// Checks these preconditions against the current object (nil = no live object).
    /// Returns false when a 412 is due.
    public func hold(for current: ObjectInfo?) -> Bool {
        if let g = ifGenerationMatch {
            if g == 0 { if current != nil { return false } } else if current?.generation != g { return false }
        }
        if let g = ifGenerationNotMatch, let c = current, c.generation == g { return false }
        if let m = ifMetagenerationMatch {
            guard let c = current, c.metageneration == m else { return false }
        }
        if let m = ifMetagenerationNotMatch, let c = current, c.metageneration == m { return false }
        return true
    }
}

/// One `objects.list` call.
public struct ListRequest: Sendable, Equatable {
    public var prefix: String
    public var delimiter: String?
    public var maxResults: Int
    public var pageToken: String?
    /// The JSON API's `includeTrailingDelimiter`: an object named like one of the page's
    /// prefixes (a subdirectory's placeholder `p/sub/`) comes as an item too, with its metadata.
    /// A hint: a store or server that cannot do it leaves such items out, so their absence
    /// proves nothing.
    public var includeTrailingDelimiter: Bool
    /// The caller can do with the items' names: a store whose list answers carry names only
    /// (Firebase's v0), and which would otherwise read each item's metadata with a request of its
    /// own, may then answer them in `ListPage.names` and leave the listed directory's placeholder
    /// unread (`ListPage.metadataSkipped`). A store whose listings bring metadata anyway ignores it.
    public var namesOnly: Bool
    /// The JSON API's `startOffset` (inclusive) and `endOffset` (exclusive): only objects whose
    /// full names fall in [startOffset, endOffset), in UTF-8 byte order, are listed; prefixes are
    /// rolled up from those objects alone. Whether a prefix before `startOffset` is listed (some
    /// of its objects in range) servers differ: fake-gcs-server and the test stores leave it out.
    /// A store or server that cannot bound a listing ignores them: the caller checks the answer
    /// (`RangeListing`).
    public var startOffset: String?
    public var endOffset: String?
    /// Also list names equal to the prefix / placeholders `p/` as items (the JSON API does).
    public init(prefix: String = "", delimiter: String? = "/", maxResults: Int = 1000, pageToken: String? = nil,
                includeTrailingDelimiter: Bool = false, namesOnly: Bool = false,
                startOffset: String? = nil, endOffset: String? = nil) {
        self.prefix = prefix
        self.delimiter = delimiter
        self.maxResults = maxResults
        self.pageToken = pageToken
        self.includeTrailingDelimiter = includeTrailingDelimiter
        self.namesOnly = namesOnly
        self.startOffset = startOffset
        self.endOffset = endOffset
    }
}

/// One page of an `objects.list` answer, as the JSON API gives it: prefixes keep their trailing
/// delimiter; items carry full metadata.
public struct ListPage: Sendable, Equatable {
    public var prefixes: [String]
    public var items: [ObjectInfo]
    public var nextPageToken: String?
    /// Items given by their full names only, without metadata (only when the request said
    /// `namesOnly`): the caller reads an item's metadata when it needs it.
    public var names: [String]
    /// The store left metadata out (`namesOnly`): the listed directory's own placeholder was not
    /// looked for, so its absence from `items` proves nothing.
    public var metadataSkipped: Bool
    public init(prefixes: [String] = [], items: [ObjectInfo] = [], nextPageToken: String? = nil,
                names: [String] = [], metadataSkipped: Bool = false) {
        self.prefixes = prefixes
        self.items = items
        self.nextPageToken = nextPageToken
        self.names = names
        self.metadataSkipped = metadataSkipped
    }
}

/// Where the bytes of an upload come from.
public enum UploadSource: Sendable {
    case data(Data)
    /// A local file, read (and for large sizes, streamed) by the store.
    case file(path: String)

    public func size() throws -> Int64 {
        switch self {
        case .data(let d): return Int64(d.count)
        case .file(let p):
            // One stat (every upload asks; FileManager's attributes cost many times that).
            var st = stat()
            guard fstatat(AT_FDCWD, p, &st, 0) == 0 else {
                let e = errno
                throw NSError(domain: NSPOSIXErrorDomain, code: Int(e), userInfo: [NSLocalizedDescriptionKey: String(cString: strerror(e))])
            }
            return Int64(st.st_size)
        }
    }
}

/// A bucket as the JSON API shapes it. Every backend (embedded, Cloud Storage, test doubles)
/// implements this; the model facade and the filesystem core call only this.
public protocol ObjectStore: Sendable {
    /// The bucket name.
    var bucket: String { get }
    func list(_ request: ListRequest) async throws -> ListPage
    func getMetadata(_ name: String) async throws -> ObjectInfo
    func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo
    /// Reads bytes of a version (the live one when `generation` is nil). `range` is clamped to
    /// the object's size; a range starting at or past the end returns empty data.
    func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data
    func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
               preconditions: Preconditions) async throws -> ObjectInfo
    /// Starts an upload of the file at `path`, whose bytes are sent as it grows (`GrowingUpload`);
    /// nil when the store cannot stream one (it is then uploaded whole by `write`).
    func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                            preconditions: Preconditions) async throws -> (any GrowingUpload)?
    func delete(_ name: String, preconditions: Preconditions) async throws
    /// Server-side copy of the live (or given) source generation; metadata is copied unless
    /// `metadata` is given.
    func copy(from source: String, sourceGeneration: Int64?, to destination: String,
              metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo
    /// Renames an object in one atomic request (the JSON API's objects.move): generation
    /// `sourceGeneration` of `source` becomes `destination`, with the same bytes and metadata, a new
    /// generation and metageneration 1, replacing exactly what `preconditions` name there
    /// (`ifGenerationMatch=0`: nothing). nil when the store has no such request (the caller copies
    /// and deletes instead); a store that learns it from the server learns it once.
    func move(from source: String, sourceGeneration: Int64, to destination: String,
              preconditions: Preconditions) async throws -> ObjectInfo?
    /// The bucket's folders when it has a hierarchical namespace; nil for a flat bucket.
    var folders: (any FolderStore)? { get }
    /// Objects are files on this machine: a read costs no round trip, so nothing is fetched ahead.
    var isLocal: Bool { get }
    /// A local store's file of one generation's bytes, opened for reading (the caller closes the
    /// descriptor), so reads go straight to it; nil for a store with no such files.
    func openLocal(_ name: String, generation: Int64) async throws -> Int32?
    /// Hands exactly `range` of a generation to `deliver` in order, as it arrives. `deliver` may
    /// be called on a network thread and must not block; an error it throws ends the stream.
    /// On a fault after the first byte it throws, and what was delivered stays delivered, for
    /// the caller to read the rest another way.
    func stream(_ name: String, generation: Int64, range: Range<Int64>,
                deliver: @escaping @Sendable (Data) throws -> Void) async throws
    /// Whether access rules would let this user create `name` with `metadata` (its content type;
    /// no bytes yet), asked without writing anything another client could see. nil: the store
    /// has no such rules to ask (Cloud Storage's IAM and the embedded bucket: a write's refusal
    /// arrives with the write). Rules that look at the content (its size, its bytes) cannot be
    /// answered here: `.allowed` promises nothing about them.
    func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer?
    /// The store's past (`VersionListing`), or nil when it keeps or shows no old generations.
    var versions: (any VersionListing)? { get }
    /// A listing under a prefix that ends mid-name (`dir/name`, no delimiter), bounded by
    /// `endOffset`, is one request answered with the items' metadata, in UTF-8 byte order, as
    /// the JSON API answers it: a lookup then asks for a name and for what lies under `name/` at
    /// once. False (the default) for a store that would walk the whole directory for it, or
    /// answer names only (Firebase's v0).
    var listsUnderPartialNames: Bool { get }
    /// Whether a listing's answers are bounded by `startOffset`/`endOffset`, so that a directory
    /// can be listed by name ranges at once. True (the default) for the JSON API; a store that
    /// has no offsets (Firebase's v0) says false, and its listings walk the page tokens from the
    /// first (a server that ignores them is found out by its first ranged answer).
    var boundsListsByOffsets: Bool { get }
}

/// What a store's access rules say about creating an object, before any byte is sent.
public enum CreateAnswer: Sendable, Equatable {
    case allowed
    /// The rules refuse it; the server's words.
    case refused(message: String)
}

/// A store that answers from a bucket of its own (the embedded bucket, Cloud Storage, Firebase,
/// the tests' in-memory store), not by handing calls to another store. It gets the plain
/// answers below for the calls it has no use for: not local, no create rules to ask, no past,
/// no partial-name listings, a stream that is one read.
///
/// `ObjectStore` itself has no defaults, so a store that wraps another (`StoreWrapper`) must
/// answer every call: one it forgets fails to build instead of quietly answering the default
/// in place of what the wrapped store would say.
public protocol StoreBackend: ObjectStore {}

/// A store that hands calls to another (`wrapped`), changing or counting some on the way
/// (metrics, the request log, a past moment's view). It gets no defaults: every call of
/// `ObjectStore` is written out, forwarded or answered on purpose.
public protocol StoreWrapper: ObjectStore {
    /// The store the calls go to.
    var wrapped: any ObjectStore { get }
}

extension StoreBackend {
    public var isLocal: Bool { false }
    public func openLocal(_ name: String, generation: Int64) async throws -> Int32? { nil }
    public func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? { nil }
    public var versions: (any VersionListing)? { nil }
    public var listsUnderPartialNames: Bool { false }
    public var boundsListsByOffsets: Bool { true }
    /// nil: no atomic move; a rename copies and deletes.
    public func move(from source: String, sourceGeneration: Int64, to destination: String,
                     preconditions: Preconditions) async throws -> ObjectInfo? { nil }
    /// A flat bucket.
    public var folders: (any FolderStore)? { nil }
    /// One `read`, delivered whole.
    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        try deliver(try await read(name, generation: generation, range: range))
    }
}

/// A resumable upload begun before its size is known (docs/SEMANTICS.md §3.3, "Streamed
/// uploads"): a file written in order sends its bytes as the writer makes them available, and
/// the last ones, with the total size, when it is closed. The session's object name, metadata and
/// preconditions are fixed when it starts.
public protocol GrowingUpload: AnyObject, Sendable {
    /// What each `send` must end on a multiple of (256 KiB for Cloud Storage).
    var granularity: Int64 { get }
    /// Bytes the server holds.
    var persisted: Int64 { get }
    /// Sends bytes up to `end` (a multiple of `granularity`) from the file, resuming after a
    /// transient fault from what the server holds.
    func send(upTo end: Int64) async throws
    /// Sends the rest, up to `size`, with the total: the object is made, checked against the
    /// crc32c of every byte sent.
    func finish(size: Int64) async throws -> ObjectInfo
    /// Ends the session without making an object (best effort: an error is swallowed).
    func cancel() async
}

extension StoreBackend {
    /// nil: this store cannot stream an upload of unknown size; files upload whole at close.
    public func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                                   preconditions: Preconditions) async throws -> (any GrowingUpload)? { nil }
}

/// A `GrowingUpload` seen through a store wrapper: `finishing` runs around its `finish` (the
/// metrics' "write", the sign-in watch), `send` and `cancel` go through as they are.
public final class WrappedGrowingUpload: GrowingUpload {
    private let inner: any GrowingUpload
    private let finishing: @Sendable (_ finish: @Sendable () async throws -> ObjectInfo) async throws -> ObjectInfo

    public init(_ inner: any GrowingUpload,
                finishing: @escaping @Sendable (_ finish: @Sendable () async throws -> ObjectInfo) async throws -> ObjectInfo) {
        self.inner = inner
        self.finishing = finishing
    }

    public var granularity: Int64 { inner.granularity }
    public var persisted: Int64 { inner.persisted }
    public func send(upTo end: Int64) async throws { try await inner.send(upTo: end) }
    public func finish(size: Int64) async throws -> ObjectInfo {
        let inner = self.inner
        return try await finishing { try await inner.finish(size: size) }
    }
    public func cancel() async { await inner.cancel() }
}
