import FirebaseStore
import Foundation
import GCSStore
import Logging
import ObjectStores
import StorageModel

/// Where a command's objects live: `gs://BUCKET[/PREFIX]`, `firebase://BUCKET[/PREFIX]` (or a v0
/// URL, `https://firebasestorage.googleapis.com/v0/b/BUCKET/o/PATH`), or an embedded bucket
/// directory (`file://PATH` or a plain path).
enum Source {
    case gcs(bucket: String, path: String)
    /// `origin` is the scheme://host[:port] of a v0 URL on another host than production's (an
    /// emulator's URL, say), which then is the storage endpoint unless --endpoint says otherwise.
    case firebase(bucket: String, path: String, origin: String?)
    case embedded(directory: String, path: String)

    static let firebaseProductionHost = "firebasestorage.googleapis.com"

    static let embeddedMarker = "bucket.sqlite"

    /// For library commands: `SOURCE[/path]`. A local path is split at the nearest ancestor that
    /// holds an embedded bucket; with none, the whole path is the bucket directory.
    static func parse(_ s: String, splitLocal: Bool) throws -> Source {
        if s.hasPrefix("gs://") {
            let (b, p) = try Storage.parse(url: s)
            return .gcs(bucket: b, path: p)
        }
        if s.hasPrefix("firebase://") {
            let rest = s.dropFirst("firebase://".count)
            let bucket = rest.prefix { $0 != "/" }
            guard !bucket.isEmpty else { throw ValidationErrorText("no bucket in '\(s)': use firebase://BUCKET[/PREFIX], e.g. firebase://my-app.firebasestorage.app") }
            try BucketName.validate(String(bucket))
            return .firebase(bucket: String(bucket), path: StoragePath.normalize(String(rest.dropFirst(bucket.count))), origin: nil)
        }
        if s.lowercased().hasPrefix("http://") || s.lowercased().hasPrefix("https://") {
            // A v0 URL, as the Firebase SDKs and consoles write them: a firebase:// source.
            let (b, p) = try Storage.parse(url: s)
            guard let c = URLComponents(string: s), let host = c.host else { throw ValidationErrorText("not a URL: '\(s)'") }
            let origin = host.lowercased() == firebaseProductionHost && c.port == nil ? nil
                : "\(c.scheme!.lowercased())://\(host)\(c.port.map { ":\($0)" } ?? "")"
            return .firebase(bucket: b, path: p, origin: origin)
        }
        var local = s
        if local.hasPrefix("file://") { local = String(local.dropFirst(7)) }
        if local.contains("://") { throw ValidationErrorText("unsupported source '\(s)': use gs://BUCKET[/PREFIX], firebase://BUCKET[/PREFIX], file://PATH or a directory") }
        let abs = URL(fileURLWithPath: local).standardizedFileURL.path
        let found = enclosingBucket(of: abs)
        guard splitLocal else {
            // A bucket directory (made if missing), never a bucket inside another: a path inside
            // an embedded bucket is one of its prefixes, which a mount or `mb` cannot take
            // (docs/SEMANTICS.md §2, "The embedded bucket").
            if let (dir, path) = found, !path.isEmpty {
                throw ValidationErrorText("\(abs) is inside the embedded bucket \(dir) (its folder '\(path)'), not a bucket of its own: "
                    + "mount the bucket (bucketfs mount \(dir) MOUNTPOINT) and use \(path)/ inside the mount, or name a directory outside it")
            }
            return .embedded(directory: abs, path: "")
        }
        if let (dir, path) = found { return .embedded(directory: dir, path: path) }
        throw ValidationErrorText("no embedded bucket at or above \(abs) (a directory holding \(embeddedMarker)); create one with `bucketfs mb DIR`")
    }

    /// The nearest directory at or above `abs` that holds an embedded bucket, and the path below it.
    static func enclosingBucket(of abs: String) -> (directory: String, path: String)? {
        var dir = abs
        var rest: [String] = []
        while true {
            if FileManager.default.fileExists(atPath: dir + "/" + embeddedMarker) {
                return (dir, rest.reversed().joined(separator: "/"))
            }
            guard dir != "/", let cut = dir.lastIndex(of: "/") else { return nil }
            rest.append(String(dir[dir.index(after: cut)...]))
            dir = cut == dir.startIndex ? "/" : String(dir[..<cut])
        }
    }

    var path: String {
        switch self {
        case .gcs(_, let p), .firebase(_, let p, _), .embedded(_, let p): return p
        }
    }

    /// How the source is written back in messages: `firebase://BUCKET/PATH` and so on.
    var display: String {
        switch self {
        case .gcs(let b, let p): return "gs://\(b)" + (p.isEmpty ? "" : "/\(p)")
        case .firebase(let b, let p, _): return "firebase://\(b)" + (p.isEmpty ? "" : "/\(p)")
        case .embedded(let d, let p): return d + (p.isEmpty ? "" : "/\(p)")
        }
    }
}

struct ValidationErrorText: Error, CustomStringConvertible {
    let description: String
    init(_ s: String) { description = s }
}

/// Opens the store of a source. For gs:// and firebase:// with a path, `prefixMount` makes the
/// path the store's prefix (mounting a sub-tree) instead of an object path.
func openStore(_ source: Source, gcs: GCSOptions, firebase: FirebaseOptions, logger: Logger,
               prefixMount: Bool = false, tuning: GCSStore.Tuning = GCSStore.Tuning(),
               deadline: Duration = .seconds(60)) throws -> any ObjectStore {
    var tuning = tuning
    if case .embedded = source {} else {
        tuning.trust = try gcs.trustRoots()
        tuning.httpVersion = gcs.httpVersion
    }
    switch source {
    case .firebase(let bucket, let path, let origin):
        let access = try FirebaseAccess.resolve(bucket: bucket, origin: origin, gcs: gcs, firebase: firebase,
                                                environment: ProcessInfo.processInfo.environment, logger: logger)
        return openFirebaseStore(access, prefix: prefixMount ? path : "", logger: logger, tuning: tuning, deadline: deadline)
    case .embedded(let dir, _):
        return try EmbeddedStore(directory: dir, bucket: "local")
    case .gcs(let bucket, let path):
        let env = ProcessInfo.processInfo.environment
        let creds = gcs.credentialChain.resolve(environment: env).source
        let endpoint = try SourceCheck.endpoint(option: gcs.endpoint, environment: env)
        return try GCSStore(bucket: bucket, prefix: prefixMount ? path : "", endpoint: endpoint,
                            credentials: creds, logger: logger, requestTimeout: min(.seconds(30), deadline),
                            deadline: deadline, tuning: tuning, billingProject: gcs.billingProject)
    }
}

/// The v0 store of a resolved firebase:// source, with the mount's tuning.
func openFirebaseStore(_ access: FirebaseAccess, prefix: String, logger: Logger, tuning: GCSStore.Tuning = GCSStore.Tuning(),
                       deadline: Duration = .seconds(60)) -> FirebaseStore {
    var t = FirebaseStore.Tuning()
    t.idleTimeout = tuning.idleTimeout
    t.receiveBuffer = tuning.receiveBuffer
    t.trust = tuning.trust
    t.httpVersion = tuning.httpVersion
    return FirebaseStore(bucket: access.bucket, prefix: prefix, endpoints: access.endpoints, tokens: access.tokens,
                         logger: logger, requestTimeout: min(.seconds(30), deadline), deadline: deadline,
                         maxConnections: tuning.maxConnectionsPerHost, tuning: t)
}
