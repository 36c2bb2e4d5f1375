import ArgumentParser
import Foundation
import BucketFS
import Logging
import StorageModel

/// Resolves `SOURCE[/path]` to a reference through the Firebase-shaped model.
struct Target: Sendable {
    let storage: Storage
    let ref: StorageReference

    init(storage: Storage, ref: StorageReference) {
        self.storage = storage
        self.ref = ref
    }

    /// Checks the source first (SourceCheck): a bucket that does not exist, credentials that cannot
    /// list it or an endpoint that never answers are refused within seconds, in one line.
    static func open(_ spec: String, _ access: AccessOptions, logger: Logger) async throws -> Target {
        let source = try Source.parse(spec, splitLocal: true)
        let storage = Storage(store: try await SourceCheck.open(source, gcs: access.gcs, firebase: access.firebase, logger: logger,
                                                                 prefixMount: false, mounting: false,
                                                                 allowSharedFiles: access.allowSharedFiles))
        return Target(storage: storage, ref: storage.reference().child(source.path))
    }
}

/// The options every library command takes (ls, stat, cat, put, rm, meta get|set|rm), declared
/// once: how to reach a gs:// bucket, how to reach a firebase:// bucket, and logging. Their flags,
/// help and defaults are those of the three groups, in this order.
struct AccessOptions: ParsableArguments {
    @OptionGroup var gcs: GCSOptions
    @OptionGroup var firebase: FirebaseOptions
    @OptionGroup var log: LogOptions
    @Flag(name: .customLong("allow-shared-files"), help: SharedFiles.help) var allowSharedFiles = false
}

extension AccessOptions {
    /// One library command's work on `target`: logging set up, the target opened (and its source
    /// checked), any failure printed as `bucketfs: OP TARGET: ERROR` with its exit code (2 for a
    /// missing object, 1 otherwise). An `ExitCode` the work throws is its own answer, passed on.
    func perform(_ op: String, on target: String, _ work: (inout Target) async throws -> Void) async throws {
        let logger = log.bootstrap()
        do {
            var t = try await Target.open(target, self, logger: logger)
            try await work(&t)
        } catch let e as ExitCode {
            throw e
        } catch {
            throw failed(error, "\(op) \(target)")
        }
    }
}

/// Prints an error the way a user can act on it, and exits non-zero.
func failed(_ error: any Error, _ what: String) -> ExitCode {
    FileHandle.standardError.write(Data("bucketfs: \(what): \(error)\n".utf8))
    if case StorageError.objectNotFound = error { return ExitCode(2) }
    return ExitCode(1)
}

struct Ls: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List prefixes and objects under SOURCE[/path] (one level, like the mount shows).")
    @Argument(help: "gs://BUCKET[/path], firebase://BUCKET[/path], file://DIR[/path] or DIR[/path]") var target: String
    @Option(name: .customLong("max-results"), help: "Page size (1…1000). With --page-token or alone, prints one page and the next token.")
    var maxResults: Int?
    @Option(name: .customLong("page-token")) var pageToken: String?
    @Flag(name: .shortAndLong, help: "Long format: size, updated, generation.") var long = false
    @Option(name: .customLong("at"), help: "As it was at TIME: RFC 3339 or a duration back from now (90m, 2h, 3d); needs a bucket that keeps old versions.")
    var at: String?
    @OptionGroup var access: AccessOptions

    func run() async throws {
        try await access.perform("ls", on: target) { t in
            t = try await t.at(at, scope: t.treePrefix, source: target)
            let result: StorageListResult
            if maxResults != nil || pageToken != nil {
                result = try await t.ref.list(maxResults: maxResults ?? 1000, pageToken: pageToken)
            } else {
                result = try await t.ref.listAll()
            }
            for p in result.prefixes { print("\(p.name)/") }
            for item in result.items {
                if long {
                    let m = try await item.getMetadata()
                    print("\(m.size)\t\(m.updated.map(RFC3339.format) ?? "-")\t\(m.generation)\t\(item.name)")
                } else {
                    print(item.name)
                }
            }
            if let token = result.pageToken { FileHandle.standardError.write(Data("next page token: \(token)\n".utf8)) }
        }
    }
}

