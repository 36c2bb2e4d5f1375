import Foundation

/// gcsfuse's command line and config file as a `bucketfs mount` command line
/// (docs/KUBERNETES.md, "gcsfuse's command line"): the config file's settings first, the flags
/// over them (as gcsfuse orders them); each mapped, accepted with no effect (a note the mount logs
/// once) or refused by name with what to use instead.
struct GCSFuseTranslation: Equatable {
    /// `bucketfs mount` arguments: SOURCE TARGET and options.
    var mountArguments: [String] = []
    /// One line per setting that changes nothing here, for the mount's log.
    var notes: [String] = []

    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    init(argv: [String], readConfig: (String) throws(GCSFuseConfigFile.Refusal) -> [(name: String, value: String)] = GCSFuseConfigFile.settings(path:))
        throws(Refusal) {
        let parsed: GCSFuseArguments
        do { parsed = try GCSFuseArguments(argv) } catch { throw Refusal(description: error.description) }
        var settings: [(name: String, value: String, origin: String)] = []
        if let file = parsed.flags.last(where: { $0.name == "config-file" })?.value {
            do {
                for s in try readConfig(file) {
                    let key = GCSFuseParam.byFlag[s.name].map { $0.configPath.replacingOccurrences(of: ".", with: ":") } ?? s.name
                    settings.append((s.name, s.value, "\(key) in \(file)"))
                }
            } catch { throw Refusal(description: error.description) }
        }
        for f in parsed.flags where f.name != "config-file" { settings.append((f.name, f.value, "--\(f.name)")) }

        guard parsed.positionals.count == 2 else {
            if parsed.positionals.count == 1 {
                throw Refusal(description: "a mount of every bucket (gcsfuse MOUNTPOINT, or the bucket name _) is not supported: name one bucket, as gcsfuse BUCKET MOUNTPOINT")
            }
            throw Refusal(description: "give BUCKET MOUNTPOINT (a directory, or /dev/fd/N that the caller mounted); got \(parsed.positionals.count) arguments: \(parsed.positionals.joined(separator: " "))")
        }
        let bucket = parsed.positionals[0]
        guard bucket != "_" else {
            throw Refusal(description: "a mount of every bucket (bucket name _) is not supported: name one bucket in the volume")
        }
        var options: [String] = []
        var onlyDir = ""
        var logLevel = "info"  // gcsfuse's default severity
        var metadataTTL: String?
        var deprecatedTTL: String?
        var fileCacheDir = ""
        var fileCacheMB: (value: Int, origin: String)?
        var seenNotes: Set<String> = []
        func note(_ origin: String, _ text: String) {
            let line = "gcsfuse \(origin): accepted, no effect: \(text)"
            if seenNotes.insert(line).inserted { notes.append(line) }
        }
        for (name, value, origin) in settings {
            guard let param = GCSFuseParam.byFlag[name] else { continue }
            if case .noEffect(let why) = param.disposition {
                note(origin, why.rawValue)
                continue
            }
            let on = GCSFuseArguments.bool(value) ?? false
            switch name {
            case "foreground": if on { options.append("--foreground") }
            case "temp-dir": if !value.isEmpty { options += ["--cache-dir", value] }
            case "cache-dir": fileCacheDir = value
            case "file-cache-max-size-mb":
                guard let n = Int(value), n >= -1 else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give MiB (-1: no bound of its own, 0: off)") }
                fileCacheMB = (n, origin)
            case "implicit-dirs": note(origin, "bucketfs always shows the directories that object names imply")
            case "kernel-params-file": if !value.isEmpty { note(origin, "bucketfs writes no kernel parameters for the node to apply; the node's stay") }
            case "debug_fuse", "debug_gcs", "debug_fs", "debug_http": if on { logLevel = "debug" }
            case "log-severity":
                guard let level = Self.logLevels[value.lowercased()] else {
                    throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give trace, debug, info, warning, error or off")
                }
                logLevel = level
            case "log-file": if !value.isEmpty { options += ["--log-file", value] }
            case "log-format":
                guard ["json", "text"].contains(value.lowercased()) else {
                    throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give json or text")
                }
                options += ["--log-format", value.lowercased()]
            case "uid", "gid":
                guard let n = Int(value) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a number") }
                if n >= 0 { options += ["--\(name)", String(n)] }
            case "file-mode", "dir-mode":
                let digits = value.hasPrefix("0o") ? String(value.dropFirst(2)) : value
                guard UInt32(digits, radix: 8) != nil else {
                    throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give octal permission bits, e.g. 644")
                }
                options += ["--\(name)", digits]
            case "o":
                for o in value.split(separator: ",").map(String.init) {
                    switch o {
                    case "ro": options.append("--read-only")
                    case "rw": break
                    case "allow_other": options.append("--allow-other")
                    case _ where Self.kernelOptions.contains(o) || o.hasPrefix("max_read="):
                        note("-o \(o)", "a kernel mount option: the caller that mounts /dev/fd/N sets it; for a directory bucketfs sets nodev, nosuid and default_permissions")
                    default:
                        throw Refusal(description: "unknown -o option \(o) (\(origin)): bucketfs takes ro, rw, allow_other and the kernel's exec, noexec, atime, noatime, sync, async, dirsync, dev, nodev, suid, nosuid, default_permissions")
                    }
                }
            case "anonymous-access": if on { options.append("--anonymous") }
            // gcsfuse 3 streams large writes by default; so does bucketfs (--stream-uploads).
            case "enable-streaming-writes": options += ["--stream-uploads", on ? "on" : "off"]
            case "write-block-size-mb":
                guard let n = Int(value), n > 0 else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give MiB") }
                options += ["--stream-upload-mb", String(min(n, 1024))]
            case "key-file": if !value.isEmpty { options += ["--key-file", value] }
            case "token-url": if !value.isEmpty { options += ["--token-url", value] }
            case "billing-project": if !value.isEmpty { options += ["--billing-project", value] }
            case "custom-endpoint": if !value.isEmpty { options += ["--endpoint", Self.endpoint(value)] }
            case "client-protocol":
                switch value.lowercased() {
                case "http1", "http2": note(origin, GCSFuseParam.NoEffect.connection.rawValue)
                default:
                    throw Refusal(description: "\(origin)=\(value) is refused: bucketfs speaks Cloud Storage's JSON API only; remove client-protocol (the JSON API reaches the same bucket)")
                }
            case "max-conns-per-host":
                guard let n = Int(value), n >= 0 else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a number") }
                if n > 0 { options += ["--max-connections", String(n)] }
            case "http-client-timeout":
                guard let d = Self.seconds(goDuration: value) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a duration such as 30s") }
                if d > 0 { options += ["--op-timeout", Self.decimal(d)] }
            case "max-retry-sleep":
                guard let d = Self.seconds(goDuration: value) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a duration such as 30s") }
                options += ["--retry-backoff-max", Self.decimal(d)]
            case "metadata-cache-ttl-secs":
                guard let n = Int(value) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give seconds (-1: for ever)") }
                metadataTTL = n < 0 ? Self.forEver : String(n)
            case "stat-cache-ttl", "type-cache-ttl":
                guard let d = Self.seconds(goDuration: value) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a duration such as 60s") }
                deprecatedTTL = Self.decimal(d)
            case "only-dir": onlyDir = value.split(separator: "/").joined(separator: "/")
            case "prometheus-port":
                guard let n = Int(value), (0...65535).contains(n) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a port") }
                if n > 0 { options += ["--metrics-address", "127.0.0.1:\(n)"] }
            case "limit-bytes-per-sec", "limit-ops-per-sec":
                guard let n = Double(value) else { throw Refusal(description: "invalid argument \"\(value)\" for \(origin): give a number") }
                if n >= 0 {
                    throw Refusal(description: "\(origin)=\(value) is refused: bucketfs does not throttle its requests; remove it (bound the connections with max-conns-per-host)")
                }
            case "enable-dummy-io":
                if on { throw Refusal(description: "\(origin) is refused: bucketfs always reads and writes the bucket; remove it") }
            default:
                throw Refusal(description: "\(origin) has no mapping in bucketfs")  // a mapped row without a case: a bug
            }
        }
        if let ttl = metadataTTL ?? deprecatedTTL { options += ["--metadata-ttl", ttl] }
        // gcsfuse's file cache is on with a cache-dir and a max-size-mb that is not 0: bucketfs's
        // read cache then, in a directory of its own there (docs/KUBERNETES.md); -1 (gcsfuse's
        // "unbounded") keeps bucketfs's default bound.
        if !fileCacheDir.isEmpty, fileCacheMB?.value != 0 {
            options += ["--read-cache-dir", fileCacheDir + "/bucketfs-read-cache"]
            if let mb = fileCacheMB?.value, mb > 0 { options += ["--read-cache-mb", String(mb)] }
        } else if let (mb, origin) = fileCacheMB, mb != 0 {
            note(origin, "without cache-dir there is no file cache (as in gcsfuse)")
        }
        options += ["--log-level", logLevel]
        let source = "gs://" + bucket + (onlyDir.isEmpty ? "" : "/" + onlyDir)
        mountArguments = [source, parsed.positionals[1]] + options + parsed.others
    }

