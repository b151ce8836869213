/* test_ref.c - the float64 reference backend against hand-computed attention, one test
 * per semantic rule of docs/design.md section 2, and against an independent mini-reference
 * (mini_ref below: plain loops over the canonical views, the rules re-implemented from
 * docs/design.md, sharing no code with ref.c or mask.c) on generated cases. */
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

#define DNAN ((double)NAN)
#define DINF ((double)INFINITY)

/* --- rig: inputs, the ref backend, its output ------------------------------------------ */

typedef struct rig {
    af_inputs *in;
    af_backend *ref;
    double *out;
    size_t cap;
} rig;

static int rig_setup(void **state) {
    rig *r = calloc(1, sizeof *r);
    r->in = af_inputs_create();
    af_error err = {0};
    if (!r->in || af_backend_open("ref", &r->ref, &err) != AF_OK) return -1;
    *state = r;
    return 0;
}

static int rig_teardown(void **state) {
    rig *r = *state;
    af_inputs_destroy(r->in);
    af_backend_close(r->ref);
    free(r->out);
    free(r);
    return 0;
}

/* Storage for case c; every Q/K/V value starts as NaN (af_inputs_alloc), masks undefined. */
static const af_case_tensors *rig_alloc(rig *r, const af_case *c) {
    af_error err = {0};
    if (af_case_validate(c, 0, &err) != AF_OK) fail_msg("hand-built case invalid: %s", err.msg);
    if (af_inputs_alloc(r->in, c, &err) != AF_OK) fail_msg("alloc: %s", err.msg);
    return af_inputs_get(r->in);
}

static const double *rig_run(rig *r) {
    const af_case_tensors *t = af_inputs_get(r->in);
    af_tensor out;
    af_backend_out_shape(r->ref, t->c, &out);
    assert_int_equal(out.dtype, AF_F64);
    size_t n = af_tensor_numel(&out);
    if (n > r->cap) {
        free(r->out);
        r->out = malloc(n * sizeof(double));
        r->cap = n;
    }
    for (size_t k = 0; k < n; k++) r->out[k] = -12345.0; /* every element must be written */
    out.data = r->out;
    af_error err = {0};
    af_status st = af_backend_run(r->ref, t, &out, &err);
    if (st != AF_OK) fail_msg("ref failed: %s", err.msg);
    return r->out;
}

static size_t oidx(const af_case *c, size_t b, size_t h, size_t i, size_t d) {
    return ((b * c->q_heads + h) * c->q_len + i) * c->v_head_dim + d;
}

#define FILL(view, expr)                                                                           \
    do {                                                                                           \
        const af_view *fv_ = (view);                                                               \
        for (size_t i0 = 0; i0 < fv_->ne[0]; i0++)                                                 \
            for (size_t i1 = 0; i1 < fv_->ne[1]; i1++)                                             \
                for (size_t i2 = 0; i2 < fv_->ne[2]; i2++)                                         \
                    for (size_t i3 = 0; i3 < fv_->ne[3]; i3++) af_view_set(fv_, i0, i1, i2, i3, (expr)); \
    } while (0)

static void expect_close(double got, double want, double rel, const char *what, size_t b, size_t h, size_t i,
                         size_t d) {
    if (isnan(want) ? !isnan(got) : !(fabs(got - want) <= rel * fabs(want) + 1e-300 || got == want))
        fail_msg("%s (%zu,%zu,%zu,%zu): got %.17g, expected %.17g", what, b, h, i, d, got, want);
}

/* --- the mini-reference ------------------------------------------------------------- */

/* exp as ref.c's documented kernel gives it (vmath.h: results below 2^-1022 flush to 0),
 * so an underflowed weight times an Inf value agrees on NaN. */
static double mexp(double x) { return isnan(x) || x > -708.0 ? exp(x) : 0.0; }

typedef struct mini_out {
    double *out;  /* [B, Hq, Sq, Dv] */
    double *tol;  /* per element: absolute error allowed for a float64 implementation */
} mini_out;

