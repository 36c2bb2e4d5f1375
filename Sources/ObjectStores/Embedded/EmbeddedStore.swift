import Dispatch
import Foundation
import GRDB
import StorageModel

/// The embedded bucket: a local directory that behaves like a Cloud Storage bucket.
///
/// Layout of `directory`:
/// - `bucket.sqlite` (WAL): one row per live object with its metadata and the id of its blob;
/// - `blobs/ID`: the bytes of one generation, immutable once renamed into place;
/// - `tmp/`: uploads in progress.
///
/// Private (docs/SECURITY.md): the directory, `blobs/` and `tmp/` are made 0700 and every file in
/// them 0600 (the database, its `-wal` and `-shm`, which SQLite gives the database's mode, and each
/// blob), whatever the umask; `exposedFiles` names what an older bucket still lets others read.
///
/// A write stages the blob (temp file, fsync, rename), then commits the row in an IMMEDIATE
/// transaction that checks preconditions and allocates the generation, then deletes the blob of
/// the replaced generation. A crash therefore never leaves a torn object, only a stray file that
/// the next open collects. Several processes may open one directory at once (WAL, busy timeout,
/// the generation counter lives in the database).
///
/// A bucket made with versioning (`bucketfs mb DIR --versioning`) keeps every replaced or
/// deleted generation, row and blob, in `versions` with the moment it stopped being live, until
/// its retention removes it (`EmbeddedStore+Versions.swift`); any other keeps only the live
/// generation, and reading another is `objectNotFound`. docs/SEMANTICS.md "Versions".
public final class EmbeddedStore: StoreBackend, @unchecked Sendable {
    public let bucket: String
    public let directory: String
    public let pageSizeLimit: Int

    let blobs: BlobFiles
    let db: DatabasePool
    /// When this instance last swept every name's kept generations by age (microseconds).
    let lastSweep = NSLock()
    var lastSweepMicros: Int64 = 0
    private let queue = DispatchQueue(label: "bucketfs.embedded-store", attributes: .concurrent)
    private let countsLock = NSLock()
    private var counts: [String: Int] = [:]

    /// The store's time (generations, object times, the age of kept versions): real, or a test's
    /// `ManualClock` (docs/ARCHITECTURE.md, "One clock").
    let clock: BucketClock

    /// Opens (creating if missing) the embedded bucket in `directory`.
    public convenience init(directory: String, bucket: String = "local", pageSizeLimit: Int = 1000) throws {
        try self.init(directory: directory, bucket: bucket, pageSizeLimit: pageSizeLimit, durable: true)
    }

    /// `durable: false` skips fsync (tests that create many objects only).
    init(directory: String, bucket: String, pageSizeLimit: Int, durable: Bool,
         clock: BucketClock = .real) throws {
        self.clock = clock
        let dir = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        self.directory = dir
        self.bucket = bucket
        self.pageSizeLimit = min(max(pageSizeLimit, 1), 1000)
        do {
            let parent = (dir as NSString).deletingLastPathComponent
            if !parent.isEmpty { try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true) }
            try PrivateFiles.makeDirectory(dir)
            blobs = try BlobFiles(root: dir, fsyncEnabled: durable)
            // SQLite creates a database 0644 less the umask, and its -wal and -shm with the
            // database's mode: an empty file made 0600 first is a new database of that mode.
            let made = PrivateFiles.open(dir + "/bucket.sqlite", O_WRONLY | O_EXCL)
            if made >= 0 { close(made) } else if errno != EEXIST {
                throw PrivateFileError(what: "create \(dir)/bucket.sqlite", code: errno)
            }
        } catch let e as StorageError {
            throw e
        } catch {
            throw StorageError.invalidArgument(message: "cannot create the embedded bucket directory \(dir): \(error)")
        }
        var config = Configuration()
        config.busyMode = .timeout(30)
        config.label = "bucketfs.embedded"
        do {
            db = try DatabasePool(path: dir + "/bucket.sqlite", configuration: config)
            try db.writeWithoutTransaction { db in
                // WAL + NORMAL may lose the last commits on power loss; an fsync'd object must stay.
                try db.execute(sql: durable ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = OFF")
                try db.inTransaction(.immediate) {
                    try db.execute(sql: Self.schema)
                    return .commit
                }
            }
            try sweepVersions()
            let referenced = try db.read { db in
                Set(try String.fetchAll(db, sql: "SELECT blob FROM objects UNION ALL SELECT blob FROM versions"))
            }
            blobs.collectGarbage(referenced: referenced, olderThan: 3600)
        } catch {
            throw Self.mapped(error)
        }
    }

