import Foundation
import CloudHTTP
import StorageModel

extension FirebaseStore {
    /// The object's download URL, as the Firebase SDKs make it: its v0 media
    /// URL with the first of its download tokens, `…/o/NAME?alt=media&token=TOKEN`. Whoever holds
    /// the URL reads the object without signing in, whatever the rules say; the store itself
    /// never sends, copies or logs a token (docs/SECURITY.md), so this is the one call that hands
    /// one out, and only to the program that asked. The server mints a token if the object has
    /// none (a metadata GET does). A read the rules refuse is `unauthorized`; an object with no
    /// token after that is `unknown`.
    public func downloadURL(_ name: String) async throws -> URL {
        let r = try await transport.send("get", path: name, idempotent: true, CloudRequest(.GET, objectURL(name)))
        let json = try r.json()
        guard let tokens = json["downloadTokens"] as? String,
              let first = tokens.split(separator: ",").first.map(String.init), !first.isEmpty,
              let url = URL(string: objectURL(name) + CloudURL.query([("alt", "media"), ("token", first)])) else {
            throw StorageError.unknown(status: r.status, message: "the server gave no download token for \(shown(prefix + name))")
        }
        return url
    }
}
