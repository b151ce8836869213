/* test_worker_proto.c - the worker protocol (docs/worker-protocol.md) against hand-written
 * frames: hello and result frames parsed in-process (each malformed frame refused with the
 * reason), run frames encoded and read back through their own tensor entries, and the
 * whole path through a child process (tests/worker/frame_worker.c), where every broken
 * frame is AF_ERR_BACKEND "protocol: ...", the worker's stderr is kept, and the next case
 * runs in a restarted worker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/case_key.h"
#include "attnfuzz/tensor.h"
#include "attnfuzz/worker.h"
#include "backends/worker_proto.h"

/* --- frames by hand ------------------------------------------------------------------------ */

static uint8_t body[(1u << 20) + 4096];

/* A frame body: header, newline, then payload (plen bytes). Returns its length. */
static size_t make_body(const char *header, const void *payload, size_t plen) {
    size_t hl = strlen(header);
    assert_true(hl + 1 + plen <= sizeof body);
    memcpy(body, header, hl);
    body[hl] = '\n';
    if (plen) memcpy(body + hl + 1, payload, plen);
    return hl + 1 + plen;
}

/* The case of the result tests: B 1, Hq 2, Sq 3, Dv 2 (so out is [1, 2, 3, 2]). */
static af_case small_case(void) {
    af_case c;
    af_case_default(&c);
    c.q_heads = c.kv_heads = 2;
    c.q_len = 3;
    c.kv_len = 4;
    c.head_dim = c.v_head_dim = 2;
    af_error err;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    return c;
}

static void expect_format(af_status st, const af_error *err, const char *needle) {
    if (st != AF_ERR_FORMAT || !strstr(err->msg, needle))
        fail_msg("want AF_ERR_FORMAT \"...%s...\", got status %d \"%s\"", needle, (int)st, st ? err->msg : "");
}

/* --- hello ------------------------------------------------------------------------------------ */

static void test_hello_full(void **state) {
    (void)state;
    const char *h = "{\"type\":\"hello\",\"protocol\":1,\"name\":\"t\",\"version\":\"2\",\"variant\":\"v\","
                    "\"caps\":[\"f32\",\"causal\"],\"layouts\":[\"bshd\",\"qkv_bs3hd\"],\"dtypes\":[\"f16\"],"
                    "\"limits\":{\"max_head_dim\":128,\"head_dim_multiple\":8},"
                    "\"conventions\":{\"causal\":[\"top_left\"],\"masked_rows\":\"nan\",\"dropout\":\"none\","
                    "\"masked_values\":\"ieee\"},\"compile_key\":[\"shapes\",\"dtype\"]}";
    af_wp_hello hello;
    af_error err;
    size_t n = make_body(h, NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_string_equal(hello.name, "t");
    assert_string_equal(hello.variant, "v");
    assert_int_equal(hello.caps, AF_CAP_F32 | AF_CAP_CAUSAL);
    assert_int_equal(hello.layouts, (1u << AF_LAYOUT_BSHD) | (1u << AF_LAYOUT_QKV_BS3HD));
    assert_int_equal(hello.dtypes, 1u << AF_F16);
    assert_int_equal(hello.max_head_dim, 128);
    assert_int_equal(hello.head_dim_multiple, 8);
    assert_int_equal(hello.max_seq, 0);
    assert_int_equal(hello.diagonals, 1u << AF_DIAG_TOP_LEFT);
    for (int d = 0; d < AF_CASE_DTYPE_COUNT; d++) assert_int_equal(af_conv_masked_rows(&hello.conv, (unsigned)d), AF_ROWS_NAN);
    assert_true(hello.conv.masked_values_ieee);
    assert_int_equal(hello.dropout, AF_WP_DROPOUT_NONE);
    assert_int_equal(hello.compile_key, AF_KEY_SHAPES | AF_KEY_DTYPE);
    assert_true(hello.compile_timeout == 0.0); /* not said */
}

/* "compile_timeout": the seconds a first build may take (a JIT compiling with nvcc), a
 * positive number of at most a day; anything else is refused, naming the field. */
static void test_hello_compile_timeout(void **state) {
    (void)state;
    af_wp_hello hello;
    af_error err = {0};
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                         "\"compile_timeout\":600}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_true(hello.compile_timeout == 600.0);
    static const char *const bad[] = {"0", "-5", "\"600\"", "1e9", "true"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                 "\"compile_timeout\":%s}", bad[i]);
        n = make_body(h, NULL, 0);
        assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_ERR_FORMAT);
        if (!strstr(err.msg, "compile_timeout")) fail_msg("%s: \"%s\" does not name the field", bad[i], err.msg);
    }
}

static void test_hello_defaults(void **state) {
    (void)state;
    af_wp_hello hello;
    af_error err;
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"dropout\"],\"layouts\":[\"bhsd\"]}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.caps, AF_CAP_DROPOUT);
    assert_int_equal(hello.dtypes, 7u); /* f32, f16, bf16 */
    assert_int_equal(hello.compile_key, AF_KEY_ALL);
    assert_int_equal(hello.diagonals, (1u << AF_DIAG_COUNT) - 1);
    assert_int_equal(af_conv_masked_rows(&hello.conv, AF_F16), AF_ROWS_ZERO);
    assert_int_equal(hello.dropout, AF_WP_DROPOUT_COUNTER);
    assert_non_null(strstr(hello.conventions, "\"masked_rows\":\"zero\""));
}

/* "libs": the versions under the worker and its GPU, what known entries' needs compare
 * with; absent is none; anything but an object of strings is refused. */
static void test_hello_libs(void **state) {
    (void)state;
    af_wp_hello hello;
    af_error err = {0};
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                         "\"libs\":{\"torch\":\"2.11.0+cu128\",\"cudnn\":\"9.19.0\",\"sm\":\"90\"}}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.libs.n, 3);
    assert_string_equal(af_host_lib(&hello.libs, "torch"), "2.11.0+cu128");
    assert_string_equal(af_host_lib(&hello.libs, "sm"), "90");
    assert_null(af_host_lib(&hello.libs, "onednn"));
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[]}", NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.libs.n, 0);
    static const struct {
        const char *libs, *why;
    } bad[] = {{"[\"torch\"]", "libs must be an object"},
               {"{\"torch\":2.11}", "libs.torch must be a version string"},
               {"{\"a b\":\"1\"}", "is no library name"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],\"libs\":%s}",
                 bad[i].libs);
        n = make_body(h, NULL, 0);
        assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_ERR_FORMAT);
        if (!strstr(err.msg, bad[i].why)) fail_msg("%s: \"%s\" does not say %s", bad[i].libs, err.msg, bad[i].why);
    }
}

