import Foundation

/// The Apple SDK's `StorageListResult`: one page of a listing (`list`), or all of them
/// (`listAll`, whose `pageToken` is nil).
open class StorageListResult: NSObject, NSCopying {
    /// The prefixes ("folders") under the listed reference, without their trailing `/`.
    public let prefixes: [StorageReference]
    /// The objects ("files").
    public let items: [StorageReference]
    /// Where the next page starts; nil on the last page.
    public let pageToken: String?

    init(prefixes: [StorageReference], items: [StorageReference], pageToken: String?) {
        self.prefixes = prefixes
        self.items = items
        self.pageToken = pageToken
        super.init()
    }

    open func copy(with zone: NSZone? = nil) -> Any {
        StorageListResult(prefixes: prefixes, items: items, pageToken: pageToken)
    }
}
