import Foundation

/// One generation of a name, as a versioned listing (`objects.list` with `versions=true`) gives
/// it: live, or kept after an overwrite or a delete (noncurrent). docs/SEMANTICS.md "Versions".
public struct ObjectVersion: Sendable, Equatable {
    /// That generation's metadata: its generation number, size, `timeCreated`, hashes and
    /// writable metadata (content type, custom metadata) as they were.
    public var info: ObjectInfo
    /// When this generation stopped being live (overwritten or deleted); nil while it is live.
    public var timeDeleted: Date?

    public init(info: ObjectInfo, timeDeleted: Date?) {
        self.info = info
        self.timeDeleted = timeDeleted
    }

    public var isLive: Bool { timeDeleted == nil }

    /// Whether this generation was the live one at `moment`: created at or before it, and not
    /// yet overwritten or deleted.
    public func wasLive(at moment: Date) -> Bool {
        guard info.timeCreated <= moment else { return false }
        guard let gone = timeDeleted else { return true }
        return gone > moment
    }
}

/// One page of a versioned listing. Versions come sorted by name, then by generation; prefixes
/// are those of any version, live or not (as the JSON API gives them with `versions=true`).
public struct VersionPage: Sendable, Equatable {
    public var prefixes: [String]
    public var versions: [ObjectVersion]
    public var nextPageToken: String?

    public init(prefixes: [String] = [], versions: [ObjectVersion] = [], nextPageToken: String? = nil) {
        self.prefixes = prefixes
        self.versions = versions
        self.nextPageToken = nextPageToken
    }
}

/// What a bucket keeps of the past.
public struct VersioningState: Sendable, Equatable {
    /// Object versioning is on: overwritten and deleted generations are kept (until a
    /// retention rule removes them).
    public var enabled: Bool
    /// A soft-delete policy's retention, when the bucket has one.
    public var softDeleteRetention: TimeInterval?

    public init(enabled: Bool, softDeleteRetention: TimeInterval? = nil) {
        self.enabled = enabled
        self.softDeleteRetention = softDeleteRetention
    }
}

/// A store that can show its past: `ObjectStore.versions` returns one for stores that keep and
/// list old generations, nil for those that cannot (Firebase's v0 API). Reading one generation
/// is `ObjectStore.read`/`stream` with its number; making an old generation live again is
/// `ObjectStore.copy` with `sourceGeneration`.
public protocol VersionListing: Sendable {
    /// `objects.list` with `versions=true`.
    func listVersions(_ request: ListRequest) async throws -> VersionPage
    /// Whether the bucket keeps old generations now.
    func versioningState() async throws -> VersioningState
}
