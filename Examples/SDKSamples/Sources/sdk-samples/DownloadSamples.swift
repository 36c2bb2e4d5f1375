// The guide "Download files with Cloud Storage on Apple platforms", as written there.
import FirebaseStorage
import Foundation

enum DownloadSamples {
    // Download in memory
    static func downloadInMemory(_ storageRef: StorageReference) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Create a reference to the file you want to download
            let islandRef = storageRef.child("images/island.jpg")

            // Download in memory with a maximum allowed size of 1MB (1 * 1024 * 1024 bytes)
            islandRef.getData(maxSize: 1 * 1024 * 1024) { data, error in
                if let error = error {
                    // Uh-oh, an error occurred!
                    show("getData error", error)
                } else {
                    // Data for "images/island.jpg" is returned
                    show("getData", String(decoding: data!, as: UTF8.self))
                }
                done.resume()
            }
        }
    }

    // Download to a local file
    static func downloadToFile(_ storageRef: StorageReference) async {
        let localURL = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("sdk-samples-island-\(getpid()).jpg")
        defer { try? FileManager.default.removeItem(at: localURL) }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Create a reference to the file you want to download
            let islandRef = storageRef.child("images/island.jpg")

            // Download to the local filesystem
            let downloadTask = islandRef.write(toFile: localURL) { url, error in
                if let error = error {
                    show("write error", error)
                } else {
                    // Local file URL for "images/island.jpg" is returned
                    let text = (try? String(contentsOf: url!, encoding: .utf8)) ?? "unreadable"
                    show("write", text)
                }
                done.resume()
            }
            downloadTask.observe(.success) { snapshot in
                show("write progress", "\(snapshot.progress?.completedUnitCount ?? -1)/\(snapshot.progress?.totalUnitCount ?? -1)")
            }
        }
    }

    // The async forms
    static func downloadAsync(_ storageRef: StorageReference) async {
        let islandRef = storageRef.child("images/island.jpg")
        do {
            let data = try await islandRef.data(maxSize: 1 * 1024 * 1024)
            show("data(maxSize:)", data.count)
            let url = try await islandRef.downloadURL()
            show("downloadURL", url)
        } catch {
            show("async error", error)
        }
    }

    // A larger object than maxSize is refused before it is read.
    static func maxSize(_ storageRef: StorageReference) async {
        let big = storageRef.child("images/big.bin")
        do {
            _ = try await big.data(maxSize: 1024)
            show("data(maxSize:)", "no error")
        } catch let error as StorageError {
            if case let .downloadSizeExceeded(total, maxSize) = error {
                show("downloadSizeExceeded", "total=\(total) maxSize=\(maxSize)")
            }
            let nsError = error as NSError
            show("domain", nsError.domain)
            show("code", StorageErrorCode(rawValue: nsError.code).map { "\($0)" })
        } catch {
            show("other error", error)
        }
    }

    // "Monitor download progress" and "Manage downloads": a download task observed, paused at its
    // first progress and resumed from the pause's observer.
    static func observedDownload(_ storageRef: StorageReference) async {
        let localURL = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("sdk-samples-large-\(getpid()).bin")
        defer { try? FileManager.default.removeItem(at: localURL) }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            // Start the download (in this case writing to a file)
            let downloadTask = storageRef.child("images/large.bin").write(toFile: localURL)
            var paused = false
            var progressEvents = 0
            // Observe changes in status
            downloadTask.observe(.resume) { snapshot in
                // Download resumed, also fires when the download starts
                show("download resumed", snapshot.status == .resume)
            }
            downloadTask.observe(.pause) { snapshot in
                // Download paused
                show("download paused at", snapshot.progress?.completedUnitCount)
                downloadTask.resume()
            }
            downloadTask.observe(.progress) { snapshot in
                // Download reported progress
                let percentComplete = 100.0 * Double(snapshot.progress!.completedUnitCount)
                    / Double(snapshot.progress!.totalUnitCount)
                progressEvents += 1
                if !paused, percentComplete < 100 {
                    paused = true
                    downloadTask.pause()
                }
            }
            downloadTask.observe(.success) { _ in
                // Download completed successfully
                let data = (try? Data(contentsOf: localURL)) ?? Data()
                let sum = data.reduce(UInt32(0)) { $0 &+ UInt32($1) }
                show("download progress events", progressEvents)
                show("downloaded", "\(data.count) bytes, sum \(sum)")
                done.resume()
            }
            downloadTask.observe(.failure) { snapshot in
                show("download failure", snapshot.error)
                done.resume()
            }
        }
    }
}
