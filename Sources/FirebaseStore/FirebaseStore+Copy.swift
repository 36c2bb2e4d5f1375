import Crypto
import Foundation
import StorageModel
#if canImport(Glibc)
import Glibc
#endif

/// v0 has no copy (firebase-v0.md §7): the source generation is read in parts of
/// `tuning.chunkSize` into a temporary file of mode 0600 (never whole in memory), checked against
/// the source's MD5 (or CRC32C), and uploaded under the new name with the source's metadata (or
/// the metadata given). The copy is a new object: new generation, times and download token; the
/// source's download tokens are never copied.
extension FirebaseStore {
    public func copy(from source: String, sourceGeneration: Int64?, to destination: String,
                     metadata: WritableMetadata?, preconditions: Preconditions) async throws -> ObjectInfo {
        let src = try await guardGet(source)
        if let g = sourceGeneration, src.generation != g { throw StorageError.objectNotFound(path: source) }
        let file = try await stage(source, src)
        defer { unlink(file) }
        try await check(preconditions, on: destination, for: "copy")
        var meta = V0Metadata.writable(metadata ?? src.writable)
        // Production gave the source `inline; filename*=utf-8''SOURCE-NAME` because nobody chose
        // one: the copy gets the server's default for its own name instead (docs/SEMANTICS.md §4.1).
        if let d = meta.contentDisposition, ContentDisposition.isDefault(d, forObject: source) { meta.contentDisposition = nil }
        if src.size > tuning.resumableThreshold {
            return try await resumableUpload(destination, from: .file(path: file), size: src.size, metadata: meta)
        }
        return try await multipartUpload(destination, from: .file(path: file), size: src.size, metadata: meta)
    }

    /// The bytes of exactly `info`'s generation, in a new temporary file (the caller removes it).
    private func stage(_ name: String, _ info: ObjectInfo) async throws -> String {
        let dir = tuning.temporaryDirectory ?? NSTemporaryDirectory()
        var template = Array(((dir.hasSuffix("/") ? dir : dir + "/") + "bucketfs-copy-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else {
            throw StorageError.invalidArgument(message: "copy of \(name): cannot create a temporary file in \(dir): \(String(cString: strerror(errno)))")
        }
        PrivateFiles.restrict(fd)  // the object's bytes: 0600 whatever the umask
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            var md5 = Insecure.MD5()
            var crc = CRC32C()
            var offset: Int64 = 0
            while offset < info.size {
                let end = min(info.size, offset + Int64(tuning.chunkSize))
                let part = try await read(name, generation: info.generation, range: offset..<end)
                guard part.count == Int(end - offset) else {
                    throw StorageError.unknown(status: 0, message: "copy of \(name): \(part.count) bytes came for bytes \(offset)-\(end - 1)")
                }
                md5.update(data: part)
                part.withUnsafeBytes { crc.update($0) }
                try handle.write(contentsOf: part)
                offset = end
            }
            // No fsync: the upload reads it back at once (from the page cache), and it is removed after.
            try handle.close()
            let gotMD5 = Data(md5.finalize()).base64EncodedString()
            if let want = info.md5Hash, want != gotMD5 {
                throw StorageError.nonMatchingChecksum(path: name, expected: want, got: gotMD5)
            }
            if info.md5Hash == nil, let want = info.crc32c, want != crc.base64 {
                throw StorageError.nonMatchingChecksum(path: name, expected: want, got: crc.base64)
            }
            return path
        } catch {
            try? handle.close()
            unlink(path)
            throw error
        }
    }
}
