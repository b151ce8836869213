/* test_checks.c - the checks beyond one output against the reference (src/campaign/exec.c,
 * src/oracle/relation.c, docs/design.md section 4): determinism (a second run, bitwise),
 * batch invariance (batch_split's two strengths) and guard bands. Each new kind is found on
 * its mutant with the metrics a hand count gives, and never on the honest built-ins; a
 * bundle of each kind reads back (kind, guard writes, both runs) and replays to the same
 * kind; a bundle missing its second run is refused, the message naming the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "test_util.h"

/* B x H x Sq x Sk, head dim D, seeds fixed: a plain f32 case. */
static af_case plain_case(uint32_t b, uint32_t h, uint32_t sq, uint32_t sk, uint32_t d) {
    af_case c;
    af_case_default(&c);
    c.batch = b;
    c.q_heads = c.kv_heads = h;
    c.q_len = sq;
    c.kv_len = sk;
    c.head_dim = c.v_head_dim = d;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].seed = 7u + (uint32_t)t;
    af_case_repair(&c, 0);
    return c;
}

/* An executor on one backend, with the determinism share and relation given (AF_REL_COUNT: none). */
static af_exec *exec_on(const char *backend, double determinism, af_relation rel) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = backend;
    cfg.n_backends = 1;
    cfg.determinism = determinism;
    if (rel != AF_REL_COUNT) cfg.relations[rel] = true;
    af_error err = {0};
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) fail_msg("exec on %s: %s", backend, err.msg);
    return x;
}

/* The one finding of the last execution, of kind want. */
static const af_finding *only_finding(const af_exec *x, af_kind want) {
    if (af_exec_finding_count(x) != 1) fail_msg("%zu findings, want 1 %s", af_exec_finding_count(x), af_kind_names[want]);
    const af_finding *f = af_exec_finding(x, 0);
    if (f->kind != want) fail_msg("%s by %s, want %s", af_kind_names[f->kind], f->who, af_kind_names[want]);
    return f;
}

static void test_racy_sum_nondeterministic(void **state) {
    (void)state;
    af_exec *x = exec_on("mutant:racy_sum", 1.0, AF_REL_COUNT);
    af_case c = plain_case(1, 2, 4, 5, 8);
    af_error err = {0};
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    const af_finding *f = only_finding(x, AF_KIND_NONDETERMINISTIC);
    assert_string_equal(f->who, "determinism@mutant:racy_sum");
    assert_string_equal(f->tensor, "out");
    /* within tolerance of the reference: the backend check itself passes */
    assert_int_equal(af_exec_check_result(x, 0)->kind, AF_KIND_OK);
    assert_true(f->result.m.n_diverge > 0 && f->result.m.n_diverge <= 2u * 4 * 8);
    /* a few f32 ulps of 5x/2 at most: |x| <= max |V| here (a convex combination) */
    assert_true(f->result.m.max_abs > 0 && f->result.m.max_abs < 1e-5);
    /* share 0: no determinism check at all */
    af_exec *y = exec_on("mutant:racy_sum", 0.0, AF_REL_COUNT);
    assert_int_equal(af_exec_run_case(y, &c, &err), AF_OK);
    assert_int_equal(af_exec_check_count(y), 1);
    assert_int_equal(af_exec_finding_count(y), 0);
    af_exec_destroy(y);
    af_exec_destroy(x);
}

/* In a batch the second runs are made when the batch is collected, before the checks: the
 * checks only compare (they may run on threads, so batches stay pipelined) and every case
 * of the batch gets its finding. */
static void test_racy_sum_in_a_batch(void **state) {
    (void)state;
    af_exec *x = exec_on("mutant:racy_sum", 1.0, AF_REL_COUNT);
    assert_true(af_exec_checks_parallel(x));
    af_case cases[3] = {plain_case(1, 2, 4, 5, 8), plain_case(2, 1, 3, 7, 4), plain_case(1, 1, 6, 6, 16)};
    af_error err = {0};
    assert_int_equal(af_exec_run_batch(x, cases, NULL, 3, 2, &err), AF_OK);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(af_exec_select(x, i, &err), AF_OK);
        const af_finding *f = only_finding(x, AF_KIND_NONDETERMINISTIC);
        assert_string_equal(f->who, "determinism@mutant:racy_sum");
    }
    assert_int_equal(af_exec_timing_of(x)->determinism_runs, 3);
    af_exec_destroy(x);
}

static void test_determinism_share(void **state) {
    (void)state;
    /* a share of 0.25 runs the check on about a quarter of the cases, the same ones each time */
    af_exec *x = exec_on("ref", 0.25, AF_REL_COUNT);
    af_error err = {0};
    size_t ran = 0, n = 400;
    for (size_t i = 0; i < n; i++) {
        af_case c = plain_case(1, 1, 2, 3, 4);
        c.t[AF_Q].seed = (uint32_t)(1000 + i);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
        bool r1 = af_exec_check_ran(x, 1);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
        assert_int_equal(af_exec_check_ran(x, 1), r1);
        ran += r1;
        assert_int_equal(af_exec_finding_count(x), 0);
    }
    /* binomial(400, 0.25): mean 100, sd 8.7; 60..140 is beyond 4.5 sd */
    assert_true(ran > 60 && ran < 140);
    af_exec_destroy(x);
}

