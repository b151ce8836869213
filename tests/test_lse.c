/* test_lse.c - the softmax statistics (LSE) end to end on the C side: the reference's
 * against hand values and plain loops written here (sharing no code with ref.c), the
 * oracle's judgement of the built-in backends and of mutant:lse_base2, and a bundle holding
 * them (written by an executor, read back; a hostile statistics file named in the error). */
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
#include <unistd.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/case.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/oracle.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

/* The statistics of backend `name` on the tensors t (F64 room; dtype as it wrote them). */
static af_tensor run_lse(const char *name, const af_case_tensors *t, double *outbuf, double *lsebuf) {
    af_backend *be = NULL;
    af_error err = {0};
    if (af_backend_open(name, &be, &err) != AF_OK) fail_msg("open %s: %s", name, err.msg);
    af_tensor out, lse;
    af_backend_out_shape(be, t->c, &out);
    out.data = outbuf;
    af_backend_lse_shape(t->c, &lse);
    lse.data = lsebuf;
    if (af_backend_run_lse(be, t, &out, &lse, &err) != AF_OK) fail_msg("%s: %s", name, err.msg);
    af_backend_close(be);
    return lse;
}

static void near(double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) fail_msg("got %.17g, want %.17g (within %g)", got, want, tol);
}

static double lse_at(const af_tensor *l, size_t r) {
    return l->dtype == AF_F32 ? (double)((const float *)l->data)[r] : ((const double *)l->data)[r];
}

/* Q [1,1,2,1] = (1, 1), K [1,1,3,1] = (0, ln 2, ln 3), scale 1: row 0 sees every key,
 * log(1 + 2 + 3) = ln 6; with causal (bottom-right, Sq 2 < Sk 3) row 0 sees keys 0, 1:
 * ln 3, row 1 all three: ln 6. */
static void hand_case(af_case *c, bool causal, double softcap) {
    af_case_default(c);
    c->batch = 1, c->q_heads = 1, c->kv_heads = 1, c->q_len = 2, c->kv_len = 3, c->head_dim = 1, c->v_head_dim = 1;
    c->scale_set = true;
    c->scale = 1.0;
    c->causal = causal;
    c->softcap = softcap;
    c->diag = AF_DIAG_BOTTOM_RIGHT;
}

static void fill_hand(const af_case_tensors *t) {
    for (size_t i = 0; i < 2; i++) af_view_set(&t->qv, 0, 0, i, 0, 1.0);
    const double k[3] = {0.0, log(2.0), log(3.0)};
    for (size_t j = 0; j < 3; j++) af_view_set(&t->kv, 0, 0, j, 0, k[j]);
    for (size_t j = 0; j < 3; j++) af_view_set(&t->vv, 0, 0, j, 0, (double)j);
}

static void test_ref_lse_hand(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    double out[8], lbuf[8];
    for (int causal = 0; causal < 2; causal++) {
        for (int capped = 0; capped < 2; capped++) { /* the exact path folds the scale; a softcap does not */
            af_case c;
            hand_case(&c, causal, capped ? 1e4 : 0.0);
            assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
            const af_case_tensors *t = af_inputs_get(in);
            fill_hand(t);
            af_tensor l = run_lse("ref", t, out, lbuf);
            assert_int_equal(l.dtype, AF_F64);
            /* f32 inputs: ln 2, ln 3 stored in f32, so the sum is 1 + 2(1+e) + 3(1+e') */
            double k1 = (double)(float)log(2.0), k2 = (double)(float)log(3.0);
            double cap = capped ? 1e4 : 0.0;
            double s1 = capped ? cap * tanh(k1 / cap) : k1, s2 = capped ? cap * tanh(k2 / cap) : k2;
            double all = log(1.0 + exp(s1) + exp(s2)), two = log(1.0 + exp(s1));
            near(lse_at(&l, 0), causal ? two : all, 1e-14);
            near(lse_at(&l, 1), all, 1e-14);
            near(lse_at(&l, 1), log(6.0), 1e-6); /* the hand value, f32 inputs */
        }
    }
    /* a fully masked row: causal with Sq 4 > Sk 3 leaves row 0 no key: -inf */
    af_case c;
    hand_case(&c, true, 0.0);
    c.q_len = 4;
    assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    for (size_t i = 0; i < 4; i++) af_view_set(&t->qv, 0, 0, i, 0, 1.0);
    for (size_t j = 0; j < 3; j++) af_view_set(&t->kv, 0, 0, j, 0, 0.0), af_view_set(&t->vv, 0, 0, j, 0, 1.0);
    af_tensor l = run_lse("ref", t, out, lbuf);
    assert_true(lse_at(&l, 0) == -HUGE_VAL);
    near(lse_at(&l, 1), 0.0, 1e-15);      /* one key of score 0: log 1 */
    near(lse_at(&l, 3), log(3.0), 1e-15); /* three */
    /* a NaN score: NaN statistics, as its weights */
    af_view_set(&t->kv, 0, 0, 0, 0, (double)NAN);
    l = run_lse("ref", t, out, lbuf);
    assert_true(isnan(lse_at(&l, 3)));
    af_inputs_destroy(in);
}

