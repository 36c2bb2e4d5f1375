import Foundation
import StorageModel

/// The hierarchical-namespace flavour (`hierarchical`), as the JSON API reference describes it
/// and as `MemoryStore(layout: .hierarchical)` does it (Tests/TestSupport/MemoryStore+Folders.swift;
/// docs/TESTING.md, "Hierarchical-namespace test servers"): folders are resources; an upload,
/// copy or move under a folder that does not exist makes it and its parents; a folder stays when
/// its last object goes; an object name ending in "/" is refused (400); a folder is deleted only
/// when empty (409 otherwise); a rename is a long-running operation that moves everything under
/// the folder at once, keeping each object's generation, and is done after `renamePolls`
/// `operations.get`; while it is pending, writes under the folder are refused (409). objects.move
/// is offered on both flavours (`moves`); `storageLayout` answers on both.
extension GCSTestServer {
    public struct Folder: Sendable {
        public var name: String
        public var metageneration: Int64
        public var createTime: Date
        public var updateTime: Date
    }

    /// How the next folder rename's operation ends instead of moving the folder.
    public enum RenameFault: Sendable {
        /// Done, with this google.rpc error (nothing moved).
        case fails(code: Int, message: String)
        /// Never done: every poll says `done: false`.
        case neverFinishes
    }

    struct PendingRename {
        var id: String
        var source: String
        var destination: String
        var pollsLeft: Int
        var fault: RenameFault?
        var created: Date
        /// The answer once done: `error` or `response`.
        var outcome: [String: Any]?
    }

