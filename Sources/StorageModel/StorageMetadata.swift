import Foundation

/// A change to one writable property: leave it, set it, or delete it (JSON null).
public enum FieldChange<Value: Sendable & Equatable>: Sendable, Equatable {
    case keep
    case set(Value)
    case remove

    public var isKeep: Bool { if case .keep = self { return true } else { return false } }
}

/// The writable properties, as sent with an upload.
public struct WritableMetadata: Sendable, Equatable {
    /// Cache control, disposition, encoding and language: nil when none is set (`RareHeaders`).
    private var rare: RareHeaders?
    public var contentType: String?
    /// None or one key inline, more in a dictionary (`CustomMetadataStorage`).
    private var custom: CustomMetadataStorage

    public init(cacheControl: String? = nil, contentDisposition: String? = nil, contentEncoding: String? = nil,
                contentLanguage: String? = nil, contentType: String? = nil, customMetadata: [String: String] = [:]) {
        rare = RareHeaders.make(RareFields(cacheControl: cacheControl, contentDisposition: contentDisposition,
                                           contentEncoding: contentEncoding, contentLanguage: contentLanguage))
        self.contentType = contentType
        custom = CustomMetadataStorage(customMetadata)
    }

    public var customMetadata: [String: String] {
        get { custom.dictionary }
        set { custom = CustomMetadataStorage(newValue) }
    }

    /// One custom key's value, without making the whole map.
    public func customValue(_ key: String) -> String? { custom[key] }

    public var cacheControl: String? {
        get { rare?.fields.cacheControl }
        set { setRare(\.cacheControl, newValue) }
    }
    public var contentDisposition: String? {
        get { rare?.fields.contentDisposition }
        set { setRare(\.contentDisposition, newValue) }
    }
    public var contentEncoding: String? {
        get { rare?.fields.contentEncoding }
        set { setRare(\.contentEncoding, newValue) }
    }
    public var contentLanguage: String? {
        get { rare?.fields.contentLanguage }
        set { setRare(\.contentLanguage, newValue) }
    }

    private mutating func setRare(_ field: WritableKeyPath<RareFields, String?>, _ value: String?) {
        var f = rare?.fields ?? RareFields()
        f[keyPath: field] = value
        rare = RareHeaders.make(f)
    }

    public static func == (a: WritableMetadata, b: WritableMetadata) -> Bool {
        (a.rare?.fields ?? RareFields()) == (b.rare?.fields ?? RareFields())
            && a.contentType == b.contentType && a.customMetadata == b.customMetadata
    }
}

/// A PATCH of object metadata: only named fields are sent; `.remove` is sent as JSON null;
/// custom keys merge, a nil value deletes that key.
public struct MetadataPatch: Sendable, Equatable {
    public var cacheControl: FieldChange<String> = .keep
    public var contentDisposition: FieldChange<String> = .keep
    public var contentEncoding: FieldChange<String> = .keep
    public var contentLanguage: FieldChange<String> = .keep
    public var contentType: FieldChange<String> = .keep
    /// key → new value, or nil to delete the key. Keys not named are left alone.
    public var customMetadata: [String: String?] = [:]

    public init() {}

    public var isEmpty: Bool {
        cacheControl.isKeep && contentDisposition.isKeep && contentEncoding.isKeep && contentLanguage.isKeep
            && contentType.isKeep && customMetadata.isEmpty
    }

    /// Applies this patch to metadata (the PATCH merge rules of Cloud Storage).
    public func applied(to m: WritableMetadata) -> WritableMetadata {
        var r = m
        func apply(_ c: FieldChange<String>, _ v: inout String?) {
            switch c {
            case .keep: break
            case .set(let s): v = s
            case .remove: v = nil
            }
        }
        apply(cacheControl, &r.cacheControl)
        apply(contentDisposition, &r.contentDisposition)
        apply(contentEncoding, &r.contentEncoding)
        apply(contentLanguage, &r.contentLanguage)
        apply(contentType, &r.contentType)
        for (k, v) in customMetadata {
            if let v { r.customMetadata[k] = v } else { r.customMetadata.removeValue(forKey: k) }
        }
        return r
    }
}

