import ArgumentParser
import BucketFS
import Foundation
import Logging
import StorageModel

// `versions`, `restore`, and the `--at` of ls, stat and cat (docs/RESTORE.md).

extension Target {
    /// This target seen as it was at `at` (nil: live, unchanged), through a view that lists the
    /// versions under `scope` once.
    func at(_ at: String?, scope: String, source: String) async throws -> Target {
        guard let at else { return self }
        let quiet = Logger(label: "bucketfs", factory: { _ in SwiftLogNoOpLogHandler() })
        let view = try await PastMount.view(storage.store, at: at, source: source, scope: scope, logger: quiet)
        let s = Storage(store: view)
        return Target(storage: s, ref: s.reference().exactly(ref.fullPath))
    }

    /// The prefix a recursive command works on: the path as a directory ("" for the root).
    var treePrefix: String {
        ref.fullPath.isEmpty || ref.fullPath.hasSuffix("/") ? ref.fullPath : ref.fullPath + "/"
    }
}

struct Versions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List a name's generations (or, with -r, those of every name under a prefix): generation, size, created, deleted or 'live'.")
    @Argument(help: "SOURCE/PATH: gs://BUCKET/path, file://DIR/path or DIR/path") var target: String
    @Flag(name: .shortAndLong, help: "Every name under SOURCE/PATH/.") var recursive = false
    @OptionGroup var access: AccessOptions

    func run() async throws {
        try await access.perform("versions", on: target) { t in
            guard let listing = t.storage.store.versions else { throw PastMount.Refusal(description: KeptPast.none(source: target)) }
            if let note = KeptPast.refusal(try await listing.versioningState(), source: target) {
                FileHandle.standardError.write(Data("bucketfs: note: \(note)\n".utf8))
            }
            let prefix = recursive ? t.treePrefix : t.ref.fullPath
            var token: String?
            var found: [ObjectVersion] = []
            repeat {
                let page = try await listing.listVersions(ListRequest(prefix: prefix, delimiter: nil, maxResults: 1000, pageToken: token))
                found += page.versions.filter { recursive || $0.info.name == prefix }
                token = page.nextPageToken
            } while token != nil
            if found.isEmpty { throw StorageError.objectNotFound(path: prefix) }
            // Listed as the server sent it, with a note when that breaks the versioning rules
            // (then `--at` and `restore` refuse it).
            let faults = VersionRules.faults(found)
            if !faults.isEmpty {
                FileHandle.standardError.write(Data("bucketfs: note: \(BrokenVersionListing(faults: faults, prefix: prefix))\n".utf8))
            }
            // By name, then oldest first, whatever order the server listed them in
            // (fake-gcs-server lists a name's newest generation first).
            found.sort { $0.info.name == $1.info.name ? $0.info.generation < $1.info.generation
                                                        : PastSnapshot.byteLess($0.info.name, $1.info.name) }
            for v in found { print(Self.line(v)) }
        }
    }

    /// `NAME  GENERATION  SIZE  CREATED  DELETED|live`, tab-separated, oldest generation first.
    static func line(_ v: ObjectVersion) -> String {
        let created = PointInTime.format(v.info.timeCreated)
        let deleted = v.timeDeleted.map(PointInTime.format) ?? "live"
        return "\(v.info.name)\t\(v.info.generation)\t\(v.info.size)\t\(created)\t\(deleted)"
    }
}

struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make a past generation live again by a server-side copy that never overwrites a change it did not see (ifGenerationMatch of the live generation).",
        discussion: """
            Examples:
              bucketfs restore gs://b/report.txt --at 2h
              bucketfs restore gs://b/report.txt --generation 1732500000123456
              bucketfs restore gs://b/photos --at 2026-11-20T10:00:00Z -r
            """)
    @Argument(help: "SOURCE/PATH: gs://BUCKET/path, file://DIR/path or DIR/path") var target: String
    @Option(name: .customLong("at"), help: "Restore what was live at TIME: RFC 3339 or a duration back from now (90m, 2h, 3d).")
    var at: String?
    @Option(name: .customLong("generation"), help: "Restore this generation of the name (not with -r).")
    var generation: Int64?
    @Flag(name: .shortAndLong, help: "Every name under SOURCE/PATH/ as it was at --at: names deleted since are restored, names created since are left alone.")
    var recursive = false
    @Flag(name: .customLong("delete"), help: "With --at: also delete the names created after TIME (each guarded by its live generation; a versioned bucket keeps them as old versions).")
    var deleteNewer = false
    @Option(name: .customLong("concurrency"), help: "Copies under way at once.") var concurrency = 8
    @OptionGroup var access: AccessOptions

    func validate() throws {
        guard (at == nil) != (generation == nil) else { throw ValidationError("give one of --at TIME or --generation G") }
        if recursive, generation != nil { throw ValidationError("-r restores a prefix as of --at TIME; --generation names one generation of one name") }
        if deleteNewer, at == nil { throw ValidationError("--delete needs --at TIME") }
        if let at { do { _ = try PointInTime(parsing: at, now: BucketClock.real.date) } catch { throw ValidationError("--at: \(error)") } }
        guard concurrency >= 1 else { throw ValidationError("--concurrency must be ≥ 1") }
    }

    func run() async throws {
        try await access.perform("restore", on: target) { t in
            let store = t.storage.store
            let listing = try await PastMount.keptPast(store, source: target)
            let moment = try at.map { try PointInTime(parsing: $0, now: BucketClock.real.date) }
            let prefix = recursive ? t.treePrefix : t.ref.fullPath
            let (past, live) = try await Restorer.load(listing, live: store, prefix: prefix, moment: moment?.date ?? Date())
            var steps: [Restorer.Step]
            if recursive {
                steps = Restorer.plan(past: Array(past.entries), live: live, deleteNewer: deleteNewer)
            } else {
                let now = live.filter { $0.name == prefix }
                var then = past.info(prefix).map { [$0] } ?? []
                if let generation {
                    // The generation asked for, whether it was live at some moment or not.
                    let listed = try await Self.generation(generation, of: prefix, listing)
                    then = [listed]
                }
                steps = Restorer.plan(past: then, live: now, deleteNewer: deleteNewer)
                if steps.isEmpty { throw StorageError.objectNotFound(path: prefix) }
            }
            let sizes = Dictionary(past.entries.map { ($0.name, $0.size) }, uniquingKeysWith: { a, _ in a })
            let toCopy = steps.filter { if case .restore = $0 { return true } else { return false } }
            let progress = TransferProgress(files: steps.count, bytes: toCopy.reduce(0) { $0 + (sizes[Restorer.name(of: $1)] ?? 0) },
                                            terminal: isatty(2) == 1)
            let summary = await Restorer.run(steps, on: store, concurrency: concurrency) { name, outcome in
                progress.fileDone(bytes: outcome == "restored" ? (sizes[name] ?? 0) : 0)
            }
            progress.finish()
            Self.report(summary, steps: steps, what: prefix.isEmpty ? "/" : prefix,
                        moment: moment.map { "as it was at \($0)" } ?? "generation \(generation ?? 0)")
            if !summary.refused.isEmpty || !summary.failed.isEmpty { throw ExitCode(1) }
        }
    }

    static func generation(_ g: Int64, of name: String, _ listing: any VersionListing) async throws -> ObjectInfo {
        var token: String?
        repeat {
            let page = try await listing.listVersions(ListRequest(prefix: name, delimiter: nil, maxResults: 1000, pageToken: token))
            if let v = page.versions.first(where: { $0.info.name == name && $0.info.generation == g }) { return v.info }
            token = page.nextPageToken
        } while token != nil
        throw StorageError.objectNotFound(path: "\(name)#\(g)")
    }

    /// One line per name that changed or could not, then the summary.
    static func report(_ s: Restorer.Summary, steps: [Restorer.Step], what: String, moment: String) {
        let generations = Dictionary(steps.compactMap { step -> (String, Int64)? in
            if case .restore(let n, let g, _, _) = step { return (n, g) } else { return nil } }, uniquingKeysWith: { a, _ in a })
        for n in s.restored { print("restored\t\(n)\tgeneration \(generations[n] ?? 0)") }
        for n in s.removed { print("deleted\t\(n)\t(created after the moment)") }
        for n in s.newer { print("left\t\(n)\t(created after the moment; --delete removes it)") }
        for n in s.refused {
            print("refused\t\(n)\t(changed since it was listed: nothing was written; run the restore again to see it)")
        }
        for f in s.failed { print("failed\t\(f.name)\t\(f.error)") }
        var parts = ["\(s.restored.count) restored", "\(s.equal.count) already equal"]
        if !s.removed.isEmpty { parts.append("\(s.removed.count) deleted") }
        parts.append("\(s.newer.count) created since, left alone")
        parts.append("\(s.refused.count) refused by a concurrent change")
        if !s.failed.isEmpty { parts.append("\(s.failed.count) failed") }
        FileHandle.standardError.write(Data("restore \(what) \(moment): \(parts.joined(separator: ", "))\n".utf8))
    }
}