/* The conventions the oracle models (conventions.h), parsed; "scores" as a list of dtypes. */
static void test_hello_conventions(void **state) {
    (void)state;
    af_wp_hello hello;
    af_error err = {0};
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                         "\"conventions\":{\"masked_rows\":\"mean\",\"masked_keys\":\"ieee\",\"denormals\":\"flush\","
                         "\"scores\":[\"bf16\"],\"tf32\":\"always\"}}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    for (int d = 0; d < AF_CASE_DTYPE_COUNT; d++) assert_int_equal(af_conv_masked_rows(&hello.conv, (unsigned)d), AF_ROWS_MEAN);
    assert_true(hello.conv.masked_keys_ieee);
    assert_int_equal(hello.conv.denormals_flush, 7u);
    assert_true(af_conv_flushes(&hello.conv, AF_F32) && af_conv_flushes(&hello.conv, AF_BF16));
    assert_true(hello.conv.tf32_always);
    assert_int_equal(hello.conv.scores_dtype, 1u << AF_BF16);
    assert_false(hello.conv.masked_values_ieee);
    assert_non_null(strstr(hello.conventions, "\"masked_rows\":\"mean\""));
    assert_non_null(strstr(hello.conventions, "\"scores\":[\"bf16\"]"));
    assert_non_null(strstr(hello.conventions, "\"denormals\":\"flush\""));
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                  "\"conventions\":{\"masked_rows\":\"unmasked\",\"scores\":\"dtype\"}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(af_conv_masked_rows(&hello.conv, AF_BF16), AF_ROWS_UNMASKED);
    assert_int_equal(hello.conv.scores_dtype, 7u);
    assert_non_null(strstr(hello.conventions, "\"scores\":\"dtype\""));
    /* masked_rows by dtype (jax cudnn): each dtype its own, one left out is "zero"; the
     * text names all three, and reads back the same */
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                  "\"conventions\":{\"masked_rows\":{\"f16\":\"unmasked\",\"bf16\":\"mean\"}}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(af_conv_masked_rows(&hello.conv, AF_F32), AF_ROWS_ZERO);
    assert_int_equal(af_conv_masked_rows(&hello.conv, AF_F16), AF_ROWS_UNMASKED);
    assert_int_equal(af_conv_masked_rows(&hello.conv, AF_BF16), AF_ROWS_MEAN);
    assert_non_null(strstr(hello.conventions, "\"masked_rows\":{\"f32\":\"zero\",\"f16\":\"unmasked\",\"bf16\":\"mean\"}"));
    af_conventions back;
    assert_int_equal(af_wp_parse_conventions(hello.conventions, &back, &err), AF_OK);
    assert_memory_equal(back.masked_rows, hello.conv.masked_rows, sizeof back.masked_rows);
    /* products (Q K^T's products rounded to these dtypes): listed only when declared, and
     * read back from the text */
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                  "\"conventions\":{\"products\":[\"f16\"]}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.conv.products_dtype, 1u << AF_F16);
    assert_int_equal(hello.conv.scores_dtype, 0);
    assert_non_null(strstr(hello.conventions, "\"products\":[\"f16\"]"));
    assert_int_equal(af_wp_parse_conventions(hello.conventions, &back, &err), AF_OK);
    assert_int_equal(back.products_dtype, 1u << AF_F16);
    /* denormals as a list of dtypes: only those flush */
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                  "\"conventions\":{\"denormals\":[\"bf16\"]}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.conv.denormals_flush, 1u << AF_BF16);
    assert_true(af_conv_flushes(&hello.conv, AF_BF16));
    assert_false(af_conv_flushes(&hello.conv, AF_F32) || af_conv_flushes(&hello.conv, AF_F16));
    assert_non_null(strstr(hello.conventions, "\"denormals\":[\"bf16\"]"));
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                  "\"conventions\":{\"denormals\":[\"f64\"]}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_ERR_FORMAT);
    /* defaults: the reference's own semantics */
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[]}", NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(af_conv_masked_rows(&hello.conv, AF_F32), AF_ROWS_ZERO);
    assert_false(hello.conv.masked_keys_ieee || hello.conv.denormals_flush || hello.conv.tf32_always);
    assert_int_equal(hello.conv.scores_dtype, 0);
    assert_int_equal(hello.conv.products_dtype, 0);
    assert_null(strstr(hello.conventions, "products"));
    assert_true(hello.conv.fp8_probs_scale[0] == 0.0f && hello.conv.fp8_probs_scale[1] == 0.0f);
    assert_int_equal(hello.conv.fp8_out, AF_FP8_OUT_DTYPE);
    assert_null(strstr(hello.conventions, "fp8"));
}

/* The FP8 precision model (cudnn/sdpa_fp8's): P's scale per format, O rounded to the format;
 * in the text of a worker with an FP8 cap, and read back the same; malformed ones refused. */
static void test_hello_conventions_fp8(void **state) {
    (void)state;
    af_wp_hello hello;
    af_error err = {0};
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"f16\",\"e4m3\",\"e5m2\"],"
                         "\"layouts\":[],\"conventions\":{\"fp8_probs\":{\"e4m3\":64,\"e5m2\":16384},"
                         "\"fp8_out\":\"v_amax\"}}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_true(hello.conv.fp8_probs_scale[0] == 64.0f && hello.conv.fp8_probs_scale[1] == 16384.0f);
    assert_int_equal(hello.conv.fp8_out, AF_FP8_OUT_V_AMAX);
    assert_non_null(strstr(hello.conventions, "\"fp8_probs\":{\"e4m3\":64,\"e5m2\":16384},\"fp8_out\":\"v_amax\"}"));
    af_conventions back;
    assert_int_equal(af_wp_parse_conventions(hello.conventions, &back, &err), AF_OK);
    assert_true(back.fp8_probs_scale[0] == 64.0f && back.fp8_probs_scale[1] == 16384.0f);
    assert_int_equal(back.fp8_out, AF_FP8_OUT_V_AMAX);
    /* one format only; a worker with an FP8 cap and no model lists the defaults */
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"e5m2\"],\"layouts\":[],"
                  "\"conventions\":{\"fp8_probs\":{\"e5m2\":0.5}}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_true(hello.conv.fp8_probs_scale[0] == 0.0f && hello.conv.fp8_probs_scale[1] == 0.5f);
    assert_non_null(strstr(hello.conventions, "\"fp8_probs\":{\"e5m2\":0.5},\"fp8_out\":\"dtype\"}"));
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"e4m3\"],\"layouts\":[]}", NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_non_null(strstr(hello.conventions, "\"fp8_probs\":{},\"fp8_out\":\"dtype\"}"));
    static const struct {
        const char *conv, *why;
    } bad[] = {{"{\"fp8_probs\":64}", "fp8_probs must be an object"},
               {"{\"fp8_probs\":{\"e3m4\":64}}", "unknown FP8 format"},
               {"{\"fp8_probs\":{\"e4m3\":48}}", "power of two"},
               {"{\"fp8_probs\":{\"e4m3\":0}}", "power of two"},
               {"{\"fp8_probs\":{\"e4m3\":\"64\"}}", "power of two"},
               {"{\"fp8_out\":\"e4m3\"}", "fp8_out must be"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
                 "\"conventions\":%s}", bad[i].conv);
        n = make_body(h, NULL, 0);
        assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_ERR_FORMAT);
        if (!strstr(err.msg, bad[i].why)) fail_msg("%s: \"%s\" does not say %s", bad[i].conv, err.msg, bad[i].why);
    }
}

static void test_hello_malformed(void **state) {
    (void)state;
    static const struct {
        const char *header;
        const char *needle;
    } bad[] = {
        {"{\"type\":\"hello\",\"protocol\":2,\"name\":\"m\",\"caps\":[],\"layouts\":[]}", "protocol 2"},
        {"{\"type\":\"hello\",\"name\":\"m\",\"caps\":[],\"layouts\":[]}", "protocol"},
        {"{\"type\":\"result\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[]}", "expected a hello"},
        {"{\"type\":\"hello\",\"protocol\":1,\"caps\":[],\"layouts\":[]}", "no name"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"warp\"],\"layouts\":[]}", "unknown capability"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[\"nchw\"]}", "unknown layout"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],\"dtypes\":[\"f64\"]}",
         "unknown dtype"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],\"limits\":{\"max_seq\":-1}}",
         "limits.max_seq"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"masked_rows\":\"one\"}}",
         "masked_rows"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"masked_rows\":{\"f64\":\"nan\"}}}",
         "masked_rows: unknown dtype \"f64\""},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"masked_rows\":{\"f16\":\"half\"}}}",
         "masked_rows.f16 must be"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"masked_keys\":\"add\"}}",
         "masked_keys"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"denormals\":\"ftz\"}}",
         "denormals"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"scores\":\"f16\"}}",
         "conventions.scores"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"scores\":[\"f64\"]}}",
         "conventions.scores dtype"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],"
         "\"conventions\":{\"products\":\"f16\"}}",
         "conventions.products"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[],\"compile_key\":[\"values\"]}",
         "unknown compile_key field"},
        {"{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":\"f32\",\"layouts\":[]}", "array of names"},
        {"[1, 2]", "not a JSON object"},
        {"{\"type\":\"hello\"", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        af_wp_hello hello;
        af_error err = {0};
        size_t n = make_body(bad[i].header, NULL, 0);
        expect_format(af_wp_parse_hello(body, n, &hello, &err), &err, bad[i].needle);
    }
    /* a hello with payload bytes */
    af_wp_hello hello;
    af_error err = {0};
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[]}", "xy", 2);
    expect_format(af_wp_parse_hello(body, n, &hello, &err), &err, "payload");
}

/* --- result --------------------------------------------------------------------------------- */

