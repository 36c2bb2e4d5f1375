import Foundation

/// The Firebase Apple SDK's `FirebaseApp`: a configured Firebase project that the other
/// modules (`Auth.auth()`, `Storage.storage()`) are reached from (docs/LIBRARY.md, "The Apple
/// SDK's API"). `configure()` reads `GoogleService-Info.plist`; `configure(options:)` takes the
/// options in code. Configuring the same name twice, or the default app without options to read,
/// stops the program, as the SDK does.
open class FirebaseApp: NSObject, @unchecked Sendable {
    /// The name of the app `configure()` and `configure(options:)` make.
    static let defaultName = "__FIRAPP_DEFAULT"
    private static let lock = NSLock()
    nonisolated(unsafe) private static var apps: [String: FirebaseApp] = [:]

    public let name: String
    private let storedOptions: FirebaseOptions
    /// A copy: changing it changes nothing of the app.
    public var options: FirebaseOptions { storedOptions.copy() as! FirebaseOptions }
    public var isDataCollectionDefaultEnabled = true

    private let authLock = NSLock()
    private var authSlot: (any AuthInterop)?

    init(name: String, options: FirebaseOptions) {
        self.name = name
        storedOptions = options.copy() as! FirebaseOptions
        super.init()
    }

    /// Configures the default app from `GoogleService-Info.plist` (the main bundle's resource, the
    /// executable's directory, or the working directory).
    public class func configure() {
        guard let options = FirebaseOptions.defaultOptions() else {
            fatalError("`FirebaseApp.configure()` could not find a valid GoogleService-Info.plist beside the program " +
                "(in its bundle, its directory or the working directory). Use configure(options:) to give the options in code.")
        }
        configure(options: options)
    }

    public class func configure(options: FirebaseOptions) {
        configure(name: defaultName, options: options)
    }

    public class func configure(name: String, options: FirebaseOptions) {
        guard !name.isEmpty else { fatalError("FirebaseApp name must not be empty.") }
        lock.withLock {
            guard apps[name] == nil else {
                fatalError(name == defaultName ? "Default app has already been configured."
                                               : "App named \(name) has already been configured.")
            }
            apps[name] = FirebaseApp(name: name, options: options)
        }
    }

    /// The default app, or nil before `configure()`.
    public class func app() -> FirebaseApp? { app(name: defaultName) }

    public class func app(name: String) -> FirebaseApp? { lock.withLock { apps[name] } }

    /// Every configured app by name, or nil when there is none.
    public class var allApps: [String: FirebaseApp]? {
        lock.withLock { apps.isEmpty ? nil : apps }
    }

    /// Forgets the app: `app(name:)` no longer finds it, and its name may be configured again.
    open func delete(_ completion: @escaping (Bool) -> Void) {
        let removed = Self.lock.withLock { Self.apps.removeValue(forKey: name) != nil }
        completion(removed)
    }

    open func delete() async -> Bool {
        await withCheckedContinuation { c in delete { c.resume(returning: $0) } }
    }

    override open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? FirebaseApp else { return false }
        return other.name == name && other.storedOptions.isEqual(storedOptions)
    }

    override open var hash: Int { name.hashValue }

    override open var description: String { "FirebaseApp(name: \(name), projectID: \(storedOptions.projectID ?? "nil"))" }

    // MARK: the package's modules

    /// The app's Auth, once `Auth.auth(app:)` has made it.
    package var authInterop: (any AuthInterop)? {
        get { authLock.withLock { authSlot } }
        set { authLock.withLock { authSlot = newValue } }
    }
}
