// The guide "Delete files with Cloud Storage on Apple platforms", as written there.
import FirebaseStorage
import Foundation

enum DeleteSamples {
    static func run(_ storageRef: StorageReference) async {
        // Create a reference to the file to delete
        let desertRef = storageRef.child("images/desert.jpg")
        _ = try? await desertRef.putDataAsync(Data("desert".utf8))

        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Delete the file
            desertRef.delete { error in
                if let error = error {
                    // Uh-oh, an error occurred!
                    show("delete error", error)
                } else {
                    // File deleted successfully
                    show("deleted", desertRef.fullPath)
                }
                done.resume()
            }
        }
        // It is gone: the SDK's error for a missing object.
        do {
            _ = try await desertRef.getMetadata()
            show("after delete", "still there")
        } catch {
            let error = error as NSError
            show("after delete code", StorageErrorCode(rawValue: error.code).map { "\($0)" })
        }
    }
}
