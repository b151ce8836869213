/* test_case_edges.c - the generator's edges distribution (src/core/case_gen_edges.c): over N
 * draws each field goes on an edge as often as its weight says, each switch is drawn below,
 * at and above it equally often, and the shares match the hand values worked out from the
 * documented table (docs/design.md section 2, "The generator"); a campaign's cases stay valid
 * and within the flop cap; the weights rise for the fields a backend's refusals cluster on;
 * share 0 leaves the generator's draws untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"

/* count within rel of want (a share of n draws), or fail naming what */
static void near_share(size_t count, size_t n, double want, double rel, const char *what) {
    double got = (double)count / (double)n;
    if (fabs(got - want) > rel * want)
        fail_msg("%s: %zu of %zu draws (%.4f), want %.4f +- %.0f%%", what, count, n, got, want, rel * 100.0);
}

/* batch 1, one head, 4 x 4, D 16, BHSD: every edge value fits it without repair */
static void base(af_case *c) {
    af_case_default(c);
    c->batch = 1, c->q_heads = c->kv_heads = 1, c->q_len = c->kv_len = 4, c->head_dim = c->v_head_dim = 16;
}

static void test_edges_shares(void **state) {
    (void)state;
    const size_t N = 60000;
    af_rng r;
    af_rng_init(&r, 2026, 0);
    size_t on[AF_EDGE_COUNT] = {0}, hd = 0, sq = 0, gq = 0, al = 0;
    size_t d_at[300] = {0}, kv_at[600] = {0}, ratio[9] = {0}, unaligned = 0, dv_same = 0;
    for (size_t i = 0; i < N; i++) {
        af_case c;
        base(&c);
        unsigned f = af_gen_edges(&c, &r, NULL, 0.0, 0);
        assert_true(f != 0 && f < (1u << AF_EDGE_COUNT));
        for (int k = 0; k < AF_EDGE_COUNT; k++) on[k] += (f >> k) & 1u;
        if (f & (1u << AF_EDGE_HEAD_DIM)) {
            hd++;
            assert_true(c.head_dim < 300);
            d_at[c.head_dim]++;
            dv_same += c.v_head_dim == c.head_dim;
        } else {
            assert_int_equal(c.head_dim, 16);
        }
        if (f & (1u << AF_EDGE_SEQ)) {
            sq++;
            assert_true(c.kv_len < 600);
            kv_at[c.kv_len]++;
            assert_true(c.q_len == c.kv_len || (c.q_len >= 1 && c.q_len <= 16));
        }
        if (f & (1u << AF_EDGE_GQA)) {
            gq++;
            assert_int_equal(c.q_heads % c.kv_heads, 0);
            assert_true(c.kv_heads == 1 || c.kv_heads == 2 || c.kv_heads == 4);
            ratio[c.q_heads / c.kv_heads]++;
        }
        if (f & (1u << AF_EDGE_ALIGN)) {
            al++;
            for (int t = 0; t < AF_QKV_COUNT; t++) unaligned += c.t[t].pad % 2 == 1;
        }
        af_error err = {0};
        if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("an edge case is invalid: %s", err.msg);
    }
    /* each field on an edge with 1/2, and a field drawn alone when none was: 1/2 + 1/16 * 1/4 */
    for (int k = 0; k < AF_EDGE_COUNT; k++) near_share(on[k], N, 33.0 / 64.0, 0.03, af_edge_field_names[k]);
    /* head dims: a power of two p - 1, p, p + 1 each 5/6 * 1/6 * 1/3 = 5/108 (both sides of
     * every switch alike); 288 past the ceiling 1/6 * 1/8 */
    static const unsigned pow2[] = {8, 16, 32, 64, 128, 256};
    char what[64];
    for (size_t k = 0; k < 6; k++)
        for (int s = -1; s <= 1; s++) {
            snprintf(what, sizeof what, "head dim %d", (int)pow2[k] + s);
            near_share(d_at[(int)pow2[k] + s], hd, 5.0 / 108.0, 0.12, what);
        }
    near_share(d_at[288], hd, 1.0 / 48.0, 0.15, "head dim 288");
    near_share(dv_same, hd, 3.0 / 4.0 + 1.0 / 4.0 * (5.0 / 108.0 * 5.0 / 108.0 * 18 + 8 * (1.0 / 48.0) * (1.0 / 48.0)),
               0.03, "Dv = D");
    /* kv_len: 64, 128, 256, 512 minus one, at, plus one each 5/6 * 1/4 * 1/3 = 5/72; 192 and
     * 384 each 1/12 */
    static const unsigned tiles[] = {64, 128, 256, 512};
    for (size_t k = 0; k < 4; k++)
        for (int s = -1; s <= 1; s++) {
            snprintf(what, sizeof what, "kv_len %d", (int)tiles[k] + s);
            near_share(kv_at[(int)tiles[k] + s], sq, 5.0 / 72.0, 0.1, what);
        }
    near_share(kv_at[192], sq, 1.0 / 12.0, 0.1, "kv_len 192");
    near_share(kv_at[384], sq, 1.0 / 12.0, 0.1, "kv_len 384");
    /* GQA: ratios 1 (Hq = Hkv), 2, 4, 8 and odd 3, 5, 7 each 1/7 */
    static const unsigned ratios[] = {1, 2, 3, 4, 5, 7, 8};
    for (size_t k = 0; k < 7; k++) {
        snprintf(what, sizeof what, "GQA ratio %u", ratios[k]);
        near_share(ratio[ratios[k]], gq, 1.0 / 7.0, 0.08, what);
    }
    assert_int_equal(ratio[6], 0);
    /* rows: half the tensors padded by an odd count (unaligned), half by 0 or 8 */
    near_share(unaligned, 3 * al, 0.5, 0.04, "unaligned rows");
}

