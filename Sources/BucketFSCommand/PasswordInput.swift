import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where `bucketfs login --email` gets the password: `--password-file`, else the terminal with
/// echo off, else standard input when it is not a terminal (a pipe, a here-document). The
/// password is never echoed, logged or kept.
enum PasswordInput {
    struct Problem: Error, CustomStringConvertible {
        let description: String
    }

    static func read(file: String?, email: String) throws -> String {
        if let file {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw Problem(description: "cannot read the password file \(file)")
            }
            return try firstLine(data, from: "the password file \(file)")
        }
        if isatty(STDIN_FILENO) == 1 { return try fromTerminal(prompt: "Password for \(email): ") }
        return try firstLine(FileHandle.standardInput.readDataToEndOfFile(), from: "standard input")
    }

    /// The first line, without its line end; an empty one is refused.
    static func firstLine(_ data: Data, from origin: String) throws -> String {
        let text = String(decoding: data, as: UTF8.self)
        // "\r\n" is one Character in Swift: both line ends stop the line.
        let line = String(text.prefix { $0 != "\n" && $0 != "\r\n" })
        let password = line.hasSuffix("\r") ? String(line.dropLast()) : line
        guard !password.isEmpty else { throw Problem(description: "no password in \(origin)") }
        return password
    }

    /// Reads one line from the terminal with echo off (restored afterwards, also on Ctrl-C).
    static func fromTerminal(prompt: String) throws -> String {
        var saved = termios()
        guard tcgetattr(STDIN_FILENO, &saved) == 0 else { throw Problem(description: "cannot read the terminal's settings") }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        quiet.c_lflag |= tcflag_t(ECHONL)
        TerminalRestore.saved = saved
        signal(SIGINT) { _ in
            var s = TerminalRestore.saved
            tcsetattr(STDIN_FILENO, TCSANOW, &s)
            _exit(130)
        }
        // Echo off first (dropping what was typed before), then the prompt, as getpass(3) does:
        // what is typed after the prompt is never flushed.
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        FileHandle.standardError.write(Data(prompt.utf8))
        defer {
            tcsetattr(STDIN_FILENO, TCSANOW, &saved)
            signal(SIGINT, SIG_DFL)
        }
        var bytes: [UInt8] = []
        var c: UInt8 = 0
        while Glibc.read(STDIN_FILENO, &c, 1) == 1, c != UInt8(ascii: "\n") { bytes.append(c) }
        return try firstLine(Data(bytes), from: "the terminal")
    }
}

private enum TerminalRestore {
    nonisolated(unsafe) static var saved = termios()
}
