// "Handle errors" of the guides: a refusal of the Security Rules, as the SDK reports it.
import FirebaseAuth
import FirebaseStorage
import Foundation

enum ErrorSamples {
    static func refused(_ ref: StorageReference) async {
        do {
            _ = try await ref.putDataAsync(Data("not allowed here".utf8))
            show("refused", "no error")
        } catch let error as StorageError {
            switch error {
            case let .unauthorized(bucket, object, serverError):
                show("unauthorized bucket", bucket)
                show("unauthorized object", object)
                show("server said", serverError["ResponseBody"])
            default:
                show("other StorageError", error)
            }
            let nsError = error as NSError
            show("domain", nsError.domain)
            show("code", nsError.code)
            show("description", nsError.localizedDescription)
        } catch {
            show("other error", error)
        }
    }

    // Signed out: requests go without a user, and the rules decide (a public read is let through).
    static func signedOut(_ ref: StorageReference) async {
        do {
            try Auth.auth().signOut()
        } catch {
            show("signOut error", error)
        }
        show("signed out", Auth.auth().currentUser == nil)
        do {
            let data = try await ref.storage.reference(withPath: "public/hello.txt").data(maxSize: 1024)
            show("public read", String(decoding: data, as: UTF8.self))
        } catch {
            show("public read error", error)
        }
        do {
            _ = try await ref.getMetadata()
            show("private read", "allowed")
        } catch StorageError.unauthorized(_, let object, _) {
            show("private read refused", object)
        } catch {
            show("private read error", error)
        }
    }
}