static const char *const result_fmt =
    "{\"type\":\"result\",\"id\":%s,\"status\":\"%s\",\"layout\":\"%s\",\"tensors\":[{\"name\":\"out\",\"dtype\":"
    "\"%s\",\"shape\":[%s],\"strides\":[%s],\"offset\":%s}%s]%s}";

/* A result header from its variable parts. */
static const char *result_header(const char *id, const char *status, const char *layout, const char *dtype,
                                 const char *shape, const char *strides, const char *offset,
                                 const char *more_tensors, const char *more) {
    static char h[2048];
    snprintf(h, sizeof h, result_fmt, id, status, layout, dtype, shape, strides, offset, more_tensors, more);
    return h;
}

static void test_result_ok_bhsd(void **state) {
    (void)state;
    af_case c = small_case();
    float vals[12];
    for (int e = 0; e < 12; e++) vals[e] = (float)e + 0.5f;
    size_t n = make_body(result_header("7", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "",
                                       ",\"timings\":{\"compile_s\":0.25,\"run_s\":0.001}"),
                         vals, sizeof vals);
    af_wp_result r;
    const uint8_t *payload;
    af_error err;
    assert_int_equal(af_wp_parse_result(body, n, 7, &c, NULL, &r, &payload, &err), AF_OK);
    assert_int_equal(r.status, AF_WP_OK);
    assert_int_equal(r.layout, AF_LAYOUT_BHSD);
    assert_true(r.compile_s == 0.25);
    assert_true(r.run_s == 0.001);
    double dst[12];
    af_tensor t;
    size_t ne[4] = {1, 2, 3, 2};
    af_tensor_contiguous(&t, AF_F64, 4, ne);
    t.data = dst;
    af_wp_copy_out(&r, payload, &c, &t);
    for (int e = 0; e < 12; e++) assert_true(dst[e] == (double)e + 0.5);
}

/* The hello's repeat declarations (docs/worker-protocol.md): deterministic passes and
 * batch_invariant, as AF_TRAIT_* bits; defaults 0; anything but booleans refused. */
static void test_hello_traits(void **state) {
    (void)state;
    af_wp_hello hello;
    af_error err;
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[\"bhsd\"],"
                         "\"deterministic\":{\"forward\":true,\"backward\":false},\"batch_invariant\":true}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.traits, AF_TRAIT_NONDET_BACKWARD | AF_TRAIT_BATCH_INVARIANT);
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[\"bhsd\"],"
                  "\"deterministic\":{\"forward\":false}}",
                  NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.traits, AF_TRAIT_NONDET_FORWARD);
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[\"bhsd\"]}", NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &hello, &err), AF_OK);
    assert_int_equal(hello.traits, 0);
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[\"bhsd\"],"
                  "\"deterministic\":{\"forward\":1}}",
                  NULL, 0);
    expect_format(af_wp_parse_hello(body, n, &hello, &err), &err, "deterministic.forward");
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[],\"layouts\":[\"bhsd\"],"
                  "\"batch_invariant\":\"yes\"}",
                  NULL, 0);
    expect_format(af_wp_parse_hello(body, n, &hello, &err), &err, "batch_invariant");
}

/* A result's guard_writes: each entry as written; an entry of count 0 is no write; more than
 * 8, an unknown margin or a missing member refused. */
