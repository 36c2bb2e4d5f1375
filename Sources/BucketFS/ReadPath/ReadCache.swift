import Foundation
import FuseKit
import Logging
import StorageModel

/// The read cache on local disk (`--read-cache-dir`, `--read-cache-mb`; docs/SEMANTICS.md §3.6,
/// "The read cache"): what is read of an object version is kept in a file named by its key
/// (bucket, name, generation, crc32c), shared by all opens, kept across mounts, within a bound
/// in bytes, the least recently used going first.
///
/// A version is served from its file only once the file is complete and was checked against the
/// object's crc32c (`CacheFill.check`), and each read then checks the blocks it touches
/// (`CachedFile`). Files: `HASH.data` (the bytes) and `HASH.json` (`ReadCacheRecord`, written by
/// rename once checked); a data file without its record is a fill that never finished. One mount
/// at a time uses a directory (`.read-cache.lock`, flock): a second mount reads without a cache.
public final class ReadCache: @unchecked Sendable {
    /// What an open of a version gets.
    enum Source {
        /// Its checked file: no request at all.
        case complete(CachedFile)
        /// Its file being filled: the stream writes what it reads into it.
        case filling(CacheFill)
        /// Nothing (not cacheable, larger than the bound, or the cache is full of what is in use).
        case none
    }

    /// For the metrics: opens served from the cache, opens that were not, the bytes the cache
    /// holds (files complete or filling, at their full size), bytes read from it, entries evicted
    /// to make room, files found changed or damaged and dropped.
    public struct Counts: Sendable, Equatable {
        public var hits = 0
        public var misses = 0
        public var bytes: Int64 = 0
        public var readBytes: Int64 = 0
        public var evictions = 0
        public var dropped = 0
        public var entries = 0
        public var capacity: Int64 = 0
        /// Opens the kernel read straight from the cache's file (their bytes are not in `readBytes`),
        /// and the files read whole to check them first.
        public var kernelOpens = 0
        public var kernelChecks = 0
        public init() {}
    }

    let directory: String
    /// The files checked whole for the kernel to read (`CachedFile.forKernel`).
    let kernelStamps = KernelReadStamps()
    private let logger: Logger
    private let writer: CacheFill.Writer
    private let blockSize: Int
    private let lockFD: Int32

    private enum State {
        case complete(ReadCacheRecord)
        case filling(CacheFill)
    }
    private struct Entry {
        let key: ReadCacheRecord.Key
        let size: Int64
        var lastUsed: UInt64
        var state: State
    }

    // Guarded by `lock`.
    private let lock = NSLock()
    private var entries: [String: Entry] = [:]
    /// bucket + "/" + name → the hash of the one version kept of it.
    private var byName: [String: String] = [:]
    private var tick: UInt64 = 0
    private var counts = Counts()
    /// Problems said once (a full disk, a write error by errno).
    private var said: Set<String> = []
    /// Fills being checked, awaited at unmount (`settle`).
    private var checks: [UUID: Task<Void, Never>] = [:]

