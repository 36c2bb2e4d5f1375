import Foundation
import StorageModel

/// The Apple SDK's `StorageMetadata`: an object's properties as the server gave them, and the
/// writable ones to send with an upload or an update. An update sends what differs from what
/// the object was read with, and every property assigned since (so `contentType = nil` on a
/// fresh `StorageMetadata()` deletes the type, as the guides say); a nil property is deleted;
/// custom keys merge, a key removed from `customMetadata` is deleted (docs/LIBRARY.md, "The Apple SDK's API").
open class StorageMetadata: NSObject, NSCopying {
    public let bucket: String
    public var cacheControl: String? { didSet { touched.insert("cacheControl") } }
    public var contentDisposition: String? { didSet { touched.insert("contentDisposition") } }
    public var contentEncoding: String? { didSet { touched.insert("contentEncoding") } }
    public var contentLanguage: String? { didSet { touched.insert("contentLanguage") } }
    public var contentType: String? { didSet { touched.insert("contentType") } }
    public let md5Hash: String?
    public let generation: Int64
    public var customMetadata: [String: String]? { didSet { touched.insert("metadata") } }
    public let metageneration: Int64
    /// The last segment of `path`.
    public internal(set) var name: String?
    /// The object's full path.
    public internal(set) var path: String?
    public let size: Int64
    public let timeCreated: Date?
    public let updated: Date?

    /// The object's properties as read, to tell what changed.
    private let initial: [String: AnyHashable]
    private var touched: Set<String> = []
    var fileType: FileType = .unknown

    enum FileType { case unknown, file, folder }

    public var isFile: Bool { fileType == .file }
    /// Never true: nothing is a folder (as in the SDK).
    public var isFolder: Bool { fileType == .folder }

    override public convenience init() {
        self.init(dictionary: [:])
    }

    /// From the server's JSON keys (`name`, `bucket`, `size`, `contentType`, `metadata`, …);
    /// numbers may be given as numbers or strings, times as RFC 3339.
    public init(dictionary: [String: AnyHashable]) {
        initial = dictionary
        bucket = dictionary["bucket"] as? String ?? ""
        cacheControl = dictionary["cacheControl"] as? String
        contentDisposition = dictionary["contentDisposition"] as? String
        contentEncoding = dictionary["contentEncoding"] as? String
        contentLanguage = dictionary["contentLanguage"] as? String
        contentType = dictionary["contentType"] as? String
        customMetadata = dictionary["metadata"] as? [String: String]
        size = Self.int(dictionary["size"])
        generation = Self.int(dictionary["generation"])
        metageneration = Self.int(dictionary["metageneration"])
        timeCreated = Self.date(dictionary["timeCreated"])
        updated = Self.date(dictionary["updated"])
        md5Hash = dictionary["md5Hash"] as? String
        if let n = dictionary["name"] as? String {
            path = n
            name = StoragePath.lastSegment(n)
        }
        super.init()
    }

    /// What a store read.
    convenience init(_ info: ObjectInfo) {
        var d: [String: AnyHashable] = [
            "bucket": info.bucket, "name": info.name, "size": info.size, "generation": info.generation,
            "metageneration": info.metageneration, "timeCreated": Self.rfc3339(info.timeCreated),
            "updated": Self.rfc3339(info.updated),
        ]
        d["md5Hash"] = info.md5Hash
        let w = info.writable
        d["cacheControl"] = w.cacheControl
        d["contentDisposition"] = w.contentDisposition
        d["contentEncoding"] = w.contentEncoding
        d["contentLanguage"] = w.contentLanguage
        d["contentType"] = w.contentType
        if !w.customMetadata.isEmpty { d["metadata"] = w.customMetadata }
        self.init(dictionary: d)
        fileType = .file
    }

    /// The metadata as the server's JSON keys.
    open func dictionaryRepresentation() -> [String: AnyHashable] {
        var d: [String: AnyHashable] = [:]
        if !bucket.isEmpty { d["bucket"] = bucket }
        d["cacheControl"] = cacheControl
        d["contentDisposition"] = contentDisposition
        d["contentEncoding"] = contentEncoding
        d["contentLanguage"] = contentLanguage
        d["contentType"] = contentType
        d["md5Hash"] = md5Hash
        if size != 0 { d["size"] = size }
        if generation != 0 { d["generation"] = "\(generation)" }
        if metageneration != 0 { d["metageneration"] = "\(metageneration)" }
        d["timeCreated"] = timeCreated.map(Self.rfc3339)
        d["updated"] = updated.map(Self.rfc3339)
        d["name"] = path
        d["metadata"] = customMetadata
        return d
    }

    // MARK: what is sent

    /// The writable properties, for an upload.
    var writable: WritableMetadata {
        WritableMetadata(cacheControl: cacheControl, contentDisposition: contentDisposition, contentEncoding: contentEncoding,
                         contentLanguage: contentLanguage, contentType: contentType, customMetadata: customMetadata ?? [:])
    }

    /// The update this metadata stands for.
    var patch: MetadataPatch {
        var p = MetadataPatch()
        func change(_ key: String, _ now: String?) -> FieldChange<String> {
            let was = initial[key] as? String
            guard touched.contains(key) || now != was else { return .keep }
            return now.map { .set($0) } ?? .remove
        }
        p.cacheControl = change("cacheControl", cacheControl)
        p.contentDisposition = change("contentDisposition", contentDisposition)
        p.contentEncoding = change("contentEncoding", contentEncoding)
        p.contentLanguage = change("contentLanguage", contentLanguage)
        p.contentType = change("contentType", contentType)
        let was = initial["metadata"] as? [String: String] ?? [:]
        let now = customMetadata ?? [:]
        for (k, v) in now where was[k] != v { p.customMetadata[k] = .some(v) }
        for k in was.keys where now[k] == nil { p.customMetadata[k] = .some(nil) }
        return p
    }

    // MARK: NSObject

    open func copy(with zone: NSZone? = nil) -> Any {
        let c = StorageMetadata(dictionary: dictionaryRepresentation())
        c.fileType = fileType
        return c
    }

    override open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? StorageMetadata else { return false }
        return other.dictionaryRepresentation() == dictionaryRepresentation()
    }

    override open var hash: Int { dictionaryRepresentation().hashValue }

    override open var description: String { "StorageMetadata \(dictionaryRepresentation())" }

    // MARK: values

    private static func int(_ v: AnyHashable?) -> Int64 {
        if let i = v as? Int64 { return i }
        if let i = v as? Int { return Int64(i) }
        if let s = v as? String { return Int64(s) ?? 0 }
        return 0
    }

    private static func date(_ v: AnyHashable?) -> Date? {
        guard let s = v as? String else { return nil }
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: s) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: s)
    }

    static func rfc3339(_ d: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: d)
    }
}
