/* test_oracle.c - finding signatures and features, the tolerance rule of oracle.h
 * (floors from the dtype and max |V|, rounding to the case dtype passes, visible errors
 * fail), the classification of NaN / Inf against the reference, the metrics, and pair
 * comparisons with permuted or partial rows. Outputs here are built from the reference
 * by hand (rounded, perturbed, permuted), so the expected verdict is known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/dtype.h"
#include "attnfuzz/oracle.h"
#include "attnfuzz/tensor.h"

#define DNAN ((double)NAN)
#define DINF ((double)INFINITY)

/* --- signatures and features ---------------------------------------------------------- */

static void test_signature(void **state) {
    (void)state;
    af_case c, d;
    af_case_default(&c);
    c.batch = 2, c.q_heads = 4, c.kv_heads = 2, c.q_len = 8, c.kv_len = 8, c.head_dim = 16, c.v_head_dim = 16;
    uint64_t s = af_signature(AF_KIND_DIVERGE, "explicit", &c);
    assert_true(s == af_signature(AF_KIND_DIVERGE, "explicit", &c)); /* stable */
    /* fields that are not features: the same bug, the same signature */
    d = c;
    d.batch = 7, d.q_len = d.kv_len = 33, d.head_dim = d.v_head_dim = 64;
    for (int t = 0; t < 3; t++) d.t[t].seed = 999u + (uint32_t)t;
    d.t[AF_V].mag_q4 = 8;
    assert_true(s == af_signature(AF_KIND_DIVERGE, "explicit", &d));
    /* kind, who, and each feature change it */
    assert_true(s != af_signature(AF_KIND_NAN_MISMATCH, "explicit", &c));
    assert_true(s != af_signature(AF_KIND_DIVERGE, "fused", &c));
    assert_true(s != af_signature(AF_KIND_DIVERGE, "explicit|fused", &c));
    assert_true(s != af_signature(AF_KIND_DIVERGE, "", &c));
    d = c, d.dtype = AF_BF16;
    assert_true(s != af_signature(AF_KIND_DIVERGE, "explicit", &d));
    d = c, d.causal = true;
    assert_true(s != af_signature(AF_KIND_DIVERGE, "explicit", &d));
    d = c, d.t[AF_K].layout = AF_LAYOUT_SBHD;
    assert_true(s != af_signature(AF_KIND_DIVERGE, "explicit", &d));
    /* a very long name is fine */
    char longname[2000];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_true(af_signature(AF_KIND_DIVERGE, longname, &c) == af_signature(AF_KIND_DIVERGE, longname, &c));
}

static void test_features(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.batch = 2, c.q_heads = 2, c.kv_heads = 2, c.q_len = 4, c.kv_len = 4, c.head_dim = 8, c.v_head_dim = 8;
    uint64_t f = af_case_features(&c);
    af_case d;
#define CHANGES(mutation)                                                                          \
    do {                                                                                           \
        d = c;                                                                                     \
        mutation;                                                                                  \
        if (af_case_features(&d) == f) fail_msg("features ignore: %s", #mutation);                \
    } while (0)
#define KEEPS(mutation)                                                                            \
    do {                                                                                           \
        d = c;                                                                                     \
        mutation;                                                                                  \
        if (af_case_features(&d) != f) fail_msg("features depend on: %s", #mutation);             \
    } while (0)
    CHANGES(d.dtype = AF_F16);
    CHANGES(d.dtype = AF_BF16);
    CHANGES(d.allow_tf32 = true);
    CHANGES(d.t[AF_Q].layout = AF_LAYOUT_BSHD);
    CHANGES(d.t[AF_K].layout = AF_LAYOUT_BSD);
    CHANGES(d.t[AF_V].layout = AF_LAYOUT_CHANNELS_FIRST);
    CHANGES(d.amask.present = true);
    CHANGES(d.bmask.present = true);
    CHANGES(d.causal = true);
    CHANGES((d.causal = true, d.diag = AF_DIAG_BOTTOM_RIGHT)); /* alignment differs from top-left */
    CHANGES(d.key_padding = true);
    CHANGES(d.window_left = 3);
    CHANGES(d.q_heads = 4);
    CHANGES(d.kv_len = 5);
    CHANGES(d.v_head_dim = 4);
    CHANGES(d.dropout_p = 0.5);
    CHANGES(d.softcap = 30.0);
    CHANGES(d.placement = AF_PLACE_SQRT_QK);
    CHANGES(d.t[AF_V].pad = 1);
    CHANGES(d.t[AF_K].perm = 3);
    CHANGES(d.t[AF_K].bcast = AF_BCAST_BATCH);
    CHANGES(d.t[AF_V].special = AF_SPECIAL_NAN_MASKED);
    CHANGES(d.scale_set = true);
    CHANGES((d.amask.present = true, d.amask.dtype = AF_F16)); /* mask dtype != case dtype */
    CHANGES(d.t[AF_Q].dist = AF_DIST_NEAR_OVERFLOW);
    CHANGES(d.t[AF_K].dist = AF_DIST_DENORMAL);
    KEEPS(d.batch = 9);
    KEEPS((d.q_len = 17, d.kv_len = 17));
    KEEPS((d.head_dim = 3, d.v_head_dim = 3));
    KEEPS(d.t[AF_Q].seed = 5);
    KEEPS(d.dropout_seed = 5);
    KEEPS(d.diag = AF_DIAG_BOTTOM_RIGHT); /* no causal mask, no window: the diagonal is unused */
    KEEPS(d.t[AF_V].dist = AF_DIST_UNIFORM);
#undef CHANGES
#undef KEEPS
    /* the readable form names what is set */
    af_case_default(&d);
    d.dtype = AF_F16, d.q_heads = 4, d.kv_heads = 2, d.q_len = 3, d.kv_len = 5, d.head_dim = 8, d.v_head_dim = 4;
    d.causal = true, d.diag = AF_DIAG_BOTTOM_RIGHT, d.key_padding = true, d.softcap = 30.0, d.dropout_p = 0.25;
    d.bmask.present = true, d.amask.present = true, d.amask.dtype = AF_F32;
    d.t[AF_K].pad = 2, d.t[AF_V].special = AF_SPECIAL_INF_LIVE;
    char buf[512];
    af_case_features_str(&d, buf, sizeof buf);
    const char *words[] = {"f16", "gqa", "sq!=sk", "d!=dv", "causal:bottom_right", "key_padding", "softcap=30",
                           "dropout=0.25", "bool_mask", "additive_mask:f32", "strided", "specials"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (!strstr(buf, words[k])) fail_msg("features text \"%s\" lacks \"%s\"", buf, words[k]);
    af_case_default(&d);
    d.t[AF_Q].layout = d.t[AF_K].layout = d.t[AF_V].layout = AF_LAYOUT_QKV_BSH3D;
    d.allow_tf32 = true;
    af_case_features_str(&d, buf, sizeof buf);
    assert_non_null(strstr(buf, "qkv_bsh3d"));
    assert_non_null(strstr(buf, "f32+tf32"));
    af_case_features_str(&d, buf, 4); /* truncation stays inside the buffer */
    assert_true(strlen(buf) <= 3);
    /* kinds */
    for (int k = 0; k < AF_KIND_COUNT; k++) assert_int_equal(af_kind_from_name(af_kind_names[k]), k);
    assert_int_equal(af_kind_from_name("nope"), -1);
    assert_string_equal(af_kind_names[AF_KIND_MASKED_ROW_NAN], "masked_row_nan");
}

/* --- comparisons -------------------------------------------------------------------------- */

typedef struct bench {
    af_inputs *in;
    af_oracle *o;
    const double *ref;
    size_t n;
    af_tensor out; /* F32 [B, Hq, Sq, Dv] */
    float *f;
    af_tensor out64;
    double *d;
} bench;

static void bench_open(bench *b, const af_case *c, void (*fill)(const af_case_tensors *)) {
    memset(b, 0, sizeof *b);
    b->in = af_inputs_create();
    b->o = af_oracle_create(NULL);
    af_error err = {0};
    if (af_inputs_generate(b->in, c, &err) != AF_OK) fail_msg("inputs: %s", err.msg);
    if (fill) fill(af_inputs_get(b->in));
    assert_int_equal(af_oracle_prepare(b->o, af_inputs_get(b->in), &err), AF_OK);
    b->ref = af_oracle_ref(b->o);
    size_t ne[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    af_tensor_contiguous(&b->out, AF_F32, 4, ne);
    af_tensor_contiguous(&b->out64, AF_F64, 4, ne);
    b->n = af_tensor_numel(&b->out);
    b->f = malloc(b->n * sizeof(float));
    b->d = malloc(b->n * sizeof(double));
    b->out.data = b->f;
    b->out64.data = b->d;
}

static void bench_close(bench *b) {
    free(b->f);
    free(b->d);
    af_oracle_destroy(b->o);
    af_inputs_destroy(b->in);
}

static af_kind bench_kind(bench *b, bool f64, af_result *res) {
    af_result tmp;
    af_error err = {0};
    if (!res) res = &tmp;
    assert_int_equal(af_oracle_compare(b->o, f64 ? &b->out64 : &b->out, res, &err), AF_OK);
    return res->kind;
}

static void tame(af_case *c, af_dtype dt) {
    af_case_default(c);
    c->batch = 2, c->q_heads = 2, c->kv_heads = 2, c->q_len = 8, c->kv_len = 8, c->head_dim = 16, c->v_head_dim = 8;
    c->dtype = dt;
    for (int t = 0; t < 3; t++) c->t[t].seed = 4321u + (uint32_t)t;
}

/* V in [-2, 2] with max |V| exactly 2 at key 0 of every batch and head: every row (no
 * mask) has vscale = 2. */
static void fill_v2(const af_case_tensors *t) {
    const af_view *v = &t->vv;
    for (size_t b = 0; b < v->ne[0]; b++)
        for (size_t h = 0; h < v->ne[1]; h++)
            for (size_t s = 0; s < v->ne[2]; s++)
                for (size_t d = 0; d < v->ne[3]; d++)
                    af_view_set(v, b, h, s, d, (s + d) == 0 ? 2.0 : (double)((b * 5 + h * 3 + s * 7 + d) % 9) / 4.5 - 1.0);
}

static void expect(bench *b, bool f64, af_kind want, const char *what) {
    af_result res;
    af_kind got = bench_kind(b, f64, &res);
    if (got != want)
        fail_msg("%s: %s, expected %s (max_abs %.3g max_rel %.3g worst_ratio %.3g atol %.3g rtol %.3g)", what,
                 af_kind_names[got], af_kind_names[want], res.m.max_abs, res.m.max_rel, res.m.worst_ratio, res.tol.atol,
                 res.tol.rtol);
}

static void test_tolerance_f32(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, fill_v2);
    /* floors: atol = 1e-5 * max|V| = 2e-5, rtol 1.3e-6, as long as the honest f32 error
     * (a few 1e-8 here) times 4 stays below */
    af_tolerance tol;
    af_error err = {0};
    assert_int_equal(af_oracle_tolerance(b.o, &tol, &err), AF_OK);
    assert_false(tol.honest);
    assert_true(fabs(tol.atol - 2e-5) < 1e-20);
    assert_true(tol.rtol == 1.3e-6);
    assert_true(tol.fudge == 4.0);
    /* the reference itself, in f64 and rounded to f32 */
    memcpy(b.d, b.ref, b.n * sizeof(double));
    expect(&b, true, AF_KIND_OK, "reference as f64");
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    expect(&b, false, AF_KIND_OK, "reference rounded to f32");
    /* 1e-7 relative passes, 1e-3 relative fails */
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)(b.ref[e] * (1.0 + 1e-7));
    expect(&b, false, AF_KIND_OK, "1e-7 relative");
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)(b.ref[e] * (1.0 + 1e-3));
    expect(&b, false, AF_KIND_DIVERGE, "1e-3 relative");
    /* an absolute error just inside and just outside atol on an element near 0 */
    for (size_t e = 0; e < b.n; e++) b.d[e] = b.ref[e];
    size_t e0 = 0;
    for (size_t e = 0; e < b.n; e++)
        if (fabs(b.ref[e]) < fabs(b.ref[e0])) e0 = e;
    double slack = 2e-5 + 1.3e-6 * fabs(b.ref[e0]);
    b.d[e0] = b.ref[e0] + 0.9 * slack;
    expect(&b, true, AF_KIND_OK, "0.9 x the bound");
    b.d[e0] = b.ref[e0] + 50.0 * slack;
    af_result res;
    assert_int_equal(bench_kind(&b, true, &res), AF_KIND_DIVERGE);
    assert_int_equal(res.m.n_diverge, 1);
    assert_true(fabs(res.m.max_abs - 50.0 * slack) < 1e-12);
    size_t dv = c.v_head_dim, q = c.q_len, h = c.q_heads;
    assert_int_equal(res.m.worst[0], e0 / (dv * q * h));
    assert_int_equal(res.m.worst[1], e0 / (dv * q) % h);
    assert_int_equal(res.m.worst[2], e0 / dv % q);
    assert_int_equal(res.m.worst[3], e0 % dv);
    /* rel_fro = |delta| / ||ref||_F */
    double fro = 0.0;
    for (size_t e = 0; e < b.n; e++) fro += b.ref[e] * b.ref[e];
    assert_true(fabs(res.m.rel_fro - 50.0 * slack / sqrt(fro)) < 1e-9 * res.m.rel_fro);
    bench_close(&b);

    /* dropout scales vscale by 1 / (1 - p) */
    c.dropout_p = 0.5, c.dropout_seed = 3;
    bench_open(&b, &c, fill_v2);
    assert_int_equal(af_oracle_tolerance(b.o, &tol, &err), AF_OK);
    assert_true(fabs(tol.atol - 4e-5) < 1e-20 || tol.honest);
    bench_close(&b);
}

static double round_to(double x, af_dtype dt) {
    /* by hand, independent of dtype.c: frexp, scale to the kept bits, RNE via nearbyint */
    if (x == 0.0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);
    int mant = dt == AF_F16 ? 10 : 7, emin = dt == AF_F16 ? -14 : -126;
    int q = (e - 1 < emin ? emin : e - 1) - mant;
    return ldexp(nearbyint(ldexp(x, -q)), q);
}

static void test_tolerance_low_precision(void **state) {
    (void)state;
    const af_dtype dts[2] = {AF_F16, AF_BF16};
    for (int k = 0; k < 2; k++) {
        af_case c;
        tame(&c, dts[k]);
        bench b;
        bench_open(&b, &c, NULL);
        /* the reference rounded to the case dtype is what a perfect kernel returns */
        for (size_t e = 0; e < b.n; e++) b.f[e] = (float)round_to(b.ref[e], dts[k]);
        expect(&b, false, AF_KIND_OK, af_dtype_names[dts[k]]);
        /* off by a quarter (of the value and of max|V| / 10): visible in both */
        for (size_t e = 0; e < b.n; e++) b.f[e] = (float)(b.ref[e] * 1.25 + 0.25);
        expect(&b, false, AF_KIND_DIVERGE, dts[k] == AF_F16 ? "f16 25% off" : "bf16 25% off");
        bench_close(&b);
    }
}

/* V holds a NaN at key 3, column 0, of batch 0 / kv head 0, live for every query: the
 * reference is NaN in column 0 of query head 0 and finite elsewhere. */
static void fill_nan(const af_case_tensors *t) { af_view_set(&t->vv, 0, 0, 3, 0, DNAN); }

/* V holds +Inf at key 5, column 1, of batch 0 / kv head 0: the reference is +Inf in
 * column 1 of query head 0 (every weight is positive) and finite elsewhere. A stored
 * Inf is an input value, not an fp32 overflow: an fp32 kernel computes the same +Inf. */
static void fill_inf(const af_case_tensors *t) { af_view_set(&t->vv, 0, 0, 5, 1, DINF); }

static void test_classes_nan(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, fill_nan);
    size_t dv = c.v_head_dim;
    assert_true(isnan(b.ref[0]) && isnan(b.ref[dv]));
    assert_true(isfinite(b.ref[1]));
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    expect(&b, false, AF_KIND_OK, "the same NaN");
    b.f[0] = 0.5f;
    expect(&b, false, AF_KIND_NAN_MISMATCH, "finite for NaN");
    b.f[0] = INFINITY;
    expect(&b, false, AF_KIND_NAN_MISMATCH, "Inf for NaN");
    b.f[0] = NAN, b.f[1] = NAN;
    expect(&b, false, AF_KIND_NAN_MISMATCH, "NaN for finite");
    bench_close(&b);
}

