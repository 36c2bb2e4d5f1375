@testable import FirebaseCore
import Foundation
import Testing

/// The app's options from a GoogleService-Info.plist, and the apps by name.
@Suite struct FirebaseAppTests {
    @Test func optionsAreReadFromAPlist() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sdk-options-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let plist: [String: Any] = ["API_KEY": "AIzaKey", "GOOGLE_APP_ID": "1:2:ios:3", "GCM_SENDER_ID": "2",
                                    "PROJECT_ID": "proj", "STORAGE_BUCKET": "proj.appspot.com", "BUNDLE_ID": "dev.x"]
        let path = dir.appendingPathComponent("GoogleService-Info.plist").path
        try PropertyListSerialization.data(fromPropertyList: plist, format: .xml, options: 0).write(to: URL(fileURLWithPath: path))
        let o = try #require(FirebaseOptions(contentsOfFile: path))
        #expect(o.apiKey == "AIzaKey" && o.googleAppID == "1:2:ios:3" && o.projectID == "proj")
        #expect(o.storageBucket == "proj.appspot.com" && o.bundleID == "dev.x" && o.gcmSenderID == "2")
        #expect(FirebaseOptions(contentsOfFile: dir.appendingPathComponent("missing.plist").path) == nil)
    }

    @Test func appsAreFoundByNameAndDeleted() async {
        let o = FirebaseOptions(googleAppID: "1:2:ios:3", gcmSenderID: "2")
        o.storageBucket = "b.appspot.com"
        let name = "test-\(UUID().uuidString)"
        FirebaseApp.configure(name: name, options: o)
        let app = FirebaseApp.app(name: name)
        #expect(app?.options.storageBucket == "b.appspot.com")
        // the options are a copy
        app?.options.storageBucket = "changed"
        #expect(FirebaseApp.app(name: name)?.options.storageBucket == "b.appspot.com")
        #expect(FirebaseApp.allApps?[name] === app)
        #expect(await app?.delete() == true)
        #expect(FirebaseApp.app(name: name) == nil)
    }
}
