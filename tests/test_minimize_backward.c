/* test_minimize_backward.c - minimizing a finding on a gradient (minimize.c): the smaller
 * case must fail on the same tensor, the gradients not involved and dO's frills go, and a
 * finding on the output of a backward case becomes the forward case's. The backends are
 * seeded-bug mutants whose wrong tensor is known (docs/mutants.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/exec.h"
#include "attnfuzz/minimize.h"
#include "backends/ref.h"
#include "scratch.h"

/* test:out_off: the reference's forward and backward (float64), its output 1% off: a bug
 * in the output only, on backward cases too */
static af_status out_off_create(const char *args, void **state, af_error *err) {
    (void)args;
    *state = calloc(1, sizeof(af_scratch));
    return *state ? AF_OK : af_error_set(err, AF_ERR_NOMEM, "out of memory");
}
static void out_off_destroy(void *state) {
    af_scratch_release(state);
    free(state);
}
static void out_off_bend(af_tensor *out) {
    double *o = out->data;
    for (size_t e = 0; e < af_tensor_numel(out); e++) o[e] *= 1.01;
}
static af_status out_off_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    af_ref_opts opts = {0};
    AF_TRY(af_ref_attention(in, &in->qv, &in->kv, &in->vv, &opts, out->data, NULL, state, err));
    out_off_bend(out);
    return AF_OK;
}
static af_status out_off_run_backward(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g,
                                      af_error *err) {
    AF_TRY(af_ref_run_backward(state, in, out, g, err));
    out_off_bend(out);
    return AF_OK;
}
static const af_backend_vtable out_off_vt = {
    .name = "test:out_off", .version = "0", .summary = "test only: the reference with its output 1% off",
    .caps = AF_CAP_ALL, .layouts = AF_LAYOUTS_ALL, .out_dtype = AF_F64, .create = out_off_create,
    .destroy = out_off_destroy, .run = out_off_run, .run_backward = out_off_run_backward};

static af_exec *exec_on(const char *backend) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = backend;
    cfg.n_backends = 1;
    af_error err = {0};
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) fail_msg("%s: %s", backend, err.msg);
    return x;
}

/* B 2, Hq 4 over Hkv 2, S 8, D 16, every gradient of an additive mask, dO with a planted
 * special value (masked: it does not change what the gradients are), uniform, strided. */
static void big_case(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_heads = 4, c->kv_heads = 2, c->q_len = 8, c->kv_len = 8, c->head_dim = 16, c->v_head_dim = 16;
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].seed = 71u + (uint32_t)t;
    c->amask.present = true;
    c->amask.dims = AF_MDIM_ALL;
    c->amask.dtype = AF_F32;
    c->bwd.grads = AF_GRAD_ALL;
    c->bwd.dout.dist = AF_DIST_UNIFORM;
    c->bwd.dout.mag_q4 = 4;
    c->bwd.dout.perm = 1;
    c->bwd.dout.seed = 9u;
    af_case_repair(c, 0);
}

static af_finding find(af_exec *x, const af_case *c) {
    af_error err = {0};
    af_case cc = *c;
    assert_int_equal(af_exec_run_case(x, &cc, &err), AF_OK);
    if (af_exec_finding_count(x) != 1) fail_msg("%zu findings, expected one", af_exec_finding_count(x));
    return *af_exec_finding(x, 0);
}

/* bwd_gqa_no_sum bends dK and dV: minimized on the tensor found, one gradient is left (that
 * one), dO is plain, the case smaller; its finding is still on that tensor. */
static void test_gradient_finding(void **state) {
    (void)state;
    af_exec *x = exec_on("mutant:bwd_gqa_no_sum");
    af_case c;
    big_case(&c);
    af_finding f = find(x, &c);
    assert_true(!strcmp(f.tensor, "dk") || !strcmp(f.tensor, "dv"));
    af_minimize_opts mo = {.max_execs = 2000, .tensor = f.tensor};
    af_minimize_result mr;
    af_error err = {0};
    af_case small = c;
    assert_int_equal(af_minimize(x, f.check, f.kind, &small, &mo, &mr, &err), AF_OK);
    const af_finding *fm = af_exec_finding_for(x, f.check);
    assert_non_null(fm);
    assert_string_equal(fm->tensor, f.tensor);
    int g = !strcmp(f.tensor, "dk") ? 1 : 2;
    assert_int_equal(small.bwd.grads, 1u << g);
    assert_int_equal(small.bwd.dout.dist, AF_DIST_NORMAL);
    assert_int_equal(small.bwd.dout.mag_q4, 0);
    assert_int_equal(small.bwd.dout.perm, 0);
    assert_true(af_case_flops(&small) < af_case_flops(&c));
    assert_true(small.q_heads > small.kv_heads); /* the bug needs a group */
    af_exec_destroy(x);
}

/* bwd_dq_no_scale bends dQ only (batch >= 2): kept on dQ; the batch stays 2. */
static void test_dq_finding(void **state) {
    (void)state;
    af_exec *x = exec_on("mutant:bwd_dq_no_scale");
    af_case c;
    big_case(&c);
    af_finding f = find(x, &c);
    assert_string_equal(f.tensor, "dq");
    af_minimize_opts mo = {.max_execs = 2000, .tensor = f.tensor};
    af_minimize_result mr;
    af_error err = {0};
    af_case small = c;
    assert_int_equal(af_minimize(x, f.check, f.kind, &small, &mo, &mr, &err), AF_OK);
    assert_int_equal(small.bwd.grads, AF_GRAD_DQ);
    assert_int_equal(small.batch, 2);
    af_exec_destroy(x);
}

/* a bug in the output, found on a backward case: minimized on "out", the backward part goes
 * (the finding is the forward case's); minimized on a gradient it could not hold */
static void test_output_finding_drops_backward(void **state) {
    (void)state;
    af_error err = {0};
    af_exec *x = exec_on("test:out_off");
    af_case c;
    big_case(&c);
    af_finding f = find(x, &c);
    assert_string_equal(f.tensor, "out");
    af_minimize_opts mo = {.max_execs = 2000, .tensor = f.tensor};
    af_minimize_result mr;
    af_case small = c;
    assert_int_equal(af_minimize(x, f.check, f.kind, &small, &mo, &mr, &err), AF_OK);
    assert_int_equal(small.bwd.grads, 0);
    assert_string_equal(af_exec_finding_for(x, f.check)->tensor, "out");
    af_exec_destroy(x);
}

int main(void) {
    af_error err = {0};
    if (af_backend_register(&out_off_vt, &err) != AF_OK) {
        fprintf(stderr, "register: %s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient_finding),
        cmocka_unit_test(test_dq_finding),
        cmocka_unit_test(test_output_finding_drops_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
