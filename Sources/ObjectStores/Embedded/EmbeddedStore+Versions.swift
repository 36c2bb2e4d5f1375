import Foundation
import GRDB
import StorageModel

/// An embedded bucket's past (docs/SEMANTICS.md "Versions"): whether it keeps replaced and
/// deleted generations, for how long, and their listing.
///
/// Stored in the bucket's database, so every process that opens it sees one setting:
/// - `settings`: `versioning` (0/1), `keep_versions` (noncurrent generations kept per name),
///   `keep_for_s` (seconds a generation is kept after it stopped being live). A bucket made
///   before versions existed has none of them: versioning off, and it works as it always did.
/// - `versions`: one row per kept generation, the columns of `objects` plus `deleted_us`, the
///   moment it stopped being live (its `timeDeleted`). Its blob stays in `blobs/` until the row
///   goes.
///
/// Retention runs in the transaction that makes a generation noncurrent (that name's count and
/// age), when the bucket is opened, when the setting changes, and at most every ten minutes
/// after a write (every name's age); the blobs of removed rows are deleted after the commit.
extension EmbeddedStore: VersionListing {
    /// What an embedded bucket keeps of its past.
    public struct VersionSettings: Sendable, Equatable {
        /// Replaced and deleted generations are kept.
        public var versioning: Bool
        /// At most this many noncurrent generations per name (the newest); nil: no limit.
        public var keepVersions: Int?
        /// A noncurrent generation is removed once it has not been live for this long; nil: kept
        /// until the count removes it.
        public var keepFor: TimeInterval?

        public init(versioning: Bool = false, keepVersions: Int? = nil, keepFor: TimeInterval? = nil) {
            self.versioning = versioning
            self.keepVersions = keepVersions
            self.keepFor = keepFor
        }
    }

    static let versionSchema = """
        CREATE TABLE IF NOT EXISTS versions (
            name TEXT NOT NULL,
            generation INTEGER NOT NULL,
            metageneration INTEGER NOT NULL,
            size INTEGER NOT NULL,
            md5 TEXT,
            crc32c TEXT,
            created_us INTEGER NOT NULL,
            updated_us INTEGER NOT NULL,
            cache_control TEXT,
            content_disposition TEXT,
            content_encoding TEXT,
            content_language TEXT,
            content_type TEXT,
            custom_metadata TEXT NOT NULL,
            blob TEXT NOT NULL,
            deleted_us INTEGER NOT NULL,
            PRIMARY KEY (name, generation)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS versions_by_deletion ON versions (deleted_us);
        CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
        """

    private static let columns = "name, generation, metageneration, size, md5, crc32c, created_us, updated_us, cache_control, "
        + "content_disposition, content_encoding, content_language, content_type, custom_metadata, blob"

    // MARK: settings

    /// The bucket's versioning and retention now.
    public func versionSettings() throws -> VersionSettings {
        do { return try db.read { try Self.settings($0) } } catch { throw Self.mapped(error) }
    }

    /// Changes what the bucket keeps from now on (`bucketfs mb DIR --versioning …`), then applies
    /// the retention to what it holds. Turning versioning off keeps what was kept (as Cloud
    /// Storage does when versioning is suspended); the retention still applies to it.
    public func setVersionSettings(_ new: VersionSettings) throws {
        if let n = new.keepVersions, n < 0 { throw StorageError.invalidArgument(message: "--keep-versions must be ≥ 0") }
        if let t = new.keepFor, t <= 0 { throw StorageError.invalidArgument(message: "--keep-for must be longer than 0") }
        do {
            try inWriteTransaction { db in
                func put(_ key: String, _ v: Int64?) throws {
                    if let v {
                        try db.execute(sql: "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", arguments: [key, v])
                    } else {
                        try db.execute(sql: "DELETE FROM settings WHERE key = ?", arguments: [key])
                    }
                }
                try put("versioning", new.versioning ? 1 : 0)
                try put("keep_versions", new.keepVersions.map(Int64.init))
                try put("keep_for_s", new.keepFor.map { Int64($0.rounded(.up)) })
            }
        } catch { throw Self.mapped(error) }
        try sweepVersions()
    }