    /// The bucket's directories and database files that others can read (any group or other
    /// permission bit): an embedded bucket made before buckets were private, or opened up by
    /// hand. Blob files are reached only through `blobs/`, so they are not looked at one by one.
    public static func exposedFiles(directory: String) -> [PrivateFiles.Exposed] {
        let d = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        return PrivateFiles.exposed([d, d + "/bucket.sqlite", d + "/blobs", d + "/tmp", d + "/bucket.sqlite-wal",
                                     d + "/bucket.sqlite-shm"])
    }

    private static let schema = """
        CREATE TABLE IF NOT EXISTS objects (
            name TEXT PRIMARY KEY NOT NULL,
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
            blob TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
        """ + versionSchema

    /// How many calls of each kind this instance served ("list", "get", "patch", "read",
    /// "write", "delete", "copy"). A snapshot.
    public var requestCounts: [String: Int] {
        countsLock.withLock { counts }
    }

    // MARK: ObjectStore

    public var isLocal: Bool { true }
    public var listsUnderPartialNames: Bool { true }

    public func list(_ request: ListRequest) async throws -> ListPage {
        try await run("list") { try self.listNow(request) }
    }

    public func getMetadata(_ name: String) async throws -> ObjectInfo {
        try await run("get") {
            try Self.checkName(name)
            guard let r = try self.db.read({ try self.fetch($0, name) }) else { throw StorageError.objectNotFound(path: name) }
            return r.info
        }
    }

    public func patchMetadata(_ name: String, _ patch: MetadataPatch, preconditions: Preconditions) async throws -> ObjectInfo {
        try await run("patch") {
            try Self.checkName(name)
            return try self.inWriteTransaction { db in
                guard let cur = try self.fetch(db, name) else { throw StorageError.objectNotFound(path: name) }
                guard preconditions.hold(for: cur.info) else { throw StorageError.preconditionFailed(path: name) }
                let w = patch.applied(to: cur.info.writable)
                try CustomMetadataLimits.check(w.customMetadata)
                let now = self.micros()
                let info = ObjectInfo(bucket: self.bucket, name: name, generation: cur.info.generation,
                                      metageneration: cur.info.metageneration + 1, size: cur.info.size,
                                      timeCreated: cur.info.timeCreated, updated: Self.date(now),
                                      md5Hash: cur.info.md5Hash, crc32c: cur.info.crc32c, writable: w)
                try Self.store(db, info, blob: cur.blob, createdMicros: cur.createdMicros, updatedMicros: now)
                return info
            }
        }
    }

    public func read(_ name: String, generation: Int64?, range: Range<Int64>?) async throws -> Data {
        try await run("read") {
            try Self.checkName(name)
            // A concurrent overwrite may delete the blob between the row lookup and the open:
            // look the row up again (the live generation moved on).
            for _ in 0..<5 {
                guard let r = try self.db.read({ try self.fetch($0, name, generation: generation) }) else {
                    throw StorageError.objectNotFound(path: name)
                }
                let lo = min(max(range?.lowerBound ?? 0, 0), r.info.size)
                let hi = min(max(range?.upperBound ?? r.info.size, lo), r.info.size)
                if let d = try self.blobs.contents(of: r.blob, range: lo..<hi) { return d }
                if generation != nil { throw StorageError.objectNotFound(path: name) }
            }
            throw StorageError.conflict(path: name, message: "the object kept changing while being read")
        }
    }

