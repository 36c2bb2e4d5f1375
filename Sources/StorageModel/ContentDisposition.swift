import Foundation

/// The `contentDisposition` Firebase Storage gives an object uploaded without one: the emulator
/// stores `inline`, production `inline; filename*=utf-8''NAME` (NAME the object's last segment,
/// percent-encoded, as RFC 5987 writes it; seen in recorded v0 and JSON API answers).
public enum ContentDisposition {
    /// The production form for an object named `path`.
    public static func firebaseDefault(forObject path: String) -> String {
        let allowed = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$&+-.^_`|~")
        let name = StoragePath.lastSegment(path)
        return "inline; filename*=utf-8''" + (name.addingPercentEncoding(withAllowedCharacters: allowed) ?? name)
    }

    /// Whether `value` is a default for the object `path`: `inline`, or `inline` with a
    /// `filename*=utf-8''` that decodes to the object's own last segment (any encoding of it).
    public static func isDefault(_ value: String, forObject path: String) -> Bool {
        let v = value.trimmingCharacters(in: .whitespaces)
        if v.lowercased() == "inline" { return true }
        let prefix = "inline; filename*=utf-8''"
        guard v.count > prefix.count, v.prefix(prefix.count).lowercased() == prefix else { return false }
        let encoded = String(v.dropFirst(prefix.count))
        return encoded.removingPercentEncoding == StoragePath.lastSegment(path)
    }
}