static void mini_ref(const af_case_tensors *t, mini_out *mo) {
    const af_case *c = t->c;
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = c->q_len, Sk = c->kv_len;
    const size_t D = c->head_dim, Dv = c->v_head_dim;
    const double scale = c->scale_set ? c->scale : 1.0 / sqrt((double)D);
    const double eps = 0x1p-53;
    double *s = malloc(Sk * sizeof *s), *w = malloc(Sk * sizeof *w), *dl = malloc(Sk * sizeof *dl);
    uint8_t *live = malloc(Sk);
    for (size_t b = 0; b < B; b++) {
        int64_t valid = c->key_padding ? (int64_t)c->kv_valid[b] : (int64_t)Sk;
        int64_t off = 0;
        switch (c->diag) {
        case AF_DIAG_TOP_LEFT: off = 0; break;
        case AF_DIAG_BOTTOM_RIGHT: off = (int64_t)Sk - (int64_t)Sq; break;
        case AF_DIAG_BOTTOM_RIGHT_VALID: off = valid - (int64_t)Sq; break;
        case AF_DIAG_EXPLICIT: off = c->diag_offset; break;
        case AF_DIAG_COUNT: break;
        }
        for (size_t h = 0; h < Hq; h++) {
            size_t g = h / (Hq / Hkv);
            for (size_t i = 0; i < Sq; i++) {
                int64_t dg = (int64_t)i + off;
                bool any_nan = false, any_live = false;
                double m = -DINF;
                for (size_t j = 0; j < Sk; j++) {
                    int64_t jj = (int64_t)j;
                    bool lv = jj < valid;
                    if (c->causal && jj > dg) lv = false;
                    if (c->window_left >= 0 && jj < dg - c->window_left) lv = false;
                    if (c->window_right >= 0 && jj > dg + c->window_right) lv = false;
                    if (c->bmask.present && af_view_get(&t->bm, b, h, i, j) == 0.0) lv = false;
                    live[j] = lv;
                    double dot = 0.0, adot = 0.0;
                    for (size_t d = 0; d < D; d++) {
                        double x = af_view_get(&t->qv, b, h, i, d) * af_view_get(&t->kv, b, g, j, d);
                        dot += x;
                        adot += fabs(x);
                    }
                    double x = scale * dot, slope = 1.0;
                    if (c->softcap > 0.0) {
                        double th = tanh(x / c->softcap);
                        slope = 1.0 - th * th;
                        x = c->softcap * th;
                    }
                    double a = c->amask.present ? af_view_get(&t->am, b, h, i, j) : 0.0;
                    x += a;
                    s[j] = x;
                    /* first-order bound on a float64 score's error: the dot product over D
                     * terms, the scale, the softcap, the mask addition */
                    dl[j] = ((double)D + 4.0) * 4.0 * eps * fabs(scale) * adot * slope + 4.0 * eps * (fabs(x) + fabs(a));
                    if (!isfinite(dl[j])) dl[j] = 0.0; /* a -inf score has weight exactly 0 */
                    if (!lv) continue;
                    any_live = true;
                    if (isnan(x)) any_nan = true;
                    if (x > m) m = x;
                }
                double *o = mo->out + oidx(c, b, h, i, 0), *tl = mo->tol + oidx(c, b, h, i, 0);
                if (!any_live || (!any_nan && m == -DINF)) {
                    /* a fully masked row (no live key, or every live score -inf) gives 0 */
                    for (size_t d = 0; d < Dv; d++) o[d] = 0.0, tl[d] = 0.0;
                    continue;
                }
                double sum = 0.0;
                for (size_t j = 0; j < Sk; j++) {
                    /* a NaN score makes every weight of the row NaN */
                    w[j] = !live[j] ? 0.0 : any_nan ? DNAN : mexp(s[j] - m);
                    sum += w[j];
                }
                for (size_t j = 0; j < Sk; j++) {
                    if (!any_nan) w[j] /= sum;
                    if (c->dropout_p > 0.0) {
                        /* dropped weights are exactly 0, NaN or not (p = 1 gives zeros) */
                        bool keep = (uint64_t)af_dropout_word(c->dropout_seed, (uint32_t)b, (uint32_t)h, (uint32_t)i,
                                                              (uint32_t)j) >= af_dropout_threshold(c->dropout_p);
                        w[j] = keep ? w[j] / (1.0 - c->dropout_p) : 0.0;
                    }
                }
                for (size_t d = 0; d < Dv; d++) {
                    double acc = 0.0, aacc = 0.0, sens = 0.0;
                    for (size_t j = 0; j < Sk; j++) {
                        /* a key of weight 0 (masked, -inf, dropped, flushed) contributes
                         * nothing, not 0 * NaN (docs/design.md section 2 rule 5) */
                        if (!live[j] || w[j] == 0.0) continue;
                        double v = af_view_get(&t->vv, b, g, j, d);
                        acc += w[j] * v;
                        if (isfinite(v) && isfinite(w[j]) && w[j] != 0.0) {
                            aacc += fabs(w[j] * v);
                            sens += w[j] * dl[j] * fabs(v);
                        }
                    }
                    o[d] = acc;
                    double wd = 0.0;
                    for (size_t j = 0; j < Sk; j++) wd += live[j] && isfinite(w[j]) && w[j] != 0.0 ? w[j] * dl[j] : 0.0;
                    tl[d] = 1e-12 * aacc + sens + wd * (isfinite(acc) ? fabs(acc) : 0.0) + 1e-300;
                }
            }
        }
    }
    free(s), free(w), free(dl), free(live);
}

/* --- hand-computed rules ----------------------------------------------------------------- */

static void test_single_key(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.head_dim = 3, c.v_head_dim = 4;
    const af_case_tensors *t = rig_alloc(r, &c);
    const double q[3] = {0.5, -2.0, 7.0}, k[3] = {3.0, 1.0, -0.25}, v[4] = {1.5, -2.0, 3.25, 0.125};
    FILL(&t->qv, q[i3]);
    FILL(&t->kv, k[i3]);
    FILL(&t->vv, v[i3]);
    const double *o = rig_run(r);
    /* one key: its weight is exp(0) / exp(0) = 1 exactly, the output is v exactly */
    for (size_t d = 0; d < 4; d++)
        if (o[d] != v[d]) fail_msg("single key: out[%zu] = %.17g, expected %.17g", d, o[d], v[d]);
}

static void test_two_keys_weights(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.kv_len = 2, c.v_head_dim = 2;
    c.scale_set = true, c.scale = log(3.0); /* scores 0 * ln3 and 1 * ln3 */
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, (double)i2);        /* k0 = 0, k1 = 1 */
    FILL(&t->vv, i2 == i3 ? 1.0 : 0.0); /* v0 = (1, 0), v1 = (0, 1): out = (w0, w1) */
    const double *o = rig_run(r);
    /* e^0 : e^ln3 = 1 : 3 -> weights 1/4, 3/4 */
    expect_close(o[0], 0.25, 1e-14, "weight of score 0", 0, 0, 0, 0);
    expect_close(o[1], 0.75, 1e-14, "weight of score ln 3", 0, 0, 0, 1);
}

