import Foundation

/// Requests a store sends of its own beside the one a call names (docs/OPERATING.md, "Logs"):
/// Firebase's v0 GETs that check a precondition or a generation (it has neither), the GET of a
/// copy's source, a create probe's cancel. The store reports each to its observers, so that
/// `--request-log` and `bucketfs_store_requests_total` count every such request the server sees.
public protocol InnerRequestReporting: Sendable {
    var innerRequests: InnerRequestObservers { get }
}

/// The observers of a store's own requests.
public final class InnerRequestObservers: @unchecked Sendable {
    /// `operation` as `--request-log` names it (`get`, `cancel`), the object name, and the error
    /// the request ended with (nil: answered).
    public typealias Observer = @Sendable (_ operation: String, _ name: String, _ error: (any Error)?) -> Void
    private let lock = NSLock()
    private var observers: [Observer] = []

    public init() {}

    public func add(_ observer: @escaping Observer) { lock.withLock { observers.append(observer) } }

    public func report(_ operation: String, _ name: String, _ error: (any Error)?) {
        for o in lock.withLock({ observers }) { o(operation, name, error) }
    }
}

extension ObjectStore {
    /// The store under every wrapper (`StoreWrapper.wrapped`).
    public var innermost: any ObjectStore {
        var s: any ObjectStore = self
        while let w = s as? any StoreWrapper { s = w.wrapped }
        return s
    }
}
