import Foundation
import CloudHTTP
import StorageModel

/// Listings as the JSON API gives them, from v0 pages that carry names only (firebase-v0.md §1,
/// §10.3): every item's metadata is fetched, many at once; a directory's placeholder `dir/`, which
/// v0 never lists, is looked up and listed first, as the JSON API lists it; a listing without a
/// delimiter, or under a prefix that ends mid-name (v0 asks for neither), is walked directory by
/// directory. One list request per page asked for (plus, for a walk, one per directory entered).
/// A request that can do with names (`namesOnly`, a delimited listing) costs its list requests
/// only: the names come back in `ListPage.names`, and no metadata is read.
///
/// Page tokens are the store's own (`ListCursor`): where each directory being read stands — the
/// server's token of the page being read, and for a walk how many of its entries were taken.
/// Servers differ in how pages hold prefixes: production counts prefixes and items against
/// `maxResults`, page by page; the emulator counts items only and sends every prefix on every page.
/// Once a page shows the second kind, that directory's prefixes are taken from it and never again,
/// so none shows twice. Nothing relies on the server's sort order (the emulator sorts by UTF-16
/// code units, Cloud Storage by UTF-8 bytes). Within a page, entries go in UTF-8 byte order; a walk
/// over a server of the second kind enters every subdirectory with the directory's first page.
extension FirebaseStore {
    public func list(_ request: ListRequest) async throws -> ListPage {
        guard request.delimiter == nil || request.delimiter == "/" else {
            throw StorageError.invalidArgument(message: "Firebase Storage lists with the delimiter / only, not \(request.delimiter!)")
        }
        let flat = request.delimiter == nil
        let maxResults = min(max(request.maxResults, 1), 1000)
        var levels: [ListCursor.Level]
        let first: Bool
        if let token = request.pageToken {
            guard let c = ListCursor(token: token), c.flat == flat, !c.levels.isEmpty else {
                throw StorageError.invalidArgument(message: "not a page token of this listing")
            }
            levels = c.levels
            first = false
        } else {
            let full = prefix + request.prefix
            let dir = Self.directory(of: full)
            levels = [ListCursor.Level(dir: dir, filter: full == dir ? nil : full)]
            first = true
        }
        // The placeholder of the directory listed (not of the store's root, nor of a partial name).
        var candidates: [Candidate] = []
        // Names only (a names-only readdir): no metadata GET, not even of the placeholder.
        let namesOnly = request.namesOnly && !flat
        if first, !namesOnly, levels[0].filter == nil, levels[0].dir != prefix {
            candidates.append(Candidate(name: levels[0].dir, placeholder: true))
        }
        var prefixes: [String] = []
        if flat {
            try await walk(&levels, into: &candidates, limit: maxResults)
        } else {
            let level = levels[0]
            let page = try await fetchPage(level.dir, token: level.token, maxResults: maxResults)
            for e in Self.entries(of: page, at: level) {
                if e.isPrefix { prefixes.append(e.name) } else { candidates.append(Candidate(name: e.name, placeholder: false)) }
            }
            if let next = page.next {
                levels[0].token = next
                if page.sendsEveryPrefix(maxResults: maxResults) { levels[0].prefixesDone = true }
            } else {
                levels = []
            }
        }
        var out = ListPage()
        if namesOnly {
            out.names = candidates.map { $0.name.hasPrefix(prefix) ? String($0.name.dropFirst(prefix.count)) : $0.name }
            out.metadataSkipped = true
        } else {
            out.items = try await metadata(of: candidates)
        }
        out.prefixes = prefixes.compactMap { p in
            let s = p.hasPrefix(prefix) ? String(p.dropFirst(prefix.count)) : p
            return s.isEmpty ? nil : s
        }
        if !levels.isEmpty { out.nextPageToken = ListCursor(flat: flat, levels: levels).encoded() }
        return out
    }

    /// `dir/` for `dir/…`, "" for a name without `/`.
    static func directory(of full: String) -> String {
        guard let slash = full.lastIndex(of: "/") else { return "" }
        return String(full[...slash])
    }

    struct Candidate: Sendable {
        var name: String
        /// A directory's own placeholder: may well not exist.
        var placeholder: Bool
    }

    struct Entry: Equatable {
        var name: String
        var isPrefix: Bool
    }

    struct ServerPage {
        var items: [String] = []
        var prefixes: [String] = []
        var next: String?

        /// More entries than asked for, and more to come: the server counted items only and sent
        /// every prefix of the directory (the emulator); its next pages bring them all again.
        func sendsEveryPrefix(maxResults: Int) -> Bool {
            next != nil && items.count + prefixes.count > maxResults
        }
    }

    /// One v0 list request (names only).
    func fetchPage(_ dir: String, token: String?, maxResults: Int) async throws -> ServerPage {
        let url = bucketURL + CloudURL.query([("prefix", dir), ("delimiter", "/"), ("maxResults", String(maxResults)),
                                                ("pageToken", token)])
        let r: CloudResponse
        do {
            r = try await transport.send("list", path: "", idempotent: true, CloudRequest(.GET, url))
        } catch StorageError.unauthorized(_, let m) {
            throw StorageError.unauthorized(path: shown(dir), message: m)
        }
        let o = try r.json()
        var page = ServerPage()
        page.prefixes = (o["prefixes"] as? [Any] ?? []).compactMap { $0 as? String }
        page.items = (o["items"] as? [Any] ?? []).compactMap { ($0 as? [String: Any])?["name"] as? String }
        if let t = o["nextPageToken"] as? String, !t.isEmpty { page.next = t }
        return page
    }

