#include "cchecksum.h"
#include <string.h>

static uint32_t table[8][256];
static int table_ready;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
    __atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t n) {
    if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE)) build_table();
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= c;
        c = table[7][v & 0xFF] ^ table[6][(v >> 8) & 0xFF] ^ table[5][(v >> 16) & 0xFF] ^ table[4][(v >> 24) & 0xFF]
          ^ table[3][(v >> 32) & 0xFF] ^ table[2][(v >> 40) & 0xFF] ^ table[1][(v >> 48) & 0xFF] ^ table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t bucketfs_crc32c(uint32_t crc, const void *data, size_t len) {
    uint32_t c = ~crc;
    const uint8_t *p = (const uint8_t *)data;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) return ~crc_hw(c, p, len);
#endif
    return ~crc_soft(c, p, len);
}

/* CRC combination (zlib's crc32_combine, for the Castagnoli polynomial): appending len2 zero
   bits is a linear map over GF(2), applied by squaring a 32x32 operator matrix. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

uint32_t bucketfs_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    uint32_t even[32], odd[32];
    if (len2 == 0) return crc1;
    odd[0] = 0x82F63B78u; /* the operator for one zero bit */
    uint32_t row = 1;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four zero bits */
    do {
        gf2_square(even, odd);
        if (len2 & 1) crc1 = gf2_times(even, crc1);
        len2 >>= 1;
        if (len2 == 0) break;
        gf2_square(odd, even);
        if (len2 & 1) crc1 = gf2_times(odd, crc1);
        len2 >>= 1;
    } while (len2 != 0);
    return crc1 ^ crc2;
}