static void test_gqa_mapping(void **state) {
    rig *r = *state;
    /* Hq = 6, Hkv = 2: heads 0, 1, 2 read kv head 0 and 3, 4, 5 read kv head 1 (h / 3),
     * not h % 2. K = 0 makes the weights uniform over the 2 keys: out = mean of V. */
    af_case c;
    af_case_default(&c);
    c.q_heads = 6, c.kv_heads = 2, c.kv_len = 2, c.q_len = 2, c.head_dim = 2;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, (double)(i1 + 1) * (i3 ? -1.0 : 1.0));
    FILL(&t->kv, 0.0);
    FILL(&t->vv, 100.0 * (double)i1 + (double)i2); /* kv head g: keys 100g, 100g + 1 */
    const double *o = rig_run(r);
    for (size_t h = 0; h < 6; h++)
        for (size_t i = 0; i < 2; i++) {
            double want = 100.0 * (double)(h / 3) + 0.5;
            if (o[oidx(&c, 0, h, i, 0)] != want)
                fail_msg("head %zu: %.17g, expected %.17g (kv head %zu)", h, o[oidx(&c, 0, h, i, 0)], want, h / 3);
        }
    /* Hq = 4, Hkv = 2 with distinct K per kv head: kv head 0 prefers key 1, kv head 1 key 0 */
    af_case_default(&c);
    c.q_heads = 4, c.kv_heads = 2, c.kv_len = 2, c.scale_set = true, c.scale = 1.0;
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i1 == 0 ? (i2 == 1 ? 2.0 : 0.0) : (i2 == 0 ? 3.0 : 0.0));
    FILL(&t->vv, (double)i2);
    o = rig_run(r);
    double w_g0 = exp(2.0) / (1.0 + exp(2.0)); /* weight of key 1 under kv head 0 */
    double w_g1 = 1.0 / (exp(3.0) + 1.0);      /* weight of key 1 under kv head 1 */
    for (size_t h = 0; h < 4; h++) expect_close(o[oidx(&c, 0, h, 0, 0)], h < 2 ? w_g0 : w_g1, 1e-14, "gqa", 0, h, 0, 0);
}

static void test_default_vs_explicit_scale(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.head_dim = 4, c.kv_len = 2;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 ? 0.5 : 0.0); /* q.k0 = 0, q.k1 = 2 */
    FILL(&t->vv, (double)i2);     /* out = weight of key 1 */
    const double *o = rig_run(r);
    /* default scale 1/sqrt(4) = 1/2: scores 0, 1 */
    expect_close(o[0], exp(1.0) / (1.0 + exp(1.0)), 1e-14, "default scale", 0, 0, 0, 0);
    c.scale_set = true, c.scale = 2.0; /* scores 0, 4 */
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 ? 0.5 : 0.0);
    FILL(&t->vv, (double)i2);
    o = rig_run(r);
    expect_close(o[0], exp(4.0) / (1.0 + exp(4.0)), 1e-14, "explicit scale", 0, 0, 0, 0);
    c.scale = -2.0; /* a negative scale flips the preference */
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 ? 0.5 : 0.0);
    FILL(&t->vv, (double)i2);
    o = rig_run(r);
    expect_close(o[0], exp(-4.0) / (1.0 + exp(-4.0)), 1e-14, "negative scale", 0, 0, 0, 0);
    /* the placement is for explicit graphs: the float64 reference is the same for all */
    double base = o[0];
    for (int p = 0; p < AF_PLACE_COUNT; p++) {
        c.placement = (af_placement)p;
        t = rig_alloc(r, &c);
        FILL(&t->qv, 1.0);
        FILL(&t->kv, i2 ? 0.5 : 0.0);
        FILL(&t->vv, (double)i2);
        o = rig_run(r);
        expect_close(o[0], base, 1e-15, "placement", 0, 0, 0, (size_t)p);
    }
}

/* Uniform weights (K = 0) over the live keys, V = 2^j: the output names the live set. */
static double mean_pow2(int64_t lo, int64_t hi) {
    double s = 0.0;
    for (int64_t j = lo; j <= hi; j++) s += ldexp(1.0, (int)j);
    return hi < lo ? 0.0 : s / (double)(hi - lo + 1);
}

static void fill_uniform_pow2(const af_case_tensors *t) {
    FILL(&t->qv, 1.0);
    FILL(&t->kv, 0.0);
    FILL(&t->vv, ldexp(1.0, (int)i2));
}

static void check_rows(const af_case *c, const double *o, const int64_t (*range)[2], const char *what) {
    for (size_t b = 0; b < c->batch; b++)
        for (size_t i = 0; i < c->q_len; i++) {
            const int64_t *rg = range[b * c->q_len + i];
            double want = mean_pow2(rg[0], rg[1]);
            double got = o[oidx(c, b, 0, i, 0)];
            if (rg[1] < rg[0]) {
                if (got != 0.0 || signbit(got)) fail_msg("%s: row (%zu, %zu) fully masked, got %.17g", what, b, i, got);
            } else {
                expect_close(got, want, 1e-14, what, b, 0, i, 0);
            }
        }
}

