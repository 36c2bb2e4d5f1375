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

/* Polynomial arithmetic modulo the CRC's polynomial, bit-reflected (x^0 is the top bit), as in
   zlib's crc32.c since 1.2.12. Appending n zero bytes to a raw (not inverted) CRC register
   multiplies it by x^(8n) mod P. */
#define POLY 0x82F63B78u

static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(2^k) mod P for k = 0..31. */
static uint32_t x2n_table[32];
static int x2n_ready;

static void build_x2n(void) {
    uint32_t p = (uint32_t)1 << 30; /* x^1 */
    x2n_table[0] = p;
    for (int n = 1; n < 32; n++) x2n_table[n] = p = multmodp(p, p);
    __atomic_store_n(&x2n_ready, 1, __ATOMIC_RELEASE);
}

/* x^(n * 2^k) mod P. */
static uint32_t x2nmodp(uint64_t n, unsigned k) {
    if (!__atomic_load_n(&x2n_ready, __ATOMIC_ACQUIRE)) build_x2n();
    uint32_t p = (uint32_t)1 << 31; /* x^0 */
    while (n) {
        if (n & 1) p = multmodp(x2n_table[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

#if defined(__x86_64__)
/* The crc32 instruction takes 3 cycles and can start one a cycle: three independent lanes over
   three neighbouring blocks, joined by shifting the earlier lanes past the later blocks, run
   about three times as fast as one chain. */
#define LANE 4096

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n) {
    uint64_t c0 = c;
    if (n >= 3 * LANE) {
        uint32_t shift = x2nmodp(LANE, 3); /* x^(8 * LANE) */
        do {
            uint64_t c1 = 0, c2 = 0;
            for (const uint8_t *end = p + LANE; p < end; p += 8) {
                uint64_t v0, v1, v2;
                memcpy(&v0, p, 8);
                memcpy(&v1, p + LANE, 8);
                memcpy(&v2, p + 2 * LANE, 8);
                c0 = __builtin_ia32_crc32di(c0, v0);
                c1 = __builtin_ia32_crc32di(c1, v1);
                c2 = __builtin_ia32_crc32di(c2, v2);
            }
            c0 = multmodp(shift, (uint32_t)c0) ^ (uint32_t)c1;
            c0 = multmodp(shift, (uint32_t)c0) ^ (uint32_t)c2;
            p += 2 * LANE;
            n -= 3 * LANE;
        } while (n >= 3 * LANE);
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c0 = __builtin_ia32_crc32di(c0, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c0;
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

/* CRC combination: crc(A + B) = crc(A) * x^(8 * len(B)) + crc(B) mod P (the pre- and
   post-inversions cancel out). */
uint32_t bucketfs_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    return multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
}