static void test_result_guard_writes(void **state) {
    (void)state;
    af_case c = small_case();
    float vals[12] = {0};
    af_wp_result r;
    const uint8_t *payload;
    af_error err;
    size_t n = make_body(result_header("4", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "",
                                       ",\"guard_writes\":[{\"buffer\":\"out\",\"margin\":\"after\",\"offset\":3,"
                                       "\"count\":2},{\"buffer\":\"kv_cache\",\"margin\":\"page_tail\",\"offset\":0,"
                                       "\"count\":0},{\"buffer\":\"kv_cache\",\"margin\":\"null_page\",\"offset\":17,"
                                       "\"count\":1}]"),
                         vals, sizeof vals);
    assert_int_equal(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), AF_OK);
    assert_int_equal(r.guard.n, 2);
    assert_string_equal(r.guard.w[0].buffer, "out");
    assert_int_equal(r.guard.w[0].margin, AF_MARGIN_AFTER);
    assert_int_equal(r.guard.w[0].offset, 3);
    assert_int_equal(r.guard.w[0].count, 2);
    assert_string_equal(r.guard.w[1].buffer, "kv_cache");
    assert_int_equal(r.guard.w[1].margin, AF_MARGIN_NULL_PAGE);
    assert_int_equal(r.guard.w[1].offset, 17);
    n = make_body(result_header("4", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", ",\"guard_writes\":[]"), vals,
                  sizeof vals);
    assert_int_equal(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), AF_OK);
    assert_int_equal(r.guard.n, 0);
    static const char *const bad[] = {
        ",\"guard_writes\":{}",
        ",\"guard_writes\":[{\"buffer\":\"out\",\"margin\":\"inside\",\"offset\":0,\"count\":1}]",
        ",\"guard_writes\":[{\"buffer\":\"out\",\"margin\":\"before\",\"count\":1}]",
        ",\"guard_writes\":[{\"margin\":\"before\",\"offset\":0,\"count\":1}]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = make_body(result_header("4", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", bad[i]), vals, sizeof vals);
        expect_format(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), &err, "guard_writes");
    }
    char many[2048] = ",\"guard_writes\":[";
    for (int i = 0; i < 9; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s{\"buffer\":\"out\",\"margin\":\"after\",\"offset\":%d,"
                 "\"count\":1}", i ? "," : "", i);
    snprintf(many + strlen(many), sizeof many - strlen(many), "]");
    n = make_body(result_header("4", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", many), vals, sizeof vals);
    expect_format(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), &err, "at most 8");
}

/* The f16 bits of x, a non-negative value that f16 holds exactly (normal or 0). */
static uint16_t f16_exact(float x) {
    if (x == 0.0f) return 0;
    int e;
    float m = frexpf(x, &e); /* x = m 2^e, m in [0.5, 1) */
    return (uint16_t)((unsigned)(e - 1 + 15) << 10 | (unsigned)((m * 2.0f - 1.0f) * 1024.0f));
}

/* out in bshd [B, S, H, D], f16, at byte offset 6 with padded rows: element (b, h, i, d)
 * holds 10 * h + i + d / 4 (exact in f16); the copy must give it in [B, Hq, Sq, Dv] order. */
static void test_result_ok_bshd_f16_strided(void **state) {
    (void)state;
    af_case c = small_case();
    /* strides (bytes): d 2, h 6 (one pad element after each head's 2 values), s 12, b 36 */
    uint16_t buf[3 + 18];
    memset(buf, 0xff, sizeof buf); /* pad: NaN, must not be read */
    for (size_t h = 0; h < 2; h++)
        for (size_t i = 0; i < 3; i++)
            for (size_t d = 0; d < 2; d++) {
                float x = 10.0f * (float)h + (float)i + (float)d / 4.0f;
                buf[3 + i * 6 + h * 3 + d] = f16_exact(x);
            }
    size_t n = make_body(result_header("1", "ok", "bshd", "f16", "1,3,2,2", "36,12,6,2", "6", "", ""), buf,
                         sizeof buf - 2); /* the last pad element is not needed */
    af_wp_result r;
    const uint8_t *payload;
    af_error err;
    assert_int_equal(af_wp_parse_result(body, n, 1, &c, NULL, &r, &payload, &err), AF_OK);
    assert_int_equal(r.layout, AF_LAYOUT_BSHD);
    float dst[12];
    af_tensor t;
    size_t ne[4] = {1, 2, 3, 2};
    af_tensor_contiguous(&t, AF_F32, 4, ne);
    t.data = dst;
    af_wp_copy_out(&r, payload, &c, &t);
    for (size_t h = 0; h < 2; h++)
        for (size_t i = 0; i < 3; i++)
            for (size_t d = 0; d < 2; d++)
                assert_true(dst[(h * 3 + i) * 2 + d] == 10.0f * (float)h + (float)i + (float)d / 4.0f);
}

static void test_result_unsupported_and_error(void **state) {
    (void)state;
    af_case c = small_case();
    af_wp_result r;
    const uint8_t *payload;
    af_error err;
    size_t n = make_body("{\"type\":\"result\",\"id\":3,\"status\":\"unsupported\",\"reason\":\"no GQA\"}", NULL, 0);
    assert_int_equal(af_wp_parse_result(body, n, 3, &c, NULL, &r, &payload, &err), AF_OK);
    assert_int_equal(r.status, AF_WP_UNSUPPORTED);
    assert_string_equal(r.message, "no GQA");
    n = make_body("{\"type\":\"result\",\"id\":3,\"status\":\"error\",\"message\":\"RuntimeError: x\"}", NULL, 0);
    assert_int_equal(af_wp_parse_result(body, n, 3, &c, NULL, &r, &payload, &err), AF_OK);
    assert_int_equal(r.status, AF_WP_ERROR);
    assert_string_equal(r.message, "RuntimeError: x");
}

/* A batch answer: ok (its out at payload offset 48), unsupported, error, ok again (out at
 * 0: items may share and reorder the payload freely); then the ways a batch answer breaks. */
static void test_result_batch(void **state) {
    (void)state;
    af_case c = small_case();
    const af_case *cases[4] = {&c, &c, &c, &c};
    uint64_t ids[4] = {10, 11, 12, 13};
    float vals[24];
    for (int e = 0; e < 24; e++) vals[e] = (float)e;
    const char *hdr = "{\"type\":\"result\",\"batch\":["
                      "{\"id\":10,\"status\":\"ok\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"f32\","
                      "\"shape\":[1,2,3,2],\"strides\":[48,24,8,4],\"offset\":48}],\"timings\":{\"run_s\":0.5}},"
                      "{\"id\":11,\"status\":\"unsupported\",\"reason\":\"no\"},"
                      "{\"id\":12,\"status\":\"error\",\"message\":\"E: x\"},"
                      "{\"id\":13,\"status\":\"ok\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"f32\","
                      "\"shape\":[1,2,3,2],\"strides\":[48,24,8,4],\"offset\":0}]}]}";
    size_t n = make_body(hdr, vals, sizeof vals);
    af_wp_result r[4];
    const uint8_t *payload;
    af_error err;
    assert_int_equal(af_wp_parse_batch(body, n, ids, cases, 4, NULL, r, &payload, &err), AF_OK);
    assert_int_equal(r[0].status, AF_WP_OK);
    assert_true(r[0].run_s == 0.5);
    assert_int_equal(r[1].status, AF_WP_UNSUPPORTED);
    assert_string_equal(r[1].message, "no");
    assert_int_equal(r[2].status, AF_WP_ERROR);
    assert_string_equal(r[2].message, "E: x");
    assert_int_equal(r[3].status, AF_WP_OK);
    float dst[12];
    af_tensor t;
    size_t ne[4] = {1, 2, 3, 2};
    af_tensor_contiguous(&t, AF_F32, 4, ne);
    t.data = dst;
    af_wp_copy_out(&r[0], payload, &c, &t);
    for (int e = 0; e < 12; e++) assert_true(dst[e] == (float)(12 + e));
    af_wp_copy_out(&r[3], payload, &c, &t);
    for (int e = 0; e < 12; e++) assert_true(dst[e] == (float)e);
    /* three answers to four requests */
    assert_int_equal(af_wp_parse_batch(body, n, ids, cases, 3, NULL, r, &payload, &err), AF_ERR_FORMAT);
    expect_format(AF_ERR_FORMAT, &err, "answered with 4 results");
    /* an item for another request */
    uint64_t wrong[4] = {10, 11, 99, 13};
    expect_format(af_wp_parse_batch(body, n, wrong, cases, 4, NULL, r, &payload, &err), &err, "batch item 2");
    /* a payload larger than every item's tensors need */
    n = make_body(hdr, vals, sizeof vals);
    body[n] = 0;
    expect_format(af_wp_parse_batch(body, n + 1, ids, cases, 4, NULL, r, &payload, &err), &err, "larger than");
    /* not a batch */
    n = make_body("{\"type\":\"result\",\"id\":10,\"status\":\"error\",\"message\":\"x\"}", NULL, 0);
    expect_format(af_wp_parse_batch(body, n, ids, cases, 1, NULL, r, &payload, &err), &err, "without a batch array");
}

/* A worker that faulted on an item says so: ok, crash (its message), not_run, not_run;
 * crash and not_run out of that order, or in a single result, break the protocol. */
static void test_result_batch_fault(void **state) {
    (void)state;
    af_case c = small_case();
    const af_case *cases[4] = {&c, &c, &c, &c};
    uint64_t ids[4] = {10, 11, 12, 13};
    float vals[12] = {0};
    af_wp_result r[4];
    const uint8_t *payload;
    af_error err;
    const char *ok = "{\"id\":10,\"status\":\"ok\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"f32\","
                     "\"shape\":[1,2,3,2],\"strides\":[48,24,8,4],\"offset\":0}]}";
    char hdr[1024];
    snprintf(hdr, sizeof hdr,
             "{\"type\":\"result\",\"batch\":[%s,{\"id\":11,\"status\":\"crash\",\"message\":\"AcceleratorError: "
             "CUDA error: misaligned address\"},{\"id\":12,\"status\":\"not_run\"},{\"id\":13,\"status\":\"not_run\"}]}",
             ok);
    size_t n = make_body(hdr, vals, sizeof vals);
    assert_int_equal(af_wp_parse_batch(body, n, ids, cases, 4, NULL, r, &payload, &err), AF_OK);
    assert_int_equal(r[0].status, AF_WP_OK);
    assert_int_equal(r[1].status, AF_WP_CRASH);
    assert_string_equal(r[1].message, "AcceleratorError: CUDA error: misaligned address");
    assert_int_equal(r[2].status, AF_WP_NOT_RUN);
    assert_int_equal(r[3].status, AF_WP_NOT_RUN);
    /* the last item may be the one that crashed */
    snprintf(hdr, sizeof hdr, "{\"type\":\"result\",\"batch\":[%s,{\"id\":11,\"status\":\"crash\"}]}", ok);
    n = make_body(hdr, vals, sizeof vals);
    assert_int_equal(af_wp_parse_batch(body, n, ids, cases, 2, NULL, r, &payload, &err), AF_OK);
    assert_int_equal(r[1].status, AF_WP_CRASH);
    assert_string_equal(r[1].message, "(no message)");
    /* an item run after the crash */
    snprintf(hdr, sizeof hdr,
             "{\"type\":\"result\",\"batch\":[{\"id\":10,\"status\":\"crash\",\"message\":\"x\"},%s]}", ok);
    char *id = strstr(hdr, "\"id\":10,\"status\":\"ok\"");
    assert_non_null(id);
    id[6] = '1'; /* the ok item answers id 11 */
    n = make_body(hdr, vals, sizeof vals);
    expect_format(af_wp_parse_batch(body, n, ids, cases, 2, NULL, r, &payload, &err), &err, "after a crash was run");
    /* not_run with no crash before it */
    n = make_body("{\"type\":\"result\",\"batch\":[{\"id\":10,\"status\":\"not_run\"}]}", NULL, 0);
    expect_format(af_wp_parse_batch(body, n, ids, cases, 1, NULL, r, &payload, &err), &err, "not_run without a crash");
    /* a single result cannot say crash or not_run */
    n = make_body("{\"type\":\"result\",\"id\":10,\"status\":\"crash\",\"message\":\"x\"}", NULL, 0);
    expect_format(af_wp_parse_result(body, n, 10, &c, NULL, r, &payload, &err), &err, "unknown status \"crash\"");
    n = make_body("{\"type\":\"result\",\"id\":10,\"status\":\"not_run\"}", NULL, 0);
    expect_format(af_wp_parse_result(body, n, 10, &c, NULL, r, &payload, &err), &err, "unknown status \"not_run\"");
}

/* A batch run frame: one header, the items' tensors one after the other in the payload,
 * each item's entries pointing at its own bytes. */
static void test_run_frame_batch(void **state) {
    (void)state;
    af_case c[2] = {small_case(), small_case()};
    c[1].t[AF_Q].seed ^= 77; /* other values, the same structure */
    af_inputs *in[2] = {af_inputs_create(), af_inputs_create()};
    af_error err;
    const af_case_tensors *ts[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(af_inputs_generate(in[i], &c[i], &err), AF_OK);
        ts[i] = af_inputs_get(in[i]);
    }
    af_jw hdr = {0};
    af_wp_part parts[2 * AF_WP_MAX_PARTS];
    size_t np = 0;
    uint64_t ids[2] = {5, 6};
    assert_int_equal(af_wp_encode_batch(&hdr, ids, ts, 2, parts, &np, &err), AF_OK);
    assert_int_equal(np, 6); /* q, k, v of each */
    /* the frame as the worker reads it */
    size_t total = hdr.len - 4;
    for (size_t k = 0; k < np; k++) total += parts[k].len;
    uint8_t *frame = malloc(total);
    memcpy(frame, hdr.data + 4, hdr.len - 4);
    size_t off = hdr.len - 4;
    for (size_t k = 0; k < np; k++) {
        memcpy(frame + off, parts[k].data, parts[k].len);
        off += parts[k].len;
    }
    cJSON *j = cJSON_ParseWithLength((const char *)frame, hdr.len - 5);
    assert_non_null(j);
    const cJSON *batch = cJSON_GetObjectItem(j, "batch");
    assert_int_equal(cJSON_GetArraySize(batch), 2);
    const uint8_t *payload = frame + hdr.len - 4;
    for (int i = 0; i < 2; i++) {
        const cJSON *item = cJSON_GetArrayItem(batch, i);
        assert_int_equal((int)cJSON_GetObjectItem(item, "id")->valuedouble, (int)ids[i]);
        const cJSON *q = cJSON_GetArrayItem(cJSON_GetObjectItem(item, "tensors"), 0);
        size_t qoff = (size_t)cJSON_GetObjectItem(q, "offset")->valuedouble;
        /* the first q value of this item is its own */
        float got;
        memcpy(&got, payload + qoff, 4);
        assert_true(got == ((const float *)ts[i]->q.data)[0]);
    }
    cJSON_Delete(j);
    free(frame);
    af_jw_free(&hdr);
    af_inputs_destroy(in[0]);
    af_inputs_destroy(in[1]);
}

static void test_result_malformed(void **state) {
    (void)state;
    af_case c = small_case();
    uint8_t zeros[256] = {0};
    static const struct {
        const char *id, *status, *layout, *dtype, *shape, *strides, *offset, *more;
        size_t plen;
        const char *needle;
    } bad[] = {
        /* the one good frame, then one fault each */
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 48, NULL},
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 47, "outside the payload"},
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "4", "", 48, "outside the payload"},
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 52, "larger than its tensors need"},
        {"5", "maybe", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 48, "unknown status"},
        {"6", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 48, "result for id"},
        {"\"5\"", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 48, "result for id"},
        {"5", "ok", "bhsd", "f32", "1,2,4,2", "64,32,8,4", "0", "", 64, "out has shape [1,2,4,2]"},
        {"5", "ok", "bhsd", "f32", "1,2,3", "24,8,4", "0", "", 20, "out has shape [1,2,3]"},
        {"5", "ok", "bshd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 48, "out has shape"},
        {"5", "ok", "qkv_bs3hd", "f32", "1,2,3,2", "48,24,8,4", "0", "", 48, "layout qkv_bs3hd"},
        {"5", "ok", "bhsd", "bool", "1,2,3,2", "12,6,2,1", "0", "", 12, "not a float dtype"},
        {"5", "ok", "bhsd", "f8", "1,2,3,2", "48,24,8,4", "0", "", 48, "unknown dtype"},
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8", "0", "", 48, "4 dims but 3 strides"},
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,-24,8,4", "0", "", 48, "non-negative"},
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0.5", "", 48, "offset"},
        /* a second tensor whose byte extent, 2^32 * 2^32 + 1, is 1 in 64-bit size_t arithmetic */
        {"5", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0",
         ",{\"name\":\"junk\",\"dtype\":\"bool\",\"shape\":[4294967297],\"strides\":[4294967296]}",
         48, "tensor junk: elements up to byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        af_wp_result r;
        const uint8_t *payload;
        af_error err = {0};
        size_t n = make_body(result_header(bad[i].id, bad[i].status, bad[i].layout, bad[i].dtype, bad[i].shape,
                                           bad[i].strides, bad[i].offset, bad[i].more, ""),
                             zeros, bad[i].plen);
        af_status st = af_wp_parse_result(body, n, 5, &c, NULL, &r, &payload, &err);
        if (!bad[i].needle) {
            if (st != AF_OK) fail_msg("frame %zu: %s", i, err.msg);
            continue;
        }
        expect_format(st, &err, bad[i].needle);
    }
    /* no tensor out, no tensors, no status, bad JSON, no newline, another type */
    static const struct {
        const char *header;
        const char *needle;
    } raw[] = {
        {"{\"type\":\"result\",\"id\":5,\"status\":\"ok\",\"tensors\":[]}", "without tensor out"},
        {"{\"type\":\"result\",\"id\":5,\"status\":\"ok\"}", "without a tensors array"},
        {"{\"type\":\"result\",\"id\":5}", "without a status"},
        {"{\"type\":\"result\",\"id\":,\"status\":\"ok\"}", "not valid JSON"},
        {"{\"type\":\"hello\",\"id\":5,\"status\":\"ok\"}", "expected a result frame"},
        {"this is not JSON {", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        af_wp_result r;
        const uint8_t *payload;
        af_error err = {0};
        size_t n = make_body(raw[i].header, NULL, 0);
        expect_format(af_wp_parse_result(body, n, 5, &c, NULL, &r, &payload, &err), &err, raw[i].needle);
    }
    af_wp_result r;
    const uint8_t *payload;
    af_error err = {0};
    const char *h = "{\"type\":\"result\",\"id\":5,\"status\":\"ok\",\"tensors\":[]}";
    memcpy(body, h, strlen(h)); /* no newline after the header */
    expect_format(af_wp_parse_result(body, strlen(h), 5, &c, NULL, &r, &payload, &err), &err, "newline");
}

/* A header over 1 MiB is refused as such, whatever follows. */
static void test_result_header_over_limit(void **state) {
    (void)state;
    af_case c = small_case();
    size_t n = (1u << 20) + 100;
    const char *open = "{\"type\":\"result\",\"id\":5,\"pad\":\"";
    memcpy(body, open, strlen(open));
    memset(body + strlen(open), 'x', n - strlen(open));
    memcpy(body + n - 3, "\"}\n", 3);
    af_wp_result r;
    const uint8_t *payload;
    af_error err = {0};
    expect_format(af_wp_parse_result(body, n, 5, &c, NULL, &r, &payload, &err), &err, "over 1048576 bytes");
}

/* Dropout: the keep mask is checked for shape, and required under conventions.dropout
 * "keep_mask". */
static void test_result_keep_mask(void **state) {
    (void)state;
    af_case c = small_case();
    c.dropout_p = 0.5;
    af_wp_hello h;
    memset(&h, 0, sizeof h);
    h.dropout = AF_WP_DROPOUT_KEEP_MASK;
    uint8_t pay[48 + 24];
    memset(pay, 0, sizeof pay);
    for (size_t e = 0; e < 24; e++) pay[48 + e] = (uint8_t)(e % 3 == 0);
    af_wp_result r;
    const uint8_t *payload;
    af_error err = {0};
    size_t n = make_body(result_header("2", "ok", "bhsd", "f32", "1,2,3,2", "48,24,8,4", "0", "", ""), pay, 48);
    expect_format(af_wp_parse_result(body, n, 2, &c, &h, &r, &payload, &err), &err, "no dropout_keep");
    const char *with_keep =
        "{\"type\":\"result\",\"id\":2,\"status\":\"ok\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"f32\","
        "\"shape\":[1,2,3,2],\"strides\":[48,24,8,4],\"offset\":0},{\"name\":\"dropout_keep\",\"dtype\":\"bool\","
        "\"shape\":[1,2,3,%d],\"strides\":[%d,%d,%d,1],\"offset\":48}]}";
    char hdr[512];
    snprintf(hdr, sizeof hdr, with_keep, 3, 18, 9, 3); /* Sk is 4 */
    n = make_body(hdr, pay, 48 + 18);
    expect_format(af_wp_parse_result(body, n, 2, &c, &h, &r, &payload, &err), &err, "dropout_keep is not");
    snprintf(hdr, sizeof hdr, with_keep, 4, 24, 12, 4);
    n = make_body(hdr, pay, sizeof pay);
    assert_int_equal(af_wp_parse_result(body, n, 2, &c, &h, &r, &payload, &err), AF_OK);
    assert_true(r.has_keep);
    uint8_t keep[24];
    af_wp_copy_keep(&r, payload, &c, keep);
    for (size_t e = 0; e < 24; e++) assert_int_equal(keep[e], e % 3 == 0);
}

/* Softmax statistics: the hello's lse_base (2 or absent), a result's lse checked for shape and
 * dtype and against the cap, copied in natural log (base 2 times ln 2), and want_lse in a run
 * frame only when asked. */
static void test_result_lse(void **state) {
    (void)state;
    af_wp_hello h;
    af_error err = {0};
    size_t n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"f32\",\"lse\"],"
                         "\"layouts\":[\"bhsd\"],\"lse_base\":2}",
                         NULL, 0);
    assert_int_equal(af_wp_parse_hello(body, n, &h, &err), AF_OK);
    assert_true(h.caps & AF_CAP_LSE);
    assert_true(h.lse_base2);
    n = make_body("{\"type\":\"hello\",\"protocol\":1,\"name\":\"m\",\"caps\":[\"lse\"],\"layouts\":[\"bhsd\"],"
                  "\"lse_base\":10}",
                  NULL, 0);
    af_wp_hello bad;
    expect_format(af_wp_parse_hello(body, n, &bad, &err), &err, "lse_base must be 2");
    af_case c = small_case();
    assert_true(af_wp_want_lse(&h, &c));
    float pay[12 + 6];
    for (int e = 0; e < 12; e++) pay[e] = 0.5f;
    for (int e = 0; e < 6; e++) pay[12 + e] = (float)e; /* log2 of 1, 2, 4, ... */
    const char *with_lse =
        "{\"type\":\"result\",\"id\":3,\"status\":\"ok\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"f32\","
        "\"shape\":[1,2,3,2],\"strides\":[48,24,8,4],\"offset\":0},{\"name\":\"lse\",\"dtype\":\"%s\","
        "\"shape\":[1,2,%d],\"strides\":[24,12,4],\"offset\":48}]}";
    char hdr[512];
    af_wp_result r;
    const uint8_t *payload;
    snprintf(hdr, sizeof hdr, with_lse, "f32", 2); /* Sq is 3 */
    n = make_body(hdr, pay, sizeof pay);
    expect_format(af_wp_parse_result(body, n, 3, &c, &h, &r, &payload, &err), &err, "lse is not");
    snprintf(hdr, sizeof hdr, with_lse, "bool", 3);
    n = make_body(hdr, pay, sizeof pay);
    expect_format(af_wp_parse_result(body, n, 3, &c, &h, &r, &payload, &err), &err, "lse is not");
    snprintf(hdr, sizeof hdr, with_lse, "f32", 3);
    n = make_body(hdr, pay, sizeof pay);
    af_wp_hello nocap = h;
    nocap.caps &= ~(uint32_t)AF_CAP_LSE;
    expect_format(af_wp_parse_result(body, n, 3, &c, &nocap, &r, &payload, &err), &err, "no cap lse");
    assert_int_equal(af_wp_parse_result(body, n, 3, &c, &h, &r, &payload, &err), AF_OK);
    assert_true(r.has_lse);
    double got[6];
    af_tensor dst;
    af_backend_lse_shape(&c, &dst);
    dst.data = got;
    af_wp_copy_lse(&r, payload, &c, true, &dst);
    for (int e = 0; e < 6; e++) assert_true(fabs(got[e] - (double)e * log(2.0)) <= 1e-15 * (double)e);
    af_wp_copy_lse(&r, payload, &c, false, &dst);
    for (int e = 0; e < 6; e++) assert_true(got[e] == (double)e);
    /* run frames: want_lse only when asked; never for a backward case */
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    af_jw hdrw = {0};
    af_wp_part parts[AF_WP_MAX_PARTS];
    size_t np;
    char txt[8192];
    assert_int_equal(af_wp_encode_run_lse(&hdrw, 7, af_inputs_get(in), true, parts, &np, &err), AF_OK);
    assert_true(hdrw.len - 4 < sizeof txt);
    memcpy(txt, hdrw.data + 4, hdrw.len - 4), txt[hdrw.len - 4] = 0;
    assert_non_null(strstr(txt, "\"want_lse\":true"));
    assert_int_equal(af_wp_encode_run(&hdrw, 7, af_inputs_get(in), parts, &np, &err), AF_OK);
    memcpy(txt, hdrw.data + 4, hdrw.len - 4), txt[hdrw.len - 4] = 0;
    assert_null(strstr(txt, "want_lse"));
    c.bwd.grads = 1;
    assert_false(af_wp_want_lse(&h, &c));
    af_jw_free(&hdrw);
    af_inputs_destroy(in);
}

