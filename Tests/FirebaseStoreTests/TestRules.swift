import Foundation

/// A small model of Firebase Security Rules for the test servers (the rules cases of
/// Tests/FirebaseProtocol/cases.json): match
/// patterns with `{var}` (one segment) and `{var=**}` (any number of segments, last), methods
/// get/list/create/update/delete, and conditions on `request.auth`. Any matching rule that
/// allows a method allows it. Under `rules_version = "1"` every listing is refused.
struct TestRules: Sendable {
    enum Op: String, Hashable, Sendable {
        case get, list, create, update, delete
        static let read: Set<Op> = [.get, .list]
        static let write: Set<Op> = [.create, .update, .delete]
        static let all: Set<Op> = read.union(write)
    }

    enum Condition: Sendable {
        /// `if true`
        case always
        /// `if request.auth != null`
        case signedIn
        /// `if request.auth.uid == <the wildcard named>`
        case ownerIs(String)
    }

    struct Rule: Sendable {
        var path: String
        var allow: Set<Op>
        var when: Condition
    }

    var version = 2
    var rules: [Rule]

    init(version: Int = 2, _ rules: [Rule]) {
        self.version = version
        self.rules = rules
    }

    /// `users/{uid}/…` readable and writable by that user; `public/…` readable by anyone signed in
    /// (a read-only area); `shared/…` listable by anyone signed in, each user's own objects
    /// (`shared/{uid}-…` is not expressible, so `shared/{uid}/…`) readable by that user only.
    static let perUser = TestRules([
        Rule(path: "users/{uid}/{rest=**}", allow: Op.all, when: .ownerIs("uid")),
        Rule(path: "public/{rest=**}", allow: Op.read, when: .signedIn),
        Rule(path: "shared/{rest=**}", allow: [.list], when: .signedIn),
        Rule(path: "shared/{uid}/{rest=**}", allow: Op.all, when: .ownerIs("uid")),
    ])

    /// Everything for anyone signed in.
    static let signedIn = TestRules([Rule(path: "{all=**}", allow: Op.all, when: .signedIn)])

    /// `path` is the object name, or for `list` the prefix without its trailing `/`.
    func allows(_ op: Op, path: String, uid: String?) -> Bool {
        if op == .list && version < 2 { return false }
        let segments = path.isEmpty ? [] : path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for rule in rules where rule.allow.contains(op) {
            guard let bindings = Self.match(rule.path, segments) else { continue }
            switch rule.when {
            case .always: return true
            case .signedIn: if uid != nil { return true }
            case .ownerIs(let v): if let uid, bindings[v] == uid { return true }
            }
        }
        return false
    }

    /// The wildcard bindings when `pattern` matches `segments`.
    static func match(_ pattern: String, _ segments: [String]) -> [String: String]? {
        let parts = pattern.split(separator: "/").map(String.init)
        var bindings: [String: String] = [:]
        var i = 0
        for (k, p) in parts.enumerated() {
            if p.hasPrefix("{"), p.hasSuffix("=**}") {
                guard k == parts.count - 1 else { return nil }
                bindings[String(p.dropFirst().dropLast(4))] = segments[min(i, segments.count)...].joined(separator: "/")
                return bindings
            }
            guard i < segments.count else { return nil }
            if p.hasPrefix("{"), p.hasSuffix("}") {
                bindings[String(p.dropFirst().dropLast())] = segments[i]
            } else if p != segments[i] {
                return nil
            }
            i += 1
        }
        return i == segments.count ? bindings : nil
    }
}
