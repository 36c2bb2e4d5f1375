import Crypto
import Foundation
import NIOHTTP1
import StorageModel
import TestSupport

extension GCSTestServer {
    // MARK: routing

    func handle(method: String, uri: String, headers: HTTPHeaders, body: Data) -> Response {
        lock.lock(); defer { lock.unlock() }
        var hd: [String: String] = [:]
        for (k, v) in headers { hd[k.lowercased()] = v }
        requests.append(Recorded(method: method, uri: uri, headers: hd, bodyBytes: body.count, body: body.prefix(64 << 10)))

        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let rawPath = DotSegments.remove(String(parts[0]))
        let q = Self.parseQuery(parts.count > 1 ? parts[1] : nil)
        let segs = rawPath.split(separator: "/", omittingEmptySubsequences: false).map { String($0).removingPercentEncoding ?? String($0) }

        if rawPath == "/token", method == "POST" { return token(body) }
        if rawPath == "/computeMetadata/v1/instance/service-accounts/default/token", method == "GET" {
            guard hd["metadata-flavor"] == "Google" else { return .error(403, "Missing Metadata-Flavor:Google header") }
            tokenCalls += 1
            let t = "test-access-token-\(tokenCalls)"
            validTokens[t] = Date().addingTimeInterval(TimeInterval(tokenLifetime))
            return .json(200, ["access_token": t, "expires_in": tokenLifetime, "token_type": "Bearer"])
        }

        if let s = alwaysStatus { return .error(s, s == 401 ? "Invalid Credentials" : "injected HTTP \(s)") }
        if retryAfterNext > 0 {
            retryAfterNext -= 1
            var r = Response.error(429, "injected: slow down")
            r.headers.append(("Retry-After", retryAfterValue))
            return r
        }
        if failNext > 0 {
            failNext -= 1
            return .error(503, "injected: backend unavailable")
        }
        if requireToken {
            let auth = hd["authorization"] ?? ""
            let tok = auth.hasPrefix("Bearer ") ? String(auth.dropFirst(7)) : ""
            guard let exp = validTokens[tok], exp > Date() else { return .error(401, "Invalid Credentials") }
        }

        if segs.count == 5, segs[1] == "storage", segs[2] == "v1", segs[3] == "b", method == "GET" {
            guard segs[4] == bucket else { return .error(404, "The specified bucket does not exist.") }
            var r: [String: Any] = ["kind": "storage#bucket", "name": bucket, "versioning": ["enabled": versioning]]
            if let d = softDeleteRetention { r["softDeletePolicy"] = ["retentionDurationSeconds": String(d)] }
            return .json(200, r)
        }
        if let r = hnsRoute(method: method, segs: segs, q: q, body: body) { return r }
        // ["", "storage", "v1", "b", B, "o", ...] and ["", "upload", "storage", "v1", "b", B, "o"]
        if segs.count >= 6, segs[1] == "storage", segs[2] == "v1", segs[3] == "b", segs[5] == "o" {
            guard segs[4] == bucket else { return .error(404, "The specified bucket does not exist.") }
            switch (method, segs.count) {
            case ("GET", 6): return q["versions"] == "true" ? listVersions(q) : list(q)
            case ("GET", 7): return q["alt"] == "media" ? media(segs[6], q, hd) : get(segs[6], q)
            case ("PATCH", 7): return refuseDuringRename(segs[6]) ?? patch(segs[6], q, body)
            case ("DELETE", 7): return refuseDuringRename(segs[6]) ?? delete(segs[6], q)
            case ("POST", 10) where moves && segs[7] == "moveTo" && segs[8] == "o":
                return move(segs[6], to: segs[9], q)
            case ("POST", 12) where segs[7] == "rewriteTo" && segs[8] == "b" && segs[10] == "o":
                guard segs[9] == bucket else { return .error(404, "no such destination bucket") }
                return refuseFolderName(segs[11]) ?? refuseDuringRename(segs[11]) ?? rewrite(segs[6], to: segs[11], q, body)
            default: return .error(404, "no route for \(method) \(rawPath)")
            }
        }
        if segs.count == 7, segs[1] == "upload", segs[2] == "storage", segs[3] == "v1", segs[4] == "b", segs[6] == "o" {
            guard segs[5] == bucket else { return .error(404, "The specified bucket does not exist.") }
            if method == "POST", q["uploadType"] == "multipart" { return multipart(q, hd, body) }
            if method == "POST", q["uploadType"] == "resumable", q["upload_id"] == nil { return startResumable(q, hd, body) }
            if method == "PUT", let id = q["upload_id"] { return chunk(id, hd, body) }
            return .error(400, "unsupported upload")
        }
        return .error(404, "no route for \(method) \(rawPath)")
    }

