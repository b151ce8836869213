/* rng.c - Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11), the generator of Random123, cuRAND and PyTorch's CUDA dropout.
 * Counter-based: the i-th block is philox(i, key), so any element is drawn alone. */
#include "attnfuzz/rng.h"

#include <math.h>

#define AF_PHILOX_M0 0xD2511F53u
#define AF_PHILOX_M1 0xCD9E8D57u
#define AF_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define AF_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

void af_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)AF_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)AF_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += AF_PHILOX_W0;
        k1 += AF_PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void af_philox_at(uint64_t seed, uint32_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, 0x41465a5au};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    af_philox4x32(ctr, key, out);
}

double af_u53(uint32_t hi, uint32_t lo) {
    uint64_t bits = ((uint64_t)hi << 21) ^ (uint64_t)(lo >> 11);
    return (double)(bits & ((1ull << 53) - 1)) * 0x1p-53;
}

uint32_t af_dropout_word(uint64_t seed, uint32_t b, uint32_t h, uint32_t i, uint32_t j) {
    uint32_t ctr[4] = {j >> 2, i, h, b};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    af_philox4x32(ctr, key, w);
    return w[j & 3u];
}

uint64_t af_dropout_threshold(double p) {
    if (!(p > 0.0)) return 0;            /* also NaN */
    if (p >= 1.0) return (uint64_t)1 << 32; /* no 32-bit word reaches it */
    /* keep <=> word * 2^-32 >= p <=> word >= ceil(p * 2^32) (exact: p * 2^32 is exact) */
    return (uint64_t)ceil(p * 0x1p32);
}

void af_dropout_row(uint64_t seed, uint64_t threshold, uint32_t b, uint32_t h, uint32_t i,
                    uint32_t j0, uint32_t n, uint8_t *keep) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    uint32_t block = UINT32_MAX;
    for (uint32_t t = 0; t < n; t++) {
        uint32_t j = j0 + t;
        if ((j >> 2) != block) {
            block = j >> 2;
            uint32_t ctr[4] = {block, i, h, b};
            af_philox4x32(ctr, key, w);
        }
        keep[t] = (uint64_t)w[j & 3u] >= threshold;
    }
}

void af_rng_init(af_rng *r, uint64_t seed, uint32_t stream) {
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = 0;
    r->ctr[2] = stream;
    r->ctr[3] = 0x53545245u; /* domain tag: sequential streams */
    r->used = 4;
}

uint32_t af_rng_u32(af_rng *r) {
    if (r->used == 4) {
        af_philox4x32(r->ctr, r->key, r->buf);
        if (++r->ctr[0] == 0) ++r->ctr[1];
        r->used = 0;
    }
    return r->buf[r->used++];
}

uint64_t af_rng_u64(af_rng *r) {
    uint64_t hi = af_rng_u32(r);
    return (hi << 32) | af_rng_u32(r);
}

uint32_t af_rng_below(af_rng *r, uint32_t n) {
    if (n == 0) return 0;
    /* Rejection sampling: draw from the largest multiple of n below 2^32. */
    uint32_t limit = (uint32_t)(0x100000000ull - (0x100000000ull % n));
    for (;;) {
        uint32_t x = af_rng_u32(r);
        if (limit == 0 || x < limit) return x % n; /* limit 0: n divides 2^32 */
    }
}

int64_t af_rng_range(af_rng *r, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    if (span > UINT32_MAX) return lo + (int64_t)(af_rng_u64(r) % span);
    return lo + (int64_t)af_rng_below(r, (uint32_t)span);
}

double af_rng_uniform(af_rng *r) {
    uint32_t hi = af_rng_u32(r);
    return af_u53(hi, af_rng_u32(r));
}

double af_rng_normal(af_rng *r) {
    double u1 = af_rng_uniform(r);
    double u2 = af_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

bool af_rng_chance(af_rng *r, uint32_t num, uint32_t den) { return af_rng_below(r, den) < num; }

unsigned af_rng_pick(af_rng *r, const unsigned *w, unsigned n) {
    unsigned total = 0;
    for (unsigned i = 0; i < n; i++) total += w[i];
    unsigned x = af_rng_below(r, total);
    for (unsigned i = 0; i < n; i++) {
        if (x < w[i]) return i;
        x -= w[i];
    }
    return n - 1;
}
