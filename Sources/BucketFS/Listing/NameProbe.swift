import StorageModel

/// A lookup of one name as one list request (docs/SEMANTICS.md §6): the objects whose names start
/// with `path`, up to `path0` (`0` is the byte after `/`), no delimiter. In UTF-8 byte order that
/// range holds the object `path` first, then names like `path.txt` or `path-1`, then everything
/// under `path/`, its placeholder `path/` first. One page of it says whether `path` is a file, a
/// directory (which wins over a file of the same name), or nothing, with the metadata a GET would
/// bring (the list's items carry it). A page that fills up with names like `path.txt` before it
/// reaches `path/` says nothing: the caller asks the old way (a GET of the name and a one-item
/// list of `path/`). For stores that answer such a listing in one request
/// (`ObjectStore.listsUnderPartialNames`).
enum NameProbe {
    /// Names a page may hold: `path`, its look-alikes before `path/`, and the first under it.
    static let maxResults = 16

    /// `folders`: the bucket has a hierarchical namespace, whose empty folders only a listing with
    /// a delimiter shows (as the prefix `path/`); the look-alikes' own directories roll up too.
    static func request(_ path: String, folders: Bool = false) -> ListRequest {
        ListRequest(prefix: path, delimiter: folders ? "/" : nil, maxResults: maxResults, endOffset: path + "0")
    }

    enum Answer: Equatable {
        case missing
        case file(ObjectInfo)
        /// With its placeholder `path/`, or nil when it has none (a prefix only).
        case directory(placeholder: ObjectInfo?)
    }

    /// What the first page of `request(path)` says; nil when it cannot tell.
    static func answer(_ page: ListPage, for path: String) -> Answer? {
        let below = path + "/"
        let end = path + "0"
        var object: ObjectInfo? = nil
        var firstBelow: ObjectInfo? = nil
        // A name at or past the end (a server that ignores endOffset): the page holds every name
        // before it, `path/…` included.
        var reachedEnd = false
        for item in page.items {
            if item.name == path {
                object = item
            } else if item.name.utf8.starts(with: below.utf8) {
                if firstBelow.map({ NameOrder.precedes(item.name, $0.name) }) ?? true { firstBelow = item }
            } else if !NameOrder.precedes(item.name, end) {
                reachedEnd = true
            }
        }
        // A folder, or objects under `path/` rolled up (a listing with a delimiter).
        if page.prefixes.contains(below) { return .directory(placeholder: nil) }
        // Something under `path/`: a directory. Its placeholder sorts before everything else
        // under it, so it is this first name or there is none.
        if let firstBelow { return .directory(placeholder: firstBelow.name == below ? firstBelow : nil) }
        guard page.nextPageToken == nil || reachedEnd else { return nil }
        return object.map { .file($0) } ?? .missing
    }
}
