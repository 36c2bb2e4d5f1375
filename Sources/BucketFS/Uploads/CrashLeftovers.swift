import Foundation
import FuseKit
import StorageModel

/// The stage files an earlier run of a cache directory left (a crash, `kill -9`), by name, until
/// each is settled: uploaded from where it lies, or moved into lost+found (docs/SEMANTICS.md
/// §3.4). A mount only reads their names when it starts; the rest runs in the background
/// (`BucketFileSystem.settleRecovered`) while it serves, so its start costs the same with ten
/// thousand leftovers as with none. A name stays here until its file is settled:
/// `StagingArea.makeStage` never gives a new stage file one of these names (one just moved or
/// deleted is free for `mkstemp`, while the recovery may still rename or delete its sidecar).
final class CrashLeftovers: @unchecked Sendable {
    private let lock = NSLock()
    private var names: Set<String> = []

    func add(_ found: [String]) { lock.withLock { names.formUnion(found) } }
    func contains(_ name: String) -> Bool { lock.withLock { names.contains(name) } }
    func done(_ name: String) { _ = lock.withLock { names.remove(name) } }
}

/// A stage file an earlier run left, and what its sidecar says. Unchecked: `sidecar` holds only
/// what JSONSerialization makes (strings, numbers, arrays, dictionaries), never changed in place.
struct Leftover: @unchecked Sendable {
    let name: String
    let path: String
    let record: StageRecord
    /// The sidecar as read (lost+found's adds to it).
    let sidecar: [String: Any]
    let size: Int64
    /// Closed, and the size it had at close.
    let complete: Bool
}

extension StagingArea {
    /// The stage files an earlier run left here, sorted, by name only (nothing is opened): they
    /// are recorded as leftovers, for the recovery. What that run's crash cut short in the
    /// directory itself is settled now, as it is no stage file's: a copy into lost+found
    /// (`.keep-*`; its stage file is still here), a sidecar being written (`*.json.tmp`), and a
    /// sidecar whose stage file is gone: the rest of a move (`moveLeftover`) when lost+found has
    /// its data, else (the file was deleted) removed.
    func findLeftovers() -> [String] {
        guard let all = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        let names = Set(all)
        var stages: [String] = []
        for name in all {
            let path = directory + "/" + name
            if name.hasPrefix(".keep-") || (name.hasPrefix("stage-") && name.hasSuffix(".json.tmp")) {
                unlink(path)
            } else if name.hasPrefix("stage-"), name.hasSuffix(".json") {
                if !names.contains(String(name.dropLast(5))) { finishMove(sidecar: path) }
            } else if name.hasPrefix("stage-"), !name.contains(".") {
                stages.append(name)
            }
        }
        stages.sort()
        leftovers.add(stages)
        return stages
    }

