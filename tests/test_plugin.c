/* test_plugin.c - the plugin ABI end to end: a shared library (tests/plugin/) loaded as a
 * backend agrees with the reference where it claims support, a deliberately wrong build
 * of it is caught, and a plugin that cannot load is named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/exec.h"
#include "attnfuzz/rng.h"

static const char *plugin_path(void) {
    const char *p = getenv("AF_TEST_PLUGIN");
    if (!p) fail_msg("AF_TEST_PLUGIN is not set (run through ctest)");
    return p;
}

/* Runs n generated cases with the plugin; returns findings, counts runs it supported. */
static size_t run_cases(const char *spec, size_t n, size_t *ran) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = spec;
    cfg.n_backends = 1;
    af_error err;
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) fail_msg("%s", err.msg);
    af_rng r;
    af_rng_init(&r, 99, 0);
    size_t findings = 0;
    *ran = 0;
    for (size_t i = 0; i < n; i++) {
        af_case c;
        af_case_generate(&c, &r, 0, 1e6);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
        if (af_exec_check_ran(x, 0)) (*ran)++;
        if (af_exec_finding_count(x)) {
            if (!findings && !strchr(spec + 7, ':')) {
                char *j = af_case_to_json(&c);
                fprintf(stderr, "finding %s on\n%s\n", af_kind_names[af_exec_finding(x, 0)->kind], j);
                free(j);
            }
            findings++;
        }
    }
    af_exec_destroy(x);
    return findings;
}

static void test_plugin_agrees(void **state) {
    (void)state;
    char spec[4096];
    snprintf(spec, sizeof spec, "plugin:%s", plugin_path());
    af_backend *be;
    af_error err;
    assert_int_equal(af_backend_open(spec, &be, &err), AF_OK);
    assert_string_equal(af_backend_name(be), "plugin:naive");
    af_case c;
    af_case_default(&c);
    assert_true(af_backend_supports(be, &c, NULL, 0));
    c.dtype = AF_F16;
    assert_false(af_backend_supports(be, &c, NULL, 0)); /* f32 only */
    af_backend_close(be);
    size_t ran;
    assert_int_equal(run_cases(spec, 3000, &ran), 0);
    assert_true(ran >= 100); /* it did run where it claims support */
}

static void test_wrong_plugin_caught(void **state) {
    (void)state;
    char spec[4096];
    snprintf(spec, sizeof spec, "plugin:%s:bug=scale", plugin_path());
    size_t ran;
    size_t findings = run_cases(spec, 500, &ran);
    assert_true(ran > 10);
    assert_true(findings >= ran / 2); /* a 1.5x scale shows on most cases */
}

static void test_bad_plugins_named(void **state) {
    (void)state;
    af_backend *be;
    af_error err;
    assert_int_equal(af_backend_open("plugin:/nonexistent/thing.so", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "/nonexistent/thing.so"));
    char spec[4096];
    snprintf(spec, sizeof spec, "plugin:%s:bug=nonsense", plugin_path());
    assert_int_equal(af_backend_open(spec, &be, &err), AF_ERR_BACKEND);
    assert_non_null(strstr(err.msg, "unknown argument"));
    /* a shared library without the entry symbol */
    assert_int_equal(af_backend_open("plugin:libm.so.6", &be, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "attnfuzz_plugin"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plugin_agrees),
        cmocka_unit_test(test_wrong_plugin_caught),
        cmocka_unit_test(test_bad_plugins_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
