import CTestDefaults
import Foundation

/// What the Swift test bundle set for itself when it was loaded (Tests/CTestDefaults/defaults.c;
/// docs/TESTING.md, "The environment of the Swift tests").
public enum TestBundle {
    /// How many tests run at once.
    public static var parallelWidth: Int { Int(bucketfs_tests_parallel_width()) }
    /// The empty directory HOME names for the whole run.
    public static var home: String { String(cString: bucketfs_tests_home()) }
    /// The variables no test may find in its environment unless it set them itself.
    public static let removedNames = ["SSL_CERT_FILE", "SSL_CERT_DIR", "STORAGE_EMULATOR_HOST", "BUCKETFS_OAUTH_TOKEN_URL",
                                             "BUCKETFS_IAM_CREDENTIALS_URL"]
    public static let removedPrefixes = ["GOOGLE_", "FIREBASE_", "CLOUDSDK_", "GCE_", "XDG_"]
}