static void test_causal_alignments(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.q_len = 2, c.kv_len = 4, c.causal = true;
    /* top-left: row 0 sees key 0, row 1 keys 0..1 */
    c.diag = AF_DIAG_TOP_LEFT;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t tl[2][2] = {{0, 0}, {0, 1}};
    check_rows(&c, rig_run(r), tl, "causal top-left Sq=2 Sk=4");
    /* bottom-right: offset Sk - Sq = 2: row 0 sees keys 0..2, row 1 keys 0..3 */
    c.diag = AF_DIAG_BOTTOM_RIGHT;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t br[2][2] = {{0, 2}, {0, 3}};
    check_rows(&c, rig_run(r), br, "causal bottom-right Sq=2 Sk=4");
    /* Sq > Sk bottom-right: offset -2: rows 0 and 1 see no key -> exactly 0 */
    c.q_len = 4, c.kv_len = 2;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t br2[4][2] = {{0, -1}, {0, -1}, {0, 0}, {0, 1}};
    check_rows(&c, rig_run(r), br2, "causal bottom-right Sq=4 Sk=2");
    /* top-left with Sq > Sk: every row sees key 0 at least */
    c.diag = AF_DIAG_TOP_LEFT;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t tl2[4][2] = {{0, 0}, {0, 1}, {0, 1}, {0, 1}};
    check_rows(&c, rig_run(r), tl2, "causal top-left Sq=4 Sk=2");
    /* bottom-right to the valid length: kv_valid {3, 5}, Sq = 2, Sk = 5: offsets 1 and 3 */
    af_case_default(&c);
    c.batch = 2, c.q_len = 2, c.kv_len = 5, c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT_VALID;
    c.key_padding = true, c.kv_valid[0] = 3, c.kv_valid[1] = 5;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t brv[4][2] = {{0, 1}, {0, 2}, {0, 3}, {0, 4}};
    check_rows(&c, rig_run(r), brv, "causal bottom-right-valid");
}

static void test_explicit_diagonal(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.q_len = 3, c.kv_len = 3, c.causal = true, c.diag = AF_DIAG_EXPLICIT;
    c.diag_offset = -1; /* row i sees keys j <= i - 1 */
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t m1[3][2] = {{0, -1}, {0, 0}, {0, 1}};
    check_rows(&c, rig_run(r), m1, "diagonal offset -1");
    c.diag_offset = 5; /* everything visible */
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t p5[3][2] = {{0, 2}, {0, 2}, {0, 2}};
    check_rows(&c, rig_run(r), p5, "diagonal offset 5");
    c.diag_offset = 1; /* like a KV cache of length 1 */
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t p1[3][2] = {{0, 1}, {0, 2}, {0, 2}};
    check_rows(&c, rig_run(r), p1, "diagonal offset 1");
}

static void test_key_padding(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.batch = 3, c.q_len = 2, c.kv_len = 3, c.key_padding = true;
    c.kv_valid[0] = 2, c.kv_valid[1] = 0, c.kv_valid[2] = 3;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t kp[6][2] = {{0, 1}, {0, 1}, {0, -1}, {0, -1}, {0, 2}, {0, 2}};
    check_rows(&c, rig_run(r), kp, "key padding {2, 0, 3}");
}

static void test_sliding_window(void **state) {
    rig *r = *state;
    const struct {
        int32_t left, right;
        bool causal;
    } cases[] = {{1, 0, false}, {2, 1, false}, {1, 2, true}, {-1, 0, false}, {0, 0, false}, {0, -1, false},
                 {3, -1, true}, {-1, 2, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        af_case c;
        af_case_default(&c);
        c.q_len = 6, c.kv_len = 6;
        c.window_left = cases[k].left, c.window_right = cases[k].right, c.causal = cases[k].causal;
        fill_uniform_pow2(rig_alloc(r, &c));
        int64_t rg[6][2];
        for (int64_t i = 0; i < 6; i++) {
            int64_t lo = cases[k].left < 0 ? 0 : i - cases[k].left;
            int64_t hi = cases[k].right < 0 ? 5 : i + cases[k].right;
            if (cases[k].causal && hi > i) hi = i;
            rg[i][0] = lo < 0 ? 0 : lo;
            rg[i][1] = hi > 5 ? 5 : hi;
        }
        char what[64];
        snprintf(what, sizeof what, "window (%d, %d)%s", cases[k].left, cases[k].right, cases[k].causal ? " causal" : "");
        check_rows(&c, rig_run(r), (const int64_t(*)[2])rg, what);
    }
    /* the window follows the diagonal: bottom-right, Sq = 2, Sk = 6, window (1, 0):
     * d = i + 4: row 0 keys 3..4, row 1 keys 4..5 */
    af_case c;
    af_case_default(&c);
    c.q_len = 2, c.kv_len = 6, c.diag = AF_DIAG_BOTTOM_RIGHT, c.window_left = 1, c.window_right = 0;
    fill_uniform_pow2(rig_alloc(r, &c));
    const int64_t w2[2][2] = {{3, 4}, {4, 5}};
    check_rows(&c, rig_run(r), w2, "window on the bottom-right diagonal");
}

static void test_softcap_order(void **state) {
    rig *r = *state;
    /* scale 2, cap 1, additive mask +1 on key 1: q = 1, k = (0, 0.25)
     *   key 0: 2 * 0 = 0     -> tanh(0) = 0          -> + 0 = 0
     *   key 1: 2 * 0.25 = 0.5 -> tanh(0.5)            -> + 1 = 1 + tanh(0.5) = 1.4621...
     * (softcap before scale: 2 tanh(0.25) + 1 = 1.4898...; mask before softcap:
     * tanh(1.5) = 0.905...: all distinguishable) */
    af_case c;
    af_case_default(&c);
    c.kv_len = 2, c.scale_set = true, c.scale = 2.0, c.softcap = 1.0;
    c.amask.present = true, c.amask.dims = AF_MDIM_K, c.amask.dtype = AF_F32;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 ? 0.25 : 0.0);
    FILL(&t->vv, (double)i2);
    FILL(&t->am, i3 ? 1.0 : 0.0);
    const double *o = rig_run(r);
    double s1 = tanh(0.5) + 1.0;
    expect_close(o[0], exp(s1) / (1.0 + exp(s1)), 1e-14, "scale, softcap, then mask", 0, 0, 0, 0);
    /* a large score ends near the cap: scale 2, cap 1, q.k = 3 -> tanh(6) */
    c.amask.present = false;
    c.amask.dims = 0;
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 ? 3.0 : 0.0);
    FILL(&t->vv, (double)i2);
    o = rig_run(r);
    expect_close(o[0], exp(tanh(6.0)) / (1.0 + exp(tanh(6.0))), 1e-14, "capped large score", 0, 0, 0, 0);
    /* softcap 20 with a score of 1000: 20 tanh(50) = 20 (to double precision) */
    c.softcap = 20.0, c.scale = 1.0;
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 ? 1000.0 : 0.0);
    FILL(&t->vv, (double)i2);
    o = rig_run(r);
    double s = 20.0 * tanh(50.0);
    expect_close(o[0], exp(s) / (1.0 + exp(s)), 1e-13, "softcap 20", 0, 0, 0, 0);
}

