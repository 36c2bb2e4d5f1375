import ArgumentParser
import Foundation

/// Options of every command that can talk to a `firebase://` source (Cloud Storage for Firebase's
/// v0 API, signed in through Firebase Auth). `--endpoint` (in the Cloud Storage group) is the
/// storage endpoint for firebase:// too.
struct FirebaseOptions: ParsableArguments {
    @Option(name: .customLong("id-token"),
            help: ArgumentHelp("A Firebase ID token obtained elsewhere, used as is, never refreshed (else FIREBASE_ID_TOKEN; else the login of `bucketfs login`).",
                               valueName: "TOKEN"))
    var idToken: String?
    @Option(name: .customLong("auth-endpoint"),
            help: ArgumentHelp("The Firebase Auth emulator's base URL, e.g. http://127.0.0.1:9099 (else FIREBASE_AUTH_EMULATOR_HOST; else what `bucketfs login` used).",
                               valueName: "URL"))
    var authEndpoint: String?
}

/// Keeps a token given on the command line (`--id-token`, `--token`) out of the process title
/// (/proc/PID/cmdline is readable by every local user; /proc/PID/environ only by the same user and
/// root): the background mount gets it through its environment instead of its arguments, and
/// this process overwrites it in its own argv (so `ps` shows `--token x…x` from then on).
enum SecretArguments {
    static let environmentName = "FIREBASE_ID_TOKEN"

    /// Each secret option and the environment variable that carries the same value.
    static let secrets: [(option: String, environment: String)] = [
        ("--id-token", environmentName), ("--token", "GOOGLE_OAUTH_ACCESS_TOKEN"),
    ]

    /// `args` without `--id-token TOKEN` / `--id-token=TOKEN`, and the token if there was one.
    static func extractIDToken(_ args: [String]) -> (args: [String], token: String?) {
        let (rest, found) = extract(args)
        return (rest, found[environmentName])
    }

    /// `args` without any secret option, and each value found by its environment variable.
    static func extract(_ args: [String]) -> (args: [String], environment: [String: String]) {
        var out: [String] = []
        var found: [String: String] = [:]
        var i = 0
        next: while i < args.count {
            for (option, env) in secrets {
                if args[i] == option, i + 1 < args.count {
                    found[env] = args[i + 1]
                    i += 2
                    continue next
                }
                if args[i].hasPrefix(option + "=") {
                    found[env] = String(args[i].dropFirst(option.count + 1))
                    i += 1
                    continue next
                }
            }
            out.append(args[i])
            i += 1
        }
        return (out, found)
    }

    /// Overwrites the value of each secret option in this process's argv with `x`s (the length stays).
    static func scrubOwnArgv() {
        let argc = Int(CommandLine.argc)
        let argv = CommandLine.unsafeArgv
        var i = 1
        next: while i < argc {
            guard let arg = argv[i] else { i += 1; continue }
            let s = String(cString: arg)
            for (option, _) in secrets {
                if s == option, i + 1 < argc, let value = argv[i + 1] {
                    memset(value, 0x78, strlen(value))
                    i += 2
                    continue next
                }
                if s.hasPrefix(option + "=") {
                    let skip = (option + "=").utf8.count
                    memset(arg + skip, 0x78, strlen(arg) - skip)
                }
            }
            i += 1
        }
    }
}
