import ArgumentParser
import Foundation
import FuseKit
import Logging
import StorageModel

/// `--log-format`: `text` (one human line per event, as swift-log's stream handler writes it) or
/// `json` (one JSON object per line, for journald / log shippers).
enum LogFormat: String, ExpressibleByArgument, CaseIterable, Sendable {
    case text, json
}

struct LogOptions: ParsableArguments {
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "warning"
    @Option(name: .customLong("log-format"), help: "text, or json: one JSON object per line (time, level, message, …).")
    var logFormat: LogFormat = .text

    func validate() throws {
        guard Logger.Level(rawValue: logLevel.lowercased()) != nil else {
            throw ValidationError("--log-level takes trace, debug, info, notice, warning, error or critical")
        }
    }

    /// Bootstraps swift-log for the process and returns the command's logger. It logs to standard
    /// error (a background mount's standard error is its log file), or, given `file` that is not
    /// already standard error (a foreground mount's `--log-file`, e.g. gcsfuse's `/dev/fd/1`), to
    /// that file, with standard error pointed at it too and `critical` lines (the mount cannot start
    /// or must end) also on the original standard error (docs/KUBERNETES.md, "A pod's life").
    func bootstrap(file: String? = nil) -> Logger {
        let level = Logger.Level(rawValue: logLevel.lowercased()) ?? .warning
        let format = logFormat
        var criticalFD: Int32 = -1
        if let file, let fd = Self.openUnlessStandardError(file) {
            criticalFD = dup(2)
            dup2(fd, 2)
            close(fd)
        }
        let alsoCritical = criticalFD
        LoggingSystem.bootstrap { label in
            var h: any LogHandler
            switch format {
            case .text: h = StreamLogHandler.standardError(label: label)
            case .json: h = JSONLogHandler(label: label, fd: 2)
            }
            h.logLevel = level
            guard alsoCritical >= 0 else { return h }
            let critical = JSONLogHandler(label: label, fd: alsoCritical, text: format == .text, floor: .critical)
            return MultiplexLogHandler([h, critical])
        }
        var logger = Logger(label: "bucketfs")
        logger.logLevel = level
        return logger
    }
}

extension LogOptions {
    /// `path` opened for appending, unless it is standard error already (nil then, or when it
    /// cannot be opened: the log stays on standard error).
    static func openUnlessStandardError(_ path: String) -> Int32? {
        // A descriptor of this process (gcsfuse's `/dev/fd/1`) is taken as it is: opened again
        // through /proc it would be checked against its owner, who may be another user (the
        // container runtime's pipe, or the sidecar's).
        let own = ["/dev/stdout": 1, "/dev/stderr": 2][path]
            ?? MountTarget.descriptorNumber(path)
            ?? (path.hasPrefix("/proc/self/fd/") ? MountTarget.descriptorNumber("/dev/fd/" + path.dropFirst("/proc/self/fd/".count)) : nil)
        if let own {
            guard own != 2, fcntl(own, F_GETFD) != -1 else { return nil }
            return dup(own)
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return nil }
        var a = stat(), b = stat()
        if fstat(fd, &a) == 0, fstat(2, &b) == 0, a.st_dev == b.st_dev, a.st_ino == b.st_ino {
            close(fd)
            return nil
        }
        return fd
    }
}

/// One JSON object per line: `time` (RFC 3339, UTC, milliseconds), `level`, `label`, `message`,
/// `source` (the Swift module), and each metadata key as a string. Each line is one write(2), so
/// lines from several threads never interleave.
struct JSONLogHandler: LogHandler {
    let label: String
    let fd: Int32
    /// `bucketfs: LEVEL: message` lines instead (a failed mount's words on a terminal).
    var text = false
    /// Lines below this level are dropped whatever `logLevel` says (a multiplexer sets the
    /// logger's level on each of its handlers).
    var floor: Logger.Level = .trace
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?,
             source: String, file: String, function: String, line: UInt) {
        guard level >= floor else { return }
        let line = text ? "bucketfs: \(level): \(message)\n"
            : Self.line(time: Date(), level: level, label: label, message: "\(message)", source: source,
                        metadata: self.metadata.merging(explicit ?? [:]) { $1 })
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    static func line(time: Date, level: Logger.Level, label: String, message: String, source: String,
                     metadata: Logger.Metadata) -> String {
        var fields: [String: String] = [:]
        for (k, v) in metadata { fields[k] = "\(v)" }
        fields["time"] = timestamp(time)
        fields["level"] = level.rawValue
        fields["label"] = label
        fields["source"] = source
        fields["message"] = message
        let order = ["time", "level", "label", "source", "message"]
        let keys = order + fields.keys.filter { !order.contains($0) }.sorted()
        return "{" + keys.map { "\(quote($0)):\(quote(fields[$0]!))" }.joined(separator: ",") + "}\n"
    }

    static func timestamp(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970.rounded(.down))
        var tm = tm()
        gmtime_r(&t, &tm)
        let ms = Int((d.timeIntervalSince1970 - Double(t)) * 1000)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                      tm.tm_hour, tm.tm_min, tm.tm_sec, min(ms, 999))
    }

    /// A JSON string literal (RFC 8259 escapes; other characters as they are, in UTF-8).
    static func quote(_ s: String) -> String { JSONText.quoted(s) }
}

/// A failed mount's message (docs/OPERATING.md, "A mount that fails fast"): on standard error, the
/// terminal, as one `bucketfs: …` line, or as one JSON object (level `critical`) when
/// `--log-format json`, so a JSON consumer never reads a plain-text line.
struct FailureReport {
    let format: LogFormat

    func say(_ message: String, level: Logger.Level = .critical) {
        let line: String
        switch format {
        case .text: line = "bucketfs: \(level == .critical ? "" : "\(level): ")\(message)\n"
        case .json: line = JSONLogHandler.line(time: Date(), level: level, label: "bucketfs", message: message,
                                               source: "bucketfs", metadata: [:])
        }
        FileHandle.standardError.write(Data(line.utf8))
    }
}