/* Mask broadcast shapes: Q = 0 makes every score 0, so the weights come from the masks
 * alone; the expected value is computed from a function of the broadcast indices. */
static double amask_fn(size_t b, size_t h, size_t i, size_t j) {
    unsigned k = (unsigned)(b * 7 + h * 5 + i * 3 + j * 2);
    if (k % 4 == 3) return -DINF;
    return 0.25 * (double)(k % 5) - 0.5;
}
static bool bmask_fn(size_t b, size_t h, size_t i, size_t j) { return (b * 7 + h * 5 + i * 3 + j * 2) % 3 != 0; }

static void test_mask_broadcast(void **state) {
    rig *r = *state;
    const uint8_t dims_list[] = {AF_MDIM_Q | AF_MDIM_K, AF_MDIM_B | AF_MDIM_Q | AF_MDIM_K,
                                 AF_MDIM_H | AF_MDIM_Q | AF_MDIM_K, AF_MDIM_K, AF_MDIM_ALL, AF_MDIM_B | AF_MDIM_K,
                                 AF_MDIM_Q};
    for (size_t di = 0; di < sizeof dims_list; di++)
        for (int rank2 = 0; rank2 < 2; rank2++)
            for (int expanded = 0; expanded < 2; expanded++)
                for (int kind = 0; kind < 3; kind++) { /* additive f32, additive f16, bool */
                    uint8_t dims = dims_list[di];
                    if (rank2 && (dims & (AF_MDIM_B | AF_MDIM_H))) continue;
                    af_case c;
                    af_case_default(&c);
                    c.batch = 2, c.q_heads = 4, c.kv_heads = 2, c.q_len = 3, c.kv_len = 4, c.v_head_dim = 2;
                    af_mask_spec *m = kind < 2 ? &c.amask : &c.bmask;
                    m->present = true, m->dims = dims, m->rank2 = rank2, m->expanded = expanded;
                    m->dtype = kind == 0 ? AF_F32 : kind == 1 ? AF_F16 : AF_BOOL;
                    const af_case_tensors *t = rig_alloc(r, &c);
                    FILL(&t->qv, 0.0);
                    FILL(&t->kv, (double)i2 - 1.5);
                    FILL(&t->vv, (double)(i1 * 8 + i2 + 1) * (i3 ? 10.0 : 1.0));
                    const af_view *mv = kind < 2 ? &t->am : &t->bm;
#define BI(x, bit) ((dims & (bit)) ? (x) : 0)
                    if (kind < 2) {
                        FILL(mv, amask_fn(BI(i0, AF_MDIM_B), BI(i1, AF_MDIM_H), BI(i2, AF_MDIM_Q), BI(i3, AF_MDIM_K)));
                    } else {
                        FILL(mv, bmask_fn(BI(i0, AF_MDIM_B), BI(i1, AF_MDIM_H), BI(i2, AF_MDIM_Q), BI(i3, AF_MDIM_K))
                                     ? 1.0
                                     : 0.0);
                    }
                    const double *o = rig_run(r);
                    for (size_t b = 0; b < 2; b++)
                        for (size_t h = 0; h < 4; h++)
                            for (size_t i = 0; i < 3; i++) {
                                double w[4], sum = 0.0, mx = -DINF;
                                for (size_t j = 0; j < 4; j++) {
                                    double a = kind < 2 ? amask_fn(BI(b, AF_MDIM_B), BI(h, AF_MDIM_H), BI(i, AF_MDIM_Q),
                                                                   BI(j, AF_MDIM_K))
                                               : bmask_fn(BI(b, AF_MDIM_B), BI(h, AF_MDIM_H), BI(i, AF_MDIM_Q),
                                                          BI(j, AF_MDIM_K))
                                                   ? 0.0
                                                   : -DINF;
                                    w[j] = a;
                                    if (a > mx) mx = a;
                                }
                                for (size_t j = 0; j < 4; j++) sum += w[j] = mx == -DINF ? 0.0 : exp(w[j] - mx);
                                for (size_t d = 0; d < 2; d++) {
                                    double want = 0.0;
                                    for (size_t j = 0; j < 4; j++)
                                        if (w[j] > 0.0) want += w[j] / sum * (double)((h / 2) * 8 + j + 1) * (d ? 10.0 : 1.0);
                                    double got = o[oidx(&c, b, h, i, d)];
                                    if (!(fabs(got - want) <= 1e-13 * fabs(want)) || isnan(got))
                                        fail_msg("mask dims 0x%x rank2 %d expanded %d kind %d (%zu,%zu,%zu,%zu): got "
                                                 "%.17g, expected %.17g",
                                                 dims, rank2, expanded, kind, b, h, i, d, got, want);
                                }
                            }
#undef BI
                }
}

