/* test_backend_pool.c - backends opened once and lent to executors (backend_pool.h): one
 * instance per name and worker options, a failed open not tried again, close and reopen,
 * executors that borrow a backend leave it open when destroyed, and a worker that crashes
 * restarts inside the same pooled backend (counted once, no second open); open_all opens
 * every spec of a list once (workers on threads, a failure remembered per spec) and leaves
 * the ones the pool holds as they are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend_pool.h"
#include "attnfuzz/exec.h"

static char bindir[4096];

static af_case small_case(uint32_t q_len) {
    af_case c;
    af_case_default(&c);
    c.q_len = q_len;
    c.kv_len = 5;
    c.head_dim = c.v_head_dim = 8;
    return c;
}

static void test_same_name_same_backend(void **state) {
    (void)state;
    af_backend_pool *p = af_backend_pool_create();
    assert_non_null(p);
    af_backend *a = NULL, *b = NULL, *c = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_pool_open(p, "explicit", NULL, &a, &err), AF_OK);
    assert_int_equal(af_backend_pool_open(p, "explicit", NULL, &b, &err), AF_OK);
    assert_int_equal(af_backend_pool_open(p, "fused", NULL, &c, &err), AF_OK);
    assert_ptr_equal(a, b);
    assert_ptr_not_equal(a, c);
    assert_string_equal(af_backend_name(c), "fused");
    af_backend_pool_stats s;
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.opened, 2);
    assert_int_equal(s.workers, 0);
    /* closed, then opened again: a new instance, counted */
    af_backend_pool_close(p, "explicit");
    assert_int_equal(af_backend_pool_open(p, "explicit", NULL, &b, &err), AF_OK);
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.opened, 3);
    af_backend_pool_destroy(p);
    af_backend_pool_destroy(NULL);
}

static void test_failed_open_remembered(void **state) {
    (void)state;
    af_backend_pool *p = af_backend_pool_create();
    af_backend *be = (af_backend *)p; /* must be cleared */
    af_error e1 = {0}, e2 = {0};
    af_status s1 = af_backend_pool_open(p, "no-such-backend", NULL, &be, &e1);
    assert_int_equal(s1, AF_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(e1.msg, "no-such-backend"));
    assert_int_equal(af_backend_pool_open(p, "no-such-backend", NULL, &be, &e2), AF_ERR_INVALID);
    assert_string_equal(e1.msg, e2.msg);
    af_backend_pool_stats s;
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.opened, 0);
    af_backend_pool_destroy(p);
}

/* Two executors over the same backend borrow one instance; destroying one leaves it open
 * for the other, and for the pool. */
static void test_executors_borrow(void **state) {
    (void)state;
    af_backend_pool *p = af_backend_pool_create();
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = "explicit";
    cfg.n_backends = 1;
    cfg.pool = p;
    af_error err = {0};
    af_exec *x1 = af_exec_create(&cfg, &err);
    assert_non_null(x1);
    cfg.pairs[0] = "fused,explicit";
    cfg.n_pairs = 1;
    af_exec *x2 = af_exec_create(&cfg, &err);
    assert_non_null(x2);
    af_backend *be = NULL;
    assert_int_equal(af_backend_pool_open(p, "explicit", NULL, &be, &err), AF_OK);
    assert_ptr_equal(af_exec_backend_at(x1, 0), be);
    assert_ptr_equal(af_exec_backend_at(x2, 0), be);
    af_exec_destroy(x1);
    af_case c = small_case(3);
    assert_int_equal(af_exec_run_case(x2, &c, &err), AF_OK);
    assert_int_equal(af_exec_finding_count(x2), 0);
    af_exec_destroy(x2);
    assert_string_equal(af_backend_name(be), "explicit"); /* still open */
    af_backend_pool_stats s;
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.opened, 2);
    af_backend_pool_destroy(p);
}

/* A worker that crashes on a case is restarted by its next run: the pool still holds the
 * one backend (one worker started), and counts the restart. Other worker options are
 * another instance. */