    /// The blob file of a generation. Blobs are immutable and an overwrite only unlinks the old
    /// one, so the descriptor keeps reading the generation it was opened for.
    public func openLocal(_ name: String, generation: Int64) async throws -> Int32? {
        try await run("open") {
            try Self.checkName(name)
            guard let r = try self.db.read({ try self.fetch($0, name, generation: generation) }) else {
                throw StorageError.objectNotFound(path: name)
            }
            guard let fd = try self.blobs.openForReading(r.blob) else { throw StorageError.objectNotFound(path: name) }
            return fd
        }
    }

    public func write(_ name: String, from source: UploadSource, metadata: WritableMetadata,
                      preconditions: Preconditions) async throws -> ObjectInfo {
        try await run("write") {
            try Self.checkName(name)
            try CustomMetadataLimits.check(metadata.customMetadata)
            // Fail fast before copying bytes; the transaction checks again.
            if !preconditions.isEmpty {
                let cur = try self.db.read { try self.fetch($0, name) }
                guard preconditions.hold(for: cur?.info) else { throw StorageError.preconditionFailed(path: name) }
            }
            let staged = try self.blobs.stage(source)
            return try self.commitNewGeneration(name, blob: staged.id, size: staged.size, md5: staged.md5Hash,
                                                crc32c: staged.crc32c, metadata: metadata, preconditions: preconditions)
        }
    }

    public func delete(_ name: String, preconditions: Preconditions) async throws {
        try await run("delete") {
            try Self.checkName(name)
            let unused: [String] = try self.inWriteTransaction { db in
                guard let cur = try self.fetch(db, name) else { throw StorageError.objectNotFound(path: name) }
                guard preconditions.hold(for: cur.info) else { throw StorageError.preconditionFailed(path: name) }
                let unused = try self.retire(db, cur, at: self.micros())
                try db.execute(sql: "DELETE FROM objects WHERE name = ?", arguments: [name])
                return unused
            }
            for b in unused { self.blobs.remove(b) }
            self.sweepIfDue()
        }
    }

    public func copy(from source: String, sourceGeneration: Int64?, to destination: String,
                     metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        try await run("copy") {
            try Self.checkName(source)
            try Self.checkName(destination)
            if let m = metadata { try CustomMetadataLimits.check(m.customMetadata) }
            for _ in 0..<5 {
                // The live generation, or the given one, live or kept; the preconditions are the
                // live destination's.
                guard let src = try self.db.read({ try self.fetch($0, source, generation: sourceGeneration) }) else {
                    throw StorageError.objectNotFound(path: source)
                }
                if !preconditions.isEmpty {
                    let cur = try self.db.read { try self.fetch($0, destination) }
                    guard preconditions.hold(for: cur?.info) else { throw StorageError.preconditionFailed(path: destination) }
                }
                // The source generation's bytes, under a new blob id (a hard link: blobs never change).
                guard let blob = try self.blobs.link(existing: src.blob) else {
                    if sourceGeneration != nil { throw StorageError.objectNotFound(path: source) }
                    continue // replaced meanwhile: copy the new live generation
                }
                return try self.commitNewGeneration(destination, blob: blob, size: src.info.size, md5: src.info.md5Hash,
                                                    crc32c: src.info.crc32c, metadata: metadata ?? src.info.writable,
                                                    preconditions: preconditions)
            }
            throw StorageError.conflict(path: source, message: "the source kept changing while being copied")
        }
    }

    // MARK: writing

