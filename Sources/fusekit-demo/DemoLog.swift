import Foundation

/// Plain functions outside main.swift: they run on libfuse threads (STYLE trap 4).
enum DemoLog {
    @Sendable static func write(_ line: String) {
        FileHandle.standardError.write(Data("fusekit-demo: \(line)\n".utf8))
    }

    @Sendable static func ready() {
        FileHandle.standardOutput.write(Data("ready\n".utf8))
    }
}