static void test_classes_inf(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, fill_inf);
    size_t dv = c.v_head_dim;
    assert_true(isinf(b.ref[1]) && b.ref[1] > 0);
    assert_true(isfinite(b.ref[0]) && isfinite(b.ref[2]));
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    expect(&b, false, AF_KIND_OK, "the same Inf");
    b.f[1] = -INFINITY;
    expect(&b, false, AF_KIND_INF_MISMATCH, "-Inf for +Inf");
    b.f[1] = 1e30f;
    expect(&b, false, AF_KIND_INF_MISMATCH, "finite for +Inf");
    b.f[1] = NAN;
    expect(&b, false, AF_KIND_NAN_MISMATCH, "NaN for +Inf");
    b.f[1] = INFINITY;
    b.f[dv + 2] += 100.0f; /* a finite column of the same head, far off */
    expect(&b, false, AF_KIND_DIVERGE, "finite garbage beside an Inf column");
    bench_close(&b);
}

/* The tolerance of an element depends on the values and weights that feed it, not on a
 * NaN elsewhere: a NaN in column 0 of one V row must leave the tolerance of column 1 (fed
 * by the same row's finite value) as it was. TF32 makes that tolerance wide (input and P
 * rounding at 2^-11), so the largest accepted error shows the bound the oracle uses. */
static void fill_v_big(const af_case_tensors *t) {
    const af_view *v = &t->vv;
    for (size_t s = 0; s < v->ne[2]; s++)
        for (size_t d = 0; d < v->ne[3]; d++) af_view_set(v, 0, 0, s, d, s == 3 ? 1000.0 : (double)(s % 3));
}
static void fill_v_big_nan(const af_case_tensors *t) {
    fill_v_big(t);
    af_view_set(&t->vv, 0, 0, 3, 0, DNAN);
}

static double largest_accepted(af_case *c, void (*fill)(const af_case_tensors *), size_t e) {
    bench b;
    bench_open(&b, c, fill);
    double lo = 0.0, hi = 1e4; /* 10 x the largest |V|: always rejected */
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi);
        memcpy(b.d, b.ref, b.n * sizeof(double));
        b.d[e] += mid;
        af_result res;
        if (bench_kind(&b, true, &res) == AF_KIND_OK) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    bench_close(&b);
    return lo;
}

static void test_nan_column_keeps_tolerance(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.q_len = 4, c.kv_len = 8, c.head_dim = 16, c.v_head_dim = 4, c.allow_tf32 = true;
    for (int t = 0; t < 3; t++) c.t[t].seed = 11u + (uint32_t)t;
    size_t e = 1; /* row 0, column 1: 1000 from key 3 */
    double tol_plain = largest_accepted(&c, fill_v_big, e);
    double tol_nan = largest_accepted(&c, fill_v_big_nan, e);
    print_message("largest accepted error in column 1: %.4g without, %.4g with a NaN in column 0\n", tol_plain,
                  tol_nan);
    assert_true(tol_plain > 0.0);
    if (tol_nan < 0.5 * tol_plain)
        fail_msg("a NaN in another column of V shrank the tolerance from %.4g to %.4g", tol_plain, tol_nan);
}

static void test_pairs(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, NULL);
    af_error err = {0};
    size_t rows = c.batch * c.q_heads * c.q_len, dv = c.v_head_dim;
    /* pairs: a against itself */
    float *a = malloc(b.n * sizeof(float)), *p = malloc(b.n * sizeof(float));
    for (size_t e = 0; e < b.n; e++) a[e] = (float)b.ref[e];
    af_tensor ta = b.out, tp = b.out;
    ta.data = a, tp.data = p;
    af_result res;
    memcpy(p, a, b.n * sizeof(float));
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &tp, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    /* rows permuted (reversed): right with the row map, wrong without */
    uint32_t *map = malloc(rows * sizeof(uint32_t));
    for (size_t r = 0; r < rows; r++) {
        map[r] = (uint32_t)(rows - 1 - r);
        memcpy(p + r * dv, a + map[r] * dv, dv * sizeof(float));
    }
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &tp, map, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &tp, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_DIVERGE);
    /* a subset: batch row 1 alone */
    af_tensor ts = b.out;
    ts.ne[0] = 1;
    ts.data = p;
    size_t sub = rows / c.batch;
    for (size_t r = 0; r < sub; r++) {
        map[r] = (uint32_t)(sub + r);
        memcpy(p + r * dv, a + (sub + r) * dv, dv * sizeof(float));
    }
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &ts, map, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    p[3] += 1.0f;
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &ts, map, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_DIVERGE);
    /* a pair may differ by twice the single tolerance: a deviation of 1.5 x the floor
     * passes as a pair */
    memcpy(p, a, b.n * sizeof(float));
    af_tolerance tol;
    assert_int_equal(af_oracle_tolerance(b.o, &tol, &err), AF_OK);
    size_t e0 = 0;
    for (size_t e = 0; e < b.n; e++)
        if (fabs(b.ref[e]) < fabs(b.ref[e0])) e0 = e;
    p[e0] = (float)((double)a[e0] + 1.5 * (tol.atol + tol.rtol * fabs(b.ref[e0])));
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &tp, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    p[e0] = (float)((double)a[e0] + 20.0 * (tol.atol + tol.rtol * fabs(b.ref[e0])));
    assert_int_equal(af_oracle_compare_pair(b.o, &ta, &tp, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_DIVERGE);
    /* a wrongly shaped output is an error, not a finding */
    af_tensor bad = b.out;
    bad.ne[3] = dv + 1;
    assert_int_equal(af_oracle_compare(b.o, &bad, &res, &err), AF_ERR_INVALID);
    free(map);
    free(a);
    free(p);
    bench_close(&b);
    af_oracle_destroy(NULL);
}

/* An expected output supplied by another tool replaces the reference: outputs are judged
 * against it, under the tolerance of the case (the float64 computation's own honest
 * error), not under a tolerance widened by the expected output's distance from it. */
static void test_prepare_expected(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, NULL);
    af_error err = {0};
    /* an expected output from another tool replaces the reference */
    double *exp_out = malloc(b.n * sizeof(double));
    for (size_t e = 0; e < b.n; e++) exp_out[e] = b.ref[e] + 1.0;
    double *saved = malloc(b.n * sizeof(double));
    memcpy(saved, b.ref, b.n * sizeof(double));
    assert_int_equal(af_oracle_prepare_expected(b.o, af_inputs_get(b.in), exp_out, &err), AF_OK);
    memcpy(b.d, saved, b.n * sizeof(double));
    expect(&b, true, AF_KIND_DIVERGE, "reference vs a different expected output");
    memcpy(b.d, exp_out, b.n * sizeof(double));
    expect(&b, true, AF_KIND_OK, "the expected output itself");

    /* the masked-row flags still come from the case */
    const uint8_t *rows = af_oracle_masked_rows(b.o);
    for (size_t r = 0; r < (size_t)c.batch * c.q_heads * c.q_len; r++) assert_int_equal(rows[r], 0);
    free(exp_out);
    free(saved);
    bench_close(&b);
}

/* --- zero-weight keys (docs/design.md section 2 rule 5) ----------------------------------------- */

/* Zero-weight keys with poisoned values: key 3 by the case's mask (mode 0: none, 1: an
 * additive -inf, 2: a false in the boolean mask), key 5 by a score of -inf (K[5][0] = -Inf
 * against Q[.][0] = 1 > 0). V[3][0] = V[5][2] = +Inf, V[3][1] = NaN; every other value
 * and mask entry is finite and live. */
