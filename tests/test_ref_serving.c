/* test_ref_serving.c - the float64 reference on the serving forms (src/backends/ref.c with
 * case_serving.c's per-segment bounds): each segment of a packed or paged case against a
 * dense case of its own (B = 1, the segment's lengths, its values copied), in which every
 * serving feature is written out the way a user without one would write it: the structural
 * masks as -inf in an additive mask, ALiBi's bias as that mask's values, a sink as one more
 * key with K and V rows of 0 and the sink logit as its mask value. Plus hand values. */
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

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"
#include "backends/ref_honest.h"

static void print_case(const char *what, const af_case *c) {
    char *j = af_case_to_json(c);
    print_error("%s:\n%s\n", what, j ? j : "(no json)");
    free(j);
}

/* The reference's output of the tensors t (a contiguous float64 [B, Hq, Sq, Dv] buffer). */
static double *run_ref(const af_case_tensors *t) {
    af_backend *be = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_open("ref", &be, &err), AF_OK);
    af_tensor out;
    af_backend_out_shape(be, t->c, &out);
    double *buf = malloc(af_tensor_numel(&out) * sizeof *buf);
    out.data = buf;
    if (af_backend_run(be, t, &out, &err) != AF_OK) fail_msg("ref: %s", err.msg);
    af_backend_close(be);
    return buf;
}

/* ALiBi's bias as this test computes it: -slope (d - j), or -slope |d - j|. */
static double bias_of(const af_case *c, float slope, int64_t d, int64_t j) {
    double dist = (double)(d - j);
    return -(double)slope * (c->serve.alibi_symmetric ? fabs(dist) : dist);
}

/* Segment b of serving case c (tensors t) as a dense case: keys 0..nk-1 of the segment and,
 * with a sink, key nk of zeros; every mask in one f32 additive [1, Hq, nq, nk'] mask. */
static void check_segment(const af_case *c, const af_case_tensors *t, const double *out, uint32_t b) {
    uint32_t nq = af_case_seg_q(c, b), nk = af_case_seg_k(c, b);
    size_t Hq = c->q_heads, Dv = c->v_head_dim;
    bool sinks = c->serve.forms & AF_SERVE_SINKS, alibi = c->serve.forms & AF_SERVE_ALIBI;
    if (!nq) return;
    if (!nk && !sinks) { /* no keys: every row 0 */
        for (size_t h = 0; h < Hq; h++)
            for (uint32_t i = 0; i < nq; i++)
                for (size_t d = 0; d < Dv; d++) assert_true(out[((b * Hq + h) * c->q_len + i) * Dv + d] == 0.0);
        return;
    }
    af_case d;
    af_case_default(&d);
    d.batch = 1, d.q_heads = c->q_heads, d.kv_heads = c->kv_heads, d.head_dim = c->head_dim, d.v_head_dim = c->v_head_dim;
    d.q_len = nq, d.kv_len = nk + (sinks ? 1u : 0u);
    d.dtype = c->dtype, d.scale_set = true, d.scale = af_case_scale(c), d.softcap = c->softcap;
    d.amask.present = true, d.amask.dims = AF_MDIM_H | AF_MDIM_Q | AF_MDIM_K, d.amask.dtype = AF_F32;
    af_error err = {0};
    if (af_case_validate(&d, SIZE_MAX, &err) != AF_OK) fail_msg("dense twin: %s", err.msg);
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_alloc(in, &d, &err), AF_OK);
    const af_case_tensors *u = af_inputs_get(in);
    for (size_t h = 0; h < Hq; h++)
        for (uint32_t i = 0; i < nq; i++)
            for (size_t e = 0; e < c->head_dim; e++) af_view_set(&u->qv, 0, h, i, e, af_view_get(&t->qv, b, h, i, e));
    for (size_t g = 0; g < c->kv_heads; g++)
        for (uint32_t j = 0; j < d.kv_len; j++) {
            for (size_t e = 0; e < c->head_dim; e++)
                af_view_set(&u->kv, 0, g, j, e, j < nk ? af_view_get(&t->kv, b, g, j, e) : 0.0);
            for (size_t e = 0; e < c->v_head_dim; e++)
                af_view_set(&u->vv, 0, g, j, e, j < nk ? af_view_get(&t->vv, b, g, j, e) : 0.0);
        }
    const float *slopes = alibi ? t->srv.slopes.data : NULL;
    int64_t off = af_case_diag_offset(c, b);
    for (size_t h = 0; h < Hq; h++)
        for (uint32_t i = 0; i < nq; i++)
            for (uint32_t j = 0; j < d.kv_len; j++) {
                double m;
                if (j == nk) {
                    m = (double)af_serving_sink(t, (uint32_t)h); /* the sink as a key: score 0 + z */
                } else {
                    int64_t lo, hi;
                    af_mask_row_bounds(c, b, i, &lo, &hi);
                    bool live = (int64_t)j >= lo && (int64_t)j <= hi;
                    m = live ? (alibi ? bias_of(c, slopes[h], (int64_t)i + off, j) : 0.0) : -HUGE_VAL;
                }
                af_view_set(&u->am, 0, h, i, j, m);
            }
    double *want = run_ref(u);
    for (size_t h = 0; h < Hq; h++)
        for (uint32_t i = 0; i < nq; i++)
            for (size_t e = 0; e < Dv; e++) {
                double got = out[((b * Hq + h) * c->q_len + i) * Dv + e], w = want[(h * nq + i) * Dv + e];
                if (!(fabs(got - w) <= 1e-12 * (1.0 + fabs(w))) && !(isnan(got) && isnan(w))) {
                    print_case("serving case", c);
                    fail_msg("segment %u head %zu query %u dim %zu: %.17g, the dense twin %.17g", b, h, i, e, got, w);
                }
            }
    free(want);
    af_inputs_destroy(in);
}

