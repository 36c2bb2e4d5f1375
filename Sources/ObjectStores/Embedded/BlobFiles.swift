import Crypto
import Foundation
import StorageModel

#if canImport(Glibc)
import Glibc
private let systemLink = Glibc.link
#elseif canImport(Darwin)
import Darwin
private let systemLink = Darwin.link
#endif

/// The bytes of one object generation, staged in `blobs/` before its row is committed.
struct StagedBlob: Sendable {
    let id: String
    let size: Int64
    let md5Hash: String
    let crc32c: String
}

/// The blob directory of an embedded bucket: one immutable file per generation, written to
/// `tmp/`, fsync'd, renamed into `blobs/`, and the directory fsync'd. A crash leaves at most a
/// stray temp or unreferenced blob file, never a torn object. Both directories are 0700 and every
/// blob 0600 (`PrivateFiles`).
struct BlobFiles: Sendable {
    let blobDirectory: String
    let tempDirectory: String
    /// Off only in tests that measure something else; durability needs it on.
    let fsyncEnabled: Bool

    init(root: String, fsyncEnabled: Bool) throws {
        blobDirectory = root + "/blobs"
        tempDirectory = root + "/tmp"
        self.fsyncEnabled = fsyncEnabled
        for d in [blobDirectory, tempDirectory] { try PrivateFiles.makeDirectory(d) }
    }

    func path(of id: String) -> String { blobDirectory + "/" + id }

    static func newID() -> String { UUID().uuidString.lowercased() }

    /// Copies `source` into a new blob, computing size, MD5 and CRC32C on the way.
    func stage(_ source: UploadSource) throws -> StagedBlob {
        let id = Self.newID()
        let tmp = tempDirectory + "/" + id + ".tmp"
        let out = PrivateFiles.open(tmp, O_WRONLY | O_EXCL)  // 0600: a blob is the object's bytes
        guard out >= 0 else { throw Self.posixError("create \(tmp)") }
        var md5 = Insecure.MD5()
        var crc = CRC32C()
        var size: Int64 = 0
        do {
            func consume(_ buf: UnsafeRawBufferPointer) throws {
                md5.update(bufferPointer: buf)
                crc.update(buf)
                size += Int64(buf.count)
                try Self.writeAll(out, buf, what: tmp)
            }
            switch source {
            case .data(let d):
                try d.withUnsafeBytes { try consume($0) }
            case .file(let p):
                let inp = open(p, O_RDONLY | O_CLOEXEC)
                guard inp >= 0 else {
                    let e = errno
                    throw StorageError.invalidArgument(message: "cannot read upload source \(p): \(String(cString: strerror(e)))")
                }
                defer { close(inp) }
                var chunk = [UInt8](repeating: 0, count: 1 << 20)
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(inp, $0.baseAddress, $0.count) }
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw Self.posixError("read \(p)")
                    }
                    if n == 0 { break }
                    try chunk.withUnsafeBytes { try consume(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                }
            }
            if fsyncEnabled, fsync(out) != 0 { throw Self.posixError("fsync \(tmp)") }
            guard close(out) == 0 else { throw Self.posixError("close \(tmp)") }
        } catch {
            close(out)
            unlink(tmp)
            throw error
        }
        guard rename(tmp, path(of: id)) == 0 else {
            let e = Self.posixError("rename \(tmp)")
            unlink(tmp)
            throw e
        }
        syncDirectory()
        let digest = Data(md5.finalize())
        return StagedBlob(id: id, size: size, md5Hash: digest.base64EncodedString(), crc32c: crc.base64)
    }

    /// A second name for an existing blob (blobs never change, so a hard link is a copy).
    /// Returns nil when the source blob is gone (replaced meanwhile).
    func link(existing id: String) throws -> String? {
        let newID = Self.newID()
        if systemLink(path(of: id), path(of: newID)) == 0 {
            syncDirectory()
            return newID
        }
        let e = errno
        if e == ENOENT { return nil }
        throw Self.posixError("link \(path(of: id))", e)
    }

    func remove(_ id: String) {
        unlink(path(of: id))
    }

    /// A blob opened for reading; nil when the file is gone.
    func openForReading(_ id: String) throws -> Int32? {
        let fd = Glibc.open(path(of: id), O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw Self.posixError("open blob \(id)")
        }
        return fd
    }

    /// Reads `range` (already clamped) of a blob; nil when the file is gone.
    func contents(of id: String, range: Range<Int64>) throws -> Data? {
        let fd = open(path(of: id), O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw Self.posixError("open blob \(id)")
        }
        defer { close(fd) }
        let count = Int(range.upperBound - range.lowerBound)
        var data = Data(count: count)
        var done = 0
        try data.withUnsafeMutableBytes { (buf: UnsafeMutableRawBufferPointer) in
            while done < count {
                let n = pread(fd, buf.baseAddress! + done, count - done, off_t(range.lowerBound) + off_t(done))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Self.posixError("read blob \(id)")
                }
                if n == 0 { break }
                done += n
            }
        }
        if done < count { data.count = done }
        return data
    }

    /// Deletes temp files and blobs no row refers to, when older than `olderThan` seconds (so
    /// another process's upload in flight is left alone).
    func collectGarbage(referenced: Set<String>, olderThan: TimeInterval) {
        let now = Date()
        let fm = FileManager.default
        func old(_ p: String) -> Bool {
            guard let m = (try? fm.attributesOfItem(atPath: p))?[.modificationDate] as? Date else { return false }
            return now.timeIntervalSince(m) > olderThan
        }
        for f in (try? fm.contentsOfDirectory(atPath: tempDirectory)) ?? [] where old(tempDirectory + "/" + f) {
            unlink(tempDirectory + "/" + f)
        }
        for f in (try? fm.contentsOfDirectory(atPath: blobDirectory)) ?? [] where !referenced.contains(f) {
            if old(blobDirectory + "/" + f) { unlink(blobDirectory + "/" + f) }
        }
    }

    private func syncDirectory() {
        guard fsyncEnabled else { return }
        let fd = open(blobDirectory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            fsync(fd)
            close(fd)
        }
    }

    private static func writeAll(_ fd: Int32, _ buf: UnsafeRawBufferPointer, what: String) throws {
        var off = 0
        while off < buf.count {
            let n = write(fd, buf.baseAddress! + off, buf.count - off)
            if n < 0 {
                if errno == EINTR { continue }
                throw posixError("write \(what)")
            }
            off += n
        }
    }

    static func posixError(_ what: String, _ e: Int32 = errno) -> StorageError {
        .unknown(status: 500, message: "embedded store: \(what): \(String(cString: strerror(e)))")
    }
}