static int zw_mode;
enum { ZW_COL_INF3 = 0, ZW_COL_NAN3 = 1, ZW_COL_INF5 = 2, ZW_COL_CLEAN = 3 };

static void fill_zero_weight(const af_case_tensors *t) {
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++) {
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++) {
                af_view_set(&t->qv, b, h, i, 0, 1.0);
                for (size_t j = 0; j < c->kv_len; j++) {
                    if (c->amask.present) af_view_set(&t->am, b, h, i, j, j == 3 && zw_mode == 1 ? -DINF : 0.25);
                    if (c->bmask.present)
                        af_view_set(&t->bm, b, h, i, j, (j == 3 && zw_mode >= 2) ? 0.0 : 1.0);
                }
            }
        for (size_t g = 0; g < c->kv_heads; g++) {
            af_view_set(&t->kv, b, g, 5, 0, -DINF);
            if (zw_mode != 0) {
                af_view_set(&t->vv, b, g, 3, ZW_COL_INF3, DINF);
                af_view_set(&t->vv, b, g, 3, ZW_COL_NAN3, DNAN);
            }
            af_view_set(&t->vv, b, g, 5, ZW_COL_INF5, DINF);
        }
    }
}

static void zero_weight_case(af_case *c, int mode) {
    tame(c, AF_F32);
    zw_mode = mode;
    if (mode == 1) {
        c->amask.present = true;
        c->amask.dims = AF_MDIM_ALL;
        c->amask.dtype = AF_F32;
    }
    if (mode == 2) {
        c->bmask.present = true;
        c->bmask.dims = AF_MDIM_ALL;
        c->bmask.dtype = AF_BOOL;
    }
}

static void run_backend(bench *b, const char *name, af_kind want) {
    af_backend *be = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_open(name, &be, &err), AF_OK);
    assert_int_equal(af_backend_run(be, af_inputs_get(b->in), &b->out, &err), AF_OK);
    af_result res;
    assert_int_equal(af_oracle_compare(b->o, &b->out, &res, &err), AF_OK);
    if (res.kind != want)
        fail_msg("%s on zero-weight keys (mode %d): %s, expected %s", name, zw_mode, af_kind_names[res.kind],
                 af_kind_names[want]);
    af_backend_close(be);
}

static void test_zero_weight_keys(void **state) {
    (void)state;
    for (int mode = 0; mode < 3; mode++) {
        af_case c;
        zero_weight_case(&c, mode);
        bench b;
        bench_open(&b, &c, fill_zero_weight);
        /* the reference excludes them exactly: every output is finite */
        for (size_t e = 0; e < b.n; e++)
            if (!isfinite(b.ref[e])) fail_msg("mode %d: reference element %zu is %g", mode, e, b.ref[e]);
        /* a skipping implementation (the reference rounded to f32) is clean */
        for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
        expect(&b, false, AF_KIND_OK, "skipping zero-weight keys");
        /* IEEE arithmetic (0 * Inf = NaN, 0 * NaN = NaN) in the poisoned columns only */
        size_t dv = c.v_head_dim;
        for (size_t e = 0; e < b.n; e++) {
            size_t d = e % dv;
            bool poisoned = d == ZW_COL_INF5 || (mode != 0 && (d == ZW_COL_INF3 || d == ZW_COL_NAN3));
            b.f[e] = poisoned ? NAN : (float)b.ref[e];
        }
        expect(&b, false, AF_KIND_MASKED_VALUE_LEAK, "IEEE through zero-weight keys");
        /* NaN in a column that no zero-weight key poisons is a real nan_mismatch */
        b.f[ZW_COL_CLEAN] = NAN;
        expect(&b, false, AF_KIND_NAN_MISMATCH, "NaN in a clean column");
        bench_close(&b);

        /* waived: the leak is no finding, a divergence next to it still is */
        af_oracle_opts opts;
        af_oracle_opts_default(&opts);
        opts.waive_masked_value_leak = true;
        bench_open(&b, &c, fill_zero_weight);
        af_oracle_destroy(b.o);
        b.o = af_oracle_create(&opts);
        af_error err = {0};
        assert_int_equal(af_oracle_prepare(b.o, af_inputs_get(b.in), &err), AF_OK);
        b.ref = af_oracle_ref(b.o);
        for (size_t e = 0; e < b.n; e++) b.f[e] = e % dv == ZW_COL_INF5 ? NAN : (float)b.ref[e];
        expect(&b, false, AF_KIND_OK, "waived masked_value_leak");
        b.f[ZW_COL_CLEAN] = (float)(b.ref[ZW_COL_CLEAN] + 0.5);
        expect(&b, false, AF_KIND_DIVERGE, "a divergence beside a waived leak");
        /* the built-in backends skip zero-weight keys: clean */
        run_backend(&b, "explicit", AF_KIND_OK);
        run_backend(&b, "fused", AF_KIND_OK);
        bench_close(&b);
    }
}

/* A fully masked row (row 0: every key false in the boolean mask) whose keys hold an Inf
 * in V column 0: an IEEE P @ V gives NaN there (0 * Inf). Undeclared it is a
 * masked_row_nan; a backend declaring masked_values "ieee" (af_oracle_waive of
 * AF_KIND_MASKED_VALUE_LEAK) gets it waived, but not a NaN in a column with finite V. */
static void fill_masked_row_inf_v(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++) {
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++) af_view_set(&t->bm, b, h, i, j, i == 0 ? 0.0 : 1.0);
        for (size_t g = 0; g < c->kv_heads; g++) af_view_set(&t->vv, b, g, 2, 0, DINF);
    }
}

static void test_masked_row_ieee_leak(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.bmask.present = true;
    c.bmask.dims = AF_MDIM_ALL;
    c.bmask.dtype = AF_BOOL;
    bench b;
    bench_open(&b, &c, fill_masked_row_inf_v);
    size_t dv = c.v_head_dim, sq = c.q_len;
    /* rows are (b, h, i) with i fastest: row r is fully masked when r % Sq == 0 */
    for (size_t e = 0; e < b.n; e++) b.f[e] = (e / dv) % sq == 0 && e % dv == 0 ? NAN : (float)b.ref[e];
    expect(&b, false, AF_KIND_MASKED_ROW_NAN, "0 * Inf in a fully masked row, undeclared");
    assert_false(af_oracle_waived(b.o, AF_KIND_MASKED_VALUE_LEAK));
    af_oracle_waive(b.o, AF_KIND_MASKED_VALUE_LEAK, true);
    assert_true(af_oracle_waived(b.o, AF_KIND_MASKED_VALUE_LEAK));
    expect(&b, false, AF_KIND_OK, "0 * Inf in a fully masked row, masked_values ieee");
    /* a divergence in a live row beside the waived leaks: they are counted, but the
     * failing elements are the divergence's (the worst, the rows known.h matches on) */
    size_t live = 1 * dv + 3; /* row 1 (query 1), column 3 */
    b.f[live] = (float)(b.ref[live] + 0.5);
    af_result res;
    assert_int_equal(bench_kind(&b, false, &res), AF_KIND_DIVERGE);
    assert_int_equal(res.m.n_waived, res.m.n_masked_value_leak);
    assert_true(res.m.n_waived > 0);
    assert_int_equal(res.m.n_fail_masked, 0);
    assert_int_equal(res.m.worst[2], 1);
    assert_int_equal(res.m.worst[3], 3);
    assert_true(isfinite(res.m.fail_score_max));
    { /* fail_product_max: the largest |q_d k_d| of the failing row (b 0, head 0, query 1) */
        const af_case_tensors *t = af_inputs_get(b.in);
        double want = 0.0;
        for (size_t j = 0; j < c.kv_len; j++)
            for (size_t d = 0; d < c.head_dim; d++)
                want = fmax(want, fabs(af_view_get(&t->qv, 0, 0, 1, d) * af_view_get(&t->kv, 0, 0, j, d)));
        assert_true(want > 0.0);
        assert_true(res.m.fail_product_max == want);
    }
    b.f[live] = (float)b.ref[live];
    b.f[1] = NAN; /* row 0, column 1: its V is finite, so the NaN is no 0 * Inf */
    expect(&b, false, AF_KIND_MASKED_ROW_NAN, "NaN in a fully masked row's finite column");
    af_oracle_waive(b.o, AF_KIND_MASKED_VALUE_LEAK, false);
    af_oracle_waive(b.o, AF_KIND_MASKED_ROW_NAN, true);
    expect(&b, false, AF_KIND_OK, "NaN rows declared (masked_rows nan)");
    af_oracle_waive(b.o, AF_KIND_MASKED_ROW_NAN, false);
    bench_close(&b);
}

/* Pairs on a case whose zero-weight keys got new non-finite values (relation
 * masked_values): new NaN there is a leak where the caller flags it, else a mismatch. */
static void test_pair_leak(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, fill_v2);
    float *g = malloc(b.n * sizeof *g);
    af_tensor tg = b.out;
    tg.data = g;
    for (size_t e = 0; e < b.n; e++) b.f[e] = g[e] = (float)b.ref[e];
    g[5] = NAN;
    uint8_t *leak = calloc(b.n, 1);
    af_result res;
    af_error err = {0};
    assert_int_equal(af_oracle_compare_pair_leak(b.o, &b.out, &tg, NULL, leak, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_NAN_MISMATCH);
    leak[5] = 1;
    assert_int_equal(af_oracle_compare_pair_leak(b.o, &b.out, &tg, NULL, leak, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_MASKED_VALUE_LEAK);
    assert_int_equal(res.m.n_masked_value_leak, 1);
    /* no flags given: the prepared case (no non-finite V) has no leak */
    assert_int_equal(af_oracle_compare_pair(b.o, &b.out, &tg, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_NAN_MISMATCH);
    free(leak);
    free(g);
    bench_close(&b);
}

/* One masked key with V = 1000 in every column must not loosen the check of the rows:
 * an output off by 1% is a finding. */
static void fill_poisoned_masked(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++) {
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++) af_view_set(&t->bm, b, h, i, j, j == 6 ? 0.0 : 1.0);
        for (size_t g = 0; g < c->kv_heads; g++)
            for (size_t d = 0; d < c->v_head_dim; d++) af_view_set(&t->vv, b, g, 6, d, 1000.0);
    }
}

static void test_poisoned_masked_value(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.bmask.present = true;
    c.bmask.dims = AF_MDIM_ALL;
    c.bmask.dtype = AF_BOOL;
    bench b;
    bench_open(&b, &c, fill_poisoned_masked);
    af_tolerance tol;
    af_error err = {0};
    assert_int_equal(af_oracle_tolerance(b.o, &tol, &err), AF_OK);
    /* the rows' scale is max |V| over the live keys, 2: atol 2e-5, not 1e-2 */
    if (!(tol.atol < 1e-4)) fail_msg("atol %g: the masked value loosened the tolerance", tol.atol);
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    expect(&b, false, AF_KIND_OK, "reference rounded to f32");
    /* 1% off in one element of magnitude above 0.1 */
    size_t e0 = 0;
    while (fabs(b.ref[e0]) < 0.1) e0++;
    b.f[e0] = (float)(b.ref[e0] * 1.01);
    expect(&b, false, AF_KIND_DIVERGE, "1% error beside a masked V of 1000");
    bench_close(&b);
}

