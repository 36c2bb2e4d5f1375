import Foundation

import Glibc

/// What bucketfs writes to the local disk is its user's alone (docs/SECURITY.md): every directory
/// it creates is 0700 and every file 0600, whatever the umask, and what it opens that others can
/// read is reported so that a warning can name it and the `chmod` that fixes it.
///
/// The one place in this target that touches the disk: the embedded bucket, the cache directory,
/// the request log and the command line all create their files through it.
public enum PrivateFiles {
    public static let directoryMode: mode_t = 0o700
    public static let fileMode: mode_t = 0o600

    /// A path whose permission bits let someone other than its owner in.
    public struct Exposed: Equatable, Sendable, CustomStringConvertible {
        public let path: String
        public let mode: mode_t
        public init(path: String, mode: mode_t) {
            self.path = path
            self.mode = mode
        }
        public var description: String { "\(path) (mode \(String(mode & 0o7777, radix: 8)))" }
    }

    /// Whether permission bits give the group or others anything (read, write or search).
    public static func isShared(_ mode: mode_t) -> Bool { mode & 0o077 != 0 }

    /// Of `paths`, those that exist (not followed if a link) with a group or other bit set.
    public static func exposed(_ paths: [String]) -> [Exposed] {
        paths.compactMap { p in
            var st = stat()
            guard lstat(p, &st) == 0, isShared(st.st_mode) else { return nil }
            return Exposed(path: p, mode: st.st_mode & 0o7777)
        }
    }

    /// The warning for `what` (say "the embedded bucket /b") whose files in `exposed` others can
    /// read: the paths (at most three), the command that fixes them, and the flag that silences it.
    public static func warning(_ what: String, root: String, exposed: [Exposed], recursive: Bool = true) -> String? {
        guard !exposed.isEmpty else { return nil }
        let shown = exposed.prefix(3).map(\.description).joined(separator: ", ")
        let more = exposed.count > 3 ? " and \(exposed.count - 3) more" : ""
        let fix = recursive ? "chmod -R go-rwx \(quoted(root))" : "chmod go-rwx \(quoted(root))"
        return "other users can read \(what): \(shown)\(more). Run `\(fix)` to make it private "
            + "(or pass --allow-shared-files if they should read it)"
    }

    /// A path as one shell word.
    public static func quoted(_ p: String) -> String {
        let plain = p.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "/._-+,:@".unicodeScalars.contains($0) }
        return plain && !p.isEmpty ? p : "'" + p.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// Creates the directory `path` with mode 0700 exactly (the umask does not widen or narrow
    /// it). Returns false when it already existed (left as it is); throws on any other failure.
    @discardableResult
    public static func makeDirectory(_ path: String) throws -> Bool {
        if mkdir(path, directoryMode) != 0 {
            let e = errno
            if e == EEXIST { return false }
            throw PrivateFileError(what: "create the directory \(path)", code: e)
        }
        guard chmod(path, directoryMode) == 0 else { throw PrivateFileError(what: "chmod 700 \(path)", code: errno) }
        return true
    }

    /// `open(path, flags | O_CREAT, 0600)`: a file this call creates gets mode 0600 exactly; one
    /// that existed keeps its mode (check it with `exposed`). Returns the descriptor, or -1 with
    /// errno set.
    public static func open(_ path: String, _ flags: Int32) -> Int32 {
        let created = Glibc.open(path, flags | O_CREAT | O_EXCL | O_CLOEXEC, fileMode)
        if created >= 0 {
            _ = fchmod(created, fileMode)
            return created
        }
        guard errno == EEXIST, flags & O_EXCL == 0 else { return -1 }
        return Glibc.open(path, (flags & ~O_CREAT & ~O_EXCL) | O_CLOEXEC)
    }

    /// Makes a file just created by `mkstemp` or `open` 0600 exactly.
    public static func restrict(_ fd: Int32) { _ = fchmod(fd, fileMode) }
}

/// A private file or directory that could not be made.
public struct PrivateFileError: Error, CustomStringConvertible {
    public let what: String
    public let code: Int32
    public init(what: String, code: Int32) {
        self.what = what
        self.code = code
    }
    public var description: String { "cannot \(what): \(String(cString: strerror(code)))" }
}
