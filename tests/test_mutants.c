/* test_mutants.c - the seeded-bug mutants (src/backends/mutants.c, docs/mutants.md), one
 * hand-built case at a time: for each mutant, cases on which its bug cannot show (the
 * oracle must say ok, and where the deviation does not even apply, the output must be the
 * reference's bit for bit) and cases on which it must show, with the finding kind the
 * oracle has to give. A mutant that fires where its bug cannot show would make the
 * time-to-bug benchmark (scripts/bench_time_to_bug.py) measure noise; one that stays
 * silent where it must show would make it measure nothing. */
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
#include "attnfuzz/oracle.h"
#include "attnfuzz/tensor.h"

static const char *const mutant_names[] = {
    "mutant:scale_sqrt_q_only",         "mutant:packed_fp16_overflow",      "mutant:silent_tf32",
    "mutant:bshd_as_bhsd",              "mutant:mhav2_concat",              "mutant:causal_top_left",
    "mutant:splitkv_batch_stride",      "mutant:block_table_off_by_one",    "mutant:alibi_off_by_one",
    "mutant:sink_ignored",              "mutant:sink_in_numerator",         "mutant:zero_len_nan",
    "mutant:segment_leak",              "mutant:page_tail_read",            "mutant:bwd_dq_no_scale",           "mutant:bwd_gqa_no_sum",
    "mutant:bwd_dropout_not_reapplied", "mutant:bwd_softcap_no_derivative", "mutant:bwd_causal_missing_in_ds",
    "mutant:bwd_tail_tile_past_sk",     "mutant:bwd_lse_nan",              "mutant:fp8_descale_twice",
    "mutant:fp8_e5m2_as_e4m3",          "mutant:racy_sum",                 "mutant:batch_split_kv",
    "mutant:write_past_out", "mutant:lse_base2",
};
#define N_MUTANTS (sizeof mutant_names / sizeof mutant_names[0])

/* What a check expects: a finding kind (either of two), and for the silent cases where
 * the mutant's deviation is switched off or is the identity, bit-identical output. */
typedef enum expect_bits { SAME_BITS = 1 } expect_bits;

static void print_case(const af_case *c) {
    char *j = af_case_to_json(c);
    print_error("%s\n", j ? j : "(no json)");
    free(j);
}

static void print_result(const char *who, const af_result *r) {
    print_error("%s: %s max_abs %.3g worst_ratio %.3g at (%zu,%zu,%zu,%zu) out %.9g ref %.9g (atol %.3g rtol %.3g) "
                "nan %zu inf %zu masked_nan %zu diverge %zu unstable %zu\n",
                who, af_kind_names[r->kind], r->m.max_abs, r->m.worst_ratio, r->m.worst[0], r->m.worst[1],
                r->m.worst[2], r->m.worst[3], r->m.worst_out, r->m.worst_ref, r->tol.atol, r->tol.rtol, r->m.n_nan,
                r->m.n_inf, r->m.n_masked_row_nan, r->m.n_diverge, r->m.n_unstable);
}

/* Runs mutant `name` on case c (values drawn from c's distributions and seeds) and
 * compares it with the float64 reference: the kind must be want1 or want2, and with
 * SAME_BITS the output must equal the reference's bit for bit. */
static void expect_mutant(const char *name, const af_case *c, af_kind want1, af_kind want2, unsigned flags,
                          const char *what) {
    af_error err = {0};
    if (af_case_validate(c, 0, &err) != AF_OK) fail_msg("%s, %s: hand case invalid: %s", name, what, err.msg);
    af_backend *be = NULL;
    if (af_backend_open(name, &be, &err) != AF_OK) fail_msg("open %s: %s", name, err.msg);
    assert_string_equal(af_backend_name(be), name);
    char why[128] = "";
    if (!af_backend_supports(be, c, why, sizeof why)) fail_msg("%s does not support the case: %s", name, why);

    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    assert_non_null(in);
    assert_non_null(o);
    assert_int_equal(af_inputs_generate(in, c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);

    af_tensor out;
    af_backend_out_shape(be, c, &out);
    assert_int_equal(out.dtype, AF_F64); /* mutants are the float64 reference, bent */
    size_t n = af_tensor_numel(&out);
    double *buf = malloc(n * sizeof *buf);
    assert_non_null(buf);
    out.data = buf;
    assert_int_equal(af_backend_run(be, t, &out, &err), AF_OK);
    af_result res;
    assert_int_equal(af_oracle_compare(o, &out, &res, &err), AF_OK);

    if (res.kind != want1 && res.kind != want2) {
        print_case(c);
        print_result(name, &res);
        fail_msg("%s, %s: kind %s, expected %s%s%s", name, what, af_kind_names[res.kind], af_kind_names[want1],
                 want2 != want1 ? " or " : "", want2 != want1 ? af_kind_names[want2] : "");
    }
    if (want1 != AF_KIND_OK) assert_true(res.m.worst_ratio > 1.0); /* the finding is beyond tolerance */
    if (flags & SAME_BITS) {
        const double *ref = af_oracle_ref(o);
        for (size_t e = 0; e < n; e++)
            if (memcmp(&buf[e], &ref[e], sizeof *buf) != 0)
                fail_msg("%s, %s: element %zu is %.17g, the reference %.17g (bit-identical expected)", name, what,
                         e, buf[e], ref[e]);
    }
    free(buf);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    af_backend_close(be);
}

#define EXPECT_OK(name, c, flags, what) expect_mutant(name, c, AF_KIND_OK, AF_KIND_OK, flags, what)
#define EXPECT_FOUND(name, c, kind, what) expect_mutant(name, c, kind, kind, 0, what)

/* B 2, H 2, S 4, D 16, f32, BHSD, N(0, 1) values: small, ordinary, every feature off. */
static void base_case(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_heads = 2, c->kv_heads = 2, c->q_len = 4, c->kv_len = 4, c->head_dim = 16, c->v_head_dim = 16;
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].seed = 101u + 7u * (uint32_t)t;
}

