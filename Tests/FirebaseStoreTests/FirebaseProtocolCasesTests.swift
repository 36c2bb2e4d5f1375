import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Every case of Tests/FirebaseProtocol/cases.json played against `FirebaseTestServer`, once per
/// flavour the case names, each on a fresh server. The same file is played against
/// Tests/e2e/firebase_server.py by Tests/e2e/test_firebase_protocol_cases.py, so the two fakes
/// serve one protocol; the format is described at the top of cases.json.
@Suite struct FirebaseProtocolCasesTests {
    static let runner = "swift"

    /// Cases FirebaseTestServer fails today, each a disagreement with the protocol the server is to
    /// be fixed for (a known issue that stops happening fails the run: it must leave this list).
    static let knownDisagreements: [String: String] = [:]

    struct Run: Sendable, CustomTestStringConvertible {
        var id: String
        var flavour: String
        var testDescription: String { "\(id)[\(flavour)]" }
    }

    static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("FirebaseProtocol/cases.json")

    static func loadSpec() throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any] ?? [:]
    }

    static var cases: [[String: Any]] { ((try? loadSpec())?["cases"] as? [[String: Any]]) ?? [] }

    /// The runs for this server: every case not marked for the other server only, per flavour.
    static let runs: [Run] = cases.filter { ($0["only"] as? String ?? runner) == runner }.flatMap { c in
        ((c["flavours"] as? [String]) ?? ["emulator", "production"]).map { Run(id: c["id"] as? String ?? "?", flavour: $0) }
    }

    @Test func theCasesLoadAndTheOtherServersOnlyAreNamed() throws {
        let spec = try Self.loadSpec()
        let all = try #require(spec["cases"] as? [[String: Any]])
        #expect(all.count > 0 && Self.runs.count > 0, "no cases in \(Self.file.path)")
        for c in all where (c["only"] as? String).map({ $0 != Self.runner }) == true {
            let why = c["why"] as? String ?? ""
            #expect(!why.isEmpty, "\(c["id"] ?? "?") is for one server only and says no why")
            print("FirebaseProtocolCases: not for this server: \(c["id"] ?? "?") (only \(c["only"] ?? "?")): \(why)")
        }
    }

    @Test(arguments: runs)
    func protocolCase(_ run: Run) async throws {
        let spec = try Self.loadSpec()
        let c = try #require((spec["cases"] as? [[String: Any]])?.first { $0["id"] as? String == run.id })
        let server = try await Self.start(spec: spec, case: c, flavour: run.flavour)
        let play = {
            var player = CasePlayer(spec: spec, case: c, flavour: run.flavour, server: server)
            do {
                try await player.play()
            } catch let f as CaseFailure {
                Issue.record(Comment(rawValue: f.message))
            } catch {
                Issue.record(error)
            }
        }
        if let why = Self.knownDisagreements[run.testDescription] {
            await withKnownIssue(Comment(rawValue: why)) { await play() }
        } else {
            await play()
        }
        try await server.stop()
    }

    /// A fresh server in the case's state, set through the server's own hooks.
    static func start(spec: [String: Any], case c: [String: Any], flavour: String) async throws -> FirebaseTestServer {
        let given = c["given"] as? [String: Any] ?? [:]
        var rules: TestRules?
        if let name = given["rules"] as? String {
            let rs = try #require((spec["rulesets"] as? [String: Any])?[name] as? [String: Any], "no ruleset \(name)")
            rules = try testRules(rs)
        }
        let server = try await FirebaseTestServer.start(flavour: flavour == "production" ? .production : .emulator, rules: rules)
        for u in spec["users"] as? [[String: Any]] ?? [] {
            _ = server.addUser(email: u["email"] as! String, password: u["password"] as! String, uid: u["uid"] as? String)
        }
        for o in given["objects"] as? [[String: Any]] ?? [] {
            var props: [String: String] = [:]
            if let ct = o["contentType"] as? String { props["contentType"] = ct }
            server.seed(o["name"] as! String, Data((o["text"] as! String).utf8), props: props,
                        metadata: o["metadata"] as? [String: String] ?? [:])
        }
        return server
    }

    /// The rulesets of cases.json (`{"version", "rules": [{"match", "allow": {"read,write": "owner"}}]}`)
    /// as `TestRules`: conditions `true`, `auth`, `owner` (auth.uid equals the match's `{uid}`).
    static func testRules(_ rs: [String: Any]) throws -> TestRules {
        var out: [TestRules.Rule] = []
        for r in rs["rules"] as? [[String: Any]] ?? [] {
            for (methods, cond) in r["allow"] as? [String: String] ?? [:] {
                var ops: Set<TestRules.Op> = []
                for m in methods.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                    switch m {
                    case "read": ops.formUnion(TestRules.Op.read)
                    case "write": ops.formUnion(TestRules.Op.write)
                    default: ops.insert(try #require(TestRules.Op(rawValue: m), "rules method \(m)"))
                    }
                }
                let when: TestRules.Condition
                switch cond {
                case "true": when = .always
                case "auth": when = .signedIn
                case "owner": when = .ownerIs("uid")
                default: throw CaseFailure(message: "FirebaseTestServer's rules have no condition \(cond)")
                }
                out.append(TestRules.Rule(path: r["match"] as! String, allow: ops, when: when))
            }
        }
        return TestRules(version: rs["version"] as? Int ?? 2, out)
    }
}

