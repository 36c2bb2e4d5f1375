import Crypto
import Foundation
import FuseKit
import Logging
import StorageModel

/// Why a cache directory cannot be used; the message names the directory and the fix.
public struct CacheDirectoryError: Error, CustomStringConvertible {
    public let description: String
}

/// The mount's cache directory (docs/SEMANTICS.md §3): the stage files of writes in progress, a sidecar beside
/// each dirty one that names its object (so a crash leaves nothing anonymous), and `lost+found/`
/// for data that could not be uploaded. One mount at a time holds it (an flock on `.lock`).
/// Private (docs/SECURITY.md): the directory and lost+found are 0700, every file in them 0600,
/// whatever the umask (`PrivateFiles`); `exposedFiles` names what others can read.
public final class StagingArea: @unchecked Sendable {
    let directory: String
    let bucket: String
    let logger: Logger
    /// The core's clock: the times a sidecar and a lost+found entry carry.
    let clock: BucketClock
    private var lockFD: Int32 = -1
    let counters: UploadCounters
    /// Stage files an earlier run left, until each is moved into lost+found (CrashLeftovers.swift).
    let leftovers = CrashLeftovers()

    var lostAndFound: String { directory + "/lost+found" }

    /// The default cache directory of a mount point, the same on every run (so a crashed mount's
    /// data is found again): `$XDG_CACHE_HOME/bucketfs`, else `/var/cache/bucketfs` for root and
    /// `~/.cache/bucketfs` for others; inside it the mount point's last name and a SHA-256 of its
    /// whole path.
    public static func defaultDirectory(forMountPoint mountPoint: String,
                                        environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let base: String
        if let x = environment["XDG_CACHE_HOME"], x.hasPrefix("/") {
            base = x + "/bucketfs"
        } else if geteuid() == 0 {
            base = "/var/cache/bucketfs"
        } else {
            base = (environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()) + "/.cache/bucketfs"
        }
        let digest = SHA256.hash(data: Data(mountPoint.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
        let last = (mountPoint as NSString).lastPathComponent
        let safe = String(last.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" ? Character($0) : "_" }.prefix(40))
        return "\(base)/\(safe.isEmpty ? "root" : safe)-\(digest)"
    }

    /// Checks (and creates, 0700) a cache directory: never a symlink, never someone else's.
    public static func prepare(_ directory: String) throws(CacheDirectoryError) {
        var st = Glibc.stat()
        if lstat(directory, &st) != 0 {
            let parent = (directory as NSString).deletingLastPathComponent
            do {
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
            } catch {
                throw CacheDirectoryError(description: "cannot create the cache directory's parent \(parent): \(error.localizedDescription)")
            }
            do { try PrivateFiles.makeDirectory(directory) } catch {
                throw CacheDirectoryError(description: "\(error); choose another cache directory with --cache-dir")
            }
            guard lstat(directory, &st) == 0 else {
                throw CacheDirectoryError(description: "cannot use the cache directory \(directory): \(Errno(Glibc.errno))")
            }
        }
        if (st.st_mode & S_IFMT) == S_IFLNK {
            throw CacheDirectoryError(description: "the cache directory \(directory) is a symbolic link; refusing it (staged data must not go where a link points): remove it or choose another with --cache-dir")
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            throw CacheDirectoryError(description: "the cache directory \(directory) is not a directory; choose another with --cache-dir")
        }
        guard st.st_uid == geteuid() else {
            throw CacheDirectoryError(description: "the cache directory \(directory) belongs to uid \(st.st_uid), not to you (uid \(geteuid())); refusing it: choose another with --cache-dir")
        }
    }

    /// The cache directory, its lost+found and its default log file, where others can read them
    /// (a directory made by hand or by an older version; the files inside are 0600 either way).
    public static func exposedFiles(_ directory: String) -> [PrivateFiles.Exposed] {
        PrivateFiles.exposed([directory, directory + "/lost+found", directory + "/bucketfs.log"])
    }

    /// Prepares the directory and takes its lock.
    init(directory: String, bucket: String, logger: Logger, clock: BucketClock,
         counters: UploadCounters = UploadCounters()) throws(CacheDirectoryError) {
        self.counters = counters
        self.directory = directory
        self.bucket = bucket
        self.logger = logger
        self.clock = clock
        try Self.prepare(directory)
        lockFD = try CacheDirectoryLock.take(directory)
    }

    deinit { if lockFD >= 0 { Glibc.close(lockFD) } }

    // MARK: stage files

    /// A new, empty stage file.
    func makeStage(origin: StageOrigin, metadata: WritableMetadata, dirty: Bool, object: String) throws(Errno) -> StagedFile {
        var fd: Int32 = -1
        var path = ""
        repeat {
            var template = Array((directory + "/stage-XXXXXX").utf8CString)
            fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            if fd < 0 {
                let e = Errno(Glibc.errno)
                counters.cacheError(e)
                logger.error("cannot create a stage file in the cache directory \(directory) (--cache-dir): \(e)")
                throw e.rawValue == ENOSPC || e.rawValue == EDQUOT ? e : .EIO
            }
            path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            // The name of an earlier run's stage file whose move into lost+found is not over
            // (its sidecar may still be renamed or deleted): another one.
            if leftovers.contains(String(path.dropFirst(directory.count + 1))) {
                Glibc.close(fd)
                unlink(path)
                fd = -1
            }
        } while fd < 0
        PrivateFiles.restrict(fd)
        let s = StagedFile(fd: fd, path: path, origin: origin, dirty: dirty, size: 0, metadata: metadata)
        // Not handed out yet: nobody else reads or changes it.
        if dirty { record(s, s.sidecarTargetUnshared(object: object)) }
        return s
    }

    /// Writes (or rewrites) the sidecar that says which object a stage file holds (a
    /// `StageRecord`, not closed). The caller hands it `target`, read under the superblock's lock
    /// (`StageState.sidecarTarget`: the object's path, the generation the content is based on, its
    /// size and metadata); the sidecar is written from the newest target handed to it so far
    /// (`SidecarState.newest`), so that of two writes the last names the current path whichever
    /// caller read its target first. Under the stage's `sidecar` lock, never under the superblock's
    /// lock, and the staging area never calls back into the core. Written and renamed into place
    /// with plain calls and no fsync: the stage file it describes is not synced either (both
    /// outlive a crash of this process, in the page cache, which is what recovery covers), and
    /// every create pays for this (FileManager's atomic write synced: a large part of a create's
    /// time).
    func record(_ s: StagedFile, _ target: SidecarTarget) {
        s.sidecar.withLock { sc in writeSidecar(s, &sc, sc.newest(target), closed: false) }
    }

    /// Writes the sidecar before a stage first becomes dirty (nothing when it has one), and again
    /// when it said closed: as not closed before new content (`content`), with the new metadata
    /// otherwise (an xattr or time set after close).
    func recordIfNeeded(_ s: StagedFile, content: Bool = true, _ target: SidecarTarget) {
        s.sidecar.withLock { sc in
            let newest = sc.newest(target)
            if !sc.recorded || sc.recordedClosed { writeSidecar(s, &sc, newest, closed: sc.recordedClosed && !content) }
        }
    }

    /// Writes the sidecar again when the stage has one (its object was renamed).
    func rerecord(_ s: StagedFile, _ target: SidecarTarget) {
        s.sidecar.withLock { sc in
            let newest = sc.newest(target)
            if sc.recorded { writeSidecar(s, &sc, newest, closed: sc.recordedClosed) }
        }
    }

    /// The writer closed the file (its last handle open for writing), before its upload: the
    /// sidecar says so, with the size and metadata at close (when it has one: clean content has none).
    func recordClosed(_ s: StagedFile, _ target: SidecarTarget) {
        s.sidecar.withLock { sc in
            let newest = sc.newest(target)
            if sc.recorded && !sc.recordedClosed { writeSidecar(s, &sc, newest, closed: true) }
        }
    }

    /// Under `s.sidecar`'s lock (`sc` is what it owns).
    private func writeSidecar(_ s: StagedFile, _ sc: inout SidecarState, _ target: SidecarTarget, closed: Bool) {
        guard !sc.discarded else { return }
        let record = StageRecord(bucket: bucket, object: target.object, baseGeneration: target.baseGeneration,
                                 closed: closed, size: closed ? target.size : nil, metadata: target.metadata)
        let d = SidecarJSON.data(record, created: RFC3339.format(clock.date))
        let tmp = s.path + ".json.tmp"
        let fd = PrivateFiles.open(tmp, O_WRONLY | O_TRUNC)
        guard fd >= 0 else {
            logger.error("cannot write \(tmp) in the cache directory (--cache-dir): \(Errno(Glibc.errno))")
            return
        }
        let written = d.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, d.count) }
        let e = Errno(Glibc.errno)
        Glibc.close(fd)
        guard written == d.count, Glibc.rename(tmp, s.path + ".json") == 0 else {
            let why = written == d.count ? Errno(Glibc.errno) : e
            counters.cacheError(why)
            logger.error("cannot write \(s.path).json in the cache directory (--cache-dir): \(why)")
            unlink(tmp)
            return
        }
        sc.sidecarWritten(closed: closed)
    }

    /// Closes and deletes a stage file and its sidecar (once; later calls do nothing). A sidecar
    /// write whose caller read its target before the discard (a rename, an xattr, a close racing
    /// the upload that ended the stage) writes nothing after it: a sidecar naming no stage file
    /// would stay in the cache directory.
    func discard(_ s: StagedFile) {
        s.stream.giveUp("its stage file was discarded")
        s.close()
        s.sidecar.withLock { sc in
            unlink(s.path + ".json")
            sc.sidecarDiscarded()
        }
    }

    /// Deletes a stage's sidecar once its data is safe elsewhere (in lost+found), so that a crash
    /// before the stage file goes does not keep the same data twice.
    func forgetRecord(_ s: StagedFile) {
        s.sidecar.withLock { sc in
            unlink(s.path + ".json")
            sc.sidecarDeleted()
        }
    }

    // MARK: lost+found

    /// Copies the first `size` bytes of a stage's content (its size, read under the superblock's
    /// lock by the caller) into lost+found, under a name that says which object it was, with a
    /// JSON sidecar (its `StageRecord`, why, complete or not, bytes and md5). Returns the path, or
    /// nil when even that failed.
    func keepLost(_ s: StagedFile, size: Int64, record: StageRecord, reason: String) -> String? {
        keep(fd: s.fd, length: size, record: record, complete: record.closed, reason: reason)?.path
    }

    /// Removes a lost+found entry (and its sidecar) that a newer one of the same file replaced.
    func dropLost(_ entry: String) {
        guard entry.hasPrefix(lostAndFound + "/") else { return }
        unlink(entry)
        unlink(entry + ".json")
    }

    /// A cut-off entry (`complete` false: the writer never closed it) has a name ending in
    /// `.cut-off`, so that no one takes it for a whole file.
    private func keep(fd: Int32, length: Int64, record: StageRecord, complete: Bool, reason: String) -> LostEntry? {
        let object = record.object
        _ = try? PrivateFiles.makeDirectory(lostAndFound)
        let dest = freeLostName(object, complete: complete)
        // Both files are written under temporary names beside lost+found and renamed in, sidecar
        // first: lost+found only ever holds complete entries.
        let tmp = "\(directory)/.keep-\(UUID().uuidString)"
        let out = PrivateFiles.open(tmp, O_WRONLY | O_EXCL)
        guard out >= 0 else {
            logger.critical("cannot create \(tmp) to keep the data of '\(object)': \(Errno(Glibc.errno))")
            return nil
        }
        // A read that fails keeps what was read before it (the entry says how many bytes).
        var writeError: Errno?
        let (off, md5, _) = MD5Sum.reading(fd: fd, length: length) { chunk, at in
            guard pwrite(out, chunk.baseAddress, chunk.count, off_t(at)) == chunk.count else {
                writeError = Errno(Glibc.errno)
                return false
            }
            return true
        }
        if let writeError {
            counters.cacheError(writeError)
            logger.critical("cannot write \(tmp) (--cache-dir) to keep the data of '\(object)': \(writeError)")
            Glibc.close(out)
            unlink(tmp)
            return nil
        }
        Glibc.fsync(out)
        Glibc.close(out)
        var side = record.json
        side["bytes"] = off
        side["md5"] = md5
        side["complete"] = complete
        side["reason"] = reason
        side["kept"] = RFC3339.format(clock.date)
        if let d = try? JSONSerialization.data(withJSONObject: side, options: [.sortedKeys, .prettyPrinted]) {
            let sideTmp = tmp + ".json"
            let sfd = PrivateFiles.open(sideTmp, O_WRONLY | O_EXCL)
            if sfd >= 0 {
                _ = d.withUnsafeBytes { Glibc.write(sfd, $0.baseAddress, $0.count) }
                Glibc.close(sfd)
                Glibc.rename(sideTmp, dest + ".json")
            }
        }
        guard Glibc.rename(tmp, dest) == 0 else {
            logger.critical("cannot move \(tmp) into \(dest) (the data of '\(object)' stays at \(tmp)): \(Errno(Glibc.errno))")
            return LostEntry(path: tmp, record: record, complete: complete, reason: reason, bytes: off, md5: md5)
        }
        return LostEntry(path: dest, record: record, complete: complete, reason: reason, bytes: off, md5: md5)
    }

    /// An object name as one file name: `%` and `/` escaped; long names cut, with a checksum of
    /// the whole name so different objects never share an entry.
    static func escape(_ object: String) -> String {
        let e = object.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "/", with: "%2F")
        if e.utf8.count <= 200 { return e.isEmpty ? "unnamed" : e }
        var cut = ""
        for ch in e { if cut.utf8.count + ch.utf8.count > 180 { break }; cut.append(ch) }
        return cut + "~" + String(CRC32C.checksum(Data(object.utf8)), radix: 16)
    }
}
