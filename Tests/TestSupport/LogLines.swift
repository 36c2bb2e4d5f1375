import Foundation
import Logging

/// Log lines kept in memory, for the tests that read what was logged (`capturingLogger`).
/// A line is `LEVEL MESSAGE key=value…`.
public final class LogLines: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    public init() {}
    public var all: [String] { lock.withLock { lines } }
    public func add(_ s: String) { lock.withLock { lines.append(s) } }
}

public struct CapturingLogHandler: LogHandler {
    public let sink: LogLines
    public var logLevel: Logger.Level = .trace
    public var metadata: Logger.Metadata = [:]
    public init(sink: LogLines) { self.sink = sink }
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    public func log(event: LogEvent) {
        let extra = (event.metadata ?? [:]).merging(self.metadata) { a, _ in a }.map { "\($0)=\($1)" }.joined(separator: " ")
        sink.add("\(event.level) \(event.message) \(extra)" + (event.error.map { " error=\($0)" } ?? ""))
    }
}

public func capturingLogger(_ sink: LogLines, label: String = "test") -> Logger {
    Logger(label: label, factory: { _ in CapturingLogHandler(sink: sink) })
}

