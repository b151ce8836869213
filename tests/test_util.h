/* test_util.h - helpers shared by the unit tests: the iteration scale and a random
 * source independent of the library's RNG. */
#ifndef ATTNFUZZ_TEST_UTIL_H
#define ATTNFUZZ_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* AF_TEST_SCALE (default 1) scales long loops down, e.g. for the sanitizer build. */
static inline double test_scale(void) {
    const char *s = getenv("AF_TEST_SCALE");
    double x = s ? atof(s) : 1.0;
    return x > 0.0 ? x : 1.0;
}

/* n scaled, but never below floor. */
static inline size_t scaled_at_least(size_t n, size_t floor) {
    double x = (double)n * test_scale();
    return x < (double)floor ? floor : (size_t)x;
}

/* xorshift64* (Vigna) */
typedef struct xorshift {
    uint64_t s;
} xorshift;

static inline uint64_t xs_next(xorshift *x) {
    x->s ^= x->s >> 12;
    x->s ^= x->s << 25;
    x->s ^= x->s >> 27;
    return x->s * 0x2545F4914F6CDD1Dull;
}

#endif