struct CaseFailure: Error { var message: String }

/// Plays one case's steps: requests over a plain socket, answers checked as cases.json describes.
struct CasePlayer {
    let spec: [String: Any]
    let c: [String: Any]
    let flavour: String
    let server: FirebaseTestServer
    var env: [String: String] = [:]

    init(spec: [String: Any], case c: [String: Any], flavour: String, server: FirebaseTestServer) {
        self.spec = spec
        self.c = c
        self.flavour = flavour
        self.server = server
    }

    var users: [[String: Any]] { spec["users"] as? [[String: Any]] ?? [] }

    func uid(of user: String) throws -> String {
        guard let u = users.first(where: { $0["name"] as? String == user }), let uid = u["uid"] as? String else {
            throw CaseFailure(message: "no user \(user)")
        }
        return uid
    }

    mutating func play() async throws {
        let given = c["given"] as? [String: Any] ?? [:]
        for uid in given["customTokens"] as? [String] ?? [] {
            // The Auth emulator's custom token may be plain JSON; this server takes that form.
            env["\(uid).customToken"] = #"{"uid":"\#(uid)"}"#
        }
        for u in users {
            let name = u["name"] as! String
            let a = try await send([
                "method": "POST", "path": "/identitytoolkit.googleapis.com/v1/accounts:signInWithPassword?key=test-key",
                "json": ["email": u["email"]!, "password": u["password"]!, "returnSecureToken": true],
            ])
            let j = try JSONSerialization.jsonObject(with: a.body) as? [String: Any]
            guard a.status == 200, let id = j?["idToken"] as? String, let refresh = j?["refreshToken"] as? String else {
                throw CaseFailure(message: "\(c["id"] ?? "?"): signing in \(name): \(a.status) \(String(decoding: a.body, as: UTF8.self))")
            }
            env["\(name).idToken"] = id
            env["\(name).refreshToken"] = refresh
            env["\(name).uid"] = u["uid"] as? String
        }
        for (i, s) in (c["steps"] as? [[String: Any]] ?? []).enumerated() {
            let where_ = "\(c["id"] ?? "?")[\(flavour)] step \(i)" + ((s["about"] as? String).map { " (\($0))" } ?? "")
            if let hook = s["admin"] as? String {
                switch hook {
                case "expireIDTokens": server.expireIDTokens()
                case "revokeRefreshTokens": server.revokeRefreshTokens(uid: try uid(of: s["user"] as? String ?? ""))
                case "disableUser": server.disable(uid: try uid(of: s["user"] as? String ?? ""))
                case "quotaNext": server.configure { $0.quotaNext = s["count"] as? Int ?? 1 }
                default: throw CaseFailure(message: "\(where_): FirebaseTestServer has no admin hook \(hook)")
                }
                continue
            }
            let r = s["request"] as? [String: Any] ?? [:]
            do {
                let a = try await send(r)
                let j = try check(expectation(s), a)
                for (name, src) in s["save"] as? [String: String] ?? [:] {
                    let parts = src.split(separator: ":", maxSplits: 1).map(String.init)
                    let v = parts[0] == "json" ? (j as? [String: Any])?[parts[1]] as? String : a.headers[parts[1].lowercased()]
                    guard let v else { throw CaseFailure(message: "nothing to save as \(name) from \(src)") }
                    env[name] = v
                }
            } catch let f as CaseFailure {
                throw CaseFailure(message: "\(where_): \(r["method"] ?? "") \(r["path"] ?? ""): \(f.message)")
            }
        }
    }