    func token(_ body: Data) -> Response {
        let form = Self.parseQuery(Substring(String(decoding: body, as: UTF8.self)))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"] else {
            return .json(400, ["error": "unsupported_grant_type", "error_description": "expected the jwt-bearer grant"])
        }
        let p = assertion.split(separator: ".", omittingEmptySubsequences: false)
        func b64(_ s: Substring) -> Data? {
            var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while t.count % 4 != 0 { t += "=" }
            return Data(base64Encoded: t)
        }
        guard p.count == 3, let h = b64(p[0]).flatMap({ try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }),
              let c = b64(p[1]).flatMap({ try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }),
              h["alg"] as? String == "RS256", c["iss"] is String, (c["aud"] as? String)?.hasSuffix("/token") == true,
              c["scope"] is String, let exp = c["exp"] as? Int, exp > Int(Date().timeIntervalSince1970),
              verifyAssertion?(assertion) ?? true
        else { return .json(400, ["error": "invalid_grant", "error_description": "Invalid JWT Signature."]) }
        tokenCalls += 1
        let t = "test-access-token-\(tokenCalls)"
        validTokens[t] = Date().addingTimeInterval(TimeInterval(tokenLifetime))
        return .json(200, ["access_token": t, "expires_in": tokenLifetime, "token_type": "Bearer"])
    }

    func list(_ q: [String: String]) -> Response {
        let prefix = q["prefix"] ?? ""
        let delimiter = q["delimiter"].flatMap { $0.isEmpty ? nil : $0 }
        let maxResults = min(max(Int(q["maxResults"] ?? "") ?? 1000, 1), 1000)
        // The token names the last entry returned: "P<prefix>" or "I<item name>".
        let token = q["pageToken"].flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) }
        let after = token.map { String($0.dropFirst()) }
        let afterPrefix = token?.hasPrefix("P") == true
        // startOffset (inclusive) and endOffset (exclusive) bound the objects, before they roll
        // up into prefixes; a prefix before startOffset is left out (as fake-gcs-server does).
        let start = q["startOffset"], end = q["endOffset"]
        // includeFoldersAsPrefixes (with delimiter "/" only): a hierarchical bucket's folders,
        // empty ones too, roll up into prefixes like the objects under them.
        let folderKeys = hierarchical && delimiter == "/" && q["includeFoldersAsPrefixes"] == "true"
            ? folders.keys.filter { $0 != prefix } : []
        let names = (Array(objects.keys) + folderKeys).filter { n in
            n.hasPrefix(prefix) && start.map { s in !n.utf8.lexicographicallyPrecedes(s.utf8) } ?? true
                && end.map { e in n.utf8.lexicographicallyPrecedes(e.utf8) } ?? true
        }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var items: [[String: Any]] = []
        var prefixes: [String] = []
        var last: String?
        var more = false
        for n in names {
            if let after {
                if !after.utf8.lexicographicallyPrecedes(n.utf8) { continue }  // n <= after
                if afterPrefix, n.hasPrefix(after) { continue }  // inside a returned prefix
            }
            var entryPrefix: String?
            if let d = delimiter, let r = n.dropFirst(prefix.count).range(of: d) {
                entryPrefix = String(n[..<r.upperBound])
            }
            if let p = entryPrefix, prefixes.last == p { continue }
            if let p = entryPrefix, let start, p.utf8.lexicographicallyPrecedes(start.utf8) { continue }
            if items.count + prefixes.count == maxResults { more = true; break }
            if let p = entryPrefix {
                prefixes.append(p)
                last = "P" + p
                // includeTrailingDelimiter: an object named exactly like the prefix (it sorts
                // first under it) comes as an item too.
                if q["includeTrailingDelimiter"] == "true", n == p, let o = objects[n] { items.append(resource(o)) }
            } else {
                items.append(resource(objects[n]!))
                last = "I" + n
            }
        }
        var r: [String: Any] = ["kind": "storage#objects"]
        if !items.isEmpty { r["items"] = items }
        if !prefixes.isEmpty { r["prefixes"] = prefixes }
        if more, let last { r["nextPageToken"] = Data(last.utf8).base64EncodedString() }
        return .json(200, r)
    }

    /// `objects.list` with `versions=true`: every generation, by name then generation, counted
    /// one entry each with the prefixes; the token names the last entry ("P<prefix>" or
    /// "V<generation>:<name>").
    func listVersions(_ q: [String: String]) -> Response {
        let prefix = q["prefix"] ?? ""
        let delimiter = q["delimiter"].flatMap { $0.isEmpty ? nil : $0 }
        let maxResults = min(max(Int(q["maxResults"] ?? "") ?? 1000, 1), 1000)
        var entries: [(key: String, generation: Int64?, item: [String: Any]?)] = []
        let names = Set(objects.keys).union(noncurrent.keys).filter { $0.hasPrefix(prefix) }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for n in names {
            if let d = delimiter, let r = n.dropFirst(prefix.count).range(of: d) {
                let p = String(n[..<r.upperBound])
                if entries.last?.key != p || entries.last?.generation != nil { entries.append((p, nil, nil)) }
                continue
            }
            var versions = (noncurrent[n] ?? []).map { ($0.object.generation, resource($0.object, deleted: $0.deleted)) }
            if let o = objects[n] { versions.append((o.generation, resource(o))) }
            for (g, r) in versions.sorted(by: { $0.0 < $1.0 }) { entries.append((key: n, generation: Optional(g), item: Optional(r))) }
        }
        var start = 0
        if let t = q["pageToken"].flatMap({ Data(base64Encoded: $0) }).map({ String(decoding: $0, as: UTF8.self) }) {
            let afterPrefix = t.hasPrefix("P")
            var key = String(t.dropFirst())
            var generation = Int64.min
            if !afterPrefix, let colon = t.firstIndex(of: ":") {
                key = String(t[t.index(after: colon)...])
                generation = Int64(t[t.index(after: t.startIndex)..<colon]) ?? Int64.min
            }
            start = entries.firstIndex { e in
                if afterPrefix { return e.key.utf8.lexicographicallyPrecedes(key.utf8) == false && !e.key.hasPrefix(key) }
                if e.key == key { return (e.generation ?? Int64.min) > generation }
                return key.utf8.lexicographicallyPrecedes(e.key.utf8)
            } ?? entries.count
        }
        let end = min(entries.count, start + maxResults)
        var items: [[String: Any]] = []
        var prefixes: [String] = []
        for e in entries[start..<end] {
            if let item = e.item { items.append(item) } else { prefixes.append(e.key) }
        }
        var r: [String: Any] = ["kind": "storage#objects"]
        if !items.isEmpty { r["items"] = items }
        if !prefixes.isEmpty { r["prefixes"] = prefixes }
        if end < entries.count {
            let last = entries[end - 1]
            let text = last.generation.map { "V\($0):\(last.key)" } ?? "P\(last.key)"
            r["nextPageToken"] = Data(text.utf8).base64EncodedString()
        }
        return .json(200, r)
    }

    func get(_ name: String, _ q: [String: String]) -> Response {
        guard let o = object(name, q) else {
            return .error(404, "No such object: \(bucket)/\(name)")
        }
        guard preconditionsHold(q, objects[name]) else { return .error(412, "Precondition Failed") }
        return .json(200, resource(o))
    }

    func media(_ name: String, _ q: [String: String], _ hd: [String: String]) -> Response {
        guard let o = object(name, q) else {
            return .error(404, "No such object: \(bucket)/\(name)")
        }
        let size = o.data.count
        var headers = [("Content-Type", o.props["contentType"] ?? "application/octet-stream"),
                       ("x-goog-generation", String(o.generation)),
                       // As Cloud Storage does: the whole object's size and checksums.
                       ("x-goog-stored-content-length", String(o.data.count)),
                       ("x-goog-hash", "crc32c=\(o.crc32c)"),
                       ("x-goog-hash", "md5=\(Data(Insecure.MD5.hash(data: o.data)).base64EncodedString())")]
        guard let range = hd["range"] else { return Response(status: 200, headers: headers, body: o.data) }
        // bytes=a-b | bytes=a-
        let spec = range.replacingOccurrences(of: "bytes=", with: "").split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2, let a = Int(spec[0]) else { return Response(status: 200, headers: headers, body: o.data) }
        if a >= size {
            return Response(status: 416, headers: [("Content-Range", "bytes */\(size)")],
                            body: Data("The requested range cannot be satisfied.".utf8))
        }
        let b = min(Int(spec[1]) ?? (size - 1), size - 1)
        if rangeAnswerTimes > 0, let answer = rangeAnswer {
            rangeAnswerTimes -= 1
            switch answer {
            case .wholeObject: return Response(status: 200, headers: headers, body: o.data)
            case .rangeUnder200:
                headers.append(("Content-Range", "bytes \(a)-\(b)/\(size)"))
                return Response(status: 200, headers: headers, body: o.data.subdata(in: a..<(b + 1)))
            }
        }
        headers.append(("Content-Range", "bytes \(a)-\(b)/\(size)"))
        return Response(status: 206, headers: headers, body: o.data.subdata(in: a..<(b + 1)))
    }

    func patch(_ name: String, _ q: [String: String], _ body: Data) -> Response {
        guard var o = objects[name] else { return .error(404, "No such object: \(bucket)/\(name)") }
        guard preconditionsHold(q, o) else { return .error(412, "Precondition Failed") }
        guard let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            return .error(400, "Invalid JSON payload")
        }
        for k in Self.writableProps {
            switch j[k] {
            case nil: break
            case is NSNull: o.props[k] = nil
            case let s as String: o.props[k] = s
            default: return .error(400, "Invalid value for \(k)")
            }
        }
        switch j["metadata"] {
        case nil: break
        case is NSNull: o.metadata = [:]
        case let m as [String: Any]:
            for (k, v) in m {
                if v is NSNull { o.metadata[k] = nil } else if let s = v as? String { o.metadata[k] = s } else {
                    return .error(400, "Invalid metadata value for \(k)")
                }
            }
        default: return .error(400, "Invalid metadata")
        }
        o.metageneration += 1
        o.updated = Date()
        objects[name] = o
        return .json(200, resource(o))
    }

    func delete(_ name: String, _ q: [String: String]) -> Response {
        guard let o = objects[name] else { return .error(404, "No such object: \(bucket)/\(name)") }
        guard preconditionsHold(q, o) else { return .error(412, "Precondition Failed") }
        retire(name)
        return Response(status: 204)
    }

    func rewrite(_ src: String, to dst: String, _ q: [String: String], _ body: Data) -> Response {
        guard let s = object(src, q, key: "sourceGeneration") else {
            return .error(404, "No such object: \(bucket)/\(src)")
        }
        guard preconditionsHold(q, objects[dst]) else { return .error(412, "Precondition Failed") }
        let round = Int(q["rewriteToken"]?.replacingOccurrences(of: "rt-", with: "") ?? "0") ?? 0
        let size = String(s.data.count)
        if round + 1 < rewriteRounds {
            let done = String(s.data.count * (round + 1) / rewriteRounds)
            return .json(200, ["kind": "storage#rewriteResponse", "totalBytesRewritten": done, "objectSize": size,
                               "done": false, "rewriteToken": "rt-\(round + 1)"])
        }
        var props = s.props, meta = s.metadata
        if !body.isEmpty, let j = try? JSONSerialization.jsonObject(with: body) as? [String: Any], !j.isEmpty {
            (props, meta) = Self.splitResource(j)
        }
        let o = store(name: dst, data: s.data, props: props, metadata: meta)
        return .json(200, ["kind": "storage#rewriteResponse", "totalBytesRewritten": size, "objectSize": size,
                           "done": true, "resource": resource(o)])
    }

}