/* Plain loops over the canonical views: log sum_j exp(scale q.k) in long double, for a
 * case with no mask, softcap, dropout or serving form. */
static double plain_lse(const af_case_tensors *t, size_t b, size_t h, size_t i) {
    const af_case *c = t->c;
    size_t g = h / (c->q_heads / c->kv_heads);
    double scale = c->scale_set ? c->scale : 1.0 / sqrt((double)c->head_dim);
    long double m = -HUGE_VALL, sum = 0.0L;
    long double s[4096];
    for (size_t j = 0; j < c->kv_len; j++) {
        long double d = 0.0L;
        for (size_t e = 0; e < c->head_dim; e++)
            d += (long double)af_view_get(&t->qv, b, h, i, e) * (long double)af_view_get(&t->kv, b, g, j, e);
        s[j] = d * (long double)scale;
        if (s[j] > m) m = s[j];
    }
    bool nan = false;
    for (size_t j = 0; j < c->kv_len; j++) nan |= isnan(s[j]);
    if (nan) return (double)NAN;
    if (m == HUGE_VALL) return HUGE_VAL;           /* log sum exp with a +Inf term */
    if (m == -HUGE_VALL) return -HUGE_VAL;         /* every score -inf: no key */
    for (size_t j = 0; j < c->kv_len; j++) sum += expl(s[j] - m);
    return (double)(m + logl(sum));
}

static void test_ref_lse_plain_loops(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    af_rng r;
    af_rng_init(&r, 35, 3);
    size_t checked = 0, n = scaled_at_least(400, 60);
    for (size_t k = 0; k < n; k++) {
        af_case c;
        af_case_generate(&c, &r, 1u << 20, 2e6);
        if (c.amask.present || c.bmask.present || c.causal || c.key_padding || c.window_left >= 0 ||
            c.window_right >= 0 || c.softcap > 0.0 || c.dropout_p > 0.0 || c.serve.forms || c.kv_len > 4096 ||
            c.fp8.fmt != AF_FP8_NONE)
            continue;
        af_error err = {0};
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
        const double *lse = af_oracle_ref_lse(o);
        assert_non_null(lse);
        for (size_t b = 0, row = 0; b < c.batch; b++)
            for (size_t h = 0; h < c.q_heads; h++)
                for (size_t i = 0; i < c.q_len; i++, row++) {
                    double want = plain_lse(t, b, h, i);
                    if (!isfinite(want)) { /* specials: the classes agree */
                        if (isnan(want) ? !isnan(lse[row]) : lse[row] != want)
                            fail_msg("case %zu row %zu: ref lse %g, plain loops %g", k, row, lse[row], want);
                        continue;
                    }
                    if (!(fabs(lse[row] - want) <= 1e-10 * (1.0 + fabs(want))))
                        fail_msg("case %zu row %zu: ref lse %.17g, plain loops %.17g", k, row, lse[row], want);
                }
        checked++;
    }
    assert_true(checked >= 10);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
}

/* explicit and fused return statistics the oracle passes on generated cases; the mutant's
 * (base 2) fail; hand-bent ones fail by their class or by log 2 */
