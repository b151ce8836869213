/* test_fuzz_mutator.c - the structure-aware mutators of fuzz/ (case_mutator.c and the
 * AFL++ API in afl_mutator.c): outputs fit the engine's size limit, decode to the case
 * they claim, stay under the flop cap, depend only on the seed, and trimming shrinks
 * and terminates. Registered by tests/fuzz.cmake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "afl_mutator.h"
#include "case_mutator.h"


static const af_casemut_opts opts = {0, 2e7};

/* A drawn case and its full (untrimmed) encoding. */
static size_t drawn(uint64_t seed, af_case *c, uint8_t *buf) {
    af_rng r;
    af_rng_init(&r, seed, 7);
    af_case_generate(c, &r, 0, 2e7);
    return af_case_encode(c, buf, AF_CASE_ENCODED_MAX);
}

static void test_encode_drops_trailing_zeros_only(void **state) {
    (void)state;
    for (uint64_t s = 0; s < 300; s++) {
        af_case c, back;
        uint8_t full[AF_CASE_ENCODED_MAX], out[AF_CASE_ENCODED_MAX];
        size_t nfull = drawn(s, &c, full);
        af_case orig = c;
        size_t n = af_casemut_encode(&c, out, sizeof out, &opts);
        assert_true(n > 0 && n <= nfull);
        assert_memory_equal(out, full, n);
        for (size_t k = n; k < nfull; k++) assert_int_equal(full[k], 0);
        af_case_decode(&back, out, n, 0);
        assert_true(af_case_equal(&back, &orig));
    }
}

static void test_encode_fits_small_limits(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.batch = 40;
    c.key_padding = true;
    c.kv_len = 9;
    for (uint32_t b = 0; b < c.batch; b++) c.kv_valid[b] = 1 + b % 9;
    af_case_repair(&c, 0);
    uint8_t out[AF_CASE_ENCODED_MAX];
    size_t n = af_casemut_encode(&c, out, 140, &opts); /* 114 bytes + 4 per batch row */
    assert_true(n > 0 && n <= 140);
    assert_true(c.batch <= 6);
    af_case back;
    af_case_decode(&back, out, n, 0);
    assert_true(af_case_equal(&back, &c));
    assert_int_equal(af_casemut_encode(&c, out, 10, &opts), 0); /* nothing fits 10 bytes */
}

static void test_mutate_fits_caps_and_is_deterministic(void **state) {
    (void)state;
    size_t changed = 0;
    for (uint64_t s = 0; s < 300; s++) {
        af_case c;
        uint8_t in[AF_CASE_ENCODED_MAX], a[AF_CASE_ENCODED_MAX], b[AF_CASE_ENCODED_MAX];
        size_t n = drawn(s, &c, in);
        size_t max = 118 + (size_t)(s % 300); /* every field fits from 114 bytes on */
        size_t na = af_casemut_mutate(in, n, a, max, s * 31 + 1, &opts);
        size_t nb = af_casemut_mutate(in, n, b, max, s * 31 + 1, &opts);
        assert_true(na > 0 && na <= max);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        af_case m;
        af_case_decode(&m, a, na, 0);
        assert_true(af_case_flops(&m) <= opts.max_flops);
        assert_int_equal(af_case_validate(&m, 0, NULL), AF_OK);
        if (na != n || memcmp(a, in, na) != 0) changed++;
        /* in place, as libFuzzer calls it */
        uint8_t inplace[AF_CASE_ENCODED_MAX];
        memcpy(inplace, in, n);
        size_t ni = af_casemut_mutate(inplace, n, inplace, max, s * 31 + 1, &opts);
        assert_int_equal(ni, na);
        assert_memory_equal(inplace, a, na);
    }
    assert_true(changed > 250); /* a mutation nearly always changes something */
}

static void test_crossover_of_equal_parents_is_the_parent(void **state) {
    (void)state;
    for (uint64_t s = 0; s < 100; s++) {
        af_case c;
        uint8_t in[AF_CASE_ENCODED_MAX], out[AF_CASE_ENCODED_MAX];
        size_t n = drawn(s, &c, in);
        size_t no = af_casemut_crossover(in, n, in, n, out, sizeof out, s, &opts);
        af_case x;
        af_case_decode(&x, out, no, 0);
        af_case_cap_flops(&c, opts.max_flops, 0);
        assert_true(af_case_equal(&x, &c));
    }
}