    /// The cache in `directory` (made if missing), bounded by `capacity` bytes; nil, with the
    /// reason logged, when the directory cannot be used or another mount uses it.
    static func open(directory: String, capacity: Int64, logger: Logger, blockSize: Int = ReadCacheRecord.defaultBlockSize,
                     writer: @escaping CacheFill.Writer = CacheFill.pwriteAll) -> ReadCache? {
        do {
            _ = try PrivateFiles.makeDirectory(directory)
        } catch {
            logger.error("read cache: cannot make \(directory) (--read-cache-dir): \(error); reading without a cache")
            return nil
        }
        let lockPath = directory + "/" + lockName
        let fd = PrivateFiles.open(lockPath, O_RDWR)
        guard fd >= 0 else {
            logger.error("read cache: cannot open \(lockPath): \(Errno(Glibc.errno)); reading without a cache")
            return nil
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? String(contentsOfFile: lockPath, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            logger.error("read cache: \(directory) is in use by another mount (process \(holder)); this mount reads without a cache (give each mount a --read-cache-dir of its own)")
            Glibc.close(fd)
            return nil
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        let cache = ReadCache(directory: directory, capacity: capacity, logger: logger, blockSize: blockSize, writer: writer, lockFD: fd)
        cache.load()
        return cache
    }

    static let lockName = ".read-cache.lock"

    private init(directory: String, capacity: Int64, logger: Logger, blockSize: Int, writer: @escaping CacheFill.Writer, lockFD: Int32) {
        self.directory = directory
        self.logger = logger
        self.blockSize = blockSize
        self.writer = writer
        self.lockFD = lockFD
        counts.capacity = max(0, capacity)
    }

    deinit { Glibc.close(lockFD) }

    public var snapshot: Counts {
        lock.withLock {
            var c = counts
            c.entries = entries.count
            c.kernelChecks = kernelStamps.checks
            return c
        }
    }

    private func dataPath(_ hash: String) -> String { "\(directory)/\(hash).data" }
    private func recordPath(_ hash: String) -> String { "\(directory)/\(hash).json" }

    // MARK: - opening

    /// What an open of `info`'s version reads from: its checked file, or its file to fill (made
    /// now, room made by evicting the least recently used), or nothing. Any other version of the
    /// same object is dropped: it will not be asked for again.
    func open(_ info: ObjectInfo) -> Source {
        guard let key = ReadCacheRecord.key(info), key.generation == info.generation else { return .none }
        let hash = key.hash
        return lock.withLock {
            let name = key.bucket + "/" + key.name
            if let other = byName[name], other != hash { dropLocked(other) }
            tick += 1
            if var e = entries[hash] {
                e.lastUsed = tick
                entries[hash] = e
                switch e.state {
                case let .filling(fill):
                    counts.misses += 1
                    return .filling(fill)
                case let .complete(record):
                    if let file = CachedFile(path: dataPath(hash), record: record,
                                             onChanged: { [weak self] in self?.changed(hash, record, $0) },
                                             onServed: { [weak self] n in self?.served(n) }) {
                        counts.hits += 1
                        // The order of use survives a remount as the records' times.
                        _ = utimensat(AT_FDCWD, recordPath(hash), nil, 0)
                        return .complete(file)
                    }
                    logger.warning("read cache: \(dataPath(hash)) (gs://\(name) generation \(key.generation)) is missing or not \(record.size) bytes: dropped")
                    counts.dropped += 1
                    dropLocked(hash)
                }
            }
            counts.misses += 1
            return startFillLocked(key, size: info.size, hash: hash).map { .filling($0) } ?? .none
        }
    }

    /// A checked whole object fetched elsewhere (the walk-ahead's small files), kept: written
    /// into its file filling now (an open whose stream was lent these bytes writes nothing
    /// itself), or into a new one.
    func keep(_ info: ObjectInfo, _ data: Data) {
        guard let key = ReadCacheRecord.key(info), Int64(data.count) == info.size else { return }
        let fill: CacheFill? = lock.withLock {
            let hash = key.hash
            if let e = entries[hash] {
                if case let .filling(fill) = e.state { return fill }
                return nil
            }
            if let other = byName[key.bucket + "/" + key.name] { dropLocked(other) }
            tick += 1
            return startFillLocked(key, size: info.size, hash: hash)
        }
        fill?.write(data, at: 0)
    }

    /// A complete version's bytes, checked (the walk-ahead takes a cached small file from here,
    /// not from the network); nil when it is not complete here.
    func whole(_ info: ObjectInfo) -> Data? {
        guard let key = ReadCacheRecord.key(info) else { return nil }
        let complete: Bool = lock.withLock {
            if case .complete = entries[key.hash]?.state { return true }
            return false
        }
        guard complete, case let .complete(file) = open(info) else { return nil }
        return try? file.whole()
    }

    private func startFillLocked(_ key: ReadCacheRecord.Key, size: Int64, hash: String) -> CacheFill? {
        guard size <= counts.capacity, makeRoomLocked(for: size) else { return nil }
        let path = dataPath(hash)
        let fd = PrivateFiles.open(path, O_RDWR | O_TRUNC)
        guard fd >= 0 else {
            sayOnceLocked("open:\(Glibc.errno)", "read cache: cannot make a file in \(directory): \(Errno(Glibc.errno)); reading from the bucket")
            return nil
        }
        guard ftruncate(fd, off_t(size)) == 0 else {
            let e = Glibc.errno
            Glibc.close(fd)
            unlink(path)
            sayOnceLocked("truncate:\(e)", "read cache: cannot size a file in \(directory): \(Errno(e)); reading from the bucket")
            return nil
        }
        let fill = CacheFill(key: key, size: size, path: path, fd: fd, writer: writer,
                             onFull: { [weak self] in self?.full($0, hash: hash) },
                             onFailure: { [weak self] in self?.failed($0, errno: $1, hash: hash) })
        entries[hash] = Entry(key: key, size: size, lastUsed: tick, state: .filling(fill))
        byName[key.bucket + "/" + key.name] = hash
        counts.bytes += size
        return fill
    }

    /// Evicts the least recently used entries until `size` more bytes fit.
    private func makeRoomLocked(for size: Int64) -> Bool {
        while counts.bytes + size > counts.capacity {
            guard let (hash, _) = entries.min(by: { $0.value.lastUsed < $1.value.lastUsed }) else { return false }
            dropLocked(hash)
            counts.evictions += 1
        }
        return true
    }

    /// Forgets an entry and removes its files (a fill under way stops writing first).
    private func dropLocked(_ hash: String) {
        guard let e = entries.removeValue(forKey: hash) else { return }
        if case let .filling(fill) = e.state { fill.abandon() }
        let name = e.key.bucket + "/" + e.key.name
        if byName[name] == hash { byName[name] = nil }
        counts.bytes -= e.size
        unlink(recordPath(hash))
        unlink(dataPath(hash))
    }

    private func sayOnceLocked(_ what: String, _ message: @autoclosure () -> String) {
        if said.insert(what).inserted { logger.error("\(message())") }
    }

    // MARK: - fills and reads

    /// An open the kernel reads from `file` itself: checked whole (or unchanged since), counted.
    func forKernel(_ file: CachedFile, max: Int64 = CachedFile.kernelReadMax, pool: BufferPool? = nil) -> CachedFile.KernelCheck {
        let check = file.forKernel(stamps: kernelStamps, max: max, pool: pool)
        if case .file = check { lock.withLock { counts.kernelOpens += 1 } }
        return check
    }

    private func served(_ n: Int) {
        lock.withLock { counts.readBytes += Int64(n) }
    }

    /// A read found a complete file changed on disk: dropped, never served again.
    private func changed(_ hash: String, _ record: ReadCacheRecord, _ e: CachedFile.Changed) {
        logger.error("read cache: \(dataPath(hash)) (gs://\(record.bucket)/\(record.name) generation \(record.generation)) changed on disk: \(e); dropped, reading from the bucket")
        lock.withLock {
            counts.dropped += 1
            if case .complete = entries[hash]?.state { dropLocked(hash) }
        }
    }

    /// A write into a fill failed: the fill stops and its file goes. A full disk (ENOSPC,
    /// EDQUOT) lowers the bound to what the cache holds now, for this mount: new fills then
    /// evict older entries to fit, and the disk is not asked for more than it gave.
    private func failed(_ fill: CacheFill, errno e: Int32, hash: String) {
        lock.withLock {
            guard case let .filling(f)? = entries[hash]?.state, f === fill else { return }
            dropLocked(hash)
            if e == ENOSPC || e == EDQUOT {
                let was = counts.capacity
                counts.capacity = min(counts.capacity, counts.bytes)
                sayOnceLocked("full", "read cache: the disk of \(directory) is full (\(Errno(e))) after \(fill.filledBytes >> 20) MiB of gs://\(fill.key.bucket)/\(fill.key.name); that file is dropped and the cache keeps at most what it holds now, \(counts.capacity >> 20) MiB (was \(was >> 20) MiB), for this mount; reads go on from the bucket")
            } else {
                sayOnceLocked("write:\(e)", "read cache: cannot write to \(fill.path): \(Errno(e)); that file is dropped, reads go on from the bucket")
            }
        }
    }

    /// Every byte of a fill is in: it is checked (in the background, awaited at unmount) and,
    /// when its bytes are the object's, its record is written: from then on it is served.
    private func full(_ fill: CacheFill, hash: String) {
        let id = UUID()
        // Made under the lock, which the check's end takes: it cannot end before it is listed.
        lock.lock()
        defer { lock.unlock() }
        checks[id] = Task.detached { [weak self] in
            guard let self else { return }
            // The file as the check read it: unchanged across the check, its CRCs are its bytes',
            // and the kernel may read it without reading it all again (`forKernel`).
            let before = KernelReadStamps.stamp(path: self.dataPath(hash))
            let result = fill.check(blockSize: self.blockSize)
            let after = KernelReadStamps.stamp(path: self.dataPath(hash))
            self.lock.withLock {
                defer { self.checks[id] = nil }
                guard case let .filling(f)? = self.entries[hash]?.state, f === fill else { return }
                switch result {
                case let .failure(problem):
                    self.logger.error("read cache: the bytes read of gs://\(fill.key.bucket)/\(fill.key.name) generation \(fill.key.generation) do not check: \(problem); not kept")
                    self.counts.dropped += 1
                    self.dropLocked(hash)
                case let .success(crcs):
                    let record = ReadCacheRecord(key: fill.key, size: fill.size, blockSize: self.blockSize, crcs: crcs)
                    if self.writeRecord(record, hash: hash) {
                        fill.abandon()
                        self.entries[hash]?.state = .complete(record)
                        if let before, before == after { self.kernelStamps.note(before) }
                    } else {
                        self.dropLocked(hash)
                    }
                }
            }
        }
    }

    /// Writes a record by rename, so a record is whole or absent.
    private func writeRecord(_ record: ReadCacheRecord, hash: String) -> Bool {
        let tmp = "\(directory)/.\(hash).json.tmp"
        do {
            let data = try JSONEncoder().encode(record)
            let fd = PrivateFiles.open(tmp, O_WRONLY | O_TRUNC)
            guard fd >= 0 else { throw Errno(Glibc.errno) }
            let e = data.withUnsafeBytes { writer(fd, $0, 0) }
            Glibc.close(fd)
            if e != 0 { throw Errno(e) }
            guard rename(tmp, recordPath(hash)) == 0 else { throw Errno(Glibc.errno) }
            return true
        } catch {
            unlink(tmp)
            sayOnceLocked("record", "read cache: cannot write a record in \(directory): \(error); files filled are not kept")
            return false
        }
    }

    /// Waits for the checks under way (unmount: a file read whole is kept for the next mount).
    func settle() async {
        let tasks = lock.withLock { Array(checks.values) }
        for t in tasks { await t.value }
    }

    // MARK: - loading

    /// Takes in what an earlier mount left: each record that names its own file and whose data
    /// file has its size is an entry (oldest use first, by the record's time); a data file with
    /// no good record is a fill that never finished, or damaged: removed, logged. A file that is
    /// not the cache's is named in the log and left alone.
    private func load() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var found: [(hash: String, record: ReadCacheRecord, used: timespec)] = []
        var dataFiles: Set<String> = []
        for n in names where n != Self.lockName {
            let stem = (n as NSString).deletingPathExtension
            let isHash = stem.count == 64 && stem.allSatisfy { $0.isHexDigit && !$0.isUppercase }
            if n.hasPrefix("."), n.hasSuffix(".json.tmp") {
                unlink("\(directory)/\(n)")
            } else if isHash, n.hasSuffix(".data") {
                dataFiles.insert(stem)
            } else if isHash, n.hasSuffix(".json") {
                let path = recordPath(stem)
                var st = stat()
                guard let d = FileManager.default.contents(atPath: path), lstat(path, &st) == 0,
                      let r = try? JSONDecoder().decode(ReadCacheRecord.self, from: d) else {
                    logger.warning("read cache: \(path) is not a record the cache can read: removed, with its data file")
                    unlink(path)
                    unlink(dataPath(stem))
                    continue
                }
                if let problem = r.problem(hash: stem) {
                    logger.warning("read cache: \(path): \(problem): removed, with its data file")
                    unlink(path)
                    unlink(dataPath(stem))
                    continue
                }
                found.append((stem, r, st.st_mtim))
            } else {
                logger.warning("read cache: \(directory)/\(n) is not the cache's: left alone, never served")
            }
        }
        var kept: Set<String> = []
        for f in found.sorted(by: { ($0.used.tv_sec, $0.used.tv_nsec) < ($1.used.tv_sec, $1.used.tv_nsec) }) {
            var st = stat()
            guard lstat(dataPath(f.hash), &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, Int64(st.st_size) == f.record.size else {
                logger.warning("read cache: \(dataPath(f.hash)) is missing or not \(f.record.size) bytes: its record is removed")
                unlink(recordPath(f.hash))
                continue
            }
            kept.insert(f.hash)
            tick += 1
            entries[f.hash] = Entry(key: f.record.key, size: f.record.size, lastUsed: tick, state: .complete(f.record))
            let name = f.record.bucket + "/" + f.record.name
            if let other = byName[name] { dropLocked(other) }  // an older version left beside it
            byName[name] = f.hash
            counts.bytes += f.record.size
        }
        for stem in dataFiles.subtracting(kept) {
            logger.info("read cache: \(dataPath(stem)) was never completed and checked: removed")
            unlink(dataPath(stem))
        }
        // A lower bound than the last mount's: the least recently used go.
        _ = makeRoomLocked(for: 0)
        if !entries.isEmpty {
            logger.info("read cache: \(entries.count) file(s), \(counts.bytes >> 20) MiB kept in \(directory) (bound \(counts.capacity >> 20) MiB)")
        }
    }
}
