import CloudHTTP
import Foundation
import NIOCore
import StorageModel

/// A Cloud Storage bucket's past (docs/SEMANTICS.md "Versions"): `objects.list` with
/// `versions=true` and `buckets.get`'s `versioning` and `softDeletePolicy`. Reads of a generation
/// are `read`/`stream` with its number (`generation=`), a restore is `copy` with
/// `sourceGeneration` (a rewrite) guarded by the caller's `ifGenerationMatch`.
///
/// Soft-deleted generations (a bucket's soft-delete policy) are not shown: they can be listed
/// (`softDeleted=true`) but not read, only restored (`objects.restore`), which makes them live
/// again; `versioningState` reports the policy's retention so a caller can name it.
extension GCSStore: VersionListing {
    public var versions: (any VersionListing)? { self }

    /// Fields of a versioned listing: those of `list`, and each generation's `timeDeleted`.
    static let versionListFields = "items(\(GCSJSONAPI.objectFields),timeDeleted),prefixes,nextPageToken"

    public func listVersions(_ request: ListRequest) async throws -> VersionPage {
        let full = prefix + request.prefix
        let url = bucketPath + CloudURL.query([
            ("prefix", full.isEmpty ? nil : full), ("delimiter", request.delimiter), ("versions", "true"),
            ("maxResults", String(request.maxResults)), ("pageToken", request.pageToken),
            ("includeTrailingDelimiter", request.includeTrailingDelimiter && request.delimiter != nil ? "true" : nil),
            ("fields", Self.versionListFields),
        ])
        let r = try await transport.send("list", path: "", idempotent: true, CloudRequest(.GET, url))
        return try Self.versionPage(r.data, status: r.status, stripPrefix: prefix)
    }

    /// A versioned list answer → `VersionPage`, `stripPrefix` removed from names and prefixes; the
    /// bucket prefix's own placeholder (an empty name) is the root, not a version.
    package static func versionPage(_ data: Data, status: Int, stripPrefix: String) throws -> VersionPage {
        let decoded: VersionPageJSON
        do {
            decoded = try JSONDecoder().decode(VersionPageJSON.self, from: data)
        } catch {
            throw StorageError.unknown(status: status, message: "the server's versioned list answer is not a list page: \(error)")
        }
        var page = VersionPage()
        for p in decoded.prefixes ?? [] {
            let stripped = p.hasPrefix(stripPrefix) ? String(p.dropFirst(stripPrefix.count)) : p
            if !stripped.isEmpty { page.prefixes.append(stripped) }
        }
        let strings = Interner()
        for item in decoded.items ?? [] {
            let info = try item.info(stripPrefix: stripPrefix, interning: strings)
            if info.name.isEmpty { continue }
            page.versions.append(ObjectVersion(info: info, timeDeleted: item.timeDeleted.flatMap(RFC3339.parse)))
        }
        if let t = decoded.nextPageToken, !t.isEmpty { page.nextPageToken = t }
        return page
    }

    /// `buckets.get` with the versioning and soft-delete fields. A server that sends neither
    /// keeps nothing as far as this store can tell: `enabled == false`.
    public func versioningState() async throws -> VersioningState {
        let url = "\(endpoint)/storage/v1/b/\(CloudURL.segment(bucket))" + CloudURL.query([("fields", "versioning,softDeletePolicy")])
        let r = try await transport.send("get", path: "", idempotent: true, CloudRequest(.GET, url))
        return try Self.versioningState(r.data, status: r.status)
    }

    /// The metadata of a generation, live or noncurrent (the live one when nil).
    func getMetadata(_ name: String, generation: Int64?) async throws -> ObjectInfo {
        let url = objectURL(name) + CloudURL.query([("generation", generation.map(String.init)),
                                                      ("fields", GCSJSONAPI.objectFields)])
        return try parseObject(try await transport.send("get", path: name, idempotent: true, CloudRequest(.GET, url)))
    }

    package static func versioningState(_ data: Data, status: Int) throws -> VersioningState {
        let b: BucketVersioningJSON
        do { b = try JSONDecoder().decode(BucketVersioningJSON.self, from: data) } catch {
            throw StorageError.unknown(status: status, message: "the server's bucket answer is not a bucket: \(error)")
        }
        let retention = b.softDeletePolicy?.retentionDurationSeconds?.value ?? 0
        return VersioningState(enabled: b.versioning?.enabled ?? false,
                               softDeleteRetention: retention > 0 ? TimeInterval(retention) : nil)
    }
}