    // MARK: values

    func substitute(_ s: String) throws -> String {
        var out = ""
        var rest = Substring(s)
        while let open = rest.range(of: "{{"), let close = rest[open.upperBound...].range(of: "}}") {
            out += rest[..<open.lowerBound]
            let key = String(rest[open.upperBound..<close.lowerBound])
            rest = rest[close.upperBound...]
            if key.hasPrefix("repeat:") {
                let p = key.split(separator: ":")
                out += String(repeating: String(p[1]), count: Int(p[2]) ?? 0)
                continue
            }
            let parts = key.split(separator: "|").map(String.init)
            guard let v = env[parts[0]] else { throw CaseFailure(message: "no variable \(parts[0]) saved") }
            out += parts.count > 1 && parts[1] == "url" ? Self.percentEncoded(v) : v
        }
        return out + rest
    }

    static func percentEncoded(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")) ?? s
    }

    func deepSubstitute(_ v: Any) throws -> Any {
        switch v {
        case let s as String: return try substitute(s)
        case let d as [String: Any]: return try d.mapValues { try deepSubstitute($0) }
        case let a as [Any]: return try a.map { try deepSubstitute($0) }
        default: return v
        }
    }

    static func regexMatches(_ pattern: String, _ s: String) -> Bool {
        guard let re = try? NSRegularExpression(pattern: "^(?:\(pattern))$", options: [.dotMatchesLineSeparators]) else { return false }
        return re.firstMatch(in: s, range: NSRange(s.startIndex..., in: s)) != nil
    }

