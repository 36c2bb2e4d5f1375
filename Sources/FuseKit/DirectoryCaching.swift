/// What the kernel may do with a directory's entries for one open directory handle, asked as
/// `opendir` is answered (FOPEN_CACHE_DIR and FOPEN_KEEP_CACHE). The kernel's readdir cache
/// holds names, numbers and types, never attributes: those keep their own timeouts.
public enum DirectoryCaching: Sendable, Equatable {
    /// Every readdir reaches the filesystem; nothing is cached.
    case none
    /// The kernel drops what it cached for the directory and caches what this handle reads.
    case fill
    /// The kernel answers readdir from what it cached, which the filesystem vouches is what it
    /// would answer now; what is missing (pages the kernel dropped) is read through this handle.
    case keep
}
