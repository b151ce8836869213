/* test_relation.c - metamorphic relations on backward cases (relation.c): the built-ins'
 * gradients agree with themselves under every relation that applies, each gradient
 * compared through its own rows (dQ's, dK's and dV's, dmask's rows and keys); a backend
 * whose gradients depend on what a relation changes (a backward mutant) is caught there. */
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
#include "attnfuzz/relation.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

typedef struct run {
    af_backend *be;
    af_inputs *in;
    af_oracle *o;
    af_relation_ctx *x;
    af_tensor out;
    af_grads g;
} run;

static void run_open(run *r, const char *name) {
    memset(r, 0, sizeof *r);
    af_error err = {0};
    if (af_backend_open(name, &r->be, &err) != AF_OK) fail_msg("%s: %s", name, err.msg);
    r->in = af_inputs_create();
    r->o = af_oracle_create(NULL);
    r->x = af_relation_ctx_create();
}

static void run_free_bufs(run *r) {
    free(r->out.data);
    r->out.data = NULL;
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        free(af_grads_at(&r->g, k)->data);
        af_grads_at(&r->g, k)->data = NULL;
    }
}

static void run_close(run *r) {
    run_free_bufs(r);
    af_relation_ctx_destroy(r->x);
    af_oracle_destroy(r->o);
    af_inputs_destroy(r->in);
    af_backend_close(r->be);
}

/* The backend's forward and backward on c; the oracle prepared on the same inputs. */
static void run_case(run *r, const af_case *c) {
    af_error err = {0};
    run_free_bufs(r);
    if (af_inputs_generate(r->in, c, &err) != AF_OK) fail_msg("inputs: %s", err.msg);
    const af_case_tensors *t = af_inputs_get(r->in);
    assert_int_equal(af_oracle_prepare(r->o, t, &err), AF_OK);
    af_backend_out_shape(r->be, c, &r->out);
    r->out.data = malloc(af_tensor_span(&r->out));
    af_backend_grads_shape(r->be, c, &r->g);
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        af_tensor *gt = af_grads_at(&r->g, k);
        if (gt->ndim) gt->data = malloc(af_tensor_span(gt));
    }
    if (af_backend_run_backward(r->be, t, &r->out, &r->g, &err) != AF_OK) fail_msg("run: %s", err.msg);
}

/* res[0 .. AF_GRAD_COUNT] of relation rel on the prepared case; false when it does not apply */
static bool run_relation(run *r, af_relation rel, af_result *res) {
    const af_case_tensors *t = af_inputs_get(r->in);
    if (!af_relation_applies(rel, t->c)) return false;
    af_error err = {0};
    af_status st = af_relation_check_backward(rel, r->be, t, &r->out, &r->g, r->o, r->x, res, &err);
    if (st == AF_ERR_UNSUPPORTED) return false;
    if (st != AF_OK) fail_msg("%s: %s", af_relation_names[rel], err.msg);
    return true;
}

static const char *fmt_case(const af_case *c) {
    static char buf[4096];
    char *j = af_case_to_json(c);
    snprintf(buf, sizeof buf, "%s", j ? j : "?");
    free(j);
    return buf;
}

/* explicit and fused on generated backward cases: every relation clean on the output and
 * every gradient; each relation and each gradient compared many times */
