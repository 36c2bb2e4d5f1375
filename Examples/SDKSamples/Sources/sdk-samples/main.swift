// The Firebase guides' Storage samples for Apple platforms, written for the Firebase Apple SDK
// (`import FirebaseCore`, `FirebaseAuth`, `FirebaseStorage`), built here unchanged against
// bucketfs's modules of the same names (docs/LIBRARY.md, "The Apple SDK's API").
//
//   sdk-samples SAMPLE FOLDER [--email ADDRESS --password-file FILE | --custom-token-file FILE]
//
// SAMPLE is upload, download, metadata, list, delete, task, download-task, max-size, refused or
// signed-out; FOLDER is where the bucket's rules let the user write (the samples' "images/…" are
// made under it; "{uid}" in it is the user's uid). The project comes from GoogleService-Info.plist in the working directory (FirebaseApp.configure());
// with FIREBASE_AUTH_EMULATOR_HOST and FIREBASE_STORAGE_EMULATOR_HOST set, the emulators are used.
import FirebaseAuth
import FirebaseCore
import FirebaseStorage
import Foundation

func show(_ what: String, _ value: Any?) {
    print("\(what): \(value.map { "\($0)" } ?? "nil")")
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("sdk-samples: \(message)\n".utf8))
    exit(1)
}

var args = Array(CommandLine.arguments.dropFirst())
guard args.count >= 2 else {
    FileHandle.standardError.write(Data("usage: sdk-samples SAMPLE FOLDER [--email ADDRESS --password-file FILE | --custom-token-file FILE]\n".utf8))
    exit(2)
}
let sample = args.removeFirst()
let folder = args.removeFirst()
var options: [String: String] = [:]
while args.count >= 2 { options[args.removeFirst()] = args.removeFirst() }

func secret(_ option: String) -> String? {
    guard let path = options[option] else { return nil }
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { fail("cannot read \(path)") }
    return text.trimmingCharacters(in: .whitespacesAndNewlines)
}

// As an app starts: the project from GoogleService-Info.plist, then a signed-in user.
FirebaseApp.configure()
do {
    let result: AuthDataResult
    if let email = options["--email"], let password = secret("--password-file") {
        result = try await Auth.auth().signIn(withEmail: email, password: password)
    } else if let token = secret("--custom-token-file") {
        result = try await Auth.auth().signIn(withCustomToken: token)
    } else {
        result = try await Auth.auth().signInAnonymously()
    }
    show("uid", result.user.uid)
    show("currentUser", Auth.auth().currentUser?.uid)
    show("isAnonymous", result.user.isAnonymous)
} catch {
    let error = error as NSError
    fail("sign-in refused (\(error.domain) \(error.code)): \(error.localizedDescription)")
}

let storage = Storage.storage()
// "{uid}" in FOLDER is the signed-in user's uid.
let storageRef = storage.reference().child(folder.replacingOccurrences(of: "{uid}", with: Auth.auth().currentUser?.uid ?? ""))

let samples: [String: [(StorageReference) async -> Void]] = [
    "upload": [UploadSamples.uploadFromData, UploadSamples.uploadFromFile, UploadSamples.uploadAsync],
    "download": [DownloadSamples.downloadInMemory, DownloadSamples.downloadToFile, DownloadSamples.downloadAsync],
    "metadata": [MetadataSamples.run], "list": [ListSamples.run], "delete": [DeleteSamples.run],
    "task": [TaskSamples.run], "download-task": [DownloadSamples.observedDownload],
    "max-size": [DownloadSamples.maxSize], "refused": [ErrorSamples.refused], "signed-out": [ErrorSamples.signedOut],
]
guard let chosen = samples[sample] else { fail("no sample named \(sample)") }
for run in chosen { await run(storageRef) }
