import Foundation
import GCSStore
import Logging
import ObjectStores
import StorageModel

/// Where a command's objects live: `gs://BUCKET[/PREFIX]` or an embedded bucket directory
/// (`file://PATH` or a plain path).
enum Source {
    case gcs(bucket: String, path: String)
    case embedded(directory: String, path: String)

    static let embeddedMarker = "bucket.sqlite"

    /// For library commands: `SOURCE[/path]`. A local path is split at the nearest ancestor that
    /// holds an embedded bucket; with none, the whole path is the bucket directory.
    static func parse(_ s: String, splitLocal: Bool) throws -> Source {
        if s.hasPrefix("gs://") {
            let (b, p) = try Storage.parse(url: s)
            return .gcs(bucket: b, path: p)
        }
        if s.hasPrefix("http://") || s.hasPrefix("https://") {
            let (b, p) = try Storage.parse(url: s)
            return .gcs(bucket: b, path: p)
        }
        var local = s
        if local.hasPrefix("file://") { local = String(local.dropFirst(7)) }
        if local.contains("://") { throw ValidationErrorText("unsupported source '\(s)': use gs://BUCKET[/PREFIX], file://PATH or a directory") }
        let abs = URL(fileURLWithPath: local).standardizedFileURL.path
        guard splitLocal else { return .embedded(directory: abs, path: "") }
        var dir = abs
        var rest: [String] = []
        while true {
            if FileManager.default.fileExists(atPath: dir + "/" + embeddedMarker) {
                return .embedded(directory: dir, path: rest.reversed().joined(separator: "/"))
            }
            guard dir != "/", let cut = dir.lastIndex(of: "/") else { break }
            rest.append(String(dir[dir.index(after: cut)...]))
            dir = cut == dir.startIndex ? "/" : String(dir[..<cut])
        }
        throw ValidationErrorText("no embedded bucket at or above \(abs) (a directory holding \(embeddedMarker)); create one with `bucketfs mb DIR`")
    }

    var path: String {
        switch self {
        case .gcs(_, let p), .embedded(_, let p): return p
        }
    }
}

struct ValidationErrorText: Error, CustomStringConvertible {
    let description: String
    init(_ s: String) { description = s }
}

/// Opens the store of a source. For gs:// with a path, `prefixMount` makes the path the store's
/// prefix (mounting a sub-tree) instead of an object path.
func openStore(_ source: Source, gcs: GCSOptions, logger: Logger, prefixMount: Bool = false,
               tuning: GCSStore.Tuning = GCSStore.Tuning(), deadline: Duration = .seconds(60)) throws -> any ObjectStore {
    switch source {
    case .embedded(let dir, _):
        return try EmbeddedStore(directory: dir, bucket: "local")
    case .gcs(let bucket, let path):
        let env = ProcessInfo.processInfo.environment
        let creds = CredentialSource.resolve(anonymous: gcs.anonymous, token: gcs.token, keyFile: gcs.keyFile,
                                             environment: env, explicitEndpoint: gcs.endpoint != nil)
        let endpoint = try SourceCheck.endpoint(option: gcs.endpoint, environment: env)
        return try GCSStore(bucket: bucket, prefix: prefixMount ? path : "", endpoint: endpoint,
                            credentials: creds, logger: logger, requestTimeout: min(.seconds(30), deadline),
                            deadline: deadline, tuning: tuning)
    }
}