static void set_layout(af_case *c, af_layout l) {
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = l;
}

/* --- every mutant is registered under its documented name -------------------------- */

static void test_mutants_registered(void **state) {
    (void)state;
    size_t seen = 0;
    for (size_t i = 0; i < af_backend_builtin_count(); i++) {
        const af_backend_vtable *vt = af_backend_builtin(i);
        if (strncmp(vt->name, "mutant:", 7) != 0) continue;
        seen++;
        int known = 0;
        for (size_t k = 0; k < N_MUTANTS; k++) known |= strcmp(vt->name, mutant_names[k]) == 0;
        if (!known) fail_msg("undocumented mutant %s (add it to docs/mutants.md and this test)", vt->name);
        assert_int_equal(vt->out_dtype, AF_F64);
        assert_non_null(vt->summary);
        assert_true(strlen(vt->summary) > 20);
    }
    assert_int_equal(seen, N_MUTANTS);
    af_backend *be = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_open("mutant:no_such_bug", &be, &err), AF_ERR_INVALID);
    assert_null(be);
}

/* --- scale_sqrt_q_only: sqrt(scale) reaches Q, the K half of the split is dropped ----- */

static void test_scale_sqrt_q_only(void **state) {
    (void)state;
    const char *m = "mutant:scale_sqrt_q_only";
    af_case c;
    base_case(&c);
    c.scale_set = true, c.scale = 0.01;
    c.placement = AF_PLACE_SCORES;
    EXPECT_OK(m, &c, SAME_BITS, "placement scores");
    c.placement = AF_PLACE_Q;
    EXPECT_OK(m, &c, SAME_BITS, "placement q");
    c.placement = AF_PLACE_K;
    EXPECT_OK(m, &c, SAME_BITS, "placement k");
    /* sqrt(1) = 1: dropping the K half of the split changes nothing */
    c.placement = AF_PLACE_SQRT_QK, c.scale = 1.0;
    EXPECT_OK(m, &c, SAME_BITS, "sqrt_qk with scale exactly 1");
    /* the default scale with D = 1 is 1/sqrt(1) = 1 as well */
    c.scale_set = false, c.head_dim = c.v_head_dim = 1;
    EXPECT_OK(m, &c, SAME_BITS, "sqrt_qk, default scale with D = 1");

    base_case(&c);
    c.placement = AF_PLACE_SQRT_QK, c.scale_set = true, c.scale = 0.01; /* in effect 0.1 */
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "sqrt_qk, scale 0.01");
    c.scale_set = false; /* default 1/4 with D = 16, in effect 1/2 */
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "sqrt_qk, default scale");
    c.scale_set = true, c.scale = -0.25; /* sqrt|scale| on Q alone loses the sign too */
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "sqrt_qk, negative scale");
}

/* --- packed_fp16_overflow: f16 Q.K^T before the scale, channel-first packed QKV ----- */

/* D 64, qkv_channels_first, Q and K uniform in +-10^(9/4) = +-178: |q.k| has a standard
 * deviation of 64^(1/2) * 178^2 / 3 ~ 8.4e4, so about half the dot products pass f16's
 * 65504 before the scale of 1/8 brings them back to ordinary (if peaked) logits. */
static void packed_case(af_case *c, af_dtype dt, af_layout l) {
    base_case(c);
    c->head_dim = c->v_head_dim = 64;
    c->q_len = c->kv_len = 8;
    c->dtype = dt;
    set_layout(c, l);
    for (int t = AF_Q; t <= AF_K; t++) c->t[t].dist = AF_DIST_UNIFORM, c->t[t].mag_q4 = 9;
}

static void test_packed_fp16_overflow(void **state) {
    (void)state;
    const char *m = "mutant:packed_fp16_overflow";
    af_case c;
    packed_case(&c, AF_F32, AF_LAYOUT_QKV_CHANNELS_FIRST);
    EXPECT_OK(m, &c, SAME_BITS, "f32, qkv_channels_first, large Q.K");
    packed_case(&c, AF_F16, AF_LAYOUT_BHSD);
    EXPECT_OK(m, &c, SAME_BITS, "f16, bhsd, large Q.K");
    packed_case(&c, AF_F16, AF_LAYOUT_QKV_BS3HD);
    EXPECT_OK(m, &c, SAME_BITS, "f16, qkv_bs3hd, large Q.K");
    packed_case(&c, AF_BF16, AF_LAYOUT_QKV_CHANNELS_FIRST);
    EXPECT_OK(m, &c, SAME_BITS, "bf16, qkv_channels_first, large Q.K");
    /* the bug's layout and dtype, but |q.k| of order 8: one extra f16 rounding of the
     * unscaled scores is within the f16 tolerance */
    packed_case(&c, AF_F16, AF_LAYOUT_QKV_CHANNELS_FIRST);
    for (int t = AF_Q; t <= AF_K; t++) c.t[t].dist = AF_DIST_NORMAL, c.t[t].mag_q4 = 0;
    EXPECT_OK(m, &c, 0, "f16, qkv_channels_first, ordinary values");

    packed_case(&c, AF_F16, AF_LAYOUT_QKV_CHANNELS_FIRST);
    expect_mutant(m, &c, AF_KIND_NAN_MISMATCH, AF_KIND_INF_MISMATCH, 0, "f16, qkv_channels_first, |q.k| ~ 1e5");
}

