import Crypto
import Foundation
import StorageModel

/// What a stage file's sidecar says (docs/OPERATING.md, "lost+found, and recovering from it"):
/// its object, the generation its content is based on (the upload's precondition), whether the
/// writer has closed it, and at close its size and the object's metadata. A write after close
/// rewrites the sidecar as not closed before its bytes reach the stage file, so a sidecar that
/// says closed, beside a stage file of the size it gives, holds the content as it was at close.
public struct StageRecord: Equatable, Sendable {
    public var bucket: String
    public var object: String
    public var baseGeneration: Int64
    /// The writer closed the file (its last handle open for writing), and nothing was written since.
    public var closed: Bool
    /// The size at close (when `closed`).
    public var size: Int64?
    public var metadata: WritableMetadata

    public init(bucket: String, object: String, baseGeneration: Int64, closed: Bool, size: Int64?, metadata: WritableMetadata) {
        self.bucket = bucket
        self.object = object
        self.baseGeneration = baseGeneration
        self.closed = closed
        self.size = size
        self.metadata = metadata
    }

    public var json: [String: Any] {
        var o: [String: Any] = ["bucket": bucket, "object": object, "baseGeneration": baseGeneration, "closed": closed,
                                "metadata": Self.encode(metadata)]
        if let size { o["size"] = size }
        return o
    }

    /// A sidecar's record; nil when it names no object. An older sidecar (no `closed`) counts as
    /// not closed.
    public init?(json o: [String: Any]) {
        guard let object = o["object"] as? String else { return nil }
        self.object = object
        bucket = o["bucket"] as? String ?? ""
        baseGeneration = (o["baseGeneration"] as? NSNumber)?.int64Value ?? 0
        closed = o["closed"] as? Bool ?? false
        size = (o["size"] as? NSNumber)?.int64Value
        metadata = Self.decode(o["metadata"] as? [String: Any] ?? [:])
    }

    /// The metadata as the upload sends it, plus what its keys mean for a reader (mode, owner,
    /// mtime), which `decode` ignores.
    public static func encode(_ m: WritableMetadata) -> [String: Any] {
        var o: [String: Any] = ["customMetadata": m.customMetadata]
        for (k, v) in [("cacheControl", m.cacheControl), ("contentDisposition", m.contentDisposition),
                       ("contentEncoding", m.contentEncoding), ("contentLanguage", m.contentLanguage),
                       ("contentType", m.contentType)] {
            if let v { o[k] = v }
        }
        if let mode = m.customMetadata[PosixAttributes.modeKey] { o["mode"] = mode }
        if let uid = m.customMetadata[PosixAttributes.uidKey] { o["uid"] = uid }
        if let gid = m.customMetadata[PosixAttributes.gidKey] { o["gid"] = gid }
        if let mtime = m.customMetadata[XattrName.mtimeKey] { o["mtime"] = mtime }
        return o
    }

    public static func decode(_ o: [String: Any]) -> WritableMetadata {
        WritableMetadata(cacheControl: o["cacheControl"] as? String, contentDisposition: o["contentDisposition"] as? String,
                         contentEncoding: o["contentEncoding"] as? String, contentLanguage: o["contentLanguage"] as? String,
                         contentType: o["contentType"] as? String,
                         customMetadata: o["customMetadata"] as? [String: String] ?? [:])
    }
}

/// A file kept in `CACHE_DIR/lost+found/` and what its sidecar says: the stage's record, why it is
/// there, whether it is complete (closed, and the size at close) or cut off (a crash while it was
/// open for writing; its name ends in `.cut-off`), and the md5 of the bytes kept.
public struct LostEntry: Sendable {
    /// The data file's path; the sidecar is `path + ".json"`.
    public let path: String
    public let record: StageRecord
    public let complete: Bool
    public let reason: String
    /// Bytes kept, and their md5 (base64, as the JSON API's md5Hash); nil in an older sidecar.
    public let bytes: Int64
    public let md5: String?

    public static let cutOffSuffix = ".cut-off"
    /// How the reason of a file the store refused (its rules, IAM) begins.
    public static let refusedReason = "the server refused the upload"

    /// Complete, and kept because the store refused it: uploading it again to the same name is
    /// refused again until the rules or permissions change (`recover --to` elsewhere).
    public var refused: Bool { complete && reason.hasPrefix(Self.refusedReason) }

    /// The entries of a lost+found directory, sorted by name; files without a readable sidecar
    /// are skipped (`unreadable` lists them).
    public static func all(in lostAndFound: String) -> (entries: [LostEntry], unreadable: [String]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: lostAndFound)) ?? []
        var entries: [LostEntry] = [], unreadable: [String] = []
        for name in names.sorted() where !name.hasSuffix(".json") && !name.hasPrefix(".") {
            let path = lostAndFound + "/" + name
            guard let d = FileManager.default.contents(atPath: path + ".json"),
                  let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any],
                  let record = StageRecord(json: o) else {
                unreadable.append(path)
                continue
            }
            entries.append(LostEntry(path: path, record: record, complete: o["complete"] as? Bool ?? false,
                                     reason: o["reason"] as? String ?? "", bytes: (o["bytes"] as? NSNumber)?.int64Value ?? 0,
                                     md5: o["md5"] as? String))
        }
        return (entries, unreadable)
    }

    /// Removes the entry and its sidecar.
    public func remove() {
        unlink(path)
        unlink(path + ".json")
    }
}

/// An md5 fed piece by piece, in the JSON API's base64 form.
struct MD5Sum {
    private var md5 = Insecure.MD5()
    mutating func add(_ bytes: UnsafeRawBufferPointer) { md5.update(bufferPointer: bytes) }
    func base64() -> String { Data(md5.finalize()).base64EncodedString() }

    /// Reads the first `length` bytes of `fd` a MiB at a time, summing them and handing each
    /// chunk and its offset to `each` (false stops the reading). The bytes read and their md5;
    /// `failed` when a read failed (an end of file before `length` is not a failure).
    static func reading(fd: Int32, length: Int64,
                        each: (UnsafeRawBufferPointer, Int64) -> Bool = { _, _ in true }) -> (bytes: Int64, md5: String, failed: Bool) {
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        var off: Int64 = 0
        var sum = MD5Sum()
        while off < length {
            let want = Int(min(Int64(buf.count), length - off))
            let r = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, want, off_t(off)) }
            if r < 0 { return (off, sum.base64(), true) }
            if r == 0 { break }
            let go = buf.withUnsafeBytes { b -> Bool in
                let chunk = UnsafeRawBufferPointer(rebasing: b[0..<r])
                sum.add(chunk)
                return each(chunk, off)
            }
            off += Int64(r)
            if !go { break }
        }
        return (off, sum.base64(), false)
    }
}

/// What a stage's sidecar is written from, read under the superblock's lock
/// (`StageState.sidecarTarget`) by the caller, which hands it to the `StagingArea`.
struct SidecarTarget {
    var object: String
    var baseGeneration: Int64
    var size: Int64
    var metadata: WritableMetadata
    /// Read after every target with a lower serial (`StagedFile.newest`).
    var serial: UInt64
}

/// The first 8 bytes of a SHA-256 in hex: a short, stable file name for a path or a source.
public enum ShortDigest {
    public static func of(_ s: String) -> String {
        SHA256.hash(data: Data(s.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }
}