    /// A stage's sidecar without its stage file: when it names the lost+found entry its data was
    /// renamed to (`lostAs`) and that entry has no sidecar, it becomes that sidecar; otherwise
    /// it describes nothing and goes.
    private func finishMove(sidecar path: String) {
        if let d = FileManager.default.contents(atPath: path),
           let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any],
           let lostAs = o["lostAs"] as? String, !lostAs.contains("/") {
            let entry = lostAndFound + "/" + lostAs
            if access(entry, F_OK) == 0, access(entry + ".json", F_OK) != 0, Glibc.rename(path, entry + ".json") == 0 {
                logger.error("unsaved data of '\(o["object"] as? String ?? "?")' left by an earlier mount (which ended while moving it into lost+found: \(o["reason"] as? String ?? "")) is kept in \(entry); upload it with `bucketfs recover \(directory)`")
                return
            }
        }
        unlink(path)
    }

    /// One leftover as its sidecar describes it; nil when there is nothing of the user's in it:
    /// a stage file with no sidecar was never dirty, and goes (`done` then follows).
    func readLeftover(_ name: String) -> Leftover? {
        let path = directory + "/" + name
        guard let d = FileManager.default.contents(atPath: path + ".json"),
              let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any],
              let record = StageRecord(json: o) else {
            unlink(path)
            unlink(path + ".json")
            leftovers.done(name)
            return nil
        }
        var st = Glibc.stat()
        guard lstat(path, &st) == 0 else {
            logger.critical("cannot read \(path) (unsaved data of '\(record.object)' left by an earlier mount): \(Errno(Glibc.errno)); it stays there for the next mount or `bucketfs recover \(directory)`")
            leftovers.done(name)
            return nil
        }
        let size = Int64(st.st_size)
        return Leftover(name: name, path: path, record: record, sidecar: o, size: size,
                        complete: record.closed && record.size == size)
    }

    /// The leftover as a lost+found entry where it lies (its stage file), to be uploaded from
    /// there: its bytes and md5 read now. Nil when it cannot be read (logged; it stays).
    func entryInPlace(_ l: Leftover) -> LostEntry? {
        guard let sum = md5(of: l) else { return nil }
        let (bytes, digest) = sum
        return LostEntry(path: l.path, record: l.record, complete: l.complete && bytes == l.size, reason: reason(l, bytes), bytes: bytes, md5: digest)
    }

    /// A complete leftover (`readLeftover`), read for its md5, to be uploaded from where it lies;
    /// nil when there is none, or it cannot be read (logged: it stays), or is cut off after all
    /// (moved into lost+found). The caller ends it with `leftovers.done`.
    func leftoverToUpload(_ name: String) -> (Leftover, LostEntry)? {
        guard let l = readLeftover(name) else { return nil }
        guard l.complete, let e = entryInPlace(l), e.complete else {
            _ = moveLeftover(l)
            return nil
        }
        return (l, e)
    }

    /// Moves a leftover into lost+found without copying it: its sidecar is rewritten with what
    /// lost+found's says (bytes, md5, complete, why, and `lostAs`, the entry's name), then the
    /// data file is renamed into lost+found, then the sidecar beside it. A crash at any point
    /// leaves the data either a stage file with its sidecar (the next mount takes it up again)
    /// or in lost+found (the sidecar follows it at the next mount, `finishMove`). A cut-off one
    /// is logged at error level. Returns the entry; nil when the move failed (logged; the stage
    /// file stays for the next mount). The leftover is `done` after.
    func moveLeftover(_ l: Leftover) -> LostEntry? {
        defer { leftovers.done(l.name) }
        let sidecar = l.path + ".json"
        let stay = "it stays at \(l.path) for the next mount or `bucketfs recover \(directory)`"
        guard let sum = md5(of: l) else { return nil }
        let (bytes, digest) = sum
        let whole = l.complete && bytes == l.size
        _ = try? PrivateFiles.makeDirectory(lostAndFound)
        let dest = freeLostName(l.record.object, complete: whole)
        var o = l.sidecar
        o["bytes"] = bytes
        o["md5"] = digest
        o["complete"] = whole
        o["reason"] = reason(l, bytes)
        o["kept"] = RFC3339.format(clock.date)
        o["lostAs"] = (dest as NSString).lastPathComponent
        guard let side = try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys, .prettyPrinted]),
              Self.replace(sidecar, with: side) else {
            logger.critical("cannot rewrite \(sidecar) to move the unsaved data of '\(l.record.object)' into lost+found: \(Errno(Glibc.errno)); \(stay)")
            return nil
        }
        guard Glibc.rename(l.path, dest) == 0 else {
            logger.critical("cannot move \(l.path) into \(dest) (unsaved data of '\(l.record.object)'): \(Errno(Glibc.errno)); \(stay)")
            return nil
        }
        if Glibc.rename(sidecar, dest + ".json") != 0 {
            logger.critical("cannot move \(sidecar) to \(dest).json: \(Errno(Glibc.errno)); the next mount moves it beside \(dest)")
        }
        if !whole {
            logger.error("found a cut-off file of '\(l.record.object)' (\(bytes) bytes, never closed) left by an earlier mount that ended while it was being written: kept in \(dest); it is not a complete copy")
        }
        return LostEntry(path: dest, record: l.record, complete: whole, reason: reason(l, bytes), bytes: bytes, md5: digest)
    }

    private func md5(of l: Leftover) -> (Int64, String)? {
        let fd = Glibc.open(l.path, O_RDONLY | O_CLOEXEC)
        let sum = fd >= 0 ? Self.md5(fd: fd, length: l.size) : nil
        let e = Errno(Glibc.errno)
        if fd >= 0 { Glibc.close(fd) }
        if sum == nil {
            logger.critical("cannot read \(l.path) (unsaved data of '\(l.record.object)' left by an earlier mount): \(e); it stays there for the next mount or `bucketfs recover \(directory)`")
        }
        return sum
    }

    private func reason(_ l: Leftover, _ bytes: Int64) -> String {
        l.complete && bytes == l.size
            ? "unsaved data found at mount time: the file was closed (\(bytes) bytes), and the mount ended (crash or kill) before its upload was known to succeed"
            : "CUT OFF: the mount ended (crash or kill) while the file was open for writing; it holds what was written until then (\(bytes) bytes\(l.record.size.map { ", \($0) at close" } ?? "")), not necessarily the whole file"
    }

    /// Every leftover moved at once, as `bucketfs recover` does before it uploads: the complete
    /// entries (the cut-off ones are logged).
    func recoverOrphans() -> [LostEntry] {
        findLeftovers().compactMap { readLeftover($0) }.compactMap { moveLeftover($0) }.filter(\.complete)
    }

    /// A lost+found path for `object` that neither a data file nor a sidecar has: the time in
    /// milliseconds, one later while that is taken (two files of one object kept within a
    /// millisecond stay two entries).
    func freeLostName(_ object: String, complete: Bool) -> String {
        var ms = Int64(clock.seconds * 1000)
        while true {
            let dest = "\(lostAndFound)/\(Self.escape(object)).\(ms)" + (complete ? "" : LostEntry.cutOffSuffix)
            if access(dest, F_OK) != 0 && access(dest + ".json", F_OK) != 0 { return dest }
            ms += 1
        }
    }

    /// The bytes read and their md5 (base64); nil when a read failed.
    static func md5(fd: Int32, length: Int64) -> (Int64, String)? {
        let r = MD5Sum.reading(fd: fd, length: length)
        return r.failed ? nil : (r.bytes, r.md5)
    }

    /// Writes `data` under a temporary name and renames it over `path`.
    private static func replace(_ path: String, with data: Data) -> Bool {
        let tmp = path + ".tmp"
        let fd = PrivateFiles.open(tmp, O_WRONLY | O_TRUNC)
        guard fd >= 0 else { return false }
        let written = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        Glibc.close(fd)
        guard written == data.count, Glibc.rename(tmp, path) == 0 else {
            unlink(tmp)
            return false
        }
        return true
    }
}
