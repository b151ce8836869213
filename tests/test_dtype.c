/* test_dtype.c - exact conversions of dtype.c against known bit patterns, an independent
 * integer-arithmetic rounding written here, and exhaustive round trips.
 *
 * The reference rounding (ref_round) decomposes a double into its 53-bit integer
 * significand and exponent and applies round-to-nearest-even with integer shifts, so it
 * shares no code path with the library's scale-and-nearbyint (af_round_f64) or its
 * add-and-mask bit tricks (af_round_f32, af_round_tf32). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/dtype.h"

/* --- helpers --------------------------------------------------------------------- */

static size_t scaled(size_t n) { return scaled_at_least(n, 1); }

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}
static double bits_f64(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Independent RNE of a double to a binary format with `mant` explicit mantissa bits,
 * smallest normal exponent emin and largest finite `max`. Integer arithmetic only. */
static double ref_round(double x, int mant, int emin, double max) {
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    uint64_t u = f64_bits(x);
    int sign = (int)(u >> 63);
    int ef = (int)((u >> 52) & 0x7ff);
    uint64_t m = u & ((1ull << 52) - 1);
    int e; /* |x| = m * 2^e with m an integer */
    if (ef == 0) {
        e = -1074;
    } else {
        m |= 1ull << 52;
        e = ef - 1075;
    }
    /* floor(log2 |x|) */
    int lg = 63 - __builtin_clzll(m) + e;
    int qe = (lg < emin ? emin : lg) - mant; /* exponent of the target quantum */
    int shift = qe - e;
    double r;
    if (shift <= 0) {
        r = fabs(x); /* already a multiple of the quantum */
    } else if (shift > 64) {
        r = 0.0; /* below a quarter quantum */
    } else {
        uint64_t kept = shift == 64 ? 0 : m >> shift;
        uint64_t rem = shift == 64 ? m : m & ((1ull << shift) - 1);
        uint64_t half = 1ull << (shift - 1);
        if (rem > half || (rem == half && (kept & 1))) kept++;
        r = ldexp((double)kept, qe);
    }
    if (r > max) r = INFINITY;
    return sign ? -r : r;
}

static double ref_f16(double x) { return ref_round(x, 10, -14, 65504.0); }
static double ref_bf16(double x) { return ref_round(x, 7, -126, 0x1.fep127); }
static double ref_f32(double x) { return ref_round(x, 23, -126, 0x1.fffffep127); }
static double ref_tf32(double x) { return ref_round(x, 10, -126, 0x1.ffep127); }

/* Value of an f16 bit pattern by the textbook formula. */
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) {
        v = m ? NAN : INFINITY;
    } else if (e == 0) {
        v = ldexp((double)m, -24);
    } else {
        v = ldexp((double)(1024 + m), e - 25);
    }
    return s ? -v : v;
}

static double bf16_value(uint16_t b) {
    int s = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
    double v;
    if (e == 0xff) {
        v = m ? NAN : INFINITY;
    } else if (e == 0) {
        v = ldexp((double)m, -133);
    } else {
        v = ldexp((double)(128 + m), e - 134);
    }
    return s ? -v : v;
}

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
static int bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

/* Same double bit for bit (so -0.0 != 0.0), or both NaN. */
static int same_double(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return f64_bits(a) == f64_bits(b);
}

#define ASSERT_SAME(got, want)                                                                     \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        if (!same_double(g_, w_))                                                                  \
            fail_msg("%s = %a (%.17g), expected %a (%.17g)", #got, g_, g_, w_, w_);               \
    } while (0)

