/* rng.h - counter-based randomness (Philox4x32-10, Salmon et al., SC'11).
 *
 * Everything random in a case is a pure function of a seed and a counter, so a tiled
 * kernel, an untiled one and a Python worker reproduce the same numbers. Dropout, in
 * particular, is defined as:
 *
 *     w = philox4x32_10(counter = {j / 4, i, h, b}, key = {seed & 0xffffffff, seed >> 32})
 *     u(seed, b, h, i, j) = w[j % 4] * 2^-32          keep  <=>  u >= p
 *
 * (b batch, h query head, i query position, j key position; all uint32). */
#ifndef ATTNFUZZ_RNG_H
#define ATTNFUZZ_RNG_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: out = philox(ctr, key). */
void af_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Block `index` of stream `stream` under seed: the random words of element-indexed data
 * (tensor values), so any element is drawn without drawing the others. */
void af_philox_at(uint64_t seed, uint32_t stream, uint64_t index, uint32_t out[4]);

/* 53-bit uniform in [0, 1) from two words. */
double af_u53(uint32_t hi, uint32_t lo);

/* The dropout uniform u(seed, b, h, i, j) as a raw 32-bit word (u = word * 2^-32). */
uint32_t af_dropout_word(uint64_t seed, uint32_t b, uint32_t h, uint32_t i, uint32_t j);

/* Smallest 32-bit word that is kept for probability p: keep <=> word >= threshold.
 * p <= 0 keeps all (threshold 0); p >= 1 keeps none (returns UINT64 above 2^32-1). */
uint64_t af_dropout_threshold(double p);

/* Fills keep[0..n) for keys j0..j0+n-1 of row (b, h, i): 1 kept, 0 dropped. */
void af_dropout_row(uint64_t seed, uint64_t threshold, uint32_t b, uint32_t h, uint32_t i,
                    uint32_t j0, uint32_t n, uint8_t *keep);

/* A sequential stream over Philox: (key, counter) advance one block at a time. */
typedef struct af_rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4];
    unsigned used; /* words of buf already handed out */
} af_rng;

/* Stream `stream` of seed: different streams never overlap. */
void af_rng_init(af_rng *r, uint64_t seed, uint32_t stream);
uint32_t af_rng_u32(af_rng *r);
uint64_t af_rng_u64(af_rng *r);
/* Uniform in [0, n) by rejection sampling (no modulo bias); n == 0 returns 0. */
uint32_t af_rng_below(af_rng *r, uint32_t n);
/* Uniform in [lo, hi] inclusive. */
int64_t af_rng_range(af_rng *r, int64_t lo, int64_t hi);
/* Uniform double in [0, 1) with 53 random bits. */
double af_rng_uniform(af_rng *r);
/* Standard normal (Box-Muller on 53-bit uniforms). */
double af_rng_normal(af_rng *r);
/* True with probability num/den. */
bool af_rng_chance(af_rng *r, uint32_t num, uint32_t den);
/* Index i of w[0..n) with probability w[i] / sum(w) (one af_rng_below draw). */
unsigned af_rng_pick(af_rng *r, const unsigned *w, unsigned n);
/* af_rng_pick over literal weights: AF_RNG_PICK(r, 3, 1, 1). */
#define AF_RNG_PICK(r, ...)                                                                                            \
    af_rng_pick((r), (const unsigned[]){__VA_ARGS__}, sizeof((const unsigned[]){__VA_ARGS__}) / sizeof(unsigned))

#ifdef __cplusplus
}
#endif
#endif