static void test_oracle_lse(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    af_rng r;
    af_rng_init(&r, 36, 1);
    size_t n = scaled_at_least(300, 50), mutant_found = 0, judged = 0;
    double *out = NULL, *lbuf = NULL;
    for (size_t k = 0; k < n; k++) {
        af_case c;
        af_case_generate(&c, &r, 1u << 20, 2e6);
        af_error err = {0};
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
        size_t rows = (size_t)c.batch * c.q_heads * c.q_len;
        out = realloc(out, rows * c.v_head_dim * sizeof *out);
        lbuf = realloc(lbuf, rows * sizeof *lbuf);
        const char *honest[] = {"explicit", "fused", "ref"};
        for (int b = 0; b < 3; b++) {
            af_tensor l = run_lse(honest[b], t, out, lbuf);
            assert_int_equal(l.ndim, 3);
            af_result res;
            assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
            if (res.kind != AF_KIND_OK)
                fail_msg("case %zu: %s's statistics judged %s: got %.9g want %.9g (worst %g x tol)", k, honest[b],
                         af_kind_names[res.kind], res.m.worst_out, res.m.worst_ref, res.m.worst_ratio);
            judged++;
        }
        af_tensor l = run_lse("mutant:lse_base2", t, out, lbuf);
        af_result res;
        assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
        mutant_found += res.kind == AF_KIND_LSE_DIVERGE;
    }
    assert_true(judged == 3 * n);
    assert_true(mutant_found * 2 > n); /* only rows with lse 0, -inf or NaN hide it */

    /* hand-bent statistics on the hand case */
    af_case c;
    hand_case(&c, true, 0.0);
    c.q_len = 4;
    af_error err = {0};
    assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    fill_hand(t);
    for (size_t i = 0; i < 4; i++) af_view_set(&t->qv, 0, 0, i, 0, 1.0);
    assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
    const double *ref = af_oracle_ref_lse(o);
    double bent[4];
    af_tensor l;
    af_backend_lse_shape(&c, &l);
    l.data = bent;
    af_result res;
    memcpy(bent, ref, sizeof bent);
    bent[3] *= 1.0 + 1e-7; /* within the f32 floor */
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    memcpy(bent, ref, sizeof bent);
    bent[3] += log(2.0); /* off by log 2 */
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_LSE_DIVERGE);
    assert_int_equal(res.m.n_diverge, 1);
    assert_int_equal(res.m.worst[2], 3);
    memcpy(bent, ref, sizeof bent);
    assert_true(bent[0] == -HUGE_VAL);
    bent[0] = 0.0; /* a finite value where every key is masked */
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_LSE_DIVERGE);
    assert_int_equal(res.m.n_fail_masked, 1);
    bent[0] = HUGE_VAL; /* FlashAttention-2's +inf for an empty row is not -inf either */
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_LSE_DIVERGE);
    af_conventions conv = {0};
    conv.masked_rows[AF_F32] = AF_ROWS_NAN; /* ... unless that row is another convention's */
    assert_int_equal(af_oracle_compare_lse(o, &l, &conv, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    memcpy(bent, ref, sizeof bent);
    bent[2] = (double)NAN; /* NaN where the reference is finite */
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_LSE_DIVERGE);
    assert_int_equal(res.m.n_nan, 1);
    /* another shape is a caller's error */
    l.ne[2] = 3;
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_ERR_INVALID);
    free(out);
    free(lbuf);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
}

/* denormals "flush": Q = (-1e-39, 0) against keys (Inf, 0) and (0, 0). Unflushed, key 0's
 * score is -Inf and the row's statistics log(e^0) = 0; with the subnormal read as 0 it is
 * 0 * Inf = NaN. A backend that declares flushing may give either; one that does not, only 0. */
