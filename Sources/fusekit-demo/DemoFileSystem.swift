import Foundation
import FuseKit

/// A small in-memory filesystem for FuseKit's real-mount tests:
///   /hello.txt            "hello, world\n", xattrs user.color = "blue", user.big = 300 × "x"
///   /many/f0000…f2999     3000 empty files
///   /slow                 reads wait 30 s unless the request is interrupted (then EINTR)
///   /errno-N              lookup throws errno N (any N)
/// plus whatever is created. Root xattr `user.demo.noted` = how many readdirplus entries FuseKit
/// reported through `noteLookup`.
final class DemoFileSystem: FuseFileSystem, @unchecked Sendable {
    final class Node {
        let ino: UInt64
        var type: FileType
        var data: [UInt8] = []
        var children: [String: UInt64] = [:]
        var xattrs: [String: [UInt8]] = [:]
        var permissions: UInt32
        var mtime: Double
        var atime: Double
        var lookups: UInt64 = 0
        init(ino: UInt64, type: FileType, permissions: UInt32, now: Double) {
            self.ino = ino; self.type = type; self.permissions = permissions; mtime = now; atime = now
        }
    }

    private let lock = NSLock()
    private var nodes: [UInt64: Node] = [:]
    private var nextIno: UInt64 = 2
    private var dirHandles: [UInt64: [(name: String, ino: UInt64)]] = [:]
    private var nextFh: UInt64 = 1
    private var noted = 0
    private let ttl = 1.0

    init(manyCount: Int = 3000) {
        let now = Date().timeIntervalSince1970
        nodes[1] = Node(ino: 1, type: .directory, permissions: 0o755, now: now)
        let hello = add(parent: 1, name: "hello.txt", type: .regular, permissions: 0o644)
        hello.data = Array("hello, world\n".utf8)
        hello.xattrs["user.color"] = Array("blue".utf8)
        hello.xattrs["user.big"] = [UInt8](repeating: UInt8(ascii: "x"), count: 300)
        let many = add(parent: 1, name: "many", type: .directory, permissions: 0o755)
        for i in 0..<manyCount { _ = add(parent: many.ino, name: String(format: "f%04d", i), type: .regular, permissions: 0o644) }
        _ = add(parent: 1, name: "slow", type: .regular, permissions: 0o644).data = Array("slow\n".utf8)
    }

    private func add(parent: UInt64, name: String, type: FileType, permissions: UInt32) -> Node {
        let n = Node(ino: nextIno, type: type, permissions: permissions, now: Date().timeIntervalSince1970)
        nextIno += 1
        nodes[n.ino] = n
        nodes[parent]!.children[name] = n.ino
        return n
    }

    private func attributes(_ n: Node) -> FileAttributes {
        FileAttributes(ino: n.ino, type: n.type, size: UInt64(n.data.count), permissions: n.permissions,
                       nlink: n.type == .directory ? 2 : 1, uid: getuid(), gid: getgid(),
                       atime: n.atime, mtime: n.mtime, ctime: n.mtime)
    }

    private func entry(_ n: Node) -> FuseEntry { FuseEntry(attributes: attributes(n), entryTimeout: ttl, attrTimeout: ttl) }

    private func node(_ ino: UInt64) throws(Errno) -> Node {
        guard let n = nodes[ino] else { throw .ENOENT }
        return n
    }

    private func withLock<T>(_ body: () throws(Errno) -> T) throws(Errno) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    func lookup(parent: UInt64, name: String) async throws(Errno) -> FuseEntry {
        if name.hasPrefix("errno-"), let n = Int32(name.dropFirst(6)) { throw Errno(n) }
        return try withLock { () throws(Errno) in
            guard let ino = try node(parent).children[name], let n = nodes[ino] else { throw .ENOENT }
            n.lookups += 1
            return entry(n)
        }
    }

    func forget(ino: UInt64, nlookup: UInt64) {
        try? withLock { () throws(Errno) in
            if let n = nodes[ino] { n.lookups -= min(n.lookups, nlookup) }
        }
    }

    func noteLookup(ino: UInt64) {
        try? withLock { () throws(Errno) in
            noted += 1
            nodes[ino]?.lookups += 1
        }
    }

    func getattr(ino: UInt64) async throws(Errno) -> (FileAttributes, Double) {
        try withLock { () throws(Errno) in (attributes(try node(ino)), ttl) }
    }

    func setattr(ino: UInt64, fh: UInt64?, changes: SetAttributes) async throws(Errno) -> (FileAttributes, Double) {
        try withLock { () throws(Errno) in
            let n = try node(ino)
            if let size = changes.size {
                guard n.type == .regular else { throw .EISDIR }
                n.data = Array(n.data.prefix(Int(size))) + [UInt8](repeating: 0, count: max(0, Int(size) - n.data.count))
                n.mtime = Date().timeIntervalSince1970
            }
            if let mode = changes.mode { n.permissions = mode }
            if let atime = changes.atime { n.atime = atime }
            if let mtime = changes.mtime { n.mtime = mtime }
            return (attributes(n), ttl)
        }
    }

    func opendir(ino: UInt64) async throws(Errno) -> UInt64 {
        try withLock { () throws(Errno) in
            let n = try node(ino)
            guard n.type == .directory else { throw .ENOTDIR }
            let fh = nextFh
            nextFh += 1
            dirHandles[fh] = n.children.sorted { $0.key < $1.key }.map { (name: $0.key, ino: $0.value) }
            return fh
        }
    }

