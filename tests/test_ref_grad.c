/* test_ref_grad.c - the float64 reference backward (src/backends/ref_grad.c) against
 * independent computations: central finite differences (with Richardson extrapolation) of
 * sum(out * dO) through the forward reference, on small float64 cases drawn over every
 * feature (GQA, Sq != Sk, D != Dv, scales of either sign, softcap, additive masks of every
 * broadcast shape, boolean masks, causal on every diagonal, key padding, windows, dropout);
 * hand-computed values; the rules for zero weights, fully masked rows and NaN rows; GQA as
 * the sum of single heads; dmask of a broadcast mask as the sum of the full one's; layout
 * independence. Then the honest mode: its own rounding stays within the sensitivity bound
 * it reports, and the bound stays small against the row scale. The cross-check against
 * python/attnfuzz/reference.py runs in tests/python.cmake (python_ref_grad_cross). */
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
#include "backends/ref.h"

/* --- float64 copies of a case's tensors -------------------------------------------------- */

/* The canonical tensors of a generated case copied to contiguous float64 (the additive mask
 * at its 4-D broadcast shape, with stride 0 on broadcast dims), and a af_case_tensors whose
 * views read those copies: perturbing one element perturbs exactly one input. */
typedef struct f64case {
    af_case c;
    af_inputs *in;
    af_case_tensors t;
    double *q, *k, *v, *dO, *am;
    size_t nq, nk, nv, ndo, nam;
    af_scratch ws;
} f64case;

static void view_f64(af_view *v, double *data, size_t n0, size_t n1, size_t n2, size_t n3) {
    v->dtype = AF_F64;
    v->data = data;
    v->ne[0] = n0, v->ne[1] = n1, v->ne[2] = n2, v->ne[3] = n3;
    v->nb[3] = sizeof(double), v->nb[2] = n3 * v->nb[3], v->nb[1] = n2 * v->nb[2], v->nb[0] = n1 * v->nb[1];
}

static double *copy_view(const af_view *src, af_view *dst, size_t *n) {
    *n = src->ne[0] * src->ne[1] * src->ne[2] * src->ne[3];
    double *x = malloc(*n * sizeof *x);
    view_f64(dst, x, src->ne[0], src->ne[1], src->ne[2], src->ne[3]);
    for (size_t a = 0; a < src->ne[0]; a++)
        for (size_t b = 0; b < src->ne[1]; b++)
            for (size_t i = 0; i < src->ne[2]; i++)
                for (size_t d = 0; d < src->ne[3]; d++) af_view_set(dst, a, b, i, d, af_view_get(src, a, b, i, d));
    return x;
}

static void f64_make(f64case *f, const af_case *c) {
    memset(f, 0, sizeof *f);
    f->c = *c;
    f->in = af_inputs_create();
    af_error err = {0};
    if (af_inputs_generate(f->in, &f->c, &err) != AF_OK) fail_msg("inputs: %s", err.msg);
    const af_case_tensors *src = af_inputs_get(f->in);
    f->t = *src;
    f->t.c = &f->c;
    f->q = copy_view(&src->qv, &f->t.qv, &f->nq);
    f->k = copy_view(&src->kv, &f->t.kv, &f->nk);
    f->v = copy_view(&src->vv, &f->t.vv, &f->nv);
    f->dO = copy_view(&src->dov, &f->t.dov, &f->ndo);
    if (c->amask.present) {
        size_t ne[4];
        af_case_grad_shape(c, 3, ne);
        f->nam = ne[0] * ne[1] * ne[2] * ne[3];
        f->am = malloc(f->nam * sizeof *f->am);
        af_view st;
        view_f64(&st, f->am, ne[0], ne[1], ne[2], ne[3]);
        for (size_t a = 0; a < ne[0]; a++)
            for (size_t b = 0; b < ne[1]; b++)
                for (size_t i = 0; i < ne[2]; i++)
                    for (size_t j = 0; j < ne[3]; j++) af_view_set(&st, a, b, i, j, af_view_get(&src->am, a, b, i, j));
        f->t.am = st;
        size_t full[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
        for (int d = 0; d < 4; d++) {
            f->t.am.ne[d] = full[d];
            if (ne[d] == 1) f->t.am.nb[d] = 0;
        }
    }
}

static void f64_free(f64case *f) {
    af_inputs_destroy(f->in);
    free(f->q), free(f->k), free(f->v), free(f->dO), free(f->am);
    af_scratch_release(&f->ws);
}

/* sum(out * dO) through the forward reference */
static double f64_loss(f64case *f) {
    const af_case *c = &f->c;
    size_t n = (size_t)c->batch * c->q_heads * c->q_len * c->v_head_dim;
    double *out = malloc(n * sizeof *out);
    af_ref_opts o = {0};
    af_error err = {0};
    if (af_ref_attention(&f->t, &f->t.qv, &f->t.kv, &f->t.vv, &o, out, NULL, &f->ws, &err) != AF_OK)
        fail_msg("forward: %s", err.msg);
    double L = 0.0;
    for (size_t e = 0; e < n; e++) L += out[e] * f->dO[e];
    free(out);
    return L;
}

/* the reference gradients (every one the case asks for) */
static void f64_grads(f64case *f, double *g[AF_GRAD_COUNT], const af_ref_grad_opts *opts) {
    af_ref_grad_opts none = {0};
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        g[k] = NULL;
        if (!(f->c.bwd.grads & (1u << k))) continue;
        size_t ne[4];
        af_case_grad_shape(&f->c, k, ne);
        g[k] = malloc(ne[0] * ne[1] * ne[2] * ne[3] * sizeof(double));
    }
    af_error err = {0};
    if (af_ref_backward(&f->t, opts ? opts : &none, g, &f->ws, &err) != AF_OK) fail_msg("backward: %s", err.msg);
}

