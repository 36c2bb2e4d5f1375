import ArgumentParser
import Foundation
import Logging
import ObjectStores
import StorageModel

/// `bucketfs mb DIR`: makes an embedded bucket, and sets what it keeps of its past
/// (docs/CONFIGURATION.md "bucketfs mb", docs/SEMANTICS.md "Versions").
struct MakeBucket: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mb", abstract: "Create an embedded bucket in a local directory (created if missing), or change what an existing one keeps of its past.")
    @Argument(help: "DIR or file://DIR") var directory: String
    @Flag(name: .customLong("allow-shared-files"), help: SharedFiles.help) var allowSharedFiles = false
    @Flag(name: .customLong("versioning"), help: "Keep every overwritten and deleted generation, with the time it stopped being live (for versions, restore and mounts --at).")
    var versioning = false
    @Flag(name: .customLong("no-versioning"), help: "Stop keeping overwritten and deleted generations (what was kept stays, under the retention).")
    var noVersioning = false
    @Option(name: .customLong("keep-versions"), help: "Noncurrent generations kept per name, the newest (N, or all). A new bucket keeps all.")
    var keepVersions: String?
    @Option(name: .customLong("keep-for"), help: "How long a generation is kept after it stopped being live (30d, 12h, 90m, or forever). A new bucket keeps them forever.")
    var keepFor: String?

    func validate() throws {
        if versioning && noVersioning { throw ValidationError("--versioning and --no-versioning contradict each other") }
        _ = try VersionRetention.count(keepVersions)
        _ = try VersionRetention.age(keepFor)
    }

    func run() async throws {
        do {
            // Options made by parsing nothing: reading a default-constructed option group traps.
            let source = try Source.parse(directory, splitLocal: false)
            let store = try openStore(source, gcs: try GCSOptions.parse([]),
                                      firebase: try FirebaseOptions.parse([]), logger: Logger(label: "bucketfs"))
            if case .embedded(let dir, _) = source, !allowSharedFiles { SharedFiles.warnAboutBucket(dir) }
            guard versioning || noVersioning || keepVersions != nil || keepFor != nil else { return }
            guard let embedded = store as? EmbeddedStore else {
                throw ValidationErrorText("--versioning, --keep-versions and --keep-for are settings of an embedded bucket")
            }
            var settings = try embedded.versionSettings()
            if versioning { settings.versioning = true }
            if noVersioning { settings.versioning = false }
            if let n = try VersionRetention.count(keepVersions) { settings.keepVersions = n.limit }
            if let t = try VersionRetention.age(keepFor) { settings.keepFor = t.limit }
            try embedded.setVersionSettings(settings)
        } catch {
            throw failed(error, "mb \(directory)")
        }
    }
}

/// `--keep-versions` and `--keep-for` as given: a limit, or none ("all", "forever").
enum VersionRetention {
    struct Given<T> { let limit: T? }

    static func count(_ text: String?) throws -> Given<Int>? {
        guard let text else { return nil }
        if text == "all" { return Given(limit: nil) }
        guard let n = Int(text), n >= 0 else { throw ValidationError("--keep-versions takes a number of generations (0 or more) or all, not '\(text)'") }
        return Given(limit: n)
    }

    static func age(_ text: String?) throws -> Given<TimeInterval>? {
        guard let text else { return nil }
        if text == "forever" { return Given(limit: nil) }
        guard let t = PointInTime.duration(text), t > 0 else {
            throw ValidationError("--keep-for takes a duration (90m, 12h, 30d, 2w) or forever, not '\(text)'")
        }
        return Given(limit: t)
    }
}
