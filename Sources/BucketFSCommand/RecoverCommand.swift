import ArgumentParser
import BucketFS
import Foundation
import FuseKit
import Logging
import StorageModel

/// `bucketfs recover CACHE_DIR`: uploads what a cache directory's lost+found holds complete, with
/// its metadata, never over a newer object; lists what is cut off and leaves it (docs/OPERATING.md,
/// "lost+found, and recovering from it").
struct Recover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload the complete files of CACHE_DIR/lost+found (and stage files a crashed mount left there) with their metadata, never over a newer object (beside it, as NAME.recovered-TIME); list the cut-off ones and leave them.")

    @Argument(help: "The cache directory (a mount's --cache-dir).") var cacheDirectory: String
    @Option(name: .customLong("to"), help: ArgumentHelp("Where the objects go (default: the source the cache directory was last mounted from).", valueName: "SOURCE"))
    var to: String?
    @Flag(name: .customLong("dry-run"), help: "Say what would be uploaded, dropped or moved; change nothing (on disk or in the bucket).") var dryRun = false
    @Flag(name: .customLong("drop-cut-off"), help: "Delete the cut-off files (and their sidecars) from lost+found, after a look with --dry-run.")
    var dropCutOff = false
    @Option(name: .customLong("keep-aside"), help: ArgumentHelp("Move the cut-off files (and their sidecars) out of lost+found into DIR.", valueName: "DIR"))
    var keepAside: String?
    @OptionGroup var access: AccessOptions

    /// The file a mount leaves in its cache directory naming its source.
    static let sourceFile = ".source"

    func run() async throws {
        let logger = access.log.bootstrap()
        let dir = URL(fileURLWithPath: cacheDirectory).standardizedFileURL.path
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir), isDir.boolValue else {
            throw failed(ValidationErrorText("no such directory"), "recover \(dir)")
        }
        if let refusal = CacheDirectoryLock.refusal(dir) { throw failed(ValidationErrorText(refusal), "recover") }
        let recorded = Self.recorded(dir)
        guard let spec = to ?? recorded?.source else {
            throw failed(ValidationErrorText("no source recorded in \(dir)/\(Self.sourceFile): name it with --to SOURCE"), "recover \(dir)")
        }
        // A real run holds the directory while it is read and emptied (a mount of it waits), and
        // moves stage files a crash left into lost+found first, as a mount would. A dry run only
        // reads: no lock taken (its file keeps its pid), nothing moved (RecoveryPreview).
        var staging: StagingArea?
        let entries: [LostEntry], unreadable: [String]
        if dryRun {
            (entries, unreadable) = RecoveryPreview.entries(in: dir)
        } else {
            do { staging = try StagingArea.openForRecovery(dir, logger: logger) } catch {
                throw failed(error, "recover \(dir)")
            }
            (entries, unreadable) = LostEntry.all(in: staging!.lostAndFoundPath)
        }
        // The endpoint and credentials the mount used, unless told otherwise (and not when the
        // files go to another source).
        var gcs = access.gcs
        if to == nil, let a = recorded?.access {
            let (g, used) = a.apply(to: gcs)
            gcs = g
            if let used { FileHandle.standardError.write(Data("bucketfs: recover: reaching \(spec) \(used)\n".utf8)) }
        }
        let store: any ObjectStore
        do {
            let source = try Source.parse(spec, splitLocal: false)
            store = try await SourceCheck.open(source, gcs: gcs, firebase: access.firebase, logger: logger,
                                               prefixMount: true, mounting: true)
        } catch {
            var hint = Self.reachHint
            if to == nil, let missing = recorded?.access?.missingSecret { hint = missing + "; " + hint }
            throw failed(ValidationErrorText("\(error)\n\(hint)"), "recover \(dir) to \(spec)")
        }
        // `--to` another source: the generations the files were written over mean nothing there.
        let display = { (spec: String) in (try? Source.parse(spec, splitLocal: false).display) ?? spec }
        let elsewhere = to != nil && display(spec) != recorded.map { display($0.source) }
        var summary = RecoverySummary()
        for e in entries {
            let object = e.record.object
            guard e.complete else {
                await settle(cutOff: e, store: store, directory: dir, summary: &summary)
                continue
            }
            do {
                let outcome = try await Self.recover(e, to: store, dryRun: dryRun, elsewhere: elsewhere)
                if dryRun, let name = Self.wouldWrite(outcome, object),
                   let why = await RefusalPreview.reason(e, name: name, store: store, elsewhere: elsewhere) {
                    print("would be refused: '\(name)' (\(e.bytes) bytes): \(why)")
                    summary.refused += 1
                    continue
                }
                switch outcome {
                case .uploaded(let g):
                    print("\(dryRun ? "would upload" : "uploaded"): '\(object)' (\(e.bytes) bytes\(g.map { ", generation \($0)" } ?? ""))")
                    summary.uploaded += 1
                    summary.bytes += e.bytes
                case .alreadyThere:
                    print("already in the bucket: '\(object)' (same md5)\(dryRun ? "" : "; removed from lost+found")")
                    summary.already += 1
                case .newer(let g):
                    print("left: '\(object)': the bucket has a newer object (generation \(g)) than the one this file was written over; \(e.path) stays")
                    summary.left += 1
                case .beside(let name, let g, let winner):
                    print(Self.besideLine(object, name: name, generation: g, winner: winner, bytes: e.bytes, dryRun: dryRun))
                    summary.uploaded += 1
                    summary.beside += 1
                    summary.bytes += e.bytes
                }
            } catch {
                let hint = e.refused && BucketFS.errno(for: error) == .EACCES ? "; refused again, as at its close: `--to` a prefix the rules let you write uploads it there" : ""
                FileHandle.standardError.write(Data("bucketfs: recover '\(object)' from \(e.path): \(error)\(hint)\n".utf8))
                summary.left += 1
            }
        }
        for path in unreadable {
            print("left: \(path): its sidecar is missing or unreadable; look at it and put it by hand")
            summary.left += 1
        }
        print(summary.line(dryRun: dryRun, to: spec))
        withExtendedLifetime(staging) {}
        if summary.left > 0 || summary.refused > 0 { throw ExitCode(1) }
    }

    /// The name a dry run's outcome would write, if any.
    static func wouldWrite(_ outcome: Outcome, _ object: String) -> String? {
        switch outcome {
        case .uploaded(nil): return object
        case .beside(let name, nil, _): return name
        default: return nil
        }
    }

    typealias Outcome = RecoveredUpload.Outcome

    /// A cut-off file: dropped when the bucket holds a copy written after it (its writer ran
    /// again: the object is no longer the generation the file was written over, or has its very
    /// content); else moved into `--keep-aside DIR`, or dropped with `--drop-cut-off`; else left,
    /// with what settles it.
    func settle(cutOff e: LostEntry, store: any ObjectStore, directory dir: String, summary: inout RecoverySummary) async {
        let object = e.record.object
        let would = dryRun ? "would drop" : "dropped"
        let there: ObjectInfo?
        do { there = try await store.getMetadata(object) } catch { there = nil }
        if let there, there.generation != e.record.baseGeneration || (e.md5 != nil && there.md5Hash == e.md5 && there.size == e.bytes) {
            print("\(would) (superseded): \(e.path): \(e.bytes) bytes of '\(object)', cut off; the bucket holds a complete copy written after it (generation \(there.generation), \(there.size) bytes)")
            if !dryRun { e.remove() }
            summary.superseded += 1
        } else if let keepAside {
            let aside = URL(fileURLWithPath: keepAside).standardizedFileURL.path
            if dryRun {
                print("would keep aside: \(e.path) in \(aside)")
                summary.keptAside += 1
            } else if let moved = CutOffAside.move(e.path, into: aside) {
                print("kept aside: \(e.path) → \(moved) (\(e.bytes) bytes of '\(object)', cut off; its sidecar beside it)")
                summary.keptAside += 1
            } else {
                FileHandle.standardError.write(Data("bucketfs: recover: cannot move \(e.path) into \(aside): \(String(cString: strerror(errno))); it stays\n".utf8))
                summary.cutOff += 1
            }
        } else if dropCutOff {
            print("\(would) (--drop-cut-off): \(e.path): \(e.bytes) bytes of '\(object)', not a complete copy (\(e.reason))")
            if !dryRun { e.remove() }
            summary.dropped += 1
        } else {
            print("cut off (left): \(e.path): \(e.bytes) bytes of '\(object)', not a complete copy (\(e.reason)); settle it: run its writer again (recover then drops it), or `bucketfs recover \(dir) --drop-cut-off` or `--keep-aside DIR`")
            summary.cutOff += 1
        }
    }

    /// One complete entry (`RecoveredUpload`, as a remount on the same cache directory does it),
    /// put beside its name when that has moved on.
    static func recover(_ e: LostEntry, to store: any ObjectStore, dryRun: Bool, elsewhere: Bool = false) async throws -> Outcome {
        try await RecoveredUpload.run(e, to: store, contentTypes: ContentTypePolicy(), dryRun: dryRun, besideNewer: true,
                                      elsewhere: elsewhere)
    }

    /// What a file put beside its moved-on name became, in one line.
    static func besideLine(_ object: String, name: String, generation: Int64?, winner: Int64, bytes: Int64, dryRun: Bool) -> String {
        let now = winner == 0 ? "was deleted" : "is now generation \(winner)"
        let how = dryRun ? "would upload beside" : (generation == nil ? "beside" : "uploaded beside")
        let gen = generation.map { ", generation \($0)" } ?? ""
        return "\(how): '\(object)' \(now), not the one this file was written over: \(dryRun ? "it would go" : "it is") in '\(name)' (\(bytes) bytes\(gen)), and '\(object)' is left as it is"
    }

    /// Every option that can make a refused recovery reach its bucket.
    static let reachHint = "options that reach the bucket: --endpoint URL (an emulator, a private endpoint), "
        + "--key-file FILE, --token TOKEN, --token-url URL or --anonymous, --impersonate-service-account, --ca-file PEM (a private CA); "
        + "--to SOURCE for another source"

    static func recordedSource(_ dir: String) -> String? { recorded(dir)?.source }

    /// What `CACHE_DIR/.source` says: the source, and how the mount reached it (RecordedAccess).
    static func recorded(_ dir: String) -> (source: String, access: RecordedAccess?)? {
        guard let d = FileManager.default.contents(atPath: dir + "/" + sourceFile),
              let o = try? JSONSerialization.jsonObject(with: d) as? [String: String],
              let source = o["source"] else { return nil }
        let access = RecordedAccess(json: o)
        return (source, access == RecordedAccess() ? nil : access)
    }

    /// Writes `CACHE_DIR/.source` (a mount does, so that `recover` knows where its files go, and
    /// how the mount reached them: never a secret).
    static func recordSource(_ source: String, access: RecordedAccess? = nil, in dir: String) {
        var o = access?.json ?? [:]
        o["source"] = source
        guard let d = try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]) else { return }
        let tmp = dir + "/" + sourceFile + ".tmp"
        if FileManager.default.createFile(atPath: tmp, contents: d, attributes: [.posixPermissions: 0o600]) {
            rename(tmp, dir + "/" + sourceFile)
        }
    }
}