/* Richardson-extrapolated central difference of the loss in x[e] with step h */
static double fd(f64case *f, double *x, size_t e, double h) {
    double x0 = x[e], d[2];
    for (int k = 0; k < 2; k++) {
        double s = k ? h / 2 : h;
        x[e] = x0 + s;
        double lp = f64_loss(f);
        x[e] = x0 - s;
        double lm = f64_loss(f);
        d[k] = (lp - lm) / (2 * s);
    }
    x[e] = x0;
    return (4.0 * d[1] - d[0]) / 3.0;
}

/* --- finite differences ------------------------------------------------------------------ */

/* A generated case made smooth and small: every feature, modest values, no planted specials. */
static void small_case(af_case *c, af_rng *r, bool dropout) {
    af_gen_opts go = {0, 0.0, 1.0, 0.0, 0.0};
    af_case_generate_opts(c, r, &go);
    c->batch = 1 + af_rng_below(r, 2);
    c->kv_heads = 1 + af_rng_below(r, 2);
    c->q_heads = c->kv_heads * (1 + af_rng_below(r, 3));
    c->q_len = 1 + af_rng_below(r, 6);
    c->kv_len = af_rng_chance(r, 1, 2) ? c->q_len : 1 + af_rng_below(r, 6);
    c->head_dim = 1 + af_rng_below(r, 5);
    c->v_head_dim = af_rng_chance(r, 1, 2) ? c->head_dim : 1 + af_rng_below(r, 5);
    c->dtype = AF_F32;
    c->allow_tf32 = false;
    if (c->scale_set) c->scale = fmax(-2.0, fmin(2.0, c->scale));
    if (c->softcap > 0.0 && c->softcap < 1.0) c->softcap = 1.0;
    if (!dropout) c->dropout_p = 0.0;
    if (dropout && !(c->dropout_p > 0.0 && c->dropout_p < 1.0)) c->dropout_p = 0.3;
    af_tensor_spec *specs[4] = {&c->t[AF_Q], &c->t[AF_K], &c->t[AF_V], &c->bwd.dout};
    for (int w = 0; w < 4; w++) {
        specs[w]->dist = af_rng_chance(r, 1, 2) ? AF_DIST_NORMAL : AF_DIST_UNIFORM;
        specs[w]->mag_q4 = (int8_t)af_rng_range(r, -4, 2);
        specs[w]->special = AF_SPECIAL_NONE;
    }
    /* mask values exact in f32 for any step below 2^-9 (the reference reads masks as f32) */
    c->amask.dtype = AF_F32;
    c->amask.mag_q4 = 0;
    /* -inf at masked entries: a finite fill (-1e4, the lowest f32) absorbs the scores in
     * float64 (s - 3.4e38 is -3.4e38), flattening the forward finite differences see */
    c->amask.fill = AF_FILL_NEG_INF;
    c->bwd.grads = AF_GRAD_ALL;
    af_case_repair(c, 0);
}