    static func settings(_ db: Database) throws -> VersionSettings {
        var s = VersionSettings()
        for row in try Row.fetchAll(db, sql: "SELECT key, value FROM settings") {
            let key: String = row["key"]
            let value: Int64 = row["value"]
            switch key {
            case "versioning": s.versioning = value != 0
            case "keep_versions": s.keepVersions = Int(value)
            case "keep_for_s": s.keepFor = TimeInterval(value)
            default: break
            }
        }
        return s
    }

    // MARK: keeping and removing

    /// In a write transaction: `cur`, the live generation, stops being live at `now` (its row is
    /// replaced or deleted by the caller). Kept when the bucket keeps versions, and that name's
    /// retention applied. Returns the blobs no row refers to any more, for the caller to delete
    /// after the commit.
    func retire(_ db: Database, _ cur: Record, at now: Int64) throws -> [String] {
        let s = try Self.settings(db)
        guard s.versioning else { return [cur.blob] }
        try db.execute(sql: "INSERT OR REPLACE INTO versions (\(Self.columns), deleted_us) SELECT \(Self.columns), ? FROM objects WHERE name = ?",
                       arguments: [now, cur.info.name])
        return try prune(db, s, name: cur.info.name, now: now)
    }

    /// Removes the noncurrent generations the retention no longer keeps (of one name, or of
    /// every name); returns their blobs.
    private func prune(_ db: Database, _ s: VersionSettings, name: String?, now: Int64) throws -> [String] {
        var rows: [Row] = []
        let only = name == nil ? "" : "AND v.name = ?"
        if let keep = s.keepVersions {
            var args: StatementArguments = [keep]
            if let name { args += [name] }
            rows += try Row.fetchAll(db, sql: """
                SELECT name, generation, blob FROM versions v
                WHERE (SELECT COUNT(*) FROM versions w WHERE w.name = v.name AND w.generation > v.generation) >= ? \(only)
                """, arguments: args)
        }
        if let age = s.keepFor {
            var args: StatementArguments = [now - Int64(age * 1_000_000)]
            if let name { args += [name] }
            rows += try Row.fetchAll(db, sql: "SELECT name, generation, blob FROM versions v WHERE deleted_us <= ? \(only)",
                                     arguments: args)
        }
        var blobs = Set<String>()
        for row in rows {
            let n: String = row["name"]
            let g: Int64 = row["generation"]
            try db.execute(sql: "DELETE FROM versions WHERE name = ? AND generation = ?", arguments: [n, g])
            blobs.insert(row["blob"])
        }
        return Array(blobs)
    }

    /// Applies the retention to every name now; returns how many generations it removed.
    @discardableResult
    public func sweepVersions() throws -> Int {
        let now = micros()
        lastSweep.withLock { lastSweepMicros = now }
        let unused: [String]
        do {
            unused = try inWriteTransaction { db in
                let s = try Self.settings(db)
                guard s.keepVersions != nil || s.keepFor != nil else { return [] }
                return try self.prune(db, s, name: nil, now: now)
            }
        } catch { throw Self.mapped(error) }
        for b in unused { blobs.remove(b) }
        return unused.count
    }

    /// After a write: every name's age, at most every ten minutes per instance.
    func sweepIfDue() {
        let now = micros()
        let due = lastSweep.withLock { now - lastSweepMicros >= 600 * 1_000_000 }
        if due { _ = try? sweepVersions() }
    }

    // MARK: VersionListing

    public var versions: (any VersionListing)? { self }

    public func versioningState() async throws -> VersioningState {
        try await run("get") { VersioningState(enabled: try self.versionSettings().versioning) }
    }

