// "Handle errors" of the guides: a refusal of the Security Rules, as the SDK reports it.
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
}