/* --- run frames ------------------------------------------------------------------------------ */

static double payload_get(const uint8_t *p, const af_wp_tensor *t, const size_t idx[4]) {
    size_t off = t->offset;
    for (int k = 0; k < 4; k++) off += idx[k] * t->nb[k];
    float f;
    memcpy(&f, p + off, 4);
    return (double)f;
}

/* Encodes the run frame of case c, then reads q, k, v back through the entries the header
 * declares (physical order perm maps canonical (b, h, s, d) to the entry's dims) and
 * compares every element with the case's own views. */
static void check_run_frame(const af_case *c, const int perm[4], int want_entries, const char *first_name) {
    af_inputs *in = af_inputs_create();
    af_error err;
    assert_int_equal(af_inputs_generate(in, c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    af_jw hdr = {0};
    af_wp_part parts[AF_WP_MAX_PARTS];
    size_t np = 0;
    assert_int_equal(af_wp_encode_run(&hdr, 41, t, parts, &np, &err), AF_OK);
    size_t total = hdr.len - 4;
    for (size_t k = 0; k < np; k++) total += parts[k].len;
    const uint8_t *len = (const uint8_t *)hdr.data;
    assert_int_equal((size_t)len[0] | (size_t)len[1] << 8 | (size_t)len[2] << 16 | (size_t)len[3] << 24, total);
    uint8_t *frame = malloc(total);
    assert_non_null(frame);
    memcpy(frame, hdr.data + 4, hdr.len - 4);
    size_t at = hdr.len - 4;
    for (size_t k = 0; k < np; k++) memcpy(frame + at, parts[k].data, parts[k].len), at += parts[k].len;

    af_wp_header hh;
    const uint8_t *payload;
    size_t plen;
    assert_int_equal(af_wp_split(frame, total, &hh, &payload, &plen, &err), AF_OK);
    /* the header read by cJSON, independently of the protocol's own reader */
    const char *hend = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts((const char *)frame, total, &hend, false);
    assert_non_null(j);
    assert_ptr_equal(hend + 1, (const char *)payload);
    assert_string_equal(cJSON_GetObjectItem(j, "type")->valuestring, "run");
    assert_int_equal((int)cJSON_GetObjectItem(j, "id")->valuedouble, 41);
    af_case back;
    assert_int_equal(af_case_from_cjson(&back, cJSON_GetObjectItem(j, "case"), &err), AF_OK);
    assert_true(af_case_equal(&back, c));
    const cJSON *der = cJSON_GetObjectItem(j, "derived");
    assert_true(cJSON_GetObjectItem(der, "scale")->valuedouble == af_case_scale(c));
    const cJSON *ts = cJSON_GetObjectItem(j, "tensors");
    assert_int_equal(cJSON_GetArraySize(ts), want_entries);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(ts, 0), "name")->valuestring, first_name);
    size_t need = 0;
    long tensors = af_js_get(hh.text, hh.tok, 0, "tensors");
    assert_int_equal(hh.tok[tensors].size, want_entries);
    for (uint32_t ti = 0; ti < hh.tok[tensors].size; ti++) {
        af_wp_tensor wt;
        if (af_wp_tensor_parse(&hh, af_js_item(hh.tok, tensors, ti), plen, &wt, &err) != AF_OK) fail_msg("%s", err.msg);
        if (wt.end > need) need = wt.end;
        const af_view *v = NULL;
        if (!strcmp(wt.name, "q")) v = &t->qv;
        if (!strcmp(wt.name, "k")) v = &t->kv;
        if (!strcmp(wt.name, "v")) v = &t->vv;
        if (!strcmp(wt.name, "do")) v = &t->dov;
        if (!v) continue;
        assert_int_equal(wt.ndim, 4);
        for (size_t b = 0; b < v->ne[0]; b++)
            for (size_t h = 0; h < v->ne[1]; h++)
                for (size_t s = 0; s < v->ne[2]; s++)
                    for (size_t d = 0; d < v->ne[3]; d++) {
                        size_t canon[4] = {b, h, s, d}, idx[4];
                        for (int k = 0; k < 4; k++) idx[k] = canon[perm[k]];
                        double want = af_view_get(v, b, h, s, d), got = payload_get(payload, &wt, idx);
                        if (!(want == got || (isnan(want) && isnan(got))))
                            fail_msg("%s[%zu,%zu,%zu,%zu]: %g in the frame, %g in the case", wt.name, b, h, s, d,
                                     got, want);
                    }
    }
    assert_int_equal(need, plen); /* the payload is exactly the tensors */
    cJSON_Delete(j);
    af_wp_header_free(&hh);
    free(frame);
    af_jw_free(&hdr);
    af_inputs_destroy(in);
}

