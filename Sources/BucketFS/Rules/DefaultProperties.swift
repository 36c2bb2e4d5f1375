import StorageModel

/// Which writable properties hold only what a server gives every object anyway, so that
/// `listxattr` leaves them out (docs/SEMANTICS.md §4.1): they stay readable and settable by name.
/// Without this a second `rsync -aX` of an unchanged tree would remove them from every file
/// (the source has no such xattr) and cost a PATCH per file per run.
enum DefaultProperties {
    /// Whether property `p` of the object `path` has a value it would have had with nobody setting it.
    static func isDefault(_ p: XattrName.WritableProperty, _ value: String, path: String, policy: ContentTypePolicy) -> Bool {
        switch p {
        case .contentType: return policy.isUnchosen(value, for: path)
        case .contentEncoding: return value.lowercased() == "identity"
        case .contentDisposition: return ContentDisposition.isDefault(value, forObject: path)
        case .cacheControl, .contentLanguage: return false
        }
    }
}
