/// What the kernel's page cache may keep for a new file handle. Pure rules; the superblock asks
/// them as it opens a handle (it knows the other handles of the file).
enum PageCachePolicy {
    /// Whether a new handle bypasses the kernel's page cache (`FOPEN_DIRECT_IO`). A write-only
    /// handle does when nothing else has the file open: its writes then reach the stage file with
    /// one copy fewer and no page cache of the mount's own (docs/BENCHMARKS.md, the writes
    /// bench). Any handle opened while such a one is open does too, so that no reader keeps
    /// pages the direct writes would leave stale. A handle opened while another handle with
    /// cached pages is open keeps the page cache, which keeps the two coherent.
    /// With `directReads` (`--direct-io`), a handle reading the bucket's bytes (`readsBucket`: not
    /// a writer, no local content, not a file complete in the read cache, which the kernel may
    /// read itself) bypasses it too.
    static func directIO(writeOnly: Bool, others: [Handle], directReads: Bool = false, readsBucket: Bool = false) -> Bool {
        others.contains { $0.directIO } || (writeOnly && others.isEmpty) || (directReads && readsBucket)
    }

    /// Close-to-open for the pages the kernel keeps: a handle reading generation `opening` of a
    /// file not staged here keeps them when `cached`, the generation opened for reading last, is
    /// the same; anything else (writing, local content, another generation) drops them. Returns
    /// the choice and the generation the cache holds afterwards.
    static func keepCache(cached: Int64?, opening: Int64?) -> (keep: Bool, cachedAfter: Int64?) {
        guard let g = opening else { return (false, nil) }
        return (cached == g, g)
    }
}
