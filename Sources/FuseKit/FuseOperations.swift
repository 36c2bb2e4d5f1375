import CFuse
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The libfuse low-level operations table: non-capturing C trampolines (STYLE traps 3 and 4).
/// Each one copies what it needs out of C memory (names, fi->fh, flags, buffers), then either
/// answers at once (forget, releasedir, refusals) or hands the work to `RequestContext.serve`,
/// which replies exactly once from a Task.
enum FuseOperations {
    static let table: fuse_lowlevel_ops = {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { userdata, conn in
            guard let userdata, let conn else { return }
            let context = Unmanaged<RequestContext>.fromOpaque(userdata).takeUnretainedValue()
            FuseOperations.negotiate(&conn.pointee, readdirplus: context.readdirplus)
            context.markReady()
        }
        ops.lookup = { req, parent, name in FuseOperations.lookup(req!, parent, name) }
        ops.forget = { req, ino, nlookup in
            RequestContext.of(req!).filesystem.forget(ino: ino, nlookup: nlookup)
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, forgets in
            let fs = RequestContext.of(req!).filesystem
            if let forgets {
                for i in 0..<count { fs.forget(ino: forgets[i].ino, nlookup: forgets[i].nlookup) }
            }
            fuse_reply_none(req)
        }
        ops.getattr = { req, ino, _ in FuseOperations.getattr(req!, ino) }
        ops.setattr = { req, ino, attr, toSet, fi in FuseOperations.setattr(req!, ino, attr, toSet, fi) }
        ops.opendir = { req, ino, _ in FuseOperations.opendir(req!, ino) }
        ops.readdir = { req, ino, size, off, fi in FuseOperations.readdir(req!, ino, size, off, fi, plus: false) }
        ops.readdirplus = { req, ino, size, off, fi in FuseOperations.readdir(req!, ino, size, off, fi, plus: true) }
        ops.releasedir = { req, ino, fi in
            RequestContext.of(req!).filesystem.releasedir(ino: ino, fh: fi?.pointee.fh ?? 0)
            fuse_reply_err(req, 0)
        }
        ops.open = { req, ino, fi in FuseOperations.open(req!, ino, fi) }
        ops.read = { req, ino, size, off, fi in FuseOperations.read(req!, ino, size, off, fi) }
        ops.write = { req, ino, buf, size, off, fi in FuseOperations.write(req!, ino, buf, size, off, fi) }
        ops.flush = { req, ino, fi in
            let fh = fi?.pointee.fh ?? 0
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in try await fs.flush(ino: ino, fh: fh) }
        }
        ops.fsync = { req, ino, datasync, fi in
            let fh = fi?.pointee.fh ?? 0
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in
                try await fs.fsync(ino: ino, fh: fh, dataOnly: datasync != 0)
            }
        }
        ops.release = { req, ino, fi in
            let fh = fi?.pointee.fh ?? 0
            let context = RequestContext.of(req!)
            context.passthrough?.ended(fh: fh)
            // Nothing to wait for (a reader's close, a writer's whose flush uploaded): no Task.
            if let r = context.filesystem.immediateRelease(ino: ino, fh: fh) {
                let e: Int32 = switch r { case .success: 0; case .failure(let e): e.rawValue }
                context.check(fuse_reply_err(req, e), "fuse_reply_err")
                return
            }
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in try await fs.release(ino: ino, fh: fh) }
        }
        ops.create = { req, parent, name, mode, fi in FuseOperations.create(req!, parent, name, mode, fi) }
        ops.mkdir = { req, parent, name, mode in FuseOperations.mkdir(req!, parent, name, mode) }
        ops.unlink = { req, parent, name in
            guard let name = FuseOperations.name(req!, name) else { return }
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in try await fs.unlink(parent: parent, name: name) }
        }
        ops.rmdir = { req, parent, name in
            guard let name = FuseOperations.name(req!, name) else { return }
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in try await fs.rmdir(parent: parent, name: name) }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            guard let name = FuseOperations.name(req!, name), let newName = FuseOperations.name(req!, newName) else { return }
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in
                try await fs.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
            }
        }
        ops.statfs = { req, ino in
            let context = RequestContext.of(req!)
            let fs = context.filesystem
            context.serve(req!, { () async throws(Errno) in try await fs.statfs(ino: ino) }) { req, value in
                var sv = value.statvfsValue
                context.check(fuse_reply_statfs(req, &sv), "fuse_reply_statfs")
            }
        }
        ops.readlink = { req, ino in
            let context = RequestContext.of(req!)
            let fs = context.filesystem
            context.serve(req!, { () async throws(Errno) in try await fs.readlink(ino: ino) }) { req, target in
                context.check(fuse_reply_readlink(req, target), "fuse_reply_readlink")
            }
        }
        ops.symlink = { req, target, parent, name in
            guard let name = FuseOperations.name(req!, name), let target = FuseOperations.name(req!, target) else { return }
            FuseOperations.replyingEntry(req!) { fs async throws(Errno) in try await fs.symlink(parent: parent, name: name, target: target) }
        }
        ops.link = { req, ino, newParent, newName in
            guard let newName = FuseOperations.name(req!, newName) else { return }
            FuseOperations.replyingEntry(req!) { fs async throws(Errno) in try await fs.link(ino: ino, newParent: newParent, newName: newName) }
        }
        ops.mknod = { req, parent, name, mode, rdev in
            guard let name = FuseOperations.name(req!, name) else { return }
            let (m, r) = (UInt32(mode), UInt64(rdev))
            FuseOperations.replyingEntry(req!) { fs async throws(Errno) in try await fs.mknod(parent: parent, name: name, mode: m, rdev: r) }
        }
        ops.getxattr = { req, ino, name, size in FuseOperations.getxattr(req!, ino, name, size) }
        ops.listxattr = { req, ino, size in FuseOperations.listxattr(req!, ino, size) }
        ops.setxattr = { req, ino, name, value, size, flags in FuseOperations.setxattr(req!, ino, name, value, size, flags) }
        ops.removexattr = { req, ino, name in
            guard let name = FuseOperations.name(req!, name) else { return }
            if name == securityCapability { fuse_reply_err(req, ENODATA); return }
            FuseOperations.replyingStatus(req!) { fs async throws(Errno) in try await fs.removexattr(ino: ino, name: name) }
        }
        return ops
    }()

    /// The kernel asks for it before every write once xattrs exist (STYLE trap 9); libfuse 3.14
    /// has no FUSE_CAP_HANDLE_KILLPRIV_V2, so FuseKit answers it without the filesystem.
    static let securityCapability = "security.capability"

    static func negotiate(_ conn: inout fuse_conn_info, readdirplus: FuseSession.ReaddirPlus) {
        func want(_ flag: Int32, _ on: Bool) {
            let bit = UInt32(bitPattern: flag)
            if on && conn.capable & bit != 0 { conn.want |= bit } else if !on { conn.want &= ~bit }
        }
        want(FUSE_CAP_ASYNC_READ, true)
        want(FUSE_CAP_READDIRPLUS, readdirplus != .off)
        want(FUSE_CAP_READDIRPLUS_AUTO, readdirplus == .auto)
        want(FUSE_CAP_ATOMIC_O_TRUNC, true)
        // libfuse 3.14 does not pass this on (its INIT reply carried flags 0x4040b029, without
        // FUSE_PARALLEL_DIROPS, 1 << 18, nor FUSE_HANDLE_KILLPRIV, 1 << 19, docs/BENCHMARKS.md):
        // the session's custom io adds it to the reply (`cfuse_io_install`).
        want(FUSE_CAP_PARALLEL_DIROPS, true)
        // Writes up to max_write (libfuse sets FUSE_BIG_WRITES and the largest max_write its buffer
        // allows); read-ahead: whatever the kernel offers, up to 1 MiB.
        conn.max_readahead = min(conn.max_readahead, 1 << 20)
    }

    /// The name as UTF-8, or nil after answering EILSEQ.
    static func name(_ req: fuse_req_t, _ cname: UnsafePointer<CChar>?) -> String? {
        guard let cname, let name = String(validatingCString: cname) else {
            fuse_reply_err(req, Errno.EILSEQ.rawValue)
            return nil
        }
        return name
    }

    /// Requests answered with just an errno (0 on success).
    static func replyingStatus(_ req: fuse_req_t,
                               _ work: @escaping @Sendable (any FuseFileSystemBase) async throws(Errno) -> Void) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        context.serve(req, { () async throws(Errno) in try await work(fs) }) { req, _ in
            context.check(fuse_reply_err(req, 0), "fuse_reply_err")
        }
    }

    /// Requests answered with an entry (symlink, link, mknod): it counts as a lookup.
    static func replyingEntry(_ req: fuse_req_t,
                              _ work: @escaping @Sendable (any FuseFileSystemBase) async throws(Errno) -> FuseEntry) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        context.serve(req, { () async throws(Errno) in try await work(fs) }) { req, entry in
            replyEntry(context, req, entry)
        }
    }

    /// An entry reply; if the kernel never gets it, the lookup it would have counted is undone.
    static func replyEntry(_ context: RequestContext, _ req: fuse_req_t, _ entry: FuseEntry) {
        var e = entry.entryParam
        let rc = fuse_reply_entry(req, &e)
        if rc != 0 && entry.attributes.ino != 0 { context.filesystem.forget(ino: entry.attributes.ino, nlookup: 1) }
        context.check(rc, "fuse_reply_entry")
    }

    static func lookup(_ req: fuse_req_t, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?) {
        guard let name = name(req, cname) else { return }
        let context = RequestContext.of(req)
        let fs = context.filesystem
        switch fs.cachedLookup(parent: parent, name: name) {
        case .success(let entry)?: replyEntry(context, req, entry); return
        case .failure(let e)?: context.check(fuse_reply_err(req, e.rawValue), "fuse_reply_err"); return
        case nil: break
        }
        context.serve(req, { () async throws(Errno) in try await fs.lookup(parent: parent, name: name) }) { req, entry in
            replyEntry(context, req, entry)
        }
    }

    static func mkdir(_ req: fuse_req_t, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ mode: mode_t) {
        guard let name = name(req, cname) else { return }
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let perms = UInt32(mode) & 0o7777
        context.serve(req, { () async throws(Errno) in try await fs.mkdir(parent: parent, name: name, mode: perms) }) { req, entry in
            replyEntry(context, req, entry)
        }
    }

    static func getattr(_ req: fuse_req_t, _ ino: fuse_ino_t) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        if let value = fs.cachedGetattr(ino: ino) {
            var st = value.0.statValue
            context.check(fuse_reply_attr(req, &st, value.1), "fuse_reply_attr")
            return
        }
        context.serve(req, { () async throws(Errno) in try await fs.getattr(ino: ino) }) { req, value in
            var st = value.0.statValue
            context.check(fuse_reply_attr(req, &st, value.1), "fuse_reply_attr")
        }
    }

    static func setattr(_ req: fuse_req_t, _ ino: fuse_ino_t, _ attr: UnsafeMutablePointer<stat>?, _ toSet: Int32,
                        _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let changes = attr.map { SetAttributes(stat: $0.pointee, toSet: toSet, now: Date().timeIntervalSince1970) } ?? SetAttributes()
        let fh = fi?.pointee.fh
        if let r = fs.immediateSetattr(ino: ino, fh: fh, changes: changes) {
            switch r {
            case .success(let value):
                var st = value.0.statValue
                context.check(fuse_reply_attr(req, &st, value.1), "fuse_reply_attr")
            case .failure(let e):
                context.check(fuse_reply_err(req, e.rawValue), "fuse_reply_err")
            }
            return
        }
        context.serve(req, { () async throws(Errno) in try await fs.setattr(ino: ino, fh: fh, changes: changes) }) { req, value in
            var st = value.0.statValue
            context.check(fuse_reply_attr(req, &st, value.1), "fuse_reply_attr")
        }
    }

    static func opendir(_ req: fuse_req_t, _ ino: fuse_ino_t) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        context.serve(req, { () async throws(Errno) in try await fs.opendir(ino: ino) }) { req, fh in
            var fi = fuse_file_info()
            fi.fh = fh
            switch fs.directoryCaching(ino: ino, fh: fh) {
            case .none: break
            case .fill: fi.cache_readdir = 1
            case .keep: fi.cache_readdir = 1; fi.keep_cache = 1
            }
            let rc = fuse_reply_open(req, &fi)
            if rc != 0 { fs.releasedir(ino: ino, fh: fh) }  // the kernel will never release it
            context.check(rc, "fuse_reply_open")
        }
    }

    static func open(_ req: fuse_req_t, _ ino: fuse_ino_t, _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let flags = OpenFlags(fi?.pointee.flags ?? 0)
        // A writer beside opens the kernel reads itself would get their backing file for its mmap
        // (the kernel maps it, whatever the handle): refused, as a running program's file is.
        if flags.isWrite, context.passthrough?.isBacked(ino: ino) == true {
            context.check(fuse_reply_err(req, ETXTBSY), "fuse_reply_err")
            return
        }
        let opens = context.passthrough
        context.serve(req, { () async throws(Errno) in
            let fh = try await fs.open(ino: ino, flags: flags)
            // Asked in the request's Task: the filesystem may read a file whole to check it first.
            return (fh, opens == nil ? nil : await fs.passthroughFile(ino: ino, fh: fh))
        }) { req, opened in
            let (fh, file) = opened
            var fi = fuse_file_info()
            fi.fh = fh
            if fs.keepsCache(ino: ino, fh: fh) { fi.keep_cache = 1 }
            let direct = fs.directIO(ino: ino, fh: fh)
            let rc: Int32
            if let opens {
                switch opens.answer(ino: ino, fh: fh, file: file, direct: direct) {
                case .plain:
                    if direct { fi.direct_io = 1 }
                    rc = fuse_reply_open(req, &fi)
                case let .backed(id, direct):
                    rc = cfuse_reply_open_passthrough(req, &fi, id, direct ? 1 : 0)
                }
                if rc != 0 { opens.ended(fh: fh) }
            } else {
                if direct { fi.direct_io = 1 }
                rc = fuse_reply_open(req, &fi)
            }
            if rc != 0 { Task { try? await fs.release(ino: ino, fh: fh) } }
            context.check(rc, "fuse_reply_open")
        }
    }

    static func create(_ req: fuse_req_t, _ parent: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ mode: mode_t,
                       _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        guard let name = name(req, cname) else { return }
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let flags = OpenFlags(fi?.pointee.flags ?? 0)
        let perms = UInt32(mode) & 0o7777
        context.serve(req, { () async throws(Errno) in
            try await fs.create(parent: parent, name: name, mode: perms, flags: flags)
        }) { req, value in
            var e = value.0.entryParam
            var fi = fuse_file_info()
            fi.fh = value.1
            if fs.directIO(ino: value.0.attributes.ino, fh: value.1) { fi.direct_io = 1 }
            // A new inode: its open is plain, and counted so that none of its later opens is backed meanwhile.
            _ = context.passthrough?.answer(ino: value.0.attributes.ino, fh: value.1, file: nil, direct: true)
            let rc = fuse_reply_create(req, &e, &fi)
            if rc != 0 {
                context.passthrough?.ended(fh: value.1)
                let ino = value.0.attributes.ino
                fs.forget(ino: ino, nlookup: 1)
                Task { try? await fs.release(ino: ino, fh: value.1) }
            }
            context.check(rc, "fuse_reply_create")
        }
    }

    static func read(_ req: fuse_req_t, _ ino: fuse_ino_t, _ size: Int, _ off: off_t,
                     _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let fh = fi?.pointee.fh ?? 0
        let offset = UInt64(max(0, off))
        context.serve(req, { () async throws(Errno) in try await fs.read(ino: ino, fh: fh, offset: offset, size: size) }) { req, data in
            let rc = data.withUnsafeBytes { raw in fuse_reply_buf(req, raw.baseAddress, min(raw.count, size)) }
            context.check(rc, "fuse_reply_buf")
        }
    }

    static func write(_ req: fuse_req_t, _ ino: fuse_ino_t, _ buf: UnsafePointer<CChar>?, _ size: Int, _ off: off_t,
                      _ fi: UnsafeMutablePointer<fuse_file_info>?) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let fh = fi?.pointee.fh ?? 0
        let offset = UInt64(max(0, off))
        if let r = fs.immediateWrite(ino: ino, fh: fh, offset: offset, bytes: UnsafeRawBufferPointer(start: buf, count: buf == nil ? 0 : size)) {
            switch r {
            case .success(let written): context.check(fuse_reply_write(req, max(0, written)), "fuse_reply_write")
            case .failure(let e): context.check(fuse_reply_err(req, e.rawValue), "fuse_reply_err")
            }
            return
        }
        let data = buf.map { Data(bytes: $0, count: size) } ?? Data()
        context.serve(req, { () async throws(Errno) in try await fs.write(ino: ino, fh: fh, offset: offset, data: data) }) { req, written in
            context.check(fuse_reply_write(req, max(0, written)), "fuse_reply_write")
        }
    }

    static func readdir(_ req: fuse_req_t, _ ino: fuse_ino_t, _ size: Int, _ off: off_t,
                        _ fi: UnsafeMutablePointer<fuse_file_info>?, plus: Bool) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        let fh = fi?.pointee.fh ?? 0
        let (fsOffset, dots) = DirectoryOffsets.split(kernelOffset: UInt64(bitPattern: Int64(off)))
        // No more entries than the buffer can take: a dirent is at least 32 bytes, a direntplus 160.
        let limit = size / (plus ? 160 : 32) + 1
        context.serve(req, { () async throws(Errno) in try await fs.readdir(ino: ino, fh: fh, offset: fsOffset, limit: limit) }) { req, entries in
            var buffer = DirectoryBuffer(capacity: size)
            var full = false
            let dotEntry = FuseEntry(
                attributes: FileAttributes(ino: ino, type: .directory, size: 0, permissions: 0, nlink: 0,
                                           uid: 0, gid: 0, atime: 0, mtime: 0, ctime: 0),
                entryTimeout: 0, attrTimeout: 0)
            for (index, dotName) in [".", ".."].enumerated().suffix(dots) {
                var entry = dotEntry
                if dotName == ".." { entry.attributes.ino = 0xffff_ffff }  // unknown parent (as libfuse's high-level API)
                if !buffer.add(req, name: dotName, entry: entry, nextOffset: off_t(index + 1), plus: plus, countsAsLookup: false) {
                    full = true
                    break
                }
            }
            if !full {
                for entry in entries {
                    let next = DirectoryOffsets.kernelOffset(filesystemOffset: entry.offset)
                    if !buffer.add(req, name: entry.name, entry: entry.entry, nextOffset: next, plus: plus,
                                   countsAsLookup: entry.attributesKnown) {
                        break
                    }
                }
            }
            // Counted before the reply so it always precedes the kernel's forget.
            for delivered in buffer.delivered { fs.noteLookup(ino: delivered) }
            let rc = buffer.bytes.withUnsafeBufferPointer { fuse_reply_buf(req, $0.baseAddress, buffer.used) }
            if rc != 0 { for delivered in buffer.delivered { fs.forget(ino: delivered, nlookup: 1) } }
            context.check(rc, "fuse_reply_buf")
        }
    }

    static func getxattr(_ req: fuse_req_t, _ ino: fuse_ino_t, _ cname: UnsafePointer<CChar>?, _ size: Int) {
        guard let name = name(req, cname) else { return }
        if name == securityCapability { fuse_reply_err(req, ENODATA); return }
        let context = RequestContext.of(req)
        let fs = context.filesystem
        // Names the filesystem answers without I/O (ls asks for security.selinux and
        // system.posix_acl_access on every file): reply here, with no Task.
        if let e = fs.immediateGetxattrError(name: name) { fuse_reply_err(req, e.rawValue); return }
        switch fs.cachedGetxattr(ino: ino, name: name) {
        case .success(let value)?: replyXattr(context, req, XattrReply(value: value, requestedSize: size)); return
        case .failure(let e)?: replyXattr(context, req, .error(e)); return
        case nil: break
        }
        context.serve(req, { () async throws(Errno) in try await fs.getxattr(ino: ino, name: name) }) { req, value in
            replyXattr(context, req, XattrReply(value: value, requestedSize: size))
        }
    }

    static func listxattr(_ req: fuse_req_t, _ ino: fuse_ino_t, _ size: Int) {
        let context = RequestContext.of(req)
        let fs = context.filesystem
        if let names = fs.cachedListxattr(ino: ino) {
            replyXattr(context, req, XattrReply(value: XattrReply.nameList(names), requestedSize: size))
            return
        }
        context.serve(req, { () async throws(Errno) in try await fs.listxattr(ino: ino) }) { req, names in
            replyXattr(context, req, XattrReply(value: XattrReply.nameList(names), requestedSize: size))
        }
    }

    static func replyXattr(_ context: RequestContext, _ req: fuse_req_t, _ reply: XattrReply) {
        switch reply {
        case .size(let n): context.check(fuse_reply_xattr(req, n), "fuse_reply_xattr")
        case .bytes(let bytes):
            context.check(bytes.withUnsafeBufferPointer { fuse_reply_buf(req, $0.baseAddress, $0.count) }, "fuse_reply_buf")
        case .error(let errno): context.check(fuse_reply_err(req, errno.rawValue), "fuse_reply_err")
        }
    }

    static func setxattr(_ req: fuse_req_t, _ ino: fuse_ino_t, _ cname: UnsafePointer<CChar>?,
                         _ value: UnsafePointer<CChar>?, _ size: Int, _ flags: Int32) {
        guard let name = name(req, cname) else { return }
        if name == securityCapability { fuse_reply_err(req, Errno.ENOTSUP.rawValue); return }
        let bytes = value.map { v in v.withMemoryRebound(to: UInt8.self, capacity: size) { Array(UnsafeBufferPointer(start: $0, count: size)) } } ?? []
        replyingStatus(req) { fs async throws(Errno) in try await fs.setxattr(ino: ino, name: name, value: bytes, flags: flags) }
    }
}