    /// Commits a staged blob as the new live generation of `name`, then deletes the blob of the
    /// generation it replaced. On any failure the staged blob is deleted.
    private func commitNewGeneration(_ name: String, blob: String, size: Int64, md5: String?, crc32c: String?,
                                     metadata: WritableMetadata, preconditions: Preconditions) throws -> ObjectInfo {
        let result: (ObjectInfo, [String])
        do {
            result = try inWriteTransaction { db in
                let cur = try self.fetch(db, name)
                guard preconditions.hold(for: cur?.info) else { throw StorageError.preconditionFailed(path: name) }
                let now = self.micros()
                let generation = try Self.nextGeneration(db, now: now)
                let info = ObjectInfo(bucket: self.bucket, name: name, generation: generation, metageneration: 1,
                                      size: size, timeCreated: Self.date(now), updated: Self.date(now),
                                      md5Hash: md5, crc32c: crc32c, writable: metadata)
                let unused = try cur.map { try self.retire(db, $0, at: now) } ?? []
                try Self.store(db, info, blob: blob, createdMicros: now, updatedMicros: now)
                return (info, unused)
            }
        } catch {
            blobs.remove(blob)
            throw error
        }
        for old in result.1 where old != blob { blobs.remove(old) }
        sweepIfDue()
        return result.0
    }

    /// Generations are microseconds since the epoch, strictly increasing across every process
    /// sharing the directory (the last one handed out is kept in the database).
    private static func nextGeneration(_ db: Database, now: Int64) throws -> Int64 {
        let last = try Int64.fetchOne(db, sql: "SELECT value FROM counters WHERE key = 'generation'") ?? 0
        let g = max(now, last + 1)
        try db.execute(sql: "INSERT OR REPLACE INTO counters (key, value) VALUES ('generation', ?)", arguments: [g])
        return g
    }

    func inWriteTransaction<T>(_ body: (Database) throws -> T) throws -> T {
        try db.writeWithoutTransaction { db in
            var result: T?
            try db.inTransaction(.immediate) {
                result = try body(db)
                return .commit
            }
            return result!
        }
    }

    // MARK: listing

    private func listNow(_ request: ListRequest) throws -> ListPage {
        let limit = min(max(request.maxResults, 1), pageSizeLimit)
        let prefix = request.prefix
        let delimiter = request.delimiter.flatMap { $0.isEmpty ? nil : $0 }
        // Lower bound of the scan: the prefix itself, or where the previous page stopped.
        var lower = prefix
        var inclusive = true
        if let t = request.pageToken {
            switch try ListKeys.resume(fromToken: t) {
            case .afterItem(let k):
                if !ListKeys.byteLess(k, prefix) { lower = k; inclusive = false }
            case .afterPrefix(let p):
                guard let ub = NameOrder.upperBound(ofStringsStartingWith: p) else { return ListPage() }
                if !ListKeys.byteLess(ub, prefix) { lower = ub; inclusive = true }
            }
        }
        // [startOffset, endOffset): objects outside are not listed, nor rolled up into prefixes.
        if let s = request.startOffset, ListKeys.byteLess(lower, s) { lower = s; inclusive = true }
        let end = request.endOffset
        return try db.read { db in
            var page = ListPage()
            var emitted = 0
            var last: ListKeys.Resume?
            scan: while true {
                let sql = "SELECT * FROM objects WHERE name \(inclusive ? ">=" : ">") ? ORDER BY name"
                let rows = try Row.fetchCursor(db, sql: sql, arguments: [lower])
                while let row = try rows.next() {
                    let name: String = row["name"]
                    guard ListKeys.hasBytePrefix(name, prefix) else { break scan }
                    if let end, !ListKeys.byteLess(name, end) { break scan }
                    if emitted == limit {
                        page.nextPageToken = last.map(ListKeys.token)
                        break scan
                    }
                    if let cp = ListKeys.commonPrefix(of: name, prefix: prefix, delimiter: delimiter) {
                        page.prefixes.append(cp)
                        emitted += 1
                        last = .afterPrefix(cp)
                        // Skip every name under this prefix: seek past its range.
                        guard let ub = NameOrder.upperBound(ofStringsStartingWith: cp) else { break scan }
                        lower = ub
                        inclusive = true
                        continue scan
                    }
                    page.items.append(try self.record(row).info)
                    emitted += 1
                    last = .afterItem(name)
                }
                break
            }
            return page
        }
    }

    // MARK: rows