static void test_oracle_lse_flush(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    af_case c;
    af_case_default(&c);
    c.batch = 1, c.q_heads = 1, c.kv_heads = 1, c.q_len = 1, c.kv_len = 2, c.head_dim = 2, c.v_head_dim = 1;
    c.scale_set = true;
    c.scale = 1.0;
    af_error err = {0};
    assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    af_view_set(&t->qv, 0, 0, 0, 0, -1e-39);
    af_view_set(&t->qv, 0, 0, 0, 1, 0.0);
    af_view_set(&t->kv, 0, 0, 0, 0, (double)INFINITY);
    af_view_set(&t->kv, 0, 0, 0, 1, 0.0);
    af_view_set(&t->kv, 0, 0, 1, 0, 0.0);
    af_view_set(&t->kv, 0, 0, 1, 1, 0.0);
    af_view_set(&t->vv, 0, 0, 0, 0, 1.0);
    af_view_set(&t->vv, 0, 0, 1, 0, 2.0);
    assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
    near(af_oracle_ref_lse(o)[0], 0.0, 0.0);
    double got[1];
    af_tensor l;
    af_backend_lse_shape(&c, &l);
    l.data = got;
    af_conventions flush = {0};
    flush.denormals_flush = 1u << c.dtype;
    af_result res;
    got[0] = (double)NAN;
    assert_int_equal(af_oracle_compare_lse(o, &l, NULL, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_LSE_DIVERGE);
    assert_int_equal(af_oracle_compare_lse(o, &l, &flush, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    got[0] = 0.0; /* the unflushed answer is right under "flush" too */
    assert_int_equal(af_oracle_compare_lse(o, &l, &flush, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_OK);
    got[0] = 1.0; /* neither */
    assert_int_equal(af_oracle_compare_lse(o, &l, &flush, &res, &err), AF_OK);
    assert_int_equal(res.kind, AF_KIND_LSE_DIVERGE);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
}

/* An executor finds mutant:lse_base2 on a generated case, the finding is on "lse"; its
 * bundle holds ref_lse and lse.<backend>, which read back as the reference computes them
 * again and as the mutant returned them (base 2); a wrong-shaped file is refused by name. */
static void test_bundle_lse(void **state) {
    (void)state;
    char dir[] = "/tmp/af_test_lse_XXXXXX";
    assert_non_null(mkdtemp(dir));
    af_exec_config cfg;
    af_exec_config_default(&cfg);
    cfg.n_pairs = 0;
    for (int k = 0; k < AF_REL_COUNT; k++) cfg.relations[k] = false;
    cfg.backends[0] = "mutant:lse_base2";
    cfg.n_backends = 1;
    af_error err = {0};
    af_exec *x = af_exec_create(&cfg, &err);
    assert_non_null(x);
    af_rng r;
    af_rng_init(&r, 37, 0);
    af_case c;
    size_t tries = 0;
    do {
        af_case_generate(&c, &r, 1u << 20, 2e6);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    } while (af_exec_finding_count(x) == 0 && ++tries < 50);
    assert_int_equal(af_exec_finding_count(x), 1);
    const af_finding *f = af_exec_finding(x, 0);
    assert_int_equal(f->kind, AF_KIND_LSE_DIVERGE);
    assert_string_equal(f->tensor, "lse");
    char path[4096];
    assert_int_equal(af_exec_write_bundle(x, 0, dir, path, sizeof path, &err), AF_OK);
    af_bundle *b = NULL;
    assert_int_equal(af_bundle_read(path, &b, &err), AF_OK);
    assert_string_equal(af_bundle_tensor(b), "lse");
    const af_bundle_record *rec = af_bundle_record_at(b, 0);
    assert_true(rec->has_lse && rec->has_lse_output);
    assert_int_equal(rec->lse_kind, AF_KIND_LSE_DIVERGE);
    assert_int_equal(af_bundle_record_verdict(rec), AF_KIND_LSE_DIVERGE);
    double *ref = NULL, *got = NULL;
    assert_int_equal(af_bundle_load_lse(b, "ref", &ref, &err), AF_OK);
    assert_int_equal(af_bundle_load_lse(b, "mutant:lse_base2", &got, &err), AF_OK);
    assert_non_null(ref);
    assert_non_null(got);
    /* the reference again, on the bundle's case (its seeds) */
    const af_case *bc = af_bundle_case(b);
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, bc, &err), AF_OK);
    size_t rows = (size_t)bc->batch * bc->q_heads * bc->q_len;
    double *out = malloc(rows * bc->v_head_dim * sizeof *out), *again = malloc(rows * sizeof *again);
    af_tensor l = run_lse("ref", af_inputs_get(in), out, again);
    (void)l;
    for (size_t k = 0; k < rows; k++) {
        if (isnan(again[k])) {
            assert_true(isnan(ref[k]) && isnan(got[k]));
            continue;
        }
        assert_true(ref[k] == again[k]);
        assert_true(got[k] == again[k] * (1.0 / M_LN2) || (isinf(again[k]) && got[k] == again[k]));
    }
    /* hostile: the backend's file replaced by a [B, Hq, Sq + 1] array */
    char file[4200];
    snprintf(file, sizeof file, "%s/lse.mutant_lse_base2.npy.zst", path);
    af_array a = {.dtype = AF_F64, .ndim = 3, .shape = {bc->batch, bc->q_heads, (size_t)bc->q_len + 1}};
    double *junk = calloc(rows + (size_t)bc->batch * bc->q_heads, sizeof *junk);
    a.data = junk;
    unlink(file);
    assert_int_equal(af_npy_write_zst(file, &a, &err), AF_OK);
    double *bad = NULL;
    assert_int_equal(af_bundle_load_lse(b, "mutant:lse_base2", &bad, &err), AF_ERR_FORMAT);
    assert_null(bad);
    assert_non_null(strstr(err.msg, "lse.mutant_lse_base2.npy.zst"));
    assert_non_null(strstr(err.msg, "shape"));
    free(junk);
    free(out);
    free(again);
    af_free(ref); /* the bundle reader's (af_malloc) */
    af_free(got);
    af_inputs_destroy(in);
    af_bundle_free(b);
    af_exec_destroy(x);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_lse_hand),
        cmocka_unit_test(test_ref_lse_plain_loops),
        cmocka_unit_test(test_oracle_lse),
        cmocka_unit_test(test_oracle_lse_flush),
        cmocka_unit_test(test_bundle_lse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
