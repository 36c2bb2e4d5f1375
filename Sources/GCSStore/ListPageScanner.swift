import Foundation

/// Reads a list page's bytes once, straight into `ListPageJSON`: the same values `JSONDecoder`
/// gives, at a fraction of its cost (Foundation's Codable path took 40 % of the daemon's CPU in a
/// listing of 100,000 objects: docs/BENCHMARKS.md). Anything it does not expect (a lone
/// surrogate, bytes that are not UTF-8, a number where a string is due, a known key with another
/// type, broken JSON) makes it give up: `page(_:)` is then nil and the caller decodes the page
/// with `JSONDecoder`, which answers as it always did. Unknown keys are skipped, whatever they hold.
extension ListPageJSON {
    /// A list page's bytes, read by `ListPageScanner`, or by `JSONDecoder` where it gives up.
    static func decode(_ data: Data) throws -> ListPageJSON {
        try ListPageScanner.page(data) ?? JSONDecoder().decode(ListPageJSON.self, from: data)
    }
}

enum ListPageScanner {
    /// The page, or nil when the bytes are anything but what a list page plainly is.
    static func page(_ data: Data) -> ListPageJSON? {
        data.withUnsafeBytes { raw in
            var s = Scanner(raw)
            return try? s.listPage()
        }
    }

    struct Unexpected: Error {}

    struct Scanner {
        let p: UnsafeRawBufferPointer
        var i = 0
        init(_ p: UnsafeRawBufferPointer) { self.p = p }

        mutating func listPage() throws -> ListPageJSON {
            var page = ListPageJSON()
            try object { s, key in
                if Self.is(key, "items") {
                    if try s.null() { page.items = nil; return }
                    var items: [ObjectJSON] = []
                    items.reserveCapacity(1000)
                    try s.array { s in items.append(try s.objectResource()) }
                    page.items = items
                } else if Self.is(key, "prefixes") {
                    if try s.null() { page.prefixes = nil; return }
                    var prefixes: [String] = []
                    try s.array { s in prefixes.append(try s.string()) }
                    page.prefixes = prefixes
                } else if Self.is(key, "nextPageToken") {
                    page.nextPageToken = try s.optionalString()
                } else {
                    try s.skipValue()
                }
            }
            skipSpace()
            guard i == p.count else { throw Unexpected() }
            return page
        }

        mutating func objectResource() throws -> ObjectJSON {
            var o = ObjectJSON()
            try object { s, key in
                switch key.count {
                case 4 where Self.is(key, "name"): o.name = try s.optionalString()
                case 4 where Self.is(key, "size"): o.size = try s.optionalInt64()
                case 6 where Self.is(key, "bucket"): o.bucket = try s.optionalString()
                case 7 where Self.is(key, "md5Hash"): o.md5Hash = try s.optionalString()
                case 7 where Self.is(key, "updated"): o.updated = try s.optionalString()
                case 6 where Self.is(key, "crc32c"): o.crc32c = try s.optionalString()
                case 8 where Self.is(key, "metadata"): o.metadata = try s.optionalMetadata()
                case 10 where Self.is(key, "generation"): o.generation = try s.optionalInt64()
                case 11 where Self.is(key, "timeCreated"): o.timeCreated = try s.optionalString()
                case 11 where Self.is(key, "contentType"): o.contentType = try s.optionalString()
                case 11 where Self.is(key, "timeDeleted"): o.timeDeleted = try s.optionalString()
                case 12 where Self.is(key, "cacheControl"): o.cacheControl = try s.optionalString()
                case 14 where Self.is(key, "metageneration"): o.metageneration = try s.optionalInt64()
                case 15 where Self.is(key, "contentEncoding"): o.contentEncoding = try s.optionalString()
                case 15 where Self.is(key, "contentLanguage"): o.contentLanguage = try s.optionalString()
                case 18 where Self.is(key, "contentDisposition"): o.contentDisposition = try s.optionalString()
                default: try s.skipValue()
                }
            }
            return o
        }

        mutating func optionalMetadata() throws -> [String: String?]? {
            if try null() { return nil }
            var m: [String: String?] = [:]
            try object { s, key in
                // A key with escapes was given up on by `object`; these bytes are the key.
                guard let k = String(validating: key, as: UTF8.self) else { throw Unexpected() }
                m[k] = try s.optionalString()
            }
            return m
        }

        // MARK: - values

        static func `is`(_ key: UnsafeRawBufferPointer, _ s: StaticString) -> Bool {
            key.count == s.utf8CodeUnitCount && memcmp(key.baseAddress!, s.utf8Start, key.count) == 0
        }

        mutating func skipSpace() {
            while i < p.count, p[i] == 0x20 || p[i] == 0x0A || p[i] == 0x0D || p[i] == 0x09 { i += 1 }
        }

        mutating func take(_ byte: UInt8) throws {
            skipSpace()
            guard i < p.count, p[i] == byte else { throw Unexpected() }
            i += 1
        }

        mutating func peek() throws -> UInt8 {
            skipSpace()
            guard i < p.count else { throw Unexpected() }
            return p[i]
        }

        /// Takes a `null` if one is next.
        mutating func null() throws -> Bool {
            guard try peek() == UInt8(ascii: "n") else { return false }
            try literal("null")
            return true
        }

        mutating func literal(_ word: StaticString) throws {
            let n = word.utf8CodeUnitCount
            guard i + n <= p.count, memcmp(p.baseAddress! + i, word.utf8Start, n) == 0 else { throw Unexpected() }
            i += n
        }