/* Can the dense twin write this case out exactly? Its one additive f32 mask holds ALiBi's
 * bias exactly only for slopes that are powers of two (the geometric ones of 1, 2, 4 or 8
 * heads: 2^(-8 (h + 1) / Hq)) and distances under 2^24; no tensor masks (they would need a second mask), no
 * dropout (drawn per batch index), no planted specials (a NaN under an additive -inf stays
 * NaN, a structurally masked one does not). */
static bool twin_writes_out(const af_case *c) {
    if (c->amask.present || c->bmask.present || c->dropout_p > 0.0) return false;
    for (int w = 0; w < AF_QKV_COUNT; w++)
        if (c->t[w].special != AF_SPECIAL_NONE) return false;
    if (c->serve.forms & AF_SERVE_ALIBI)
        return !c->serve.alibi_random && (c->q_heads & (c->q_heads - 1)) == 0 && c->q_heads <= 8 &&
               c->kv_len < (1u << 20);
    return true;
}

static void test_segments_vs_dense_twins(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 20260424, 0);
    af_gen_opts o = {16u << 20, 4e5, 0.0, 1.0, 0.0};
    size_t n = scaled_at_least(10000, 2500), checked = 0, segments = 0; /* every form combination even scaled down */
    size_t forms[16] = {0};
    for (size_t k = 0; k < n; k++) {
        af_case c;
        af_case_generate_opts(&c, &r, &o);
        af_case_cap_flops(&c, 4e5, 16u << 20);
        if (!c.serve.forms || !twin_writes_out(&c)) continue;
        af_inputs *in = af_inputs_create();
        af_error err = {0};
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        double *out = run_ref(t);
        for (uint32_t b = 0; b < c.batch; b++) {
            check_segment(&c, t, out, b);
            segments++;
        }
        /* rows past a segment's queries are 0 */
        for (uint32_t b = 0; b < c.batch; b++)
            for (size_t h = 0; h < c.q_heads; h++)
                for (uint32_t i = af_case_seg_q(&c, b); i < c.q_len; i++)
                    for (size_t e = 0; e < c.v_head_dim; e++)
                        assert_true(out[((b * c.q_heads + h) * c.q_len + i) * c.v_head_dim + e] == 0.0);
        free(out);
        af_inputs_destroy(in);
        checked++;
        forms[c.serve.forms]++;
    }
    print_message("%zu serving cases, %zu segments against dense twins\n", checked, segments);
    for (int f = 1; f < 16; f++)
        if (!forms[f]) fail_msg("no case of serving forms 0x%x was checked", f);
}

/* A sink by hand: one key of score s, a sink z: out = v / (1 + e^(z - s)). */
static void test_sink_by_hand(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.head_dim = c.v_head_dim = 1, c.scale_set = true, c.scale = 1.0;
    c.serve.forms = AF_SERVE_SINKS, c.serve.sink_seed = 3;
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    double q = af_view_get(&t->qv, 0, 0, 0, 0), k = af_view_get(&t->kv, 0, 0, 0, 0), v = af_view_get(&t->vv, 0, 0, 0, 0);
    double z = (double)af_serving_sink(t, 0);
    double *out = run_ref(t);
    double want = v / (1.0 + exp(z - q * k));
    assert_true(fabs(out[0] - want) <= 1e-15 * fabs(want));
    free(out);
    af_inputs_destroy(in);
}

/* ALiBi by hand: one head (slope 2^(-8 * 1 / 1) = 2^-8), two keys, one query aligned
 * bottom-right; weights e^(s_j - slope (d - j)), normalized. */
static void test_alibi_by_hand(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.q_len = 1, c.kv_len = 2, c.head_dim = c.v_head_dim = 1, c.scale_set = true, c.scale = 0.0;
    c.diag = AF_DIAG_BOTTOM_RIGHT;
    c.serve.forms = AF_SERVE_ALIBI;
    for (int sym = 0; sym < 2; sym++) {
        c.serve.alibi_symmetric = sym;
        af_inputs *in = af_inputs_create();
        af_error err = {0};
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        float slope = ((const float *)t->srv.slopes.data)[0];
        assert_true(slope == 0x1p-8f);
        /* scale 0: scores 0; d = 0 + (2 - 1) = 1; key 0 at distance 1, key 1 at 0 */
        double w0 = exp(-0x1p-8), w1 = 1.0;
        double v0 = af_view_get(&t->vv, 0, 0, 0, 0), v1 = af_view_get(&t->vv, 0, 0, 1, 0);
        double *out = run_ref(t);
        double want = (w0 * v0 + w1 * v1) / (w0 + w1);
        assert_true(fabs(out[0] - want) <= 1e-15 * (1.0 + fabs(want)));
        free(out);
        af_inputs_destroy(in);
    }
}