struct Stat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print an object's metadata.")
    @Argument var target: String
    @Flag(help: "Print JSON.") var json = false
    @Option(name: .customLong("object"), help: "Use this exact object name (e.g. a placeholder 'dir/').")
    var exactName: String?
    @Option(name: .customLong("at"), help: "As it was at TIME: RFC 3339 or a duration back from now (90m, 2h, 3d); needs a bucket that keeps old versions.")
    var at: String?
    @OptionGroup var access: AccessOptions

    func run() async throws {
        try await access.perform("stat", on: target) { t in
            if let exactName { t = Target(storage: t.storage, ref: t.storage.reference().exactly(exactName)) }
            t = try await t.at(at, scope: t.ref.fullPath, source: target)
            let m = try await t.ref.getMetadata()
            var fields: [(String, String)] = [
                ("bucket", m.bucket), ("fullPath", m.fullPath), ("name", m.name), ("size", String(m.size)),
                ("generation", String(m.generation)), ("metageneration", String(m.metageneration)),
                ("timeCreated", m.timeCreated.map(RFC3339.format) ?? ""), ("updated", m.updated.map(RFC3339.format) ?? ""),
                ("md5Hash", m.md5Hash ?? ""), ("crc32c", m.crc32c ?? ""),
            ]
            for (k, v) in [("contentType", m.contentType), ("cacheControl", m.cacheControl),
                           ("contentDisposition", m.contentDisposition), ("contentEncoding", m.contentEncoding),
                           ("contentLanguage", m.contentLanguage)] {
                if let v { fields.append((k, v)) }
            }
            if json {
                var obj: [String: Any] = Dictionary(uniqueKeysWithValues: fields)
                obj["customMetadata"] = m.customMetadata ?? [:]
                let data = try JSONSerialization.data(withJSONObject: obj, options: [.sortedKeys, .prettyPrinted])
                print(String(decoding: data, as: UTF8.self))
            } else {
                // A property the server did not give (v0 has no crc32c) is not a line of its own.
                for (k, v) in fields where !v.isEmpty { print("\(k): \(v)") }
                for (k, v) in (m.customMetadata ?? [:]).sorted(by: { $0.key < $1.key }) { print("customMetadata.\(k): \(v)") }
            }
        }
    }
}

struct Cat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Write an object's bytes to standard output.")
    @Argument var target: String
    @Option(name: .customLong("at"), help: "As it was at TIME: RFC 3339 or a duration back from now (90m, 2h, 3d); needs a bucket that keeps old versions.")
    var at: String?
    @OptionGroup var access: AccessOptions

    func run() async throws {
        try await access.perform("cat", on: target) { t in
            t = try await t.at(at, scope: t.ref.fullPath, source: target)
            try StoragePath.validateObjectName(t.ref.fullPath)
            let info = try await t.storage.store.getMetadata(t.ref.fullPath)
            // Every chunk is pinned to the generation first read; a broken one resumes.
            try await ResumedDownload.copy(t.storage.store, t.ref.fullPath, info) { FileHandle.standardOutput.write($0) }
        }
    }
}

struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Upload a local file (or - for standard input) as an object.")
    @Argument(help: "Local file, or - for standard input") var file: String
    @Argument var target: String
    @Option(name: .customLong("content-type"), help: "The object's content type (default: the type of the object's name).")
    var contentType: String?
    @OptionGroup var contentTypes: ContentTypeOptions
    @Option(name: .customLong("metadata"), help: "Custom metadata KEY=VALUE (repeatable).") var metadata: [String] = []
    @Flag(name: .customLong("no-clobber"), help: "Fail if the object exists (ifGenerationMatch=0).") var noClobber = false
    @Flag(name: .shortAndLong, help: "Upload every file under the local directory FILE to SOURCE/path/<relative path>.")
    var recursive = false
    @Option(name: .customLong("object"), help: "Use this exact object name (no path normalisation; still 1…1024 bytes, no CR/LF).")
    var exactName: String?
    @OptionGroup var access: AccessOptions

    func run() async throws {
        try await access.perform("put", on: target) { t in
            if let exactName { t = Target(storage: t.storage, ref: t.storage.reference().exactly(exactName)) }
            var m = StorageMetadata()
            // Given, else the final name's (docs/SEMANTICS.md §4.1); put -r types each file below.
            if let contentType { m.contentType = contentType }
            else if !recursive { m.contentType = contentTypes.policy.type(for: t.ref.fullPath) }
            var custom: [String: String] = [:]
            for kv in metadata {
                guard let eq = kv.firstIndex(of: "=") else { throw ValidationErrorText("--metadata takes KEY=VALUE, got '\(kv)'") }
                custom[String(kv[..<eq])] = String(kv[kv.index(after: eq)...])
            }
            if !custom.isEmpty { m.customMetadata = custom }
            if recursive {
                try await putTree(t, metadata: m)
                return
            }
            let result: StorageMetadata
            do {
                // Sent with the generation seen as its precondition (SeenGenerationWrites).
                let stdin = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : nil
                try StoragePath.validateObjectName(t.ref.fullPath)
                result = try await SeenGenerationWrites.put(t.storage.store, t.ref.fullPath, noClobber: noClobber) { pre in
                    if let stdin { return try await t.ref.putData(stdin, metadata: m, preconditions: pre) }
                    return try await t.ref.putFile(from: file, metadata: m, preconditions: pre)
                }
            } catch StorageError.preconditionFailed(let path) where noClobber {
                throw Self.exists(path)
            }
            print("\(result.fullPath)\tgeneration \(result.generation)\t\(result.size) bytes")
        }
    }
}

extension Put {
    /// Uploads a local tree, a few files at a time.
    /// What `--no-clobber` says when the object is there: its precondition (ifGenerationMatch=0)
    /// failed, so the upload wrote nothing.
    static func exists(_ path: String) -> ValidationErrorText {
        ValidationErrorText("\(path) already exists; nothing was written (--no-clobber)")
    }

    func putTree(_ t: Target, metadata: StorageMetadata) async throws {
        let root = URL(fileURLWithPath: file).standardizedFileURL.path
        guard let walker = FileManager.default.enumerator(atPath: root) else { throw ValidationErrorText("cannot read \(root)") }
        var files: [String] = []
        while let rel = walker.nextObject() as? String {
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: root + "/" + rel, isDirectory: &isDir), !isDir.boolValue { files.append(rel) }
        }
        let sizes = files.map { (try? UploadSource.file(path: root + "/" + $0).size()) ?? 0 }
        let progress = TransferProgress(files: files.count, bytes: sizes.reduce(0, +), terminal: isatty(2) == 1)
        let policy = contentTypes.policy
        let noClobber = self.noClobber
        try await withThrowingTaskGroup(of: Int64.self) { group in
            var running = 0
            for (rel, size) in zip(files, sizes).sorted(by: { $0.0 < $1.0 }) {
                if running >= 4, let done = try await group.next() { progress.fileDone(bytes: done); running -= 1 }
                group.addTask {
                    let ref = t.ref.child(rel)
                    var m = metadata
                    if m.contentType == nil { m.contentType = policy.type(for: ref.fullPath) }
                    do {
                        _ = try await SeenGenerationWrites.put(t.storage.store, ref.fullPath, noClobber: noClobber) { pre in
                            try await ref.putFile(from: root + "/" + rel, metadata: m, preconditions: pre)
                        }
                    } catch StorageError.preconditionFailed(let path) where noClobber {
                        throw Self.exists(path)
                    }
                    return size
                }
                running += 1
            }
            while let done = try await group.next() { progress.fileDone(bytes: done) }
        }
        progress.finish()
        print("\(files.count) files uploaded under \(t.ref.fullPath.isEmpty ? "/" : t.ref.fullPath)")
    }
}

