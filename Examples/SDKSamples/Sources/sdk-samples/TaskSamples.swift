// "Manage uploads" and "Monitor upload progress" of the upload guide: an upload task observed,
// paused, resumed and cancelled, as written there.
import FirebaseStorage
import Foundation

enum TaskSamples {
    static func run(_ storageRef: StorageReference) async {
        // Small chunks, so that the progress and the pause fall between requests.
        storageRef.storage.uploadChunkSizeBytes = 256 * 1024
        let data = Data((0..<(2 * 1024 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let paused = await observedUpload(storageRef.child("images/space.bin"), data)
        show("paused at", paused)
        await cancelledUpload(storageRef.child("images/cancelled.bin"), data)
    }

    static func observedUpload(_ ref: StorageReference, _ data: Data) async -> Int64 {
        await withCheckedContinuation { (done: CheckedContinuation<Int64, Never>) in
            var pausedAt: Int64 = -1
            var progressEvents = 0
            // Upload file and metadata to the object 'images/space.bin'
            let uploadTask = ref.putData(data, metadata: nil)

            // Listen for state changes, errors, and completion of the upload.
            uploadTask.observe(.resume) { snapshot in
                // Upload resumed, also fires when the upload starts
                show("resumed", snapshot.status == .resume)
            }
            uploadTask.observe(.pause) { snapshot in
                // Upload paused
                pausedAt = snapshot.progress?.completedUnitCount ?? -1
                show("paused", snapshot.status == .pause)
                // Resume the upload
                uploadTask.resume()
            }
            uploadTask.observe(.progress) { snapshot in
                // Upload reported progress
                let percentComplete = 100.0 * Double(snapshot.progress!.completedUnitCount)
                    / Double(snapshot.progress!.totalUnitCount)
                progressEvents += 1
                if progressEvents == 2 {
                    // Pause the upload
                    uploadTask.pause()
                }
                _ = percentComplete
            }
            uploadTask.observe(.success) { snapshot in
                // Upload completed successfully
                show("progress events", progressEvents)
                show("uploaded", "\(snapshot.metadata?.path ?? "nil"), \(snapshot.metadata?.size ?? -1) bytes, md5 \(snapshot.metadata?.md5Hash ?? "nil")")
                done.resume(returning: pausedAt)
            }
            uploadTask.observe(.failure) { snapshot in
                show("failure", snapshot.error)
                done.resume(returning: pausedAt)
            }
        }
    }

    static func cancelledUpload(_ ref: StorageReference, _ data: Data) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let uploadTask = ref.putData(data, metadata: nil)
            uploadTask.observe(.progress) { _ in
                // Cancel the upload
                uploadTask.cancel()
            }
            uploadTask.observe(.success) { _ in
                show("cancelled upload", "succeeded")
                done.resume()
            }
            uploadTask.observe(.failure) { snapshot in
                if let error = snapshot.error as? NSError {
                    switch StorageErrorCode(rawValue: error.code)! {
                    case .objectNotFound:
                        // File doesn't exist
                        show("cancelled upload", "objectNotFound")
                    case .unauthorized:
                        // User doesn't have permission to access file
                        show("cancelled upload", "unauthorized")
                    case .cancelled:
                        // User canceled the upload
                        show("cancelled upload", "cancelled")
                    case .unknown:
                        // Unknown error occurred, inspect the server response
                        show("cancelled upload", "unknown")
                    default:
                        // A separate error occurred. This is a good place to retry the upload.
                        show("cancelled upload", "other")
                    }
                }
                done.resume()
            }
        }
    }
}
