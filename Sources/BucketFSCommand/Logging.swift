import ArgumentParser
import Foundation
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

    /// Bootstraps swift-log for the process (standard error; a background mount's standard error
    /// is its log file) and returns the command's logger.
    func bootstrap() -> Logger {
        let level = Logger.Level(rawValue: logLevel.lowercased()) ?? .warning
        let format = logFormat
        LoggingSystem.bootstrap { label in
            var h: any LogHandler
            switch format {
            case .text: h = StreamLogHandler.standardError(label: label)
            case .json: h = JSONLogHandler(label: label, fd: 2)
            }
            h.logLevel = level
            return h
        }
        var logger = Logger(label: "bucketfs")
        logger.logLevel = level
        return logger
    }
}

/// One JSON object per line: `time` (RFC 3339, UTC, milliseconds), `level`, `label`, `message`,
/// `source` (the Swift module), and each metadata key as a string. Each line is one write(2), so
/// lines from several threads never interleave.
struct JSONLogHandler: LogHandler {
    let label: String
    let fd: Int32
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?,
             source: String, file: String, function: String, line: UInt) {
        let line = Self.line(time: Date(), level: level, label: label, message: "\(message)", source: source,
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