/// Everything a store knows of one object version. Read-only properties cannot be set
/// from outside a store; writable ones live in `writable`.
public struct ObjectInfo: Sendable, Equatable {
    public let bucket: String
    public let name: String
    public let generation: Int64
    public let metageneration: Int64
    public let size: Int64
    public let timeCreated: Date
    public let updated: Date
    /// The MD5 as 16 bytes where it is canonical base64 (`PackedMD5`); `md5Hash` gives the text.
    private let md5: PackedMD5
    public let crc32c: String?
    public var writable: WritableMetadata

    public init(bucket: String, name: String, generation: Int64, metageneration: Int64, size: Int64,
                timeCreated: Date, updated: Date, md5Hash: String?, crc32c: String?, writable: WritableMetadata) {
        self.bucket = bucket
        self.name = name
        self.generation = generation
        self.metageneration = metageneration
        self.size = size
        self.timeCreated = timeCreated
        self.updated = updated
        md5 = PackedMD5(md5Hash)
        self.crc32c = crc32c
        self.writable = writable
    }

    public var md5Hash: String? { md5.text }

    public var contentType: String? { writable.contentType }
    public var customMetadata: [String: String] { writable.customMetadata }
    public func customValue(_ key: String) -> String? { writable.customValue(key) }
}

/// Firebase's `StorageMetadata`: read-only properties come from the server; writable ones may
/// be changed, and an update sends only what was changed (a property set to nil deletes it).
public struct StorageMetadata: Sendable, Equatable {
    public private(set) var bucket: String = ""
    public private(set) var generation: Int64 = 0
    public private(set) var metageneration: Int64 = 0
    public private(set) var fullPath: String = ""
    public private(set) var size: Int64 = 0
    public private(set) var timeCreated: Date?
    public private(set) var updated: Date?
    public private(set) var md5Hash: String?
    public private(set) var crc32c: String?

    public var name: String { StoragePath.lastSegment(fullPath) }

    public var cacheControl: String? { didSet { touched.insert(.cacheControl) } }
    public var contentDisposition: String? { didSet { touched.insert(.contentDisposition) } }
    public var contentEncoding: String? { didSet { touched.insert(.contentEncoding) } }
    public var contentLanguage: String? { didSet { touched.insert(.contentLanguage) } }
    public var contentType: String? { didSet { touched.insert(.contentType) } }
    public var customMetadata: [String: String]? { didSet { touched.insert(.customMetadata) } }

    enum Field: Hashable, Sendable { case cacheControl, contentDisposition, contentEncoding, contentLanguage, contentType, customMetadata }
    private var touched: Set<Field> = []
    private var initialCustom: [String: String] = [:]

    /// An empty metadata object for an upload or an update.
    public init() {}

    /// Metadata as read from a store.
    public init(_ info: ObjectInfo) {
        bucket = info.bucket
        generation = info.generation
        metageneration = info.metageneration
        fullPath = info.name
        size = info.size
        timeCreated = info.timeCreated
        updated = info.updated
        md5Hash = info.md5Hash
        crc32c = info.crc32c
        cacheControl = info.writable.cacheControl
        contentDisposition = info.writable.contentDisposition
        contentEncoding = info.writable.contentEncoding
        contentLanguage = info.writable.contentLanguage
        contentType = info.writable.contentType
        customMetadata = info.writable.customMetadata
        initialCustom = info.writable.customMetadata
        touched = []
    }

    /// The PATCH this metadata stands for: only changed fields; nil deletes; custom keys merge,
    /// keys removed from `customMetadata` (or all of them, if it was set to nil) are deleted.
    public var patch: MetadataPatch {
        var p = MetadataPatch()
        func change(_ f: Field, _ v: String?) -> FieldChange<String> {
            guard touched.contains(f) else { return .keep }
            return v.map { .set($0) } ?? .remove
        }
        p.cacheControl = change(.cacheControl, cacheControl)
        p.contentDisposition = change(.contentDisposition, contentDisposition)
        p.contentEncoding = change(.contentEncoding, contentEncoding)
        p.contentLanguage = change(.contentLanguage, contentLanguage)
        p.contentType = change(.contentType, contentType)
        if touched.contains(.customMetadata) {
            let now = customMetadata ?? [:]
            for (k, v) in now where initialCustom[k] != v { p.customMetadata[k] = .some(v) }
            for k in initialCustom.keys where now[k] == nil { p.customMetadata[k] = .some(nil) }
        }
        return p
    }

