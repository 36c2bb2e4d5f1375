/// gcsfuse's command line as its flag parser reads it: `--name=value`, `--name value` (a flag
/// that takes a value), `--name` or `--name=true|false` (a switch), `-o a,b` and `-o=a,b`, then
/// `BUCKET MOUNTPOINT`. Flags are gcsfuse's (`GCSFuseParam`); any other `--name[=value]` is kept
/// for bucketfs's own mount options (docs/KUBERNETES.md, "bucketfs's own options").
struct GCSFuseArguments: Equatable {
    /// gcsfuse flags in the order given: name and value ("true" for a bare switch).
    var flags: [(name: String, value: String)] = []
    /// Flags that are not gcsfuse's, as given (with their value, when one was attached or follows).
    var others: [String] = []
    var positionals: [String] = []

    static func == (a: Self, b: Self) -> Bool {
        a.flags.map { "\($0.name)=\($0.value)" } == b.flags.map { "\($0.name)=\($0.value)" }
            && a.others == b.others && a.positionals == b.positionals
    }

    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    init(_ argv: [String]) throws(Refusal) {
        var i = 0
        var onlyPositionals = false
        while i < argv.count {
            let arg = argv[i]
            i += 1
            if onlyPositionals || !arg.hasPrefix("-") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" { onlyPositionals = true; continue }
            // pflag takes one or two dashes before a long name; `-o` is the one shorthand.
            var body = arg.hasPrefix("--") ? String(arg.dropFirst(2)) : String(arg.dropFirst())
            var value: String?
            if let eq = body.firstIndex(of: "=") {
                value = String(body[body.index(after: eq)...])
                body = String(body[..<eq])
            }
            guard let param = GCSFuseParam.byFlag[body] else {
                // Not gcsfuse's: a bucketfs mount option, with its value if one is attached or
                // the next word is not a flag (bucketfs's parser says which it is).
                others.append("--" + body + (value.map { "=" + $0 } ?? ""))
                if value == nil, i < argv.count, !argv[i].hasPrefix("-"), Self.takesValue(body) {
                    others.append(argv[i])
                    i += 1
                }
                continue
            }
            switch param.kind {
            case .bool:
                let v = value ?? "true"
                guard Self.bool(v) != nil else {
                    throw Refusal(description: "invalid argument \"\(v)\" for \"--\(body)\" flag: a switch takes true or false")
                }
                flags.append((body, v))
            case .value, .list:
                if value == nil {
                    guard i < argv.count else { throw Refusal(description: "flag needs an argument: --\(body)") }
                    value = argv[i]
                    i += 1
                }
                flags.append((body, value!))
            }
        }
    }

    /// gcsfuse's reading of a switch's value (Go's strconv.ParseBool).
    static func bool(_ s: String) -> Bool? {
        switch s {
        case "1", "t", "T", "true", "TRUE", "True": return true
        case "0", "f", "F", "false", "FALSE", "False": return false
        default: return nil
        }
    }

    /// bucketfs mount options that are switches, not options with a value: a word after one of
    /// these is the bucket, not its value.
    static let bucketfsSwitches: Set<String> = [
        "read-only", "allow-other", "write-back", "foreground", "allow-shared-files", "allow-non-empty",
        "anonymous", "no-infer-content-type", "source-checked",
    ]

    static func takesValue(_ name: String) -> Bool { !bucketfsSwitches.contains(name) }
}
