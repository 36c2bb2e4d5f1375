import Foundation
import StorageModel

/// The versioned listing of a `MemoryStore` made with `versioning: .on` (or `.off`), as the JSON
/// API's `objects.list` with `versions=true` gives it: every kept generation of every name,
/// sorted by name then generation, `maxResults` counting versions and prefixes together, page
/// tokens only when more remain, and prefixes of any version (a folder whose objects were all
/// deleted still shows). Counted, recorded and faulted as a "list" request.
extension MemoryStore: VersionListing {
    public var versions: (any VersionListing)? { versioning == .absent ? nil : self }

    public func versioningState() async throws -> VersioningState {
        VersioningState(enabled: versioning == .on)
    }

    /// Every kept generation of `name`, oldest first (not counted).
    public func keptVersions(_ name: String) -> [ObjectVersion] {
        withLock { allVersionsLocked(name) }
    }

    private func allVersionsLocked(_ name: String) -> [ObjectVersion] {
        var out = (noncurrent[name] ?? []).map { ObjectVersion(info: $0.stored.info, timeDeleted: $0.timeDeleted) }
        if let live = objects[name] { out.append(ObjectVersion(info: live.info, timeDeleted: nil)) }
        return out.sorted { $0.info.generation < $1.info.generation }
    }

    public func listVersions(_ request: ListRequest) async throws -> VersionPage {
        try withLock {
            try enter("list")
            _lists.append(request)
            let limit = min(max(request.maxResults, 1), 1000)
            let delimiter = request.delimiter.flatMap { $0.isEmpty ? nil : $0 }
            let names = Set(objects.keys).union(noncurrent.keys)
                .filter { $0.utf8.starts(with: request.prefix.utf8) }
                .sorted(by: Self.byteLess)
            // Every entry of the whole answer in order: a prefix (generation nil) or one version.
            var entries: [(key: String, generation: Int64?, version: ObjectVersion?)] = []
            var seenPrefixes = Set<String>()
            for name in names {
                if let cp = Self.commonPrefix(of: name, prefix: request.prefix, delimiter: delimiter) {
                    if seenPrefixes.insert(cp).inserted { entries.append((cp, nil, nil)) }
                } else {
                    for v in allVersionsLocked(name) { entries.append((name, v.info.generation, v)) }
                }
            }
            var start = 0
            if let token = request.pageToken {
                guard let d = Data(base64Encoded: token), let text = String(data: d, encoding: .utf8),
                      let after = Self.versionCursor(text) else {
                    throw StorageError.invalidArgument(message: "invalid page token")
                }
                start = entries.firstIndex { Self.cursorLess(after, ($0.key, $0.generation)) } ?? entries.count
            }
            let end = min(entries.count, start + limit)
            var page = VersionPage()
            for e in entries[start..<end] {
                if let v = e.version {
                    page.versions.append(v)
                } else {
                    page.prefixes.append(e.key)
                    if request.includeTrailingDelimiter { page.versions += allVersionsLocked(e.key) }
                }
            }
            if end < entries.count {
                let last = entries[end - 1]
                let text = last.generation.map { "I\($0):\(last.key)" } ?? "P\(last.key)"
                page.nextPageToken = Data(text.utf8).base64EncodedString()
            }
            return page
        }
    }

    private static func versionCursor(_ text: String) -> (String, Int64?)? {
        if text.hasPrefix("P") { return (String(text.dropFirst()), nil) }
        guard text.hasPrefix("I"), let colon = text.firstIndex(of: ":"),
              let g = Int64(text[text.index(after: text.startIndex)..<colon]) else { return nil }
        return (String(text[text.index(after: colon)...]), g)
    }

    /// Order of entries: by name, then generation (a prefix first: it has none).
    private static func cursorLess(_ a: (String, Int64?), _ b: (String, Int64?)) -> Bool {
        if a.0 != b.0 { return byteLess(a.0, b.0) }
        return (a.1 ?? Int64.min) < (b.1 ?? Int64.min)
    }
}
