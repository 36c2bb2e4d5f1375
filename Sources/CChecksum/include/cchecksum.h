#ifndef BUCKETFS_CCHECKSUM_H
#define BUCKETFS_CCHECKSUM_H
#include <stddef.h>
#include <stdint.h>

/// CRC-32C (Castagnoli) over `len` bytes, continuing from `crc` (pass 0 to start; the result is
/// the finished checksum, pre- and post-inverted as Cloud Storage computes it). Uses the SSE4.2
/// crc32 instruction when the CPU has it, else slicing-by-8 tables.
uint32_t bucketfs_crc32c(uint32_t crc, const void *data, size_t len);

/// The CRC-32C of A followed by B, from crc(A), crc(B) and B's length: parts of an object checked
/// as they arrive, in any order, give the whole object's checksum.
uint32_t bucketfs_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

#endif