#define ASSERT_BITS(got, want)                                                                     \
    do {                                                                                           \
        unsigned g_ = (unsigned)(got), w_ = (unsigned)(want);                                      \
        if (g_ != w_) fail_msg("%s = 0x%04x, expected 0x%04x", #got, g_, w_);                      \
    } while (0)

/* --- f16 known values ------------------------------------------------------------ */

static void test_f16_known_bits(void **state) {
    (void)state;
    ASSERT_BITS(af_f16_from_f64(1.0), 0x3C00);
    ASSERT_BITS(af_f16_from_f64(-2.0), 0xC000);
    ASSERT_BITS(af_f16_from_f64(0.5), 0x3800);
    ASSERT_BITS(af_f16_from_f64(65504.0), 0x7BFF);     /* largest finite */
    ASSERT_BITS(af_f16_from_f64(65519.99), 0x7BFF);    /* below max + half ulp (65520) */
    ASSERT_BITS(af_f16_from_f64(65520.0), 0x7C00);     /* exact tie with "2^16": even -> Inf */
    ASSERT_BITS(af_f16_from_f64(-65520.0), 0xFC00);
    ASSERT_BITS(af_f16_from_f64(1e10), 0x7C00);
    ASSERT_BITS(af_f16_from_f64(0.0), 0x0000);
    ASSERT_BITS(af_f16_from_f64(-0.0), 0x8000);
    /* subnormals: quantum 2^-24 */
    ASSERT_BITS(af_f16_from_f64(0x1p-24), 0x0001);     /* smallest subnormal */
    ASSERT_BITS(af_f16_from_f64(0x1p-25), 0x0000);     /* tie between 0 and 2^-24: even 0 */
    ASSERT_BITS(af_f16_from_f64(-0x1p-25), 0x8000);    /* sign kept on underflow */
    ASSERT_BITS(af_f16_from_f64(0x1p-25 + 0x1p-60), 0x0001); /* just above the tie */
    ASSERT_BITS(af_f16_from_f64(0x1p-26), 0x0000);
    ASSERT_BITS(af_f16_from_f64(3 * 0x1p-25), 0x0002); /* 1.5 quanta: tie 1|2 -> even 2 */
    ASSERT_BITS(af_f16_from_f64(5 * 0x1p-25), 0x0002); /* 2.5 quanta: tie 2|3 -> even 2 */
    ASSERT_BITS(af_f16_from_f64(1023 * 0x1p-24), 0x03FF); /* largest subnormal */
    ASSERT_BITS(af_f16_from_f64(1023.5 * 0x1p-24), 0x0400); /* tie 0x3ff|0x400 -> even 0x400 */
    ASSERT_BITS(af_f16_from_f64(1023.25 * 0x1p-24), 0x03FF);
    ASSERT_BITS(af_f16_from_f64(0x1p-14), 0x0400);     /* smallest normal */
    /* ties between normals near 1: ulp 2^-10 above 1, 2^-11 below */
    ASSERT_BITS(af_f16_from_f64(1.0 + 0x1p-11), 0x3C00);     /* tie 0x3c00|0x3c01 -> even */
    ASSERT_BITS(af_f16_from_f64(1.0 + 3 * 0x1p-11), 0x3C02); /* tie 0x3c01|0x3c02 -> even */
    ASSERT_BITS(af_f16_from_f64(1.0 + 0x1p-10), 0x3C01);
    ASSERT_BITS(af_f16_from_f64(1.0 - 0x1p-12), 0x3C00);     /* tie 0x3bff|0x3c00 -> even */
    ASSERT_BITS(af_f16_from_f64(1.0 - 0x1p-11), 0x3BFF);
    ASSERT_BITS(af_f16_from_f64(2048.0 + 1.0), 0x6800);      /* 2049: tie 2048|2050 -> 2048 */
    ASSERT_BITS(af_f16_from_f64(2048.0 + 3.0), 0x6802);      /* 2051: tie 2050|2052 -> 2052 */
    /* Double-rounding trap: 1 + 2^-11 + 2^-40 is above the tie, so it rounds up to
     * 0x3c01. Through f32 first it would become exactly 1 + 2^-11 (2^-40 is far below
     * f32's half ulp 2^-24), a tie, and then round down to 0x3c00. */
    ASSERT_BITS(af_f16_from_f64(1.0 + 0x1p-11 + 0x1p-40), 0x3C01);
    ASSERT_BITS(af_f16_from_f64(-(1.0 + 0x1p-11 + 0x1p-40)), 0xBC01);
    /* the same trap at the overflow threshold: 65520 - 2^-30 stays finite */
    ASSERT_BITS(af_f16_from_f64(65520.0 - 0x1p-30), 0x7BFF);
    /* and in the subnormal range: 2^-25 + 2^-50 is above the zero|smallest tie */
    ASSERT_BITS(af_f16_from_f64(0x1p-25 + 0x1p-50), 0x0001);
    /* Inf and NaN */
    ASSERT_BITS(af_f16_from_f64(INFINITY), 0x7C00);
    ASSERT_BITS(af_f16_from_f64(-INFINITY), 0xFC00);
    uint16_t n = af_f16_from_f64(NAN);
    assert_true(f16_is_nan(n));
    n = af_f16_from_f32(bits_f32(0x7f800001u)); /* signalling-style NaN payload */
    assert_true(f16_is_nan(n));
    n = af_f16_from_f32(bits_f32(0xffc00000u));
    assert_true(f16_is_nan(n));
    /* f32 entry point: the same values as floats */
    ASSERT_BITS(af_f16_from_f32(1.0f), 0x3C00);
    ASSERT_BITS(af_f16_from_f32(65520.0f), 0x7C00);
    ASSERT_BITS(af_f16_from_f32(65504.0f), 0x7BFF);
    ASSERT_BITS(af_f16_from_f32(0x1p-25f), 0x0000);
    ASSERT_BITS(af_f16_from_f32(0x1.8p-24f), 0x0002);
}

static void test_f16_to_f32_known(void **state) {
    (void)state;
    ASSERT_SAME((double)af_f16_to_f32(0x3C00), 1.0);
    ASSERT_SAME((double)af_f16_to_f32(0xC000), -2.0);
    ASSERT_SAME((double)af_f16_to_f32(0x7BFF), 65504.0);
    ASSERT_SAME((double)af_f16_to_f32(0x0001), 0x1p-24);
    ASSERT_SAME((double)af_f16_to_f32(0x03FF), 1023 * 0x1p-24);
    ASSERT_SAME((double)af_f16_to_f32(0x0400), 0x1p-14);
    ASSERT_SAME((double)af_f16_to_f32(0x3555), 0.333251953125);
    ASSERT_SAME((double)af_f16_to_f32(0x8000), -0.0);
    ASSERT_SAME((double)af_f16_to_f32(0x8001), -0x1p-24);
    ASSERT_SAME((double)af_f16_to_f32(0x7C00), INFINITY);
    ASSERT_SAME((double)af_f16_to_f32(0xFC00), -INFINITY);
    assert_true(isnan(af_f16_to_f32(0x7E00)));
    assert_true(isnan(af_f16_to_f32(0x7C01)));
    assert_true(isnan(af_f16_to_f32(0xFFFF)));
}

/* --- bf16 known values ----------------------------------------------------------- */

static void test_bf16_known_bits(void **state) {
    (void)state;
    ASSERT_BITS(af_bf16_from_f64(1.0), 0x3F80);
    ASSERT_BITS(af_bf16_from_f64(-1.0), 0xBF80);
    ASSERT_BITS(af_bf16_from_f64(0.0), 0x0000);
    ASSERT_BITS(af_bf16_from_f64(-0.0), 0x8000);
    /* ulp above 1 is 2^-7 */
    ASSERT_BITS(af_bf16_from_f64(1.0 + 0x1p-8), 0x3F80);     /* tie 0x3f80|0x3f81 -> even */
    ASSERT_BITS(af_bf16_from_f64(1.0 + 3 * 0x1p-8), 0x3F82); /* tie 0x3f81|0x3f82 -> even */
    ASSERT_BITS(af_bf16_from_f64(1.0 + 0x1p-7), 0x3F81);
    /* double-rounding trap: via f32 this becomes the tie 1 + 2^-8 and rounds down */
    ASSERT_BITS(af_bf16_from_f64(1.0 + 0x1p-8 + 0x1p-40), 0x3F81);
    /* largest finite 0x1.fep127 = 3.3895313892515355e38 */
    ASSERT_BITS(af_bf16_from_f64(3.3895313892515355e38), 0x7F7F);
    ASSERT_BITS(af_bf16_from_f64(0x1.fep127), 0x7F7F);
    /* overflow threshold: max + half ulp (2^120) = 0x1.ffp127 is a tie between 0x7f7f
     * (odd) and the next binade, which is Inf: rounds to Inf; just below stays finite */
    ASSERT_BITS(af_bf16_from_f64(0x1.ffp127), 0x7F80);
    ASSERT_BITS(af_bf16_from_f64(0x1.ffp127 - 0x1p80), 0x7F7F);
    ASSERT_BITS(af_bf16_from_f64(-0x1.ffp127), 0xFF80);
    ASSERT_BITS(af_bf16_from_f64(0x1.fffffep127), 0x7F80); /* f32 max overflows bf16 */
    ASSERT_BITS(af_bf16_from_f64(1e300), 0x7F80);
    /* subnormals: quantum 2^-133 */
    ASSERT_BITS(af_bf16_from_f64(0x1p-133), 0x0001);
    ASSERT_BITS(af_bf16_from_f64(0x1p-134), 0x0000);         /* tie -> even 0 */
    ASSERT_BITS(af_bf16_from_f64(0x1p-134 + 0x1p-160), 0x0001);
    ASSERT_BITS(af_bf16_from_f64(3 * 0x1p-134), 0x0002);     /* tie 1|2 -> 2 */
    ASSERT_BITS(af_bf16_from_f64(127 * 0x1p-133), 0x007F);   /* largest subnormal */
    ASSERT_BITS(af_bf16_from_f64(0x1p-126), 0x0080);         /* smallest normal */
    ASSERT_BITS(af_bf16_from_f64(-0x1p-140), 0x8000);
    ASSERT_BITS(af_bf16_from_f64(INFINITY), 0x7F80);
    ASSERT_BITS(af_bf16_from_f64(-INFINITY), 0xFF80);
    assert_true(bf16_is_nan(af_bf16_from_f64(NAN)));
    assert_true(bf16_is_nan(af_bf16_from_f32(bits_f32(0x7f800001u)))); /* payload only in low bits */
    assert_true(bf16_is_nan(af_bf16_from_f32(bits_f32(0xff800001u))));
    /* f32 entry point */
    ASSERT_BITS(af_bf16_from_f32(1.0f), 0x3F80);
    ASSERT_BITS(af_bf16_from_f32(bits_f32(0x3f808000u)), 0x3F80); /* 1 + 2^-8: tie -> even */
    ASSERT_BITS(af_bf16_from_f32(bits_f32(0x3f818000u)), 0x3F82); /* 1 + 3*2^-8 */
    ASSERT_BITS(af_bf16_from_f32(bits_f32(0x3f808001u)), 0x3F81); /* above the tie */
    ASSERT_BITS(af_bf16_from_f32(bits_f32(0x7f7fffffu)), 0x7F80);
    ASSERT_BITS(af_bf16_from_f32(bits_f32(0x7f7f7fffu)), 0x7F7F);
    /* to f32 */
    ASSERT_SAME((double)af_bf16_to_f32(0x3F80), 1.0);
    ASSERT_SAME((double)af_bf16_to_f32(0x7F7F), 0x1.fep127);
    ASSERT_SAME((double)af_bf16_to_f32(0x0001), 0x1p-133);
    ASSERT_SAME((double)af_bf16_to_f32(0x8000), -0.0);
    ASSERT_SAME((double)af_bf16_to_f32(0xFF80), -INFINITY);
    assert_true(isnan(af_bf16_to_f32(0x7FC0)));
}

/* --- af_round_f64 / af_round_f32 / TF32 known values ------------------------------- */

static void test_round_known(void **state) {
    (void)state;
    ASSERT_SAME(af_round_f64(1.0 + 0x1p-11 + 0x1p-40, AF_F16), 1.0 + 0x1p-10);
    ASSERT_SAME(af_round_f64(1.0 + 0x1p-11, AF_F16), 1.0);
    ASSERT_SAME(af_round_f64(65520.0, AF_F16), INFINITY);
    ASSERT_SAME(af_round_f64(-65520.0, AF_F16), -INFINITY);
    ASSERT_SAME(af_round_f64(65519.0, AF_F16), 65504.0);
    ASSERT_SAME(af_round_f64(0x1p-25, AF_F16), 0.0);
    ASSERT_SAME(af_round_f64(-0x1p-25, AF_F16), -0.0);
    ASSERT_SAME(af_round_f64(3 * 0x1p-25, AF_F16), 0x1p-23);
    ASSERT_SAME(af_round_f64(1.0 + 0x1p-8 + 0x1p-40, AF_BF16), 1.0 + 0x1p-7);
    ASSERT_SAME(af_round_f64(0x1.ffp127, AF_BF16), INFINITY);
    /* f32: ulp above 1 is 2^-23 */
    ASSERT_SAME(af_round_f64(1.0 + 0x1p-24, AF_F32), 1.0);
    ASSERT_SAME(af_round_f64(1.0 + 0x1p-24 + 0x1p-50, AF_F32), 1.0 + 0x1p-23);
    ASSERT_SAME(af_round_f64(1.0 + 3 * 0x1p-24, AF_F32), 1.0 + 0x1p-22);
    ASSERT_SAME(af_round_f64(0x1p-150, AF_F32), 0.0);                /* tie 0|2^-149 */
    ASSERT_SAME(af_round_f64(0x1p-150 + 0x1p-200, AF_F32), 0x1p-149);
    ASSERT_SAME(af_round_f64(0x1.ffffffp127, AF_F32), INFINITY);     /* f32 overflow tie */
    ASSERT_SAME(af_round_f64(0x1.fffffep127, AF_F32), 0x1.fffffep127);
    /* F64 is the identity */
    ASSERT_SAME(af_round_f64(0.1, AF_F64), 0.1);
    ASSERT_SAME(af_round_f64(-0.0, AF_F16), -0.0);
    assert_true(isnan(af_round_f64(NAN, AF_F16)));
    assert_true(isnan(af_round_f64(NAN, AF_BF16)));
    ASSERT_SAME(af_round_f64(INFINITY, AF_BF16), INFINITY);

    /* af_round_f32 */
    ASSERT_SAME((double)af_round_f32(1.0f + 0x1p-11f, AF_F16), 1.0);
    ASSERT_SAME((double)af_round_f32(1.0f + 3 * 0x1p-11f, AF_F16), 1.0 + 0x1p-9);
    ASSERT_SAME((double)af_round_f32(65520.0f, AF_F16), INFINITY);
    ASSERT_SAME((double)af_round_f32(65519.0f, AF_F16), 65504.0);
    ASSERT_SAME((double)af_round_f32(0x1p-25f, AF_F16), 0.0);
    ASSERT_SAME((double)af_round_f32(-0x1p-25f, AF_F16), -0.0);
    ASSERT_SAME((double)af_round_f32(0x1.8p-24f, AF_F16), 0x1p-23);
    ASSERT_SAME((double)af_round_f32(1023.5f * 0x1p-24f, AF_F16), 0x1p-14);
    ASSERT_SAME((double)af_round_f32(1.0f + 0x1p-8f, AF_BF16), 1.0);
    ASSERT_SAME((double)af_round_f32(1.0f + 3 * 0x1p-8f, AF_BF16), 1.0 + 0x1p-6);
    ASSERT_SAME((double)af_round_f32(0.1f, AF_F32), (double)0.1f);
    assert_true(isnan(af_round_f32(NAN, AF_F16)));
    assert_true(isnan(af_round_f32(NAN, AF_BF16)));
    ASSERT_SAME((double)af_round_f32(-INFINITY, AF_F16), -INFINITY);
    ASSERT_SAME((double)af_round_f32(INFINITY, AF_BF16), INFINITY);

    /* TF32: f32 exponent range, 10 explicit mantissa bits, so the ulp above 1 is 2^-10.
     * 1 + 2^-11 is halfway between 1 (mantissa ...0, even) and 1 + 2^-10 (odd): -> 1.
     * 1 + 3*2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): -> 1 + 2^-9.
     * 1 + 2^-11 + 2^-23 is above the first tie: -> 1 + 2^-10.
     * 2 - 2^-11 is halfway between 2 - 2^-10 (mantissa all ones, odd) and 2: the carry
     * moves into the exponent -> 2.
     * f32 max (2 - 2^-23) 2^127 is past TF32's max (2 - 2^-10) 2^127 plus half an ulp
     * (2^-11 2^127): -> Inf.
     * Subnormals keep 10 mantissa bits of the 2^-126 scale: quantum 2^-136; 2^-137 is a
     * tie with 0 -> 0; 3 2^-137 is a tie between 2^-136 (odd) and 2^-135 -> 2^-135. */
    ASSERT_SAME((double)af_round_tf32(1.0f + 0x1p-11f), 1.0);
    ASSERT_SAME((double)af_round_tf32(1.0f + 3 * 0x1p-11f), 1.0 + 0x1p-9);
    ASSERT_SAME((double)af_round_tf32(1.0f + 0x1p-11f + 0x1p-23f), 1.0 + 0x1p-10);
    ASSERT_SAME((double)af_round_tf32(-(1.0f + 0x1p-11f)), -1.0);
    ASSERT_SAME((double)af_round_tf32(2.0f - 0x1p-11f), 2.0);
    ASSERT_SAME((double)af_round_tf32(bits_f32(0x7f7fffffu)), INFINITY);
    ASSERT_SAME((double)af_round_tf32(0x1p-136f), 0x1p-136);
    ASSERT_SAME((double)af_round_tf32(0x1p-137f), 0.0);
    ASSERT_SAME((double)af_round_tf32(3 * 0x1p-137f), 0x1p-135);
    ASSERT_SAME((double)af_round_tf32(0.1f), 0x1.998p-4); /* 0.1f = 0x1.99999ap-4 */
    ASSERT_SAME((double)af_round_tf32(INFINITY), INFINITY);
    ASSERT_SAME((double)af_round_tf32(-INFINITY), -INFINITY);
    assert_true(isnan(af_round_tf32(NAN)));
    assert_true(isnan(af_round_tf32(bits_f32(0x7f800001u))));
}

static void test_dtype_limits(void **state) {
    (void)state;
    ASSERT_SAME(af_dtype_max(AF_F16), 65504.0);
    ASSERT_SAME(af_dtype_min_normal(AF_F16), 0x1p-14);
    ASSERT_SAME(af_dtype_min_subnormal(AF_F16), 0x1p-24);
    ASSERT_SAME(af_dtype_eps(AF_F16), 0x1p-11);
    ASSERT_SAME(af_dtype_overflow(AF_F16), 65520.0);
    ASSERT_SAME(af_dtype_max(AF_BF16), 0x1.fep127);
    ASSERT_SAME(af_dtype_min_normal(AF_BF16), 0x1p-126);
    ASSERT_SAME(af_dtype_min_subnormal(AF_BF16), 0x1p-133);
    ASSERT_SAME(af_dtype_eps(AF_BF16), 0x1p-8);
    ASSERT_SAME(af_dtype_overflow(AF_BF16), 0x1.ffp127);
    ASSERT_SAME(af_dtype_max(AF_F32), 0x1.fffffep127);
    ASSERT_SAME(af_dtype_min_subnormal(AF_F32), 0x1p-149);
    ASSERT_SAME(af_dtype_eps(AF_F32), 0x1p-24);
    ASSERT_SAME(af_dtype_overflow(AF_F32), 0x1.ffffffp127);
    /* the overflow threshold is exactly where rounding gives Inf */
    af_dtype dts[3] = {AF_F32, AF_F16, AF_BF16};
    for (int k = 0; k < 3; k++) {
        double ov = af_dtype_overflow(dts[k]);
        ASSERT_SAME(af_round_f64(ov, dts[k]), INFINITY);
        ASSERT_SAME(af_round_f64(nextafter(ov, 0.0), dts[k]), af_dtype_max(dts[k]));
    }
    assert_int_equal(af_dtype_size(AF_F32), 4);
    assert_int_equal(af_dtype_size(AF_F16), 2);
    assert_int_equal(af_dtype_size(AF_BF16), 2);
    assert_int_equal(af_dtype_size(AF_F64), 8);
    assert_int_equal(af_dtype_size(AF_BOOL), 1);
    assert_int_equal(af_dtype_from_name("f16"), AF_F16);
    assert_int_equal(af_dtype_from_name("bf16"), AF_BF16);
    assert_int_equal(af_dtype_from_name("float32"), AF_F32);
    assert_int_equal(af_dtype_from_name("bfloat16"), AF_BF16);
    assert_int_equal(af_dtype_from_name("bool"), AF_BOOL);
    assert_int_equal(af_dtype_from_name("int8"), -1);
    assert_int_equal(af_dtype_from_name(""), -1);
    for (int k = 0; k < AF_DTYPE_COUNT; k++) assert_int_equal(af_dtype_from_name(af_dtype_names[k]), k);
}

static void test_load_store(void **state) {
    (void)state;
    unsigned char buf[32];
    memset(buf, 0xAA, sizeof buf);
    af_dtype_store(AF_F16, buf, 2, 1.0 + 0x1p-11 + 0x1p-40); /* rounds once: 0x3c01 */
    assert_int_equal(buf[2], 0x01);
    assert_int_equal(buf[3], 0x3C);
    assert_int_equal(buf[0], 0xAA); /* neighbours untouched */
    assert_int_equal(buf[4], 0xAA);
    ASSERT_SAME(af_dtype_load(AF_F16, buf, 2), 1.0 + 0x1p-10);
    af_dtype_store(AF_BF16, buf, 6, -3.0);
    assert_int_equal(buf[6], 0x40);
    assert_int_equal(buf[7], 0xC0); /* -3 = 0xc040 */
    ASSERT_SAME(af_dtype_load(AF_BF16, buf, 6), -3.0);
    af_dtype_store(AF_F32, buf, 8, 0.1);
    float f;
    memcpy(&f, buf + 8, 4);
    assert_int_equal(f32_bits(f), 0x3DCCCCCDu);
    ASSERT_SAME(af_dtype_load(AF_F32, buf, 8), (double)0.1f);
    af_dtype_store(AF_F64, buf, 16, 0.1);
    ASSERT_SAME(af_dtype_load(AF_F64, buf, 16), 0.1);
    af_dtype_store(AF_BOOL, buf, 24, 0.0);
    af_dtype_store(AF_BOOL, buf, 25, 0.5);
    af_dtype_store(AF_BOOL, buf, 26, -2.0);
    assert_int_equal(buf[24], 0);
    assert_int_equal(buf[25], 1);
    assert_int_equal(buf[26], 1);
    buf[27] = 7;
    ASSERT_SAME(af_dtype_load(AF_BOOL, buf, 27), 1.0);
    ASSERT_SAME(af_dtype_load(AF_BOOL, buf, 24), 0.0);
}

/* --- exhaustive ------------------------------------------------------------------ */

static void test_f16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hb = (uint16_t)h;
        float f = af_f16_to_f32(hb);
        double want = f16_value(hb);
        if (f16_is_nan(hb)) {
            if (!isnan(f)) fail_msg("f16 0x%04x: to_f32 gave %a, expected NaN", h, (double)f);
            if (!f16_is_nan(af_f16_from_f32(f))) fail_msg("f16 NaN 0x%04x lost its NaN-ness", h);
            if (!f16_is_nan(af_f16_from_f64((double)f))) fail_msg("f16 NaN 0x%04x lost (f64)", h);
            if (!isnan(af_round_f32(f, AF_F16))) fail_msg("round_f32 of f16 NaN 0x%04x", h);
            continue;
        }
        if (!same_double((double)f, want))
            fail_msg("f16 0x%04x: to_f32 gave %a, expected %a", h, (double)f, want);
        if (af_f16_from_f32(f) != hb) fail_msg("f16 0x%04x -> f32 -> 0x%04x", h, af_f16_from_f32(f));
        if (af_f16_from_f64((double)f) != hb) fail_msg("f16 0x%04x -> f64 -> 0x%04x", h, af_f16_from_f64((double)f));
        if (f32_bits(af_round_f32(f, AF_F16)) != f32_bits(f)) fail_msg("round_f32 moved f16 value 0x%04x", h);
        if (!same_double(af_round_f64((double)f, AF_F16), (double)f)) fail_msg("round_f64 moved f16 value 0x%04x", h);
        /* the midpoint to the next value up (same sign) rounds to the even neighbour */
        if ((h & 0x7fffu) < 0x7bffu) {
            uint16_t up = (uint16_t)(h + 1);
            double mid = (want + f16_value(up)) / 2.0; /* exact in double */
            uint16_t even = (h & 1u) ? up : hb;
            if (af_f16_from_f64(mid) != even)
                fail_msg("f16 midpoint %a of 0x%04x|0x%04x gave 0x%04x", mid, h, up, af_f16_from_f64(mid));
            if (af_f16_from_f32((float)mid) != even) fail_msg("f16 midpoint (f32) of 0x%04x", h);
        }
    }
}

