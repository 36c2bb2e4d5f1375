import StorageModel

/// The POSIX attributes an object keeps in its custom metadata (docs/SEMANTICS.md §3), in the keys and formats
/// of gsutil (`cp -P`), gcloud (`storage cp/rsync --preserve-posix --preserve-symlinks`), Storage
/// Transfer Service and gcsfuse: mode as three octal digits (`^[0-7]{3}$`, so setuid, setgid and
/// sticky bits are not kept), uid and gid as decimal numbers, a symbolic link as an object whose
/// content is its target with `goog-reserved-file-is-symlink: true`, or (gcsfuse's older form) a
/// `gcsfuse_symlink_target` key holding the target. A pure value: parsing and formatting only.
struct PosixAttributes: Equatable, Sendable {
    static let modeKey = "goog-reserved-posix-mode"
    static let uidKey = "goog-reserved-posix-uid"
    static let gidKey = "goog-reserved-posix-gid"
    static let symlinkKey = "goog-reserved-file-is-symlink"
    static let legacySymlinkTargetKey = "gcsfuse_symlink_target"
    /// Every key this type reads or writes.
    static let keys = [modeKey, uidKey, gidKey, symlinkKey, legacySymlinkTargetKey]
    /// The longest symlink target (PATH_MAX - 1, the kernel's own limit for readlink).
    static let maxTargetBytes = 4095

    /// Permission bits (0...0o777), nil when absent or unparsable.
    var mode: UInt32?
    var uid: UInt32?
    var gid: UInt32?
    /// The object is a symbolic link.
    var isSymlink = false
    /// The target, when the metadata holds it (gcsfuse's legacy key); else it is the content.
    var legacyTarget: String?
    /// Keys present whose values do not parse (key, value), for the caller to log once.
    var unparsable: [(key: String, value: String)] = []

    init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, isSymlink: Bool = false) {
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.isSymlink = isSymlink
    }

    /// Reads the keys of `custom`.
    init(_ custom: [String: String]) { self.init { custom[$0] } }

    /// Reads the keys of an object's metadata, one at a time (no map made).
    init(_ metadata: WritableMetadata) { self.init(metadata.customValue) }

    /// Reads the keys through `custom`, a key's value or nil.
    init(_ custom: (String) -> String?) {
        if let v = custom(Self.modeKey) {
            if let m = Self.parseMode(v) { mode = m } else { unparsable.append((Self.modeKey, v)) }
        }
        if let v = custom(Self.uidKey) {
            if let u = Self.parseID(v) { uid = u } else { unparsable.append((Self.uidKey, v)) }
        }
        if let v = custom(Self.gidKey) {
            if let g = Self.parseID(v) { gid = g } else { unparsable.append((Self.gidKey, v)) }
        }
        if let t = custom(Self.legacySymlinkTargetKey) {
            isSymlink = true
            legacyTarget = t
        } else if let v = custom(Self.symlinkKey) {
            // gcloud and Storage Transfer Service write "true"; gsutil's parser is case-insensitive.
            if v.lowercased() == "true" { isSymlink = true }
            else if v.lowercased() != "false" { unparsable.append((Self.symlinkKey, v)) }
        }
    }

    static func == (a: Self, b: Self) -> Bool {
        a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.isSymlink == b.isSymlink && a.legacyTarget == b.legacyTarget
    }

    /// `^[0-7]{3}$` (gsutil's format): "644" → 0o644. Anything else is nil.
    static func parseMode(_ s: String) -> UInt32? {
        let u = Array(s.utf8)
        guard u.count == 3, u.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "7") }) else { return nil }
        return u.reduce(UInt32(0)) { $0 * 8 + UInt32($1 - UInt8(ascii: "0")) }
    }

    /// Decimal digits only, within 32 bits ("1000" → 1000).
    static func parseID(_ s: String) -> UInt32? {
        guard !s.isEmpty, s.utf8.count <= 10, s.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return UInt32(s)
    }

    /// Three octal digits of the permission bits; setuid, setgid and sticky are dropped (the
    /// format has no place for them).
    static func formatMode(_ mode: UInt32) -> String {
        let m = mode & 0o777
        return String(m >> 6) + String((m >> 3) & 7) + String(m & 7)
    }

    /// Writes the values set here into `custom` (the keys of the values that are nil are left as
    /// they are). A symbolic link is written in gcloud's form, never gcsfuse's legacy one.
    func write(into custom: inout [String: String]) {
        if let mode { custom[Self.modeKey] = Self.formatMode(mode) }
        if let uid { custom[Self.uidKey] = String(uid) }
        if let gid { custom[Self.gidKey] = String(gid) }
        if isSymlink { custom[Self.symlinkKey] = "true" }
    }
}
