// A program that signs in by itself — no `bucketfs login`, no login file — and uses a bucket as
// that user: upload, download, metadata, list, delete. Its ID tokens refresh themselves.
//
//   swift run firebase-samples sign-in gs://BUCKET --api-key KEY --email ADDRESS --password-file FILE
//   swift run firebase-samples sign-in gs://BUCKET --api-key KEY --custom-token-file FILE
//   swift run firebase-samples sign-in gs://BUCKET --api-key KEY --anonymous
//
// It works in the signed-in user's folder, `users/UID/library-sample/`, as the usual rules
// (`match /users/{uid}/{allPaths=**}`) allow. `--pause SECONDS` waits between the upload and the
// download (to outlive a short-lived ID token). With FIREBASE_AUTH_EMULATOR_HOST and
// FIREBASE_STORAGE_EMULATOR_HOST set, it talks to the emulators. docs/LIBRARY.md walks through it.
import FirebaseStore
import Foundation
import StorageModel

enum SignInSample {
    static let usage = "usage: firebase-samples sign-in gs://BUCKET --api-key KEY "
        + "(--email ADDRESS --password-file FILE | --custom-token-file FILE | --anonymous) [--pause SECONDS]"

    struct Arguments {
        var url = ""
        var apiKey = ""
        var email: String?
        var passwordFile: String?
        var customTokenFile: String?
        var anonymous = false
        var pause = 0.0
    }

    static func run(_ args: [String]) async -> Int32 {
        guard let a = parse(args) else {
            FileHandle.standardError.write(Data((usage + "\n").utf8))
            return 2
        }
        do {
            // 1. Sign in: the user's id (uid) comes from the sign-in.
            let auth = try FirebaseAuth(apiKey: a.apiKey)
            let user: FirebaseUser
            if let email = a.email, let file = a.passwordFile {
                user = try await auth.signIn(email: email, password: try firstLine(of: file))
            } else if let file = a.customTokenFile {
                user = try await auth.signIn(customToken: try firstLine(of: file))
            } else {
                user = try await auth.signInAnonymously()
            }
            print("uid: \(user.uid)")
            print("provider: \(user.provider)")

            // 2. The bucket, as that user; the user's folder.
            let storage = try Storage.storage(url: a.url, user: user)
            let folder = storage.reference().child("users/\(user.uid)/library-sample")
            let file = folder.child("hello.txt")

            // 3. Upload.
            var metadata = StorageMetadata()
            metadata.contentType = "text/plain"
            let uploaded = try await file.putData(Data("hello from \(user.uid)\n".utf8), metadata: metadata)
            print("uploaded: \(file.fullPath) (\(uploaded.size) bytes)")

            if a.pause > 0 { try await Task.sleep(for: .milliseconds(Int(a.pause * 1000))) }

            // 4. Download, and the object's metadata.
            let data = try await file.data(maxSize: 1 << 20)
            print("downloaded: \(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .newlines))")
            let info = try await file.getMetadata()
            print("metadata: \(info.name), \(info.size) bytes, \(info.contentType ?? "-")")

            // 5. List the folder.
            let listed = try await folder.listAll()
            for item in listed.items { print("listed: \(item.fullPath)") }

            // 6. Delete, and list again.
            try await file.delete()
            print("deleted: \(file.fullPath)")
            let left = try await folder.listAll().items.count
            print("left: \(left)")

            let refreshes = await user.refreshCount
            print("token refreshes: \(refreshes)")
            try await storage.shutdown()
            return 0
        } catch {
            // Errors never carry the password or a token.
            FileHandle.standardError.write(Data("firebase-samples sign-in: \(error)\n".utf8))
            return 1
        }
    }

    static func parse(_ args: [String]) -> Arguments? {
        var a = Arguments()
        var rest = args[...]
        while let arg = rest.popFirst() {
            switch arg {
            case "--anonymous": a.anonymous = true
            case "--api-key", "--email", "--password-file", "--custom-token-file", "--pause":
                guard let v = rest.popFirst() else { return nil }
                switch arg {
                case "--api-key": a.apiKey = v
                case "--email": a.email = v
                case "--password-file": a.passwordFile = v
                case "--custom-token-file": a.customTokenFile = v
                default:
                    guard let p = Double(v), p >= 0 else { return nil }
                    a.pause = p
                }
            default:
                guard a.url.isEmpty, !arg.hasPrefix("--") else { return nil }
                a.url = arg
            }
        }
        let ways = [a.email != nil && a.passwordFile != nil, a.customTokenFile != nil, a.anonymous].filter { $0 }.count
        guard !a.url.isEmpty, !a.apiKey.isEmpty, ways == 1, (a.email == nil) == (a.passwordFile == nil) else { return nil }
        return a
    }

    static func firstLine(of path: String) throws -> String {
        guard let d = FileManager.default.contents(atPath: path) else {
            throw StorageError.invalidArgument(message: "cannot read \(path)")
        }
        return String(decoding: d, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
    }
}