/* --- silent_tf32: f32 matmul inputs rounded to TF32 when TF32 is forbidden ---------- */

static void test_silent_tf32(void **state) {
    (void)state;
    const char *m = "mutant:silent_tf32";
    af_case c;
    base_case(&c);
    c.head_dim = c.v_head_dim = 64, c.q_len = c.kv_len = 16;
    c.allow_tf32 = true; /* TF32 was asked for: the oracle's honest run uses it too */
    EXPECT_OK(m, &c, SAME_BITS, "allow_tf32");
    c.allow_tf32 = false, c.dtype = AF_F16;
    EXPECT_OK(m, &c, SAME_BITS, "f16");
    c.dtype = AF_BF16;
    EXPECT_OK(m, &c, SAME_BITS, "bf16");
    /* Values TF32 holds exactly: small integers in Q, K and V. TF32 also rounds the
     * probabilities on their way into P.V, so they must be exact too: scale 0 makes every
     * score 0 and every weight 1/Sk = 1/16. Then the whole computation is exact. */
    c.dtype = AF_F32;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].dist = AF_DIST_SMALL_INT;
    c.scale_set = true, c.scale = 0.0;
    EXPECT_OK(m, &c, SAME_BITS, "f32 without TF32, small integers, uniform weights");

    base_case(&c);
    c.head_dim = c.v_head_dim = 64, c.q_len = c.kv_len = 16;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "f32 without TF32");
    /* small integers alone do not hide it: the probabilities are rounded as well */
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].dist = AF_DIST_SMALL_INT;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "f32 without TF32, small integers, default scale");
}

/* --- bshd_as_bhsd: BSHD tensors read as if they were BHSD --------------------------- */

static void test_bshd_as_bhsd(void **state) {
    (void)state;
    const char *m = "mutant:bshd_as_bhsd";
    af_case c;
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "all bhsd");
    set_layout(&c, AF_LAYOUT_SBHD);
    EXPECT_OK(m, &c, SAME_BITS, "all sbhd");
    /* [B, S, 1, D] and [B, 1, S, D] are the same memory */
    set_layout(&c, AF_LAYOUT_BSHD);
    c.q_heads = c.kv_heads = 1;
    EXPECT_OK(m, &c, 0, "bshd with H = 1");
    /* [B, 1, H, D] and [B, H, 1, D] likewise */
    c.q_heads = c.kv_heads = 2, c.q_len = c.kv_len = 1;
    EXPECT_OK(m, &c, 0, "bshd with S = 1");

    base_case(&c);
    set_layout(&c, AF_LAYOUT_BSHD);
    c.q_len = c.kv_len = 3;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "bshd, H = 2, S = 3");
    base_case(&c);
    c.t[AF_V].layout = AF_LAYOUT_BSHD; /* one tensor is enough */
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "bshd V only");
}

/* --- mhav2_concat: per-head interleaved packed QKV read as concatenated ------------- */

static void test_mhav2_concat(void **state) {
    (void)state;
    const char *m = "mutant:mhav2_concat";
    af_case c;
    base_case(&c);
    set_layout(&c, AF_LAYOUT_QKV_BS3HD);
    EXPECT_OK(m, &c, SAME_BITS, "qkv_bs3hd (concatenated, read right)");
    set_layout(&c, AF_LAYOUT_QKV_CHANNELS_FIRST);
    EXPECT_OK(m, &c, SAME_BITS, "qkv_channels_first");
    /* with one head, [B, S, 1, 3, D] and [B, S, 3, 1, D] are the same memory */
    set_layout(&c, AF_LAYOUT_QKV_BSH3D);
    c.q_heads = c.kv_heads = 1;
    EXPECT_OK(m, &c, 0, "qkv_bsh3d with H = 1");

    c.q_heads = c.kv_heads = 2;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "qkv_bsh3d with H = 2");
    c.q_heads = c.kv_heads = 3, c.dtype = AF_F16;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "qkv_bsh3d with H = 3, f16");
}

/* --- causal_top_left: top-left alignment where bottom-right was asked --------------- */

static void test_causal_top_left(void **state) {
    (void)state;
    const char *m = "mutant:causal_top_left";
    af_case c;
    base_case(&c);
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    EXPECT_OK(m, &c, SAME_BITS, "bottom-right, Sq == Sk");
    c.q_len = 2, c.kv_len = 5;
    c.diag = AF_DIAG_TOP_LEFT;
    EXPECT_OK(m, &c, SAME_BITS, "top-left asked, Sq != Sk");
    c.diag = AF_DIAG_EXPLICIT, c.diag_offset = 3;
    EXPECT_OK(m, &c, SAME_BITS, "explicit offset, Sq != Sk");
    c.causal = false, c.diag = AF_DIAG_BOTTOM_RIGHT;
    EXPECT_OK(m, &c, SAME_BITS, "not causal, Sq != Sk");

    base_case(&c);
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    c.q_len = 2, c.kv_len = 5; /* query i must see keys 0..i+3, sees 0..i */
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "bottom-right, Sq 2 < Sk 5");
    /* Sq > Sk: bottom-right leaves the first Sq - Sk rows fully masked (output 0); the
     * mutant lets them attend */
    c.q_len = 5, c.kv_len = 2;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "bottom-right, Sq 5 > Sk 2");
    /* Sq == Sk does not hide it when key padding moves the diagonal: offset(b) =
     * kv_valid[b] - Sq */
    base_case(&c);
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT_VALID;
    c.key_padding = true, c.kv_valid[0] = 2, c.kv_valid[1] = 4;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "bottom-right to valid length, Sq == Sk, padding");
}

