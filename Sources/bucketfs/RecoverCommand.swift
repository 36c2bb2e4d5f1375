import ArgumentParser
import BucketFS
import Foundation
import Logging
import StorageModel

/// `bucketfs recover CACHE_DIR`: uploads what a cache directory's lost+found holds complete, with
/// its metadata, never over a newer object; lists what is cut off and leaves it (docs/OPERATING.md,
/// "lost+found, and recovering from it").
struct Recover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload the complete files of CACHE_DIR/lost+found (and stage files a crashed mount left there) with their metadata, never over a newer object; list the cut-off ones and leave them.")

    @Argument(help: "The cache directory (a mount's --cache-dir).") var cacheDirectory: String
    @Option(name: .customLong("to"), help: ArgumentHelp("Where the objects go (default: the source the cache directory was last mounted from).", valueName: "SOURCE"))
    var to: String?
    @Flag(name: .customLong("dry-run"), help: "Say what would be uploaded, change nothing.") var dryRun = false
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
        guard let spec = to ?? Self.recordedSource(dir) else {
            throw failed(ValidationErrorText("no source recorded in \(dir)/\(Self.sourceFile): name it with --to SOURCE"), "recover \(dir)")
        }
        // The directory is held while it is read and emptied (a mount of it waits); stage files a
        // crash left are moved into lost+found first, as a mount would.
        let staging: StagingArea
        do { staging = try StagingArea.openForRecovery(dir, logger: logger) } catch {
            throw failed(error, "recover \(dir)")
        }
        let (entries, unreadable) = LostEntry.all(in: staging.lostAndFoundPath)
        let store: any ObjectStore
        do {
            let source = try Source.parse(spec, splitLocal: false)
            store = try await SourceCheck.open(source, gcs: access.gcs, firebase: access.firebase, logger: logger,
                                               prefixMount: true, mounting: true)
        } catch {
            throw failed(error, "recover \(dir) to \(spec)")
        }
        var summary = RecoverySummary()
        for e in entries {
            let object = e.record.object
            guard e.complete else {
                print("cut off (left): \(e.path): \(e.bytes) bytes of '\(object)', not a complete copy (\(e.reason))")
                summary.cutOff += 1
                continue
            }
            do {
                let outcome = try await Self.recover(e, to: store, dryRun: dryRun)
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
                }
            } catch {
                FileHandle.standardError.write(Data("bucketfs: recover '\(object)' from \(e.path): \(error)\n".utf8))
                summary.left += 1
            }
        }
        for path in unreadable {
            print("left: \(path): its sidecar is missing or unreadable; look at it and put it by hand")
            summary.left += 1
        }
        print(summary.line(dryRun: dryRun, to: spec))
        withExtendedLifetime(staging) {}
        if summary.left > 0 { throw ExitCode(1) }
    }

    typealias Outcome = RecoveredUpload.Outcome

    /// One complete entry (`RecoveredUpload`, as a remount on the same cache directory does it).
    static func recover(_ e: LostEntry, to store: any ObjectStore, dryRun: Bool) async throws -> Outcome {
        try await RecoveredUpload.run(e, to: store, contentTypes: ContentTypePolicy(), dryRun: dryRun)
    }

    static func recordedSource(_ dir: String) -> String? {
        guard let d = FileManager.default.contents(atPath: dir + "/" + sourceFile),
              let o = try? JSONSerialization.jsonObject(with: d) as? [String: String] else { return nil }
        return o["source"]
    }

    /// Writes `CACHE_DIR/.source` (a mount does, so that `recover` knows where its files go).
    static func recordSource(_ source: String, in dir: String) {
        guard let d = try? JSONSerialization.data(withJSONObject: ["source": source], options: [.sortedKeys]) else { return }
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

    func line(dryRun: Bool, to spec: String) -> String {
        "\(dryRun ? "dry run: would upload" : "recovered") \(uploaded) file(s) (\(bytes) bytes) to \(spec); \(already) already in the bucket; \(cutOff) cut off (left in lost+found); \(left) left for another reason"
    }
}

/// `bucketfs status [SOURCE]`: every recorded mount's cache directory, and what it holds unsaved.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the cache directories mounts have used (by source) and the unsaved data in each; exits 1 when there is some.")
    @Argument(help: "Only this source (as mounted: gs://BUCKET[/PREFIX], firebase://…, or the directory).") var source: String?

    func run() throws {
        let filter = try source.map { try Source.parse($0, splitLocal: false).display }
        var unsavedFound = false
        let entries = CacheDirectoryRegistry.entries(of: filter)
        if entries.isEmpty { print("no mount recorded in \(CacheDirectoryRegistry.directory())") }
        for e in entries {
            let state: String
            if let busy = CacheDirectoryLock.refusal(e.cacheDirectory) {
                state = "in use: \(busy)"
            } else if !FileManager.default.fileExists(atPath: e.cacheDirectory) {
                state = "gone"
            } else {
                let u = CacheDirectoryRegistry.unsaved(in: e.cacheDirectory)
                state = u.isEmpty ? "nothing unsaved" : u.description
                if !u.isEmpty {
                    unsavedFound = true
                    FileHandle.standardError.write(Data("bucketfs: error: unsaved data of \(e.source) in \(e.cacheDirectory): \(u.description); upload it with `bucketfs recover \(e.cacheDirectory)`\n".utf8))
                }
            }
            print("\(e.source)\t\(e.cacheDirectory)\t\(e.mountPoint)\t\(state)")
        }
        if unsavedFound { throw ExitCode(1) }
    }
}