static void test_builtins_clean(void **state) {
    (void)state;
    const char *names[2] = {"explicit", "fused"};
    size_t compared[AF_REL_COUNT][1 + AF_GRAD_COUNT] = {{0}};
    for (int b = 0; b < 2; b++) {
        run r;
        run_open(&r, names[b]);
        af_rng rng;
        af_rng_init(&rng, 20260 + (uint64_t)b, 0);
        for (int n = 0; n < 300; n++) {
            af_case c;
            af_gen_opts go = {0, 2e6, 1.0, 0.0, 0.0};
            af_case_generate_opts(&c, &rng, &go);
            af_case_cap_flops(&c, 2e6, 0);
            assert_true(c.bwd.grads != 0);
            if (!af_backend_supports(r.be, &c, NULL, 0)) continue;
            run_case(&r, &c);
            for (int rel = 0; rel < AF_REL_COUNT; rel++) {
                af_result res[1 + AF_GRAD_COUNT];
                if (!run_relation(&r, (af_relation)rel, res)) continue;
                for (int k = 0; k <= AF_GRAD_COUNT; k++) {
                    if (res[k].kind != AF_KIND_OK) printf("%s\n", fmt_case(&c));
                    if (res[k].kind != AF_KIND_OK)
                        fail_msg("%s@%s on %s: %s (worst ratio %.3g at %zu,%zu,%zu,%zu) %s", af_relation_names[rel],
                                 names[b], k ? af_grad_names[k - 1] : "out", af_kind_names[res[k].kind],
                                 res[k].m.worst_ratio, res[k].m.worst[0], res[k].m.worst[1], res[k].m.worst[2],
                                 res[k].m.worst[3], "(the case above)");
                    if (k == 0 || af_grads_get(af_relation_grads(r.x), k - 1)->data) compared[rel][k]++;
                }
            }
        }
        run_close(&r);
    }
    for (int rel = 0; rel < AF_REL_COUNT; rel++) {
        printf("%-14s out %4zu dq %4zu dk %4zu dv %4zu dmask %4zu\n", af_relation_names[rel], compared[rel][0],
               compared[rel][1], compared[rel][2], compared[rel][3], compared[rel][4]);
        for (int k = 0; k < 1 + AF_GRAD_COUNT; k++)
            if (compared[rel][k] < 5) fail_msg("%s: only %zu comparisons of %s", af_relation_names[rel], compared[rel][k],
                                               k ? af_grad_names[k - 1] : "out");
    }
}

/* A tame backward case of batch 2, 4 query heads over 2 key/value heads, an additive mask
 * over (b, h, q, k), every gradient. */
static void tame(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_heads = 4, c->kv_heads = 2, c->q_len = 8, c->kv_len = 12, c->head_dim = 16, c->v_head_dim = 8;
    c->dtype = AF_F32;
    for (int t = 0; t < 3; t++) c->t[t].seed = 97u + (uint32_t)t;
    c->amask.present = true;
    c->amask.dims = AF_MDIM_ALL;
    c->amask.dtype = AF_F32;
    c->bwd.grads = AF_GRAD_ALL;
    c->bwd.dout.seed = 4242u;
    af_case_repair(c, 0);
}

/* The mutants that bend one gradient by what a relation moves: bwd_dq_no_scale leaves dQ
 * unscaled only in batches of 2 or more (batch_split sees it: the one-batch run is right);
 * bwd_gqa_no_sum keeps the last query head of each group in dK and dV (head_perm puts
 * another head last). The other tensors agree. A batch_split failure is batch_variant (a row
 * alone differs from itself in the batch), the others a plain diverge. */
static void test_mutants_caught(void **state) {
    (void)state;
    struct {
        const char *backend;
        af_relation rel;
        int grad;
        af_kind kind;
    } want[] = {{"mutant:bwd_dq_no_scale", AF_REL_BATCH_SPLIT, 0, AF_KIND_BATCH_VARIANT},
                {"mutant:bwd_gqa_no_sum", AF_REL_HEAD_PERM, 1, AF_KIND_DIVERGE},
                {"mutant:bwd_gqa_no_sum", AF_REL_HEAD_PERM, 2, AF_KIND_DIVERGE}};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        af_case c;
        tame(&c);
        run r;
        run_open(&r, want[w].backend);
        run_case(&r, &c);
        af_result res[1 + AF_GRAD_COUNT];
        assert_true(run_relation(&r, want[w].rel, res));
        assert_int_equal(res[0].kind, AF_KIND_OK);
        if (res[1 + want[w].grad].kind != want[w].kind)
            fail_msg("%s@%s: %s is %s", af_relation_names[want[w].rel], want[w].backend, af_grad_names[want[w].grad],
                     af_kind_names[res[1 + want[w].grad].kind]);
        /* fused, the same relation on the same case: clean */
        run f;
        run_open(&f, "fused");
        run_case(&f, &c);
        assert_true(run_relation(&f, want[w].rel, res));
        for (int k = 0; k <= AF_GRAD_COUNT; k++) assert_int_equal(res[k].kind, AF_KIND_OK);
        run_close(&f);
        run_close(&r);
    }
}

/* dmask under batch_split: a mask over (b, h, q, k) is compared row for row; one that
 * broadcasts over the batch sums its gradient over both batch rows, so the one-batch run
 * is not comparable and is skipped (its result stays ok with nothing compared). */