/* A field weighted 4 goes on an edge with 4/5 + (1/5 * 1/8) * 4/7; the others with
 * 1/2 + (1/5 * 1/8) * 1/7. */
static void test_edges_weighted(void **state) {
    (void)state;
    const size_t N = 40000;
    af_rng r;
    af_rng_init(&r, 7, 1);
    uint8_t w[AF_EDGE_COUNT] = {4, 1, 0, 1};
    size_t on[AF_EDGE_COUNT] = {0};
    for (size_t i = 0; i < N; i++) {
        af_case c;
        base(&c);
        unsigned f = af_gen_edges(&c, &r, w, 0.0, 0);
        for (int k = 0; k < AF_EDGE_COUNT; k++) on[k] += (f >> k) & 1u;
    }
    near_share(on[AF_EDGE_HEAD_DIM], N, 0.8 + 0.025 * 4.0 / 7.0, 0.02, "head_dim weighted 4");
    for (int k = 1; k < AF_EDGE_COUNT; k++) near_share(on[k], N, 0.5 + 0.025 / 7.0, 0.03, af_edge_field_names[k]);
}

/* Is d one of the table's head dims (a power of two 8..256 or one off it, or between)? */
static bool is_edge_dim(uint32_t d) {
    static const uint32_t between[] = {24, 40, 80, 96, 160, 192, 224, 288};
    for (uint32_t p = 8; p <= 256; p *= 2)
        if (d + 1 >= p && d <= p + 1) return true;
    for (size_t k = 0; k < 8; k++)
        if (d == between[k]) return true;
    return false;
}

/* The whole generator with every case on the edges, under a campaign's cap: valid, within
 * the budget and the flops, and both sides of 256 (head dim) and 512 (kv_len) still drawn. */