static void test_fully_masked_rows(void **state) {
    rig *r = *state;
    /* row 1 all-false in a bool mask, row 2 all -inf in an additive mask: both exactly 0,
     * not NaN; row 0 attends normally. Row 3: additive finfo.min everywhere is a finite
     * mask, not a masked row: uniform weights. */
    af_case c;
    af_case_default(&c);
    c.q_len = 4, c.kv_len = 3, c.v_head_dim = 2;
    c.bmask.present = true, c.bmask.dims = AF_MDIM_Q | AF_MDIM_K, c.bmask.dtype = AF_BOOL;
    c.amask.present = true, c.amask.dims = AF_MDIM_Q | AF_MDIM_K, c.amask.dtype = AF_F32;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, 0.0);
    FILL(&t->vv, (double)(i2 + 1));
    FILL(&t->bm, i2 == 1 ? 0.0 : 1.0);
    FILL(&t->am, i2 == 2 ? -DINF : i2 == 3 ? -0x1.fffffep127 : 0.0);
    const double *o = rig_run(r);
    for (size_t d = 0; d < 2; d++) {
        expect_close(o[oidx(&c, 0, 0, 0, d)], 2.0, 1e-15, "live row", 0, 0, 0, d);
        if (o[oidx(&c, 0, 0, 1, d)] != 0.0) fail_msg("all-false bool row gave %.17g", o[oidx(&c, 0, 0, 1, d)]);
        if (o[oidx(&c, 0, 0, 2, d)] != 0.0) fail_msg("all -inf additive row gave %.17g", o[oidx(&c, 0, 0, 2, d)]);
        expect_close(o[oidx(&c, 0, 0, 3, d)], 2.0, 1e-15, "finfo.min row", 0, 0, 3, d);
    }
}

static void test_nan_in_masked_keys(void **state) {
    rig *r = *state;
    /* key padding 2 of 3, a bool mask dropping key 0 for row 1, causal hiding key 2 from
     * row 0 of batch 1: NaN/Inf stored at those keys must not reach the outputs */
    af_case c;
    af_case_default(&c);
    c.batch = 2, c.q_len = 2, c.kv_len = 3, c.head_dim = 2, c.v_head_dim = 2;
    c.key_padding = true, c.kv_valid[0] = 2, c.kv_valid[1] = 3;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 == 2 && i0 == 0 ? DNAN : 0.0);
    FILL(&t->vv, i2 == 2 && i0 == 0 ? (i3 ? DINF : DNAN) : (double)(i2 + 1));
    const double *o = rig_run(r);
    for (size_t i = 0; i < 2; i++)
        for (size_t d = 0; d < 2; d++) {
            expect_close(o[oidx(&c, 0, 0, i, d)], 1.5, 1e-15, "NaN at a padded key", 0, 0, i, d);
            expect_close(o[oidx(&c, 1, 0, i, d)], 2.0, 1e-15, "batch 1", 1, 0, i, d);
        }
    /* causal: key 2 holds NaN in K and V; row 0 (keys 0) and row 1 (keys 0..1) stay finite,
     * row 2 sees it and is NaN */
    af_case_default(&c);
    c.q_len = 3, c.kv_len = 3, c.causal = true;
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, i2 == 2 ? DNAN : 0.0);
    FILL(&t->vv, i2 == 2 ? DNAN : (double)(i2 + 1));
    o = rig_run(r);
    expect_close(o[0], 1.0, 0.0, "causal row 0", 0, 0, 0, 0);
    expect_close(o[1], 1.5, 1e-15, "causal row 1", 0, 0, 1, 0);
    if (!isnan(o[2])) fail_msg("a live NaN key must give NaN, got %.17g", o[2]);
    /* bool-masked key with an Inf value; a live Inf value gives Inf */
    af_case_default(&c);
    c.q_len = 2, c.kv_len = 2;
    c.bmask.present = true, c.bmask.dims = AF_MDIM_Q | AF_MDIM_K, c.bmask.dtype = AF_BOOL;
    t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, 0.0);
    FILL(&t->vv, i2 == 1 ? DINF : 3.0);
    FILL(&t->bm, i2 == 0 && i3 == 1 ? 0.0 : 1.0); /* row 0 cannot see key 1 */
    o = rig_run(r);
    expect_close(o[0], 3.0, 0.0, "Inf at a bool-masked key", 0, 0, 0, 0);
    if (!(isinf(o[1]) && o[1] > 0)) fail_msg("a live +Inf value must give +Inf, got %.17g", o[1]);
}

