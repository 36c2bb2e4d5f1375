import Foundation

/// The Firebase Apple SDK's `FirebaseOptions`: what identifies a Firebase project to the
/// services, read from a `GoogleService-Info.plist` or set by hand (docs/LIBRARY.md, "The Apple
/// SDK's API"). Only `apiKey`, `projectID` and `storageBucket` are used here (Auth's key, the
/// default bucket); the others are kept for code that reads them.
open class FirebaseOptions: NSObject, NSCopying, @unchecked Sendable {
    public var apiKey: String?
    public var bundleID: String
    public var clientID: String?
    public var gcmSenderID: String
    public var projectID: String?
    public var googleAppID: String
    public var databaseURL: String?
    public var deepLinkURLScheme: String?
    public var storageBucket: String?
    public var appGroupID: String?

    /// The options of the `GoogleService-Info.plist` beside the program (the main bundle's
    /// resource, then the executable's directory, then the working directory), or nil.
    open class func defaultOptions() -> FirebaseOptions? {
        guard let path = defaultPlistPath() else { return nil }
        return FirebaseOptions(contentsOfFile: path)
    }

    /// Where `defaultOptions()` finds `GoogleService-Info.plist`, if anywhere.
    static func defaultPlistPath() -> String? {
        let name = "GoogleService-Info.plist"
        var candidates: [String] = []
        if let p = Bundle.main.path(forResource: "GoogleService-Info", ofType: "plist") { candidates.append(p) }
        if let exe = Bundle.main.executablePath {
            candidates.append((exe as NSString).deletingLastPathComponent + "/" + name)
        }
        candidates.append(FileManager.default.currentDirectoryPath + "/" + name)
        return candidates.first { FileManager.default.isReadableFile(atPath: $0) }
    }

    /// Reads a `GoogleService-Info.plist` (XML or binary); nil when the file cannot be read or
    /// lacks `GOOGLE_APP_ID`.
    public convenience init?(contentsOfFile plistPath: String) {
        guard let data = FileManager.default.contents(atPath: plistPath),
              let plist = try? PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any],
              let appID = plist["GOOGLE_APP_ID"] as? String else { return nil }
        self.init(googleAppID: appID, gcmSenderID: plist["GCM_SENDER_ID"] as? String ?? "")
        apiKey = plist["API_KEY"] as? String
        bundleID = plist["BUNDLE_ID"] as? String ?? bundleID
        clientID = plist["CLIENT_ID"] as? String
        projectID = plist["PROJECT_ID"] as? String
        databaseURL = plist["DATABASE_URL"] as? String
        storageBucket = plist["STORAGE_BUCKET"] as? String
    }

    public init(googleAppID: String, gcmSenderID GCMSenderID: String) {
        self.googleAppID = googleAppID
        gcmSenderID = GCMSenderID
        bundleID = Bundle.main.bundleIdentifier ?? ""
        super.init()
    }

    public func copy(with zone: NSZone? = nil) -> Any {
        let o = FirebaseOptions(googleAppID: googleAppID, gcmSenderID: gcmSenderID)
        o.apiKey = apiKey
        o.bundleID = bundleID
        o.clientID = clientID
        o.projectID = projectID
        o.databaseURL = databaseURL
        o.deepLinkURLScheme = deepLinkURLScheme
        o.storageBucket = storageBucket
        o.appGroupID = appGroupID
        return o
    }

    override open func isEqual(_ object: Any?) -> Bool {
        guard let o = object as? FirebaseOptions else { return false }
        return (apiKey, bundleID, clientID, gcmSenderID, projectID, googleAppID) ==
            (o.apiKey, o.bundleID, o.clientID, o.gcmSenderID, o.projectID, o.googleAppID)
            && (databaseURL, deepLinkURLScheme, storageBucket, appGroupID) ==
            (o.databaseURL, o.deepLinkURLScheme, o.storageBucket, o.appGroupID)
    }

    override open var hash: Int { googleAppID.hashValue ^ (projectID ?? "").hashValue }
}
