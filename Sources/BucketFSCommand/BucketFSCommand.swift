import ArgumentParser
import CloudHTTP
import Foundation
import GCSStore
import Logging

@main
struct BucketFSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bucketfs",
        abstract: "Mount a Cloud Storage bucket (gs://), a Firebase bucket as a signed-in user (firebase://) or an embedded local bucket as a directory, with object metadata as extended attributes.",
        version: "bucketfs \(BuildInfo.version) (commit \(BuildInfo.commit))",
        subcommands: [Mount.self, GCSFuse.self, Unmount.self, Login.self, Logout.self, Whoami.self, MakeBucket.self, Ls.self, Stat.self, Cat.self,
                      Put.self, Rm.self, Meta.self, Versions.self, Restore.self, Status.self, Recover.self]
    )

    /// `mount -t fuse.bucketfs SOURCE DIR -o opts` runs `bucketfs SOURCE DIR -o opts`
    /// (through mount.fuse3): rewrite that form to `bucketfs mount ...`.
    static func main() async {
        var args = Array(CommandLine.arguments.dropFirst())
        // Started as `gcsfuse` (a link to bucketfs): gcsfuse's command line (docs/KUBERNETES.md).
        if (CommandLine.arguments.first.map { ($0 as NSString).lastPathComponent }) == GCSFuse.linkName {
            args = [GCSFuse.linkName] + args
        }
        // Every subcommand's name, so that a new command is never taken for a mount's source.
        let known = configuration.subcommands.map { $0._commandName } + ["help", "-h", "--help", "--version"]
        if let first = args.first, !known.contains(first), args.count >= 2, !first.hasPrefix("-") {
            args = ["mount"] + MountHelper.translate(args)
        }
        effectiveArguments = args
        // An ID token given on the command line stays out of `ps` from here on.
        SecretArguments.scrubOwnArgv()
        // `mount --help` ends with examples (ArgumentParser's help has no epilogue).
        if (args.first == "mount" && args.contains(where: { $0 == "--help" || $0 == "-h" })) || args.prefix(2) == ["help", "mount"] {
            print(helpMessage(for: Mount.self))
            print(Mount.examples)
            return
        }
        do {
            var command = try parseAsRoot(args)
            if var c = command as? AsyncParsableCommand {
                try await c.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// The arguments as parsed (after the mount-helper rewrite), for the background re-exec.
nonisolated(unsafe) var effectiveArguments: [String] = []

/// Options shared by every command that talks to Cloud Storage.
struct GCSOptions: ParsableArguments {
    @Option(help: "JSON API endpoint (e.g. http://127.0.0.1:9023); STORAGE_EMULATOR_HOST is honoured too.")
    var endpoint: String?
    @Option(name: .customLong("key-file"),
            help: ArgumentHelp("gs:// only: a Google credential JSON file of any type gcloud writes (service account key, user sign-in, impersonation, workload identity federation); else GOOGLE_APPLICATION_CREDENTIALS, else gcloud's application default credentials, else the metadata server (docs/CREDENTIALS.md).",
                               valueName: "FILE"))
    var keyFile: String?
    @Option(help: "gs:// only: an OAuth2 access token (else GOOGLE_OAUTH_ACCESS_TOKEN), used as is and never refreshed.")
    var token: String?
    @Option(name: .customLong("token-url"),
            help: ArgumentHelp("gs:// only: get access tokens from this local endpoint, which answers a GET with {\"access_token\", \"expires_in\"}: http://HOST:PORT/PATH, or a unix socket as unix:/path/to.sock or http+unix://%2Fpath%2Fto.sock/PATH.",
                               valueName: "URL"))
    var tokenURL: String?
    @Option(name: .customLong("impersonate-service-account"),
            help: ArgumentHelp("gs:// only: act as this service account, through the credentials found; a comma-separated delegation chain as gcloud writes it, the target last.",
                               valueName: "EMAIL[,EMAIL...]"))
    var impersonate: String?
    @Option(name: .customLong("billing-project"),
            help: ArgumentHelp("gs:// only: the project billed for the requests (x-goog-user-project, and userProject= on every request, as requester-pays buckets need). Default: the credential file's quota_project_id, as the header only.",
                               valueName: "PROJECT"))
    var billingProject: String?
    @Flag(help: "gs:// only: send no credentials (public buckets, emulators).")
    var anonymous = false
    @Option(name: .customLong("ca-file"),
            help: ArgumentHelp("Also trust the CA certificates in this PEM file for https endpoints (storage, Auth, token): a private endpoint, a TLS-inspecting proxy. Default: the system store only (SSL_CERT_FILE / SSL_CERT_DIR replace it when set).",
                               valueName: "PEM"))
    var caFile: String?
    @Option(name: .customLong("http-version"),
            help: "HTTP over https: auto (object data over HTTP/1.1, the rest over HTTP/2 when offered), 1.1 (up to --max-connections connections per host), 2 (one connection per host, requests as streams on it). Plain http:// endpoints always speak HTTP/1.1.")
    var httpVersion: HTTPVersionChoice = .auto

    /// The credential chain these options set (docs/CREDENTIALS.md).
    var credentialChain: CredentialChain {
        CredentialChain(anonymous: anonymous, token: token, tokenURL: tokenURL, keyFile: keyFile, impersonate: impersonate,
                        explicitEndpoint: endpoint != nil)
    }

    /// The trust roots of `--ca-file` and SSL_CERT_FILE / SSL_CERT_DIR, every file checked now.
    func trustRoots(environment: [String: String] = ProcessInfo.processInfo.environment) throws(SourceProblem) -> TrustRoots {
        try checkedTrust(caFile: caFile, environment: environment)
    }
}

extension HTTPVersionChoice: ExpressibleByArgument {}

/// The trust roots of a `--ca-file` and the environment, every file read now: a file that cannot
/// be used is a `SourceProblem` naming it, before any request.
func checkedTrust(caFile: String?, environment: [String: String]) throws(SourceProblem) -> TrustRoots {
    let trust = TrustRoots.resolve(caFile: caFile, environment: environment)
    do {
        _ = try trust.tlsConfiguration()
    } catch {
        throw SourceProblem(error.description)
    }
    return trust
}

/// Translates `SOURCE DIR -o a,b=c` (mount helper form) into `SOURCE DIR --a --b c`.
enum MountHelper {
    static let flags: Set<String> = ["read-only", "ro", "allow-other", "allow_other", "foreground", "anonymous"]

    static func translate(_ args: [String]) -> [String] {
        var out: [String] = []
        var i = 0
        while i < args.count {
            if args[i] == "-o", i + 1 < args.count {
                for opt in args[i + 1].split(separator: ",") {
                    let kv = opt.split(separator: "=", maxSplits: 1).map(String.init)
                    let name = kv[0].replacingOccurrences(of: "_", with: "-")
                    switch name {
                    case "ro": out.append("--read-only")
                    case "nonempty": out.append("--allow-non-empty")  // libfuse 2's name
                    case "rw", "dev", "suid", "nodev", "nosuid", "exec", "noexec", "auto", "noauto", "user", "nouser", "users",
                         "defaults", "nofail", "-netdev", "async", "atime", "noatime", "relatime", "nodiratime": break
                    case _ where name.hasPrefix("x-") || name == "comment": break
                    default:
                        if kv.count == 2 { out += ["--" + name, kv[1]] } else { out.append("--" + name) }
                    }
                }
                i += 2
            } else if args[i] == "-f" {
                out.append("--foreground"); i += 1
            } else {
                out.append(args[i]); i += 1
            }
        }
        return out
    }
}
