import ArgumentParser
import BucketFS
import Foundation
import ObjectStores
import StorageModel

/// The warnings about local files others can read (docs/SECURITY.md): bucketfs makes its
/// directories 0700 and its files 0600, but an embedded bucket or a cache directory made by an
/// older version (or opened up by hand), or a log file that already existed, keeps its mode.
/// Each is named once, on standard error, with the `chmod` that fixes it; `--allow-shared-files`
/// silences them (and changes no mode).
enum SharedFiles {
    static let help: ArgumentHelp = "Do not warn when other users can read the embedded bucket, the cache directory or the log files (bucketfs still creates its own files 0600 and directories 0700)."

    static func warn(_ text: String?) {
        guard let text else { return }
        FileHandle.standardError.write(Data("bucketfs: warning: \(text)\n".utf8))
    }

    static func warnAboutBucket(_ directory: String) {
        warn(PrivateFiles.warning("the embedded bucket \(directory)", root: directory,
                                  exposed: EmbeddedStore.exposedFiles(directory: directory)))
    }
}

extension Mount {
    /// Before a mount starts: the cache directory exists (0700 if made now) and is ours; it, a log
    /// file or a request log that already existed, if others can read them, get one warning each.
    func checkLocalFiles() throws {
        do { try StagingArea.prepare(cacheDirectory) } catch {
            FileHandle.standardError.write(Data("bucketfs: \(error)\n".utf8))
            throw ExitCode(1)
        }
        // A pre-mounted target's cache directory is the pod's own, made by the sidecar with the
        // default umask: made private here rather than warned about (docs/KUBERNETES.md).
        if target.isPreMounted, StagingArea.exposedFiles(cacheDirectory).contains(where: { $0.path == cacheDirectory }) {
            _ = chmod(cacheDirectory, 0o700)
        }
        guard !allowSharedFiles else { return }
        let cache = cacheDirectory
        SharedFiles.warn(PrivateFiles.warning("the cache directory \(cache) (staged writes, lost+found, the log)", root: cache,
                                              exposed: StagingArea.exposedFiles(cache)))
        for (what, path) in [("the log file", foreground ? nil : logFile), ("the request log", requestLog)] {
            guard let path else { continue }
            SharedFiles.warn(PrivateFiles.warning("\(what) \(path)", root: path, exposed: PrivateFiles.exposed([path]),
                                                  recursive: false))
        }
    }
}
