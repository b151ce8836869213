/* test_backends.c - the explicit and fused backends against the float64 reference
 * through the oracle on generated cases (zero findings expected), planted wrong outputs
 * (each must be classified as its kind), capabilities, backend names (the prefix table routes
 * plugin:, worker: and target:, anything else goes to the registry), and the seeded-bug
 * mutants: each found by generated cases, silent where its bug cannot show, loud where it
 * must. */
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
#include <time.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/oracle.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"
#include "attnfuzz/worker.h"

#define DNAN ((double)NAN)
#define DINF ((double)INFINITY)

static size_t scaled(size_t n, size_t floor_n) {
    double x = (double)n * test_scale();
    return x < (double)floor_n ? floor_n : (size_t)x;
}

/* An output buffer sized for a backend and case. */
typedef struct outbuf {
    af_tensor t;
    void *mem;
    size_t cap;
    void *lse; /* the statistics of a run_lse */
} outbuf;

static void out_prepare(outbuf *o, const af_backend *be, const af_case *c) {
    af_backend_out_shape(be, c, &o->t);
    size_t bytes = af_tensor_numel(&o->t) * af_dtype_size(o->t.dtype);
    if (bytes > o->cap) {
        free(o->mem);
        o->mem = malloc(bytes);
        o->cap = bytes;
    }
    o->t.data = o->mem;
}

static af_backend *open_backend(const char *name) {
    af_backend *be = NULL;
    af_error err = {0};
    if (af_backend_open(name, &be, &err) != AF_OK) fail_msg("open %s: %s", name, err.msg);
    return be;
}

static void print_case(const af_case *c) {
    char *j = af_case_to_json(c);
    print_error("%s\n", j ? j : "(no json)");
    free(j);
}

/* The case JSON on one line (whitespace outside strings dropped). */
static void print_case_line(const char *prefix, const af_case *c) {
    char *j = af_case_to_json(c);
    if (!j) return;
    size_t w = 0;
    for (size_t r = 0; j[r]; r++)
        if (j[r] != '\n' && j[r] != '\t') j[w++] = j[r];
    j[w] = 0;
    print_error("%s %s\n", prefix, j);
    free(j);
}

static void print_result(const char *who, const af_result *r) {
    print_error("%s: %s max_abs %.3g max_rel %.3g worst_ratio %.3g at (%zu,%zu,%zu,%zu) out %.9g ref %.9g "
                "(atol %.3g rtol %.3g%s) nan %zu inf %zu masked_nan %zu diverge %zu unstable %zu\n",
                who, af_kind_names[r->kind], r->m.max_abs, r->m.max_rel, r->m.worst_ratio, r->m.worst[0],
                r->m.worst[1], r->m.worst[2], r->m.worst[3], r->m.worst_out, r->m.worst_ref, r->tol.atol, r->tol.rtol,
                r->tol.honest ? ", honest" : "", r->m.n_nan, r->m.n_inf, r->m.n_masked_row_nan, r->m.n_diverge,
                r->m.n_unstable);
}

/* --- explicit and fused against ref on generated cases ------------------------------- */

/* n generated cases (a share of them in serving forms) through explicit and fused: no
 * finding against the reference. */
