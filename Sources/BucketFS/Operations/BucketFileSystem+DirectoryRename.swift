import Foundation
import FuseKit
import Logging
import StorageModel
import Synchronization

/// A flat bucket's directory rename (docs/SEMANTICS.md §3.2): every object under the prefix is
/// copied to the new name (`ifGenerationMatch=0`) and then deleted (with the generation copied),
/// `renameConcurrency` objects at once; nothing is deleted before its copy exists.
///
/// Its progress is its liveness, as an upload's bytes are: each object's requests have their own
/// `--op-timeout`, and the rename as a whole ends only when no object has moved for
/// `--op-timeout` (on the mount's clock), however long it takes while objects keep moving.
///
/// A rename that stops part way (a stall, a failed request, an interrupt) leaves what moved at
/// the new name and the rest at the old one, says which by name in the log, and is remembered
/// (`UnfinishedRenames`, in the cache directory) until it is finished: the same rename again
/// goes on from where it stopped; any other rename of the old name is refused with EBUSY, so
/// that a tool that answers a failed rename by moving the directory into what it sees as an
/// existing directory at the new name (coreutils `mv`) cannot spread it over two places.
extension BucketFileSystem {
    /// One object's move: moved (copied, then its source deleted), copied only (its delete
    /// failed: it is in both places), or not moved (its copy failed).
    enum ObjectMove: Sendable {
        case moved(ObjectInfo, copy: ObjectInfo)
        case copiedOnly(ObjectInfo, copy: ObjectInfo, any Error)
        case notMoved(ObjectInfo, any Error)
        /// The watchdog: no object moved for the op timeout (true), or the rename ended (false).
        case stalled(Bool)
    }

    func renameDirectory(_ src: Node, to dstPath: String, entry: Superblock.RenamedEntry) async throws(Errno) {
        if let folders = store.folders { return try await renameFolder(folders, src, to: dstPath, entry: entry) }
        let srcPath = superblock.path(of: src)
        let srcPrefix = srcPath + "/"
        let dstPrefix = dstPath + "/"
        var objects: [ObjectInfo] = []
        var token: String? = nil
        do {
            repeat {
                let page = try await store.list(ListRequest(prefix: srcPrefix, delimiter: nil, maxResults: 1000, pageToken: token))
                objects += page.items
                token = page.nextPageToken
                OperationContext.moved()
            } while token != nil
        } catch {
            throw fail(error, "rename", srcPrefix)
        }
        let resumed = unfinishedRenames.destination(of: srcPath) == dstPath
        if !objects.isEmpty { unfinishedRenames.begin(srcPath, to: dstPath) }
        let outcome = await moveObjects(objects, from: srcPrefix, to: dstPrefix)
        // Each object's generation before and after its copy: a file being written here moves
        // with its directory, and its next upload replaces the copy.
        var copied: [String: (from: Int64, to: ObjectInfo)] = [:]
        for (o, c) in outcome.moved { copied[c.name] = (o.generation, c) }
        if let why = outcome.stopped {
            superblock.invalidate(prefixes: [srcPrefix, dstPrefix])
            let e: Errno = outcome.stalled ? .EIO : errno(for: why)
            if outcome.moved.isEmpty && outcome.copiedOnly.isEmpty && !resumed {
                // Nothing reached the new name: nothing to finish.
                unfinishedRenames.end(srcPath)
            }
            logger.error("\(outcome.report(srcPrefix, dstPrefix, total: objects.count, resumed: resumed, cause: why, errno: e))")
            throw e
        }
        if objects.isEmpty && !resumed {
            // A directory known only here (no objects): give the new name a placeholder.
            _ = try? await store.write(dstPrefix, from: .data(Data()), metadata: WritableMetadata(), preconditions: .doesNotExist)
        }
        unfinishedRenames.end(srcPath)
        if resumed { logger.notice("rename of directory '\(srcPrefix)' to '\(dstPrefix)' finished: \(outcome.moved.count) more object(s) moved") }
        for (n, s) in superblock.movedDirectory(from: srcPath, to: dstPath, copied: copied, entry: entry) {
            staging.rerecord(s, sidecarTarget(n, s))
        }
    }

    /// What a directory rename's moves came to.
    struct DirectoryMoveOutcome {
        var moved: [(ObjectInfo, ObjectInfo)] = []
        var copiedOnly: [String] = []
        var notMoved: [String] = []
        /// The first failure, or the stall (a timeout), when the rename did not finish.
        var stopped: (any Error)? = nil
        var stalled = false