static void test_batch_split_kv_batch_variant(void **state) {
    (void)state;
    af_exec *x = exec_on("mutant:batch_split_kv", 0.0, AF_REL_BATCH_SPLIT);
    af_error err = {0};
    af_case c = plain_case(3, 2, 4, 6, 8);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    const af_finding *f = only_finding(x, AF_KIND_BATCH_VARIANT);
    assert_string_equal(f->who, "batch_split@mutant:batch_split_kv");
    /* the row alone is within tolerance of the reference (a few f32 ulps): bitwise only */
    assert_true(f->result.m.max_abs > 0 && f->result.m.max_abs < 1e-5);
    /* batch 1: batch_split does not apply, nothing found */
    af_case one = plain_case(1, 2, 4, 6, 8);
    assert_int_equal(af_exec_run_case(x, &one, &err), AF_OK);
    assert_int_equal(af_exec_finding_count(x), 0);
    af_exec_destroy(x);
}

static void test_write_past_out_guard_write(void **state) {
    (void)state;
    af_exec *x = exec_on("mutant:write_past_out", 0.0, AF_REL_COUNT);
    af_error err = {0};
    af_case c = plain_case(2, 1, 3, 5, 6); /* Sq % 4 != 0: one row (Dv = 6 float64) past the output */
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    const af_finding *f = only_finding(x, AF_KIND_GUARD_WRITE);
    assert_int_equal(f->guard.n, 1);
    assert_string_equal(f->guard.w[0].buffer, "out");
    assert_int_equal(f->guard.w[0].margin, AF_MARGIN_AFTER);
    assert_int_equal(f->guard.w[0].offset, 0);
    assert_int_equal(f->guard.w[0].count, 6);
    af_case fits = plain_case(2, 1, 4, 5, 6); /* Sq % 4 == 0: the store stays inside */
    assert_int_equal(af_exec_run_case(x, &fits, &err), AF_OK);
    assert_int_equal(af_exec_finding_count(x), 0);
    af_exec_destroy(x);
}

/* The honest built-ins: deterministic, bitwise batch-invariant as they declare, never
 * outside their buffers, on generated cases (backward and serving ones among them). */
static void test_honest_builtins(void **state) {
    (void)state;
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = "ref";
    cfg.backends[1] = "explicit";
    cfg.backends[2] = "fused";
    cfg.n_backends = 3;
    cfg.determinism = 1.0;
    cfg.relations[AF_REL_BATCH_SPLIT] = true;
    af_error err = {0};
    af_exec *x = af_exec_create(&cfg, &err);
    assert_non_null(x);
    af_rng rng;
    af_rng_init(&rng, 35, 0);
    af_gen_opts go;
    memset(&go, 0, sizeof go);
    go.budget = 1u << 20;
    go.max_flops = 2e6;
    go.backward = 0.3;
    go.serving = 0.3;
    size_t n = scaled_at_least(300, 40), split = 0, det = 0;
    for (size_t i = 0; i < n; i++) {
        af_case c;
        af_case_generate_opts(&c, &rng, &go);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
        for (size_t k = 0; k < af_exec_finding_count(x); k++) {
            const af_finding *f = af_exec_finding(x, k);
            bool ours = f->kind == AF_KIND_NONDETERMINISTIC || f->kind == AF_KIND_BATCH_VARIANT ||
                        f->kind == AF_KIND_GUARD_WRITE;
            if (ours) fail_msg("case %zu: %s by %s on %s", i, af_kind_names[f->kind], f->who, f->tensor);
        }
        for (size_t k = 0; k < af_exec_check_count(x); k++) {
            if (!af_exec_check_ran(x, k)) continue;
            split += strncmp(af_exec_check_name(x, k), "batch_split@", 12) == 0;
            det += strncmp(af_exec_check_name(x, k), "determinism@", 12) == 0;
        }
    }
    assert_true(split > n / 10); /* the checks did run */
    assert_true(det > n);
    af_exec_destroy(x);
}

/* Writes finding 0 of x as a bundle under dir and reads it back. */
static af_bundle *round_trip(af_exec *x, const char *dir, char *path, size_t len) {
    af_error err = {0};
    if (af_exec_write_bundle(x, 0, dir, path, len, &err) != AF_OK) fail_msg("write: %s", err.msg);
    af_bundle *b = NULL;
    if (af_bundle_read(path, &b, &err) != AF_OK) fail_msg("read: %s", err.msg);
    return b;
}

/* Replays bundle b through an executor configured as replay configures it (its records'
 * backends, its relation, a nondeterministic finding's share of 1): the kind of its finding. */
static af_kind replay(const af_bundle *b, double determinism, af_relation rel) {
    af_exec *x = exec_on(af_bundle_record_at(b, 0)->backend, determinism, rel);
    af_error err = {0};
    if (af_exec_run_bundle(x, b, &err) != AF_OK) fail_msg("replay: %s", err.msg);
    af_kind k = af_exec_finding_count(x) ? af_exec_finding(x, 0)->kind : AF_KIND_OK;
    af_exec_destroy(x);
    return k;
}