    /// Throws when `actual` does not match `expected` ("values" in cases.json).
    func match(_ expected: Any, _ actual: Any?, _ at: String) throws {
        let got = actual.map { "\($0)" } ?? "nothing"
        switch expected {
        case let e as String:
            if e == "<any>" { return }
            guard let a = actual as? String else { throw CaseFailure(message: "\(at): expected a string \(e), got \(got)") }
            let ok: Bool
            switch e {
            case "<nonempty>": ok = !a.isEmpty
            case "<digits>": ok = Self.regexMatches("[0-9]+", a)
            case "<rfc3339ms>": ok = Self.regexMatches(#"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"#, a)
            default:
                ok = e.hasPrefix("<re:") && e.hasSuffix(">") ? Self.regexMatches(String(e.dropFirst(4).dropLast()), a) : a == e
            }
            if !ok { throw CaseFailure(message: "\(at): expected \(e), got \(a)") }
        case let e as [String: Any]:
            guard let a = actual as? [String: Any] else { throw CaseFailure(message: "\(at): expected an object, got \(got)") }
            let want = Set(e.filter { ($0.value as? String) != "<absent>" }.keys)
            guard Set(a.keys) == want else {
                throw CaseFailure(message: "\(at): expected the keys \(want.sorted()), got \(a.keys.sorted()) in \(a)")
            }
            for k in want { try match(e[k]!, a[k], "\(at).\(k)") }
        case let e as [Any]:
            guard let a = actual as? [Any], a.count == e.count else { throw CaseFailure(message: "\(at): expected \(e), got \(got)") }
            for (i, x) in e.enumerated() { try match(x, a[i], "\(at)[\(i)]") }
        case let e as NSNumber:
            guard let a = actual as? NSNumber, a == e, !(actual is String) else { throw CaseFailure(message: "\(at): expected \(e), got \(got)") }
        case is NSNull:
            guard actual is NSNull else { throw CaseFailure(message: "\(at): expected null, got \(got)") }
        default:
            throw CaseFailure(message: "\(at): cannot compare \(expected)")
        }
    }

    func expectation(_ step: [String: Any]) -> [String: Any] {
        var e = step["expect"] as? [String: Any] ?? [:]
        let more = (e.removeValue(forKey: "byFlavour") as? [String: Any])?[flavour] as? [String: Any] ?? [:]
        for (k, v) in more {
            if ["jsonHas", "headers"].contains(k), let old = e[k] as? [String: Any], let new = v as? [String: Any] {
                e[k] = old.merging(new) { $1 }
            } else {
                e[k] = v
            }
        }
        return e
    }

    func check(_ e: [String: Any], _ a: Answer) throws -> Any? {
        let bodyText = String(decoding: a.body.prefix(300), as: UTF8.self)
        guard a.status == e["status"] as? Int else {
            throw CaseFailure(message: "status \(a.status), expected \(e["status"] ?? "?"); body \(bodyText)")
        }
        for (k, v) in e["headers"] as? [String: String] ?? [:] {
            let v = try substitute(v)
            let h = a.headers[k.lowercased()]
            if v == "<absent>" {
                if let h { throw CaseFailure(message: "header \(k) should be absent, is \(h)") }
            } else if h == nil {
                throw CaseFailure(message: "no header \(k) in \(a.headers)")
            } else {
                try match(v, h, "header \(k)")
            }
        }
        if let t = e["text"] as? String, String(decoding: a.body, as: UTF8.self) != (try substitute(t)) {
            throw CaseFailure(message: "body \(bodyText), expected \(t.prefix(300))")
        }
        guard e["json"] != nil || e["jsonHas"] != nil else { return nil }
        guard let j = try? JSONSerialization.jsonObject(with: a.body, options: [.fragmentsAllowed]) else {
            throw CaseFailure(message: "body is not JSON: \(bodyText)")
        }
        if let whole = e["json"] { try match(deepSubstitute(whole), j, "json") }
        for (k, v) in (try deepSubstitute(e["jsonHas"] ?? [String: Any]()) as? [String: Any]) ?? [:] {
            let a = (j as? [String: Any])?[k]
            if (v as? String) == "<absent>" {
                if let a { throw CaseFailure(message: "json.\(k) should be absent, is \(a)") }
            } else if a == nil {
                throw CaseFailure(message: "no json.\(k) in \(j)")
            } else {
                try match(v, a, "json.\(k)")
            }
        }
        return j
    }

    // MARK: requests

    struct Answer {
        var status: Int
        var headers: [String: String]
        var body: Data
    }

    func send(_ r: [String: Any]) async throws -> Answer {
        let method = r["method"] as? String ?? "GET"
        var target = try substitute(r["path"] as? String ?? "/")
        if target.hasPrefix("http://") {
            // A saved upload URL (this server's own address): its path and query as they came.
            target = String(target.dropFirst("http://".count).drop { $0 != "/" })
        }
        var headers: [(String, String)] = try (r["headers"] as? [String: String] ?? [:]).map { ($0.key, try substitute($0.value)) }
        if let user = r["as"] as? String {
            headers.append(("Authorization", "Firebase " + (env["\(user).idToken"] ?? "")))
        }
        func setDefault(_ name: String, _ value: String) {
            if !headers.contains(where: { $0.0.lowercased() == name.lowercased() }) { headers.append((name, value)) }
        }
        var body = Data()
        if let j = r["json"] {
            body = try JSONSerialization.data(withJSONObject: deepSubstitute(j), options: [.sortedKeys])
            setDefault("Content-Type", "application/json; charset=utf-8")
        } else if let t = r["text"] as? String {
            body = Data(try substitute(t).utf8)
        } else if let f = r["form"] as? [String: String] {
            body = Data(try f.sorted { $0.key < $1.key }.map { "\(Self.percentEncoded($0.key))=\(Self.percentEncoded(try substitute($0.value)))" }
                .joined(separator: "&").utf8)
            setDefault("Content-Type", "application/x-www-form-urlencoded")
        } else if let f = r["fill"] as? [String: Any] {
            body = Data(String(repeating: f["byte"] as? String ?? "x", count: f["count"] as? Int ?? 0).utf8)
        } else if let m = r["multipart"] as? [String: Any] {
            let b = "bucketfs-cases-boundary"
            let meta = try JSONSerialization.data(withJSONObject: deepSubstitute(m["meta"] ?? [String: Any]()), options: [.sortedKeys])
            body = Data("--\(b)\r\nContent-Type: application/json; charset=utf-8\r\n\r\n".utf8) + meta
                + Data("\r\n--\(b)\r\nContent-Type: \(m["contentType"] as? String ?? "")\r\n\r\n\(try substitute(m["text"] as? String ?? ""))\r\n--\(b)--".utf8)
            headers.append(("X-Goog-Upload-Protocol", "multipart"))
            headers.append(("Content-Type", "multipart/related; boundary=\(b)"))
        }
        let port = server.port
        let (m, t, h, bd) = (method, target, headers, body)
        return try await withCheckedThrowingContinuation { k in
            DispatchQueue.global().async {
                k.resume(with: Result { try Self.exchange(port: port, method: m, target: t, headers: h, body: bd) })
            }
        }
    }

    /// One HTTP/1.1 request on its own connection (`Connection: close`), read to the end: no
    /// client library adding or changing headers between the case and the server.
    static func exchange(port: Int, method: String, target: String, headers: [(String, String)], body: Data) throws -> Answer {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw CaseFailure(message: "socket: \(errno)") }
        defer { close(fd) }
        var tv = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { throw CaseFailure(message: "connect to port \(port): errno \(errno)") }
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if !body.isEmpty || !["GET", "DELETE"].contains(method) { head += "Content-Length: \(body.count)\r\n" }
        let out = Data((head + "\r\n").utf8) + body
        try out.withUnsafeBytes { (p: UnsafeRawBufferPointer) in
            var sent = 0
            while sent < p.count {
                let n = write(fd, p.baseAddress! + sent, p.count - sent)
                guard n > 0 else { throw CaseFailure(message: "write: errno \(errno)") }
                sent += n
            }
        }
        var got = Data()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n < 0 { throw CaseFailure(message: "read: errno \(errno)") }
            if n == 0 { break }
            got.append(contentsOf: buf[0..<n])
        }
        guard let sep = got.range(of: Data("\r\n\r\n".utf8)) else { throw CaseFailure(message: "no answer head in \(got.count) bytes") }
        let lines = String(decoding: got[..<sep.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw CaseFailure(message: "bad status line \(lines[0])") }
        var h: [String: String] = [:]
        for l in lines.dropFirst() {
            guard let colon = l.firstIndex(of: ":") else { continue }
            let k = l[..<colon].lowercased(), v = l[l.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            h[k] = h[k].map { $0 + ", " + v } ?? v
        }
        var b = Data(got[sep.upperBound...])
        if let n = h["content-length"].flatMap({ Int($0) }), b.count > n { b = b.prefix(n) }
        return Answer(status: status, headers: h, body: b)
    }
}
