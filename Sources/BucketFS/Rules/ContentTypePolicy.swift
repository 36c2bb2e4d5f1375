import Foundation

/// What content type an object gets when nobody gives one (docs/SEMANTICS.md §4.1): the type of
/// its name (`ContentTypes`), else `defaultType`; with `infer` off, always `defaultType`. Used by
/// the mount at each upload and rename, and by `bucketfs put`.
public struct ContentTypePolicy: Sendable, Equatable {
    /// What Cloud Storage and Firebase give an object uploaded with no type.
    public static let serverDefault = "application/octet-stream"

    public var infer = true
    public var defaultType = ContentTypePolicy.serverDefault
    public var table: ContentTypes

    public init(infer: Bool = true, defaultType: String = ContentTypePolicy.serverDefault, table: ContentTypes = .system) {
        self.infer = infer
        self.defaultType = defaultType
        self.table = table
    }

    /// The type an object named `path` gets when no type is given.
    public func type(for path: String) -> String {
        (infer ? table.type(forName: path) : nil) ?? defaultType
    }

    /// Whether `type` is one an object named `path` would have without anyone choosing it: the
    /// servers' default, this policy's default, or the type of its name. Such a type is not
    /// listed as an xattr (docs/SEMANTICS.md §4.1).
    public func isUnchosen(_ type: String, for path: String) -> Bool {
        type == Self.serverDefault || type == defaultType || type == table.type(forName: path)
    }
}