    public var folderNames: [String] { read { $0.folders.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } } }
    public func folder(_ name: String) -> Folder? { read { $0.folders[name] } }

    // MARK: routes under /storage/v1/b/BUCKET/{storageLayout, folders, operations}

    func hnsRoute(method: String, segs: [String], q: [String: String], body: Data) -> Response? {
        guard segs.count >= 6, segs[1] == "storage", segs[2] == "v1", segs[3] == "b" else { return nil }
        let what = segs[5]
        guard ["storageLayout", "folders", "operations"].contains(what) else { return nil }
        guard segs[4] == bucket else { return .error(404, "The specified bucket does not exist.") }
        if what == "storageLayout" {
            // (`prefix=`: where the caller's storage.objects.list is checked; one bucket, no IAM here)
            guard method == "GET", segs.count == 6 else { return .error(404, "no route for \(method) storageLayout") }
            return .json(200, ["kind": "storage#storageLayout", "bucket": bucket, "location": "US", "locationType": "multi-region",
                               "hierarchicalNamespace": ["enabled": hierarchical]])
        }
        guard hierarchical else {
            return .error(400, "The bucket does not have hierarchical namespace enabled.")
        }
        switch (what, method, segs.count) {
        case ("folders", "POST", 6): return insertFolder(q, body)
        case ("folders", "GET", 7): return getFolder(segs[6], q)
        case ("folders", "DELETE", 7): return deleteFolder(segs[6], q)
        case ("folders", "POST", 10) where segs[7] == "renameTo" && segs[8] == "folders":
            return renameFolder(segs[6], to: segs[9], q)
        case ("operations", "GET", 7): return pollOperation(segs[6])
        default: return .error(404, "no route for \(method) \(segs.joined(separator: "/"))")
        }
    }

    func folderResource(_ f: Folder) -> [String: Any] {
        ["kind": "storage#folder", "id": "\(bucket)/\(f.name)", "bucket": bucket, "name": f.name,
         "selfLink": "http://127.0.0.1:\(port)/storage/v1/b/\(bucket)/folders/\(f.name)",
         "createTime": RFC3339.format(f.createTime), "updateTime": RFC3339.format(f.updateTime),
         "metageneration": String(f.metageneration)]
    }

    static func validFolderName(_ name: String) -> Bool {
        name.hasSuffix("/") && name.count > 1 && !name.hasPrefix("/") && !name.contains("//")
    }

    /// On a hierarchical bucket, `name`'s folders come to exist (an upload under them makes them).
    func makeFolders(of name: String, at t: Date = Date()) {
        guard hierarchical else { return }
        for f in ancestorFolders(of: name) where folders[f] == nil {
            folders[f] = Folder(name: f, metageneration: 1, createTime: t, updateTime: t)
        }
    }

    /// A hierarchical bucket refuses an object named like a folder (400); nil when `name` is fine.
    func refuseFolderName(_ name: String) -> Response? {
        guard hierarchical, name.hasSuffix("/") else { return nil }
        return .error(400, "The object name '\(name)' is invalid: it cannot end in '/' in a bucket with hierarchical namespace enabled.")
    }

    /// A write under a folder whose rename is pending is refused (409); nil when nothing is renamed there.
    /// `enclosing`: also when `name` is a folder above a pending rename's (a rename of its parent).
    func refuseDuringRename(_ name: String, enclosing: Bool = false) -> Response? {
        func touches(_ folder: String) -> Bool { name.hasPrefix(folder) || (enclosing && folder.hasPrefix(name)) }
        guard let op = operations.values.first(where: { $0.outcome == nil && (touches($0.source) || touches($0.destination)) })
        else { return nil }
        return .error(409, "The folder \(op.source) is being renamed (operation \(op.id)); writes under it are refused until it is done.")
    }

    func insertFolder(_ q: [String: String], _ body: Data) -> Response {
        guard let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any], let name = j["name"] as? String else {
            return .error(400, "A folder name is required.")
        }
        guard Self.validFolderName(name) else { return .error(400, "The folder name '\(name)' is invalid.") }
        if let refused = refuseDuringRename(name) { return refused }
        if folders[name] != nil { return .error(409, "The folder you tried to create already exists.") }
        let parent = ancestorFolders(of: String(name.dropLast())).last
        if q["recursive"] != "true", let parent, folders[parent] == nil {
            return .error(404, "The parent folder \(parent) does not exist.")
        }
        makeFolders(of: name + "x")
        return .json(200, folderResource(folders[name]!))
    }

    func folderPreconditionsHold(_ q: [String: String], _ f: Folder) -> Bool {
        if let m = q["ifMetagenerationMatch"].flatMap({ Int64($0) }), f.metageneration != m { return false }
        if let m = q["ifMetagenerationNotMatch"].flatMap({ Int64($0) }), f.metageneration == m { return false }
        return true
    }

    func getFolder(_ name: String, _ q: [String: String]) -> Response {
        guard let f = folders[name] else { return .error(404, "The folder \(name) does not exist.") }
        guard folderPreconditionsHold(q, f) else { return .error(412, "Precondition Failed") }
        return .json(200, folderResource(f))
    }

    func deleteFolder(_ name: String, _ q: [String: String]) -> Response {
        guard let f = folders[name] else { return .error(404, "The folder \(name) does not exist.") }
        guard folderPreconditionsHold(q, f) else { return .error(412, "Precondition Failed") }
        if let refused = refuseDuringRename(name) { return refused }
        let holds = objects.keys.contains { $0.hasPrefix(name) } || folders.keys.contains { $0 != name && $0.hasPrefix(name) }
        if holds { return .error(notEmptyStatus, "The folder you tried to delete is not empty.") }
        folders[name] = nil
        return Response(status: 204)
    }

    func renameFolder(_ source: String, to destination: String, _ q: [String: String]) -> Response {
        guard Self.validFolderName(destination) else { return .error(400, "The folder name '\(destination)' is invalid.") }
        guard let f = folders[source] else { return .error(404, "The folder \(source) does not exist.") }
        guard folderPreconditionsHold(q, f) else { return .error(412, "Precondition Failed") }
        if destination.hasPrefix(source) { return .error(400, "A folder cannot be moved into itself.") }
        if let refused = refuseDuringRename(source, enclosing: true) ?? refuseDuringRename(destination, enclosing: true) { return refused }
        if folders[destination] != nil || objects.keys.contains(where: { $0.hasPrefix(destination) }) {
            return .error(409, "The destination folder \(destination) already exists.")
        }
        nextOperation += 1
        let id = "op-\(nextOperation)"
        let fault = nextRenameFault
        nextRenameFault = nil
        var op = PendingRename(id: id, source: source, destination: destination, pollsLeft: renamePolls, fault: fault,
                               created: Date())
        if op.pollsLeft <= 0 { finish(&op) }
        operations[id] = op
        return .json(200, operationResource(op))
    }

    /// operations.get: counts the poll; the rename is carried out when its polls are used up.
    func pollOperation(_ id: String) -> Response {
        if failPolls > 0 {
            failPolls -= 1
            return .error(503, "injected: backend unavailable")
        }
        guard var op = operations[id] else { return .error(404, "The operation \(id) does not exist.") }
        if op.outcome == nil {
            op.pollsLeft -= 1
            if op.pollsLeft <= 0 { finish(&op) }
            operations[id] = op
        }
        return .json(200, operationResource(op))
    }

    /// Ends a pending rename: its fault, or the rename itself, all at once.
    func finish(_ op: inout PendingRename) {
        switch op.fault {
        case .neverFinishes?:
            return
        case .fails(let code, let message)?:
            op.outcome = ["error": ["code": code, "message": message]]
            return
        case nil:
            break
        }
        let t = Date()
        makeFolders(of: String(op.destination.dropLast()), at: t)
        for name in folders.keys.filter({ $0.hasPrefix(op.source) }) {
            var f = folders.removeValue(forKey: name)!
            f.name = op.destination + name.dropFirst(op.source.count)
            f.updateTime = t
            folders[f.name] = f
        }
        for name in objects.keys.filter({ $0.hasPrefix(op.source) }) {
            var o = objects.removeValue(forKey: name)!
            o.name = op.destination + name.dropFirst(op.source.count)
            objects[o.name] = o
        }
        op.outcome = ["response": folderResource(folders[op.destination]!)]
    }

    func operationResource(_ op: PendingRename) -> [String: Any] {
        let time = RFC3339.format(op.created)
        var r: [String: Any] = [
            "kind": "storage#operation", "name": "projects/_/buckets/\(bucket)/operations/\(op.id)",
            "selfLink": "http://127.0.0.1:\(port)/storage/v1/b/\(bucket)/operations/\(op.id)",
            "done": op.outcome != nil,
            "metadata": [
                "@type": "type.googleapis.com/google.storage.control.v2.RenameFolderMetadata",
                "commonMetadata": ["createTime": time, "updateTime": time, "type": "rename-folder", "requestedCancellation": false],
                "sourceFolderId": op.source, "destinationFolderId": op.destination,
            ] as [String: Any],
        ]
        for (k, v) in op.outcome ?? [:] { r[k] = v }
        return r
    }

    // MARK: objects.move

    func move(_ src: String, to dst: String, _ q: [String: String]) -> Response {
        guard let s = objects[src] else { return .error(404, "No such object: \(bucket)/\(src)") }
        if let g = q["ifSourceGenerationMatch"].flatMap({ Int64($0) }), s.generation != g { return .error(412, "Precondition Failed") }
        if let g = q["ifSourceGenerationNotMatch"].flatMap({ Int64($0) }), s.generation == g { return .error(412, "Precondition Failed") }
        if let m = q["ifSourceMetagenerationMatch"].flatMap({ Int64($0) }), s.metageneration != m { return .error(412, "Precondition Failed") }
        if let m = q["ifSourceMetagenerationNotMatch"].flatMap({ Int64($0) }), s.metageneration == m { return .error(412, "Precondition Failed") }
        if src == dst { return .error(400, "The source and destination object names are the same.") }
        if let refused = refuseFolderName(dst) ?? refuseDuringRename(src) ?? refuseDuringRename(dst) { return refused }
        guard preconditionsHold(q, objects[dst]) else { return .error(412, "Precondition Failed") }
        let now = Date()
        let o = Object(name: dst, data: s.data, generation: newGeneration(), metageneration: 1, timeCreated: now, updated: now,
                       props: s.props, metadata: s.metadata, hashes: (s.md5, s.crc32c))
        retire(dst)
        makeFolders(of: dst, at: now)
        objects[dst] = o
        retire(src)
        return .json(200, resource(o))
    }
}