static void test_dmask_batch_broadcast(void **state) {
    (void)state;
    af_case c;
    tame(&c);
    c.amask.dims = AF_MDIM_ALL & ~1u; /* (h, q, k): broadcast over the batch */
    af_case_repair(&c, 0);
    size_t ne[4];
    af_case_grad_shape(&c, 3, ne);
    assert_int_equal(ne[0], 1);
    run r;
    run_open(&r, "explicit");
    run_case(&r, &c);
    af_result res[1 + AF_GRAD_COUNT];
    assert_true(run_relation(&r, AF_REL_BATCH_SPLIT, res));
    for (int k = 0; k <= AF_GRAD_COUNT; k++) assert_int_equal(res[k].kind, AF_KIND_OK);
    /* compared anyway, the one-batch run's dmask (batch b0 alone) is not the sum */
    af_error err = {0};
    af_result pr;
    const af_tensor *dm = af_grads_get(af_relation_grads(r.x), 3);
    assert_non_null(dm->data);
    assert_int_equal(af_oracle_compare_grad_pair(r.o, 3, af_grads_get(&r.g, 3), dm, NULL, NULL, NULL, &pr, &err), AF_OK);
    assert_int_equal(pr.kind, AF_KIND_DIVERGE);
    run_close(&r);
}

/* placement on f16 with K near 1e4: an implementation that scales after dS K (the scale on
 * Q, or after the product) rounds the unscaled product to f16, where it overflows; times a
 * scale of 0 that is NaN. Correct, so the relation excuses it in those rows only: a NaN
 * planted in a row whose product is small is still a mismatch. */
static void test_placement_unscaled_overflow(void **state) {
    (void)state;
    af_case c;
    tame(&c);
    c.dtype = AF_F16;
    c.amask.present = false;
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    c.t[AF_K].mag_q4 = 16; /* 1e4 */
    c.bwd.dout.mag_q4 = 8; /* 1e2 */
    c.scale_set = true;
    /* the placement chosen is a function of the case's seeds: try seeds until the transformed
     * run overflows, in dQ or dK, for each scale (else this tests nothing) */
    for (int z = 0; z < 2; z++) {
        c.scale = z ? 0.0 : 1e-3;
        size_t nonfinite = 0;
        for (uint32_t seed = 0; seed < 16 && nonfinite == 0; seed++) {
            c.t[AF_Q].seed = 1000u + seed;
            af_case_repair(&c, 0);
            run r;
            run_open(&r, "explicit");
            run_case(&r, &c);
            af_result res[1 + AF_GRAD_COUNT];
            assert_true(run_relation(&r, AF_REL_PLACEMENT, res));
            for (int k = 0; k <= AF_GRAD_COUNT; k++)
                if (res[k].kind != AF_KIND_OK)
                    fail_msg("scale %g: placement@explicit %s: %s", c.scale, k ? af_grad_names[k - 1] : "out",
                             af_kind_names[res[k].kind]);
            for (int k = 0; k < 2; k++) {
                const af_tensor *gt = af_grads_get(af_relation_grads(r.x), k);
                assert_int_equal(gt->dtype, AF_F32);
                const float *d = gt->data;
                for (size_t e = 0; e < af_tensor_numel(gt); e++) nonfinite += isfinite(d[e]) ? 0u : 1u;
            }
            run_close(&r);
        }
        if (nonfinite == 0) fail_msg("scale %g: no seed made the transformed run overflow", c.scale);
    }
    /* a NaN where the product is small: found */
    c.scale = 1e-3;
    c.t[AF_K].mag_q4 = 0;
    af_case_repair(&c, 0);
    run r;
    run_open(&r, "explicit");
    run_case(&r, &c);
    af_error err = {0};
    af_tensor b = *af_grads_get(&r.g, 0);
    size_t n = af_tensor_numel(&b);
    float *f = malloc(n * sizeof *f);
    memcpy(f, b.data, n * sizeof *f);
    f[0] = NAN;
    b.data = f;
    af_result pr;
    assert_int_equal(af_oracle_compare_grad_pair(r.o, 0, af_grads_get(&r.g, 0), &b, NULL, NULL, NULL, &pr, &err), AF_OK);
    assert_int_equal(pr.kind, AF_KIND_NAN_MISMATCH);
    free(f);
    run_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtins_clean),
        cmocka_unit_test(test_mutants_caught),
        cmocka_unit_test(test_dmask_batch_broadcast),
        cmocka_unit_test(test_placement_unscaled_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