/* Outputs in f16/bf16 carry their final rounding in the tolerance. */
static void test_low_precision_outputs(void **state) {
    (void)state;
    const af_dtype dts[2] = {AF_BF16, AF_F16};
    for (int k = 0; k < 2; k++) {
        af_case c;
        tame(&c, AF_F32);
        bench b;
        bench_open(&b, &c, fill_v2);
        size_t ne[4] = {c.batch, c.q_heads, c.q_len, c.v_head_dim};
        af_tensor t;
        af_tensor_contiguous(&t, dts[k], 4, ne);
        uint16_t *h = malloc(b.n * sizeof *h);
        t.data = h;
        for (size_t e = 0; e < b.n; e++) h[e] = dts[k] == AF_BF16 ? af_bf16_from_f64(b.ref[e]) : af_f16_from_f64(b.ref[e]);
        af_result res;
        af_error err = {0};
        assert_int_equal(af_oracle_compare(b.o, &t, &res, &err), AF_OK);
        if (res.kind != AF_KIND_OK) fail_msg("correct output rounded to %s: %s", af_dtype_names[dts[k]], af_kind_names[res.kind]);
        /* 5% off in one element of magnitude above 0.1 */
        size_t e0 = 0;
        while (fabs(b.ref[e0]) < 0.1) e0++;
        h[e0] = dts[k] == AF_BF16 ? af_bf16_from_f64(b.ref[e0] * 1.05) : af_f16_from_f64(b.ref[e0] * 1.05);
        assert_int_equal(af_oracle_compare(b.o, &t, &res, &err), AF_OK);
        if (res.kind != AF_KIND_DIVERGE)
            fail_msg("5%% error in %s output: %s", af_dtype_names[dts[k]], af_kind_names[res.kind]);
        assert_true(res.m.worst[0] * c.q_heads * c.q_len * c.v_head_dim + res.m.worst[1] * c.q_len * c.v_head_dim +
                        res.m.worst[2] * c.v_head_dim + res.m.worst[3] ==
                    e0);
        /* the same output in f32 (no final rounding allowed for) is a finding too */
        for (size_t e = 0; e < b.n; e++)
            b.f[e] = dts[k] == AF_BF16 ? af_bf16_to_f32(af_bf16_from_f64(b.ref[e])) : af_f16_to_f32(af_f16_from_f64(b.ref[e]));
        expect(&b, false, AF_KIND_DIVERGE, "bf16/f16-rounded values in an f32 output of an f32 case");
        free(h);
        bench_close(&b);
    }
}

/* --- gradients ----------------------------------------------------------------------- */

/* A backward case: tame, every gradient asked (dmask of a full f32 additive mask). */
static void tame_backward(af_case *c) {
    tame(c, AF_F32);
    c->amask.present = true;
    c->amask.dims = AF_MDIM_ALL;
    c->amask.dtype = AF_F32;
    c->bwd.grads = AF_GRAD_ALL;
    c->bwd.dout.seed = 777u;
    af_case_repair(c, 0);
}

typedef struct gbench {
    bench b;
    af_tensor g[AF_GRAD_COUNT]; /* F32, af_case_grad_shape */
    size_t n[AF_GRAD_COUNT];
    const double *ref[AF_GRAD_COUNT];
} gbench;

static void gbench_open(gbench *gb, const af_case *c, void (*fill)(const af_case_tensors *)) {
    memset(gb, 0, sizeof *gb);
    bench_open(&gb->b, c, fill);
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        gb->ref[k] = af_oracle_ref_grad(gb->b.o, k);
        if (!(c->bwd.grads & (1u << k))) {
            assert_null(gb->ref[k]);
            continue;
        }
        assert_non_null(gb->ref[k]);
        size_t ne[4];
        af_case_grad_shape(c, k, ne);
        af_tensor_contiguous(&gb->g[k], AF_F32, 4, ne);
        gb->n[k] = af_tensor_numel(&gb->g[k]);
        float *f = malloc(gb->n[k] * sizeof *f);
        for (size_t e = 0; e < gb->n[k]; e++) f[e] = (float)gb->ref[k][e];
        gb->g[k].data = f;
    }
}

static void gbench_close(gbench *gb) {
    for (int k = 0; k < AF_GRAD_COUNT; k++) free(gb->g[k].data);
    bench_close(&gb->b);
}

static float *gdata(gbench *gb, int k) { return gb->g[k].data; }

static void gexpect(gbench *gb, int k, af_kind want, const char *what) {
    af_result res;
    af_error err = {0};
    assert_int_equal(af_oracle_compare_grad(gb->b.o, k, &gb->g[k], &res, &err), AF_OK);
    if (res.kind != want)
        fail_msg("%s %s: %s, expected %s (max_abs %.3g worst_ratio %.3g atol %.3g; unstable %zu leak %zu)",
                 af_grad_names[k], what, af_kind_names[res.kind], af_kind_names[want], res.m.max_abs,
                 res.m.worst_ratio, res.tol.atol, (size_t)res.m.n_unstable, (size_t)res.m.n_masked_value_leak);
}

/* Dropout p = 1: the output is the constant 0, so every reference gradient is 0 (hand
 * value), a NaN planted in Q included; NaN in a gradient is then 0 * NaN through a dropped
 * weight (masked_value_leak), a NaN with nothing planted a nan_mismatch, and a finite
 * nonzero value a divergence. */
static void test_grad_all_dropped(void **state) {
    (void)state;
    for (int planted = 0; planted < 2; planted++) {
        af_case c;
        tame_backward(&c);
        c.dropout_p = 1.0, c.dropout_seed = 5;
        c.t[0].special = planted ? AF_SPECIAL_NAN_LIVE : AF_SPECIAL_NONE;
        gbench gb;
        gbench_open(&gb, &c, NULL);
        for (int k = 0; k < AF_GRAD_COUNT; k++)
            for (size_t e = 0; e < gb.n[k]; e++)
                if (gb.ref[k][e] != 0.0) fail_msg("%s[%zu] = %g at p = 1", af_grad_names[k], e, gb.ref[k][e]);
        gexpect(&gb, 0, AF_KIND_OK, "all zero at p = 1");
        gdata(&gb, 0)[3] = NAN;
        gexpect(&gb, 0, planted ? AF_KIND_MASKED_VALUE_LEAK : AF_KIND_NAN_MISMATCH, "NaN at p = 1");
        gdata(&gb, 1)[2] = 0.5f;
        gexpect(&gb, 1, AF_KIND_DIVERGE, "0.5 at p = 1");
        gbench_close(&gb);
    }
}

/* The reference rounded to f32 passes; the whole gradient 1% off, or its largest element
 * 1% off, diverges; NaN or Inf where the reference is finite is a mismatch. */
static void test_grad_tolerance(void **state) {
    (void)state;
    af_case c;
    tame_backward(&c);
    gbench gb;
    gbench_open(&gb, &c, NULL);
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        float *f = gdata(&gb, k);
        size_t big = 0;
        for (size_t e = 0; e < gb.n[k]; e++) {
            if (!isfinite(gb.ref[k][e])) fail_msg("%s[%zu] = %g", af_grad_names[k], e, gb.ref[k][e]);
            if (fabs(gb.ref[k][e]) > fabs(gb.ref[k][big])) big = e;
        }
        if (!(fabs(gb.ref[k][big]) > 1e-3)) fail_msg("%s is all but zero", af_grad_names[k]);
        gexpect(&gb, k, AF_KIND_OK, "rounded to f32");
        for (size_t e = 0; e < gb.n[k]; e++) f[e] = (float)(gb.ref[k][e] * 1.01);
        gexpect(&gb, k, AF_KIND_DIVERGE, "1% off");
        for (size_t e = 0; e < gb.n[k]; e++) f[e] = (float)gb.ref[k][e];
        f[big] = (float)(gb.ref[k][big] * 1.01);
        gexpect(&gb, k, AF_KIND_DIVERGE, "largest element 1% off");
        f[big] = NAN;
        gexpect(&gb, k, AF_KIND_NAN_MISMATCH, "NaN");
        f[big] = INFINITY;
        gexpect(&gb, k, AF_KIND_INF_MISMATCH, "Inf");
        f[big] = (float)gb.ref[k][big];
        gexpect(&gb, k, AF_KIND_OK, "restored");
    }
    /* a gradient not asked for, or of the wrong shape, is refused */
    af_result res;
    af_error err = {0};
    af_tensor bad = gb.g[0];
    bad.ne[2] -= 1;
    assert_int_equal(af_oracle_compare_grad(gb.b.o, 0, &bad, &res, &err), AF_ERR_INVALID);
    gbench_close(&gb);
    c.bwd.grads = AF_GRAD_DQ;
    gbench_open(&gb, &c, NULL);
    assert_int_equal(af_oracle_compare_grad(gb.b.o, 1, &gb.g[0], &res, &err), AF_ERR_INVALID);
    gexpect(&gb, 0, AF_KIND_OK, "dq alone");
    gbench_close(&gb);
    /* a forward-only case has no gradients */
    c.bwd.grads = 0;
    gbench_open(&gb, &c, NULL);
    gbench_close(&gb);
}

/* A gradient's NaN is counted on the side it is on (known bugs read n_nan_ref and
 * n_nan_out): a NaN in a live V makes the reference's dQ NaN, and a finite dQ there is a
 * nan_mismatch whose NaNs are all the reference's; a NaN put into the output where the
 * reference is finite is the output's. */
static void test_grad_nan_side(void **state) {
    (void)state;
    af_case c;
    tame_backward(&c);
    c.t[AF_V].special = AF_SPECIAL_NAN_LIVE;
    af_case_repair(&c, 0);
    gbench gb;
    gbench_open(&gb, &c, NULL);
    float *f = gdata(&gb, 0);
    size_t nan_ref = 0, finite = 0;
    for (size_t e = 0; e < gb.n[0]; e++) {
        if (isnan(gb.ref[0][e])) {
            f[e] = 0.0f, nan_ref++;
        } else {
            finite = e;
        }
    }
    assert_true(nan_ref > 0 && nan_ref < gb.n[0]);
    af_result res;
    af_error err = {0};
    assert_int_equal(af_oracle_compare_grad(gb.b.o, 0, &gb.g[0], &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_NAN_MISMATCH);
    assert_int_equal(res.m.n_nan, nan_ref);
    assert_int_equal(res.m.n_nan_ref, nan_ref);
    for (size_t e = 0; e < gb.n[0]; e++)
        if (isnan(gb.ref[0][e])) f[e] = NAN; /* the reference's NaNs given back */
    f[finite] = NAN;
    assert_int_equal(af_oracle_compare_grad(gb.b.o, 0, &gb.g[0], &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_NAN_MISMATCH);
    assert_int_equal(res.m.n_nan, 1);
    assert_int_equal(res.m.n_nan_ref, 0);
    gbench_close(&gb);
}

/* A zero-weight key with V = 1e6 in every column must not loosen the gradients: dK's and
 * dV's rows of the live keys, and dQ's rows, still fail 1% off. */
static void fill_poisoned_masked_grad(const af_case_tensors *t) {
    fill_poisoned_masked(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t g = 0; g < c->kv_heads; g++)
            for (size_t d = 0; d < c->v_head_dim; d++) af_view_set(&t->vv, b, g, 6, d, 1e6);
}

static void test_grad_poisoned_masked_value(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.bmask.present = true;
    c.bmask.dims = AF_MDIM_ALL;
    c.bmask.dtype = AF_BOOL;
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    c.bwd.dout.seed = 99u;
    af_case_repair(&c, 0);
    gbench gb;
    gbench_open(&gb, &c, fill_poisoned_masked_grad);
    for (int k = 0; k < 3; k++) {
        size_t len = gb.g[k].ne[3], sk = c.kv_len;
        /* key 6 has weight 0 everywhere: its dK and dV rows are exactly 0 */
        for (size_t e = 0; e < gb.n[k]; e++)
            if (k > 0 && (e / len) % sk == 6 && gb.ref[k][e] != 0.0)
                fail_msg("%s of the masked key: %g", af_grad_names[k], gb.ref[k][e]);
        gexpect(&gb, k, AF_KIND_OK, "rounded to f32 beside a masked V of 1e6");
        float *f = gdata(&gb, k);
        for (size_t r = 0; r < gb.n[k] / len; r++) {
            if (k > 0 && r % sk == 6) continue;
            size_t e0 = r * len;
            for (size_t d = 1; d < len; d++)
                if (fabs(gb.ref[k][r * len + d]) > fabs(gb.ref[k][e0])) e0 = r * len + d;
            f[e0] = (float)(gb.ref[k][e0] * 1.01);
            gexpect(&gb, k, AF_KIND_DIVERGE, "one row's largest element 1% off beside a masked V of 1e6");
            f[e0] = (float)gb.ref[k][e0];
        }
    }
    gbench_close(&gb);
}

/* A row whose only live scores plus the mask pass f32's range: q row 0 of batch 0, head 0 is
 * -3.75e36 against K of ones, scale 1 (a score of -6e37, whose partial sums stay within
 * f32), and the mask there f32's lowest, so in f32 every
 * score of the row is -inf and an f32 implementation gives NaN (jax explicit, a
 * near-overflow K against a mask of f32's lowest). The forward's honest run calls that row
 * unstable; so are its gradients (dmask, dq and the head's dk, dv), not a nan_mismatch. */
static void fill_row0_score_past_f32(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t g = 0; g < c->kv_heads; g++)
            for (size_t j = 0; j < c->kv_len; j++)
                for (size_t d = 0; d < c->head_dim; d++) af_view_set(&t->kv, b, g, j, d, 1.0);
    for (size_t d = 0; d < c->head_dim; d++) af_view_set(&t->qv, 0, 0, 0, d, -3.75e36);
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++)
                    af_view_set(&t->am, b, h, i, j, b == 0 && h == 0 && i == 0 ? -0x1.fffffep127 : 0.0);
}

