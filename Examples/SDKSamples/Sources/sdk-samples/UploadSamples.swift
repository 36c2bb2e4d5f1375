// The guide "Upload files with Cloud Storage on Apple platforms", as written there.
import FirebaseStorage
import Foundation

enum UploadSamples {
    // Upload from data in memory
    static func uploadFromData(_ storageRef: StorageReference) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Data in memory
            let data = Data("rivers, 20 bytes....".utf8)

            // Create a reference to the file you want to upload
            let riversRef = storageRef.child("images/rivers.jpg")

            // Upload the file to the path "images/rivers.jpg"
            let uploadTask = riversRef.putData(data, metadata: nil) { (metadata, error) in
                guard let metadata = metadata else {
                    // Uh-oh, an error occurred!
                    show("putData error", error)
                    done.resume()
                    return
                }
                // Metadata contains file metadata such as size, content-type.
                let size = metadata.size
                show("putData size", size)
                show("putData contentType", metadata.contentType)
                // You can also access to download URL after upload.
                riversRef.downloadURL { (url, error) in
                    guard let downloadURL = url else {
                        // Uh-oh, an error occurred!
                        show("downloadURL error", error)
                        done.resume()
                        return
                    }
                    show("downloadURL", downloadURL)
                    done.resume()
                }
            }
            _ = uploadTask
        }
    }

    // Upload from a local file, with metadata
    static func uploadFromFile(_ storageRef: StorageReference) async {
        let localFile = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("sdk-samples-mountains-\(getpid()).jpg")
        try? Data(repeating: 7, count: 1000).write(to: localFile)
        defer { try? FileManager.default.removeItem(at: localFile) }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Create a reference to the file you want to upload
            let mountainsRef = storageRef.child("images/mountains.jpg")

            // Create file metadata including the content type
            let metadata = StorageMetadata()
            metadata.contentType = "image/jpeg"
            metadata.customMetadata = ["location": "Yosemite, CA, USA"]

            // Upload the file to the path "images/mountains.jpg"
            mountainsRef.putFile(from: localFile, metadata: metadata) { metadata, error in
                guard let metadata = metadata else {
                    show("putFile error", error)
                    done.resume()
                    return
                }
                show("putFile", "\(metadata.path ?? "nil"), \(metadata.size) bytes, \(metadata.contentType ?? "nil"), location=\(metadata.customMetadata?["location"] ?? "nil")")
                done.resume()
            }
        }
    }

    // The async form
    static func uploadAsync(_ storageRef: StorageReference) async {
        let ref = storageRef.child("images/async.txt")
        do {
            let metadata = StorageMetadata()
            metadata.contentType = "text/plain"
            var fractions: [Double] = []
            let resultMetadata = try await ref.putDataAsync(Data("uploaded with putDataAsync".utf8), metadata: metadata) { progress in
                if let progress { fractions.append(progress.fractionCompleted) }
            }
            show("putDataAsync", "\(resultMetadata.name ?? "nil"), \(resultMetadata.size) bytes, \(resultMetadata.contentType ?? "nil")")
            show("putDataAsync last progress", fractions.last)
        } catch {
            show("putDataAsync error", error)
        }
    }
}
