import Foundation

/// The Apple SDK's `StorageTaskStatus`: what a task observer is called for.
public enum StorageTaskStatus: Int {
    case unknown
    case resume
    case progress
    case pause
    case success
    case failure
}