static void test_worker_restart_in_pool(void **state) {
    (void)state;
    char spec[4200];
    snprintf(spec, sizeof spec, "worker:%s/tests/c_worker --fault crash --fault-mod 16", bindir);
    af_backend_pool *p = af_backend_pool_create();
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = spec;
    cfg.n_backends = 1;
    cfg.pool = p;
    af_error err = {0};
    af_case crash = small_case(3), fine = small_case(4); /* 3 + 5 + 8 = 16, 4 + 5 + 8 = 17 */
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) fail_msg("%s", err.msg);
    assert_int_equal(af_exec_run_case(x, &crash, &err), AF_OK);
    assert_int_equal(af_exec_finding_count(x), 1);
    assert_int_equal(af_exec_finding(x, 0)->kind, AF_KIND_CRASH);
    af_exec_destroy(x);
    x = af_exec_create(&cfg, &err); /* the next bundle's executor */
    assert_non_null(x);
    assert_int_equal(af_exec_run_case(x, &fine, &err), AF_OK);
    assert_int_equal(af_exec_finding_count(x), 0);
    af_exec_destroy(x);
    af_backend_pool_stats s;
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.opened, 1);
    assert_int_equal(s.workers, 1);
    assert_int_equal(s.restarts, 1);
    /* another timeout: another process */
    af_worker_opts o;
    memset(&o, 0, sizeof o);
    o.timeout = 7;
    af_backend *be = NULL;
    assert_int_equal(af_backend_pool_open(p, spec, &o, &be, &err), AF_OK);
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.workers, 2);
    /* closing the spec closes both, the restart stays counted */
    af_backend_pool_close(p, spec);
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.restarts, 1);
    assert_int_equal(af_backend_pool_open(p, spec, &o, &be, &err), AF_OK);
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.workers, 3);
    af_backend_pool_destroy(p);
}

/* open_all: two C workers (one named twice), a builtin and a worker that cannot start, on
 * threads. Each opened once; the later af_backend_pool_open of each gives the same instance
 * (no new process) or the remembered error; a second open_all of the same list opens nothing. */
static void test_open_all(void **state) {
    (void)state;
    char a[4200], b[4200], dead[4200];
    snprintf(a, sizeof a, "worker:%s/tests/c_worker --name A", bindir);
    snprintf(b, sizeof b, "worker:%s/tests/c_worker --name B", bindir);
    snprintf(dead, sizeof dead, "worker:%s/tests/c_worker --fault die", bindir);
    const char *specs[] = {a, "explicit", b, dead, a};
    af_backend_pool *p = af_backend_pool_create();
    af_error err = {0};
    assert_int_equal(af_backend_pool_open_all(p, specs, 5, NULL, 5, &err), AF_OK);
    af_backend_pool_stats s;
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.opened, 3); /* A, B, explicit */
    assert_int_equal(s.workers, 2);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.running, 2);
    af_backend *ba = NULL, *bb = NULL, *bx = (af_backend *)p;
    assert_int_equal(af_backend_pool_open(p, a, NULL, &ba, &err), AF_OK);
    assert_int_equal(af_backend_pool_open(p, b, NULL, &bb, &err), AF_OK);
    assert_ptr_not_equal(ba, bb);
    assert_string_equal(af_backend_ext_of(ba)->describe, "A 1.0 variant naive");
    assert_string_equal(af_backend_ext_of(bb)->describe, "B 1.0 variant naive");
    af_error e = {0};
    assert_int_not_equal(af_backend_pool_open(p, dead, NULL, &bx, &e), AF_OK);
    assert_null(bx);
    assert_non_null(strstr(e.msg, "not there")); /* its stderr, from the start that failed */
    assert_int_equal(af_backend_pool_open_all(p, specs, 5, NULL, 5, &err), AF_OK);
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.opened, 3);
    assert_int_equal(s.workers, 2);
    assert_int_equal(s.failed, 1);
    af_backend_pool_close(p, a);
    af_backend_pool_stats_of(p, &s);
    assert_int_equal(s.running, 1);
    af_backend_pool_destroy(p);
}

int main(void) {
    const char *b = getenv("AF_BINARY_DIR");
    snprintf(bindir, sizeof bindir, "%s", b ? b : "build");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_name_same_backend),
        cmocka_unit_test(test_failed_open_remembered),
        cmocka_unit_test(test_executors_borrow),
        cmocka_unit_test(test_worker_restart_in_pool),
        cmocka_unit_test(test_open_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
