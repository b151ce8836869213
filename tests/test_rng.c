/* test_rng.c - Philox4x32-10 against Random123's known-answer vectors, the dropout
 * definition of rng.h against direct Philox calls, and the statistics of the streams. */
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

#include "attnfuzz/rng.h"

static size_t scaled(size_t n) { return scaled_at_least(n, 1000); }

/* --- Philox known answers (Random123 kat_vectors, philox4x32 with 10 rounds) --------- */

static void check_kat(const uint32_t ctr[4], const uint32_t key[2], const uint32_t want[4]) {
    uint32_t out[4];
    af_philox4x32(ctr, key, out);
    for (int k = 0; k < 4; k++)
        if (out[k] != want[k])
            fail_msg("philox(%08x %08x %08x %08x; %08x %08x)[%d] = %08x, expected %08x", ctr[0], ctr[1], ctr[2],
                     ctr[3], key[0], key[1], k, out[k], want[k]);
}

static void test_philox_kat(void **state) {
    (void)state;
    const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    const uint32_t w0[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    check_kat(c0, k0, w0);
    const uint32_t c1[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, k1[2] = {0xffffffff, 0xffffffff};
    const uint32_t w1[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    check_kat(c1, k1, w1);
    const uint32_t c2[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, k2[2] = {0xa4093822, 0x299f31d0};
    const uint32_t w2[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    check_kat(c2, k2, w2);
}

/* --- dropout ----------------------------------------------------------------------- */

static void test_dropout_word_definition(void **state) {
    (void)state;
    xorshift x = {0x1234567887654321ull};
    for (int t = 0; t < 20000; t++) {
        uint64_t seed = xs_next(&x);
        uint32_t b = (uint32_t)xs_next(&x), h = (uint32_t)xs_next(&x), i = (uint32_t)xs_next(&x);
        uint32_t j = (uint32_t)xs_next(&x);
        if (t % 2) { /* small indices too, as real cases have */
            b %= 4, h %= 8, i %= 300, j %= 300;
        }
        /* rng.h: counter {j / 4, i, h, b}, key {seed & 0xffffffff, seed >> 32}, word j % 4 */
        uint32_t ctr[4] = {j / 4, i, h, b};
        uint32_t key[2] = {(uint32_t)(seed & 0xffffffffu), (uint32_t)(seed >> 32)};
        uint32_t w[4];
        af_philox4x32(ctr, key, w);
        uint32_t got = af_dropout_word(seed, b, h, i, j);
        if (got != w[j % 4]) fail_msg("dropout_word(seed %llx, %u %u %u %u) = %08x, philox gives %08x",
                                      (unsigned long long)seed, b, h, i, j, got, w[j % 4]);
    }
    /* the seed's two halves are both used */
    assert_int_not_equal(af_dropout_word(1, 0, 0, 0, 0), af_dropout_word(1ull << 32 | 1, 0, 0, 0, 0));
    assert_int_not_equal(af_dropout_word(0, 0, 0, 0, 0), af_dropout_word(1, 0, 0, 0, 0));
    /* each index moves the word */
    uint32_t base = af_dropout_word(7, 1, 2, 3, 4);
    assert_int_not_equal(base, af_dropout_word(7, 0, 2, 3, 4));
    assert_int_not_equal(base, af_dropout_word(7, 1, 0, 3, 4));
    assert_int_not_equal(base, af_dropout_word(7, 1, 2, 0, 4));
    assert_int_not_equal(base, af_dropout_word(7, 1, 2, 3, 5));
}

static void test_dropout_threshold(void **state) {
    (void)state;
    assert_int_equal(af_dropout_threshold(0.0), 0);
    assert_int_equal(af_dropout_threshold(-0.5), 0);
    assert_int_equal(af_dropout_threshold(NAN), 0);
    assert_true(af_dropout_threshold(1.0) > 0xffffffffull);
    assert_true(af_dropout_threshold(1.5) > 0xffffffffull);
    assert_int_equal(af_dropout_threshold(0.5), 0x80000000ull);
    assert_int_equal(af_dropout_threshold(0.25), 0x40000000ull);
    assert_int_equal(af_dropout_threshold(0x1p-32), 1);
    assert_int_equal(af_dropout_threshold(1e-15), 1); /* any p > 0 drops word 0 */
    assert_int_equal(af_dropout_threshold(1.0 - 0x1p-32), 0xffffffffull);
    /* keep <=> u = word 2^-32 >= p: the threshold is the first kept word */
    xorshift x = {99};
    for (int t = 0; t < 100000; t++) {
        double p = (double)(xs_next(&x) >> 11) * 0x1p-53;
        if (t % 3 == 0) p = (double)(uint32_t)xs_next(&x) * 0x1p-32; /* exactly on a word */
        uint64_t thr = af_dropout_threshold(p);
        if (p == 0.0) {
            assert_int_equal(thr, 0);
            continue;
        }
        assert_true(thr >= 1 && thr <= 0xffffffffull);
        double u_at = (double)thr * 0x1p-32, u_below = (double)(thr - 1) * 0x1p-32;
        if (!(u_at >= p) || !(u_below < p))
            fail_msg("threshold(%.17g) = %llu: u(thr) = %.17g, u(thr-1) = %.17g", p, (unsigned long long)thr, u_at,
                     u_below);
    }
}

static void test_dropout_row_tiling(void **state) {
    (void)state;
    xorshift x = {0xfeedface};
    uint8_t keep[700], tiled[700];
    for (int t = 0; t < 3000; t++) {
        uint64_t seed = xs_next(&x);
        uint32_t b = (uint32_t)(xs_next(&x) % 8), h = (uint32_t)(xs_next(&x) % 16), i = (uint32_t)(xs_next(&x) % 500);
        uint32_t j0 = (uint32_t)(xs_next(&x) % 300), n = (uint32_t)(xs_next(&x) % 400);
        if (t % 50 == 0) j0 = 0xffffffffu - n; /* near the top of the key range */
        double p = (double)(xs_next(&x) % 1001) / 1000.0;
        uint64_t thr = af_dropout_threshold(p);
        af_dropout_row(seed, thr, b, h, i, j0, n, keep);
        for (uint32_t k = 0; k < n; k++) {
            uint8_t want = (uint64_t)af_dropout_word(seed, b, h, i, j0 + k) >= thr;
            if (keep[k] != want)
                fail_msg("dropout_row j0=%u n=%u p=%g: key %u is %u, word says %u", j0, n, p, j0 + k, keep[k], want);
        }
        /* the same keys in random tiles, as a tiled kernel draws them */
        uint32_t at = 0;
        while (at < n) {
            uint32_t len = 1 + (uint32_t)(xs_next(&x) % 37);
            if (len > n - at) len = n - at;
            af_dropout_row(seed, thr, b, h, i, j0 + at, len, tiled + at);
            at += len;
        }
        if (n) assert_memory_equal(keep, tiled, n);
    }
    /* p = 0 keeps everything, p = 1 drops everything */
    af_dropout_row(5, af_dropout_threshold(0.0), 0, 0, 0, 0, 700, keep);
    for (int k = 0; k < 700; k++) assert_int_equal(keep[k], 1);
    af_dropout_row(5, af_dropout_threshold(1.0), 0, 0, 0, 0, 700, keep);
    for (int k = 0; k < 700; k++) assert_int_equal(keep[k], 0);
}

static void test_dropout_kept_fraction(void **state) {
    (void)state;
    const double ps[] = {0.1, 0.5, 0.9, 0.37};
    size_t n = scaled(1000000);
    for (size_t t = 0; t < sizeof ps / sizeof ps[0]; t++) {
        double p = ps[t];
        uint64_t thr = af_dropout_threshold(p);
        size_t kept = 0, count = 0;
        uint8_t keep[1000];
        for (uint32_t row = 0; count < n; row++) {
            /* rows over (b, h, i), 1000 keys each */
            af_dropout_row(0xabcdef0123ull + t, thr, row % 3, (row / 3) % 5, row / 15, 0, 1000, keep);
            for (int k = 0; k < 1000; k++) kept += keep[k];
            count += 1000;
        }
        double frac = (double)kept / (double)count;
        double sigma = sqrt(p * (1.0 - p) / (double)count);
        if (fabs(frac - (1.0 - p)) > 4.0 * sigma)
            fail_msg("p = %g: kept fraction %.6f, expected %.6f +- %.6f (4 sigma)", p, frac, 1.0 - p, 4.0 * sigma);
    }
}

/* --- sequential streams ------------------------------------------------------------- */

static void test_rng_below_range(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 42, 0);
    const uint32_t ns[] = {1, 2, 3, 5, 7, 10, 1000, 0x80000001u, 0xC0000000u, 0xffffffffu};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++)
        for (int k = 0; k < 20000; k++) {
            uint32_t v = af_rng_below(&r, ns[t]);
            if (v >= ns[t]) fail_msg("rng_below(%u) returned %u", ns[t], v);
        }
    assert_int_equal(af_rng_below(&r, 0), 0);
    assert_int_equal(af_rng_below(&r, 1), 0);
    /* n = 3 * 2^30: 2^32 mod n = 2^30, so a plain modulo would give values below 2^30
     * twice the probability (1/2 instead of 1/3). Rejection sampling keeps 1/3. */
    size_t low = 0, m = 200000;
    for (size_t k = 0; k < m; k++) low += af_rng_below(&r, 0xC0000000u) < 0x40000000u;
    double frac = (double)low / (double)m;
    double sigma = sqrt((1.0 / 3.0) * (2.0 / 3.0) / (double)m);
    if (fabs(frac - 1.0 / 3.0) > 5.0 * sigma) fail_msg("rng_below(3*2^30): P(< 2^30) = %.5f, expected 1/3", frac);
    /* af_rng_range is inclusive and stays inside */
    int seen_lo = 0, seen_hi = 0;
    for (int k = 0; k < 10000; k++) {
        int64_t v = af_rng_range(&r, -3, 4);
        assert_true(v >= -3 && v <= 4);
        seen_lo |= v == -3;
        seen_hi |= v == 4;
    }
    assert_true(seen_lo && seen_hi);
    assert_int_equal(af_rng_range(&r, 9, 9), 9);
    assert_int_equal(af_rng_range(&r, 9, 3), 9); /* empty range gives lo */
    for (int k = 0; k < 1000; k++) {
        int64_t v = af_rng_range(&r, -((int64_t)1 << 40), (int64_t)1 << 40);
        assert_true(v >= -((int64_t)1 << 40) && v <= ((int64_t)1 << 40));
    }
}

static void test_rng_below_chisquare(void **state) {
    (void)state;
    const uint32_t ns[] = {3, 7, 10};
    size_t draws = scaled(1000000);
    for (size_t t = 0; t < 3; t++) {
        uint32_t n = ns[t];
        af_rng r;
        af_rng_init(&r, 0x5eed0000u + t, 3);
        size_t count[10] = {0};
        for (size_t k = 0; k < draws; k++) count[af_rng_below(&r, n)]++;
        double expect = (double)draws / n, chi2 = 0.0;
        for (uint32_t v = 0; v < n; v++) chi2 += ((double)count[v] - expect) * ((double)count[v] - expect) / expect;
        double df = n - 1.0;
        /* loose: mean df, sd sqrt(2 df); 8 sd above the mean never happens by chance */
        if (chi2 > df + 8.0 * sqrt(2.0 * df)) fail_msg("rng_below(%u): chi-square %.2f with %g dof", n, chi2, df);
    }
}

static void test_rng_uniform_normal(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 2024, 1);
    size_t n = scaled(1000000);
    double s1 = 0.0, s2 = 0.0, u1 = 0.0, s4 = 0.0;
    for (size_t k = 0; k < n; k++) {
        double u = af_rng_uniform(&r);
        if (!(u >= 0.0 && u < 1.0)) fail_msg("uniform %.17g out of [0, 1)", u);
        u1 += u;
        double z = af_rng_normal(&r);
        if (!isfinite(z)) fail_msg("normal gave %g", z);
        s1 += z;
        s2 += z * z;
        s4 += z * z * z * z;
    }
    double dn = (double)n;
    double mean = s1 / dn, var = s2 / dn - mean * mean, kurt = s4 / dn;
    /* standard errors: mean 1/sqrt(n), variance sqrt(2/n), fourth moment sqrt(96/n) */
    if (fabs(mean) > 5.0 / sqrt(dn)) fail_msg("normal mean %.5f", mean);
    if (fabs(var - 1.0) > 5.0 * sqrt(2.0 / dn)) fail_msg("normal variance %.5f", var);
    if (fabs(kurt - 3.0) > 5.0 * sqrt(96.0 / dn)) fail_msg("normal fourth moment %.4f", kurt);
    if (fabs(u1 / dn - 0.5) > 5.0 * sqrt(1.0 / 12.0 / dn)) fail_msg("uniform mean %.5f", u1 / dn);
    /* chance */
    size_t yes = 0;
    for (size_t k = 0; k < 100000; k++) yes += af_rng_chance(&r, 1, 4);
    assert_true(fabs((double)yes / 1e5 - 0.25) < 5.0 * sqrt(0.25 * 0.75 / 1e5));
    for (int k = 0; k < 100; k++) {
        assert_false(af_rng_chance(&r, 0, 7));
        assert_true(af_rng_chance(&r, 7, 7));
    }
}

static void test_u53(void **state) {
    (void)state;
    /* 53 bits: the high word first, then the top 21 bits of the low word */
    assert_true(af_u53(0, 0) == 0.0);
    assert_true(af_u53(0x80000000u, 0) == 0.5);
    assert_true(af_u53(1, 0) == 0x1p-32);
    assert_true(af_u53(0, 0x800) == 0x1p-53);
    assert_true(af_u53(0, 0x7ff) == 0.0);
    assert_true(af_u53(0xffffffffu, 0xffffffffu) == 1.0 - 0x1p-53);
    xorshift x = {7};
    for (int k = 0; k < 10000; k++) {
        uint32_t hi = (uint32_t)xs_next(&x), lo = (uint32_t)xs_next(&x);
        double want = (double)hi * 0x1p-32 + (double)(lo >> 11) * 0x1p-53;
        assert_true(af_u53(hi, lo) == want);
    }
}

static void test_rng_streams(void **state) {
    (void)state;
    af_rng a, b, c, d;
    af_rng_init(&a, 11, 0);
    af_rng_init(&b, 11, 0);
    af_rng_init(&c, 11, 1);
    af_rng_init(&d, 12, 0);
    int same_ac = 0, same_ad = 0;
    for (int k = 0; k < 1000; k++) {
        uint32_t va = af_rng_u32(&a), vb = af_rng_u32(&b), vc = af_rng_u32(&c), vd = af_rng_u32(&d);
        assert_int_equal(va, vb); /* deterministic */
        same_ac += va == vc;
        same_ad += va == vd;
    }
    assert_true(same_ac < 3 && same_ad < 3);
    /* u64 is two u32 draws */
    af_rng_init(&a, 5, 9);
    af_rng_init(&b, 5, 9);
    uint64_t w = af_rng_u64(&a);
    uint64_t hi = af_rng_u32(&b), lo = af_rng_u32(&b);
    assert_true(w == (hi << 32 | lo) || w == (lo << 32 | hi));
    /* a stream runs through whole Philox blocks: words 4k..4k+3 form one block, and the
     * blocks differ */
    af_rng_init(&a, 77, 2);
    uint32_t first[8];
    for (int k = 0; k < 8; k++) first[k] = af_rng_u32(&a);
    assert_memory_not_equal(first, first + 4, 4 * sizeof(uint32_t));
    /* philox_at: element-indexed, deterministic, and sensitive to every argument */
    uint32_t o1[4], o2[4];
    af_philox_at(3, 4, 5, o1);
    af_philox_at(3, 4, 5, o2);
    assert_memory_equal(o1, o2, sizeof o1);
    af_philox_at(3, 4, 6, o2);
    assert_memory_not_equal(o1, o2, sizeof o1);
    af_philox_at(3, 5, 5, o2);
    assert_memory_not_equal(o1, o2, sizeof o1);
    af_philox_at(4, 4, 5, o2);
    assert_memory_not_equal(o1, o2, sizeof o1);
    af_philox_at(3, 4, 5ull + (1ull << 32), o2); /* the index's high half counts */
    assert_memory_not_equal(o1, o2, sizeof o1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),          cmocka_unit_test(test_dropout_word_definition),
        cmocka_unit_test(test_dropout_threshold),   cmocka_unit_test(test_dropout_row_tiling),
        cmocka_unit_test(test_dropout_kept_fraction), cmocka_unit_test(test_rng_below_range),
        cmocka_unit_test(test_rng_below_chisquare), cmocka_unit_test(test_rng_uniform_normal),
        cmocka_unit_test(test_u53),                 cmocka_unit_test(test_rng_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