    /// `objects.list` with `versions=true`: the live and the kept generations, by name then
    /// generation; `maxResults` counts versions and prefixes; prefixes of any version.
    public func listVersions(_ request: ListRequest) async throws -> VersionPage {
        try await run("list") { try self.listVersionsNow(request) }
    }

    private func listVersionsNow(_ request: ListRequest) throws -> VersionPage {
        let limit = min(max(request.maxResults, 1), pageSizeLimit)
        let prefix = request.prefix
        let delimiter = request.delimiter.flatMap { $0.isEmpty ? nil : $0 }
        // Where to start: (name, after this generation).
        var lower = prefix
        var afterGeneration = Int64.min
        if let t = request.pageToken {
            switch try VersionCursor.resume(fromToken: t) {
            case .afterVersion(let n, let g):
                if !ListKeys.byteLess(n, prefix) { lower = n; afterGeneration = g }
            case .afterPrefix(let p):
                guard let ub = NameOrder.upperBound(ofStringsStartingWith: p) else { return VersionPage() }
                if !ListKeys.byteLess(ub, prefix) { lower = ub; afterGeneration = Int64.min }
            }
        }
        // A merge of two index searches (SQLite's MERGE (UNION ALL)): each page reads only from
        // where it starts, as the live listing does; the generations at or before the cursor's
        // are skipped below.
        let sql = """
            SELECT \(Self.columns), NULL AS deleted_us FROM objects WHERE name >= ?
            UNION ALL SELECT \(Self.columns), deleted_us FROM versions WHERE name >= ? ORDER BY 1, 2
            """
        return try db.read { db in
            var page = VersionPage()
            var emitted = 0
            var last: VersionCursor?
            scan: while true {
                let rows = try Row.fetchCursor(db, sql: sql, arguments: [lower, lower])
                while let row = try rows.next() {
                    let name: String = row["name"]
                    if name.utf8.elementsEqual(lower.utf8), (row["generation"] as Int64) <= afterGeneration { continue }
                    guard ListKeys.hasBytePrefix(name, prefix) else { break scan }
                    if emitted == limit {
                        page.nextPageToken = last.map(\.token)
                        break scan
                    }
                    if let cp = ListKeys.commonPrefix(of: name, prefix: prefix, delimiter: delimiter) {
                        page.prefixes.append(cp)
                        emitted += 1
                        last = .afterPrefix(cp)
                        guard let ub = NameOrder.upperBound(ofStringsStartingWith: cp) else { break scan }
                        lower = ub
                        afterGeneration = Int64.min
                        continue scan
                    }
                    let deleted: Int64? = row["deleted_us"]
                    let info = try self.record(row).info
                    page.versions.append(ObjectVersion(info: info, timeDeleted: deleted.map(Self.date)))
                    emitted += 1
                    last = .afterVersion(name, info.generation)
                }
                break
            }
            return page
        }
    }
}

/// Where a versioned listing's page stopped: after one version, or after a prefix.
enum VersionCursor: Equatable {
    case afterVersion(String, Int64)
    case afterPrefix(String)

    /// base64 of `v<generation>:<name>` or `p<prefix>`.
    var token: String {
        switch self {
        case .afterVersion(let n, let g): return Data(("v\(g):" + n).utf8).base64EncodedString()
        case .afterPrefix(let p): return Data(("p" + p).utf8).base64EncodedString()
        }
    }

    static func resume(fromToken t: String) throws(StorageError) -> VersionCursor {
        guard let d = Data(base64Encoded: t), let text = String(validating: d, as: UTF8.self), text.count > 1 else {
            throw .invalidArgument(message: "invalid page token")
        }
        if text.hasPrefix("p") { return .afterPrefix(String(text.dropFirst())) }
        guard text.hasPrefix("v"), let colon = text.firstIndex(of: ":"),
              let g = Int64(text[text.index(after: text.startIndex)..<colon]) else {
            throw .invalidArgument(message: "invalid page token")
        }
        return .afterVersion(String(text[text.index(after: colon)...]), g)
    }
}