        /// The log line of a rename that stopped: what moved and what did not, by name, and how
        /// to finish or undo it.
        func report(_ srcPrefix: String, _ dstPrefix: String, total: Int, resumed: Bool, cause: any Error, errno e: Errno) -> String {
            func span(_ names: [String]) -> String {
                let sorted = names.sorted()
                guard let first = sorted.first, let last = sorted.last else { return "" }
                return first == last ? " ('\(first)')" : " (first '\(first)', last '\(last)')"
            }
            let movedNames = moved.map(\.0.name)
            let why = stalled ? "no object moved for the op timeout" : "\(cause)"
            let src = String(srcPrefix.dropLast()), dst = String(dstPrefix.dropLast())
            var line = "rename of directory '\(srcPrefix)' to '\(dstPrefix)'\(resumed ? " (resumed)" : "") did not finish (\(why)) → \(e): "
            line += "\(moved.count) of \(total) object(s) moved to '\(dstPrefix)'\(span(movedNames))"
            if !copiedOnly.isEmpty { line += ", \(copiedOnly.count) copied and not yet deleted, in both places\(span(copiedOnly))" }
            line += ", \(notMoved.count) left where they were\(span(notMoved))"
            if moved.isEmpty && copiedOnly.isEmpty && !resumed {
                line += ". Nothing changed; the rename can be tried again."
            } else {
                line += ". To finish it, rename '\(src)' over '\(dst)' on this mount (`mv -T \(src) \(dst)` in the mount's root: "
                line += "it goes on from here, and a copy already at the new name is not made again; a plain `mv` sees '\(dst)' "
                line += "as a directory to move into, which is refused); to undo it, finish it, then rename '\(dst)' back. "
                line += "Until then, other renames of '\(src)', and renames of '\(dst)', are refused (EBUSY)."
            }
            return line
        }
    }

    /// Moves `objects` from `srcPrefix` to `dstPrefix`, `renameConcurrency` at once, each under a
    /// deadline of its own; stops launching at the first failure, and cancels the moves under
    /// way when none has moved for the op timeout on the mount's clock.
    func moveObjects(_ objects: [ObjectInfo], from srcPrefix: String, to dstPrefix: String) async -> DirectoryMoveOutcome {
        var outcome = DirectoryMoveOutcome()
        guard !objects.isEmpty else { return outcome }
        let clock = config.clock
        let timeout = Duration.milliseconds(Int64(config.operationTimeout * 1000))
        let lastMove = LastMove(clock.now)
        let outer = OperationContext.clock
        let width = max(1, config.renameConcurrency)
        await withTaskGroup(of: ObjectMove.self) { group in
            group.addTask {
                while true {
                    let due = lastMove.instant + timeout
                    if clock.now >= due { return .stalled(true) }
                    do { try await clock.sleep(until: due) } catch { return .stalled(false) }
                }
            }
            var next = 0
            var running = 0
            func launch() {
                let o = objects[next]
                next += 1
                running += 1
                let target = dstPrefix + o.name.dropFirst(srcPrefix.count)
                group.addTask { await self.moveObject(o, to: target) }
            }
            while running < width && next < objects.count { launch() }
            for await r in group {
                switch r {
                case .stalled(let stalled):
                    if stalled {
                        outcome.stalled = true
                        outcome.stopped = outcome.stopped ?? StorageError.timeout(message: "no object moved for \(timeout)")
                        group.cancelAll()
                    }
                    continue
                case .moved(let o, let c):
                    outcome.moved.append((o, c))
                    lastMove.instant = clock.now
                    outer?.moved()
                case .copiedOnly(let o, _, let e):
                    outcome.copiedOnly.append(o.name)
                    outcome.stopped = outcome.stopped ?? e
                case .notMoved(let o, let e):
                    outcome.notMoved.append(o.name)
                    // A move cancelled by the watchdog is the stall's, not a cause of its own.
                    if !outcome.stalled { outcome.stopped = outcome.stopped ?? e }
                }
                running -= 1
                if outcome.stopped == nil, next < objects.count { launch() }
                if running == 0 { group.cancelAll() }  // the watchdog
            }
        }
        // What was never launched is where it was.
        let launched = Set(outcome.moved.map(\.0.name) + outcome.copiedOnly + outcome.notMoved)
        outcome.notMoved += objects.lazy.map(\.name).filter { !launched.contains($0) }
        return outcome
    }

