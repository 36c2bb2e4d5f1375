import CFuse
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Which open files the kernel reads itself from a backing file (FUSE passthrough), kept so that
/// every open of one inode agrees with the others, as the kernel requires: while an inode has
/// backed opens, each new open of it names the same backing id (with FOPEN_DIRECT_IO when the
/// filesystem offers no file, or another one: that handle's reads still come here), and an inode
/// starts a backing only when nothing else has it open. The backing id is closed with the
/// inode's last backed open.
final class PassthroughOpens: @unchecked Sendable {
    /// How one open is answered: plainly, or with a backing id (and whether its own reads still
    /// come to the filesystem).
    enum Answer: Equatable {
        case plain
        case backed(id: Int32, direct: Bool)
    }

    private struct Backing {
        let id: Int32
        let device: UInt64
        let inode: UInt64
        var opens: Int
    }

    private let lock = NSLock()
    // Guarded by `lock`.
    private var backings: [UInt64: Backing] = [:]  // by FUSE inode
    private var plain: [UInt64: Int] = [:]         // plain opens by FUSE inode
    private var handles: [UInt64: (ino: UInt64, backed: Bool)] = [:]  // by file handle
    private var refused = false                    // the device refused a backing file for good
    private var toldWhy = false
    private let negotiated: () -> Bool
    private let offered: () -> Bool
    private let open: (Int32) -> Int32
    private let close: (Int32) -> Void
    private let log: (String) -> Void

    /// `negotiated`: whether the INIT handshake took passthrough (`offered`: whether the kernel
    /// offered it); `open`: a backing id for a descriptor (> 0) or -errno; `close` closes an id.
    init(negotiated: @escaping () -> Bool = { cfuse_passthrough_negotiated() != 0 },
         offered: @escaping () -> Bool = { cfuse_passthrough_offered() != 0 },
         open: @escaping (Int32) -> Int32 = { cfuse_backing_open($0) },
         close: @escaping (Int32) -> Void = { _ = cfuse_backing_close($0) },
         log: @escaping (String) -> Void) {
        self.negotiated = negotiated
        self.offered = offered
        self.open = open
        self.close = close
        self.log = log
    }

    /// The answer to the open `fh` of `ino`: `file` is the descriptor the filesystem offers the
    /// kernel for it (nil: none), `direct` whether the filesystem wants its reads itself.
    func answer(ino: UInt64, fh: UInt64, file: Int32?, direct: Bool) -> Answer {
        guard negotiated() else {
            let tell = file != nil && lock.withLock {
                defer { toldWhy = true }
                return !toldWhy
            }
            if tell {
                log(offered() ? "the kernel offered passthrough but the handshake did not take it; reads come through the filesystem"
                    : "this kernel offers no passthrough (Linux 6.9 or later with CONFIG_FUSE_PASSTHROUGH); reads come through the filesystem")
            }
            return .plain
        }
        return lock.withLock {
            if var b = backings[ino] {
                b.opens += 1
                backings[ino] = b
                handles[fh] = (ino, true)
                let same = file.flatMap { Self.identity($0) }.map { $0 == (b.device, b.inode) } ?? false
                return .backed(id: b.id, direct: direct || !same)
            }
            if let file, !direct, !refused, plain[ino, default: 0] == 0, let (device, inode) = Self.identity(file) {
                let id = open(file)
                if id > 0 {
                    backings[ino] = Backing(id: id, device: device, inode: inode, opens: 1)
                    handles[fh] = (ino, true)
                    return .backed(id: id, direct: false)
                }
                if id == -EPERM || id == -EOPNOTSUPP || id == -ENOTTY {
                    refused = true
                    log("the kernel reads no file directly (passthrough): \(Errno(-id)); reads come through the filesystem")
                } else {
                    log("passthrough refused for one file: \(Errno(-id)); its reads come through the filesystem")
                }
            }
            plain[ino, default: 0] += 1
            handles[fh] = (ino, false)
            return .plain
        }
    }

    /// The open `fh` ended (release), or its answer never reached the kernel.
    func ended(fh: UInt64) {
        let closing: Int32? = lock.withLock {
            guard let (ino, backed) = handles.removeValue(forKey: fh) else { return nil }
            if !backed {
                let n = plain[ino, default: 1] - 1
                plain[ino] = n > 0 ? n : nil
                return nil
            }
            guard var b = backings[ino] else { return nil }
            b.opens -= 1
            if b.opens > 0 { backings[ino] = b; return nil }
            backings[ino] = nil
            return b.id
        }
        if let closing { close(closing) }
    }

    /// Whether the kernel reads `ino` from a backing file now.
    func isBacked(ino: UInt64) -> Bool { lock.withLock { backings[ino] != nil } }

    /// Backed opens now, by inode (tests).
    var backedInodes: [UInt64: Int] { lock.withLock { backings.mapValues(\.opens) } }

    static func identity(_ fd: Int32) -> (UInt64, UInt64)? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return (UInt64(st.st_dev), UInt64(st.st_ino))
    }
}
