import Foundation

extension GCSTestServer {
    func multipart(_ q: [String: String], _ hd: [String: String], _ body: Data) -> Response {
        guard let ct = hd["content-type"], ct.hasPrefix("multipart/related"),
              let b = ct.components(separatedBy: "boundary=").last?.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        else { return .error(400, "multipart/related with a boundary expected") }
        let parts = Self.multipartParts(body, boundary: b)
        guard parts.count == 2, let j = try? JSONSerialization.jsonObject(with: parts[0]) as? [String: Any],
              let name = (j["name"] as? String) ?? q["name"] else {
            return .error(400, "expected a JSON metadata part with a name and a media part")
        }
        if let refused = refuseFolderName(name) ?? refuseDuringRename(name) { return refused }
        guard preconditionsHold(q, objects[name]) else { return .error(412, "Precondition Failed") }
        let (props, meta) = Self.splitResource(j)
        return .json(200, resource(store(name: name, data: parts[1], props: props, metadata: meta)))
    }

    /// The bodies of `--boundary` parts (headers stripped).
    static func multipartParts(_ body: Data, boundary: String) -> [Data] {
        let delim = Data("--\(boundary)".utf8)
        var out: [Data] = []
        var cursor = body.startIndex
        var starts: [Range<Data.Index>] = []
        while let r = body.range(of: delim, in: cursor..<body.endIndex) {
            starts.append(r)
            cursor = r.upperBound
        }
        for (i, r) in starts.enumerated() where i + 1 < starts.count {
            var part = body.subdata(in: r.upperBound..<starts[i + 1].lowerBound)
            guard let sep = part.range(of: Data("\r\n\r\n".utf8)) else { continue }
            part = part.subdata(in: sep.upperBound..<part.endIndex)
            if part.suffix(2) == Data("\r\n".utf8) { part = part.dropLast(2) }
            out.append(Data(part))
        }
        return out
    }

    func startResumable(_ q: [String: String], _ hd: [String: String], _ body: Data) -> Response {
        let j = (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:]
        guard let name = (j["name"] as? String) ?? q["name"] else { return .error(400, "no object name") }
        if let refused = refuseFolderName(name) ?? refuseDuringRename(name) { return refused }
        var (props, meta) = Self.splitResource(j)
        if props["contentType"] == nil, let t = hd["x-upload-content-type"] { props["contentType"] = t }
        let id = UUID().uuidString
        sessions[id] = Session(name: name, props: props, metadata: meta, query: q)
        return Response(status: 200, headers: [
            ("Location", "http://127.0.0.1:\(port)/upload/storage/v1/b/\(bucket)/o?uploadType=resumable&upload_id=\(id)"),
        ])
    }

    func chunk(_ id: String, _ hd: [String: String], _ body: Data) -> Response {
        guard var s = sessions[id] else { return .error(404, "No such upload session") }
        if let done = s.finished { return .json(200, done) }
        guard let cr = hd["content-range"], cr.hasPrefix("bytes ") else { return .error(400, "Content-Range required") }
        let spec = cr.dropFirst(6).split(separator: "/", maxSplits: 1)
        guard spec.count == 2 else { return .error(400, "bad Content-Range \(cr)") }
        let total = Int(spec[1])
        if spec[0] != "*" {
            let ab = spec[0].split(separator: "-")
            guard ab.count == 2, let a = Int(ab[0]), let b = Int(ab[1]), b - a + 1 == body.count else {
                return .error(400, "Content-Range \(cr) does not match the body of \(body.count) bytes")
            }
            guard a <= s.data.count else { return .error(400, "chunk starts at \(a), but only \(s.data.count) bytes are persisted") }
            let skip = s.data.count - a
            if skip < body.count {
                // Out of the table while it grows: a copy left in it would make every append
                // copy the whole session (quadratic in the object's size).
                sessions[id] = nil
                s.append(skip == 0 ? body : Data(body.dropFirst(skip)))
            }
        }
        if let total, s.data.count == total || (spec[0] == "*" && finishWhenAsked) {
            if let refused = refuseDuringRename(s.name) {
                sessions[id] = s
                return refused
            }
            guard preconditionsHold(s.query, objects[s.name]) else {
                sessions[id] = nil
                return .error(412, "Precondition Failed")
            }
            let o = store(name: s.name, data: s.data, props: s.props, metadata: s.metadata, hashes: s.hashes)
            s.finished = resource(o)
            sessions[id] = s
            return .json(200, resource(o))
        }
        sessions[id] = s
        var headers: [(String, String)] = []
        if !s.data.isEmpty { headers.append(("Range", "bytes=0-\(s.data.count - 1)")) }
        return Response(status: 308, headers: headers)
    }
}