/* Every gradient of case c against finite differences: |fd - g| <= 1e-6 (1 + max|g|). */
static void check_fd(const af_case *c) {
    f64case f;
    f64_make(&f, c);
    for (size_t e = 0; e < f.nam; e++) /* mask values on a 2^-6 grid: x +- 2^-9 stays exact in f32 */
        if (isfinite(f.am[e]) && fabs(f.am[e]) < 64.0) f.am[e] = nearbyint(f.am[e] * 64.0) / 64.0;
    double *g[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    double *x[AF_GRAD_COUNT] = {f.q, f.k, f.v, f.am};
    size_t n[AF_GRAD_COUNT] = {f.nq, f.nk, f.nv, f.nam};
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        if (!g[k]) continue;
        double mx = 0.0;
        for (size_t e = 0; e < n[k]; e++) mx = fmax(mx, fabs(g[k][e]));
        for (size_t e = 0; e < n[k]; e++) {
            if (k == 3 && !isfinite(x[k][e])) { /* a -inf entry: no weight, no gradient */
                if (g[k][e] != 0.0) fail_msg("dmask at a -inf entry: %g", g[k][e]);
                continue;
            }
            double h = k == 3 ? 0x1p-9 : 1e-5 * fmax(1.0, fabs(x[k][e]));
            double want = fd(&f, x[k], e, h);
            if (!(fabs(want - g[k][e]) <= 1e-6 * (1.0 + mx))) {
                char *j = af_case_to_json(c);
                print_error("%s\n", j);
                free(j);
                fail_msg("%s[%zu]: reference %.12g, finite difference %.12g (max |g| %g)", af_grad_names[k], e, g[k][e],
                         want, mx);
            }
        }
        free(g[k]);
    }
    f64_free(&f);
}

static void test_finite_differences(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 2024, 0);
    size_t n = scaled_at_least(300, 40);
    size_t seen_mask = 0, seen_cap = 0, seen_gqa = 0, seen_causal = 0, seen_drop = 0, seen_bmask = 0;
    for (size_t t = 0; t < n; t++) {
        af_case c;
        small_case(&c, &r, t % 4 == 3);
        seen_mask += c.amask.present, seen_cap += c.softcap > 0.0, seen_gqa += c.q_heads != c.kv_heads;
        seen_causal += c.causal, seen_drop += c.dropout_p > 0.0, seen_bmask += c.bmask.present;
        check_fd(&c);
    }
    print_message("%zu cases: additive mask %zu, softcap %zu, gqa %zu, causal %zu, dropout %zu, bool mask %zu\n", n,
                  seen_mask, seen_cap, seen_gqa, seen_causal, seen_drop, seen_bmask);
    assert_true(seen_mask > n / 10 && seen_cap > n / 30 && seen_gqa > n / 10 && seen_causal > n / 10);
    assert_true(seen_drop > n / 10 && seen_bmask > n / 10);
}

/* The finite-difference check fails the largest dQ element 1% off (the comparison can fail). */
static void test_fd_detects(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 7, 0);
    af_case c;
    small_case(&c, &r, false);
    c.q_len = c.kv_len = 4, c.head_dim = c.v_head_dim = 3;
    af_case_repair(&c, 0);
    f64case f;
    f64_make(&f, &c);
    double *g[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    size_t at = 0;
    for (size_t e = 1; e < f.nq; e++) at = fabs(g[0][e]) > fabs(g[0][at]) ? e : at;
    double want = fd(&f, f.q, at, 1e-5), mx = fabs(g[0][at]);
    assert_true(mx > 1e-3);
    assert_true(fabs(want - g[0][at]) <= 1e-6 * (1 + mx));
    assert_false(fabs(want - 1.01 * g[0][at]) <= 1e-6 * (1 + mx));
    for (int k = 0; k < AF_GRAD_COUNT; k++) free(g[k]);
    f64_free(&f);
}

/* --- hand values --------------------------------------------------------------------------- */

