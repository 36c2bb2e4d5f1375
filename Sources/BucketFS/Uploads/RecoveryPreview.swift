import Foundation
import StorageModel

/// What `bucketfs recover --dry-run` looks at, read and never changed (docs/OPERATING.md, "The
/// recovery runbook"): the cache directory is not locked (its `.lock` keeps its holder's pid),
/// stage files a crash left are not moved into lost+found, and nothing half-moved is finished.
/// Each such stage file is described where it lies, as the real recovery would describe it once
/// moved: complete when its sidecar says closed at the size the file has, else cut off.
public enum RecoveryPreview {
    public static func entries(in directory: String) -> (entries: [LostEntry], unreadable: [String]) {
        var (entries, unreadable) = LostEntry.all(in: directory + "/lost+found")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        let set = Set(names)
        for name in names.sorted() where name.hasPrefix("stage-") && !name.contains(".") && set.contains(name + ".json") {
            let path = directory + "/" + name
            guard let d = FileManager.default.contents(atPath: path + ".json"),
                  let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any],
                  let record = StageRecord(json: o) else { continue }  // never dirty: the recovery drops it
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            var st = stat()
            guard fd >= 0, fstat(fd, &st) == 0, let (bytes, md5) = StagingArea.md5(fd: fd, length: Int64(st.st_size)) else {
                if fd >= 0 { close(fd) }
                unreadable.append(path)
                continue
            }
            close(fd)
            let complete = record.closed && record.size == bytes
            let reason = complete
                ? "a stage file an earlier mount left (closed, \(bytes) bytes); the recovery moves it into lost+found first"
                : "CUT OFF: a stage file an earlier mount left while it was open for writing (\(bytes) bytes); the recovery moves it into lost+found"
            entries.append(LostEntry(path: path, record: record, complete: complete, reason: reason, bytes: bytes, md5: md5))
        }
        return (entries, unreadable)
    }
}