static void test_run_frame_bhsd(void **state) {
    (void)state;
    af_case c = small_case();
    c.kv_heads = 1; /* GQA: k and v have one head */
    c.v_head_dim = 3;
    af_error err;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    const int perm[4] = {0, 1, 2, 3};
    check_run_frame(&c, perm, 3, "q");
}

/* A backward case's frame carries do (bhsd here, padded and in another memory order)
 * after q, k and v, each element the case's. */
static void test_run_frame_backward(void **state) {
    (void)state;
    af_case c = small_case();
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DV;
    c.bwd.dout.pad = 3;
    c.bwd.dout.seed = 99;
    af_error err;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    const int perm[4] = {0, 1, 2, 3};
    check_run_frame(&c, perm, 4, "q");
}

/* A backward case's answer: every gradient asked for and nothing else, each at its shape;
 * dq kept in f16 (its final rounding is the oracle's business), dmask given at the full
 * [B, Hq, Sq, Sk] summed over the dims the mask broadcasts. */
static void test_result_grads(void **state) {
    (void)state;
    af_case c = small_case();
    c.amask.present = true;
    c.amask.dims = AF_MDIM_K; /* [1, 1, 1, Sk] */
    c.amask.dtype = AF_F32;
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DMASK;
    af_case_repair(&c, 0);
    af_error err;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    assert_int_equal(c.bwd.grads, AF_GRAD_DQ | AF_GRAD_DMASK);
    /* payload: out f32 [1,2,3,2] (48 bytes), dq f16 [1,2,3,2] (24), dmask f32 [1,2,3,4] (96) */
    uint8_t pay[48 + 24 + 96];
    memset(pay, 0, sizeof pay);
    for (int e = 0; e < 12; e++) {
        uint16_t h = f16_exact((float)e / 8.0f);
        memcpy(pay + 48 + 2 * e, &h, 2);
    }
    for (int e = 0; e < 24; e++) {
        float x = (float)e;
        memcpy(pay + 72 + 4 * e, &x, 4);
    }
    static const char *fmt =
        "{\"type\":\"result\",\"id\":4,\"status\":\"ok\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"f32\","
        "\"shape\":[1,2,3,2],\"strides\":[48,24,8,4],\"offset\":0}%s%s]}";
    static const char *dq = ",{\"name\":\"dq\",\"dtype\":\"f16\",\"shape\":[1,2,%d,2],\"strides\":[24,12,4,2],"
                            "\"offset\":48}";
    static const char *dmask = ",{\"name\":\"%s\",\"dtype\":\"f32\",\"shape\":[1,2,3,%d],"
                               "\"strides\":[96,48,16,4],\"offset\":72}";
    char hdr[1024], a[256], b[256];
    af_wp_result r;
    const uint8_t *payload;
    snprintf(a, sizeof a, dq, 3);
    snprintf(hdr, sizeof hdr, fmt, a, "");
    size_t n = make_body(hdr, pay, 72);
    expect_format(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), &err, "asks for dmask");
    snprintf(b, sizeof b, dmask, "dk", 4);
    snprintf(hdr, sizeof hdr, fmt, a, b);
    n = make_body(hdr, pay, sizeof pay);
    expect_format(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), &err, "dk, which the case does not");
    snprintf(b, sizeof b, dmask, "dmask", 3);
    snprintf(hdr, sizeof hdr, fmt, a, b);
    n = make_body(hdr, pay, sizeof pay);
    expect_format(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), &err, "dmask has shape");
    snprintf(a, sizeof a, dq, 2);
    snprintf(b, sizeof b, dmask, "dmask", 4);
    snprintf(hdr, sizeof hdr, fmt, a, b);
    n = make_body(hdr, pay, sizeof pay);
    expect_format(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), &err, "dq has shape [1,2,2,2]");
    snprintf(a, sizeof a, dq, 3);
    snprintf(hdr, sizeof hdr, fmt, a, b);
    n = make_body(hdr, pay, sizeof pay);
    assert_int_equal(af_wp_parse_result(body, n, 4, &c, NULL, &r, &payload, &err), AF_OK);
    double gq[12], gm[24];
    af_tensor t;
    t.data = gq;
    assert_int_equal(af_wp_copy_grad(&r, payload, &c, 0, &t, &err), AF_OK);
    assert_int_equal(t.dtype, AF_F16);
    assert_int_equal(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3], 12);
    for (int e = 0; e < 12; e++) assert_true(af_f16_to_f32(((uint16_t *)gq)[e]) == (float)e / 8.0f);
    t.data = gm;
    assert_int_equal(af_wp_copy_grad(&r, payload, &c, 3, &t, &err), AF_OK);
    assert_int_equal(t.dtype, AF_F64);
    assert_true(t.ndim == 4 && t.ne[0] == 1 && t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 4);
    /* element (h, i, j) of the full gradient holds 12 h + 4 i + j: summed over h and i */
    for (int j = 0; j < 4; j++) {
        double want = 0;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 3; i++) want += 12 * h + 4 * i + j;
        assert_true(gm[j] == want);
    }
}