static void test_dropout(void **state) {
    rig *r = *state;
    af_case c;
    af_case_default(&c);
    c.q_heads = 2, c.kv_heads = 2, c.q_len = 3, c.kv_len = 8, c.head_dim = 2, c.v_head_dim = 3;
    c.dropout_seed = 0x0123456789abcdefull;
    double q[2][3][2], k[2][8][2], v[2][8][3];
    uint64_t lcg = 12345;
#define RND() ((lcg = lcg * 6364136223846793005ull + 1442695040888963407ull), (double)(lcg >> 40) / 16777216.0 - 0.5)
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < 3; i++)
            for (int d = 0; d < 2; d++) q[h][i][d] = (double)(float)(4.0 * RND());
        for (int j = 0; j < 8; j++) {
            for (int d = 0; d < 2; d++) k[h][j][d] = (double)(float)(4.0 * RND());
            for (int d = 0; d < 3; d++) v[h][j][d] = (double)(float)(8.0 * RND());
        }
    }
#undef RND
    const double ps[] = {0.0, 0.5, 1.0, 0.2};
    double base[2 * 3 * 3];
    for (size_t pi = 0; pi < 4; pi++) {
        c.dropout_p = ps[pi];
        const af_case_tensors *t = rig_alloc(r, &c);
        FILL(&t->qv, q[i1][i2][i3]);
        FILL(&t->kv, k[i1][i2][i3]);
        FILL(&t->vv, v[i1][i2][i3]);
        const double *o = rig_run(r);
        if (pi == 0) memcpy(base, o, sizeof base);
        for (size_t h = 0; h < 2; h++)
            for (size_t i = 0; i < 3; i++) {
                /* softmax weights, computed here */
                double w[8], sum = 0.0, mx = -DINF, sc = 1.0 / sqrt(2.0);
                for (int j = 0; j < 8; j++) {
                    w[j] = sc * (q[h][i][0] * k[h][j][0] + q[h][i][1] * k[h][j][1]);
                    if (w[j] > mx) mx = w[j];
                }
                for (int j = 0; j < 8; j++) sum += w[j] = exp(w[j] - mx);
                for (size_t d = 0; d < 3; d++) {
                    double want = 0.0;
                    for (uint32_t j = 0; j < 8; j++) {
                        /* keep <=> u(seed, b, h, i, j) >= p; kept weights / (1 - p) */
                        bool keep = (uint64_t)af_dropout_word(c.dropout_seed, 0, (uint32_t)h, (uint32_t)i, j) >=
                                    af_dropout_threshold(ps[pi]);
                        if (keep && ps[pi] < 1.0) want += w[j] / sum / (1.0 - ps[pi]) * v[h][j][d];
                    }
                    double got = o[oidx(&c, 0, h, i, d)];
                    if (ps[pi] == 1.0 && got != 0.0) fail_msg("p = 1 must give 0, got %.17g", got);
                    if (!(fabs(got - want) <= 1e-12 * (fabs(want) + 1.0))) /* |v| <= 4 */
                        fail_msg("dropout p=%g (%zu,%zu,%zu): got %.17g, expected %.17g", ps[pi], h, i, d, got, want);
                }
            }
        if (pi == 3) {
            /* p = 0.2 with a seed drops some of these 48 weights and keeps most */
            size_t dropped = 0;
            for (uint32_t h = 0; h < 2; h++)
                for (uint32_t i = 0; i < 3; i++)
                    for (uint32_t j = 0; j < 8; j++)
                        dropped += af_dropout_word(c.dropout_seed, 0, h, i, j) < af_dropout_threshold(0.2);
            assert_true(dropped > 0 && dropped < 24);
        }
    }
    /* p = 0 (with a seed) is exactly no dropout */
    c.dropout_p = 0.0, c.dropout_seed = 0;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, q[i1][i2][i3]);
    FILL(&t->kv, k[i1][i2][i3]);
    FILL(&t->vv, v[i1][i2][i3]);
    const double *o = rig_run(r);
    assert_memory_equal(o, base, sizeof base);
}

/* Dropped weights are exactly 0 (docs/design.md: kept weights are divided by 1 - p, p = 1
 * gives zeros), also when the softmax row itself is NaN: a +Inf score (exp(inf - inf))
 * or a NaN score. With every live key dropped the output is 0; with p = 0 it is NaN. */
static void test_dropout_nan_rows(void **state) {
    rig *r = *state;
    for (int kind = 0; kind < 2; kind++) { /* key 1 holds +Inf (score +Inf) or NaN (score NaN) */
        for (int pi = 0; pi < 2; pi++) {
            af_case c;
            af_case_default(&c);
            c.kv_len = 2, c.v_head_dim = 2, c.q_len = 3;
            c.dropout_p = pi ? 1.0 : 0.0, c.dropout_seed = 99;
            const af_case_tensors *t = rig_alloc(r, &c);
            FILL(&t->qv, 1.0);
            FILL(&t->kv, i2 == 1 ? (kind ? DNAN : DINF) : 0.5);
            FILL(&t->vv, (double)(i2 + 1));
            const double *o = rig_run(r);
            for (size_t i = 0; i < 3; i++)
                for (size_t d = 0; d < 2; d++) {
                    double got = o[oidx(&c, 0, 0, i, d)];
                    if (pi ? got != 0.0 : !isnan(got))
                        fail_msg("%s score, p = %g, (%zu, %zu): got %.17g, expected %s", kind ? "NaN" : "+Inf",
                                 c.dropout_p, i, d, got, pi ? "0" : "NaN");
                }
        }
    }
    /* p = 0.9 on a single key: rows whose key is dropped are 0, kept ones NaN */
    af_case c;
    af_case_default(&c);
    c.batch = 16, c.q_len = 5, c.dropout_p = 0.9, c.dropout_seed = 0xafafafafull;
    const af_case_tensors *t = rig_alloc(r, &c);
    FILL(&t->qv, 1.0);
    FILL(&t->kv, DINF);
    FILL(&t->vv, 2.0);
    const double *o = rig_run(r);
    size_t dropped = 0;
    for (uint32_t b = 0; b < 16; b++)
        for (uint32_t i = 0; i < 5; i++) {
            bool keep = (uint64_t)af_dropout_word(c.dropout_seed, b, 0, i, 0) >= af_dropout_threshold(0.9);
            double got = o[oidx(&c, b, 0, i, 0)];
            dropped += !keep;
            if (keep ? !isnan(got) : got != 0.0)
                fail_msg("p = 0.9, +Inf score, (%u, %u) %s: got %.17g", b, i, keep ? "kept" : "dropped", got);
        }
    assert_true(dropped > 0);
}

