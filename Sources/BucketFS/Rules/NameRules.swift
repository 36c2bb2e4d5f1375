import Foundation
import FuseKit
import Logging
import StorageModel

/// Which names the mount accepts and shows (docs/SEMANTICS.md §1, §3). Names made here: 1…255 bytes a
/// segment, full names 1…1024 bytes (a directory 1023, so its `dir/` placeholder fits), no CR/LF;
/// refusals are logged with the name. Names from a listing the mount cannot show (`//`, `.`/`..`
/// segments, CR/LF, long segments) are hidden and logged once, never mangled.
struct NameRules: Sendable {
    let logger: Logger
    let hiddenLog: WarnOnce

    /// The full path of `name` inside `parentPath`. Errors: ENAMETOOLONG, EINVAL.
    func childPath(_ parentPath: String, _ name: String, directory: Bool = false) throws(Errno) -> String {
        let p = parentPath.isEmpty ? name : parentPath + "/" + name
        func refuse(_ e: Errno, _ why: String) -> Errno {
            logger.warning("refused the name '\(p.prefix(300))': \(why) → \(e)")
            return e
        }
        if name.utf8.count > StoragePath.maxSegmentBytes {
            throw refuse(.ENAMETOOLONG, "a name is \(name.utf8.count) bytes; the limit is \(StoragePath.maxSegmentBytes)")
        }
        if name.isEmpty || name == "." || name == ".." || name.contains("/") { throw refuse(.EINVAL, "not a single name") }
        if name.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) {
            throw refuse(.EINVAL, "object names cannot contain a carriage return or line feed")
        }
        let limit = StoragePath.maxFullPathBytes - (directory ? 1 : 0)
        if p.utf8.count > limit {
            throw refuse(.ENAMETOOLONG, "the full name is \(p.utf8.count) bytes; the limit is \(limit)\(directory ? " for a directory (its placeholder adds a /)" : "")")
        }
        return p
    }

    /// A name from a listing the mount can show, or nil (hidden and logged once).
    func visibleName(_ full: String, relativeTo prefix: String, isPrefix: Bool) -> String? {
        // By bytes: the server's names start with the prefix's bytes (a Character count would
        // cut a name whose first scalar combines with the prefix's `/`), and a prefix it lists
        // ends with the delimiter.
        var rel = String(Substring(full.utf8.dropFirst(prefix.utf8.count)))
        if isPrefix { rel = rel.utf8.last == UInt8(ascii: "/") ? String(Substring(rel.utf8.dropLast())) : String(rel.dropLast()) }
        if let problem = StoragePath.mountProblem(full, allowTrailingSlash: isPrefix) ?? segmentProblem(rel) {
            hiddenLog.warn("hiding object '\(full.prefix(200))' from the mount: \(problem)", key: full)
            return nil
        }
        return rel
    }

    private func segmentProblem(_ rel: String) -> PathProblem? {
        if rel.isEmpty || rel == "." || rel == ".." || rel.utf8.contains(UInt8(ascii: "/")) { return .unrepresentableSegment(rel) }
        if rel.utf8.count > StoragePath.maxSegmentBytes { return .segmentTooLong(segment: rel, bytes: rel.utf8.count) }
        return nil
    }
}