/* --- the backward mutants: forward exactly ref's, one gradient rule bent ------------- */

/* What a backward check expects per tensor (out, dq, dk, dv, dmask): a kind (or -1: any
 * finding), with SAME_BITS for an ok tensor the reference's values bit for bit. */
enum { T_OUT, T_DQ, T_DK, T_DV, T_DMASK, T_COUNT };
#define ANY_FINDING (-1)

static void bwd_case(af_case *c) {
    base_case(c);
    c->bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    c->bwd.dout.seed = 555u;
}

/* Runs backward mutant `name` on c (fill, may be NULL, rewrites the drawn values) and
 * judges the output and each gradient the case asks for. */
static void expect_bwd(const char *name, const af_case *c0, void (*fill)(const af_case_tensors *), const int want[T_COUNT],
                       unsigned flags, const char *what) {
    af_case c = *c0;
    af_case_repair(&c, 0);
    af_error err = {0};
    if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("%s, %s: hand case invalid: %s", name, what, err.msg);
    af_backend *be = NULL;
    if (af_backend_open(name, &be, &err) != AF_OK) fail_msg("open %s: %s", name, err.msg);
    char why[128] = "";
    if (!af_backend_supports(be, &c, why, sizeof why)) fail_msg("%s does not support the case: %s", name, why);
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    if (fill) fill(af_inputs_get(in));
    const af_case_tensors *t = af_inputs_get(in);
    assert_int_equal(af_oracle_prepare(o, t, &err), AF_OK);
    af_tensor out;
    af_grads g;
    af_backend_out_shape(be, &c, &out);
    out.data = malloc(af_tensor_span(&out));
    af_backend_grads_shape(be, &c, &g);
    for (int k = 0; k < AF_GRAD_COUNT; k++)
        if (af_grads_at(&g, k)->ndim) af_grads_at(&g, k)->data = malloc(af_tensor_span(af_grads_at(&g, k)));
    if (af_backend_run_backward(be, t, &out, &g, &err) != AF_OK) fail_msg("%s, %s: %s", name, what, err.msg);
    for (int k = 0; k < T_COUNT; k++) {
        const af_tensor *x = k == T_OUT ? &out : af_grads_get(&g, k - 1);
        if (k != T_OUT && !x->data) continue;
        af_result res;
        if (k == T_OUT)
            assert_int_equal(af_oracle_compare(o, x, &res, &err), AF_OK);
        else
            assert_int_equal(af_oracle_compare_grad(o, k - 1, x, &res, &err), AF_OK);
        const char *tn = k == T_OUT ? "out" : af_grad_names[k - 1];
        bool ok = want[k] == ANY_FINDING ? res.kind != AF_KIND_OK : res.kind == (af_kind)want[k];
        if (!ok) {
            print_case(&c);
            print_result(tn, &res);
            fail_msg("%s, %s: %s is %s, expected %s", name, what, tn, af_kind_names[res.kind],
                     want[k] == ANY_FINDING ? "a finding" : af_kind_names[want[k]]);
        }
        if (res.kind != AF_KIND_OK) assert_true(res.m.worst_ratio > 1.0);
        if (res.kind == AF_KIND_OK && (flags & SAME_BITS)) {
            const double *ref = k == T_OUT ? af_oracle_ref(o) : af_oracle_ref_grad(o, k - 1);
            const double *d = x->data;
            for (size_t e = 0; e < af_tensor_numel(x); e++)
                if (memcmp(&d[e], &ref[e], sizeof *d) != 0)
                    fail_msg("%s, %s: %s[%zu] is %.17g, the reference %.17g (bit-identical expected)", name, what, tn, e,
                             d[e], ref[e]);
        }
    }
    for (int k = 0; k < AF_GRAD_COUNT; k++) free(af_grads_at(&g, k)->data);
    free(out.data);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    af_backend_close(be);
}

static const int all_ok[T_COUNT] = {AF_KIND_OK, AF_KIND_OK, AF_KIND_OK, AF_KIND_OK, AF_KIND_OK};

/* bwd_dq_no_scale: dQ without the softmax scale where the batch is 2 or more */
static void test_bwd_dq_no_scale(void **state) {
    (void)state;
    const char *m = "mutant:bwd_dq_no_scale";
    af_case c;
    bwd_case(&c);
    const int dq[T_COUNT] = {AF_KIND_OK, AF_KIND_DIVERGE, AF_KIND_OK, AF_KIND_OK, AF_KIND_OK};
    expect_bwd(m, &c, NULL, dq, SAME_BITS, "batch 2");
    c.batch = 1;
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "batch 1");
}