/* One query, two keys, D = Dv = 1, scale 1: q = 1, k = (0, ln 3), v = (1, 5), dO = 2. The
 * weights are (1/4, 3/4), out = 4, dV = P dO = (1/2, 3/2), dP = dO v = (2, 10), delta =
 * sum P dP = 8, dS = P (dP - delta) = (-3/2, 3/2), dQ = sum dS k = 3/2 ln 3, dK = dS q,
 * dmask = dS. With a softcap c = 2 the scores (0, ln 3) become (0, 1) (tanh(ln 3 / 2) =
 * 1/2): P = (1, e) / (1 + e), and dS is multiplied by 1 - tanh^2 = (1, 3/4). */
static void hand_case(af_case *c, double softcap) {
    af_case_default(c);
    c->kv_len = 2;
    c->scale_set = true, c->scale = 1.0;
    c->softcap = softcap;
    c->amask.present = true, c->amask.dims = AF_MDIM_Q | AF_MDIM_K, c->amask.live_zero = true;
    c->amask.pattern = AF_MASK_NONE;
    c->bwd.grads = AF_GRAD_ALL;
    af_case_repair(c, 0);
}

static void set_hand_values(f64case *f) {
    f->q[0] = 1.0;
    f->k[0] = 0.0, f->k[1] = log(3.0);
    f->v[0] = 1.0, f->v[1] = 5.0;
    f->dO[0] = 2.0;
    f->am[0] = f->am[1] = 0.0;
}