static void test_shrink_steps_simplify(void **state) {
    (void)state;
    af_case d;
    af_case_default(&d);
    for (unsigned k = 0; k < AF_CASEMUT_SHRINK_STEPS; k++) {
        af_case c = d;
        assert_false(af_casemut_shrink(&c, k, &opts)); /* nothing left to drop */
        assert_true(af_case_equal(&c, &d));
    }
    for (uint64_t s = 0; s < 200; s++) {
        af_case c;
        uint8_t in[AF_CASE_ENCODED_MAX];
        drawn(s, &c, in);
        for (unsigned k = 0; k < AF_CASEMUT_SHRINK_STEPS; k++) {
            af_case t = c;
            if (!af_casemut_shrink(&t, k, &opts)) continue;
            assert_false(af_case_equal(&t, &c));
            assert_true(af_case_flops(&t) <= af_case_flops(&c));
            assert_int_equal(af_case_validate(&t, 0, NULL), AF_OK);
        }
    }
}

static void test_afl_fuzz_respects_max_size(void **state) {
    (void)state;
    void *m = afl_custom_init(NULL, 5);
    assert_non_null(m);
    for (uint64_t s = 0; s < 200; s++) {
        af_case c, c2;
        uint8_t in[AF_CASE_ENCODED_MAX], other[AF_CASE_ENCODED_MAX];
        size_t n = drawn(s, &c, in), n2 = drawn(s + 1000, &c2, other);
        uint8_t *out = NULL;
        size_t max = 120 + (size_t)(s % 200);
        size_t k = afl_custom_fuzz(m, in, n, &out, s % 2 ? other : NULL, s % 2 ? n2 : 0, max);
        assert_non_null(out);
        assert_true(k > 0);
        assert_true(k <= max || out == in); /* unchanged input when nothing fits */
        assert_non_null(afl_custom_describe(m, 64));
    }
    afl_custom_deinit(m);
}

/* Trimming as afl-fuzz drives it, accepting every step: it must end within its step
 * budget with a case no larger than the start (here, all the way down). */
static void test_afl_trim_terminates_and_shrinks(void **state) {
    (void)state;
    void *m = afl_custom_init(NULL, 9);
    af_case c;
    af_case_default(&c);
    c.batch = 4;
    c.q_heads = c.kv_heads = 4;
    c.q_len = c.kv_len = 64;
    c.head_dim = c.v_head_dim = 32;
    c.causal = true;
    c.amask.present = true;
    c.amask.dims = AF_MDIM_ALL;
    c.dropout_p = 0.25;
    af_case_repair(&c, 0);
    uint8_t buf[AF_CASE_ENCODED_MAX], last[AF_CASE_ENCODED_MAX];
    size_t n = af_casemut_encode(&c, buf, sizeof buf, &opts), nlast = 0;
    int32_t stages = afl_custom_init_trim(m, buf, n);
    assert_true(stages > 0);
    int32_t cur = 0, rounds = 0;
    while (cur < stages) {
        uint8_t *out = NULL;
        size_t k = afl_custom_trim(m, &out);
        assert_true(k > 0 && k <= n);
        memcpy(last, out, k);
        nlast = k;
        int32_t next = afl_custom_post_trim(m, 1);
        assert_true(next >= cur || next == stages);
        cur = next;
        assert_true(++rounds <= 64);
    }
    af_case t;
    af_case_decode(&t, last, nlast, 0);
    assert_true(af_case_flops(&t) < af_case_flops(&c));
    assert_false(t.causal || t.amask.present || t.dropout_p > 0.0);
    afl_custom_deinit(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_drops_trailing_zeros_only),
        cmocka_unit_test(test_encode_fits_small_limits),
        cmocka_unit_test(test_mutate_fits_caps_and_is_deterministic),
        cmocka_unit_test(test_crossover_of_equal_parents_is_the_parent),
        cmocka_unit_test(test_shrink_steps_simplify),
        cmocka_unit_test(test_afl_fuzz_respects_max_size),
        cmocka_unit_test(test_afl_trim_terminates_and_shrinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