static void test_bf16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hb = (uint16_t)h;
        float f = af_bf16_to_f32(hb);
        double want = bf16_value(hb);
        if (bf16_is_nan(hb)) {
            if (!isnan(f)) fail_msg("bf16 0x%04x: to_f32 gave %a, expected NaN", h, (double)f);
            if (!bf16_is_nan(af_bf16_from_f32(f))) fail_msg("bf16 NaN 0x%04x lost (f32)", h);
            if (!bf16_is_nan(af_bf16_from_f64((double)f))) fail_msg("bf16 NaN 0x%04x lost (f64)", h);
            if (!isnan(af_round_f32(f, AF_BF16))) fail_msg("round_f32 of bf16 NaN 0x%04x", h);
            continue;
        }
        if (!same_double((double)f, want))
            fail_msg("bf16 0x%04x: to_f32 gave %a, expected %a", h, (double)f, want);
        if (af_bf16_from_f32(f) != hb) fail_msg("bf16 0x%04x -> f32 -> 0x%04x", h, af_bf16_from_f32(f));
        if (af_bf16_from_f64((double)f) != hb) fail_msg("bf16 0x%04x -> f64 -> 0x%04x", h, af_bf16_from_f64((double)f));
        if (f32_bits(af_round_f32(f, AF_BF16)) != f32_bits(f)) fail_msg("round_f32 moved bf16 value 0x%04x", h);
        if ((h & 0x7fffu) < 0x7f7fu) {
            uint16_t up = (uint16_t)(h + 1);
            double mid = (want + bf16_value(up)) / 2.0;
            uint16_t even = (h & 1u) ? up : hb;
            if (af_bf16_from_f64(mid) != even) fail_msg("bf16 midpoint of 0x%04x|0x%04x", h, up);
            if (af_bf16_from_f32((float)mid) != even) fail_msg("bf16 midpoint (f32) of 0x%04x", h);
        }
    }
}