/* bwd_gqa_no_sum: dK and dV of a group from its last query head only */
static void test_bwd_gqa_no_sum(void **state) {
    (void)state;
    const char *m = "mutant:bwd_gqa_no_sum";
    af_case c;
    bwd_case(&c);
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "Hq == Hkv");
    c.q_heads = 4;
    const int kv[T_COUNT] = {AF_KIND_OK, AF_KIND_OK, AF_KIND_DIVERGE, AF_KIND_DIVERGE, AF_KIND_OK};
    expect_bwd(m, &c, NULL, kv, SAME_BITS, "Hq 4, Hkv 2");
}

/* bwd_dropout_not_reapplied: the backward forgets the forward's keep mask */
static void test_bwd_dropout_not_reapplied(void **state) {
    (void)state;
    const char *m = "mutant:bwd_dropout_not_reapplied";
    af_case c;
    bwd_case(&c);
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "no dropout");
    c.dropout_p = 0.3, c.dropout_seed = 77;
    const int all[T_COUNT] = {AF_KIND_OK, AF_KIND_DIVERGE, AF_KIND_DIVERGE, AF_KIND_DIVERGE, AF_KIND_OK};
    expect_bwd(m, &c, NULL, all, SAME_BITS, "p 0.3");
}

/* bwd_softcap_no_derivative: dS not multiplied by 1 - tanh^2 */
static void test_bwd_softcap_no_derivative(void **state) {
    (void)state;
    const char *m = "mutant:bwd_softcap_no_derivative";
    af_case c;
    bwd_case(&c);
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "no softcap");
    c.softcap = 0.5; /* N(0, 1) inputs, D 16: scores of order 1 saturate tanh(s / 0.5) */
    const int qk[T_COUNT] = {AF_KIND_OK, AF_KIND_DIVERGE, AF_KIND_DIVERGE, AF_KIND_OK, AF_KIND_OK};
    expect_bwd(m, &c, NULL, qk, SAME_BITS, "softcap 0.5");
}

/* bwd_causal_missing_in_ds: the causal mask left out of dS (the masked keys get P' of
 * the unmasked row) */
static void test_bwd_causal_missing_in_ds(void **state) {
    (void)state;
    const char *m = "mutant:bwd_causal_missing_in_ds";
    af_case c;
    bwd_case(&c);
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "not causal");
    c.causal = true, c.diag = AF_DIAG_TOP_LEFT;
    const int qk[T_COUNT] = {AF_KIND_OK, AF_KIND_DIVERGE, AF_KIND_DIVERGE, AF_KIND_OK, AF_KIND_OK};
    expect_bwd(m, &c, NULL, qk, SAME_BITS, "causal");
}

/* bwd_tail_tile_past_sk: keys past the valid length up to the end of the last 16-key tile
 * count in dS and dV */
static void test_bwd_tail_tile_past_sk(void **state) {
    (void)state;
    const char *m = "mutant:bwd_tail_tile_past_sk";
    af_case c;
    bwd_case(&c);
    c.kv_len = 24;
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "no key padding");
    c.key_padding = true, c.kv_valid[0] = 16, c.kv_valid[1] = 16; /* tiles end at 16: nothing past */
    expect_bwd(m, &c, NULL, all_ok, SAME_BITS, "valid lengths at tile ends");
    c.kv_valid[1] = 5; /* keys 5 .. 15 of batch 1 come back */
    const int all[T_COUNT] = {AF_KIND_OK, ANY_FINDING, ANY_FINDING, ANY_FINDING, AF_KIND_OK};
    expect_bwd(m, &c, NULL, all, 0, "valid length 5 of 24");
}

/* bwd_lse_nan: the log of a negative log-sum-exp: NaN in every gradient of such a row */
static void fill_scores(const af_case_tensors *t, double ksign) {
    const af_case *c = t->c;
    for (size_t b = 0; b < c->batch; b++) {
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t d = 0; d < c->head_dim; d++) af_view_set(&t->qv, b, h, i, d, 1.0);
        for (size_t g = 0; g < c->kv_heads; g++)
            for (size_t j = 0; j < c->kv_len; j++)
                for (size_t d = 0; d < c->head_dim; d++) af_view_set(&t->kv, b, g, j, d, ksign);
    }
}
static void fill_scores_neg(const af_case_tensors *t) { fill_scores(t, -1.0); } /* s = -4: L = -4 + log 4 < 0 */
static void fill_scores_pos(const af_case_tensors *t) { fill_scores(t, 1.0); }  /* s = 4: L > 0 */

static void test_bwd_lse_nan(void **state) {
    (void)state;
    const char *m = "mutant:bwd_lse_nan";
    af_case c;
    bwd_case(&c);
    expect_bwd(m, &c, fill_scores_pos, all_ok, SAME_BITS, "log-sum-exp 4 + log 4");
    const int nan[T_COUNT] = {AF_KIND_OK, AF_KIND_NAN_MISMATCH, AF_KIND_NAN_MISMATCH, AF_KIND_NAN_MISMATCH, AF_KIND_OK};
    expect_bwd(m, &c, fill_scores_neg, nan, 0, "log-sum-exp -4 + log 4");
}

/* --- serving forms ------------------------------------------------------------------- */

/* base_case with a serving form: packed segments of q_lens / kv_lens (B = 2), bshd. */
static void segments_case(af_case *c, uint32_t q0, uint32_t k0, uint32_t q1, uint32_t k1) {
    base_case(c);
    set_layout(c, AF_LAYOUT_BSHD);
    c->q_len = q0 > q1 ? q0 : q1, c->kv_len = k0 > k1 ? k0 : k1;
    if (!c->q_len) c->q_len = 1;
    if (!c->kv_len) c->kv_len = 1;
    c->serve.forms = AF_SERVE_PACKED;
    c->serve.q_lens[0] = q0, c->serve.kv_lens[0] = k0, c->serve.q_lens[1] = q1, c->serve.kv_lens[1] = k1;
}