/* The weight of key j with every score off by e_k (the sink's term exact). */
static double weight_with(const double *s, const double *e, size_t n, double z, size_t j) {
    double mx = z;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, s[k] + e[k]);
    double den = z > -HUGE_VAL ? exp(z - mx) : 0.0;
    for (size_t k = 0; k < n; k++) den += exp(s[k] + e[k] - mx);
    return exp(s[j] + e[j] - mx) / den;
}

/* af_sens_weights on random rows of n <= 6 keys: each key's bound must be its weight's
 * largest move, reached with its own score off by +-d_j and every other key's by -+d_k (the
 * weight is monotone in each error), computed here directly; random errors inside the
 * bounds stay inside. Scores spread over +-spread/2, errors up to emax (a third of the rows
 * up to 0.5 emax / 1e-3 ... as drawn), a sink in four rows of five (a fifth: none). */
static size_t sens_weights_rows(uint64_t seed, double spread, double emax, bool sinks) {
    af_rng r;
    af_rng_init(&r, seed, 0x53454e53);
    enum { N = 6 };
    size_t rows = 0;
    for (int it = 0; it < 4000; it++) {
        size_t n = 1 + af_rng_below(&r, N);
        double s[N] = {0}, d[N] = {0}, w[N], e[N];
        double m = -HUGE_VAL;
        for (size_t k = 0; k < n; k++) {
            s[k] = spread * (af_rng_uniform(&r) - 0.5);
            d[k] = af_rng_uniform(&r) * (it % 3 ? 2e-3 * emax : emax);
            m = fmax(m, s[k]);
        }
        double z = !sinks || it % 5 == 0 ? -HUGE_VAL : m + 3.0 * spread * (af_rng_uniform(&r) - 0.5);
        memcpy(w, d, sizeof w);
        af_sens_weights(s, m, w, n, NULL, 0, 0.0, z);
        for (size_t j = 0; j < n; j++) {
            double p = weight_with(s, (double[N]){0}, n, z, j);
            for (size_t k = 0; k < n; k++) e[k] = k == j ? d[k] : -d[k];
            double hi = weight_with(s, e, n, z, j);
            for (size_t k = 0; k < n; k++) e[k] = -e[k];
            double lo = weight_with(s, e, n, z, j);
            double want = fmax(hi - p, p - lo);
            if (!(fabs(w[j] - want) <= 1e-12 + 1e-9 * want))
                fail_msg("row %d key %zu of %zu (sink %g, max %g): bound %.17g, largest move %.17g", it, j, n, z, m,
                         w[j], want);
            for (size_t k = 0; k < n; k++) e[k] = d[k] * (2.0 * af_rng_uniform(&r) - 1.0);
            assert_true(fabs(weight_with(s, e, n, z, j) - p) <= w[j] + 1e-15);
        }
        rows++;
    }
    return rows;
}

/* ... with a sink: rows where the sink is the largest term, where a key is, and where the
 * sink is far below or above every key. */
static void test_sens_weights_sink(void **state) {
    (void)state;
    print_message("%zu rows\n", sens_weights_rows(77, 4.0, 0.5, true));
}

/* ... with errors of thousands on scores of 1e5 (bf16 scores past 1e5 are off by hundreds):
 * the top key's rest, shifted by the top key's own term, underflowed to 0 when every other
 * key lay more than ~745 below it, and the top key kept its weight 1 in the bound although
 * another key's score, within its error, could overtake it by far (jax explicit, bf16 Q of
 * 1e3 and K of 1e2: a bound of 0.08 where the weights may swap). */
static void test_sens_weights_wide(void **state) {
    (void)state;
    print_message("%zu rows\n", sens_weights_rows(78, 4e5, 4e4, false));
    print_message("%zu rows (sinks)\n", sens_weights_rows(79, 4e5, 4e4, true));
    /* the bundle's row: key 2 on top, key 5 1024 below it, both off by thousands */
    double s[6] = {-176128, -96256, 181248, -14976, -153600, 180224};
    double d[6] = {12878.6, 12317.4, 12957.1, 8868, 12567.8, 8382.21};
    af_sens_weights(s, 181248, d, 6, NULL, 0, 0.0, -HUGE_VAL);
    assert_true(d[2] > 0.999 && d[5] > 0.999);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_vs_dense_twins),
        cmocka_unit_test(test_sink_by_hand),
        cmocka_unit_test(test_alibi_by_hand),
        cmocka_unit_test(test_sens_weights_sink),
        cmocka_unit_test(test_sens_weights_wide),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