    /// The entries of `page` for `level` (under its directory and filter, without the placeholder
    /// and, once taken, without the prefixes), in UTF-8 byte order.
    static func entries(of page: ServerPage, at level: ListCursor.Level) -> [Entry] {
        let wanted = { (name: String) in name.hasPrefix(level.dir) && level.filter.map { name.hasPrefix($0) } ?? true }
        var out = page.items.filter { $0 != level.dir && wanted($0) }.map { Entry(name: $0, isPrefix: false) }
        if level.prefixesDone != true { out += page.prefixes.filter(wanted).map { Entry(name: $0, isPrefix: true) } }
        out.sort { precedes($0.name, $1.name) }
        return out
    }

    static func precedes(_ a: String, _ b: String) -> Bool { NameOrder.precedes(a, b) }

    /// Every name under the first level, depth first (each directory's placeholder before its
    /// contents), until `limit` candidates. `levels` is left where the walk stopped (empty when it
    /// ended); a page is asked again on the next call and its first `taken` entries skipped.
    func walk(_ levels: inout [ListCursor.Level], into candidates: inout [Candidate], limit: Int) async throws {
        let pageSize = min(max(tuning.walkPageSize, 1), 1000)
        var pages: [(entries: [Entry], next: String?, everyPrefix: Bool)?] = Array(repeating: nil, count: levels.count)
        while candidates.count < limit, let top = levels.last {
            let i = levels.count - 1
            if pages[i] == nil {
                let page = try await fetchPage(top.dir, token: top.token, maxResults: pageSize)
                pages[i] = (Self.entries(of: page, at: top), page.next, page.sendsEveryPrefix(maxResults: pageSize))
            }
            let p = pages[i]!
            let taken = top.taken ?? 0
            guard taken < p.entries.count else {
                pages[i] = nil
                if let next = p.next {
                    levels[i].token = next
                    levels[i].taken = nil
                    if p.everyPrefix { levels[i].prefixesDone = true }
                } else {
                    levels.removeLast()
                    pages.removeLast()
                }
                continue
            }
            let e = p.entries[taken]
            levels[i].taken = taken + 1
            candidates.append(Candidate(name: e.name, placeholder: e.isPrefix))
            if e.isPrefix {
                levels.append(ListCursor.Level(dir: e.name))
                pages.append(nil)
            }
        }
    }

    /// The metadata of each candidate, `maxConnections` GETs at a time, in order. A candidate gone
    /// since (404), or a placeholder the rules hide, is left out. An item the rules let this user
    /// list but not read is shown (and logged once) as `unreadable(_:)`.
    func metadata(of candidates: [Candidate]) async throws -> [ObjectInfo] {
        guard !candidates.isEmpty else { return [] }
        var results = [ObjectInfo?](repeating: nil, count: candidates.count)
        try await withThrowingTaskGroup(of: (Int, ObjectInfo?).self) { group in
            var next = 0
            func start() {
                let i = next
                next += 1
                let c = candidates[i]
                group.addTask { (i, try await self.listedMetadata(c)) }
            }
            while next < min(maxConnections, candidates.count) { start() }
            while let (i, info) = try await group.next() {
                results[i] = info
                if next < candidates.count { start() }
            }
        }
        return results.compactMap { $0 }
    }

    private func listedMetadata(_ c: Candidate) async throws -> ObjectInfo? {
        let name = String(c.name.dropFirst(prefix.count))
        do {
            return try await getMetadata(name)
        } catch StorageError.objectNotFound {
            return nil
        } catch StorageError.unauthorized(_, let m) {
            if c.placeholder { return nil }
            if once.first("listed-unreadable:" + name) {
                logger.warning("\(shown(c.name)): listed, but the Security Rules deny reading it (\(m)); shown with size 1 and time 0 (unknown), and reading it fails with EACCES")
            }
            return unreadable(name)
        }
    }

    /// What a listing shows of an object it may not read: generation 0 (none known), time 0, and
    /// size 1 — not 0, so that reading it asks the server (and fails with EACCES) rather than
    /// ending at once with no bytes.
    func unreadable(_ name: String) -> ObjectInfo {
        let epoch = Date(timeIntervalSince1970: 0)
        return ObjectInfo(bucket: bucket, name: name, generation: 0, metageneration: 0, size: 1,
                          timeCreated: epoch, updated: epoch, md5Hash: nil, crc32c: nil, writable: WritableMetadata())
    }
}

/// Where a listing stands, as the store's page token: for each directory being read (one for a
/// delimited listing; the path from the top for a walk), the server's token of the page being
/// read and the last entry taken from it.
struct ListCursor: Codable, Equatable {
    struct Level: Codable, Equatable {
        /// "" or a name ending in `/` (full, with the store's prefix).
        var dir: String
        /// The server's token of the page being read; nil for the first page.
        var token: String? = nil
        /// Entries of that page already taken (a walk).
        var taken: Int? = nil
        /// Names must start with this: a prefix that ends mid-name (top level only).
        var filter: String? = nil
        /// A delimited listing returned every prefix already (the server sends them all on every page).
        var prefixesDone: Bool? = nil
    }
    var flat: Bool
    var levels: [Level]

    init(flat: Bool, levels: [Level]) {
        self.flat = flat
        self.levels = levels
    }

    init?(token: String) {
        var t = token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        guard let d = Data(base64Encoded: t), let c = try? JSONDecoder().decode(ListCursor.self, from: d) else { return nil }
        self = c
    }

    func encoded() -> String {
        let d = (try? JSONEncoder().encode(self)) ?? Data()
        return d.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