struct RecoverySummary {
    var uploaded = 0
    var bytes: Int64 = 0
    var already = 0
    var cutOff = 0
    var left = 0
    /// Cut-off files dropped because the bucket holds a copy written after them, dropped with
    /// `--drop-cut-off`, moved out with `--keep-aside`.
    var superseded = 0
    var dropped = 0
    var keptAside = 0
    /// Of `uploaded`, those put beside a name that had moved on (`NAME.recovered-TIME`).
    var beside = 0
    /// A dry run's complete files that would be refused (`RefusalPreview`), not in `uploaded`.
    var refused = 0

    func line(dryRun: Bool, to spec: String) -> String {
        var s = "\(dryRun ? "dry run: would upload" : "recovered") \(uploaded) file(s) (\(bytes) bytes) to \(spec)"
            + (beside > 0 ? " (\(beside) beside a name that had moved on, as NAME.recovered-TIME)" : "")
            + "; \(already) already in the bucket; \(cutOff) cut off (left in lost+found); \(left) left for another reason"
        let d = dryRun ? "would be " : ""
        if superseded > 0 { s += "; \(superseded) cut off and superseded by a newer copy (\(d)dropped)" }
        if dropped > 0 { s += "; \(dropped) cut off (\(d)dropped)" }
        if keptAside > 0 { s += "; \(keptAside) cut off (\(d)kept aside)" }
        if refused > 0 {
            s += "; \(refused) would be refused (the rules or IAM): `--to \(Status.bucketRoot(spec))/PREFIX` puts them under a prefix the rules let you write"
        }
        return s
    }
}

