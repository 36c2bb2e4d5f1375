// The guide "Use file metadata with Cloud Storage on Apple platforms", as written there.
import FirebaseStorage
import Foundation

enum MetadataSamples {
    static func run(_ storageRef: StorageReference) async {
        // The guide's forest exists before it starts.
        let forestRef = storageRef.child("images/forest.jpg")
        let upload = StorageMetadata()
        upload.contentType = "image/png"
        _ = try? await forestRef.putDataAsync(Data(repeating: 7, count: 3000), metadata: upload)

        // Get file metadata
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            forestRef.getMetadata { metadata, error in
                if let error = error {
                    show("getMetadata error", error)
                } else {
                    // Metadata now contains the metadata for 'images/forest.jpg'
                    show("metadata.name", metadata?.name)
                    show("metadata.size", metadata?.size)
                    show("metadata.contentType", metadata?.contentType)
                    show("metadata.isFile", metadata?.isFile)
                }
                done.resume()
            }
        }

        // Update file metadata
        // Create file metadata to update
        let newMetadata = StorageMetadata()
        newMetadata.cacheControl = "public,max-age=300"
        newMetadata.contentType = "image/jpeg"
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Update metadata properties
            forestRef.updateMetadata(newMetadata) { metadata, error in
                if let error = error {
                    show("updateMetadata error", error)
                } else {
                    // Updated metadata for 'images/forest.jpg' is returned
                    show("updated.cacheControl", metadata?.cacheControl)
                    show("updated.contentType", metadata?.contentType)
                }
                done.resume()
            }
        }

        // Delete the metadata property
        let deleting = StorageMetadata()
        deleting.contentType = nil
        do {
            let updated = try await forestRef.updateMetadata(deleting)
            show("deleted.contentType", updated.contentType)
            show("deleted.cacheControl", updated.cacheControl)
        } catch {
            show("delete property error", error)
        }

        // Custom metadata, set with the update's Result form
        let withCustom = StorageMetadata()
        withCustom.customMetadata = ["location": "Yosemite, CA, USA", "activity": "Hiking"]
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            forestRef.updateMetadata(withCustom) { (result: Result<StorageMetadata, Error>) in
                switch result {
                case .success(let updated):
                    let pairs = (updated.customMetadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    show("customMetadata", pairs.joined(separator: ","))
                case .failure(let error):
                    show("custom metadata error", error)
                }
                done.resume()
            }
        }
    }
}
