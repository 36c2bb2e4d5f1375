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

/// Keeps an ID token given on the command line out of the process title: the background mount
/// gets it through its environment instead of its arguments, and this process overwrites it in
/// its own argv (so `ps` and /proc/PID/cmdline show `--id-token x…x` from then on).
enum SecretArguments {
    static let environmentName = "FIREBASE_ID_TOKEN"

    /// `args` without `--id-token TOKEN` / `--id-token=TOKEN`, and the token if there was one.
    static func extractIDToken(_ args: [String]) -> (args: [String], token: String?) {
        var out: [String] = []
        var token: String?
        var i = 0
        while i < args.count {
            if args[i] == "--id-token", i + 1 < args.count {
                token = args[i + 1]
                i += 2
                continue
            }
            if args[i].hasPrefix("--id-token=") {
                token = String(args[i].dropFirst("--id-token=".count))
                i += 1
                continue
            }
            out.append(args[i])
            i += 1
        }
        return (out, token)
    }

    /// Overwrites the value of `--id-token` in this process's argv with `x`s (the length stays).
    static func scrubOwnArgv() {
        let argc = Int(CommandLine.argc)
        let argv = CommandLine.unsafeArgv
        var i = 1
        while i < argc {
            guard let arg = argv[i] else { i += 1; continue }
            let s = String(cString: arg)
            if s == "--id-token", i + 1 < argc, let value = argv[i + 1] {
                memset(value, 0x78, strlen(value))
                i += 2
                continue
            }
            if s.hasPrefix("--id-token=") {
                let skip = "--id-token=".utf8.count
                memset(arg + skip, 0x78, strlen(arg) - skip)
            }
            i += 1
        }
    }
}
