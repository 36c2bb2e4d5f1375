import Foundation

/// The content type of an upload whose metadata gives none, from the file's extension, as the
/// Apple SDK infers it; `application/octet-stream` for data and unknown extensions.
enum MIMETypes {
    static let byExtension: [String: String] = [
        "txt": "text/plain", "html": "text/html", "htm": "text/html", "css": "text/css", "csv": "text/csv",
        "js": "text/javascript", "json": "application/json", "xml": "application/xml", "pdf": "application/pdf",
        "zip": "application/zip", "gz": "application/gzip", "jpg": "image/jpeg", "jpeg": "image/jpeg",
        "png": "image/png", "gif": "image/gif", "webp": "image/webp", "heic": "image/heic", "svg": "image/svg+xml",
        "mp3": "audio/mpeg", "m4a": "audio/mp4", "wav": "audio/wav", "mp4": "video/mp4", "mov": "video/quicktime",
    ]

    static func type(forExtension ext: String?) -> String {
        guard let ext, !ext.isEmpty else { return "application/octet-stream" }
        return byExtension[ext.lowercased()] ?? "application/octet-stream"
    }
}
