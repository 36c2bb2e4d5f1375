import Foundation
import StorageModel

/// The names of a bucket (or of a prefix of it) as they were at one moment, built from one
/// versioned listing (docs/SEMANTICS.md §10.3): each name with the generation that was live
/// then, sorted in UTF-8 byte order. A moment in the past never changes, so a snapshot is built
/// once and kept. Directories are derived from these names alone: a prefix exists when a name
/// live at the moment lies under it, whatever prefixes the versioned listing gave (those include
/// names that were dead at the moment, or created after it).
public struct PastSnapshot: Sendable {
    public let moment: Date
    /// The prefix the snapshot covers ("" for the whole bucket).
    public let scope: String
    /// One entry per name live at `moment`, sorted by name in UTF-8 byte order.
    public let entries: [ObjectInfo]
    /// The versions the listing gave, live at the moment or not, and the requests it took.
    public let versionsSeen: Int
    public let requests: Int

    public init(moment: Date, scope: String, versions: [ObjectVersion], requests: Int) {
        self.moment = moment
        self.scope = scope
        var chosen: [String: ObjectInfo] = [:]
        for v in versions where v.wasLive(at: moment) && v.info.name.utf8.starts(with: scope.utf8) {
            // Two generations live at once: only in fake-gcs-server's gap of microseconds between
            // a new generation's timeCreated and the old one's timeDeleted (docs/SEMANTICS.md
            // §10.1); the later wins. (Generations without a timeDeleted are `PastListing`'s.)
            if let had = chosen[v.info.name], had.generation > v.info.generation { continue }
            chosen[v.info.name] = v.info
        }
        entries = chosen.values.sorted { Self.byteLess($0.name, $1.name) }
        versionsSeen = versions.count
        self.requests = requests
    }

    /// Lists every version under `scope` (no delimiter: a directory's existence is decided from
    /// the names live at the moment, not from the listing's prefixes), ⌈versions/1000⌉ requests,
    /// and checks it against the live names under `scope` (`PastListing`): ⌈names/1000⌉ more.
    /// A listing that breaks the versioning rules throws `BrokenVersionListing`.
    public static func load(_ listing: any VersionListing, live store: any ObjectStore, scope: String, moment: Date,
                            pageSize: Int = 1000) async throws -> PastSnapshot {
        let checked = try await PastListing.load(listing, live: store, prefix: scope, pageSize: pageSize)
        return PastSnapshot(moment: moment, scope: scope, versions: checked.versions, requests: checked.requests)
    }

    public static func byteLess(_ a: String, _ b: String) -> Bool { NameOrder.precedes(a, b) }

    /// The first index whose name is not byte-less than `key`.
    func lowerBound(_ key: String) -> Int {
        var lo = 0, hi = entries.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if Self.byteLess(entries[mid].name, key) { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// The generation of `name` live at the moment, if any.
    public func info(_ name: String) -> ObjectInfo? {
        let i = lowerBound(name)
        return i < entries.count && entries[i].name == name ? entries[i] : nil
    }

    /// Every entry under `prefix`, in order.
    public func under(_ prefix: String) -> ArraySlice<ObjectInfo> {
        var end = lowerBound(prefix)
        let start = end
        while end < entries.count, entries[end].name.utf8.starts(with: prefix.utf8) { end += 1 }
        return entries[start..<end]
    }

    /// An `objects.list` answer over the names live at the moment, shaped as the JSON API shapes
    /// a live one (prefixes and items share `maxResults`; a token only when more remain; the
    /// object named like the listed prefix is an item of it; `includeTrailingDelimiter` adds a
    /// prefix's own object as an item).
    public func list(_ request: ListRequest) throws -> ListPage {
        let prefix = request.prefix
        let delimiter = request.delimiter.flatMap { $0.isEmpty ? nil : Array($0.utf8) }
        let limit = min(max(request.maxResults, 1), 1000)
        var i = lowerBound(prefix)
        var skipUnder: String?
        if let token = request.pageToken {
            guard let d = Data(base64Encoded: token), let key = String(data: d, encoding: .utf8), key.count >= 2 else {
                throw StorageError.invalidArgument(message: "invalid page token")
            }
            let after = String(key.dropFirst(2))
            i = lowerBound(after)
            if i < entries.count, entries[i].name == after { i += 1 }
            if key.hasPrefix("P:") { skipUnder = after }
        }
        var page = ListPage()
        var emitted = 0
        var lastKey = ""
        while i < entries.count, entries[i].name.utf8.starts(with: prefix.utf8) {
            let name = entries[i].name
            if let skip = skipUnder, name.utf8.starts(with: skip.utf8) { i += 1; continue }
            if emitted == limit {
                page.nextPageToken = Data(lastKey.utf8).base64EncodedString()
                return page
            }
            if let delimiter, let cp = Self.commonPrefix(of: name, prefix: prefix, delimiter: delimiter) {
                page.prefixes.append(cp)
                if request.includeTrailingDelimiter, name == cp { page.items.append(entries[i]) }
                skipUnder = cp
                lastKey = "P:" + cp
            } else {
                page.items.append(entries[i])
                lastKey = "I:" + name
            }
            emitted += 1
            i += 1
        }
        return page
    }

    /// prefix + the rest of `name` up to and including the first delimiter after the prefix, or
    /// nil when the rest holds none (an item of this listing).
    static func commonPrefix(of name: String, prefix: String, delimiter: [UInt8]) -> String? {
        let bytes = Array(name.utf8)
        var i = prefix.utf8.count
        while i + delimiter.count <= bytes.count {
            if Array(bytes[i..<(i + delimiter.count)]) == delimiter {
                return String(decoding: bytes[0..<(i + delimiter.count)], as: UTF8.self)
            }
            i += 1
        }
        return nil
    }
}
