import Foundation
import StorageModel
#if canImport(Glibc)
import Glibc
#endif

/// The file a login lives in: `$XDG_CONFIG_HOME/bucketfs/firebase-<bucket>.json`, else
/// `~/.config/bucketfs/…`; the file mode 0600, its directory 0700, written atomically (a temporary
/// file in the same directory, fsynced, renamed over the old one). A file that others can read
/// is refused, as ssh refuses such keys.
public enum FirebaseLoginFile {
    /// $XDG_CONFIG_HOME/bucketfs/firebase-<bucket>.json, else ~/.config/bucketfs/…
    public static func path(bucket: String, environment: [String: String]) -> String {
        directory(environment) + "/firebase-" + safeName(bucket) + ".json"
    }

    public static func load(bucket: String, environment: [String: String]) throws -> FirebaseLogin? {
        let p = path(bucket: bucket, environment: environment)
        var st = stat()
        guard lstat(p, &st) == 0 else {
            if errno == ENOENT { return nil }
            throw StorageError.invalidArgument(message: "cannot read the login file \(p): \(String(cString: strerror(errno)))")
        }
        if st.st_mode & 0o077 != 0 {
            throw StorageError.unauthenticated(message: "the login file \(p) can be read by others (mode \(String(st.st_mode & 0o777, radix: 8))): run chmod 600 \(p), or bucketfs login again")
        }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: p)) } catch {
            throw StorageError.invalidArgument(message: "cannot read the login file \(p): \(error.localizedDescription)")
        }
        do {
            return try JSONDecoder().decode(FirebaseLogin.self, from: data)
        } catch {
            throw StorageError.invalidArgument(message: "the login file \(p) is damaged; run bucketfs login firebase://\(bucket) again")
        }
    }

    /// What a session of `login` reads when the server refuses its refresh token: the refresh
    /// token of the bucket's login file, if that is a login of the same user (same uid and API
    /// key) made since — after a `bucketfs login` of the same user, a running mount goes on.
    public static func newerLogin(of login: FirebaseLogin, environment: [String: String]) -> @Sendable () -> String? {
        let bucket = login.bucket, uid = login.uid, key = login.apiKey
        return {
            guard let l = try? load(bucket: bucket, environment: environment), l.uid == uid, l.apiKey == key else { return nil }
            return l.refreshToken
        }
    }

    /// Writes atomically with mode 0600 (directory 0700).
    public static func save(_ login: FirebaseLogin, environment: [String: String]) throws {
        let dir = directory(environment)
        try makeDirectory(dir)
        let final = path(bucket: login.bucket, environment: environment)
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data = try enc.encode(login)
        var template = Array((dir + "/.firebase-login-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw failure("create a file in \(dir)") }
        let tmp = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var ok = false
        defer {
            if !ok { unlink(tmp) }
        }
        guard fchmod(fd, 0o600) == 0 else { close(fd); throw failure("chmod \(tmp)") }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == data.count, fsync(fd) == 0 else { close(fd); throw failure("write \(tmp)") }
        close(fd)
        guard rename(tmp, final) == 0 else { throw failure("rename \(tmp) to \(final)") }
        ok = true
        let dfd = open(dir, O_RDONLY | O_DIRECTORY)
        if dfd >= 0 { _ = fsync(dfd); close(dfd) }
    }

    public static func remove(bucket: String, environment: [String: String]) throws -> Bool {
        let p = path(bucket: bucket, environment: environment)
        if unlink(p) == 0 { return true }
        if errno == ENOENT { return false }
        throw failure("remove \(p)")
    }

    // MARK: -

    static func directory(_ environment: [String: String]) -> String {
        if let x = environment["XDG_CONFIG_HOME"], x.hasPrefix("/") { return x + "/bucketfs" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.config/bucketfs"
    }

    /// Bucket names are lower-case letters, digits, `-`, `_` and `.`; anything else becomes `_`.
    static func safeName(_ bucket: String) -> String {
        let ok = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        let s = String(bucket.map { ok.contains($0) ? $0 : "_" })
        return s.hasPrefix(".") ? "_" + s.dropFirst() : s
    }

    /// Creates `dir` (and its parents, 0700 for the last one); an existing `bucketfs` directory is
    /// made 0700 too.
    private static func makeDirectory(_ dir: String) throws {
        var isDir: ObjCBool = false
        if !FileManager.default.fileExists(atPath: dir, isDirectory: &isDir) {
            do {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
            } catch {
                throw StorageError.invalidArgument(message: "cannot create \(dir): \(error.localizedDescription)")
            }
        } else if !isDir.boolValue {
            throw StorageError.invalidArgument(message: "\(dir) is not a directory")
        }
        guard chmod(dir, 0o700) == 0 else { throw failure("chmod 700 \(dir)") }
    }

    private static func failure(_ what: String) -> StorageError {
        .invalidArgument(message: "cannot \(what): \(String(cString: strerror(errno)))")
    }
}