static void test_grad_score_past_f32(void **state) {
    (void)state;
    af_case c;
    tame_backward(&c);
    c.scale_set = true;
    c.scale = 1.0;
    gbench gb;
    gbench_open(&gb, &c, fill_row0_score_past_f32);
    size_t sq = c.q_len, sk = c.kv_len;
    for (size_t e = 0; e < gb.b.n; e++)
        if (!isfinite(gb.b.ref[e])) fail_msg("the reference's row 0 is finite: element %zu is %g", e, gb.b.ref[e]);
    /* the implementation's row 0: NaN output, NaN dmask and dq there */
    float *dm = gdata(&gb, 3), *dq = gdata(&gb, 0);
    for (size_t j = 0; j < sk; j++) dm[j] = NAN;           /* (b 0, h 0, i 0) */
    for (size_t d = 0; d < c.head_dim; d++) dq[d] = NAN;
    gexpect(&gb, 3, AF_KIND_OK, "NaN in a row whose scores + mask pass f32's range");
    gexpect(&gb, 0, AF_KIND_OK, "NaN in a row whose scores + mask pass f32's range");
    /* batch row 1 is computable: NaN there is a finding */
    size_t b1 = c.q_heads * sq * sk;
    dm[b1] = NAN;
    gexpect(&gb, 3, AF_KIND_NAN_MISMATCH, "NaN in batch row 1's dmask");
    gbench_close(&gb);
}

/* dQ of a row the forward fully masks is 0: NaN there is masked_row_nan (waivable); NaN
 * in dQ or dK only through a zero-weight key whose V is non-finite (dP = dO V^T is then
 * non-finite, times P = 0) is masked_value_leak; the same NaN elsewhere is a mismatch. */
static void test_grad_classes(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.bmask.present = true;
    c.bmask.dims = AF_MDIM_ALL;
    c.bmask.dtype = AF_BOOL;
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    c.bwd.dout.seed = 5u;
    af_case_repair(&c, 0);
    gbench gb;
    gbench_open(&gb, &c, fill_masked_row_inf_v); /* row 0 of every (b, h) fully masked, V[2][0] = Inf */
    size_t d = c.head_dim, sq = c.q_len;
    float *dq = gdata(&gb, 0);
    for (size_t e = 0; e < gb.n[0]; e++)
        if ((e / d) % sq == 0 && gb.ref[0][e] != 0.0) fail_msg("dq of a fully masked row: %g", gb.ref[0][e]);
    gexpect(&gb, 0, AF_KIND_OK, "fully masked rows 0");
    dq[3] = NAN;
    gexpect(&gb, 0, AF_KIND_MASKED_ROW_NAN, "NaN in a fully masked row");
    af_oracle_waive(gb.b.o, AF_KIND_MASKED_ROW_NAN, true);
    gexpect(&gb, 0, AF_KIND_OK, "masked_rows nan declared");
    af_oracle_waive(gb.b.o, AF_KIND_MASKED_ROW_NAN, false);
    dq[3] = 0.0f;
    gbench_close(&gb);

    /* leaks: zero_weight_case mode 2 (key 3 false in the boolean mask, V[3][0] = Inf,
     * V[3][1] = NaN; key 5 scored -inf, V[5][2] = Inf): dP's columns 3 and 5 are
     * non-finite in every row, so an IEEE dS there is NaN and so is every dQ element
     * and dK's rows 3 and 5; dV stays finite (0 * dO): NaN there is a mismatch */
    zero_weight_case(&c, 2);
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    c.bwd.dout.seed = 6u;
    af_case_repair(&c, 0);
    gbench_open(&gb, &c, fill_zero_weight);
    for (int k = 0; k < 3; k++)
        for (size_t e = 0; e < gb.n[k]; e++)
            if (!isfinite(gb.ref[k][e])) fail_msg("%s[%zu] = %g", af_grad_names[k], e, gb.ref[k][e]);
    gexpect(&gb, 0, AF_KIND_OK, "skipping zero-weight keys");
    for (size_t e = 0; e < gb.n[0]; e++) gdata(&gb, 0)[e] = NAN;
    gexpect(&gb, 0, AF_KIND_MASKED_VALUE_LEAK, "IEEE dQ through zero-weight keys");
    size_t sk = c.kv_len;
    float *dk = gdata(&gb, 1), *dvv = gdata(&gb, 2);
    for (size_t e = 0; e < gb.n[1]; e++) {
        size_t j = (e / d) % sk;
        if (j == 3 || j == 5) dk[e] = NAN;
    }
    gexpect(&gb, 1, AF_KIND_MASKED_VALUE_LEAK, "IEEE dK rows of the zero-weight keys");
    /* an IEEE delta = sum_j P_ij dP_ij is NaN too (0 * Inf at keys 3 and 5), so dS and dK
     * of the live keys may be NaN as well: a leak, not a mismatch */
    for (size_t e = 0; e < gb.n[1]; e++) dk[e] = NAN;
    gexpect(&gb, 1, AF_KIND_MASKED_VALUE_LEAK, "IEEE delta through zero-weight keys");
    dvv[3 * c.v_head_dim] = NAN; /* dV of key 3 is sum_i 0 * dO: no leak */
    gexpect(&gb, 2, AF_KIND_NAN_MISMATCH, "NaN in dV of a zero-weight key");
    gbench_close(&gb);
}

/* Pairs: a's gradients against b's with rows permuted (a head permutation of dQ and of
 * dK), columns permuted (dmask's keys), both within twice the tolerance; 1% off fails. */
static void test_grad_pairs(void **state) {
    (void)state;
    af_case c;
    tame_backward(&c);
    gbench gb;
    gbench_open(&gb, &c, NULL);
    af_result res;
    af_error err = {0};
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        const size_t *ne = gb.g[k].ne;
        size_t rows = ne[0] * ne[1] * ne[2], len = ne[3];
        uint32_t *rmap = malloc(rows * sizeof *rmap), *cmap = malloc(len * sizeof *cmap);
        float *bf = malloc(gb.n[k] * sizeof *bf);
        /* b's row r is a's row rows-1-r; b's column d is a's len-1-d */
        for (size_t r = 0; r < rows; r++) rmap[r] = (uint32_t)(rows - 1 - r);
        for (size_t d = 0; d < len; d++) cmap[d] = (uint32_t)(len - 1 - d);
        for (size_t r = 0; r < rows; r++)
            for (size_t d = 0; d < len; d++) bf[r * len + d] = (float)gb.ref[k][rmap[r] * len + cmap[d]];
        af_tensor tb = gb.g[k];
        tb.data = bf;
        assert_int_equal(af_oracle_compare_grad_pair(gb.b.o, k, &gb.g[k], &tb, rmap, cmap, NULL, &res, &err), AF_OK);
        assert_int_equal(res.kind, AF_KIND_OK);
        /* without the maps the same data disagrees */
        assert_int_equal(af_oracle_compare_grad_pair(gb.b.o, k, &gb.g[k], &tb, NULL, NULL, NULL, &res, &err), AF_OK);
        assert_int_equal(res.kind, AF_KIND_DIVERGE);
        for (size_t e = 0; e < gb.n[k]; e++) bf[e] *= 1.01f;
        assert_int_equal(af_oracle_compare_grad_pair(gb.b.o, k, &gb.g[k], &tb, rmap, cmap, NULL, &res, &err), AF_OK);
        assert_int_equal(res.kind, AF_KIND_DIVERGE);
        /* a NaN in b flagged as a leak of b's case */
        for (size_t e = 0; e < gb.n[k]; e++) bf[e] /= 1.01f;
        uint8_t *leak = calloc(gb.n[k], 1);
        bf[1] = NAN;
        assert_int_equal(af_oracle_compare_grad_pair(gb.b.o, k, &gb.g[k], &tb, rmap, cmap, leak, &res, &err), AF_OK);
        assert_int_equal(res.kind, AF_KIND_NAN_MISMATCH);
        leak[1] = 1;
        assert_int_equal(af_oracle_compare_grad_pair(gb.b.o, k, &gb.g[k], &tb, rmap, cmap, leak, &res, &err), AF_OK);
        assert_int_equal(res.kind, AF_KIND_MASKED_VALUE_LEAK);
        free(leak);
        free(bf);
        free(cmap);
        free(rmap);
    }
    gbench_close(&gb);
}

/* An error signs by its message's class: numbers, hex literals and addresses aside, white
 * space collapsed, a leading "who:" dropped; the case's features do not count; another
 * message, who or tensor is another finding; an error without a message, and any other
 * kind, sign by the case as before. */
static void test_error_signature(void **state) {
    (void)state;
    const char *w = "target:iree/cuda";
    uint64_t a = af_error_class(w, "CompilerToolError: failed to distribute tensor<1x1x129x4xf32> at 0x7ffe12ab");
    assert_true(a != 0);
    assert_true(a == af_error_class(w, "CompilerToolError: failed to distribute tensor<2x8x3x64xf32> at 0x55aa0"));
    assert_true(a == af_error_class(w, "target:iree/cuda: CompilerToolError:  failed to distribute\n"
                                       "tensor<7x7x7x7xf32> at 0x1"));
    assert_true(a != af_error_class(w, "CompilerToolError: Error code: -11 Stack dump: 0x7ffe"));
    assert_true(a != af_error_class(w, "CompilerToolError: failed to distribute tensor<1x1x129x4xf16> at 0x7ffe12ab"));
    assert_int_equal(af_error_class(w, NULL), 0);
    assert_int_equal(af_error_class(w, " \t\n"), 0);
    assert_int_equal(af_error_class(w, "target:iree/cuda:"), 0);

    af_case c, d;
    af_case_default(&c);
    c.q_len = c.kv_len = 8, c.head_dim = c.v_head_dim = 16;
    d = c, d.dtype = AF_BF16, d.causal = true, d.q_len = 3; /* other features */
    uint64_t m1 = af_error_class(w, "ValueError: shape (1, 8, 16) unsupported");
    uint64_t m2 = af_error_class(w, "ValueError: shape (1, 3, 16) unsupported");
    assert_true(m1 == m2);
    uint64_t e = af_signature_finding(AF_KIND_ERROR, w, "out", m1, &c);
    assert_true(e == af_signature_finding(AF_KIND_ERROR, w, "out", m2, &d));
    assert_true(e == af_signature_finding(AF_KIND_ERROR, w, NULL, m1, &c));
    assert_true(e != af_signature_finding(AF_KIND_ERROR, "target:iree/llvm_cpu", "out", m1, &c));
    assert_true(e != af_signature_finding(AF_KIND_ERROR, w, "dq", m1, &c));
    assert_true(e != af_signature_finding(AF_KIND_ERROR, w, "out", af_error_class(w, "ValueError: dtype unsupported"), &c));
    assert_true(e != af_signature_tensor(AF_KIND_ERROR, w, "out", &c));
    assert_true(af_signature_finding(AF_KIND_ERROR, w, "out", 0, &c) == af_signature_tensor(AF_KIND_ERROR, w, "out", &c));
    assert_true(af_signature_finding(AF_KIND_DIVERGE, w, "dq", m1, &c) == af_signature_tensor(AF_KIND_DIVERGE, w, "dq", &c));
    assert_true(af_signature_finding(AF_KIND_CRASH, w, "out", m1, &d) == af_signature_tensor(AF_KIND_CRASH, w, "out", &d));
}

