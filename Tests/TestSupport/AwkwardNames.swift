import Foundation
import StorageModel

/// Object names that reach the wrong object, or none, unless every path segment of every URL is
/// percent-encoded: dot segments, `%`, `#`, `?`, spaces, non-ASCII.
public enum AwkwardNames {
    public static let all = ["..", ".", "a..b", "dir/../x", "./y", "100%", "%2F", "c#d", "e?f=g&h", "with space",
                             "ünï/cødé 東京", "plus+sign"]

    /// Writes, stats, reads, copies and deletes each name on `store`; returns what went wrong.
    public static func roundTrip(_ store: any ObjectStore) async -> [String] {
        var problems: [String] = []
        for name in all {
            do {
                let data = Data("bytes of \(name)".utf8)
                let w = try await store.write(name, from: .data(data), metadata: .init(), preconditions: .none)
                if w.name != name { problems.append("\(name): written as '\(w.name)'") }
                let m = try await store.getMetadata(name)
                if m.name != name || m.size != Int64(data.count) { problems.append("\(name): stat gave '\(m.name)', \(m.size) bytes") }
                let back = try await store.read(name, generation: nil, range: nil)
                if back != data { problems.append("\(name): read gave '\(String(decoding: back, as: UTF8.self))'") }
                let copy = name + " copy"
                _ = try await store.copy(from: name, sourceGeneration: nil, to: copy, metadata: nil, preconditions: .none)
                if try await store.read(copy, generation: nil, range: nil) != data { problems.append("\(name): the copy differs") }
                try await store.delete(copy, preconditions: .none)
                try await store.delete(name, preconditions: .none)
                do {
                    _ = try await store.getMetadata(name)
                    problems.append("\(name): still there after delete")
                } catch StorageError.objectNotFound {}
            } catch {
                problems.append("\(name): \(error)")
            }
        }
        return problems
    }
}
