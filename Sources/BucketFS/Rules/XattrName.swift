import StorageModel

/// How an extended attribute name maps onto object metadata (docs/SEMANTICS.md §4). Pure rules, no I/O.
public enum XattrName: Equatable, Sendable {
    /// `user.<key>`: customMetadata[key].
    case custom(String)
    /// `user.storage.<writable property>`.
    case writable(WritableProperty)
    /// `user.storage.<read-only property>`.
    case readOnly(String)
    /// A custom key the mount never shows or sets (secrets, mtime keys, `storage.` names).
    case hidden(String)
    /// `trusted.*` and `security.capability`: answered locally (absent), no request.
    case local
    /// `user.` with no key: never a valid name (EINVAL to set, ENODATA to get).
    case emptyKey
    /// Anything else, `system.*` and `security.*` but `security.capability` included: not
    /// supported (ENOTSUP to get and to set). `ls -l` asks for `security.selinux` and
    /// `system.posix_acl_access` once per file, and stops asking on a filesystem that answers
    /// ENOTSUP: a request each for a whole listing instead of two a file (docs/SEMANTICS.md §4).
    case unsupported

    public enum WritableProperty: String, CaseIterable, Sendable {
        case contentType, cacheControl, contentDisposition, contentEncoding, contentLanguage
    }

    public static let readOnlyProperties = ["md5Hash", "crc32c", "generation", "metageneration", "size",
                                            "timeCreated", "updated", "bucket", "fullPath", "name"]

    /// The custom-metadata key that carries the file's mtime (gsutil's convention).
    public static let mtimeKey = "goog-reserved-file-mtime"

    /// Custom keys that stay hidden: a bearer secret and the mtime, POSIX and symlink keys that
    /// `stat` and `readlink` show (goog-reserved-posix-*, goog-reserved-file-is-symlink, gcsfuse's).
    public static func isHiddenKey(_ key: String) -> Bool {
        key == "firebaseStorageDownloadTokens" || key.hasPrefix("goog-reserved-") || key == "gcsfuse_mtime"
            || key == "gcsfuse_symlink_target"
            || key == "mtime" || key.hasPrefix("storage.")
    }

    public init(_ name: String) {
        if name.hasPrefix("system.") || (name.hasPrefix("security.") && name != "security.capability") {
            self = .unsupported
            return
        }
        if name.hasPrefix("security.") || name.hasPrefix("system.") || name.hasPrefix("trusted.") {
            self = .local
            return
        }
        guard name.hasPrefix("user.") else { self = .unsupported; return }
        let key = String(name.dropFirst(5))
        if key.hasPrefix("storage.") {
            let prop = String(key.dropFirst(8))
            if let w = WritableProperty(rawValue: prop) { self = .writable(w) }
            else if Self.readOnlyProperties.contains(prop) { self = .readOnly(prop) }
            else { self = .hidden(key) }
            return
        }
        if key.isEmpty { self = .emptyKey; return }
        self = Self.isHiddenKey(key) ? .hidden(key) : .custom(key)
    }

    /// The value of this attribute for an object, nil when it has none.
    public func value(in info: ObjectInfo) -> String? {
        switch self {
        case .custom(let k): return info.customValue(k)
        case .writable(let p): return p.get(info.writable)
        case .readOnly(let p):
            switch p {
            case "md5Hash": return info.md5Hash
            case "crc32c": return info.crc32c
            case "generation": return String(info.generation)
            case "metageneration": return String(info.metageneration)
            case "size": return String(info.size)
            case "timeCreated": return RFC3339.format(info.timeCreated)
            case "updated": return RFC3339.format(info.updated)
            case "bucket": return info.bucket
            case "fullPath": return info.name.hasSuffix("/") ? String(info.name.dropLast()) : info.name
            case "name": return StoragePath.lastSegment(info.name.hasSuffix("/") ? String(info.name.dropLast()) : info.name)
            default: return nil
            }
        case .hidden, .local, .unsupported, .emptyKey: return nil
        }
    }

    /// The names `listxattr` shows: visible custom keys and the writable properties that are set
    /// (and that `shown` keeps: the caller leaves out values every object has anyway).
    public static func listed(for m: WritableMetadata,
                              where shown: (WritableProperty, String) -> Bool = { _, _ in true }) -> [String] {
        var names = m.customMetadata.keys.filter { !isHiddenKey($0) }.sorted().map { "user." + $0 }
        for p in WritableProperty.allCases {
            if let v = p.get(m), shown(p, v) { names.append("user.storage." + p.rawValue) }
        }
        return names
    }
}

extension XattrName.WritableProperty {
    public func get(_ m: WritableMetadata) -> String? {
        switch self {
        case .contentType: return m.contentType
        case .cacheControl: return m.cacheControl
        case .contentDisposition: return m.contentDisposition
        case .contentEncoding: return m.contentEncoding
        case .contentLanguage: return m.contentLanguage
        }
    }

    public func set(_ m: inout WritableMetadata, _ v: String?) {
        switch self {
        case .contentType: m.contentType = v
        case .cacheControl: m.cacheControl = v
        case .contentDisposition: m.contentDisposition = v
        case .contentEncoding: m.contentEncoding = v
        case .contentLanguage: m.contentLanguage = v
        }
    }

    public func change(_ p: inout MetadataPatch, _ v: String?) {
        let c: FieldChange<String> = v.map { .set($0) } ?? .remove
        switch self {
        case .contentType: p.contentType = c
        case .cacheControl: p.cacheControl = c
        case .contentDisposition: p.contentDisposition = c
        case .contentEncoding: p.contentEncoding = c
        case .contentLanguage: p.contentLanguage = c
        }
    }
}

/// The PATCH a custom-metadata change costs: the whole map as it should become, removed keys as
/// null, so a server that replaces instead of merging still ends up right.
public func customMetadataPatch(from old: [String: String], to new: [String: String]) -> MetadataPatch {
    var p = MetadataPatch()
    for (k, v) in new { p.customMetadata[k] = .some(v) }
    for k in old.keys where new[k] == nil { p.customMetadata[k] = .some(nil) }
    return p
}