/* The tensor is part of a finding's signature; "out" (or NULL) signs as af_signature. */
static void test_grad_signature(void **state) {
    (void)state;
    af_case c;
    tame_backward(&c);
    uint64_t out = af_signature(AF_KIND_DIVERGE, "fused", &c);
    assert_true(af_signature_tensor(AF_KIND_DIVERGE, "fused", NULL, &c) == out);
    assert_true(af_signature_tensor(AF_KIND_DIVERGE, "fused", "out", &c) == out);
    uint64_t s[AF_GRAD_COUNT];
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        s[k] = af_signature_tensor(AF_KIND_DIVERGE, "fused", af_grad_names[k], &c);
        assert_true(s[k] != out);
        for (int j = 0; j < k; j++) assert_true(s[j] != s[k]);
        assert_true(af_signature_tensor(AF_KIND_NAN_MISMATCH, "fused", af_grad_names[k], &c) != s[k]);
    }
}

/* --- conventions (conventions.h): each modelled for a backend that declares it only ----- */

static af_kind conv_kind(bench *b, const af_conventions *conv, af_result *res) {
    af_result tmp;
    af_error err = {0};
    if (!res) res = &tmp;
    assert_int_equal(af_oracle_compare_conv(b->o, &b->out, conv, res, &err), AF_OK);
    return res->kind;
}

static void expect_conv(bench *b, const af_conventions *conv, af_kind want, const char *what) {
    af_result res;
    af_kind got = conv_kind(b, conv, &res);
    if (got != want)
        fail_msg("%s: %s, expected %s (max_abs %.3g worst_ratio %.3g)", what, af_kind_names[got], af_kind_names[want],
                 res.m.max_abs, res.m.worst_ratio);
}

/* Row 0 of every (b, h) masked by the boolean mask on every key; key 3 masked for every
 * query of batch row 1 besides. */
static void fill_row0_masked(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++) af_view_set(&t->bm, b, h, i, j, i == 0 || (b == 1 && j == 3) ? 0.0 : 1.0);
}

static void bmask_case(af_case *c) {
    tame(c, AF_F32);
    c->bmask.present = true;
    c->bmask.dims = AF_MDIM_ALL;
    c->bmask.dtype = AF_BOOL;
}

/* masked_rows "mean" (jax xla): the fully masked row is the mean of V over its masked keys
 * (all of them here), computed here from V; the other rows are the reference's. */
static void test_conv_masked_rows_mean(void **state) {
    (void)state;
    af_case c;
    bmask_case(&c);
    bench b;
    bench_open(&b, &c, fill_row0_masked);
    const af_case_tensors *t = af_inputs_get(b.in);
    size_t dv = c.v_head_dim, sq = c.q_len, group = c.q_heads / c.kv_heads;
    for (size_t e = 0; e < b.n; e++) {
        size_t r = e / dv, d = e % dv, i = r % sq, h = r / sq % c.q_heads, bb = r / (sq * c.q_heads);
        double mean = 0.0;
        for (size_t j = 0; j < c.kv_len; j++) mean += af_view_get(&t->vv, bb, h / group, j, d) / (double)c.kv_len;
        b.f[e] = (float)(i == 0 ? mean : b.ref[e]);
    }
    af_conventions mean = {.masked_rows[AF_F32] = AF_ROWS_MEAN}, none = {0};
    af_result res;
    assert_int_equal(conv_kind(&b, &none, &res), AF_KIND_DIVERGE);
    /* undeclared: every failing element sits in a fully masked row (known.h's masked_only) */
    assert_true(res.m.n_diverge > 0);
    assert_int_equal(res.m.n_fail_masked, res.m.n_diverge);
    assert_true(isinf(res.m.fail_score_max) && res.m.fail_score_max < 0);
    expect_conv(&b, &mean, AF_KIND_OK, "mean of V in the fully masked rows, declared mean");
    expect_conv(&b, &(af_conventions){.masked_rows[AF_F32] = AF_ROWS_NAN}, AF_KIND_DIVERGE, "mean of V, declared nan");
    /* declared mean, but 0 there (or off by 0.1): a finding */
    float keep = b.f[0];
    b.f[0] = 0.0f;
    if (fabs(keep) > 0.05) expect_conv(&b, &mean, AF_KIND_DIVERGE, "0 in a fully masked row, declared mean");
    b.f[0] = keep + 0.1f;
    expect_conv(&b, &mean, AF_KIND_DIVERGE, "a wrong mean");
    b.f[0] = keep;
    /* a live row off stays a finding whatever the masked rows do */
    b.f[dv + 1] = (float)(b.ref[dv + 1] + 0.5);
    af_kind k = conv_kind(&b, &mean, &res);
    assert_int_equal(k, AF_KIND_DIVERGE);
    assert_int_equal(res.m.n_fail_masked, 0);
    bench_close(&b);
}

/* masked_rows "mean" in a packed serving case (jax xla_seqlens: a batch padded to Sq x Sk
 * with zeros): a fully masked row is the mean over the view's Sk keys with 0 for the keys
 * past the segment's kv_lens (no physical tensor holds them), a row of a segment without
 * keys is 0, and a row past a segment's queries (no worker returns it) is 0. */
static void test_conv_masked_rows_mean_serving(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.q_len = 4, c.kv_len = 6;
    for (int t = 0; t < 3; t++) c.t[t].layout = AF_LAYOUT_BSHD;
    c.serve.forms = AF_SERVE_PACKED;
    c.serve.q_lens[0] = 3, c.serve.kv_lens[0] = 5; /* row 0: query 0 sees no key (offset -1) */
    c.serve.q_lens[1] = 2, c.serve.kv_lens[1] = 0; /* row 1: no keys at all */
    c.causal = true, c.diag = AF_DIAG_EXPLICIT, c.diag_offset = -1;
    bench b;
    bench_open(&b, &c, fill_v2);
    const af_case_tensors *t = af_inputs_get(b.in);
    size_t dv = c.v_head_dim, sq = c.q_len, group = c.q_heads / c.kv_heads;
    bool canon_differs = false;
    for (size_t e = 0; e < b.n; e++) {
        size_t r = e / dv, d = e % dv, i = r % sq, h = r / sq % c.q_heads, bb = r / (sq * c.q_heads);
        double mean = 0.0, canon = 0.0; /* the padded batch's, and over the canonical view */
        for (size_t j = 0; j < c.kv_len; j++) {
            double v = af_view_get(&t->vv, bb, h / group, j, d) / (double)c.kv_len;
            canon += v;
            if (j < af_case_seg_k(&c, (uint32_t)bb)) mean += v;
        }
        bool dead = i >= af_case_seg_q(&c, (uint32_t)bb) || bb == 1 || i == 0;
        if (bb == 0 && i == 0 && fabs(canon - mean) > 0.05) canon_differs = true;
        b.f[e] = (float)(i >= af_case_seg_q(&c, (uint32_t)bb) ? 0.0 : dead ? mean : b.ref[e]);
    }
    assert_true(canon_differs); /* the test tells the two means apart */
    af_conventions mean = {.masked_rows[AF_F32] = AF_ROWS_MEAN};
    expect_conv(&b, &mean, AF_KIND_OK, "the padded batch's mean, 0 for a keyless row and a missing one");
    /* the canonical view's keys past kv_lens do not count */
    for (size_t d = 0; d < dv; d++) {
        double canon = 0.0;
        for (size_t j = 0; j < c.kv_len; j++) canon += af_view_get(&t->vv, 0, 0, j, d) / (double)c.kv_len;
        b.f[d] = (float)canon; /* row (0, 0, 0) */
    }
    expect_conv(&b, &mean, AF_KIND_DIVERGE, "the mean over the canonical view's keys past kv_lens");
    bench_close(&b);
}

/* Row 0 of every (b, h) fully masked: key 2 by an additive -inf, every other key by the
 * boolean mask; V[2][0] is NaN (a key of weight 0 in the "mean" model, the others sharing
 * the row equally) and V[4][1] NaN (a set-masked key: the mean itself is NaN there). */
static void fill_mean_leak(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++) {
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++) {
                    af_view_set(&t->bm, b, h, i, j, i == 0 && j != 2 ? 0.0 : 1.0);
                    af_view_set(&t->am, b, h, i, j, i == 0 && j == 2 ? -DINF : 0.0);
                }
        for (size_t g = 0; g < c->kv_heads; g++) {
            af_view_set(&t->vv, b, g, 2, 0, DNAN);
            af_view_set(&t->vv, b, g, 4, 1, DNAN);
        }
    }
}

/* masked_rows "mean" with masked_values "ieee" (jax xla): in a fully masked row, a NaN
 * through a key of weight 0 in the mean's model (live but at -inf) is IEEE's 0 * NaN, a
 * masked_value_leak (waived), not a nan_mismatch; a NaN where the mean itself is finite and
 * no such key explains it stays a finding. */
static void test_conv_masked_rows_mean_leak(void **state) {
    (void)state;
    af_case c;
    bmask_case(&c);
    c.amask.present = true, c.amask.dims = AF_MDIM_ALL, c.amask.dtype = AF_F32;
    bench b;
    bench_open(&b, &c, fill_mean_leak);
    const af_case_tensors *t = af_inputs_get(b.in);
    size_t dv = c.v_head_dim, sq = c.q_len, group = c.q_heads / c.kv_heads;
    for (size_t e = 0; e < b.n; e++) {
        size_t r = e / dv, d = e % dv, i = r % sq, h = r / sq % c.q_heads, bb = r / (sq * c.q_heads);
        double mean = 0.0;
        for (size_t j = 0; j < c.kv_len; j++)
            if (j != 2) mean += af_view_get(&t->vv, bb, h / group, j, d) / (double)(c.kv_len - 1);
        /* IEEE P @ V: weight 0 times V[2][0] = NaN */
        b.f[e] = (float)(i == 0 ? (d == 0 ? (double)NAN : mean) : b.ref[e]);
    }
    af_conventions mean = {.masked_rows[AF_F32] = AF_ROWS_MEAN}, ieee = {.masked_rows[AF_F32] = AF_ROWS_MEAN, .masked_values_ieee = true};
    af_result res;
    expect_conv(&b, &ieee, AF_KIND_OK, "0 * NaN through a weight-0 key of a mean row, declared ieee");
    assert_int_equal(conv_kind(&b, &mean, &res), AF_KIND_MASKED_VALUE_LEAK);
    assert_int_equal(res.m.n_nan, 0);
    /* column 2 has no NaN key: a NaN there is no leak */
    b.f[2] = NAN;
    expect_conv(&b, &ieee, AF_KIND_NAN_MISMATCH, "NaN in a mean row that no weight-0 key explains");
    bench_close(&b);
}

/* Row 0 of every (b, h) fully masked by an additive -inf on every key, no set-semantics
 * mask: a row that "mean" has no mean for. */
static void fill_row0_additive(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++) af_view_set(&t->am, b, h, i, j, i == 0 ? -DINF : 0.0);
}

/* masked_rows "mean" where no key is set-masked (a row of -inf only, softmax's NaN): the
 * reference's 0 (jax cudnn in bf16) and NaN (jax xla) both pass; the mean of V over every
 * key, or any other finite value, does not. Undeclared, NaN there is masked_row_nan. */