static void test_bundles_round_trip(void **state) {
    (void)state;
    char dir[] = "/tmp/af_test_checks_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[4096];
    af_error err = {0};

    /* nondeterministic: both runs stored; they differ where the finding says */
    af_exec *x = exec_on("mutant:racy_sum", 1.0, AF_REL_COUNT);
    af_case c = plain_case(1, 2, 4, 5, 8);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    size_t want_diff = only_finding(x, AF_KIND_NONDETERMINISTIC)->result.m.n_diverge;
    af_bundle *b = round_trip(x, dir, path, sizeof path);
    assert_int_equal(af_bundle_kind(b), AF_KIND_NONDETERMINISTIC);
    double *one = NULL, *two = NULL;
    assert_int_equal(af_bundle_load_output(b, "mutant:racy_sum", &one, &err), AF_OK);
    assert_int_equal(af_bundle_load_run2(b, "mutant:racy_sum", -1, &two, &err), AF_OK);
    assert_non_null(one);
    assert_non_null(two);
    size_t diff = 0;
    for (size_t e = 0; e < 2 * 4 * 8; e++) diff += memcmp(&one[e], &two[e], sizeof one[e]) != 0;
    assert_int_equal(diff, want_diff);
    af_free(one);
    af_free(two);
    assert_int_equal(replay(b, 1.0, AF_REL_COUNT), AF_KIND_NONDETERMINISTIC);
    /* hostile: the second run's file gone, and gone from case.json's list too */
    char run2[4200], cj[4200];
    snprintf(run2, sizeof run2, "%s/out.mutant_racy_sum.run2.npy.zst", path);
    assert_int_equal(unlink(run2), 0);
    snprintf(cj, sizeof cj, "%s/case.json", path);
    FILE *fp = fopen(cj, "rb");
    assert_non_null(fp);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = 0;
    /* the list item with its separator: ", \"name\"" (or "\"name\", " when first) */
    const char *item = ", \"out.mutant_racy_sum.run2.npy.zst\"";
    char *at = strstr(text, item);
    assert_non_null(at);
    memmove(at, at + strlen(item), strlen(at + strlen(item)) + 1);
    fp = fopen(cj, "wb");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    af_bundle *bad = NULL;
    assert_int_equal(af_bundle_read(path, &bad, &err), AF_ERR_FORMAT);
    assert_null(bad);
    if (!strstr(err.msg, "out.mutant_racy_sum.run2.npy.zst")) fail_msg("%s", err.msg);
    assert_non_null(strstr(err.msg, "missing"));
    af_bundle_free(b);
    af_exec_destroy(x);

    /* batch_variant: replays to itself */
    x = exec_on("mutant:batch_split_kv", 0.0, AF_REL_BATCH_SPLIT);
    af_case cb = plain_case(3, 2, 4, 6, 8);
    assert_int_equal(af_exec_run_case(x, &cb, &err), AF_OK);
    only_finding(x, AF_KIND_BATCH_VARIANT);
    b = round_trip(x, dir, path, sizeof path);
    assert_int_equal(af_bundle_kind(b), AF_KIND_BATCH_VARIANT);
    assert_string_equal(af_bundle_relation(b), "batch_split");
    assert_int_equal(replay(b, 0.0, AF_REL_BATCH_SPLIT), AF_KIND_BATCH_VARIANT);
    af_bundle_free(b);
    af_exec_destroy(x);

    /* guard_write: the bands in case.json */
    x = exec_on("mutant:write_past_out", 0.0, AF_REL_COUNT);
    af_case cg = plain_case(2, 1, 3, 5, 6);
    assert_int_equal(af_exec_run_case(x, &cg, &err), AF_OK);
    only_finding(x, AF_KIND_GUARD_WRITE);
    b = round_trip(x, dir, path, sizeof path);
    assert_int_equal(af_bundle_kind(b), AF_KIND_GUARD_WRITE);
    const af_guard_writes *gw = af_bundle_guard_writes(b);
    assert_int_equal(gw->n, 1);
    assert_string_equal(gw->w[0].buffer, "out");
    assert_int_equal(gw->w[0].margin, AF_MARGIN_AFTER);
    assert_int_equal(gw->w[0].offset, 0);
    assert_int_equal(gw->w[0].count, 6);
    assert_int_equal(replay(b, 0.0, AF_REL_COUNT), AF_KIND_GUARD_WRITE);
    af_bundle_free(b);
    af_exec_destroy(x);

    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_racy_sum_nondeterministic),
        cmocka_unit_test(test_racy_sum_in_a_batch),
        cmocka_unit_test(test_determinism_share),
        cmocka_unit_test(test_batch_split_kv_batch_variant),
        cmocka_unit_test(test_write_past_out_guard_write),
        cmocka_unit_test(test_honest_builtins),
        cmocka_unit_test(test_bundles_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