/* --- random ---------------------------------------------------------------------- */

/* A float across all exponents: half raw bit patterns, half with the exponent drawn
 * near the f16 / subnormal range where the interesting roundings are. */
static float random_float(xorshift *x) {
    uint64_t r = xs_next(x);
    uint32_t u = (uint32_t)r;
    if (r >> 63) {
        uint32_t e = 96u + (uint32_t)((r >> 40) % 56u); /* 2^-31 .. 2^24 */
        u = (u & 0x807fffffu) | (e << 23);
        if ((r >> 32) % 8u == 0) u &= ~0x3fffu; /* many near-ties */
        if ((r >> 35) % 8u == 0) u = (u & ~0x1fffu) | 0x1000u; /* exact f16/tf32 ties */
        if ((r >> 38) % 8u == 0) u = (u & ~0xffffu) | 0x8000u; /* exact bf16 ties */
    }
    return bits_f32(u);
}

static void test_round_f32_random(void **state) {
    (void)state;
    xorshift x = {0x9E3779B97F4A7C15ull};
    size_t n = scaled(1000000);
    for (size_t k = 0; k < n; k++) {
        float f = random_float(&x);
        /* F16 */
        float got = af_round_f32(f, AF_F16);
        float via = af_f16_to_f32(af_f16_from_f32(f));
        double ref = ref_f16((double)f);
        if (isnan(f)) {
            if (!isnan(got) || !isnan(via)) fail_msg("NaN %08x not kept by the f16 rounding", f32_bits(f));
        } else {
            if (f32_bits(got) != f32_bits(via))
                fail_msg("round_f32(%a, f16) = %a, via bits %a", (double)f, (double)got, (double)via);
            if (!same_double((double)got, ref))
                fail_msg("round_f32(%a, f16) = %a, reference %a", (double)f, (double)got, ref);
        }
        /* BF16 */
        got = af_round_f32(f, AF_BF16);
        via = af_bf16_to_f32(af_bf16_from_f64((double)f));
        ref = ref_bf16((double)f);
        if (isnan(f)) {
            if (!isnan(got) || !isnan(via)) fail_msg("NaN %08x not kept by the bf16 rounding", f32_bits(f));
        } else {
            if (f32_bits(got) != f32_bits(via))
                fail_msg("round_f32(%a, bf16) = %a, via f64 %a", (double)f, (double)got, (double)via);
            if (!same_double((double)got, ref))
                fail_msg("round_f32(%a, bf16) = %a, reference %a", (double)f, (double)got, ref);
            if (af_bf16_from_f32(f) != af_bf16_from_f64((double)f))
                fail_msg("bf16_from_f32(%a) != bf16_from_f64", (double)f);
        }
        /* TF32 */
        got = af_round_tf32(f);
        ref = ref_tf32((double)f);
        if (isnan(f)) {
            if (!isnan(got)) fail_msg("TF32 lost NaN %08x", f32_bits(f));
        } else if (!same_double((double)got, ref)) {
            fail_msg("round_tf32(%a) = %a, reference %a", (double)f, (double)got, ref);
        }
    }
}