static void test_edges_generated(void **state) {
    (void)state;
    const size_t N = scaled_at_least(20000, 2000);
    const double max_flops = 2e7;
    af_rng r;
    af_rng_init(&r, 99, 0);
    af_gen_opts o = {0, max_flops, 0.1, 0.25, 0.1};
    af_gen_edges_opts e = {1.0, {0}, 0};
    size_t d[3] = {0}, kv[3] = {0}, kept_d = 0, drawn_d = 0;
    for (size_t i = 0; i < N; i++) {
        af_case c;
        af_case_generate_edges(&c, &r, &o, &e);
        af_error err = {0};
        if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("case %zu invalid: %s", i, err.msg);
        assert_true(e.fields != 0);
        assert_true(af_case_flops(&c) <= max_flops);
        assert_true(af_case_tensor_bytes(&c) <= AF_DEFAULT_BUDGET);
        if (e.fields & (1u << AF_EDGE_HEAD_DIM)) {
            drawn_d++;
            kept_d += is_edge_dim(c.head_dim);
            if (c.head_dim >= 255 && c.head_dim <= 257) d[c.head_dim - 255]++;
        }
        if ((e.fields & (1u << AF_EDGE_SEQ)) && c.kv_len >= 511 && c.kv_len <= 513) kv[c.kv_len - 511]++;
    }
    for (int s = 0; s < 3; s++) {
        if (d[s] < N / 400) fail_msg("head dim %d drawn %zu times of %zu", 255 + s, d[s], N);
        if (kv[s] < N / 400) fail_msg("kv_len %d drawn %zu times of %zu", 511 + s, kv[s], N);
    }
    /* the cap shrinks other fields first: nine in ten edge head dims survive it */
    near_share(kept_d, drawn_d, 0.95, 0.06, "edge head dims kept under the cap");

    /* share 0: exactly af_case_generate_opts's cases */
    af_rng a, b;
    af_rng_init(&a, 5, 0);
    af_rng_init(&b, 5, 0);
    af_gen_edges_opts none = {0.0, {0}, 0};
    for (int i = 0; i < 500; i++) {
        af_case x, y;
        af_case_generate_opts(&x, &a, &o);
        af_case_generate_edges(&y, &b, &o, &none);
        assert_memory_equal(&x, &y, sizeof x);
        assert_int_equal(none.fields, 0);
    }
}

static void test_edge_weights(void **state) {
    (void)state;
    af_edge_tally t;
    memset(&t, 0, sizeof t);
    /* 100 edge cases, 20 refused; head dim on an edge in 50 of them, 40 of those refused
     * (0.8 against 0.2: 1 + 3 * 0.6 / 0.8 = 3.25 -> 3); GQA in 50, none refused; seq in 10 */
    for (int i = 0; i < 100; i++) {
        unsigned f = 0;
        bool refused = false;
        if (i < 50) f |= 1u << AF_EDGE_HEAD_DIM, refused = i < 20;
        if (i >= 50) f |= 1u << AF_EDGE_GQA;
        if (i < 10) f |= 1u << AF_EDGE_SEQ;
        af_edge_tally_note(&t, f, refused);
    }
    assert_int_equal(t.cases, 100);
    assert_int_equal(t.refused_cases, 20);
    assert_int_equal(t.refused[AF_EDGE_HEAD_DIM], 20);
    uint8_t w[AF_EDGE_COUNT] = {0};
    af_edge_weights(&t, w);
    /* head dim: 20 of 50 refused (0.4 against 0.2): 1 + 3 * 0.2 / 0.8 = 1.75 -> 1 */
    assert_int_equal(w[AF_EDGE_HEAD_DIM], 1);
    for (int i = 0; i < 20; i++) af_edge_tally_note(&t, 1u << AF_EDGE_HEAD_DIM, true);
    /* now 120 cases, 40 refused (1/3); head dim 40 of 70 (4/7): 1 + 3 (4/7 - 1/3) / (2/3) = 2.07 -> 2 */
    af_edge_weights(&t, w);
    assert_int_equal(w[AF_EDGE_HEAD_DIM], 2);
    assert_int_equal(w[AF_EDGE_GQA], 1);      /* refused less than the rest */
    assert_int_equal(w[AF_EDGE_SEQ], 1);      /* 10 drawn: too few to say */
    assert_int_equal(w[AF_EDGE_ALIGN], 1);
    /* another backend's weights only raise: w[] keeps the larger */
    af_edge_tally u;
    memset(&u, 0, sizeof u);
    for (int i = 0; i < 40; i++) af_edge_tally_note(&u, i < 20 ? 1u << AF_EDGE_ALIGN : 1u << AF_EDGE_GQA, i < 20);
    af_edge_weights(&u, w); /* align: all 20 refused, rate 0.5: 1 + 3 * 0.5 / 0.5 = 4 */
    assert_int_equal(w[AF_EDGE_ALIGN], 4);
    assert_int_equal(w[AF_EDGE_HEAD_DIM], 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges_shares),
        cmocka_unit_test(test_edges_weighted),
        cmocka_unit_test(test_edges_generated),
        cmocka_unit_test(test_edge_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
