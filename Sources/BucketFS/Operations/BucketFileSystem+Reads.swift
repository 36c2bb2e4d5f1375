import Foundation
import FuseKit
import StorageModel

/// Opening files and reading them (docs/SEMANTICS.md §5, §6): reads pinned to the generation opened, every
/// part checked for length, whole-object reads checked against the object's checksum.
extension BucketFileSystem {
    public func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        let n = try node(ino)
        guard n.type == .regular else { throw .EISDIR }
        // The metadata the open saw: the node's own may be evicted before the handle is built.
        var seen: ObjectInfo? = nil
        var pinned: StagedFile? = nil
        if flags.isWrite {
            if config.readOnly { throw .EROFS }
            do {
                pinned = try await stage(n, truncate: flags.truncate)
            } catch {
                // A new file the store refused is gone again, but the kernel may still know its
                // name and open it (`>` on a known name is an open, not a create): answer what a
                // create there answers, EACCES, not ENOENT (docs/SEMANTICS.md §3.3).
                if error == .ENOENT, createRefused(superblock.path(of: n)) { throw .EACCES }
                throw error
            }
        } else {
            // Close-to-open: a file opened after its TTL sees the current generation (even while
            // a readdir pass holds what its stat shows).
            seen = try await refreshed(n, opening: true)?.info
            // Known to be gone (a stat saw 404, or unlinked) and not being written here.
            if superblock.isGoneAndNotStaged(n) { throw .ENOENT }
        }
        // The stream of the generation opened, made outside the superblock's lock; made again
        // if the file moved on to another generation before the open was made (a local store's
        // file of that generation: reads go straight to it).
        var target = flags.isWrite ? nil : superblock.readTarget(n, seen: seen)
        var opened: (fh: UInt64, handle: Handle, listed: ListedFiles?)? = nil
        while opened == nil {
            var stream: ReadStream? = nil
            if let (path, info) = target {
                var localFile: Int32? = nil
                if store.isLocal {
                    do {
                        localFile = try await store.openLocal(path, generation: info.generation)
                    } catch {
                        throw fail(error, "open", path)
                    }
                }
                stream = readPath.stream(path, info, localFile: localFile)
            }
            switch superblock.openFile(n, writable: flags.isWrite, writeOnly: flags.isWriteOnly, seen: seen, pinned: pinned,
                                        stream: stream, walks: readPath.walks) {
            case let .opened(fh, handle, listed): opened = (fh, handle, listed)
            case let .retarget(path, info): target = (path, info)
            }
        }
        let (fh, h, listed) = opened!
        if let stream = h.stream, readPath.walks {
            // Noted; handed the bytes fetched ahead of this walk (or kept from the last open).
            readPath.opened(stream, path: h.path, generation: h.generation, in: listed)
        }
        return fh
    }

    public func keepsCache(ino: UInt64, fh: UInt64) -> Bool {
        superblock.keepsCache(fh)
    }

    public func directIO(ino: UInt64, fh: UInt64) -> Bool {
        superblock.usesDirectIO(fh)
    }

    /// A reader's open of a generation complete in the read cache: the cache's file, checked
    /// whole, for the kernel to read itself (docs/SEMANTICS.md §3.6, "The kernel reads the cache").
    public func passthroughFile(ino: UInt64, fh: UInt64) async -> Int32? {
        guard let cache = readPath.readCache, let h = superblock.handle(fh), !h.writable, h.stage == nil,
              let stream = h.stream, let file = stream.cachedFile else { return nil }
        // A check reads the whole file (up to 2 GiB): on a thread of its own, not the pool's.
        let pool = readPath.pool
        let check = await withCheckedContinuation { (done: CheckedContinuation<CachedFile.KernelCheck, Never>) in
            DispatchQueue.global().async { done.resume(returning: cache.forKernel(file, pool: pool)) }
        }
        switch check {
        case let .file(fd): return fd
        case .notNow: return nil
        case .changed:
            stream.stopReading(file)
            return nil
        }
    }

    public func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        guard let h = superblock.handle(fh), let n = superblock.node(ino) else { throw .EBADF }
        if let s = superblock.stage(of: n) {
            var buf = [UInt8](repeating: 0, count: size)
            let r = buf.withUnsafeMutableBytes { pread(s.fd, $0.baseAddress, size, off_t(offset)) }
            if r < 0 { throw Errno(Glibc.errno) }
            return Data(buf[0..<r])
        }
        guard let stream = h.stream else { return Data() }
        let key = RecentFailures.Key.bytes(path: h.path, generation: h.generation)
        if let e = failures.check(key) { throw e }
        do {
            let (data, whole) = try await stream.read(at: Int64(offset), count: size)
            if whole { walkOn(from: n, read: h.path) }
            return data
        } catch {
            let e = fail(error, "read", h.path)
            failures.note(key, e)
            throw e
        }
    }

    /// `path` (node `n`) was read whole: the read path's walk is handed its directory's listing
    /// (one superblock call), and asks the superblock again only for a new window's small files
    /// (`ReadPath.readWhole`, docs/SEMANTICS.md §3.6).
    func walkOn(from n: Node, read path: String) {
        guard readPath.walks, let listed = superblock.listedFiles(around: n) else { return }
        readPath.readWhole(path, in: listed) { names, limit, maxSize in
            superblock.smallFiles(besides: n, named: names, limit: limit, maxSize: maxSize)
        }
    }
}