static void test_hand_values(void **state) {
    (void)state;
    af_case c;
    hand_case(&c, 0.0);
    f64case f;
    f64_make(&f, &c);
    set_hand_values(&f);
    double *g[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    const double eps = 1e-14;
    assert_true(fabs(g[0][0] - 1.5 * log(3.0)) < eps);
    assert_true(fabs(g[1][0] + 1.5) < eps && fabs(g[1][1] - 1.5) < eps);
    assert_true(fabs(g[2][0] - 0.5) < eps && fabs(g[2][1] - 1.5) < eps);
    assert_true(fabs(g[3][0] + 1.5) < eps && fabs(g[3][1] - 1.5) < eps);
    for (int k = 0; k < AF_GRAD_COUNT; k++) free(g[k]);
    f64_free(&f);

    hand_case(&c, 2.0);
    f64_make(&f, &c);
    set_hand_values(&f);
    f64_grads(&f, g, NULL);
    double e = exp(1.0), p0 = 1.0 / (1.0 + e), p1 = e / (1.0 + e);
    double delta = p0 * 2.0 + p1 * 10.0, ds0 = p0 * (2.0 - delta), ds1 = p1 * (10.0 - delta);
    assert_true(fabs(g[3][0] - ds0) < eps && fabs(g[3][1] - ds1) < eps); /* dmask: before the softcap */
    assert_true(fabs(g[1][0] - ds0) < eps && fabs(g[1][1] - 0.75 * ds1) < eps);
    assert_true(fabs(g[0][0] - 0.75 * ds1 * log(3.0)) < eps);
    assert_true(fabs(g[2][0] - 2.0 * p0) < eps && fabs(g[2][1] - 2.0 * p1) < eps);
    for (int k = 0; k < AF_GRAD_COUNT; k++) free(g[k]);
    f64_free(&f);
}

/* --- the rules of zero weights, dead rows and NaN rows -------------------------------------- */

/* A plain case: B = 2, one head, Sq = 3, Sk = 4, D = 2, Dv = 3, values from the generator. */
static void plain_case(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_len = 3, c->kv_len = 4, c->head_dim = 2, c->v_head_dim = 3;
    af_tensor_spec *specs[4] = {&c->t[AF_Q], &c->t[AF_K], &c->t[AF_V], &c->bwd.dout};
    for (int w = 0; w < 4; w++) specs[w]->seed = 11u + (uint32_t)w;
    c->bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    af_case_repair(c, 0);
}

static size_t gi(const af_case *c, int k, size_t b, size_t h, size_t s, size_t d) {
    size_t ne[4];
    af_case_grad_shape(c, k, ne);
    return ((b * ne[1] + h) * ne[2] + s) * ne[3] + d;
}

static void test_zero_weights(void **state) {
    (void)state;
    af_case c;
    plain_case(&c);
    c.key_padding = true, c.kv_valid[0] = 2, c.kv_valid[1] = 0; /* batch 1: every row fully masked */
    f64case f, h;
    f64_make(&f, &c);
    f64_make(&h, &c);
    /* batch 0: masked keys 2, 3 hold NaN V and Inf K in f, finite values in h; batch 1:
     * dead rows with a NaN dO in f */
    for (size_t j = 2; j < 4; j++) {
        for (size_t d = 0; d < 2; d++) f.k[j * 2 + d] = d ? -INFINITY : INFINITY, h.k[j * 2 + d] = 3.0;
        for (size_t d = 0; d < 3; d++) f.v[j * 3 + d] = NAN, h.v[j * 3 + d] = -7.0;
    }
    f.dO[((1 * 1 + 0) * 3 + 1) * 3] = NAN; /* dO[b = 1, h = 0, i = 1, d = 0] */
    double *gf[AF_GRAD_COUNT], *gh[AF_GRAD_COUNT];
    f64_grads(&f, gf, NULL);
    f64_grads(&h, gh, NULL);
    for (int k = 0; k < 3; k++) {
        size_t ne[4];
        af_case_grad_shape(&c, k, ne);
        size_t n = ne[0] * ne[1] * ne[2] * ne[3];
        for (size_t e = 0; e < n; e++) {
            size_t b = e / (ne[1] * ne[2] * ne[3]), s = e / ne[3] % ne[2];
            bool dead = b == 1 || (k > 0 && s >= 2); /* batch 1, or a masked key */
            if (dead && gf[k][e] != 0.0) fail_msg("%s[%zu] = %g, not 0 (zero weight)", af_grad_names[k], e, gf[k][e]);
            if (!dead && !(gf[k][e] == gh[k][e])) fail_msg("%s[%zu]: %g with NaN behind masked keys, %g without",
                                                           af_grad_names[k], e, gf[k][e], gh[k][e]);
        }
        free(gf[k]), free(gh[k]);
    }
    f64_free(&f);
    f64_free(&h);
}

/* Dropout: with dO NaN in the only query row, dV of a dropped key gets nothing, a kept key
 * NaN, and dQ is NaN (delta meets the kept NaN); p = 1 gives zeros whatever dO holds. */
static void test_dropout_rules(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.kv_len = 16, c.head_dim = 2, c.v_head_dim = 2;
    c.dropout_p = 0.5, c.dropout_seed = 99;
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    af_case_repair(&c, 0);
    f64case f;
    f64_make(&f, &c);
    f.dO[0] = NAN;
    double *g[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    uint8_t keep[16];
    af_dropout_keep_row(&f.t, af_dropout_threshold(0.5), 0, 0, 0, keep);
    size_t kept = 0;
    for (size_t j = 0; j < 16; j++) {
        kept += keep[j];
        assert_true(keep[j] ? isnan(g[2][j * 2]) : g[2][j * 2] == 0.0 && g[2][j * 2 + 1] == 0.0);
    }
    assert_true(kept > 0 && kept < 16);
    assert_true(isnan(g[0][0]) && isnan(g[0][1]));
    for (int k = 0; k < 3; k++) free(g[k]);
    f64_free(&f);
    c.dropout_p = 1.0;
    f64_make(&f, &c);
    f.dO[0] = NAN;
    f64_grads(&f, g, NULL);
    for (int k = 0; k < 3; k++) {
        assert_true(g[k][0] == 0.0 && g[k][1] == 0.0);
        free(g[k]);
    }
    f64_free(&f);
}

/* A NaN score makes the row's weights NaN on its live keys: its dQ, the dK and dV of those
 * keys NaN; the other batch row is untouched. */
static void test_nan_row(void **state) {
    (void)state;
    af_case c;
    plain_case(&c);
    c.causal = true; /* row 0 of each batch sees key 0 only */
    af_case_repair(&c, 0);
    f64case f;
    f64_make(&f, &c);
    f.q[0] = NAN; /* batch 0, row 0 */
    double *g[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    assert_true(isnan(g[0][0]) && isnan(g[0][1]));
    assert_true(isfinite(g[0][2])); /* row 1 */
    assert_true(isnan(g[1][0]) && isnan(g[2][0]));   /* key 0 */
    assert_true(isfinite(g[1][2]) && isfinite(g[2][3])); /* key 1: masked in row 0 */
    for (size_t e = gi(&c, 0, 1, 0, 0, 0); e < 2 * 3 * 2; e++) assert_true(isfinite(g[0][e]));
    for (int k = 0; k < 3; k++) free(g[k]);
    f64_free(&f);
}

/* --- GQA, broadcast masks, layouts ----------------------------------------------------------- */

/* dK and dV of a key/value head are the sums of what each query head of its group gives
 * alone (single-head runs over views of the same values). */
static void test_gqa_sum(void **state) {
    (void)state;
    af_case c;
    plain_case(&c);
    c.q_heads = 3, c.kv_heads = 1, c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    af_case_repair(&c, 0);
    f64case f;
    f64_make(&f, &c);
    double *g[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    af_case c1 = c;
    c1.q_heads = 1;
    size_t nk = 2 * 4 * 2, nv = 2 * 4 * 3;
    double *sk = calloc(nk, sizeof(double)), *sv = calloc(nv, sizeof(double));
    for (size_t h = 0; h < 3; h++) {
        af_case_tensors t1 = f.t;
        t1.c = &c1;
        t1.qv.ne[1] = 1, t1.qv.data = f.q + h * 3 * 2;
        t1.dov.ne[1] = 1, t1.dov.data = f.dO + h * 3 * 3;
        double *dq = malloc(2 * 3 * 2 * sizeof(double)), *dk = malloc(nk * sizeof(double)), *dv = malloc(nv * sizeof(double));
        double *g1[AF_GRAD_COUNT] = {dq, dk, dv, NULL};
        af_ref_grad_opts o = {0};
        af_error err = {0};
        af_scratch ws = {0};
        assert_int_equal(af_ref_backward(&t1, &o, g1, &ws, &err), AF_OK);
        for (size_t b = 0; b < 2; b++) /* dQ of head h alone is dQ's head h */
            for (size_t e = 0; e < 3 * 2; e++) assert_true(dq[b * 6 + e] == g[0][(b * 3 + h) * 6 + e]);
        for (size_t e = 0; e < nk; e++) sk[e] += dk[e];
        for (size_t e = 0; e < nv; e++) sv[e] += dv[e];
        free(dq), free(dk), free(dv);
        af_scratch_release(&ws);
    }
    for (size_t e = 0; e < nk; e++) assert_true(fabs(sk[e] - g[1][e]) <= 1e-13 * (1 + fabs(sk[e])));
    for (size_t e = 0; e < nv; e++) assert_true(fabs(sv[e] - g[2][e]) <= 1e-13 * (1 + fabs(sv[e])));
    free(sk), free(sv);
    for (int k = 0; k < 3; k++) free(g[k]);
    f64_free(&f);
}

/* dmask of a mask shared by every batch row and head is the sum over them of the gradient
 * of the same values held at full shape. */
static void test_dmask_broadcast(void **state) {
    (void)state;
    af_case c;
    plain_case(&c);
    c.q_heads = 2, c.kv_heads = 2;
    c.amask.present = true, c.amask.dims = AF_MDIM_Q | AF_MDIM_K, c.amask.rank2 = true;
    c.amask.pattern = AF_MASK_RANDOM, c.amask.density = 60, c.amask.seed = 5;
    c.bwd.grads = AF_GRAD_DMASK;
    af_case_repair(&c, 0);
    af_case cf = c;
    cf.amask.dims = AF_MDIM_ALL, cf.amask.rank2 = false;
    af_case_repair(&cf, 0);
    f64case f, ff;
    f64_make(&f, &c);
    f64_make(&ff, &cf);
    for (size_t bh = 0; bh < 4; bh++) memcpy(ff.am + bh * 12, f.am, 12 * sizeof(double));
    double *g[AF_GRAD_COUNT], *gf[AF_GRAD_COUNT];
    f64_grads(&f, g, NULL);
    f64_grads(&ff, gf, NULL);
    size_t masked = 0;
    for (size_t e = 0; e < 12; e++) {
        double sum = 0.0;
        for (size_t bh = 0; bh < 4; bh++) sum += gf[3][bh * 12 + e];
        assert_true(fabs(sum - g[3][e]) <= 1e-13 * (1 + fabs(sum)));
        masked += isfinite(f.am[e]) ? 0u : 1u;
    }
    assert_true(masked > 0); /* some -inf entries, whose gradient is 0 */
    free(g[3]), free(gf[3]);
    f64_free(&f);
    f64_free(&ff);
}

/* The gradients depend on the canonical values only: the same case with every tensor,
 * dO included, in other layouts and strides gives the same numbers (ref backend, through
 * af_backend_run_backward). */
static void test_layout_independent(void **state) {
    (void)state;
    af_backend *ref;
    af_error err = {0};
    assert_int_equal(af_backend_open("ref", &ref, &err), AF_OK);
    assert_true(af_backend_caps(ref) & AF_CAP_BACKWARD);
    af_rng r;
    af_rng_init(&r, 31, 0);
    af_inputs *ia = af_inputs_create(), *ib = af_inputs_create();
    for (int t = 0; t < 30; t++) {
        af_case a;
        small_case(&a, &r, t % 3 == 0);
        af_case b = a;
        for (int w = 0; w < 3; w++) {
            b.t[w].layout = (af_layout)(t % AF_LAYOUT_FIRST_PACKED);
            b.t[w].perm = (uint8_t)(t % 5), b.t[w].pad = 3, b.t[w].bcast = AF_BCAST_NONE;
        }
        for (int w = 0; w < 3; w++) a.t[w].bcast = AF_BCAST_NONE;
        b.bwd.dout.perm = 2, b.bwd.dout.pad = 1;
        af_case_repair(&a, 0);
        af_case_repair(&b, 0);
        assert_int_equal(af_inputs_generate(ia, &a, &err), AF_OK);
        assert_int_equal(af_inputs_generate(ib, &b, &err), AF_OK);
        double *res[2][AF_GRAD_COUNT + 1];
        for (int s = 0; s < 2; s++) {
            const af_case_tensors *tt = af_inputs_get(s ? ib : ia);
            af_tensor out;
            af_grads gr;
            af_backend_out_shape(ref, tt->c, &out);
            af_backend_grads_shape(ref, tt->c, &gr);
            res[s][AF_GRAD_COUNT] = out.data = malloc(af_tensor_span(&out));
            for (int k = 0; k < AF_GRAD_COUNT; k++) {
                af_tensor *x = af_grads_at(&gr, k);
                res[s][k] = x->ndim ? (x->data = malloc(af_tensor_span(x))) : NULL;
            }
            if (af_backend_run_backward(ref, tt, &out, &gr, &err) != AF_OK) fail_msg("%s", err.msg);
        }
        for (int k = 0; k < AF_GRAD_COUNT; k++) {
            if (!res[0][k]) continue;
            size_t ne[4];
            af_case_grad_shape(&a, k, ne);
            assert_memory_equal(res[0][k], res[1][k], ne[0] * ne[1] * ne[2] * ne[3] * sizeof(double));
        }
        for (int s = 0; s < 2; s++)
            for (int k = 0; k <= AF_GRAD_COUNT; k++) free(res[s][k]);
    }
    /* gradients asked for without storage, or given but not asked: refused */
    af_case a;
    plain_case(&a);
    assert_int_equal(af_inputs_generate(ia, &a, &err), AF_OK);
    af_tensor out;
    af_grads gr;
    af_backend_out_shape(ref, &a, &out);
    af_backend_grads_shape(ref, &a, &gr);
    double buf[512];
    out.data = buf;
    assert_int_equal(af_backend_run_backward(ref, af_inputs_get(ia), &out, &gr, &err), AF_ERR_INVALID);
    af_inputs_destroy(ia);
    af_inputs_destroy(ib);
    af_backend_close(ref);
}

/* --- the honest mode ---------------------------------------------------------------------- */

/* On generated backward cases of every dtype: the honest run's own deviation from the exact
 * gradients is what its sensitivity bound says (beyond it, by more than one rounding of
 * the row's scale, on few elements), and the bound is small against the row scale (the
 * check stays sharp). */
static void test_honest_sens(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 555, 0);
    af_inputs *in = af_inputs_create();
    af_scratch ws = {0};
    size_t n = scaled_at_least(1500, 100);
    size_t elems[AF_GRAD_COUNT] = {0}, beyond[AF_GRAD_COUNT] = {0}, unstable[AF_GRAD_COUNT] = {0};
    double *ratios[AF_GRAD_COUNT];
    size_t nratio[AF_GRAD_COUNT] = {0}, cap = 1u << 22;
    for (int k = 0; k < AF_GRAD_COUNT; k++) ratios[k] = malloc(cap * sizeof(double));
    for (size_t t = 0; t < n; t++) {
        af_case c;
        af_gen_opts go = {(size_t)4 << 20, 2e5, 1.0, 0.0, 0.0};
        af_case_generate_opts(&c, &r, &go);
        af_error err = {0};
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *tt = af_inputs_get(in);
        double *ex[AF_GRAD_COUNT] = {0}, *ho[AF_GRAD_COUNT] = {0};
        af_ref_grad_opts eo = {0}, hoo = {0};
        hoo.honest = true;
        size_t cnt[AF_GRAD_COUNT] = {0};
        for (int k = 0; k < AF_GRAD_COUNT; k++) {
            if (!(c.bwd.grads & (1u << k))) continue;
            size_t ne[4];
            af_case_grad_shape(&c, k, ne);
            cnt[k] = ne[0] * ne[1] * ne[2] * ne[3];
            ex[k] = malloc(cnt[k] * sizeof(double));
            ho[k] = malloc(cnt[k] * sizeof(double));
            eo.gscale[k] = malloc(af_ref_grad_rows(&c, k) * sizeof(double));
            hoo.sens[k] = malloc(cnt[k] * sizeof(double));
            hoo.unstable[k] = malloc(cnt[k]);
        }
        assert_int_equal(af_ref_backward(tt, &eo, ex, &ws, &err), AF_OK);
        assert_int_equal(af_ref_backward(tt, &hoo, ho, &ws, &err), AF_OK);
        for (int k = 0; k < AF_GRAD_COUNT; k++) {
            if (!ex[k]) continue;
            size_t rowlen = cnt[k] / af_ref_grad_rows(&c, k);
            for (size_t e = 0; e < cnt[k]; e++) {
                if (hoo.unstable[k][e]) {
                    unstable[k]++;
                    continue;
                }
                if (!isfinite(ex[k][e]) || !isfinite(ho[k][e])) continue;
                elems[k]++;
                double dev = fabs(ho[k][e] - ex[k][e]), sens = hoo.sens[k][e];
                double gs = eo.gscale[k][e / rowlen];
                /* beyond the bound by more than one rounding of the row's scale */
                if (dev > sens + af_dtype_eps(c.dtype) * gs) {
                    beyond[k]++;
                    if (beyond[k] <= 3) {
                        print_message("%s: |honest - ref| %.3g beyond sens %.3g (ref %.6g, row scale %.3g) in\n",
                                      af_grad_names[k], dev, sens, ex[k][e], eo.gscale[k][e / rowlen]);
                        char *j = af_case_to_json(&c);
                        print_message("%s\n", j);
                        free(j);
                    }
                }
                if (gs > 0 && nratio[k] < cap) ratios[k][nratio[k]++] = sens / (gs * af_dtype_eps(c.dtype));
            }
            free(ex[k]), free(ho[k]), free(eo.gscale[k]), free(hoo.sens[k]), free(hoo.unstable[k]);
        }
    }
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        /* the median of sens / (row scale x dtype eps): how many roundings the bound allows */
        size_t m = nratio[k];
        double med = 0.0;
        if (m) {
            for (size_t a = 0; a < m; a++) /* partial selection: the median */
                for (size_t b2 = a + 1; b2 < m && a <= m / 2; b2++)
                    if (ratios[k][b2] < ratios[k][a]) {
                        double x = ratios[k][a];
                        ratios[k][a] = ratios[k][b2];
                        ratios[k][b2] = x;
                    }
            med = ratios[k][m / 2];
        }
        print_message("%s: %zu elements, %zu beyond sens (%.4f%%), %zu unstable, median sens %.3g row-scale epsilons\n",
                      af_grad_names[k], elems[k], beyond[k], 100.0 * (double)beyond[k] / (double)(elems[k] + 1),
                      unstable[k], med);
        assert_true(elems[k] > 1000);
        assert_true((double)beyond[k] <= 1e-3 * (double)elems[k]);
        assert_true(med < 64.0);
        free(ratios[k]);
    }
    af_scratch_release(&ws);
    af_inputs_destroy(in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_zero_weights),
        cmocka_unit_test(test_dropout_rules),
        cmocka_unit_test(test_nan_row),
        cmocka_unit_test(test_gqa_sum),
        cmocka_unit_test(test_dmask_broadcast),
        cmocka_unit_test(test_layout_independent),
        cmocka_unit_test(test_fd_detects),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_honest_sens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