    /// The writable properties as they would be sent with an upload.
    public var writable: WritableMetadata {
        WritableMetadata(cacheControl: cacheControl, contentDisposition: contentDisposition,
                         contentEncoding: contentEncoding, contentLanguage: contentLanguage,
                         contentType: contentType, customMetadata: customMetadata ?? [:])
    }

    public static func == (a: StorageMetadata, b: StorageMetadata) -> Bool {
        a.bucket == b.bucket && a.generation == b.generation && a.metageneration == b.metageneration
            && a.fullPath == b.fullPath && a.size == b.size && a.timeCreated == b.timeCreated
            && a.updated == b.updated && a.md5Hash == b.md5Hash && a.crc32c == b.crc32c && a.writable == b.writable
    }
}

/// RFC 3339 timestamps with milliseconds, UTC (`2024-05-01T12:00:00.123Z`).
public enum RFC3339 {
    public static func format(_ d: Date) -> String {
        // Round to the microsecond first: a parsed ".297" is 0.29699999… as a Double, and must
        // not print as ".296".
        let us = Int64((d.timeIntervalSince1970 * 1_000_000).rounded())
        let ms = us >= 0 ? us / 1000 : -((-us + 999) / 1000)
        var secs = ms / 1000
        var milli = ms % 1000
        if milli < 0 { milli += 1000; secs -= 1 }
        var t = time_t(secs)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        // By hand: `String(format:)` goes through a locale, and every sidecar asks for this.
        func padded(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        return padded(Int(tmv.tm_year) + 1900, 4) + "-" + padded(Int(tmv.tm_mon) + 1, 2) + "-" + padded(Int(tmv.tm_mday), 2)
            + "T" + padded(Int(tmv.tm_hour), 2) + ":" + padded(Int(tmv.tm_min), 2) + ":" + padded(Int(tmv.tm_sec), 2)
            + "." + padded(Int(milli), 3) + "Z"
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`.
    /// Read over the string's own bytes, the seconds counted by hand (a listing parses two
    /// stamps per object; an array and `timegm` each were most of that).
    public static func parse(_ s: String) -> Date? {
        var s = s
        return s.withUTF8 { parse(utf8: $0) }
    }

    static func parse(utf8 b: UnsafeBufferPointer<UInt8>) -> Date? {
        func num(_ from: Int, _ len: Int) -> Int? {
            guard from + len <= b.count else { return nil }
            var v = 0
            for i in from..<(from + len) {
                let c = b[i]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int(c - 48)
            }
            return v
        }
        guard b.count >= 20, let y = num(0, 4), b[4] == 45, let mo = num(5, 2), b[7] == 45, let d = num(8, 2),
              b[10] == 84 || b[10] == 116 || b[10] == 32, let h = num(11, 2), b[13] == 58, let mi = num(14, 2),
              b[16] == 58, let se = num(17, 2) else { return nil }
        var i = 19
        var frac = 0.0
        if i < b.count, b[i] == 46 {
            i += 1
            var scale = 0.1
            while i < b.count, b[i] >= 48, b[i] <= 57 { frac += Double(b[i] - 48) * scale; scale /= 10; i += 1 }
        }
        var offset = 0
        guard i < b.count else { return nil }
        if b[i] == 90 || b[i] == 122 { i += 1 } else if b[i] == 43 || b[i] == 45 {
            guard let oh = num(i + 1, 2), let om = num(i + 4, 2) else { return nil }
            offset = (oh * 3600 + om * 60) * (b[i] == 43 ? 1 : -1)
            i += 6
        } else { return nil }
        guard i == b.count else { return nil }
        let t: Int
        if (1...12).contains(mo) {
            t = daysSinceEpoch(year: y, month: mo, day: d) * 86_400 + h * 3600 + mi * 60 + se
        } else {  // timegm carries a month out of range into the year, as it always did here
            var tmv = tm()
            tmv.tm_year = Int32(y - 1900); tmv.tm_mon = Int32(mo - 1); tmv.tm_mday = Int32(d)
            tmv.tm_hour = Int32(h); tmv.tm_min = Int32(mi); tmv.tm_sec = Int32(se)
            t = timegm(&tmv)
        }
        return Date(timeIntervalSince1970: Double(t - offset) + frac)
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (a day past the
    /// month's end runs into the next, as with `timegm`): Howard Hinnant's `days_from_civil`.
    static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
