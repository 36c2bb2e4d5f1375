import Foundation
import StorageModel

/// A store whose server adds custom metadata keys of its own to every upload
/// (`ConformanceCapabilities.addedKeyPrefixes`: storage-testbench's `x_emulator_…` and
/// `x_testbench_…` annotations), seen without those keys, so the conformance suite checks
/// everything else about custom metadata. Nothing else is changed: every call goes to `base`.
struct AddedKeysFilter: StoreWrapper {
    let base: any ObjectStore
    var wrapped: any ObjectStore { base }
    let prefixes: [String]

    var bucket: String { base.bucket }
    var isLocal: Bool { base.isLocal }
    var listsUnderPartialNames: Bool { base.listsUnderPartialNames }
    var boundsListsByOffsets: Bool { base.boundsListsByOffsets }
    var versions: (any VersionListing)? { base.versions.map { Versions(base: $0, filter: self) } }

    func clean(_ info: ObjectInfo) -> ObjectInfo {
        let custom = info.writable.customMetadata
        guard custom.keys.contains(where: added) else { return info }
        var i = info
        i.writable.customMetadata = custom.filter { !added($0.key) }
        return i
    }

    private func added(_ key: String) -> Bool { prefixes.contains { key.hasPrefix($0) } }

    func list(_ request: ListRequest) async throws -> ListPage {
        var page = try await base.list(request)
        page.items = page.items.map(clean)
        return page
    }
    func getMetadata(_ name: String) async throws -> ObjectInfo { clean(try await base.getMetadata(name)) }
    func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        clean(try await base.patchMetadata(name, patch, preconditions: preconditions))
    }
    func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        try await base.read(name, generation: generation, range: range)
    }
    func write(_ name: String, from source: UploadSource, metadata: WritableMetadata, preconditions: Preconditions) async throws -> ObjectInfo {
        clean(try await base.write(name, from: source, metadata: metadata, preconditions: preconditions))
    }
    func beginGrowingUpload(_ name: String, file path: String, metadata: WritableMetadata,
                            preconditions: Preconditions) async throws -> (any GrowingUpload)? {
        guard let upload = try await base.beginGrowingUpload(name, file: path, metadata: metadata, preconditions: preconditions) else { return nil }
        return WrappedGrowingUpload(upload) { [self] finish in clean(try await finish()) }
    }
    func delete(_ name: String, preconditions: Preconditions) async throws {
        try await base.delete(name, preconditions: preconditions)
    }
    func copy(from source: String, sourceGeneration: Int64?, to destination: String,
              metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        clean(try await base.copy(from: source, sourceGeneration: sourceGeneration, to: destination,
                                  metadata: metadata, preconditions: preconditions))
    }
    func move(from source: String, sourceGeneration: Int64, to destination: String, preconditions: Preconditions) async throws -> ObjectInfo? {
        try await base.move(from: source, sourceGeneration: sourceGeneration, to: destination, preconditions: preconditions).map(clean)
    }
    var folders: (any FolderStore)? { base.folders }
    func openLocal(_ name: String, generation: Int64) async throws -> Int32? { try await base.openLocal(name, generation: generation) }
    func stream(_ name: String, generation: Int64, range: Range<Int64>, deliver: @escaping @Sendable (Data) throws -> Void) async throws {
        try await base.stream(name, generation: generation, range: range, deliver: deliver)
    }
    func probeCreate(_ name: String, metadata: WritableMetadata) async throws -> CreateAnswer? {
        try await base.probeCreate(name, metadata: metadata)
    }

    struct Versions: VersionListing {
        let base: any VersionListing
        let filter: AddedKeysFilter
        func listVersions(_ request: ListRequest) async throws -> VersionPage {
            var page = try await base.listVersions(request)
            page.versions = page.versions.map { ObjectVersion(info: filter.clean($0.info), timeDeleted: $0.timeDeleted) }
            return page
        }
        func versioningState() async throws -> VersioningState { try await base.versioningState() }
    }
}