    /// gcsfuse's severities as bucketfs's log levels.
    static let logLevels = ["trace": "trace", "debug": "debug", "info": "info", "warning": "warning", "error": "error", "off": "critical"]

    /// Kernel mount options gcsfuse passes on with -o.
    static let kernelOptions: Set<String> = ["exec", "noexec", "atime", "noatime", "sync", "async", "dirsync", "dev", "nodev",
                                             "suid", "nosuid", "default_permissions"]

    /// A TTL of -1 ("for ever"): ten years.
    static let forEver = "315360000"

    /// gcsfuse's custom endpoint names the JSON API's root (`…/storage/v1/`); bucketfs's names the server.
    static func endpoint(_ value: String) -> String {
        var v = value
        while v.hasSuffix("/") { v.removeLast() }
        if v.hasSuffix("/storage/v1") { v.removeLast("/storage/v1".count) }
        return v
    }

    /// Go's time.ParseDuration for the units gcsfuse's durations use (h, m, s, ms, us, ns), e.g.
    /// "1m30s", "1500ms", "0s", "0".
    static func seconds(goDuration text: String) -> Double? {
        if text == "0" { return 0 }
        let units: [(String, Double)] = [("ns", 1e-9), ("us", 1e-6), ("µs", 1e-6), ("ms", 1e-3), ("h", 3600), ("m", 60), ("s", 1)]
        var rest = Substring(text)
        var total = 0.0
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let number = rest.prefix { $0.isNumber || $0 == "." }
            guard !number.isEmpty, let n = Double(number) else { return nil }
            rest = rest.dropFirst(number.count)
            guard let (unit, factor) = units.first(where: { rest.hasPrefix($0.0) }) else { return nil }
            rest = rest.dropFirst(unit.count)
            total += n * factor
        }
        return total
    }

    static func decimal(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }

    static func == (a: Self, b: Self) -> Bool { a.mountArguments == b.mountArguments && a.notes == b.notes }
}