static void generated_zero_findings(double serving, size_t n, uint64_t seed) {
    af_backend *be[2] = {open_backend("explicit"), open_backend("fused")};
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    outbuf ob = {0};
    af_rng r;
    af_rng_init(&r, seed, 0);
    size_t findings[2][AF_KIND_COUNT] = {{0}}, printed = 0, unsupported = 0;
    clock_t t0 = clock();
    af_gen_opts go = {0, 2e6, 0.0, serving, 0.0};
    for (size_t k = 0; k < n; k++) {
        af_case c;
        af_case_generate_opts(&c, &r, &go);
        af_error err = {0};
        if (af_inputs_generate(in, &c, &err) != AF_OK) fail_msg("inputs: %s", err.msg);
        const af_case_tensors *t = af_inputs_get(in);
        if (af_oracle_prepare(o, t, &err) != AF_OK) fail_msg("prepare: %s", err.msg);
        for (int b = 0; b < 2; b++) {
            char why[64];
            if (!af_backend_supports(be[b], &c, why, sizeof why)) {
                unsupported++;
                continue;
            }
            out_prepare(&ob, be[b], &c);
            af_result res;
            af_kind kind;
            if (af_backend_run(be[b], t, &ob.t, &err) != AF_OK) {
                kind = AF_KIND_ERROR;
            } else {
                if (af_oracle_compare(o, &ob.t, &res, &err) != AF_OK) fail_msg("compare: %s", err.msg);
                kind = res.kind;
            }
            if (kind == AF_KIND_OK) continue;
            findings[b][kind]++;
            if (printed >= 4 && printed < 40) {
                printed++;
                char prefix[96];
                snprintf(prefix, sizeof prefix, "--- case %zu: %s %s:", k, af_backend_name(be[b]), af_kind_names[kind]);
                print_case_line(prefix, &c);
            }
            if (printed < 4) {
                printed++;
                print_error("--- case %zu: %s\n", k, af_backend_name(be[b]));
                print_case(&c);
                if (kind == AF_KIND_ERROR) {
                    print_error("error: %s\n", err.msg);
                } else {
                    print_result(af_backend_name(be[b]), &res);
                }
            }
        }
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    print_message("%zu cases in %.1f s\n", n, secs);
    size_t total = 0;
    for (int b = 0; b < 2; b++)
        for (int kd = 1; kd < AF_KIND_COUNT; kd++) {
            if (findings[b][kd])
                print_error("%s: %zu findings of kind %s\n", af_backend_name(be[b]), findings[b][kd], af_kind_names[kd]);
            total += findings[b][kd];
        }
    assert_int_equal(unsupported, 0); /* both declare every capability */
    free(ob.mem);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    af_backend_close(be[0]);
    af_backend_close(be[1]);
    if (total) fail_msg("%zu findings in %zu generated cases (expected none)", total, n);
}

static void test_generated_zero_findings(void **state) {
    (void)state;
    generated_zero_findings(0.0, scaled(100000, 200), 20240601);
}

/* Every case in a serving form or a decode shape: fused reads the THD and paged tensors
 * and takes the split-KV path, explicit the padded views. */
static void test_generated_serving_zero_findings(void **state) {
    (void)state;
    generated_zero_findings(1.0, scaled(20000, 200), 20260303);
}

/* --- planted wrong outputs -------------------------------------------------------------- */

static void tame_case(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_heads = 2, c->kv_heads = 2, c->q_len = 5, c->kv_len = 6, c->head_dim = 8, c->v_head_dim = 4;
    for (int t = 0; t < 3; t++) c->t[t].seed = 1000u + (uint32_t)t;
}

typedef struct planted {
    af_inputs *in;
    af_oracle *o;
    af_backend *be;
    outbuf good, bad;
    size_t n;
} planted;

static void planted_setup(planted *p, const af_case *c, const af_oracle_opts *opts) {
    memset(p, 0, sizeof *p);
    p->in = af_inputs_create();
    p->o = af_oracle_create(opts);
    p->be = open_backend("explicit");
    af_error err = {0};
    assert_int_equal(af_inputs_generate(p->in, c, &err), AF_OK);
    assert_int_equal(af_oracle_prepare(p->o, af_inputs_get(p->in), &err), AF_OK);
    out_prepare(&p->good, p->be, c);
    out_prepare(&p->bad, p->be, c);
    assert_int_equal(af_backend_run(p->be, af_inputs_get(p->in), &p->good.t, &err), AF_OK);
    p->n = af_tensor_numel(&p->good.t);
    af_result res;
    assert_int_equal(af_oracle_compare(p->o, &p->good.t, &res, &err), AF_OK);
    if (res.kind != AF_KIND_OK) {
        print_result("explicit", &res);
        fail_msg("the unperturbed output is not ok");
    }
}

static void planted_free(planted *p) {
    free(p->good.mem);
    free(p->bad.mem);
    af_oracle_destroy(p->o);
    af_inputs_destroy(p->in);
    af_backend_close(p->be);
}

static af_kind planted_kind(planted *p, af_result *res) {
    af_error err = {0};
    assert_int_equal(af_oracle_compare(p->o, &p->bad.t, res, &err), AF_OK);
    return res->kind;
}

static float *bad_reset(planted *p) {
    memcpy(p->bad.mem, p->good.mem, p->n * sizeof(float));
    return p->bad.mem;
}

static void expect_kind(planted *p, af_kind want, const char *what) {
    af_result res;
    af_kind got = planted_kind(p, &res);
    if (got != want) {
        print_result(what, &res);
        fail_msg("%s: kind %s, expected %s", what, af_kind_names[got], af_kind_names[want]);
    }
}

static void test_planted_outputs(void **state) {
    (void)state;
    af_case c;
    tame_case(&c);
    planted p;
    planted_setup(&p, &c, NULL);
    const float *good = p.good.mem;
    float *bad;
    /* (a) a large value added to one element */
    bad = bad_reset(&p);
    bad[7] += 100.0f;
    expect_kind(&p, AF_KIND_DIVERGE, "one element + 100");
    af_result res;
    planted_kind(&p, &res);
    assert_int_equal(res.m.n_diverge, 1);
    /* worst index: element 7 of [2, 2, 5, 4] is (0, 0, 1, 3) */
    assert_int_equal(res.m.worst[0], 0);
    assert_int_equal(res.m.worst[1], 0);
    assert_int_equal(res.m.worst[2], 1);
    assert_int_equal(res.m.worst[3], 3);
    assert_true(fabs(res.m.max_abs - 100.0) < 1e-3);
    /* (b) NaN where the reference is finite */
    bad = bad_reset(&p);
    bad[3] = NAN;
    expect_kind(&p, AF_KIND_NAN_MISMATCH, "one element NaN");
    /* (c) +Inf and -Inf */
    bad = bad_reset(&p);
    bad[11] = INFINITY;
    expect_kind(&p, AF_KIND_INF_MISMATCH, "one element +Inf");
    bad = bad_reset(&p);
    bad[12] = -INFINITY;
    expect_kind(&p, AF_KIND_INF_MISMATCH, "one element -Inf");
    /* NaN takes precedence over Inf and divergence */
    bad = bad_reset(&p);
    bad[1] = INFINITY, bad[2] = NAN, bad[5] += 50.0f;
    expect_kind(&p, AF_KIND_NAN_MISMATCH, "NaN + Inf + diverge");
    /* (e) every output scaled by 1.01 in an f32 case */
    bad = bad_reset(&p);
    for (size_t e = 0; e < p.n; e++) bad[e] = good[e] * 1.01f;
    expect_kind(&p, AF_KIND_DIVERGE, "outputs * 1.01");
    /* (f) two heads' outputs swapped (batch 1, heads 0 and 1) */
    bad = bad_reset(&p);
    size_t row = 5 * 4; /* one head: Sq * Dv floats */
    memcpy(bad + 2 * row, good + 3 * row, row * sizeof(float));
    memcpy(bad + 3 * row, good + 2 * row, row * sizeof(float));
    expect_kind(&p, AF_KIND_DIVERGE, "heads swapped");
    /* an untouched copy is ok, and so is a tiny perturbation */
    bad = bad_reset(&p);
    expect_kind(&p, AF_KIND_OK, "unchanged");
    for (size_t e = 0; e < p.n; e++) bad[e] = nextafterf(good[e], INFINITY);
    expect_kind(&p, AF_KIND_OK, "one ulp");
    planted_free(&p);

    /* (d) NaN in a fully masked row: key padding 0 for batch 0 */
    tame_case(&c);
    c.key_padding = true, c.kv_valid[0] = 0, c.kv_valid[1] = 6;
    planted_setup(&p, &c, NULL);
    good = p.good.mem;
    for (size_t e = 0; e < p.n / 2; e++) assert_true(good[e] == 0.0f); /* batch 0 is all zero */
    const uint8_t *rows = af_oracle_masked_rows(p.o);
    for (size_t rr = 0; rr < 2 * 2 * 5; rr++) assert_int_equal(rows[rr], rr < 10 ? 1 : 0);
    bad = bad_reset(&p);
    bad[6] = NAN;
    expect_kind(&p, AF_KIND_MASKED_ROW_NAN, "NaN in a fully masked row");
    bad = bad_reset(&p);
    for (size_t e = 0; e < p.n / 2; e++) bad[e] = NAN; /* a backend that gives NaN for every masked row */
    expect_kind(&p, AF_KIND_MASKED_ROW_NAN, "NaN in every fully masked row");
    bad[p.n - 1] = NAN; /* and one in a live row: a plain NaN mismatch wins */
    expect_kind(&p, AF_KIND_NAN_MISMATCH, "NaN in a live row too");
    bad = bad_reset(&p);
    bad[0] = 1.0f; /* a masked row must be 0 */
    expect_kind(&p, AF_KIND_DIVERGE, "nonzero in a masked row");
    planted_free(&p);
    /* the waiver */
    af_oracle_opts opts;
    af_oracle_opts_default(&opts);
    opts.waive_masked_row_nan = true;
    planted_setup(&p, &c, &opts);
    bad = bad_reset(&p);
    bad[6] = NAN;
    expect_kind(&p, AF_KIND_OK, "waived masked-row NaN");
    planted_free(&p);
}

/* docs/design.md section 2, step 6: dropped weights are 0 and p = 1 gives zeros, also when
 * the softmax row is NaN because of a +Inf score (exp(inf - inf)) or a NaN score; with
 * p = 0 such a row is NaN. Every backend must agree (hand-built, independent of ref). */
static void test_dropout_nan_rows(void **state) {
    (void)state;
    const char *names[] = {"ref", "explicit", "fused"};
    char first[256] = {0}; /* failures are collected, so everything is freed before failing */
    size_t failures = 0;
    for (size_t bi = 0; bi < 3; bi++) {
        af_backend *be = open_backend(names[bi]);
        af_inputs *in = af_inputs_create();
        outbuf ob = {0};
        for (int kind = 0; kind < 4; kind++) /* +Inf / NaN score, in the first or the last tile */
            for (int pi = 0; pi < 2; pi++) {
                size_t at = kind < 2 ? 260 : 10;
                af_case c;
                af_case_default(&c);
                c.q_len = 3, c.kv_len = 300, c.v_head_dim = 2; /* more than one fused tile */
                c.dropout_p = pi ? 1.0 : 0.0, c.dropout_seed = 5;
                af_error err = {0};
                assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
                const af_case_tensors *t = af_inputs_get(in);
                for (size_t j = 0; j < 300; j++) {
                    af_view_set(&t->qv, 0, 0, 0, 0, 1.0);
                    af_view_set(&t->qv, 0, 0, 1, 0, 1.0);
                    af_view_set(&t->qv, 0, 0, 2, 0, 1.0);
                    af_view_set(&t->kv, 0, 0, j, 0, j == at ? (kind % 2 ? DNAN : DINF) : 0.01 * (double)j);
                    af_view_set(&t->vv, 0, 0, j, 0, 1.0);
                    af_view_set(&t->vv, 0, 0, j, 1, -2.0);
                }
                out_prepare(&ob, be, &c);
                assert_int_equal(af_backend_run(be, t, &ob.t, &err), AF_OK);
                for (size_t e = 0; e < 6; e++) {
                    double got = ob.t.dtype == AF_F64 ? ((double *)ob.mem)[e] : (double)((float *)ob.mem)[e];
                    if (pi ? got != 0.0 : !isnan(got)) {
                        if (!failures++)
                            snprintf(first, sizeof first, "%s: %s score at key %zu, p = %g: output %zu is %g, expected %s",
                                     names[bi], kind % 2 ? "NaN" : "+Inf", at, c.dropout_p, e, got, pi ? "0" : "NaN");
                        print_error("%s: %s score at key %zu, p = %g: output %zu is %g\n", names[bi],
                                    kind % 2 ? "NaN" : "+Inf", at, c.dropout_p, e, got);
                    }
                }
            }
        free(ob.mem);
        af_inputs_destroy(in);
        af_backend_close(be);
    }
    if (failures) fail_msg("%zu wrong outputs; first: %s", failures, first);
}

/* --- capabilities -------------------------------------------------------------------- */

static af_status zero_run(void *st, const af_case_tensors *in, af_tensor *out, af_error *err) {
    (void)st, (void)err;
    memset(out->data, 0, af_tensor_numel(out) * af_dtype_size(out->dtype));
    (void)in;
    return AF_OK;
}

static void test_capabilities(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    assert_int_equal(af_case_required_caps(&c), AF_CAP_F32);
    c.dtype = AF_F16;
    c.q_heads = 4, c.kv_heads = 2, c.q_len = 3, c.kv_len = 5, c.head_dim = 8, c.v_head_dim = 4;
    c.causal = true, c.dropout_p = 0.1;
    assert_int_equal(af_case_required_caps(&c),
                     AF_CAP_F16 | AF_CAP_GQA | AF_CAP_CROSS | AF_CAP_DV | AF_CAP_CAUSAL | AF_CAP_DROPOUT);
    c.amask.present = true, c.amask.dtype = AF_F32, c.amask.dims = AF_MDIM_K;
    assert_true(af_case_required_caps(&c) & AF_CAP_AMASK);
    assert_true(af_case_required_caps(&c) & AF_CAP_MASK_DTYPE);
    c.amask.dtype = AF_F16;
    assert_false(af_case_required_caps(&c) & AF_CAP_MASK_DTYPE);
    c.bmask.present = true, c.bmask.dims = AF_MDIM_K, c.bmask.dtype = AF_BOOL;
    c.key_padding = true, c.window_left = 2, c.softcap = 30.0, c.scale_set = true, c.scale = 0.1;
    uint32_t caps = af_case_required_caps(&c);
    assert_true(caps & AF_CAP_BMASK);
    assert_true(caps & AF_CAP_PADDING);
    assert_true(caps & AF_CAP_WINDOW);
    assert_true(caps & AF_CAP_SOFTCAP);
    assert_true(caps & AF_CAP_SCALE);
    assert_false(caps & AF_CAP_STRIDED);
    assert_false(caps & (AF_CAP_F32 | AF_CAP_BF16 | AF_CAP_TF32));
    c.t[AF_V].pad = 2;
    assert_true(af_case_required_caps(&c) & AF_CAP_STRIDED);
    c.t[AF_V].pad = 0, c.bmask.expanded = true;
    assert_true(af_case_required_caps(&c) & AF_CAP_STRIDED);
    af_case_default(&c);
    c.allow_tf32 = true;
    assert_int_equal(af_case_required_caps(&c), AF_CAP_F32 | AF_CAP_TF32);

    /* a backend with f32 only, BHSD only */
    const af_backend_vtable vt = {.name = "test:f32",  .version = "0", .summary = "zeros",
                                  .caps = AF_CAP_F32,  .layouts = 1u << AF_LAYOUT_BHSD,
                                  .out_dtype = AF_F32, .run = zero_run};
    af_backend *be = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_open_vtable(&vt, NULL, &be, &err), AF_OK);
    assert_string_equal(af_backend_name(be), "test:f32");
    char why[64] = {0};
    af_case_default(&c);
    assert_true(af_backend_supports(be, &c, why, sizeof why));
    c.dtype = AF_F16;
    assert_false(af_backend_supports(be, &c, why, sizeof why));
    assert_non_null(strstr(why, "f16"));
    c.dtype = AF_F32, c.causal = true;
    assert_false(af_backend_supports(be, &c, why, sizeof why));
    assert_non_null(strstr(why, "causal"));
    c.causal = false, c.t[AF_K].layout = AF_LAYOUT_BSHD;
    assert_false(af_backend_supports(be, &c, why, sizeof why));
    assert_non_null(strstr(why, "bshd"));
    af_backend_close(be);
    af_backend_close(NULL);

    /* the registry */
    size_t n = af_backend_builtin_count();
    assert_true(n >= 3 + 6);
    assert_string_equal(af_backend_builtin(0)->name, "ref");
    assert_string_equal(af_backend_builtin(1)->name, "explicit");
    assert_string_equal(af_backend_builtin(2)->name, "fused");
    assert_null(af_backend_builtin(n));
    for (size_t i = 0; i < n; i++) {
        const af_backend_vtable *v = af_backend_builtin(i);
        assert_non_null(v->run);
        if (i >= 3) assert_int_equal(strncmp(v->name, "mutant:", 7), 0);
        for (size_t j = 0; j < i; j++) assert_string_not_equal(v->name, af_backend_builtin(j)->name);
        af_backend *b2 = open_backend(v->name);
        assert_string_equal(af_backend_name(b2), v->name);
        af_backend_close(b2);
    }
    assert_int_equal(af_backend_open("nonesuch", &be, &err), AF_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(err.msg, "explicit"));
    assert_non_null(strstr(err.msg, "mutant:"));
    /* a wrong output tensor is refused */
    be = open_backend("explicit");
    af_inputs *in = af_inputs_create();
    af_case_default(&c);
    c.q_len = 3;
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    float buf[16];
    af_tensor out;
    size_t ne[4] = {1, 1, 2, 1}; /* Sq 2 instead of 3 */
    af_tensor_contiguous(&out, AF_F32, 4, ne);
    out.data = buf;
    assert_int_equal(af_backend_run(be, af_inputs_get(in), &out, &err), AF_ERR_INVALID);
    ne[2] = 3;
    af_tensor_contiguous(&out, AF_F64, 4, ne); /* explicit writes f32 */
    out.data = buf;
    assert_int_equal(af_backend_run(be, af_inputs_get(in), &out, &err), AF_ERR_INVALID);
    af_inputs_destroy(in);
    af_backend_close(be);
}