    struct Record {
        var info: ObjectInfo
        var blob: String
        var createdMicros: Int64
    }

    func fetch(_ db: Database, _ name: String) throws -> Record? {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM objects WHERE name = ?", arguments: [name]) else { return nil }
        return try record(row)
    }

    /// The live generation (nil `generation`), or that generation, live or kept.
    func fetch(_ db: Database, _ name: String, generation: Int64?) throws -> Record? {
        if let live = try fetch(db, name), generation == nil || live.info.generation == generation { return live }
        guard let g = generation else { return nil }
        let row = try Row.fetchOne(db, sql: "SELECT * FROM versions WHERE name = ? AND generation = ?", arguments: [name, g])
        return try row.map(record)
    }

    func record(_ row: Row) throws -> Record {
        let customJSON: String = row["custom_metadata"]
        let custom = (try? JSONDecoder().decode([String: String].self, from: Data(customJSON.utf8))) ?? [:]
        let w = WritableMetadata(cacheControl: row["cache_control"], contentDisposition: row["content_disposition"],
                                 contentEncoding: row["content_encoding"], contentLanguage: row["content_language"],
                                 contentType: row["content_type"], customMetadata: custom)
        let created: Int64 = row["created_us"]
        let info = ObjectInfo(bucket: bucket, name: row["name"], generation: row["generation"],
                              metageneration: row["metageneration"], size: row["size"],
                              timeCreated: Self.date(created), updated: Self.date(row["updated_us"]),
                              md5Hash: row["md5"], crc32c: row["crc32c"], writable: w)
        return Record(info: info, blob: row["blob"], createdMicros: created)
    }

    static func store(_ db: Database, _ info: ObjectInfo, blob: String, createdMicros: Int64, updatedMicros: Int64) throws {
        let enc = JSONEncoder()
        enc.outputFormatting = .sortedKeys
        let custom = String(decoding: try enc.encode(info.writable.customMetadata), as: UTF8.self)
        let w = info.writable
        try db.execute(sql: """
            INSERT OR REPLACE INTO objects (name, generation, metageneration, size, md5, crc32c, created_us, updated_us,
                cache_control, content_disposition, content_encoding, content_language, content_type, custom_metadata, blob)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [info.name, info.generation, info.metageneration, info.size, info.md5Hash, info.crc32c,
                             createdMicros, updatedMicros, w.cacheControl, w.contentDisposition, w.contentEncoding,
                             w.contentLanguage, w.contentType, custom, blob])
    }

    // MARK: helpers

    /// Runs blocking database and file work off the cooperative pool, counting the request.
    func run<T: Sendable>(_ kind: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        countsLock.withLock { counts[kind, default: 0] += 1 }
        return try await withCheckedThrowingContinuation { c in
            queue.async {
                c.resume(with: Result { try body() }.mapError { Self.mapped($0) })
            }
        }
    }

    private static func checkName(_ name: String) throws {
        if name.isEmpty { throw StorageError.pathError(path: name, problem: .empty) }
        let n = name.utf8.count
        if n > StoragePath.maxFullPathBytes { throw StorageError.pathError(path: name, problem: .tooLong(bytes: n)) }
        if name.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) {
            throw StorageError.pathError(path: name, problem: .containsNewline)
        }
    }

    static func mapped(_ error: Error) -> Error {
        if error is StorageError { return error }
        if let e = error as? DatabaseError {
            if e.resultCode == .SQLITE_BUSY || e.resultCode == .SQLITE_LOCKED {
                return StorageError.unknown(status: 503, message: "embedded store busy: \(e)")
            }
            return StorageError.unknown(status: 500, message: "embedded store database: \(e)")
        }
        return StorageError.unknown(status: 500, message: "embedded store: \(error)")
    }

    /// Now on the store's clock, in microseconds since the epoch.
    func micros() -> Int64 { Int64((clock.seconds * 1_000_000).rounded(.down)) }
    static func date(_ us: Int64) -> Date { Date(timeIntervalSince1970: Double(us) / 1_000_000) }
}