    func readdir(ino: UInt64, fh: UInt64, offset: UInt64) async throws(Errno) -> [DirectoryEntry] {
        try withLock { () throws(Errno) in
            guard let list = dirHandles[fh] else { throw .EBADF }
            guard offset < list.count else { return [] }
            return list[Int(offset)...].enumerated().compactMap { i, item in
                guard let n = nodes[item.ino] else { return nil }
                return DirectoryEntry(name: item.name, offset: offset + UInt64(i) + 1, entry: entry(n))
            }
        }
    }

    func releasedir(ino: UInt64, fh: UInt64) {
        try? withLock { () throws(Errno) in _ = dirHandles.removeValue(forKey: fh) }
    }

    func open(ino: UInt64, flags: OpenFlags) async throws(Errno) -> UInt64 {
        try withLock { () throws(Errno) in
            let n = try node(ino)
            guard n.type == .regular else { throw .EISDIR }
            if flags.truncate && flags.isWrite { n.data = [] }
            return 0
        }
    }

    func read(ino: UInt64, fh: UInt64, offset: UInt64, size: Int) async throws(Errno) -> Data {
        let isSlow = try withLock { () throws(Errno) in nodes[1]!.children["slow"] == ino }
        if isSlow {
            // Returns early only if FuseKit cancels this Task (kernel INTERRUPT).
            do { try await Task.sleep(nanoseconds: 30_000_000_000) } catch { throw .EINTR }
        }
        return try withLock { () throws(Errno) in
            let n = try node(ino)
            guard offset < n.data.count else { return Data() }
            return Data(n.data[Int(offset)..<min(n.data.count, Int(offset) + size)])
        }
    }

    func write(ino: UInt64, fh: UInt64, offset: UInt64, data: Data) async throws(Errno) -> Int {
        try withLock { () throws(Errno) in
            let n = try node(ino)
            let end = Int(offset) + data.count
            if n.data.count < end { n.data += [UInt8](repeating: 0, count: end - n.data.count) }
            n.data.replaceSubrange(Int(offset)..<end, with: data)
            n.mtime = Date().timeIntervalSince1970
            return data.count
        }
    }

    func create(parent: UInt64, name: String, mode: UInt32, flags: OpenFlags) async throws(Errno) -> (FuseEntry, UInt64) {
        try withLock { () throws(Errno) in
            let p = try node(parent)
            guard p.type == .directory else { throw .ENOTDIR }
            guard p.children[name] == nil else { throw .EEXIST }
            let n = add(parent: parent, name: name, type: .regular, permissions: mode)
            n.lookups += 1
            return (entry(n), 0)
        }
    }

    func mkdir(parent: UInt64, name: String, mode: UInt32) async throws(Errno) -> FuseEntry {
        try withLock { () throws(Errno) in
            guard try node(parent).children[name] == nil else { throw .EEXIST }
            let n = add(parent: parent, name: name, type: .directory, permissions: mode)
            n.lookups += 1
            return entry(n)
        }
    }

    func unlink(parent: UInt64, name: String) async throws(Errno) {
        try withLock { () throws(Errno) in
            let p = try node(parent)
            guard let ino = p.children[name], let n = nodes[ino] else { throw .ENOENT }
            guard n.type == .regular else { throw .EISDIR }
            p.children[name] = nil
        }
    }

    func rmdir(parent: UInt64, name: String) async throws(Errno) {
        try withLock { () throws(Errno) in
            let p = try node(parent)
            guard let ino = p.children[name], let n = nodes[ino] else { throw .ENOENT }
            guard n.type == .directory else { throw .ENOTDIR }
            guard n.children.isEmpty else { throw .ENOTEMPTY }
            p.children[name] = nil
        }
    }

    func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, flags: UInt32) async throws(Errno) {
        try withLock { () throws(Errno) in
            guard flags == 0 else { throw .EINVAL }
            let p = try node(parent), q = try node(newParent)
            guard let ino = p.children[name] else { throw .ENOENT }
            p.children[name] = nil
            q.children[newName] = ino
        }
    }

    func getxattr(ino: UInt64, name: String) async throws(Errno) -> [UInt8] {
        try withLock { () throws(Errno) in
            if ino == 1 && name == "user.demo.noted" { return Array(String(noted).utf8) }
            guard let value = try node(ino).xattrs[name] else { throw .ENODATA }
            return value
        }
    }

    func listxattr(ino: UInt64) async throws(Errno) -> [String] {
        try withLock { () throws(Errno) in try node(ino).xattrs.keys.sorted() }
    }

    func setxattr(ino: UInt64, name: String, value: [UInt8], flags: Int32) async throws(Errno) {
        try withLock { () throws(Errno) in
            let n = try node(ino)
            guard name.hasPrefix("user.") else { throw .ENOTSUP }
            if flags & 1 != 0 && n.xattrs[name] != nil { throw .EEXIST }
            if flags & 2 != 0 && n.xattrs[name] == nil { throw .ENODATA }
            n.xattrs[name] = value
        }
    }

    func removexattr(ino: UInt64, name: String) async throws(Errno) {
        try withLock { () throws(Errno) in
            guard try node(ino).xattrs.removeValue(forKey: name) != nil else { throw .ENODATA }
        }
    }
}