static void test_run_frame_packed(void **state) {
    (void)state;
    af_case c = small_case();
    c.kv_len = c.q_len; /* packed QKV: one buffer */
    for (int w = 0; w < AF_QKV_COUNT; w++) c.t[w].layout = AF_LAYOUT_QKV_BS3HD;
    af_error err;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    const int perm[4] = {0, 2, 1, 3}; /* views are [B, S, H, D] */
    check_run_frame(&c, perm, 4, "qkv");
}

/* --- the process path ------------------------------------------------------------------------ */

static char bindir[4096];

static af_backend *open_frame_worker(const char *mode) {
    char spec[4200];
    snprintf(spec, sizeof spec, "worker:%s/tests/frame_worker %s", bindir, mode);
    af_backend *be = NULL;
    af_error err;
    if (af_backend_open(spec, &be, &err) != AF_OK) fail_msg("open %s: %s", spec, err.msg);
    return be;
}

/* Runs the 1 x 1 x S x 1 case; returns the status, err the message. */
/* Runs the default case with q_len queries alone; its result into *res when not NULL. */
static af_status run_case_result(af_backend *be, uint32_t q_len, af_run_result *res, af_error *err) {
    af_case c;
    af_case_default(&c);
    c.q_len = q_len;
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, &c, err), AF_OK);
    af_tensor out;
    af_backend_out_shape(be, &c, &out);
    double mem[8];
    out.data = mem;
    af_run_result r;
    af_status st = af_backend_execute(be, af_inputs_get(in), &out, NULL, NULL, res ? res : &r, err);
    af_inputs_destroy(in);
    return st;
}

static af_status run_case(af_backend *be, uint32_t q_len, af_error *err) { return run_case_result(be, q_len, NULL, err); }