/* base_case with K and V paged: kv_lens k0, k1 in pages of ps tokens. */
static void paged_case(af_case *c, uint32_t k0, uint32_t k1, uint16_t ps) {
    base_case(c);
    c->kv_len = k0 > k1 ? k0 : k1;
    c->serve.forms = AF_SERVE_PAGED;
    c->serve.kv_lens[0] = k0, c->serve.kv_lens[1] = k1;
    c->serve.page_size = ps, c->serve.page_seed = 77;
}

static void test_splitkv_batch_stride(void **state) {
    (void)state;
    const char *m = "mutant:splitkv_batch_stride";
    af_case c;
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "dense prefill");
    c.q_len = 1, c.kv_len = 256;
    EXPECT_OK(m, &c, SAME_BITS, "decode of 256 keys: one split");
    c.kv_len = 300, c.batch = 1;
    EXPECT_OK(m, &c, SAME_BITS, "decode, one sequence");
    /* every sequence alike: folding them onto sequence 0 changes nothing */
    c.batch = 3;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].bcast = AF_BCAST_BATCH;
    EXPECT_OK(m, &c, SAME_BITS, "decode, sequences broadcast from one");

    base_case(&c);
    c.q_len = 1, c.kv_len = 300;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "decode of 300 keys, B = 2");
    paged_case(&c, 700, 257, 16);
    c.q_len = 4, c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "paged speculative decode, 4 queries");
}

static void test_block_table_off_by_one(void **state) {
    (void)state;
    const char *m = "mutant:block_table_off_by_one";
    af_case c;
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "not paged");
    paged_case(&c, 9, 16, 16);
    EXPECT_OK(m, &c, SAME_BITS, "one page a row");
    segments_case(&c, 3, 9, 2, 12);
    EXPECT_OK(m, &c, SAME_BITS, "packed, not paged");

    paged_case(&c, 9, 12, 4);
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "pages of 4, 3 pages a row");
    paged_case(&c, 9, 12, 4);
    c.serve.forms |= AF_SERVE_PACKED, c.serve.q_lens[0] = 4, c.serve.q_lens[1] = 1, c.t[AF_Q].layout = AF_LAYOUT_BSHD;
    set_layout(&c, AF_LAYOUT_BSHD);
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "packed queries, paged keys");
}

static void test_alibi_off_by_one(void **state) {
    (void)state;
    const char *m = "mutant:alibi_off_by_one";
    af_case c;
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "no ALiBi");
    /* the linear form: one more step of distance is the same shift of every score of a row */
    c.serve.forms = AF_SERVE_ALIBI, c.causal = true;
    EXPECT_OK(m, &c, 0, "linear ALiBi, causal");
    c.causal = false;
    EXPECT_OK(m, &c, 0, "linear ALiBi, not causal");

    c.serve.alibi_symmetric = true;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "symmetric ALiBi");
    c.serve.alibi_symmetric = false, c.causal = true;
    c.serve.forms |= AF_SERVE_SINKS, c.serve.sink_seed = 5;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "linear ALiBi with a sink: the sink does not shift with the row");
}

static void test_sink_mutants(void **state) {
    (void)state;
    static const char *const ms[] = {"mutant:sink_ignored", "mutant:sink_in_numerator"};
    for (int k = 0; k < 2; k++) {
        af_case c;
        base_case(&c);
        EXPECT_OK(ms[k], &c, SAME_BITS, "no sinks");
        c.serve.forms = AF_SERVE_ALIBI;
        EXPECT_OK(ms[k], &c, SAME_BITS, "ALiBi, no sinks");
        /* every row fully masked: no weight anywhere, the sink's included */
        base_case(&c);
        c.serve.forms = AF_SERVE_SINKS | AF_SERVE_PAGED, c.serve.page_size = 2;
        EXPECT_OK(ms[k], &c, SAME_BITS, "sinks, no keys at all");

        base_case(&c);
        c.serve.forms = AF_SERVE_SINKS, c.serve.sink_seed = 9;
        EXPECT_FOUND(ms[k], &c, AF_KIND_DIVERGE, "sinks of unit size");
        segments_case(&c, 3, 5, 4, 2);
        c.serve.forms |= AF_SERVE_SINKS, c.serve.sink_seed = 10, c.dtype = AF_BF16;
        EXPECT_FOUND(ms[k], &c, AF_KIND_DIVERGE, "packed segments with sinks, bf16");
    }
}

static void test_zero_len_nan(void **state) {
    (void)state;
    const char *m = "mutant:zero_len_nan";
    af_case c;
    segments_case(&c, 3, 5, 4, 2);
    EXPECT_OK(m, &c, SAME_BITS, "every segment has keys");
    segments_case(&c, 0, 0, 4, 2);
    EXPECT_OK(m, &c, SAME_BITS, "an empty segment: no queries either");

    segments_case(&c, 3, 0, 4, 2);
    EXPECT_FOUND(m, &c, AF_KIND_MASKED_ROW_NAN, "3 queries, no keys");
    paged_case(&c, 0, 7, 4);
    EXPECT_FOUND(m, &c, AF_KIND_MASKED_ROW_NAN, "paged, a sequence without keys");
}