    /// One object: its copy (a copy already there with the same content counts, as a rename
    /// that stopped between the copy and the delete left it), then the delete of its source.
    func moveObject(_ o: ObjectInfo, to target: String) async -> ObjectMove {
        await OperationContext.$clock.withValue(operationClock()) {
            let copy: ObjectInfo
            do {
                copy = try await store.copy(from: o.name, sourceGeneration: o.generation, to: target, metadata: nil,
                                            preconditions: .doesNotExist)
            } catch StorageError.preconditionFailed(let path) {
                guard let there = try? await store.getMetadata(target), Self.sameContent(there, o) else {
                    return .notMoved(o, StorageError.preconditionFailed(path: path))
                }
                copy = there
            } catch {
                return .notMoved(o, error)
            }
            do {
                try await store.delete(o.name, preconditions: Preconditions(ifGenerationMatch: o.generation))
            } catch StorageError.objectNotFound {
                // Gone already (deleted behind the mount's back): the copy is what is left.
            } catch {
                return .copiedOnly(o, copy: copy, error)
            }
            return .moved(o, copy: copy)
        }
    }

    /// The same bytes: the same size and the same CRC32C (or MD5 where there is none).
    static func sameContent(_ a: ObjectInfo, _ b: ObjectInfo) -> Bool {
        guard a.size == b.size else { return false }
        if let x = a.crc32c, let y = b.crc32c { return x == y }
        if let x = a.md5Hash, let y = b.md5Hash { return x == y }
        return false
    }
}

/// When a directory rename last moved an object.
final class LastMove: Sendable {
    private let value: Mutex<BucketClock.Instant>
    init(_ start: BucketClock.Instant) { value = Mutex(start) }
    var instant: BucketClock.Instant {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// Directory renames that stopped part way, by old path (the new path each was going to), until
/// they finish. Kept in `CACHE_DIR/.unfinished-renames` (one JSON object, old path → new path),
/// so that a mount after a crash or an unmount still knows them; `bucketfs status` reads it.
public final class UnfinishedRenames: Sendable {
    public static let fileName = ".unfinished-renames"
    private let file: String
    private let logger: Logger
    private let table: Mutex<[String: String]>

    init(directory: String, logger: Logger) {
        self.logger = logger
        let file = directory + "/" + Self.fileName
        self.file = file
        table = Mutex(Self.load(file))
        for (from, to) in table.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            logger.warning("rename of directory '\(from)' to '\(to)' did not finish in an earlier run: rename it over '\(to)' (`mv -T \(from) \(to)` in the mount's root) to finish it (other renames of '\(from)' are refused until then)")
        }
    }

    /// The unfinished renames recorded in `directory` (for `bucketfs status`).
    public static func recorded(in directory: String) -> [String: String] { load(directory + "/" + fileName) }

    static func load(_ path: String) -> [String: String] {
        guard let data = FileManager.default.contents(atPath: path),
              let t = try? JSONDecoder().decode([String: String].self, from: data) else { return [:] }
        return t
    }

    func destination(of path: String) -> String? { table.withLock { $0[path] } }

    /// Whether renaming `from` to `to` goes on with an unfinished rename (true), or is a new one
    /// (false); EBUSY when `from` has an unfinished rename to another name, or is the new name
    /// of one.
    func admit(_ from: String, to: String) throws(Errno) -> Bool {
        if let old = table.withLock({ t in t.first { $0.value == from }?.key }) {
            // The half-built new name: moved away, the rest would follow it nowhere.
            logger.warning("rename of '\(from)' to '\(to)' refused (EBUSY): it is where '\(old)' was being renamed to, and that rename did not finish; rename '\(old)' over '\(from)' (`mv -T \(old) \(from)` in the mount's root) to finish it first")
            throw .EBUSY
        }
        guard let dst = destination(of: from) else { return false }
        if dst == to { return true }
        logger.warning("rename of '\(from)' to '\(to)' refused (EBUSY): its rename to '\(dst)' did not finish; rename it over '\(dst)' (`mv -T \(from) \(dst)` in the mount's root) to finish it")
        throw .EBUSY
    }

    func begin(_ from: String, to: String) {
        let changed = table.withLock { t -> Bool in
            guard t[from] != to else { return false }
            t[from] = to
            return true
        }
        if changed { save() }
    }

    func end(_ from: String) {
        if table.withLock({ $0.removeValue(forKey: from) }) != nil { save() }
    }

    private func save() {
        let t = table.withLock { $0 }
        do {
            if t.isEmpty {
                if FileManager.default.fileExists(atPath: file) { try FileManager.default.removeItem(atPath: file) }
                return
            }
            let enc = JSONEncoder()
            enc.outputFormatting = [.sortedKeys]
            try enc.encode(t).write(to: URL(fileURLWithPath: file), options: .atomic)
        } catch {
            logger.error("cannot record the unfinished directory renames in \(file): \(error)")
        }
    }
}