static void test_process_malformed(void **state) {
    (void)state;
    static const struct {
        const char *mode, *needle;
    } modes[] = {
        {"short", "outside the payload"},
        {"badjson", "not valid JSON"},
        {"nonewline", "not followed by a newline"},
        {"status", "unknown status \"maybe\""},
        {"shape", "out has shape [1,1,3,1]"},
        {"id", "result for id"},
        {"dtype", "not a float dtype"},
        {"extra", "larger than its tensors need"},
        {"noout", "without tensor out"},
        {"huge", "frame of 4294967280 bytes"},
        {"empty", "empty frame"},
        {"hello", "expected a result frame"},
        {"twice", "bytes after its frame"},
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        af_backend *be = open_frame_worker(modes[i].mode);
        af_error err = {0};
        if (run_case(be, 1, &err) != AF_OK) fail_msg("%s: a good case failed: %s", modes[i].mode, err.msg);
        af_run_result res;
        af_status st = run_case_result(be, 2, &res, &err);
        char want[300];
        snprintf(want, sizeof want, "%s: protocol: ", af_backend_name(be));
        if (st != AF_ERR_BACKEND || strncmp(err.msg, want, strlen(want)) != 0 || !strstr(err.msg, modes[i].needle))
            fail_msg("%s: want AF_ERR_BACKEND \"%s...%s...\", got %d \"%s\"", modes[i].mode, want, modes[i].needle,
                     (int)st, err.msg);
        /* the result holds the stderr of the process the fault ended */
        assert_int_equal(res.st, st);
        assert_non_null(res.stderr_tail);
        assert_non_null(strstr(res.stderr_tail, "frame_worker: run request"));
        assert_true(res.compile_s == 0.0); /* a fault compiled nothing */
        assert_int_equal(af_backend_ext_of(be)->restarts, 0);
        /* the next case runs in a new process */
        if (run_case(be, 1, &err) != AF_OK) fail_msg("%s: after the fault: %s", modes[i].mode, err.msg);
        assert_int_equal(af_backend_ext_of(be)->restarts, 1);
        af_backend_close(be);
    }
}

static void test_process_truncated_is_crash(void **state) {
    (void)state;
    af_backend *be = open_frame_worker("truncated");
    af_error err = {0};
    af_status st = run_case(be, 2, &err);
    if (st != AF_ERR_CRASH || !strstr(err.msg, "crash: ") || !strstr(err.msg, "inside a frame"))
        fail_msg("want AF_ERR_CRASH ... inside a frame, got %d \"%s\"", (int)st, err.msg);
    assert_int_equal(run_case(be, 1, &err), AF_OK);
    af_backend_close(be);
}

static void test_process_control(void **state) {
    (void)state;
    af_backend *be = open_frame_worker("ok");
    af_error err = {0};
    for (uint32_t s = 1; s <= 4; s++)
        if (run_case(be, s, &err) != AF_OK) fail_msg("q_len %u: %s", s, err.msg);
    assert_int_equal(af_backend_ext_of(be)->restarts, 0);
    assert_int_equal(af_backend_ext_of(be)->runs, 4);
    af_backend_close(be);
}

/* A run alone returns its facts in its result, as a batch's case does: a worker's keep mask
 * (the one its output followed: the reference run with that mask gives the same output),
 * a compile key new only the first time, the stderr tail of its process; an in-process
 * backend's result has its status and no timings. */
static void test_process_run_result(void **state) {
    (void)state;
    char spec[4200];
    snprintf(spec, sizeof spec, "worker:%s/tests/c_worker --dropout keep_mask --out-dtype f64", bindir);
    af_backend *be = NULL, *ref = NULL, *expl = NULL;
    af_error err = {0};
    if (af_backend_open(spec, &be, &err) != AF_OK) fail_msg("open %s: %s", spec, err.msg);
    assert_int_equal(af_backend_open("ref", &ref, &err), AF_OK);
    assert_int_equal(af_backend_open("explicit", &expl, &err), AF_OK);
    af_case c;
    af_case_default(&c);
    c.q_len = 3;
    c.kv_len = 5;
    c.dropout_p = 0.5;
    af_inputs *in = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    double mem[3], want[3];
    float fmem[3];
    af_tensor out, rout, eout;
    af_backend_out_shape(be, &c, &out);
    out.data = mem;
    for (int rep = 0; rep < 2; rep++) {
        af_run_result res;
        if (af_backend_execute(be, af_inputs_get(in), &out, NULL, NULL, &res, &err) != AF_OK) fail_msg("%s", err.msg);
        assert_int_equal(res.st, AF_OK);
        assert_int_equal(res.new_key, rep == 0); /* the same structure: compiled once */
        assert_true(res.wall_s > 0.0);
        assert_non_null(res.stderr_tail);
        assert_non_null(res.dropout_keep);
        /* the reference that follows its keep mask gives its output */
        af_case_tensors t = *af_inputs_get(in);
        t.dropout_keep = res.dropout_keep;
        af_backend_out_shape(ref, &c, &rout);
        rout.data = want;
        assert_int_equal(af_backend_run(ref, &t, &rout, &err), AF_OK);
        for (int i = 0; i < 3; i++) {
            double got = out.dtype == AF_F64 ? mem[i] : (double)((float *)mem)[i];
            if (fabs(got - want[i]) > 1e-6 * (1.0 + fabs(want[i])))
                fail_msg("row %d: worker %.17g, reference with its keep mask %.17g", i, got, want[i]);
        }
    }
    af_run_result res;
    af_backend_out_shape(expl, &c, &eout);
    eout.data = fmem;
    assert_int_equal(af_backend_execute(expl, af_inputs_get(in), &eout, NULL, NULL, &res, &err), AF_OK);
    assert_int_equal(res.st, AF_OK);
    assert_true(res.compile_s == -1.0 && res.run_s == -1.0);
    assert_null(res.stderr_tail);
    assert_null(res.dropout_keep);
    assert_null(af_backend_ext_of(expl));
    af_inputs_destroy(in);
    af_backend_close(be);
    af_backend_close(ref);
    af_backend_close(expl);
}

/* A worker that cannot start is AF_ERR_INVALID from open, its stderr and exit status in
 * the message. */
static void test_process_dies_at_start(void **state) {
    (void)state;
    char spec[4200];
    snprintf(spec, sizeof spec, "worker:%s/tests/c_worker --fault die", bindir);
    af_backend *be = NULL;
    af_error err = {0};
    af_status st = af_backend_open(spec, &be, &err);
    assert_null(be);
    if (st != AF_ERR_INVALID || !strstr(err.msg, "status 3") || !strstr(err.msg, "the device is not there"))
        fail_msg("want AF_ERR_INVALID with exit status 3 and stderr, got %d \"%s\"", (int)st, err.msg);
}

int main(void) {
    const char *b = getenv("AF_BINARY_DIR");
    snprintf(bindir, sizeof bindir, "%s", b ? b : "build");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_full),
        cmocka_unit_test(test_hello_defaults),
        cmocka_unit_test(test_hello_compile_timeout),
        cmocka_unit_test(test_hello_libs), cmocka_unit_test(test_hello_conventions),
        cmocka_unit_test(test_hello_conventions_fp8), cmocka_unit_test(test_hello_malformed),
        cmocka_unit_test(test_result_ok_bhsd),
        cmocka_unit_test(test_result_ok_bshd_f16_strided),
        cmocka_unit_test(test_result_unsupported_and_error),
        cmocka_unit_test(test_result_batch),
        cmocka_unit_test(test_result_batch_fault),
        cmocka_unit_test(test_run_frame_batch),
        cmocka_unit_test(test_result_malformed),
        cmocka_unit_test(test_hello_traits),
        cmocka_unit_test(test_result_guard_writes),
        cmocka_unit_test(test_result_header_over_limit),
        cmocka_unit_test(test_result_keep_mask),
        cmocka_unit_test(test_result_lse),
        cmocka_unit_test(test_run_frame_bhsd),
        cmocka_unit_test(test_run_frame_packed),
        cmocka_unit_test(test_run_frame_backward),
        cmocka_unit_test(test_result_grads),
        cmocka_unit_test(test_process_control),
        cmocka_unit_test(test_process_run_result),
        cmocka_unit_test(test_process_malformed),
        cmocka_unit_test(test_process_truncated_is_crash),
        cmocka_unit_test(test_process_dies_at_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
