import Foundation
import StorageModel

/// `bucketfs recover --keep-aside DIR`: a cut-off lost+found entry and its sidecar moved out of
/// lost+found (so that it no longer counts as unsaved), kept under the same names in DIR
/// (created 0700). A rename, or a copy then a delete across filesystems; the data file moves
/// first, so a failure leaves it in one place or the other, never neither.
enum CutOffAside {
    /// The new path of the data file; nil (errno set) when it could not be moved.
    static func move(_ path: String, into dir: String) -> String? {
        do { _ = try PrivateFiles.makeDirectory(dir) } catch { return nil }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir), isDir.boolValue else {
            errno = ENOTDIR
            return nil
        }
        let dest = dir + "/" + (path as NSString).lastPathComponent
        guard access(dest, F_OK) != 0 else {
            errno = EEXIST
            return nil
        }
        guard relocate(path, dest) else { return nil }
        _ = relocate(path + ".json", dest + ".json")
        return dest
    }

    private static func relocate(_ from: String, _ to: String) -> Bool {
        if rename(from, to) == 0 { return true }
        guard errno == EXDEV else { return false }
        do {
            try FileManager.default.copyItem(atPath: from, toPath: to)
            return unlink(from) == 0
        } catch {
            return false
        }
    }
}