/// `bucketfs status [SOURCE]`: every recorded mount's cache directory, and what it holds unsaved
/// (a running mount's lost+found included); exits 1 while anything is unsettled, and its last line
/// says what to run.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the cache directories mounts have used (by source) and the unsaved data in each; exits 1 while there is some, and the last line says what to run.")
    @Argument(help: "Only this source (as mounted: gs://BUCKET[/PREFIX], firebase://…, or the directory).") var source: String?

    func run() throws {
        let filter = try source.map { try Source.parse($0, splitLocal: false).display }
        var todo: [String] = []
        let entries = CacheDirectoryRegistry.entries(of: filter)
        if entries.isEmpty { print("no mount recorded in \(CacheDirectoryRegistry.directory())") }
        for e in entries {
            var state: String
            let u: CacheDirectoryRegistry.Unsaved
            let busy = CacheDirectoryLock.refusal(e.cacheDirectory)
            if !FileManager.default.fileExists(atPath: e.cacheDirectory) {
                state = "gone"
                u = .init()
            } else if let busy {
                // A running mount's stage files are its uploads under way; its lost+found is unsaved.
                var lost = CacheDirectoryRegistry.unsaved(in: e.cacheDirectory)
                lost.staged = 0
                lost.stagedCutOff = 0
                u = lost
                let running = RunningMountState.of(cacheDirectory: e.cacheDirectory, mountPoint: e.mountPoint, source: e.source,
                                                   mounted: !MountPointCheck.mounts(at: MountPointCheck.resolved(e.mountPoint)).isEmpty)
                state = running.state + (u.isEmpty ? "" : "; it holds \(u.description)")
                if let step = running.step {
                    FileHandle.standardError.write(Data("bucketfs: error: \(e.source) at \(e.mountPoint) is signed out; \(step)\n".utf8))
                    todo.append(step)
                }
            } else {
                u = CacheDirectoryRegistry.unsaved(in: e.cacheDirectory)
                state = u.isEmpty ? "nothing unsaved" : u.description
            }
            // Flat-bucket directory renames that stopped part way (a mount finishes them).
            let renames = UnfinishedRenames.recorded(in: e.cacheDirectory).sorted { $0.key < $1.key }
            if !renames.isEmpty {
                let list = renames.map { "'\($0.key)' → '\($0.value)'" }.joined(separator: ", ")
                state += "; \(renames.count) directory rename(s) not finished: \(list)"
                let step = renames.map { "mv -T \($0.key) \($0.value)" }.joined(separator: ", ")
                let run = "in the root of a mount of \(e.source) on this cache directory: \(step)"
                FileHandle.standardError.write(Data("bucketfs: error: directory rename(s) of \(e.source) not finished: \(list); \(run)\n".utf8))
                todo.append(run)
            }
            if !u.isEmpty {
                let run = Self.whatToRun(e.cacheDirectory, u, busy: busy != nil, source: e.source)
                FileHandle.standardError.write(Data("bucketfs: error: unsaved data of \(e.source) in \(e.cacheDirectory): \(u.description); \(run)\n".utf8))
                todo.append(run)
            }
            print("\(e.source)\t\(e.cacheDirectory)\t\(e.mountPoint)\t\(state)")
        }
        if todo.isEmpty {
            print("nothing unsaved: nothing to run")
        } else {
            print("to settle: " + todo.joined(separator: "; "))
            throw ExitCode(1)
        }
    }

    /// The commands that settle what `dir` holds: `recover` for the complete files (after the
    /// mount ends, when one holds the directory), `recover --to` a prefix the rules allow for
    /// those the store refused, and for the cut-off ones a look, then `--drop-cut-off` or
    /// `--keep-aside`.
    static func whatToRun(_ dir: String, _ u: CacheDirectoryRegistry.Unsaved, busy: Bool, source: String? = nil) -> String {
        var steps: [String] = []
        if busy { steps.append("when its mount has ended") }
        let others = u.complete - u.refused
        if others > 0 { steps.append("`bucketfs recover \(dir)` uploads \(others) complete file(s)") }
        if u.refused > 0 {
            let root = source.map(Self.bucketRoot) ?? "SOURCE"
            steps.append("\(u.refused) file(s) the store refused (its rules or IAM; each is complete): `bucketfs recover \(dir) --to \(root)/PREFIX` uploads them under a prefix the rules let you write, or `bucketfs recover \(dir)` once the rules or permissions let them in")
        }
        if u.cutOffTotal > 0 {
            steps.append("for \(u.cutOffTotal) cut-off file(s): run the writer again (`bucketfs recover \(dir)` then drops those the bucket holds newer), or look with `bucketfs recover \(dir) --dry-run`, then `bucketfs recover \(dir) --drop-cut-off` or `--keep-aside DIR`")
        }
        return steps.joined(separator: ", ")
    }

    /// `scheme://BUCKET` of a source (a directory stays itself).
    static func bucketRoot(_ source: String) -> String {
        guard let r = source.range(of: "://") else { return source }
        let rest = source[r.upperBound...]
        return String(source[..<r.upperBound]) + String(rest.prefix { $0 != "/" })
    }
}