/* af_round_f64 against the integer reference on random doubles of every exponent that
 * matters (and some far outside), for all three case dtypes. */
static void test_round_f64_random(void **state) {
    (void)state;
    xorshift x = {0xD1B54A32D192ED03ull};
    size_t n = scaled(1000000);
    for (size_t k = 0; k < n; k++) {
        uint64_t r = xs_next(&x);
        uint64_t e = 1023u - 160u + (xs_next(&x) % 300u); /* 2^-160 .. 2^139 */
        uint64_t u = (r & 0x800fffffffffffffull) | (e << 52);
        uint64_t t = xs_next(&x) % 8u;
        if (t == 0) u &= ~((1ull << 40) - 1); /* short mantissas: exact and tie cases */
        if (t == 1) u = (u & ~((1ull << 42) - 1)) | (1ull << 41); /* f16 tie (10 bits kept) */
        if (t == 2) u = (u & ~((1ull << 45) - 1)) | (1ull << 44); /* bf16 tie */
        if (t == 3) u = (u & ~((1ull << 29) - 1)) | (1ull << 28); /* f32 tie */
        double d = bits_f64(u);
        double g16 = af_round_f64(d, AF_F16), g8 = af_round_f64(d, AF_BF16), g32 = af_round_f64(d, AF_F32);
        if (!same_double(g16, ref_f16(d))) fail_msg("round_f64(%a, f16) = %a, reference %a", d, g16, ref_f16(d));
        if (!same_double(g8, ref_bf16(d))) fail_msg("round_f64(%a, bf16) = %a, reference %a", d, g8, ref_bf16(d));
        if (!same_double(g32, ref_f32(d))) fail_msg("round_f64(%a, f32) = %a, reference %a", d, g32, ref_f32(d));
        /* bit conversions agree with the value rounding */
        if (!same_double((double)af_f16_to_f32(af_f16_from_f64(d)), g16)) fail_msg("f16_from_f64(%a)", d);
        if (!same_double((double)af_bf16_to_f32(af_bf16_from_f64(d)), g8)) fail_msg("bf16_from_f64(%a)", d);
    }
}

