import Foundation
import StorageModel

/// A hierarchical-namespace bucket (`layout == .hierarchical`), as the JSON API reference
/// describes one (docs/TESTING.md, "Hierarchical-namespace test servers"): folders are resources;
/// an upload, copy or move under a folder that does not exist makes it and its parents; a folder
/// stays when its last object goes; an object's name cannot end in "/"; a folder is deleted only
/// when empty; a folder rename moves everything under it at once, keeping each object's
/// generation; `move` renames one object atomically (a new generation, metageneration 1).
extension MemoryStore: FolderStore {
    public var folders: (any FolderStore)? { layout == .hierarchical ? self : nil }

    /// Folder names, sorted (hierarchical layout).
    public var folderNames: [String] { withLock { folderTable.keys.sorted(by: Self.byteLess) } }

    /// Calls to `move`, in order (source, destination).
    public var moveCalls: [(String, String)] { withLock { _moveCalls } }

    public func createFolder(_ name: String) async throws -> FolderInfo {
        try withLock {
            try enter("folder_create")
            try Self.checkFolderName(name)
            if folderTable[name] != nil { throw StorageError.conflict(path: name, message: "The folder already exists.") }
            makeAncestorFoldersLocked(of: name, at: tick())
            return folderTable[name]!
        }
    }

    public func getFolder(_ name: String) async throws -> FolderInfo {
        try withLock {
            try enter("folder_get")
            guard let f = folderTable[name] else { throw StorageError.objectNotFound(path: name) }
            return f
        }
    }

    public func deleteFolder(_ name: String) async throws {
        try withLock {
            try enter("folder_delete")
            guard folderTable[name] != nil else { throw StorageError.objectNotFound(path: name) }
            let holds = objects.keys.contains { $0.hasPrefix(name) } || folderTable.keys.contains { $0 != name && $0.hasPrefix(name) }
            if holds { throw StorageError.notEmpty(path: name) }
            folderTable[name] = nil
        }
    }

    public func renameFolder(_ source: String, to destination: String) async throws -> FolderInfo {
        try withLock {
            try enter("folder_rename")
            try Self.checkFolderName(destination)
            guard folderTable[source] != nil else { throw StorageError.objectNotFound(path: source) }
            if folderTable[destination] != nil || objects.keys.contains(where: { $0.hasPrefix(destination) }) {
                throw StorageError.conflict(path: destination, message: "The destination folder already exists.")
            }
            if destination.hasPrefix(source) {
                throw StorageError.invalidArgument(message: "cannot move a folder into itself")
            }
            let t = tick()
            makeAncestorFoldersLocked(of: String(destination.dropLast()), at: t)
            for name in folderTable.keys.filter({ $0.hasPrefix(source) }) {
                var f = folderTable.removeValue(forKey: name)!
                f.name = destination + name.dropFirst(source.count)
                f.updateTime = t
                folderTable[f.name] = f
            }
            for name in objects.keys.filter({ $0.hasPrefix(source) }) {
                let o = objects.removeValue(forKey: name)!
                let i = o.info
                let moved = ObjectInfo(bucket: bucket, name: destination + name.dropFirst(source.count), generation: i.generation,
                                       metageneration: i.metageneration, size: i.size, timeCreated: i.timeCreated, updated: i.updated,
                                       md5Hash: i.md5Hash, crc32c: i.crc32c, writable: i.writable)
                objects[moved.name] = Stored(info: moved, data: o.data)
            }
            return folderTable[destination]!
        }
    }

    public func move(from source: String, sourceGeneration: Int64, to destination: String,
                     preconditions: Preconditions) async throws -> ObjectInfo? {
        guard moves else { return nil }
        return try withLock {
            try enter("move")
            _moveCalls.append((source, destination))
            guard source != destination else { throw StorageError.invalidArgument(message: "source and destination are the same") }
            guard let src = objects[source] else { throw StorageError.objectNotFound(path: source) }
            guard src.info.generation == sourceGeneration else { throw StorageError.preconditionFailed(path: source) }
            try StoragePath.validateObjectName(destination)
            try refuseFolderNameLocked(destination)
            guard preconditions.hold(for: objects[destination]?.info) else { throw StorageError.preconditionFailed(path: destination) }
            let info = commitLocked(destination, data: src.data, metadata: src.info.writable)
            retireLocked(source, at: tick())
            return info
        }
    }

    // MARK: - internals (caller holds `lock`)

    /// On a hierarchical bucket, `name`'s folders come to exist (an upload under them makes them).
    func makeAncestorFoldersLocked(of name: String, at t: Date) {
        guard layout == .hierarchical else { return }
        for f in ancestorFolders(of: name) where folderTable[f] == nil {
            folderTable[f] = FolderInfo(name: f, metageneration: 1, createTime: t, updateTime: t)
        }
    }

    /// A hierarchical bucket refuses an object named like a folder.
    func refuseFolderNameLocked(_ name: String) throws {
        if layout == .hierarchical, name.hasSuffix("/") {
            throw StorageError.invalidArgument(message: "an object name cannot end in '/' in a bucket with hierarchical namespace")
        }
    }

    static func checkFolderName(_ name: String) throws {
        guard name.hasSuffix("/"), name.count > 1, !name.hasPrefix("/"), !name.contains("//") else {
            throw StorageError.invalidArgument(message: "invalid folder name '\(name)'")
        }
    }
}