static void test_conv_masked_rows_mean_plain(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.amask.present = true, c.amask.dims = AF_MDIM_ALL, c.amask.dtype = AF_F32;
    bench b;
    bench_open(&b, &c, fill_row0_additive);
    size_t dv = c.v_head_dim, sq = c.q_len;
    af_conventions mean = {.masked_rows[AF_F32] = AF_ROWS_MEAN};
    for (size_t e = 0; e < b.n; e++) {
        if ((e / dv) % sq == 0 && b.ref[e] != 0.0) fail_msg("reference of a row of -inf: %g", b.ref[e]);
        b.f[e] = (float)b.ref[e];
    }
    expect_conv(&b, &mean, AF_KIND_OK, "0 in a row of -inf only, declared mean");
    for (size_t e = 0; e < b.n; e++)
        if ((e / dv) % sq == 0) b.f[e] = NAN;
    expect_conv(&b, &mean, AF_KIND_OK, "NaN in a row of -inf only, declared mean");
    expect_conv(&b, &(af_conventions){0}, AF_KIND_MASKED_ROW_NAN, "NaN in a row of -inf only, undeclared");
    const af_case_tensors *t = af_inputs_get(b.in);
    for (size_t d = 0; d < dv; d++) { /* row (0, 0, 0): the mean over every key */
        double mv = 0.0;
        for (size_t j = 0; j < c.kv_len; j++) mv += af_view_get(&t->vv, 0, 0, j, d) / (double)c.kv_len;
        b.f[d] = (float)mv;
    }
    expect_conv(&b, &mean, AF_KIND_DIVERGE, "the mean of every key in a row of -inf only, declared mean");
    bench_close(&b);
}

/* masked_rows "unmasked" (jax cudnn): the fully masked row is softmax(q.k * scale) V over
 * every key, computed here by hand. */
static void test_conv_masked_rows_unmasked(void **state) {
    (void)state;
    af_case c;
    bmask_case(&c);
    bench b;
    bench_open(&b, &c, fill_row0_masked);
    const af_case_tensors *t = af_inputs_get(b.in);
    size_t dv = c.v_head_dim, sq = c.q_len, D = c.head_dim, Sk = c.kv_len, group = c.q_heads / c.kv_heads;
    double scale = af_case_scale(&c);
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    for (size_t r = 0; r < (size_t)c.batch * c.q_heads * sq; r += sq) { /* row i = 0 */
        size_t h = r / sq % c.q_heads, bb = r / (sq * c.q_heads);
        double s[64], mx = -HUGE_VAL, sum = 0.0;
        for (size_t j = 0; j < Sk; j++) {
            s[j] = 0.0;
            for (size_t d = 0; d < D; d++)
                s[j] += af_view_get(&t->qv, bb, h, 0, d) * af_view_get(&t->kv, bb, h / group, j, d);
            s[j] *= scale;
            mx = s[j] > mx ? s[j] : mx;
        }
        for (size_t j = 0; j < Sk; j++) sum += (s[j] = exp(s[j] - mx));
        for (size_t d = 0; d < dv; d++) {
            double o = 0.0;
            for (size_t j = 0; j < Sk; j++) o += s[j] / sum * af_view_get(&t->vv, bb, h / group, j, d);
            b.f[r * dv + d] = (float)o;
        }
    }
    expect_conv(&b, &(af_conventions){0}, AF_KIND_DIVERGE, "plain attention in a fully masked row, undeclared");
    expect_conv(&b, &(af_conventions){.masked_rows[AF_F32] = AF_ROWS_UNMASKED}, AF_KIND_OK, "declared unmasked");
    expect_conv(&b, &(af_conventions){.masked_rows[AF_F32] = AF_ROWS_MEAN}, AF_KIND_DIVERGE, "plain attention, declared mean");
    /* declared by dtype (jax cudnn): the case's dtype (f32) decides, not another's */
    expect_conv(&b, &(af_conventions){.masked_rows = {[AF_F16] = AF_ROWS_UNMASKED, [AF_BF16] = AF_ROWS_UNMASKED}},
                AF_KIND_DIVERGE, "plain attention in f32, declared unmasked for f16 and bf16 only");
    expect_conv(&b, &(af_conventions){.masked_rows = {[AF_F32] = AF_ROWS_UNMASKED, [AF_BF16] = AF_ROWS_MEAN}},
                AF_KIND_OK, "plain attention in f32, declared unmasked for f32 and mean for bf16");
    bench_close(&b);
}

/* masked_keys "ieee": key 1 masked by the boolean mask for every query of batch row 0, its
 * K row +Inf there; an implementation adding the mask as -inf gets NaN rows (Inf + -inf). */
static void fill_masked_inf_k(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++) af_view_set(&t->bm, b, h, i, j, b == 0 && j == 1 ? 0.0 : 1.0);
    for (size_t g = 0; g < c->kv_heads; g++)
        for (size_t d = 0; d < c->head_dim; d++) af_view_set(&t->kv, 0, g, 1, d, DINF);
}

static void test_conv_masked_keys_ieee(void **state) {
    (void)state;
    af_case c;
    bmask_case(&c);
    bench b;
    bench_open(&b, &c, fill_masked_inf_k);
    size_t half = b.n / c.batch; /* batch row 0's elements come first */
    for (size_t e = 0; e < b.n; e++) {
        if (!isfinite(b.ref[e])) fail_msg("the reference excludes the masked key: element %zu is %g", e, b.ref[e]);
        b.f[e] = e < half ? NAN : (float)b.ref[e];
    }
    af_conventions ieee = {.masked_keys_ieee = true};
    af_result res;
    assert_int_equal(conv_kind(&b, &(af_conventions){0}, &res), AF_KIND_NAN_MISMATCH);
    assert_int_equal(conv_kind(&b, &ieee, &res), AF_KIND_OK);
    assert_int_equal(res.m.n_masked_key_nan, half);
    /* batch row 1 has no such key: a NaN there is a finding under "ieee" too */
    b.f[half + 2] = NAN;
    expect_conv(&b, &ieee, AF_KIND_NAN_MISMATCH, "NaN in a row without a non-finite masked key");
    /* "ieee" allows NaN, not another wrong value: the live keys' answer, or NaN */
    b.f[half + 2] = (float)b.ref[half + 2];
    b.f[0] = (float)(b.ref[0] + 1.0);
    expect_conv(&b, &ieee, AF_KIND_DIVERGE, "a finite wrong value in such a row");
    bench_close(&b);
}

/* denormals "flush": V of f32-subnormal values; a flushing implementation gives 0. */
static void fill_subnormal_v(const af_case_tensors *t) {
    const af_view *v = &t->vv;
    for (size_t b = 0; b < v->ne[0]; b++)
        for (size_t h = 0; h < v->ne[1]; h++)
            for (size_t s = 0; s < v->ne[2]; s++)
                for (size_t d = 0; d < v->ne[3]; d++) af_view_set(v, b, h, s, d, (double)((s + d) % 5 + 1) * 1e-39);
}

/* ... and Q subnormal against a -Inf in K row 0: exactly, q.k = -inf drops key 0; after
 * DAZ, 0 * -inf is NaN (the jax finding of docs/findings-campaigns.md). */
static void fill_subnormal_q_inf_k(const af_case_tensors *t) {
    fill_v2(t);
    const af_view *q = &t->qv;
    for (size_t b = 0; b < q->ne[0]; b++)
        for (size_t h = 0; h < q->ne[1]; h++)
            for (size_t s = 0; s < q->ne[2]; s++)
                for (size_t d = 0; d < q->ne[3]; d++) af_view_set(q, b, h, s, d, d == 0 ? 1e-39 : 0.0);
    for (size_t b = 0; b < t->kv.ne[0]; b++)
        for (size_t g = 0; g < t->kv.ne[1]; g++) af_view_set(&t->kv, b, g, 0, 0, -DINF);
}

static void test_conv_denormals_flush(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    bench b;
    bench_open(&b, &c, fill_subnormal_v);
    for (size_t e = 0; e < b.n; e++) b.f[e] = 0.0f;
    af_conventions flush = {.denormals_flush = 7u};
    expect_conv(&b, &(af_conventions){0}, AF_KIND_DIVERGE, "subnormal V flushed, undeclared");
    expect_conv(&b, &flush, AF_KIND_OK, "subnormal V flushed, declared flush");
    b.f[3] = 1e-3f;
    expect_conv(&b, &flush, AF_KIND_DIVERGE, "declared flush, a wrong value");
    bench_close(&b);

    bench_open(&b, &c, fill_subnormal_q_inf_k);
    for (size_t e = 0; e < b.n; e++) {
        if (!isfinite(b.ref[e])) fail_msg("the reference drops key 0: element %zu is %g", e, b.ref[e]);
        b.f[e] = NAN;
    }
    expect_conv(&b, &(af_conventions){0}, AF_KIND_NAN_MISMATCH, "0 * -inf after DAZ, undeclared");
    expect_conv(&b, &flush, AF_KIND_OK, "0 * -inf after DAZ, declared flush");
    /* "flush" allows flushing; a kernel of the backend that keeps the subnormal q drops key
     * 0 exactly (q . k = -inf) and gives the reference's answer: right too */
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    expect_conv(&b, &flush, AF_KIND_OK, "the subnormal q kept (the exact answer), declared flush");
    b.f[2] = NAN;
    expect_conv(&b, &flush, AF_KIND_NAN_MISMATCH, "declared flush: NaN in one element only");
    bench_close(&b);
}

/* ... and a scaled input that a flushing unit flushes: q = 2^-126 (normal: DAZ keeps it) in
 * dim 0 and 0 elsewhere, K of +-3e38 in dim 0, the scale 0.25 placed as sqrt on Q and K: Q
 * times 0.5 is 2^-127, a subnormal that FTZ turns into 0, so every score is 0 and each row
 * the mean of V, where the exact scores are +-0.88 (jax explicit, bf16: a denormal Q
 * against a near-overflow K). */
static void fill_min_normal_q_big_k(const af_case_tensors *t) {
    fill_v2(t);
    const af_view *q = &t->qv, *k = &t->kv;
    for (size_t b = 0; b < q->ne[0]; b++)
        for (size_t h = 0; h < q->ne[1]; h++)
            for (size_t s = 0; s < q->ne[2]; s++)
                for (size_t d = 0; d < q->ne[3]; d++) af_view_set(q, b, h, s, d, d == 0 ? 0x1p-126 : 0.0);
    for (size_t b = 0; b < k->ne[0]; b++)
        for (size_t h = 0; h < k->ne[1]; h++)
            for (size_t s = 0; s < k->ne[2]; s++)
                for (size_t d = 0; d < k->ne[3]; d++) af_view_set(k, b, h, s, d, d == 0 ? (s % 2 ? -3e38 : 3e38) : 0.0);
}

static void test_conv_denormals_flush_scaled_input(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.scale_set = true;
    c.scale = 0.25;
    c.placement = AF_PLACE_SQRT_QK;
    bench b;
    bench_open(&b, &c, fill_min_normal_q_big_k);
    const af_case_tensors *t = af_inputs_get(b.in);
    size_t dv = c.v_head_dim, Sk = c.kv_len;
    for (size_t r = 0; r < (size_t)c.batch * c.q_heads * c.q_len; r++) {
        size_t h = r / c.q_len % c.q_heads, bb = r / (c.q_len * c.q_heads);
        for (size_t d = 0; d < dv; d++) {
            double mean = 0.0;
            for (size_t j = 0; j < Sk; j++) mean += af_view_get(&t->vv, bb, h / (c.q_heads / c.kv_heads), j, d);
            b.f[r * dv + d] = (float)(mean / (double)Sk);
            if (fabs((double)b.f[r * dv + d] - b.ref[r * dv + d]) < 1e-2)
                fail_msg("element %zu: the exact scores should move it off the mean", r * dv + d);
        }
    }
    af_conventions flush = {.denormals_flush = 7u};
    expect_conv(&b, &(af_conventions){0}, AF_KIND_DIVERGE, "Q * 0.5 flushed, undeclared");
    expect_conv(&b, &flush, AF_KIND_OK, "Q * 0.5 flushed, declared flush");
    /* the flushed scores may be anything within 3.5 of the exact ones, so any mix of V's
     * rows is right here; a value outside them is not */
    b.f[3] = 50.0f;
    expect_conv(&b, &flush, AF_KIND_DIVERGE, "declared flush, a value no weights give");
    bench_close(&b);
}