static void test_round_arrays(void **state) {
    (void)state;
    xorshift x = {12345};
    enum { N = 4099 };
    static float a[N], b[N], c2[N];
    for (size_t k = 0; k < N; k++) a[k] = b[k] = c2[k] = random_float(&x);
    af_round_f32_array(a, N, AF_F16);
    af_round_f32_array(b, N, AF_BF16);
    for (size_t k = 0; k < N; k++) {
        if (!same_double((double)a[k], ref_f16((double)c2[k]))) fail_msg("f16 array element %zu", k);
        if (!same_double((double)b[k], ref_bf16((double)c2[k]))) fail_msg("bf16 array element %zu", k);
    }
    memcpy(a, c2, sizeof a);
    af_round_f32_array(a, N, AF_F32); /* identity */
    assert_memory_equal(a, c2, sizeof a);
    af_round_tf32_array(a, N);
    for (size_t k = 0; k < N; k++)
        if (!same_double((double)a[k], ref_tf32((double)c2[k]))) fail_msg("tf32 array element %zu", k);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known_bits),   cmocka_unit_test(test_f16_to_f32_known),
        cmocka_unit_test(test_bf16_known_bits),  cmocka_unit_test(test_round_known),
        cmocka_unit_test(test_dtype_limits),     cmocka_unit_test(test_load_store),
        cmocka_unit_test(test_f16_exhaustive),   cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_round_f32_random), cmocka_unit_test(test_round_f64_random),
        cmocka_unit_test(test_round_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
