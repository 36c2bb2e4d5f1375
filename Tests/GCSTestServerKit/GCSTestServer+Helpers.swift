import Crypto
import Foundation
import StorageModel

extension GCSTestServer {
    // MARK: helpers

    struct Response {
        var status: Int
        var headers: [(String, String)] = []
        var body = Data()

        static func json(_ status: Int, _ o: Any) -> Response {
            let d = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data()
            return Response(status: status, headers: [("Content-Type", "application/json; charset=UTF-8")], body: d)
        }

        static func error(_ status: Int, _ message: String) -> Response {
            json(status, ["error": ["code": status, "message": message, "errors": [["message": message]]]])
        }
    }

    static func parseQuery(_ q: Substring?) -> [String: String] {
        var out: [String: String] = [:]
        for part in (q ?? "").split(separator: "&") {
            let kv = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let k = String(kv[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(kv[0])
            let v = kv.count > 1 ? (String(kv[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "") : ""
            out[k] = v
        }
        return out
    }

    func newGeneration() -> Int64 {
        nextGeneration += 1
        return nextGeneration
    }

    func resource(_ o: Object, deleted: Date? = nil) -> [String: Any] {
        var r: [String: Any] = [
            "kind": "storage#object", "id": "\(bucket)/\(o.name)/\(o.generation)", "bucket": bucket, "name": o.name,
            "generation": String(o.generation), "metageneration": String(o.metageneration),
            "size": String(o.data.count), "timeCreated": RFC3339.format(o.timeCreated), "updated": RFC3339.format(o.updated),
            "md5Hash": o.md5,
            "crc32c": o.crc32c,
        ]
        for (k, v) in o.props { r[k] = v }
        if !o.metadata.isEmpty { r["metadata"] = o.metadata }
        if let deleted { r["timeDeleted"] = RFC3339.format(deleted) }
        return r
    }

    /// The live object stops being live now: kept as noncurrent when versioning is on.
    func retire(_ name: String) {
        guard let old = objects.removeValue(forKey: name) else { return }
        if versioning { noncurrent[name, default: []].append((old, Date())) }
    }

    /// The live object (no `generation` parameter), or that generation, live or kept.
    func object(_ name: String, _ q: [String: String], key: String = "generation") -> Object? {
        guard let g = q[key].map({ Int64($0) ?? -1 }) else { return objects[name] }
        if let o = objects[name], o.generation == g { return o }
        return noncurrent[name]?.first { $0.object.generation == g }?.object
    }

    /// The documented precondition parameters against the live object.
    func preconditionsHold(_ q: [String: String], _ cur: Object?) -> Bool {
        if let g = q["ifGenerationMatch"].flatMap({ Int64($0) }) {
            if g == 0 { if cur != nil { return false } } else if cur?.generation != g { return false }
        }
        if let g = q["ifGenerationNotMatch"].flatMap({ Int64($0) }), let c = cur, c.generation == g { return false }
        if let m = q["ifMetagenerationMatch"].flatMap({ Int64($0) }), cur?.metageneration != m { return false }
        if let m = q["ifMetagenerationNotMatch"].flatMap({ Int64($0) }), let c = cur, c.metageneration == m { return false }
        return true
    }

    /// `hashes`: those of `data` taken as it came (a resumable session's).
    func store(name: String, data: Data, props: [String: String], metadata: [String: String],
               hashes: (md5: String, crc32c: String)? = nil) -> Object {
        var data = data
        var hashes = hashes
        if corruptNextUploads > 0, !data.isEmpty {
            corruptNextUploads -= 1
            data[data.startIndex] ^= 0xFF
            hashes = nil  // the server's hashes are of what it keeps
        }
        let now = Date()
        let o = Object(name: name, data: data, generation: newGeneration(), metageneration: 1, timeCreated: now,
                       updated: now, props: props, metadata: metadata, hashes: hashes)
        retire(name)
        makeFolders(of: name, at: now)
        objects[name] = o
        return o
    }

    static func splitResource(_ j: [String: Any]) -> ([String: String], [String: String]) {
        var props: [String: String] = [:]
        for k in writableProps { if let v = j[k] as? String { props[k] = v } }
        var meta: [String: String] = [:]
        for (k, v) in (j["metadata"] as? [String: Any]) ?? [:] { if let s = v as? String { meta[k] = s } }
        return (props, meta)
    }

}