/* --- generated cases against the mini-reference ------------------------------------------ */

static int classify(double x) { return isnan(x) ? 1 : isinf(x) ? (x > 0 ? 2 : 3) : 0; }

static void test_generated_vs_mini(void **state) {
    rig *r = *state;
    af_rng g;
    af_rng_init(&g, 31337, 0);
    size_t n = (size_t)(3000 * test_scale());
    if (n < 50) n = 50;
    size_t compared = 0;
    for (size_t t_ = 0; t_ < n; t_++) {
        af_case c;
        af_case_generate(&c, &g, (size_t)8 << 20, 3e5);
        af_error err = {0};
        if (af_inputs_generate(r->in, &c, &err) != AF_OK) fail_msg("generate: %s", err.msg);
        const af_case_tensors *t = af_inputs_get(r->in);
        const double *o = rig_run(r);
        size_t ne = (size_t)c.batch * c.q_heads * c.q_len * c.v_head_dim;
        mini_out mo = {malloc(ne * sizeof(double)), malloc(ne * sizeof(double))};
        mini_ref(t, &mo);
        for (size_t e = 0; e < ne; e++) {
            int cg = classify(o[e]), cw = classify(mo.out[e]);
            bool ok = cg == cw && (cg != 0 || fabs(o[e] - mo.out[e]) <= mo.tol[e]);
            if (!ok) {
                char *j = af_case_to_json(&c);
                print_error("case %zu:\n%s\n", t_, j);
                free(j);
                fail_msg("element %zu: ref %.17g, mini-reference %.17g (tolerance %.3g)", e, o[e], mo.out[e], mo.tol[e]);
            }
            compared++;
        }
        free(mo.out);
        free(mo.tol);
    }
    assert_true(compared > n);
}

/* The reference reads values, not layouts: the same values in another layout, perm, pad
 * or broadcast give the bit-identical output. */
static void test_layout_invariance(void **state) {
    rig *r = *state;
    af_inputs *other = af_inputs_create();
    af_rng g;
    af_rng_init(&g, 4242, 0);
    double *first = NULL;
    for (int k = 0; k < 200; k++) {
        af_case c;
        af_case_generate(&c, &g, (size_t)4 << 20, 2e5);
        if (af_case_is_packed(&c)) continue;
        af_error err = {0};
        assert_int_equal(af_inputs_generate(r->in, &c, &err), AF_OK);
        size_t ne = (size_t)c.batch * c.q_heads * c.q_len * c.v_head_dim;
        first = realloc(first, ne * sizeof *first);
        memcpy(first, rig_run(r), ne * sizeof *first);
        af_case d = c;
        for (int w = 0; w < 3; w++) {
            d.t[w].layout = (af_layout)((c.t[w].layout + 1 + (unsigned)k) % AF_LAYOUT_FIRST_PACKED);
            d.t[w].perm = (uint8_t)(k % 6);
            d.t[w].pad = (uint8_t)(k % 3);
            d.t[w].bcast = AF_BCAST_NONE;
        }
        assert_int_equal(af_inputs_alloc(other, &d, &err), AF_OK);
        const af_case_tensors *src = af_inputs_get(r->in), *dst = af_inputs_get(other);
        const af_view *sv[3] = {&src->qv, &src->kv, &src->vv}, *dv[3] = {&dst->qv, &dst->kv, &dst->vv};
        for (int w = 0; w < 3; w++) FILL(dv[w], af_view_get(sv[w], i0, i1, i2, i3));
        if (c.amask.present) FILL(&dst->am, af_view_get(&src->am, i0, i1, i2, i3));
        if (c.bmask.present) FILL(&dst->bm, af_view_get(&src->bm, i0, i1, i2, i3));
        af_tensor out;
        af_backend_out_shape(r->ref, &d, &out);
        double *o2 = malloc(ne * sizeof *o2);
        out.data = o2;
        assert_int_equal(af_backend_run(r->ref, dst, &out, &err), AF_OK);
        for (size_t e = 0; e < ne; e++)
            if (memcmp(&first[e], &o2[e], sizeof(double)) && !(isnan(first[e]) && isnan(o2[e])))
                fail_msg("layout changed the reference output at %zu: %.17g vs %.17g", e, first[e], o2[e]);
        free(o2);
    }
    free(first);
    af_inputs_destroy(other);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_single_key, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_two_keys_weights, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_gqa_mapping, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_default_vs_explicit_scale, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_causal_alignments, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_explicit_diagonal, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_key_padding, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_sliding_window, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_softcap_order, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_mask_broadcast, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_fully_masked_rows, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_nan_in_masked_keys, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_dropout, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_dropout_nan_rows, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_generated_vs_mini, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(test_layout_invariance, rig_setup, rig_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