struct Rm: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Delete an object.")
    @Argument var target: String
    @OptionGroup var access: AccessOptions

    func run() async throws {
        try await access.perform("rm", on: target) { t in
            try StoragePath.validateObjectName(t.ref.fullPath)
            try await SeenGenerationWrites.delete(t.storage.store, t.ref.fullPath)
        }
    }
}

/// `meta get|set|rm`: custom keys by name; `storage.contentType` (and the other writable
/// properties) by the same names the mount uses for extended attributes.
struct Meta: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read or change custom metadata and writable properties.",
        subcommands: [Get.self, Set.self, Remove.self])

    static let properties = ["contentType", "cacheControl", "contentDisposition", "contentEncoding", "contentLanguage"]

    static func property(_ key: String) -> String? {
        guard key.hasPrefix("storage.") else { return nil }
        let p = String(key.dropFirst(8))
        return properties.contains(p) ? p : nil
    }

    static func patch(_ key: String, _ value: String?) throws -> MetadataPatch {
        var p = MetadataPatch()
        let change: FieldChange<String> = value.map { .set($0) } ?? .remove
        switch property(key) {
        case "contentType": p.contentType = change
        case "cacheControl": p.cacheControl = change
        case "contentDisposition": p.contentDisposition = change
        case "contentEncoding": p.contentEncoding = change
        case "contentLanguage": p.contentLanguage = change
        default:
            if key.hasPrefix("storage.") { throw ValidationErrorText("'\(key)' is not a writable property (\(properties.map { "storage." + $0 }.joined(separator: ", ")))") }
            p.customMetadata[key] = .some(value)
        }
        return p
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print custom metadata (all, or one KEY; storage.contentType etc. for properties).")
        @Argument var target: String
        @Argument var key: String?
        @OptionGroup var access: AccessOptions

        func run() async throws {
            try await access.perform("meta get", on: target) { t in
                let m = try await t.ref.getMetadata()
                let props: [String: String?] = ["contentType": m.contentType, "cacheControl": m.cacheControl,
                                                "contentDisposition": m.contentDisposition,
                                                "contentEncoding": m.contentEncoding, "contentLanguage": m.contentLanguage]
                if let key {
                    let v: String?? = Meta.property(key).map { props[$0] ?? nil } ?? m.customMetadata?[key]
                    guard let value = v ?? nil else {
                        FileHandle.standardError.write(Data("bucketfs: meta get: no such key\n".utf8))
                        throw ExitCode(3)
                    }
                    print(value)
                } else {
                    for (k, v) in (m.customMetadata ?? [:]).sorted(by: { $0.key < $1.key }) { print("\(k)=\(v)") }
                    for p in Meta.properties { if let v = props[p] ?? nil { print("storage.\(p)=\(v)") } }
                }
            }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set one custom key (or storage.contentType …) with one PATCH.")
        @Argument var target: String
        @Argument var key: String
        @Argument var value: String
        @OptionGroup var access: AccessOptions

        func run() async throws {
            try await access.perform("meta set", on: target) { t in
                _ = try await SeenGenerationWrites.patch(t.ref, try Meta.patch(key, value))
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rm", abstract: "Delete one custom key (or property) with one PATCH.")
        @Argument var target: String
        @Argument var key: String
        @OptionGroup var access: AccessOptions

        func run() async throws {
            try await access.perform("meta rm", on: target) { t in
                _ = try await SeenGenerationWrites.patch(t.ref, try Meta.patch(key, nil))
            }
        }
    }
}