static void test_segment_leak(void **state) {
    (void)state;
    const char *m = "mutant:segment_leak";
    af_case c;
    segments_case(&c, 3, 4, 2, 5);
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    EXPECT_OK(m, &c, SAME_BITS, "causal: the next segment's keys lie past the diagonal");
    segments_case(&c, 3, 4, 2, 5);
    c.batch = 1;
    EXPECT_OK(m, &c, SAME_BITS, "one segment");
    segments_case(&c, 3, 4, 2, 0);
    EXPECT_OK(m, &c, SAME_BITS, "the next segment has no keys");
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "dense");

    segments_case(&c, 3, 4, 2, 5);
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "two segments, not causal");
    segments_case(&c, 1, 1, 1, 1);
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "segments of one token");
}

static void test_page_tail_read(void **state) {
    (void)state;
    const char *m = "mutant:page_tail_read";
    af_case c;
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "not paged");
    segments_case(&c, 3, 5, 2, 3);
    EXPECT_OK(m, &c, SAME_BITS, "packed, not paged");
    paged_case(&c, 8, 4, 4);
    EXPECT_OK(m, &c, SAME_BITS, "every row fills its pages");
    paged_case(&c, 7, 4, 4);
    EXPECT_OK(m, &c, SAME_BITS, "row 0's tail lies past kv_len (7): nothing more to read");
    paged_case(&c, 5, 8, 4);
    c.causal = true, c.diag = AF_DIAG_TOP_LEFT, c.q_len = 4; /* keys 5..7 past every query's diagonal */
    EXPECT_OK(m, &c, 0, "the tail behind the causal diagonal");

    /* the tail holds the case's poison (NaN, +Inf or -Inf by page_seed), the padded view too: NaN
     * through keys the reference gives no weight, a masked value's leak */
    paged_case(&c, 5, 8, 4);
    expect_mutant(m, &c, AF_KIND_MASKED_VALUE_LEAK, AF_KIND_NAN_MISMATCH, 0, "row 0: 5 keys in pages of 4");
    paged_case(&c, 1, 16, 16);
    c.dtype = AF_BF16;
    for (uint32_t seed = 1; seed <= 16; seed++) {
        c.serve.page_seed = seed; /* NaN, +Inf and -Inf poison alike */
        expect_mutant(m, &c, AF_KIND_MASKED_VALUE_LEAK, AF_KIND_NAN_MISMATCH, 0, "bf16, one key in a page of 16");
    }
}

/* --- the FP8 mutants ------------------------------------------------------------------ */

/* base_case in FP8: bf16 output, descales as a user's amax of N(0, 1) data gives them. */
static void fp8_case(af_case *c, af_fp8_fmt fmt) {
    base_case(c);
    c->dtype = AF_BF16;
    c->fp8.fmt = fmt;
    for (int t = 0; t < AF_QKV_COUNT; t++) c->fp8.descale[t] = 4.0f / (fmt == AF_FP8_E4M3 ? 448.0f : 57344.0f);
}

static void test_fp8_descale_twice(void **state) {
    (void)state;
    const char *m = "mutant:fp8_descale_twice";
    af_case c;
    base_case(&c);
    EXPECT_OK(m, &c, SAME_BITS, "no FP8 (descale 1)");
    fp8_case(&c, AF_FP8_E4M3);
    c.fp8.descale[AF_K] = 1.0f; /* 1 * 1 = 1 */
    EXPECT_OK(m, &c, SAME_BITS, "e4m3, K's descale exactly 1");
    /* K's values 2^-5 of what they are: the scores shrink, the weights flatten */
    fp8_case(&c, AF_FP8_E4M3);
    c.fp8.descale[AF_K] = 0x1p-5f;
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "e4m3, K descale 2^-5");
    fp8_case(&c, AF_FP8_E5M2);
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "e5m2, amax descales");
}

/* Backend name's output on case c into a buffer with `slack` elements after it, which are
 * first set to -1; *ref the reference's (ref backend) on the same inputs. */
static double *run_with_slack(const char *name, const af_case *c, size_t slack, double **ref) {
    af_error err = {0};
    af_backend *be = NULL, *rb = NULL;
    assert_int_equal(af_backend_open(name, &be, &err), AF_OK);
    assert_int_equal(af_backend_open("ref", &rb, &err), AF_OK);
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, c, &err), AF_OK);
    af_tensor out;
    af_backend_out_shape(be, c, &out);
    size_t n = af_tensor_numel(&out);
    double *buf = malloc((n + slack) * sizeof *buf), *rbuf = malloc(n * sizeof *rbuf);
    assert_non_null(buf);
    assert_non_null(rbuf);
    for (size_t e = 0; e < n + slack; e++) buf[e] = -1.0;
    out.data = buf;
    assert_int_equal(af_backend_run(be, af_inputs_get(in), &out, &err), AF_OK);
    out.data = rbuf;
    assert_int_equal(af_backend_run(rb, af_inputs_get(in), &out, &err), AF_OK);
    af_inputs_destroy(in);
    af_backend_close(be);
    af_backend_close(rb);
    *ref = rbuf;
    return buf;
}

/* racy_sum: within a few f32 ulps of the reference, and two runs differ somewhere (the
 * partials' order rotates with each call); the same instance run three times gives three
 * orders, so the first and the fourth agree bit for bit. */
