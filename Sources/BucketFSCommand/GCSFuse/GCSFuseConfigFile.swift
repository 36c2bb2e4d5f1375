import Foundation
import Yams

/// gcsfuse's config file (`--config-file`, YAML): nested keys (`logging: {severity: info}`) read
/// as the dotted paths of `GCSFuseParam.configPath`, each leaf's value as gcsfuse's flag would
/// carry it (a list joined by commas). A file that is not YAML, or a key gcsfuse does not have,
/// is refused by name.
enum GCSFuseConfigFile {
    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    /// `(flag name, value)` for every key of the file at `path`, in the file's order.
    static func settings(path: String) throws(Refusal) -> [(name: String, value: String)] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Refusal(description: "cannot read the config file \(path) (--config-file): \(String(cString: strerror(errno)))")
        }
        return try settings(text: String(decoding: data, as: UTF8.self), path: path)
    }

    static func settings(text: String, path: String) throws(Refusal) -> [(name: String, value: String)] {
        let root: Node?
        do { root = try Yams.compose(yaml: text) } catch {
            throw Refusal(description: "the config file \(path) (--config-file) is not YAML: \(Self.firstLine(error))")
        }
        guard let root else { return [] }  // an empty file
        guard case .mapping(let top) = root else {
            throw Refusal(description: "the config file \(path) (--config-file) is not a YAML mapping of gcsfuse's keys")
        }
        var out: [(String, String)] = []
        try flatten(top, prefix: "", path: path, into: &out)
        return out
    }

    private static func flatten(_ mapping: Node.Mapping, prefix: String, path: String,
                                into out: inout [(String, String)]) throws(Refusal) {
        for (k, v) in mapping {
            guard let key = k.string else {
                throw Refusal(description: "the config file \(path) has a key that is not a name under \(prefix.isEmpty ? "its top" : prefix)")
            }
            let full = prefix.isEmpty ? key : prefix + "." + key
            if case .mapping(let inner) = v, GCSFuseParam.byConfigPath[full] == nil {
                try flatten(inner, prefix: full, path: path, into: &out)
                continue
            }
            guard let param = GCSFuseParam.byConfigPath[full] else {
                throw Refusal(description: "unknown key \(full.replacingOccurrences(of: ".", with: ":")) in the config file \(path): not a gcsfuse setting (docs/KUBERNETES.md lists them)")
            }
            switch v {
            case .scalar(let s): out.append((param.flag, s.string))
            case .sequence(let items): out.append((param.flag, items.compactMap { $0.string }.joined(separator: ",")))
            default: throw Refusal(description: "the config file \(path): \(full) takes a value, not a mapping")
            }
        }
    }

    private static func firstLine(_ error: any Error) -> String {
        String(describing: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
    }
}