        /// `{ "key": value, ... }`, each value read by `member` (keys with escapes: given up on).
        mutating func object(_ member: (inout Scanner, UnsafeRawBufferPointer) throws -> Void) throws {
            try take(UInt8(ascii: "{"))
            if try peek() == UInt8(ascii: "}") { i += 1; return }
            while true {
                try take(UInt8(ascii: "\""))
                let start = i
                while i < p.count, p[i] != UInt8(ascii: "\"") {
                    guard p[i] != UInt8(ascii: "\\"), p[i] >= 0x20 else { throw Unexpected() }
                    i += 1
                }
                guard i < p.count else { throw Unexpected() }
                let key = UnsafeRawBufferPointer(rebasing: p[start..<i])
                i += 1
                try take(UInt8(ascii: ":"))
                try member(&self, key)
                let c = try peek()
                i += 1
                if c == UInt8(ascii: "}") { return }
                guard c == UInt8(ascii: ",") else { throw Unexpected() }
            }
        }

        mutating func array(_ element: (inout Scanner) throws -> Void) throws {
            try take(UInt8(ascii: "["))
            if try peek() == UInt8(ascii: "]") { i += 1; return }
            while true {
                try element(&self)
                let c = try peek()
                i += 1
                if c == UInt8(ascii: "]") { return }
                guard c == UInt8(ascii: ",") else { throw Unexpected() }
            }
        }

        mutating func optionalString() throws -> String? { try null() ? nil : try string() }

        /// A JSON string: UTF-8 validated, escapes decoded (a lone surrogate is given up on).
        mutating func string() throws -> String {
            try take(UInt8(ascii: "\""))
            let start = i
            var high: UInt8 = 0  // every byte or'ed: below 0x80 when the string is ASCII
            while i < p.count, p[i] != UInt8(ascii: "\""), p[i] != UInt8(ascii: "\\") {
                guard p[i] >= 0x20 else { throw Unexpected() }
                high |= p[i]
                i += 1
            }
            guard i < p.count else { throw Unexpected() }
            if p[i] == UInt8(ascii: "\"") {
                defer { i += 1 }
                let bytes = UnsafeRawBufferPointer(rebasing: p[start..<i])
                // ASCII is valid UTF-8: made without the (generic, slower) validating path.
                if high < 0x80 { return String(decoding: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self) }
                guard let s = String(validating: bytes, as: UTF8.self) else { throw Unexpected() }
                return s
            }
            var bytes = Array(p[start..<i])
            while true {
                guard i < p.count else { throw Unexpected() }
                let c = p[i]
                i += 1
                if c == UInt8(ascii: "\"") { break }
                guard c >= 0x20 else { throw Unexpected() }
                guard c == UInt8(ascii: "\\") else { bytes.append(c); continue }
                guard i < p.count else { throw Unexpected() }
                let e = p[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): bytes.append(e)
                case UInt8(ascii: "b"): bytes.append(0x08)
                case UInt8(ascii: "f"): bytes.append(0x0C)
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        try literal("\\u")
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw Unexpected() }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        throw Unexpected()
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw Unexpected() }
                    bytes.append(contentsOf: Array(String(Character(u)).utf8))
                default: throw Unexpected()
                }
            }
            guard let s = String(validating: bytes, as: UTF8.self) else { throw Unexpected() }
            return s
        }

        mutating func hex4() throws -> UInt32 {
            guard i + 4 <= p.count else { throw Unexpected() }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = p[i]
                i += 1
                let d: UInt8
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
                default: throw Unexpected()
                }
                v = v << 4 | UInt32(d)
            }
            return v
        }

        /// An int64 as the API sends it (a string of digits) or as some servers do (a number
        /// with no fraction or exponent); anything else is given up on.
        mutating func optionalInt64() throws -> Int64Text? {
            if try null() { return nil }
            if try peek() == UInt8(ascii: "\"") {
                guard let v = Int64(try string()) else { throw Unexpected() }
                return Int64Text(v)
            }
            let start = i
            if i < p.count, p[i] == UInt8(ascii: "-") { i += 1 }
            while i < p.count, p[i] >= UInt8(ascii: "0"), p[i] <= UInt8(ascii: "9") { i += 1 }
            if i < p.count, p[i] == UInt8(ascii: ".") || p[i] == UInt8(ascii: "e") || p[i] == UInt8(ascii: "E") {
                throw Unexpected()
            }
            guard let text = String(validating: UnsafeRawBufferPointer(rebasing: p[start..<i]), as: UTF8.self),
                  let v = Int64(text) else { throw Unexpected() }
            return Int64Text(v)
        }

        /// A string passed over: an ASCII one without escapes is only scanned; any other is read
        /// by `string()`, which checks its escapes and UTF-8.
        mutating func skipString() throws {
            try take(UInt8(ascii: "\""))
            let start = i
            while i < p.count, p[i] >= 0x20, p[i] < 0x80, p[i] != UInt8(ascii: "\""), p[i] != UInt8(ascii: "\\") { i += 1 }
            if i < p.count, p[i] == UInt8(ascii: "\"") { i += 1; return }
            i = start - 1
            _ = try string()
        }

        /// Any JSON value, checked as it is passed over.
        mutating func skipValue() throws {
            switch try peek() {
            case UInt8(ascii: "\""): try skipString()
            case UInt8(ascii: "{"): try object { s, _ in try s.skipValue() }
            case UInt8(ascii: "["): try array { s in try s.skipValue() }
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            default:
                let start = i
                while i < p.count, let c = Optional(p[i]),
                      (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "-") || c == UInt8(ascii: "+")
                        || c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
                    i += 1
                }
                guard i > start, let text = String(validating: UnsafeRawBufferPointer(rebasing: p[start..<i]), as: UTF8.self),
                      Double(text) != nil else { throw Unexpected() }
            }
        }
    }
}
