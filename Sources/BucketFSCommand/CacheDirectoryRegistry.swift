import BucketFS
import Foundation
import StorageModel

/// Where every mount's cache directory is, by source (docs/OPERATING.md, "The cache directory"),
/// so that data a crashed mount left in one is found by a later mount of the same source with
/// another (`--cache-dir` given once and not again, a hand-run mount moved to fstab or systemd).
/// One small JSON file per source and cache directory under the state directory:
/// `$XDG_STATE_HOME/bucketfs/cache-dirs/`, else `/var/lib/bucketfs/cache-dirs/` for root and
/// `~/.local/state/bucketfs/cache-dirs/` for others.
enum CacheDirectoryRegistry {
    struct Entry: Equatable {
        let source: String
        let cacheDirectory: String
        let mountPoint: String
    }

    /// What a cache directory holds that no bucket has: stage files with a sidecar (left by a mount
    /// that ended without uploading them; `stagedCutOff` of them not closed, or not the size they
    /// had at close) and lost+found entries (`cutOff` of them cut off, `refused` of them complete
    /// and refused by the store: its rules or IAM).
    struct Unsaved: Equatable {
        var staged = 0
        var stagedCutOff = 0
        var lost = 0
        var cutOff = 0
        var refused = 0
        var isEmpty: Bool { staged == 0 && lost == 0 }
        /// Files that hold a whole copy (lost+found's `complete`, a stage file closed at its size, and
        /// a lost+found file whose sidecar cannot be read: someone must look at it), and cut-off ones.
        var complete: Int { staged - stagedCutOff + lost - cutOff }
        var cutOffTotal: Int { stagedCutOff + cutOff }
        var description: String {
            var parts: [String] = []
            if staged > 0 { parts.append("\(staged) file(s) left staged by a mount that ended without uploading them") }
            let kinds = [cutOff > 0 ? "\(cutOff) cut off" : nil, refused > 0 ? "\(refused) refused by the store" : nil].compactMap { $0 }
            if lost > 0 { parts.append("\(lost) file(s) in lost+found" + (kinds.isEmpty ? "" : " (\(kinds.joined(separator: ", ")))")) }
            return parts.joined(separator: " and ")
        }
    }

    static func stateDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let x = environment["XDG_STATE_HOME"], x.hasPrefix("/") { return x + "/bucketfs" }
        if geteuid() == 0 { return "/var/lib/bucketfs" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/bucketfs"
    }

    static func directory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        stateDirectory(environment: environment) + "/cache-dirs"
    }

    static func digest(_ s: String) -> String { ShortDigest.of(s) }

    /// Records that `source` is mounted at `mountPoint` with `cacheDirectory` (written to a
    /// temporary name and renamed: concurrent mounts never see half a file). Failures are returned,
    /// for the log.
    @discardableResult
    static func record(_ e: Entry, environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        let dir = directory(environment: environment)
        do {
            try FileManager.default.createDirectory(atPath: (dir as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try PrivateFiles.makeDirectory(dir)
            let o: [String: Any] = ["source": e.source, "cacheDirectory": e.cacheDirectory, "mountPoint": e.mountPoint,
                                    "lastMounted": ISO8601DateFormatter().string(from: Date())]
            let d = try JSONSerialization.data(withJSONObject: o, options: [.sortedKeys, .prettyPrinted])
            let name = "\(dir)/\(digest(e.source))-\(digest(e.cacheDirectory)).json"
            let tmp = name + ".tmp-\(getpid())"
            let fd = PrivateFiles.open(tmp, O_WRONLY | O_TRUNC)
            guard fd >= 0 else { return "cannot write \(tmp): \(String(cString: strerror(errno)))" }
            let written = d.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            Glibc.close(fd)
            guard written == d.count else { return "cannot write \(tmp): \(String(cString: strerror(errno)))" }
            guard rename(tmp, name) == 0 else { return "cannot write \(name): \(String(cString: strerror(errno)))" }
            return nil
        } catch {
            return "cannot record the cache directory in \(dir): \(error.localizedDescription)"
        }
    }

    /// Every recorded mount, or those of `source`.
    static func entries(of source: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment) -> [Entry] {
        let dir = directory(environment: environment)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        let prefix = source.map { digest($0) + "-" }
        var out: [Entry] = []
        for name in names.sorted() where name.hasSuffix(".json") && (prefix.map { name.hasPrefix($0) } ?? true) {
            guard let d = FileManager.default.contents(atPath: dir + "/" + name),
                  let o = try? JSONSerialization.jsonObject(with: d) as? [String: String],
                  let s = o["source"], let c = o["cacheDirectory"] else { continue }
            if let source, s != source { continue }
            out.append(Entry(source: s, cacheDirectory: c, mountPoint: o["mountPoint"] ?? ""))
        }
        return out
    }

    /// What `cacheDirectory` holds unsaved (nothing when it does not exist).
    static func unsaved(in cacheDirectory: String) -> Unsaved {
        var u = Unsaved()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: cacheDirectory)) ?? []
        let set = Set(names)
        let stages = names.filter { $0.hasPrefix("stage-") && !$0.contains(".") && set.contains($0 + ".json") }
        u.staged = stages.count
        u.stagedCutOff = stages.filter { !stageIsComplete(cacheDirectory + "/" + $0) }.count
        let lost = LostEntry.all(in: cacheDirectory + "/lost+found")
        u.lost = lost.entries.count + lost.unreadable.count
        u.cutOff = lost.entries.filter { !$0.complete }.count
        u.refused = lost.entries.filter(\.refused).count
        return u
    }

    /// A stage file whose sidecar says closed, at the size the file has (what a remount or
    /// `recover` uploads whole); anything else is cut off.
    static func stageIsComplete(_ path: String) -> Bool {
        guard let d = FileManager.default.contents(atPath: path + ".json"),
              let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any],
              let r = StageRecord(json: o), r.closed, let size = r.size else { return false }
        var st = stat()
        return stat(path, &st) == 0 && Int64(st.st_size) == size
    }

    /// Error lines for unsaved data of `source` in recorded cache directories other than `own`
    /// that no running mount holds (a running one uploads its own).
    static func elsewhere(source: String, own: String,
                          environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var seen: Set<String> = [own]
        var out: [String] = []
        for e in entries(of: source, environment: environment) where seen.insert(e.cacheDirectory).inserted {
            guard CacheDirectoryLock.refusal(e.cacheDirectory) == nil else { continue }
            let u = unsaved(in: e.cacheDirectory)
            if u.isEmpty { continue }
            out.append("unsaved data of \(source) is in another cache directory, \(e.cacheDirectory) (last mounted at \(e.mountPoint)): \(u.description); this mount does not show it: \(Status.whatToRun(e.cacheDirectory, u, busy: false, source: source)) (add the options that reach the bucket, e.g. --endpoint or --key-file)")
        }
        return out
    }
}
