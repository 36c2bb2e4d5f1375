import Foundation
import FuseKit
import Logging
import StorageModel

/// A read-only `ObjectStore` showing a bucket as it was at one moment (docs/SEMANTICS.md
/// §10.3): listings and metadata come from one `PastSnapshot`,
/// loaded at the first call and kept for the store's life; reads fetch exactly the generation
/// live at the moment, from the store beneath. Every change is refused with EROFS. A versioned
/// listing that breaks the versioning rules (`VersionRules`) is shown as nothing: every call
/// throws its `BrokenVersionListing` (EIO to a mount), logged once at critical level.
public final class PastStore: StoreWrapper, @unchecked Sendable {
    public let base: any ObjectStore
    public let listing: any VersionListing
    public let moment: Date
    public let scope: String
    private let lock = NSLock()
    private let logger: Logger
    private var loading: Task<PastSnapshot, any Error>?

    public init(base: any ObjectStore, listing: any VersionListing, moment: Date, scope: String = "",
                logger: Logger = Logger(label: "bucketfs", factory: { _ in SwiftLogNoOpLogHandler() })) {
        self.base = base
        self.listing = listing
        self.moment = moment
        self.scope = scope
        self.logger = logger
    }

    public var wrapped: any ObjectStore { base }
    public var bucket: String { base.bucket }
    public var isLocal: Bool { base.isLocal }

    /// The snapshot, loaded once; a failed load is tried again by the next call, but a listing
    /// that breaks the rules is kept broken (the server said so, and a moment's past does not
    /// change): it is not listed again at every call.
    public func snapshot() async throws -> PastSnapshot {
        let task: Task<PastSnapshot, any Error> = lock.withLock {
            if let t = loading { return t }
            let (listing, base, scope, moment, logger) = (self.listing, self.base, self.scope, self.moment, self.logger)
            let t = Task {
                do {
                    return try await PastSnapshot.load(listing, live: base, scope: scope, moment: moment)
                } catch let broken as BrokenVersionListing {
                    logger.critical("cannot show \(base.bucket) as it was at \(RFC3339.format(moment)): \(broken); every operation fails with EIO")
                    throw broken
                }
            }
            loading = t
            return t
        }
        do {
            return try await task.value
        } catch let broken as BrokenVersionListing {
            throw broken
        } catch {
            lock.withLock { if loading == task { loading = nil } }
            throw error
        }
    }

    func covered(_ name: String) throws {
        guard name.utf8.starts(with: scope.utf8) else {
            throw StorageError.invalidArgument(message: "'\(name)' is outside '\(scope)', the prefix this view of the past covers")
        }
    }

    public func list(_ request: ListRequest) async throws -> ListPage {
        // A listing of a prefix above the scope sees the scope's part only.
        if !scope.utf8.starts(with: request.prefix.utf8) { try covered(request.prefix) }
        return try await snapshot().list(request)
    }

    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        try covered(name)
        guard let info = try await snapshot().info(name) else { throw StorageError.objectNotFound(path: name) }
        return info
    }

    /// The generation live at the moment when none is given; a given one is read as asked.
    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        if let generation { return try await base.read(name, generation: generation, range: range) }
        return try await base.read(name, generation: try await getMetadata(name).generation, range: range)
    }

    public func stream(_ name: String, generation: Int64, range: Range<Int64>,
                       deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        try await base.stream(name, generation: generation, range: range, deliver: deliver)
    }

    public func openLocal(_ name: String, generation: Int64) async throws -> Int32? {
        try await base.openLocal(name, generation: generation)
    }

    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        throw Errno.EROFS
    }

    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
                      preconditions: Preconditions) async throws -> ObjectInfo {
        throw Errno.EROFS
    }

    public func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                                   preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        throw Errno.EROFS
    }

    public func delete(_ name: String, preconditions: Preconditions) async throws { throw Errno.EROFS }

    public func copy(from source: String, sourceGeneration: Int64?, to destination: String,
                     metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        throw Errno.EROFS
    }

    public func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        .refused(message: "a view of the past is read-only")
    }

    /// A view of the past has no past of its own to show.
    public var versions: (any VersionListing)? { nil }
    /// A view of the past moves nothing and shows no folders of its own (its listings are the
    /// versioned listing's prefixes).
    public func move(from source: String, sourceGeneration: Int64, to destination: String, preconditions: Preconditions) async throws -> ObjectInfo? {
        throw Errno.EROFS
    }
    public var folders: (any FolderStore)? { nil }
    /// False whatever the store beneath does: the snapshot's listings do not bound their answers
    /// by `endOffset`, so a lookup lists the directory (from memory, with no request).
    public var listsUnderPartialNames: Bool { false }
    /// False for the same reason: a ranged listing of the snapshot would list the whole prefix.
    public var boundsListsByOffsets: Bool { false }
}