/* --- names -------------------------------------------------------------------------------- */

static void test_backend_names(void **state) {
    (void)state;
    /* the table: three prefixes, each a word and a colon, each with its kind */
    size_t n = 0;
    const af_backend_prefix *t = af_backend_prefix_table(&n);
    assert_int_equal(n, 3);
    assert_string_equal(t[0].prefix, "plugin:");
    assert_string_equal(t[1].prefix, "worker:");
    assert_string_equal(t[2].prefix, "target:");
    assert_string_equal(af_backend_kind_names[t[0].kind], "plugin");
    assert_string_equal(af_backend_kind_names[t[1].kind], "worker");
    assert_string_equal(af_backend_kind_names[t[2].kind], "worker");
    for (size_t i = 0; i < n; i++) {
        assert_non_null(t[i].open);
        assert_int_equal(strncmp(t[i].form, t[i].prefix, strlen(t[i].prefix)), 0);
        assert_ptr_equal(af_backend_prefix_of(t[i].form), &t[i]);
    }
    /* kinds from the prefix alone (case-sensitive; a prefix must be whole) */
    assert_int_equal(af_backend_spec_kind("plugin:/x/naive.so:args"), AF_BACKEND_PLUGIN);
    assert_int_equal(af_backend_spec_kind("worker:python3 w.py"), AF_BACKEND_WORKER);
    assert_int_equal(af_backend_spec_kind("target:torch/sdpa_math"), AF_BACKEND_WORKER);
    assert_int_equal(af_backend_spec_kind("explicit"), AF_BACKEND_BUILTIN);
    assert_int_equal(af_backend_spec_kind("mutant:silent_tf32"), AF_BACKEND_BUILTIN);
    assert_int_equal(af_backend_spec_kind("workers:x"), AF_BACKEND_BUILTIN);
    assert_int_equal(af_backend_spec_kind("Worker:x"), AF_BACKEND_BUILTIN);
    assert_int_equal(af_backend_spec_kind("target"), AF_BACKEND_BUILTIN);
    assert_null(af_backend_prefix_of("fused"));

    /* each prefix reaches its opener: the errors below are plugin.c's and worker.c's own */
    af_backend *be = (af_backend *)1;
    af_error err;
    assert_int_equal(af_backend_open("plugin:/nonexistent/af_none.so", &be, &err), AF_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(err.msg, "plugin /nonexistent/af_none.so: cannot load"));
    assert_int_equal(af_backend_open("worker:   ", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "empty command"));
    assert_int_equal(af_backend_open("worker:run 'unclosed", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unbalanced quotes"));
    assert_int_equal(af_backend_open("target:torch", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected target:STACK/VARIANT"));
    assert_int_equal(af_backend_open("target:Torch/x", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "the stack name may hold only a-z, 0-9 and _"));
    assert_int_equal(af_backend_open("worker:/nonexistent/af_worker", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cannot run /nonexistent/af_worker"));
    /* worker options travel through the table: a worker that never says hello is killed
     * after timeout + compile_timeout of the options given, not the defaults (70 s) */
    af_worker_opts wo;
    af_worker_opts_default(&wo);
    wo.timeout = 0.1;
    wo.compile_timeout = 0.2;
    assert_int_equal(af_backend_spec_open("worker:/bin/sh -c 'exec sleep 30'", &wo, &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "sent no hello within 0.3 s"));
    assert_null(be);
    /* anything else: the registry */
    assert_int_equal(af_backend_spec_open("mutant:silent_tf32", &wo, &be, &err), AF_OK);
    assert_string_equal(af_backend_name(be), "mutant:silent_tf32");
    assert_null(af_backend_ext_of(be));
    af_backend_close(be);
    /* an unknown name lists the registered names and the prefixed forms */
    assert_int_equal(af_backend_open("worker", &be, &err), AF_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(err.msg, "unknown backend \"worker\""));
    const char *want[] = {"ref", "explicit", "fused", "mutant:causal_top_left", "plugin:PATH.so[:ARGS]",
                          "worker:COMMAND", "target:STACK/VARIANT"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(err.msg, want[i])) fail_msg("\"%s\" not in: %s", want[i], err.msg);
}

/* --- mutants ------------------------------------------------------------------------------ */

static bool check_mutant(const char *name) {
    return !strcmp(name, "mutant:racy_sum") || !strcmp(name, "mutant:batch_split_kv") ||
           !strcmp(name, "mutant:write_past_out");
}

static void test_mutants_found(void **state) {
    (void)state;
    /* the forward mutants (the backward ones compute the forward exactly: tests/test_mutants.c);
     * not those only a check beyond the output finds (a second run, batch_split, the guard
     * bands: tests/test_checks.c), which the oracle alone passes by design */
    size_t first = 3, count = 0;
    for (size_t i = first; i < af_backend_builtin_count(); i++)
        count += !af_backend_builtin(i)->run_backward && !check_mutant(af_backend_builtin(i)->name);
    af_backend **mut = calloc(count, sizeof *mut);
    size_t *found_at = calloc(count, sizeof *found_at);
    for (size_t i = first, k = 0; i < af_backend_builtin_count(); i++) {
        if (af_backend_builtin(i)->run_backward || check_mutant(af_backend_builtin(i)->name)) continue;
        mut[k] = open_backend(af_backend_builtin(i)->name);
        found_at[k++] = SIZE_MAX;
    }
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    outbuf ob = {0};
    af_rng r;
    af_rng_init(&r, 5000, 0);
    size_t n = 5000, left = count; /* the bar is fixed: not scaled */
    /* half the cases serving ones, as the time-to-bug benchmark draws, a fifth FP8 (FP8 cases have no
     * serving form) */
    af_gen_opts go = {0, 2e6, 0.0, 0.5, 0.2};
    for (size_t k = 0; k < n && left; k++) {
        af_case c;
        af_case_generate_opts(&c, &r, &go);
        af_error err = {0};
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
        for (size_t i = 0; i < count; i++) {
            if (found_at[i] != SIZE_MAX) continue;
            out_prepare(&ob, mut[i], &c);
            af_result res;
            /* with the statistics of a mutant that returns them (mutant:lse_base2) */
            af_tensor lse;
            af_backend_lse_shape(&c, &lse);
            lse.data = ob.lse = realloc(ob.lse, af_tensor_span(&lse));
            assert_int_equal(af_backend_run_lse(mut[i], t, &ob.t, &lse, &err), AF_OK);
            assert_int_equal(af_oracle_compare(o, &ob.t, &res, &err), AF_OK);
            if (res.kind == AF_KIND_OK && lse.ndim == 3)
                assert_int_equal(af_oracle_compare_lse(o, &lse, NULL, &res, &err), AF_OK);
            if (res.kind != AF_KIND_OK) {
                found_at[i] = k;
                left--;
            }
        }
    }
    int missing = 0;
    for (size_t i = 0; i < count; i++) {
        if (found_at[i] == SIZE_MAX) {
            print_error("%s: not found in %zu generated cases\n", af_backend_name(mut[i]), n);
            missing = 1;
        } else {
            print_message("%s: found at case %zu\n", af_backend_name(mut[i]), found_at[i]);
        }
        af_backend_close(mut[i]);
    }
    free(mut);
    free(found_at);
    free(ob.mem);
    free(ob.lse);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    if (missing) fail_msg("some mutants were not found");
}

typedef void (*fill_fn)(const af_case_tensors *t);

/* Runs mutant `name` on case c (values from c's distributions, then fill if given). */
static af_kind mutant_kind(const char *name, const af_case *c, fill_fn fill, af_result *res) {
    af_backend *be = open_backend(name);
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    outbuf ob = {0};
    af_error err = {0};
    if (af_case_validate(c, 0, &err) != AF_OK) fail_msg("hand case for %s invalid: %s", name, err.msg);
    assert_int_equal(af_inputs_generate(in, c, &err), AF_OK);
    if (fill) fill(af_inputs_get(in));
    const af_case_tensors *t = af_inputs_get(in);
    assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
    out_prepare(&ob, be, c);
    assert_int_equal(af_backend_run(be, t, &ob.t, &err), AF_OK);
    assert_int_equal(af_oracle_compare(o, &ob.t, res, &err), AF_OK);
    free(ob.mem);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    af_backend_close(be);
    return res->kind;
}

static void expect_mutant(const char *name, const af_case *c, fill_fn fill, af_kind want1, af_kind want2,
                          const char *what) {
    af_result res;
    af_kind k = mutant_kind(name, c, fill, &res);
    if (k != want1 && k != want2) {
        print_case(c);
        print_result(name, &res);
        fail_msg("%s, %s: kind %s, expected %s", name, what, af_kind_names[k], af_kind_names[want1]);
    }
}

static void base_case(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_heads = 2, c->kv_heads = 2, c->q_len = 4, c->kv_len = 4, c->head_dim = 16, c->v_head_dim = 16;
    for (int t = 0; t < 3; t++) c->t[t].seed = 77u + (uint32_t)t;
}

/* Q and K of a packed buffer between 200 and 300 (positive): Q.K over 64 dims is about
 * 4e6, far past f16's 65504, while the scaled scores (/8) are still ordinary numbers. */
static void fill_large_qk(const af_case_tensors *t) {
    for (size_t b = 0; b < t->qv.ne[0]; b++)
        for (size_t h = 0; h < t->qv.ne[1]; h++)
            for (size_t s = 0; s < t->qv.ne[2]; s++)
                for (size_t d = 0; d < t->qv.ne[3]; d++) {
                    double x = 200.0 + (double)((b * 31 + h * 17 + s * 7 + d * 3) % 101);
                    af_view_set(&t->qv, b, h, s, d, x);
                    af_view_set(&t->kv, b, h, s, d, 300.0 - (double)((b * 13 + h * 5 + s * 11 + d) % 97));
                }
}

static void test_mutants_hand_cases(void **state) {
    (void)state;
    af_case c;
    /* causal_top_left: the same as bottom-right when Sq == Sk, wrong when Sq != Sk */
    base_case(&c);
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    expect_mutant("mutant:causal_top_left", &c, NULL, AF_KIND_OK, AF_KIND_OK, "Sq == Sk");
    c.q_len = 2, c.kv_len = 4;
    expect_mutant("mutant:causal_top_left", &c, NULL, AF_KIND_DIVERGE, AF_KIND_DIVERGE, "Sq=2 Sk=4");
    c.diag = AF_DIAG_TOP_LEFT;
    expect_mutant("mutant:causal_top_left", &c, NULL, AF_KIND_OK, AF_KIND_OK, "top-left asked");

    /* bshd_as_bhsd: invisible on BHSD, and on BSHD with one head; wrong with H > 1, S > 1 */
    base_case(&c);
    expect_mutant("mutant:bshd_as_bhsd", &c, NULL, AF_KIND_OK, AF_KIND_OK, "all BHSD");
    c.q_heads = c.kv_heads = 1;
    for (int t = 0; t < 3; t++) c.t[t].layout = AF_LAYOUT_BSHD;
    expect_mutant("mutant:bshd_as_bhsd", &c, NULL, AF_KIND_OK, AF_KIND_OK, "BSHD with H = 1");
    c.q_heads = c.kv_heads = 2, c.q_len = 3, c.kv_len = 3;
    expect_mutant("mutant:bshd_as_bhsd", &c, NULL, AF_KIND_DIVERGE, AF_KIND_DIVERGE, "BSHD with H = 2");

    /* mhav2_concat: invisible with one head or the concatenated layout */
    base_case(&c);
    c.q_heads = c.kv_heads = 1;
    for (int t = 0; t < 3; t++) c.t[t].layout = AF_LAYOUT_QKV_BSH3D;
    expect_mutant("mutant:mhav2_concat", &c, NULL, AF_KIND_OK, AF_KIND_OK, "qkv_bsh3d with H = 1");
    c.q_heads = c.kv_heads = 2;
    expect_mutant("mutant:mhav2_concat", &c, NULL, AF_KIND_DIVERGE, AF_KIND_DIVERGE, "qkv_bsh3d with H = 2");
    for (int t = 0; t < 3; t++) c.t[t].layout = AF_LAYOUT_QKV_BS3HD;
    expect_mutant("mutant:mhav2_concat", &c, NULL, AF_KIND_OK, AF_KIND_OK, "qkv_bs3hd");

    /* silent_tf32: invisible when TF32 is allowed or the case is f16; wrong on exact f32 */
    base_case(&c);
    c.head_dim = c.v_head_dim = 64, c.q_len = c.kv_len = 16;
    c.allow_tf32 = true;
    expect_mutant("mutant:silent_tf32", &c, NULL, AF_KIND_OK, AF_KIND_OK, "allow_tf32");
    c.allow_tf32 = false, c.dtype = AF_F16;
    expect_mutant("mutant:silent_tf32", &c, NULL, AF_KIND_OK, AF_KIND_OK, "f16");
    c.dtype = AF_F32;
    expect_mutant("mutant:silent_tf32", &c, NULL, AF_KIND_DIVERGE, AF_KIND_DIVERGE, "f32 without TF32");

    /* scale_sqrt_q_only: invisible unless the scale is split over Q and K */
    base_case(&c);
    c.scale_set = true, c.scale = 0.01, c.placement = AF_PLACE_SCORES;
    expect_mutant("mutant:scale_sqrt_q_only", &c, NULL, AF_KIND_OK, AF_KIND_OK, "placement scores");
    c.placement = AF_PLACE_Q;
    expect_mutant("mutant:scale_sqrt_q_only", &c, NULL, AF_KIND_OK, AF_KIND_OK, "placement q");
    c.placement = AF_PLACE_SQRT_QK;
    expect_mutant("mutant:scale_sqrt_q_only", &c, NULL, AF_KIND_DIVERGE, AF_KIND_DIVERGE, "placement sqrt_qk");
    c.scale = 1.0; /* sqrt(1) = 1: nothing to see */
    expect_mutant("mutant:scale_sqrt_q_only", &c, NULL, AF_KIND_OK, AF_KIND_OK, "sqrt_qk with scale 1");

    /* packed_fp16_overflow: f16 Q.K past 65504 in qkv_channels_first */
    base_case(&c);
    c.head_dim = c.v_head_dim = 64;
    for (int t = 0; t < 3; t++) c.t[t].layout = AF_LAYOUT_QKV_CHANNELS_FIRST;
    c.dtype = AF_F32;
    expect_mutant("mutant:packed_fp16_overflow", &c, fill_large_qk, AF_KIND_OK, AF_KIND_OK, "f32");
    c.dtype = AF_F16;
    expect_mutant("mutant:packed_fp16_overflow", &c, NULL, AF_KIND_OK, AF_KIND_OK, "f16, ordinary values");
    expect_mutant("mutant:packed_fp16_overflow", &c, fill_large_qk, AF_KIND_NAN_MISMATCH, AF_KIND_INF_MISMATCH,
                  "f16, Q.K past 65504");
    for (int t = 0; t < 3; t++) c.t[t].layout = AF_LAYOUT_QKV_BS3HD;
    expect_mutant("mutant:packed_fp16_overflow", &c, fill_large_qk, AF_KIND_OK, AF_KIND_OK, "qkv_bs3hd");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_outputs),
        cmocka_unit_test(test_dropout_nan_rows),
        cmocka_unit_test(test_capabilities),
        cmocka_unit_test(test_backend_names),
        cmocka_unit_test(test_mutants_hand_cases),
        cmocka_unit_test(test_mutants_found),
        cmocka_unit_test(test_generated_zero_findings),
        cmocka_unit_test(test_generated_serving_zero_findings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
