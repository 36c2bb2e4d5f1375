import ArgumentParser
import Foundation

/// `bucketfs gcsfuse ARGS`, or bucketfs started under the name `gcsfuse` (a link, as BusyBox's
/// commands are): gcsfuse's command line, as the Cloud Storage FUSE CSI driver's sidecar passes it,
/// run as `bucketfs mount` (docs/KUBERNETES.md). A refusal is one line on standard error and exit 1,
/// with nothing mounted.
struct GCSFuse: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gcsfuse",
        abstract: "Mount as gcsfuse would: gcsfuse's flags, -o options and config file (docs/KUBERNETES.md), e.g. gcsfuse --foreground --config-file=c.yaml BUCKET /dev/fd/3.")

    @Argument(parsing: .captureForPassthrough, help: "gcsfuse's flags, then BUCKET MOUNTPOINT.")
    var arguments: [String] = []

    /// The name that makes bucketfs read gcsfuse's command line.
    static let linkName = "gcsfuse"

    func run() async throws {
        if arguments.contains("--help") || arguments.contains("-h") {
            print(Self.helpMessage())
            print("gcsfuse's flags and config-file keys, and what each does here: docs/KUBERNETES.md.")
            return
        }
        if arguments.contains("--version") || arguments.contains("-v") {
            print("bucketfs \(BuildInfo.version) (commit \(BuildInfo.commit)), reading gcsfuse's command line")
            return
        }
        let translation: GCSFuseTranslation
        do { translation = try GCSFuseTranslation(argv: arguments) } catch {
            FileHandle.standardError.write(Data("bucketfs (as gcsfuse): error: \(error.description)\n".utf8))
            throw ExitCode(1)
        }
        let args = translation.mountArguments + translation.notes.flatMap { ["--compat-note", $0] }
        var mount: Mount
        do { mount = try Mount.parse(args) } catch {
            let message = Mount.message(for: error)
            let said = message.hasPrefix("Unknown option") ? "unknown flag: \(message)" : message
            FileHandle.standardError.write(Data("bucketfs (as gcsfuse): error: \(said) (gcsfuse flags and bucketfs's mount options are accepted: docs/KUBERNETES.md)\n".utf8))
            throw ExitCode(1)
        }
        effectiveArguments = ["mount"] + args
        try await mount.run()
    }
}