static void test_racy_sum(void **state) {
    (void)state;
    af_case c;
    base_case(&c);
    af_error err = {0};
    af_backend *be = NULL;
    assert_int_equal(af_backend_open("mutant:racy_sum", &be, &err), AF_OK);
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    af_tensor out;
    af_backend_out_shape(be, &c, &out);
    size_t n = af_tensor_numel(&out);
    double *run[4];
    for (int r = 0; r < 4; r++) {
        run[r] = malloc(n * sizeof *run[r]);
        out.data = run[r];
        assert_int_equal(af_backend_run(be, af_inputs_get(in), &out, &err), AF_OK);
    }
    size_t diff = 0;
    for (size_t e = 0; e < n; e++) {
        diff += run[0][e] != run[1][e];
        assert_true(run[0][e] == run[3][e]);
        /* 5x/2 in f32 and two adds: |err| <= 4 * 2^-24 * 5/2 |x| */
        assert_true(fabs(run[0][e] - run[1][e]) <= 1e-6 * (fabs(run[0][e]) + 1e-30));
    }
    assert_true(diff > 0);
    for (int r = 0; r < 4; r++) free(run[r]);
    af_inputs_destroy(in);
    af_backend_close(be);
    expect_mutant("mutant:racy_sum", &c, AF_KIND_OK, AF_KIND_OK, 0, "within tolerance");
}

/* batch_split_kv: a batch is the reference bit for bit; a single sequence is not, within
 * tolerance. */
static void test_batch_split_kv(void **state) {
    (void)state;
    af_case c;
    base_case(&c);
    expect_mutant("mutant:batch_split_kv", &c, AF_KIND_OK, AF_KIND_OK, SAME_BITS, "batch 2: one split");
    c.batch = 1;
    double *ref, *out = run_with_slack("mutant:batch_split_kv", &c, 0, &ref);
    size_t n = (size_t)c.q_heads * c.q_len * c.v_head_dim, diff = 0;
    for (size_t e = 0; e < n; e++) diff += out[e] != ref[e];
    assert_true(diff > 0);
    free(out);
    free(ref);
    expect_mutant("mutant:batch_split_kv", &c, AF_KIND_OK, AF_KIND_OK, 0, "batch 1: three splits, within tolerance");
}

/* write_past_out: the output is the reference's; with Sq % 4 != 0 exactly the Dv elements
 * after it are written (0), never before; with Sq % 4 == 0 nothing past it. */
static void test_write_past_out(void **state) {
    (void)state;
    af_case c;
    base_case(&c);
    for (uint32_t sq = 3; sq <= 4; sq++) {
        c.q_len = sq;
        double *ref, *out = run_with_slack("mutant:write_past_out", &c, 2 * c.v_head_dim, &ref);
        size_t n = (size_t)c.batch * c.q_heads * c.q_len * c.v_head_dim;
        for (size_t e = 0; e < n; e++) assert_true(out[e] == ref[e]);
        for (size_t d = 0; d < 2 * c.v_head_dim; d++)
            assert_true(out[n + d] == (sq % 4 != 0 && d < c.v_head_dim ? 0.0 : -1.0));
        free(out);
        free(ref);
    }
}

static void test_fp8_e5m2_as_e4m3(void **state) {
    (void)state;
    const char *m = "mutant:fp8_e5m2_as_e4m3";
    af_case c;
    fp8_case(&c, AF_FP8_E4M3);
    EXPECT_OK(m, &c, SAME_BITS, "e4m3 read as e4m3");
    base_case(&c);
    c.dtype = AF_F16;
    EXPECT_OK(m, &c, SAME_BITS, "f16");
    fp8_case(&c, AF_FP8_E5M2);
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "e5m2");
    c.fp8.kv_only = true, c.fp8.descale[AF_Q] = 1.0f; /* an e5m2 KV cache beside bf16 queries */
    EXPECT_FOUND(m, &c, AF_KIND_DIVERGE, "e5m2 KV cache");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutants_registered),
        cmocka_unit_test(test_scale_sqrt_q_only),
        cmocka_unit_test(test_packed_fp16_overflow),
        cmocka_unit_test(test_silent_tf32),
        cmocka_unit_test(test_bshd_as_bhsd),
        cmocka_unit_test(test_mhav2_concat),
        cmocka_unit_test(test_causal_top_left),
        cmocka_unit_test(test_bwd_dq_no_scale),
        cmocka_unit_test(test_bwd_gqa_no_sum),
        cmocka_unit_test(test_bwd_dropout_not_reapplied),
        cmocka_unit_test(test_bwd_softcap_no_derivative),
        cmocka_unit_test(test_bwd_causal_missing_in_ds),
        cmocka_unit_test(test_bwd_tail_tile_past_sk),
        cmocka_unit_test(test_bwd_lse_nan),
        cmocka_unit_test(test_splitkv_batch_stride),
        cmocka_unit_test(test_block_table_off_by_one),
        cmocka_unit_test(test_alibi_off_by_one),
        cmocka_unit_test(test_sink_mutants),
        cmocka_unit_test(test_zero_len_nan),
        cmocka_unit_test(test_segment_leak),
        cmocka_unit_test(test_page_tail_read),
        cmocka_unit_test(test_fp8_descale_twice),
        cmocka_unit_test(test_fp8_e5m2_as_e4m3),
        cmocka_unit_test(test_racy_sum),
        cmocka_unit_test(test_batch_split_kv),
        cmocka_unit_test(test_write_past_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