/* scores "dtype": f16 scores past 65504 are Inf, the row NaN (softmax of Inf). */
static void fill_big_qk(const af_case_tensors *t) {
    fill_v2(t);
    const af_view *q = &t->qv, *k = &t->kv;
    for (size_t b = 0; b < q->ne[0]; b++)
        for (size_t h = 0; h < q->ne[1]; h++)
            for (size_t s = 0; s < q->ne[2]; s++)
                for (size_t d = 0; d < q->ne[3]; d++) af_view_set(q, b, h, s, d, 300.0);
    for (size_t b = 0; b < k->ne[0]; b++)
        for (size_t h = 0; h < k->ne[1]; h++)
            for (size_t s = 0; s < k->ne[2]; s++)
                for (size_t d = 0; d < k->ne[3]; d++) af_view_set(k, b, h, s, d, s == 0 ? 300.0 : -300.0);
}

static void test_conv_scores_dtype(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F16);
    bench b;
    bench_open(&b, &c, fill_big_qk);
    for (size_t e = 0; e < b.n; e++) {
        if (!isfinite(b.ref[e])) fail_msg("the reference is finite: element %zu is %g", e, b.ref[e]);
        b.f[e] = NAN;
    }
    expect_conv(&b, &(af_conventions){0}, AF_KIND_NAN_MISMATCH, "f16 score overflow, f32 scores declared");
    expect_conv(&b, &(af_conventions){.scores_dtype = 1u << AF_BF16}, AF_KIND_NAN_MISMATCH,
                "f16 score overflow, bf16 scores declared");
    expect_conv(&b, &(af_conventions){.scores_dtype = 1u << AF_F16}, AF_KIND_OK, "f16 score overflow, f16 scores declared");
    /* a right output is right under either model */
    for (size_t e = 0; e < b.n; e++) b.f[e] = (float)b.ref[e];
    expect_conv(&b, &(af_conventions){.scores_dtype = 7u}, AF_KIND_OK, "the exact answer, scores dtype");
    bench_close(&b);
}

/* products "dtype" (tinygrad's dot: (q * k).sum(acc_dtype), the products in the case
 * dtype): query 0 is 300 everywhere and key 0 alternates +300 and -300, so its products
 * +-90000 are +-Inf in f16 and their sum NaN, where the exact score is small; the other
 * queries (1) give no product past f16's range. */
static void fill_overflowing_products(const af_case_tensors *t) {
    fill_v2(t);
    const af_view *q = &t->qv, *k = &t->kv;
    for (size_t b = 0; b < q->ne[0]; b++)
        for (size_t h = 0; h < q->ne[1]; h++)
            for (size_t s = 0; s < q->ne[2]; s++)
                for (size_t d = 0; d < q->ne[3]; d++) af_view_set(q, b, h, s, d, s == 0 ? 300.0 : 1.0);
    for (size_t b = 0; b < k->ne[0]; b++)
        for (size_t h = 0; h < k->ne[1]; h++)
            for (size_t s = 0; s < k->ne[2]; s++)
                for (size_t d = 0; d < k->ne[3]; d++) af_view_set(k, b, h, s, d, s == 0 ? (d % 2 ? -300.0 : 300.0) : 0.5);
}

static void test_conv_products_dtype(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F16);
    bench b;
    bench_open(&b, &c, fill_overflowing_products);
    size_t dv = c.v_head_dim, sq = c.q_len;
    /* query 0's rows NaN, the others right */
    for (size_t e = 0; e < b.n; e++) {
        if (!isfinite(b.ref[e])) fail_msg("the reference is finite: element %zu is %g", e, b.ref[e]);
        b.f[e] = (e / dv) % sq == 0 ? NAN : (float)b.ref[e];
    }
    expect_conv(&b, &(af_conventions){0}, AF_KIND_NAN_MISMATCH, "f16 products overflow, undeclared");
    expect_conv(&b, &(af_conventions){.scores_dtype = 1u << AF_F16}, AF_KIND_NAN_MISMATCH,
                "f16 products overflow, scores in f16 declared (the sum fits)");
    expect_conv(&b, &(af_conventions){.products_dtype = 1u << AF_BF16}, AF_KIND_NAN_MISMATCH,
                "f16 products overflow, bf16 products declared");
    expect_conv(&b, &(af_conventions){.products_dtype = 1u << AF_F16}, AF_KIND_OK,
                "f16 products overflow, f16 products declared");
    /* a NaN in a row whose products fit is a finding under the convention too */
    b.f[1 * dv] = NAN;
    expect_conv(&b, &(af_conventions){.products_dtype = 1u << AF_F16}, AF_KIND_NAN_MISMATCH,
                "NaN in query 1's row, f16 products declared");
    bench_close(&b);
}

/* scores "dtype" with masked_keys "ieee" (ORT's Attention on f16): key 1 masked by the
 * boolean mask for every query, its score 300 * 300 * 16 / 4 = 360000, finite but past
 * f16's range, so +Inf in the dtype, and adding the mask as -inf makes every row NaN; the
 * live keys' scores are small. Either convention alone does not explain that NaN. */
static void fill_masked_f16_overflow(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++) {
                for (size_t j = 0; j < c->kv_len; j++) af_view_set(&t->bm, b, h, i, j, j == 1 ? 0.0 : 1.0);
                for (size_t d = 0; d < c->head_dim; d++) af_view_set(&t->qv, b, h, i, d, 300.0);
            }
    for (size_t b = 0; b < c->batch; b++)
        for (size_t g = 0; g < c->kv_heads; g++)
            for (size_t j = 0; j < c->kv_len; j++)
                for (size_t d = 0; d < c->head_dim; d++)
                    af_view_set(&t->kv, b, g, j, d, j == 1 ? 300.0 : (double)((j + d) % 5) * 0.01 - 0.02);
}

static void test_conv_masked_keys_scores_dtype(void **state) {
    (void)state;
    af_case c;
    bmask_case(&c);
    c.dtype = AF_F16;
    bench b;
    bench_open(&b, &c, fill_masked_f16_overflow);
    for (size_t e = 0; e < b.n; e++) {
        if (!isfinite(b.ref[e])) fail_msg("the reference excludes the masked key: element %zu is %g", e, b.ref[e]);
        b.f[e] = NAN;
    }
    af_conventions both = {.masked_keys_ieee = true, .scores_dtype = 1u << AF_F16};
    expect_conv(&b, &(af_conventions){.masked_keys_ieee = true}, AF_KIND_NAN_MISMATCH,
                "a masked key's score +Inf in f16 only, f32 scores");
    expect_conv(&b, &(af_conventions){.scores_dtype = 1u << AF_F16}, AF_KIND_NAN_MISMATCH,
                "a masked key's score +Inf in f16 only, masked keys excluded");
    af_result res;
    assert_int_equal(conv_kind(&b, &both, &res), AF_KIND_OK);
    assert_int_equal(res.m.n_masked_key_nan, b.n);
    /* NaN, or the live keys' answer: not another value */
    b.f[5] = (float)(b.ref[5] + 0.5);
    expect_conv(&b, &both, AF_KIND_DIVERGE, "a finite wrong value in such a row");
    bench_close(&b);
}

/* scores "dtype": every score 65519, below f16's overflow threshold (65520) by less than
 * its rounding error; an implementation that places the scale elsewhere or accumulates in
 * another order may get Inf, and the row NaN (ORT's Attention: alpha * Q K^T in f32, then
 * rounded to f16, where the case scaled Q first). */
static void fill_f16_score_near_overflow(const af_case_tensors *t) {
    fill_v2(t);
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++) {
                af_view_set(&t->qv, b, h, i, 0, 256.0);
                af_view_set(&t->qv, b, h, i, 1, 1.0);
            }
    for (size_t b = 0; b < c->batch; b++)
        for (size_t g = 0; g < c->kv_heads; g++)
            for (size_t j = 0; j < c->kv_len; j++) {
                af_view_set(&t->kv, b, g, j, 0, 255.75);
                af_view_set(&t->kv, b, g, j, 1, 47.0);
            }
}

static void test_conv_scores_dtype_near_overflow(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F16);
    c.head_dim = 2;
    c.scale_set = true;
    c.scale = 1.0;
    bench b;
    bench_open(&b, &c, fill_f16_score_near_overflow);
    for (size_t e = 0; e < b.n; e++) {
        if (!isfinite(b.ref[e])) fail_msg("the reference is finite: element %zu is %g", e, b.ref[e]);
        b.f[e] = NAN;
    }
    expect_conv(&b, &(af_conventions){0}, AF_KIND_NAN_MISMATCH, "f16 scores of 65519, f32 scores");
    expect_conv(&b, &(af_conventions){.scores_dtype = 1u << AF_F16}, AF_KIND_OK,
                "f16 scores of 65519 that may round to Inf, f16 scores declared");
    bench_close(&b);
    /* 60000 is far from the threshold: NaN there is a finding under f16 scores too */
    c.scale = 60000.0 / 65519.0;
    bench_open(&b, &c, fill_f16_score_near_overflow);
    for (size_t e = 0; e < b.n; e++) b.f[e] = NAN;
    expect_conv(&b, &(af_conventions){.scores_dtype = 1u << AF_F16}, AF_KIND_NAN_MISMATCH, "f16 scores of 60000");
    bench_close(&b);
}

/* tf32 "always": TF32 matmuls on an f32 case that does not allow them (the silent_tf32
 * mutant computes exactly that). */
static void test_conv_tf32_always(void **state) {
    (void)state;
    af_case c;
    tame(&c, AF_F32);
    c.head_dim = 64;
    for (int t = 0; t < 3; t++) c.t[t].mag_q4 = 4;
    bench b;
    bench_open(&b, &c, NULL);
    af_backend *be = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_open("mutant:silent_tf32", &be, &err), AF_OK);
    assert_int_equal(af_backend_run(be, af_inputs_get(b.in), &b.out64, &err), AF_OK);
    af_backend_close(be);
    af_result res;
    assert_int_equal(af_oracle_compare_conv(b.o, &b.out64, &(af_conventions){0}, &res, &err), AF_OK);
    if (res.kind != AF_KIND_DIVERGE) fail_msg("TF32 on an f32 case, undeclared: %s", af_kind_names[res.kind]);
    assert_int_equal(af_oracle_compare_conv(b.o, &b.out64, &(af_conventions){.tf32_always = true}, &res, &err), AF_OK);
    if (res.kind != AF_KIND_OK) fail_msg("TF32 on an f32 case, declared always: %s (worst %.3g)", af_kind_names[res.kind], res.m.worst_ratio);
    bench_close(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature),        cmocka_unit_test(test_error_signature),        cmocka_unit_test(test_features),
        cmocka_unit_test(test_tolerance_f32),    cmocka_unit_test(test_tolerance_low_precision),
        cmocka_unit_test(test_classes_nan), cmocka_unit_test(test_classes_inf),          cmocka_unit_test(test_nan_column_keeps_tolerance), cmocka_unit_test(test_pairs), cmocka_unit_test(test_prepare_expected),
        cmocka_unit_test(test_zero_weight_keys), cmocka_unit_test(test_masked_row_ieee_leak), cmocka_unit_test(test_pair_leak), cmocka_unit_test(test_poisoned_masked_value),
        cmocka_unit_test(test_low_precision_outputs),
        cmocka_unit_test(test_grad_tolerance), cmocka_unit_test(test_grad_all_dropped),
        cmocka_unit_test(test_grad_nan_side), cmocka_unit_test(test_grad_poisoned_masked_value),
        cmocka_unit_test(test_grad_classes), cmocka_unit_test(test_grad_score_past_f32), cmocka_unit_test(test_grad_pairs), cmocka_unit_test(test_grad_signature),
        cmocka_unit_test(test_conv_masked_rows_mean), cmocka_unit_test(test_conv_masked_rows_mean_serving),
        cmocka_unit_test(test_conv_masked_rows_mean_leak), cmocka_unit_test(test_conv_masked_rows_mean_plain),
        cmocka_unit_test(test_conv_masked_rows_unmasked),
        cmocka_unit_test(test_conv_masked_keys_ieee),
        cmocka_unit_test(test_conv_masked_keys_scores_dtype), cmocka_unit_test(test_conv_scores_dtype_near_overflow), cmocka_unit_test(test_conv_denormals_flush),
        cmocka_unit_test(test_conv_denormals_flush_scaled_input),
        cmocka_unit_test(test_conv_scores_dtype),
        cmocka_unit_test(test_conv_products_dtype), cmocka_unit_test(test_conv_tf32_always),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
