/* worker_proto.c - frames of the worker protocol (see worker_proto.h and
 * docs/worker-protocol.md). Nothing here touches a process or a file descriptor. */
#include "worker_proto.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "case_json.h"
#include "case_serving.h"

/* {"type":"bye"} and the newline, after its length (15, little-endian) */
const uint8_t af_wp_bye[AF_WP_BYE_LEN] = {15, 0, 0, 0, '{', '"', 't', 'y', 'p', 'e', '"', ':',
                                          '"', 'b', 'y', 'e', '"', '}', '\n', 0};
_Static_assert(AF_WP_BYE_LEN == 4 + 16, "bye frame size");

/* --- splitting and tensor entries -------------------------------------------------------- */

void af_wp_header_free(af_wp_header *h) {
    if (!h) return;
    af_free(h->heap);
    h->heap = NULL;
    h->tok = NULL;
}

af_status af_wp_split(const uint8_t *body, size_t n, af_wp_header *h, const uint8_t **payload, size_t *payload_len,
                      af_error *err) {
    const char *text = (const char *)body;
    h->text = text;
    h->heap = NULL;
    h->tok = h->local;
    size_t lim = n < AF_WP_MAX_HEADER ? n : AF_WP_MAX_HEADER, used = 0;
    size_t cap = sizeof h->local / sizeof h->local[0];
    long nt = af_js_parse(text, lim, h->local, cap, &used);
    if (nt > (long)cap) { /* a header of many values: room for all of its tokens */
        h->heap = af_malloc((size_t)nt * sizeof *h->heap);
        AF_RETURN_ERROR_IF(!h->heap, err, AF_ERR_NOMEM, "out of memory for a header of %ld values", nt);
        h->tok = h->heap;
        nt = af_js_parse(text, lim, h->heap, (size_t)nt, &used);
    }
    if (nt < 0) {
        /* the text ran out at the limit: a header too long, not a bad one */
        AF_RETURN_ERROR_IF(n > lim && used >= lim, err, AF_ERR_FORMAT, "frame header over %zu bytes",
                           AF_WP_MAX_HEADER);
        return af_error_set(err, AF_ERR_FORMAT, "frame header is not valid JSON (at byte %zu of %zu)", used, n);
    }
    AF_RETURN_ERROR_IF(h->tok[0].type != AF_JS_OBJECT, err, AF_ERR_FORMAT, "frame header is not a JSON object");
    AF_RETURN_ERROR_IF(used >= n || body[used] != '\n', err, AF_ERR_FORMAT,
                       "frame header is not followed by a newline (byte %zu of %zu)", used, n);
    *payload = body + used + 1;
    *payload_len = n - used - 1;
    return AF_OK;
}

/* Member key of object token obj of h (-1 when absent), and its kinds. */
static long af_wp_get(const af_wp_header *h, long obj, const char *key) { return af_js_get(h->text, h->tok, obj, key); }
static bool af_wp_type(const af_wp_header *h, long i, af_js_type t) { return i >= 0 && h->tok[i].type == t; }
/* Absent or null. */
static bool af_wp_none(const af_wp_header *h, long i) { return i < 0 || h->tok[i].type == AF_JS_NULL; }

/* A number token that is a non-negative integer below 2^53 (exact in a double). */
static bool af_wp_uint(const af_wp_header *h, long i, size_t *v) {
    double d;
    if (!af_js_number(h->text, h->tok, i, &d)) return false;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return false;
    *v = (size_t)d;
    return true;
}

/* String token i into buf (empty when i is not a string). */
static void af_wp_str(const af_wp_header *h, long i, char *buf, size_t len) {
    if (!af_js_string(h->text, h->tok, i, buf, len)) buf[0] = 0;
}

af_status af_wp_tensor_parse(const af_wp_header *h, long e, size_t payload_len, af_wp_tensor *t, af_error *err) {
    memset(t, 0, sizeof *t);
    long name = af_wp_get(h, e, "name");
    AF_RETURN_ERROR_IF(!af_wp_type(h, e, AF_JS_OBJECT) || !af_wp_type(h, name, AF_JS_STRING), err, AF_ERR_FORMAT,
                       "tensor entry without a name");
    af_wp_str(h, name, t->name, sizeof t->name);
    const char *nm = t->name;
    long dt = af_wp_get(h, e, "dtype");
    char dts[16] = "(missing)";
    if (af_wp_type(h, dt, AF_JS_STRING)) af_wp_str(h, dt, dts, sizeof dts);
    int d = af_wp_type(h, dt, AF_JS_STRING) ? af_dtype_from_name(dts) : -1;
    AF_RETURN_ERROR_IF(d < 0, err, AF_ERR_FORMAT, "tensor %s: unknown dtype %s", nm, dts);
    t->dtype = (af_dtype)d;
    long shape = af_wp_get(h, e, "shape"), strides = af_wp_get(h, e, "strides");
    AF_RETURN_ERROR_IF(!af_wp_type(h, shape, AF_JS_ARRAY) || !af_wp_type(h, strides, AF_JS_ARRAY), err, AF_ERR_FORMAT,
                       "tensor %s: shape and strides must be arrays", nm);
    uint32_t nd = h->tok[shape].size, ns = h->tok[strides].size;
    AF_RETURN_ERROR_IF(nd > AF_MAX_DIMS, err, AF_ERR_FORMAT, "tensor %s: %u dims (at most %d)", nm, nd, AF_MAX_DIMS);
    AF_RETURN_ERROR_IF(ns != nd, err, AF_ERR_FORMAT, "tensor %s: %u dims but %u strides", nm, nd, ns);
    t->ndim = (int)nd;
    for (uint32_t k = 0; k < nd; k++) {
        AF_RETURN_ERROR_IF(!af_wp_uint(h, af_js_item(h->tok, shape, k), &t->ne[k]) ||
                               !af_wp_uint(h, af_js_item(h->tok, strides, k), &t->nb[k]),
                           err, AF_ERR_FORMAT, "tensor %s: shape and strides must be non-negative integers", nm);
    }
    long off = af_wp_get(h, e, "offset");
    t->offset = 0;
    AF_RETURN_ERROR_IF(off >= 0 && !af_wp_uint(h, off, &t->offset), err, AF_ERR_FORMAT,
                       "tensor %s: offset must be a non-negative integer", nm);
    /* the last byte an element touches, in exact arithmetic (no size_t wrap) */
    bool empty = false;
    for (int k = 0; k < t->ndim; k++) empty |= t->ne[k] == 0;
    double end = (double)t->offset;
    if (!empty) {
        end += (double)af_dtype_size(t->dtype);
        for (int k = 0; k < t->ndim; k++) end += (double)(t->ne[k] - 1) * (double)t->nb[k];
    }
    AF_RETURN_ERROR_IF(end > (double)payload_len, err, AF_ERR_FORMAT,
                       "tensor %s: elements up to byte %.0f lie outside the payload of %zu bytes", nm, end, payload_len);
    t->end = (size_t)end;
    return AF_OK;
}

/* --- hello ----------------------------------------------------------------------------- */

/* Which of names[0..n) string token i is (escapes decoded), -1 for none or not a string. */
static int af_wp_which(const af_wp_header *h, long i, const char *const *names, int n) {
    for (int k = 0; k < n; k++)
        if (names[k] && af_js_is(h->text, h->tok, i, names[k])) return k;
    return -1;
}

/* Names of a string array token as bits of the table names[0..n). */
static af_status af_wp_name_bits(const af_wp_header *h, long arr, const char *what, const char *const *names, int n,
                                 uint32_t *bits, af_error *err) {
    AF_RETURN_ERROR_IF(!af_wp_type(h, arr, AF_JS_ARRAY), err, AF_ERR_FORMAT, "hello: %s must be an array of names",
                       what);
    *bits = 0;
    long it = af_js_item(h->tok, arr, 0);
    for (uint32_t k = 0; k < h->tok[arr].size; k++, it = h->tok[it].next) {
        AF_RETURN_ERROR_IF(!af_wp_type(h, it, AF_JS_STRING), err, AF_ERR_FORMAT, "hello: %s must be an array of names",
                           what);
        int i = af_wp_which(h, it, names, n);
        if (i < 0) {
            char name[64];
            af_wp_str(h, it, name, sizeof name);
            return af_error_set(err, AF_ERR_FORMAT, "hello: unknown %s \"%s\"", what, name);
        }
        *bits |= 1u << i;
    }
    return AF_OK;
}

/* Member key of object conv, a string among choices[0..n) (choices[0] when absent): its
 * index, -1 when it is something else. */
static int af_wp_choice(const af_wp_header *h, long conv, const char *key, const char *const *choices, int n) {
    long x = af_wp_get(h, conv, key);
    return x < 0 ? 0 : af_wp_which(h, x, choices, n);
}

static const char *const af_wp_float_names[3] = {"f32", "f16", "bf16"}; /* af_dtype order */
static const char *const af_wp_unpacked[5] = {"bhsd", "bshd", "sbhd", "bsd", "channels_first"};
static const char *const af_wp_masked_values[2] = {"exclude", "ieee"};
static const char *const af_wp_masked_keys[2] = {"exclude", "ieee"};
static const char *const af_wp_denormals[2] = {"keep", "flush"};

/* A set of float dtypes (bit d: af_wp_float_names[d]) as the hello's JSON, the inverse of
 * af_wp_dtype_set: words[1] for all three, words[0] for none, else a list. */
static void af_wp_dtype_list(uint32_t bits, const char *const words[2], char *buf, size_t len) {
    if (bits == 7u || !bits) {
        snprintf(buf, len, "\"%s\"", words[bits ? 1 : 0]);
        return;
    }
    size_t at = 0;
    buf[at++] = '[';
    for (int d = 0; d < 3; d++)
        if (bits >> d & 1u) {
            int w = snprintf(buf + at, len - at, "%s\"%s\"", at > 1 ? "," : "", af_wp_float_names[d]);
            if (w > 0) at += (size_t)w;
        }
    snprintf(buf + at, len - at, "]");
}
static const char *const af_wp_tf32[2] = {"case", "always"};
static const char *const af_wp_scores[2] = {"f32", "dtype"};

/* A convention naming a set of float dtypes (bit d: af_wp_float_names[d]): words[0] (or
 * absent) for none, words[1] for all three, or a list of dtypes. */
static af_status af_wp_dtype_set(const af_wp_header *h, long conv, const char *key, const char *const words[2],
                                 uint32_t *bits, af_error *err) {
    long x = af_wp_get(h, conv, key);
    *bits = 0;
    if (af_wp_type(h, x, AF_JS_ARRAY)) {
        char what[64];
        snprintf(what, sizeof what, "conventions.%s dtype", key);
        return af_wp_name_bits(h, x, what, af_wp_float_names, 3, bits, err);
    }
    if (x < 0) return AF_OK;
    int k = af_wp_which(h, x, words, 2);
    AF_RETURN_ERROR_IF(k < 0, err, AF_ERR_FORMAT, "hello: conventions.%s must be \"%s\", \"%s\" or a list of dtypes",
                       key, words[0], words[1]);
    *bits = k == 1 ? 7u : 0u;
    return AF_OK;
}
static const char *const af_wp_dropout[3] = {"counter", "keep_mask", "none"}; /* AF_WP_DROPOUT_* order */

/* conventions.masked_rows: one of af_masked_rows_names for every case dtype, or an object
 * of them by dtype ({"f16": "unmasked", "bf16": "mean"}: a dtype it leaves out gives
 * "zero"), into rows (an af_masked_rows per af_dtype f32, f16, bf16). */
static af_status af_wp_masked_rows(const af_wp_header *h, long conv, uint8_t rows[AF_CASE_DTYPE_COUNT],
                                   af_error *err) {
    long x = af_wp_get(h, conv, "masked_rows");
    memset(rows, AF_ROWS_ZERO, AF_CASE_DTYPE_COUNT);
    if (x < 0) return AF_OK;
    if (!af_wp_type(h, x, AF_JS_OBJECT)) {
        int m = af_wp_which(h, x, af_masked_rows_names, AF_ROWS_COUNT);
        AF_RETURN_ERROR_IF(m < 0, err, AF_ERR_FORMAT,
                           "hello: conventions.masked_rows must be \"zero\", \"nan\", \"mean\", \"unmasked\" or an "
                           "object of them by dtype");
        memset(rows, m, AF_CASE_DTYPE_COUNT);
        return AF_OK;
    }
    long key = x + 1;
    for (uint32_t k = 0; k < h->tok[x].size; k++, key = h->tok[key + 1].next) {
        char name[64];
        af_wp_str(h, key, name, sizeof name);
        int d = af_wp_which(h, key, af_wp_float_names, AF_CASE_DTYPE_COUNT);
        AF_RETURN_ERROR_IF(d < 0, err, AF_ERR_FORMAT, "hello: conventions.masked_rows: unknown dtype \"%s\"", name);
        int m = af_wp_which(h, key + 1, af_masked_rows_names, AF_ROWS_COUNT);
        AF_RETURN_ERROR_IF(m < 0, err, AF_ERR_FORMAT,
                           "hello: conventions.masked_rows.%s must be \"zero\", \"nan\", \"mean\" or \"unmasked\"",
                           name);
        rows[d] = (uint8_t)m;
    }
    return AF_OK;
}

/* masked_rows as the hello's JSON, the inverse of af_wp_masked_rows: one name when every
 * dtype has it, else an object of the dtypes', each named. */
static void af_wp_masked_rows_text(const uint8_t rows[AF_CASE_DTYPE_COUNT], char *buf, size_t len) {
    if (rows[AF_F16] == rows[AF_F32] && rows[AF_BF16] == rows[AF_F32]) {
        snprintf(buf, len, "\"%s\"", af_masked_rows_names[rows[AF_F32]]);
        return;
    }
    snprintf(buf, len, "{\"f32\":\"%s\",\"f16\":\"%s\",\"bf16\":\"%s\"}", af_masked_rows_names[rows[AF_F32]],
             af_masked_rows_names[rows[AF_F16]], af_masked_rows_names[rows[AF_BF16]]);
}

static const char *const af_wp_fp8_probs_fmts[2] = {"e4m3", "e5m2"};

/* conventions.fp8_probs: an object of the FP8 case formats whose probabilities are rounded to
 * that format before P @ V, each with its scale s (a power of two in [2^-30, 2^30]) into
 * scale ([0] e4m3, [1] e5m2; 0 for a format left out). */
static af_status af_wp_fp8_probs(const af_wp_header *h, long conv, float scale[2], af_error *err) {
    long x = af_wp_get(h, conv, "fp8_probs");
    scale[0] = scale[1] = 0.0f;
    if (af_wp_none(h, x)) return AF_OK;
    AF_RETURN_ERROR_IF(!af_wp_type(h, x, AF_JS_OBJECT), err, AF_ERR_FORMAT,
                       "hello: conventions.fp8_probs must be an object of scales by FP8 format "
                       "({\"e4m3\": 64, \"e5m2\": 16384})");
    long key = x + 1;
    for (uint32_t k = 0; k < h->tok[x].size; k++, key = h->tok[key + 1].next) {
        char name[64];
        af_wp_str(h, key, name, sizeof name);
        int f = af_wp_which(h, key, af_wp_fp8_probs_fmts, 2);
        AF_RETURN_ERROR_IF(f < 0, err, AF_ERR_FORMAT, "hello: conventions.fp8_probs: unknown FP8 format \"%s\"", name);
        double v = 0.0;
        int e = 0;
        bool ok = af_js_number(h->text, h->tok, key + 1, &v) && v >= 0x1p-30 && v <= 0x1p30 && frexp(v, &e) == 0.5;
        AF_RETURN_ERROR_IF(!ok, err, AF_ERR_FORMAT,
                           "hello: conventions.fp8_probs.%s must be a power of two between 2^-30 and 2^30", name);
        scale[f] = (float)v;
    }
    return AF_OK;
}

/* In the parsers below: fail with a message, or with what a call returned. */
#define AF_WP_FAIL(...)                                                                                                \
    do {                                                                                                               \
        st = af_error_set(err, AF_ERR_FORMAT, __VA_ARGS__);                                                            \
        goto done;                                                                                                     \
    } while (0)
#define AF_WP_TRY(call)                                                                                                \
    do {                                                                                                               \
        if ((st = (call)) != AF_OK) goto done;                                                                         \
    } while (0)

/* "type" of header h is want; else the error names what came. */
static af_status af_wp_expect_type(const af_wp_header *h, const char *want, af_error *err) {
    long type = af_wp_get(h, 0, "type");
    if (af_js_is(h->text, h->tok, type, want)) return AF_OK;
    char got[64] = "(missing)";
    if (af_wp_type(h, type, AF_JS_STRING)) af_wp_str(h, type, got, sizeof got);
    return af_error_set(err, AF_ERR_FORMAT, "expected a %s frame, got type %s", want, got);
}

/* The conventions object conv of h (-1 or null: every default) into hl: the oracle's
 * model (hl->conv), the dropout and causal diagonals the protocol needs, and the text of
 * the conventions in effect, defaults included, for listings and bundles. */
static af_status af_wp_conventions(const af_wp_header *h, long conv, af_wp_hello *hl, af_error *err) {
    af_status st = AF_OK;
    if (!af_wp_none(h, conv) && !af_wp_type(h, conv, AF_JS_OBJECT)) AF_WP_FAIL("hello: conventions must be an object");
    if (!af_wp_type(h, conv, AF_JS_OBJECT)) conv = -1;
    hl->diagonals = (1u << AF_DIAG_COUNT) - 1;
    long cc = af_wp_get(h, conv, "causal");
    if (cc >= 0) AF_WP_TRY(af_wp_name_bits(h, cc, "causal diagonal", af_diag_names, AF_DIAG_COUNT, &hl->diagonals, err));
    AF_WP_TRY(af_wp_masked_rows(h, conv, hl->conv.masked_rows, err));
    int mk = af_wp_choice(h, conv, "masked_keys", af_wp_masked_keys, 2);
    if (mk < 0) AF_WP_FAIL("hello: conventions.masked_keys must be \"exclude\" or \"ieee\"");
    /* denormals: "keep", "flush" (every dtype) or the dtypes that flush */
    uint32_t flushes;
    AF_WP_TRY(af_wp_dtype_set(h, conv, "denormals", af_wp_denormals, &flushes, err));
    int tf = af_wp_choice(h, conv, "tf32", af_wp_tf32, 2);
    if (tf < 0) AF_WP_FAIL("hello: conventions.tf32 must be \"case\" or \"always\"");
    /* scores: "f32", "dtype" (every dtype), or the dtypes whose scores are in the dtype */
    uint32_t scores;
    AF_WP_TRY(af_wp_dtype_set(h, conv, "scores", af_wp_scores, &scores, err));
    /* products: the same words, for Q K^T's products before their sum */
    uint32_t products;
    AF_WP_TRY(af_wp_dtype_set(h, conv, "products", af_wp_scores, &products, err));
    int mv = af_wp_choice(h, conv, "masked_values", af_wp_masked_values, 2);
    if (mv < 0) AF_WP_FAIL("hello: conventions.masked_values must be \"exclude\" or \"ieee\"");
    int dr = af_wp_choice(h, conv, "dropout", af_wp_dropout, 3);
    if (dr < 0) AF_WP_FAIL("hello: conventions.dropout must be \"counter\", \"keep_mask\" or \"none\"");
    int lm = af_wp_choice(h, conv, "lse_masked_rows", af_lse_masked_names, AF_LSE_MASKED_COUNT);
    if (lm < 0) AF_WP_FAIL("hello: conventions.lse_masked_rows must be \"-inf\", \"zero\", \"inf\" or \"nan\"");
    hl->conv.lse_masked = (uint8_t)lm;
    AF_WP_TRY(af_wp_fp8_probs(h, conv, hl->conv.fp8_probs_scale, err));
    int fo = af_wp_choice(h, conv, "fp8_out", af_fp8_out_names, AF_FP8_OUT_COUNT);
    if (fo < 0) AF_WP_FAIL("hello: conventions.fp8_out must be \"dtype\" or \"v_amax\"");
    hl->conv.fp8_out = (uint8_t)fo;
    hl->conv.masked_values_ieee = mv == 1;
    hl->conv.masked_keys_ieee = mk == 1;
    hl->conv.denormals_flush = flushes;
    hl->conv.tf32_always = tf == 1;
    hl->conv.scores_dtype = scores;
    hl->conv.products_dtype = products;
    hl->dropout = dr == 1 ? AF_WP_DROPOUT_KEEP_MASK : dr == 2 ? AF_WP_DROPOUT_NONE : AF_WP_DROPOUT_COUNTER;
    if (hl->dropout == AF_WP_DROPOUT_NONE) hl->caps &= ~(uint32_t)AF_CAP_DROPOUT;
    /* the conventions in effect, defaults included, for listings and bundles */
    {
        char diags[160] = "";
        size_t k = 0;
        for (int d = 0; d < AF_DIAG_COUNT; d++) {
            if (!(hl->diagonals & (1u << d))) continue;
            int w = snprintf(diags + k, sizeof diags - k, "%s\"%s\"", k ? "," : "", af_diag_names[d]);
            if (w > 0) k += (size_t)w;
        }
        char sct[64], dnt[64], mrt[96];
        af_wp_dtype_list(scores, af_wp_scores, sct, sizeof sct);
        af_wp_dtype_list(flushes, af_wp_denormals, dnt, sizeof dnt);
        af_wp_masked_rows_text(hl->conv.masked_rows, mrt, sizeof mrt);
        snprintf(hl->conventions, sizeof hl->conventions,
                 "{\"causal\":[%s],\"masked_rows\":%s,\"dropout\":\"%s\",\"masked_values\":\"%s\","
                 "\"masked_keys\":\"%s\",\"denormals\":%s,\"scores\":%s,\"tf32\":\"%s\"}",
                 diags, mrt, af_wp_dropout[dr], af_wp_masked_values[mv], af_wp_masked_keys[mk],
                 dnt, sct, af_wp_tf32[tf]);
        /* the products' rounding, where a worker declares one */
        size_t cl = strlen(hl->conventions);
        if (products && cl > 0 && cl + 70 < sizeof hl->conventions) {
            char prt[64];
            af_wp_dtype_list(products, af_wp_scores, prt, sizeof prt);
            snprintf(hl->conventions + cl - 1, sizeof hl->conventions - cl + 1, ",\"products\":%s}", prt);
        }
        /* the statistics' convention, for a worker that returns them */
        cl = strlen(hl->conventions);
        if ((hl->caps & AF_CAP_LSE) && cl > 0 && cl + 40 < sizeof hl->conventions)
            snprintf(hl->conventions + cl - 1, sizeof hl->conventions - cl + 1, ",\"lse_masked_rows\":\"%s\"}",
                     af_lse_masked_names[lm]);
        /* the FP8 precision model, for a worker that takes FP8 cases */
        cl = strlen(hl->conventions);
        if ((hl->caps & AF_CAP_FP8) && cl > 0 && cl + 80 < sizeof hl->conventions) {
            char pr[64] = "{";
            for (int f = 0; f < 2; f++)
                if (hl->conv.fp8_probs_scale[f] > 0.0f)
                    snprintf(pr + strlen(pr), sizeof pr - strlen(pr), "%s\"%s\":%.17g", pr[1] ? "," : "",
                             af_wp_fp8_probs_fmts[f], (double)hl->conv.fp8_probs_scale[f]);
            snprintf(hl->conventions + cl - 1, sizeof hl->conventions - cl + 1,
                     ",\"fp8_probs\":%s},\"fp8_out\":\"%s\"}", pr, af_fp8_out_names[fo]);
        }
    }
done:
    return st;
}

/* "libs": {"torch": "2.11.0", "cudnn": "9.19.0", "sm": "90"}, what known entries' needs
 * compare with (host.h): names of [A-Za-z0-9_.-], string values. */
static af_status af_wp_libs(const af_wp_header *h, long libs, af_host_libs *out, af_error *err) {
    out->n = 0;
    if (af_wp_none(h, libs)) return AF_OK;
    AF_RETURN_ERROR_IF(!af_wp_type(h, libs, AF_JS_OBJECT), err, AF_ERR_FORMAT,
                       "hello: libs must be an object of name: version strings");
    const af_js_tok *t = h->tok;
    long it = libs + 1;
    for (uint32_t i = 0; i < t[libs].size; i++) {
        long val = it + 1;
        char name[AF_HOST_LIB_NAME_MAX + 8], ver[AF_HOST_LIB_VER_MAX + 8];
        af_wp_str(h, it, name, sizeof name);
        bool ok = name[0] && strlen(name) < AF_HOST_LIB_NAME_MAX;
        for (const char *c = name; ok && *c; c++) ok = isalnum((unsigned char)*c) || strchr("_.-", *c);
        AF_RETURN_ERROR_IF(!ok, err, AF_ERR_FORMAT, "hello: libs: \"%.40s\" is no library name (A-Z a-z 0-9 _ . -)", name);
        AF_RETURN_ERROR_IF(!af_wp_type(h, val, AF_JS_STRING), err, AF_ERR_FORMAT,
                           "hello: libs.%s must be a version string", name);
        af_wp_str(h, val, ver, sizeof ver);
        AF_RETURN_ERROR_IF(strlen(ver) >= AF_HOST_LIB_VER_MAX, err, AF_ERR_FORMAT,
                           "hello: libs.%s: a version longer than %d characters", name, AF_HOST_LIB_VER_MAX - 1);
        AF_RETURN_ERROR_IF(out->n >= AF_HOST_LIBS_MAX, err, AF_ERR_FORMAT, "hello: libs names more than %d libraries",
                           AF_HOST_LIBS_MAX);
        /* both lengths checked above: they fit with their terminators */
        memcpy(out->name[out->n], name, strlen(name) + 1);
        memcpy(out->version[out->n], ver, strlen(ver) + 1);
        out->n++;
        it = (long)t[val].next;
    }
    return AF_OK;
}

af_status af_wp_parse_conventions(const char *text, af_conventions *conv, af_error *err) {
    size_t n = strlen(text);
    char *body = af_malloc(n + 2);
    AF_RETURN_ERROR_IF(!body, err, AF_ERR_NOMEM, "out of memory");
    memcpy(body, text, n);
    body[n] = '\n', body[n + 1] = 0;
    af_wp_header h;
    const uint8_t *payload;
    size_t plen;
    af_wp_hello *hl = af_calloc(1, sizeof *hl);
    af_status st = hl ? af_wp_split((const uint8_t *)body, n + 1, &h, &payload, &plen, err)
                      : af_error_set(err, AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK) st = af_wp_conventions(&h, 0, hl, err);
    if (st == AF_OK) *conv = hl->conv;
    if (hl) af_wp_header_free(&h);
    af_free(hl);
    af_free(body);
    return st;
}

af_status af_wp_parse_hello(const uint8_t *body, size_t n, af_wp_hello *hl, af_error *err) {
    _Static_assert(AF_F32 == 0 && AF_F16 == 1 && AF_BF16 == 2, "af_wp_float_names follows af_dtype");
    _Static_assert(AF_WP_DROPOUT_COUNTER == 0 && AF_WP_DROPOUT_KEEP_MASK == 1 && AF_WP_DROPOUT_NONE == 2,
                   "af_wp_dropout follows the enum");
    memset(hl, 0, sizeof *hl);
    af_wp_header hh;
    const af_wp_header *h = &hh;
    const uint8_t *payload;
    size_t plen;
    af_status st = af_wp_split(body, n, &hh, &payload, &plen, err);
    if (st != AF_OK) goto done;
    AF_WP_TRY(af_wp_expect_type(h, "hello", err));
    if (plen) AF_WP_FAIL("hello: %zu payload bytes (a hello has none)", plen);
    double proto = -1.0;
    if (!af_js_number(h->text, h->tok, af_wp_get(h, 0, "protocol"), &proto) || proto != AF_WORKER_PROTOCOL)
        AF_WP_FAIL("hello: protocol %g, this attnfuzz speaks %d", proto, AF_WORKER_PROTOCOL);
    af_wp_str(h, af_wp_get(h, 0, "name"), hl->name, sizeof hl->name);
    if (!hl->name[0]) AF_WP_FAIL("hello: no name");
    af_wp_str(h, af_wp_get(h, 0, "version"), hl->version, sizeof hl->version);
    af_wp_str(h, af_wp_get(h, 0, "variant"), hl->variant, sizeof hl->variant);
    AF_WP_TRY(af_wp_name_bits(h, af_wp_get(h, 0, "caps"), "capability", af_cap_names, AF_CAP_COUNT, &hl->caps, err));
    AF_WP_TRY(af_wp_name_bits(h, af_wp_get(h, 0, "layouts"), "layout", af_layout_names, AF_LAYOUT_COUNT, &hl->layouts,
                              err));
    long dts = af_wp_get(h, 0, "dtypes");
    hl->dtypes = 7;
    if (dts >= 0) AF_WP_TRY(af_wp_name_bits(h, dts, "dtype", af_wp_float_names, 3, &hl->dtypes, err));
    long lim = af_wp_get(h, 0, "limits");
    if (!af_wp_none(h, lim) && !af_wp_type(h, lim, AF_JS_OBJECT)) AF_WP_FAIL("hello: limits must be an object");
    static const char *const lim_names[7] = {"max_head_dim", "head_dim_multiple", "max_seq", "max_batch",
                                             "max_heads",    "max_bytes",         "max_q_len"};
    uint64_t *lim_vals[7] = {&hl->max_head_dim, &hl->head_dim_multiple, &hl->max_seq, &hl->max_batch,
                             &hl->max_heads,    &hl->max_bytes,         &hl->max_q_len};
    for (int i = 0; i < 7 && af_wp_type(h, lim, AF_JS_OBJECT); i++) {
        long x = af_wp_get(h, lim, lim_names[i]);
        size_t v = 0;
        if (!af_wp_none(h, x) && !af_wp_uint(h, x, &v))
            AF_WP_FAIL("hello: limits.%s must be a non-negative integer", lim_names[i]);
        *lim_vals[i] = v;
    }
    AF_WP_TRY(af_wp_conventions(h, af_wp_get(h, 0, "conventions"), hl, err));
    long bt = af_wp_get(h, 0, "batch");
    size_t batch = 1;
    if (!af_wp_none(h, bt) && (!af_wp_uint(h, bt, &batch) || batch < 1))
        AF_WP_FAIL("hello: batch must be a positive integer (the most cases per run frame)");
    hl->batch = batch > AF_WP_MAX_BATCH ? AF_WP_MAX_BATCH : (uint32_t)batch;
    AF_WP_TRY(af_wp_libs(h, af_wp_get(h, 0, "libs"), &hl->libs, err));
    long det = af_wp_get(h, 0, "deterministic");
    if (!af_wp_none(h, det)) {
        if (!af_wp_type(h, det, AF_JS_OBJECT)) AF_WP_FAIL("hello: deterministic must be an object {forward, backward}");
        static const char *const passes[2] = {"forward", "backward"};
        for (int i = 0; i < 2; i++) {
            long p = af_wp_get(h, det, passes[i]);
            if (af_wp_none(h, p)) continue;
            if (!af_wp_type(h, p, AF_JS_TRUE) && !af_wp_type(h, p, AF_JS_FALSE))
                AF_WP_FAIL("hello: deterministic.%s must be true or false", passes[i]);
            if (af_wp_type(h, p, AF_JS_FALSE)) hl->traits |= i == 0 ? AF_TRAIT_NONDET_FORWARD : AF_TRAIT_NONDET_BACKWARD;
        }
    }
    long bi = af_wp_get(h, 0, "batch_invariant");
    if (!af_wp_none(h, bi) && !af_wp_type(h, bi, AF_JS_TRUE) && !af_wp_type(h, bi, AF_JS_FALSE))
        AF_WP_FAIL("hello: batch_invariant must be true or false");
    if (af_wp_type(h, bi, AF_JS_TRUE)) hl->traits |= AF_TRAIT_BATCH_INVARIANT;
    long lb = af_wp_get(h, 0, "lse_base");
    double base = 0.0;
    if (!af_wp_none(h, lb) && (!af_js_number(h->text, h->tok, lb, &base) || base != 2.0))
        AF_WP_FAIL("hello: lse_base must be 2 (statistics in base 2) or absent (natural log)");
    hl->lse_base2 = base == 2.0;
    long ct = af_wp_get(h, 0, "compile_timeout");
    double cts = 0.0;
    if (!af_wp_none(h, ct) && (!af_js_number(h->text, h->tok, ct, &cts) || !(cts > 0.0 && cts <= 86400.0)))
        AF_WP_FAIL("hello: compile_timeout must be seconds in (0, 86400]");
    hl->compile_timeout = cts;
    long ck = af_wp_get(h, 0, "compile_key");
    hl->compile_key = AF_KEY_ALL;
    if (!af_wp_none(h, ck))
        AF_WP_TRY(af_wp_name_bits(h, ck, "compile_key field", af_key_names, AF_KEY_COUNT_, &hl->compile_key, err));
done:
    af_wp_header_free(&hh);
    return st;
}

/* --- result ---------------------------------------------------------------------------- */

/* The output shape of unpacked layout l (the case's output [B, Hq, Sq, Dv]). */
static int af_wp_out_shape(af_layout l, const af_case *c, size_t ne[AF_MAX_DIMS]) {
    return af_layout_shape(l, c->batch, c->q_heads, c->q_len, c->v_head_dim, ne);
}

static void af_wp_dims(char *buf, size_t len, int nd, const size_t *ne) {
    size_t a = 0;
    buf[0] = 0;
    for (int k = 0; k < nd && a < len; k++) {
        int w = snprintf(buf + a, len - a, "%s%zu", k ? "," : "", ne[k]);
        if (w > 0) a += (size_t)w;
    }
}

/* Checks tensor t of an ok result: a float dtype and its shape: the case's output in
 * layout l (g < 0), gradient g's tensor in l (dq, dk, dv), or dmask's 4-D shape with each
 * dim the mask's or full. */
static af_status af_wp_check_float(const af_wp_tensor *t, af_layout l, const af_case *c, int g, af_error *err) {
    af_dtype dt = t->dtype;
    AF_RETURN_ERROR_IF(dt != AF_F32 && dt != AF_F64 && dt != AF_F16 && dt != AF_BF16, err, AF_ERR_FORMAT,
                       "%s has dtype %s, not a float dtype", t->name, af_dtype_names[dt]);
    size_t want[AF_MAX_DIMS];
    int wn;
    bool same;
    if (g == AF_GRAD_COUNT - 1) { /* dmask */
        size_t full[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
        af_case_grad_shape(c, g, want);
        wn = 4;
        same = t->ndim == 4;
        for (int k = 0; same && k < 4; k++) same = t->ne[k] == want[k] || t->ne[k] == full[k];
    } else {
        if (g < 0) {
            wn = af_wp_out_shape(l, c, want);
        } else {
            size_t ne[4];
            af_case_grad_shape(c, g, ne);
            wn = af_layout_shape(l, ne[0], ne[1], ne[2], ne[3], want);
        }
        same = wn == t->ndim;
        for (int k = 0; same && k < wn; k++) same = want[k] == t->ne[k];
    }
    if (!same) {
        char got[96], exp[96];
        af_wp_dims(got, sizeof got, t->ndim, t->ne);
        af_wp_dims(exp, sizeof exp, wn, want);
        return af_error_set(err, AF_ERR_FORMAT, "%s has shape [%s], the case's %s%s is [%s]", t->name, got,
                            g == AF_GRAD_COUNT - 1 ? "" : af_layout_names[l],
                            g < 0 ? " output" : g == AF_GRAD_COUNT - 1 ? "additive mask" : "", exp);
    }
    return AF_OK;
}

/* A result's "guard_writes" (token gw, absent or null: none): at most AF_GUARD_MAX entries
 * {buffer, margin, offset, count}, each margin one of af_margin_names. */
static af_status af_wp_guard_writes(const af_wp_header *h, long gw, af_guard_writes *g, af_error *err) {
    memset(g, 0, sizeof *g);
    if (af_wp_none(h, gw)) return AF_OK;
    AF_RETURN_ERROR_IF(!af_wp_type(h, gw, AF_JS_ARRAY), err, AF_ERR_FORMAT, "result: guard_writes must be an array");
    AF_RETURN_ERROR_IF(h->tok[gw].size > AF_GUARD_MAX, err, AF_ERR_FORMAT,
                       "result: guard_writes holds %u entries (at most %d)", h->tok[gw].size, AF_GUARD_MAX);
    long e = af_js_item(h->tok, gw, 0);
    for (uint32_t i = 0; i < h->tok[gw].size; i++, e = h->tok[e].next) {
        af_guard_write *w = &g->w[g->n];
        long buf = af_wp_get(h, e, "buffer"), mg = af_wp_get(h, e, "margin");
        size_t off, cnt;
        int m = af_wp_type(h, mg, AF_JS_STRING) ? af_wp_which(h, mg, af_margin_names, AF_MARGIN_COUNT) : -1;
        AF_RETURN_ERROR_IF(!af_wp_type(h, e, AF_JS_OBJECT) || !af_wp_type(h, buf, AF_JS_STRING) || m < 0 ||
                               !af_wp_uint(h, af_wp_get(h, e, "offset"), &off) ||
                               !af_wp_uint(h, af_wp_get(h, e, "count"), &cnt),
                           err, AF_ERR_FORMAT,
                           "result: guard_writes[%u] must be {\"buffer\": name, \"margin\": before|after|null_page|page_tail, "
                           "\"offset\": N, \"count\": M}",
                           i);
        af_wp_str(h, buf, w->buffer, sizeof w->buffer);
        w->margin = (af_margin)m;
        w->offset = off;
        w->count = cnt;
        if (cnt > 0) g->n++; /* an entry that changed nothing is no guard write */
    }
    return AF_OK;
}

/* One result object (token obj of h: the header itself, or an item of a batch) for
 * request id on case c, its tensors in a payload of plen bytes; *need receives one past
 * the last payload byte its tensors touch. */
static af_status af_wp_result_item(const af_wp_header *h, long obj, size_t plen, uint64_t id, const af_case *c,
                                   const af_wp_hello *hl, bool in_batch, af_wp_result *r, size_t *need_out,
                                   af_error *err) {
    memset(r, 0, sizeof *r);
    r->compile_s = r->run_s = -1.0;
    r->layout = AF_LAYOUT_BHSD;
    *need_out = 0;
    af_status st = AF_OK;
    AF_RETURN_ERROR_IF(!af_wp_type(h, obj, AF_JS_OBJECT), err, AF_ERR_FORMAT, "a batch result item is not an object");
    long jid = af_wp_get(h, obj, "id");
    size_t got_id;
    if (!af_wp_uint(h, jid, &got_id) || got_id != id)
        AF_WP_FAIL("result for id %s, the request was %llu", af_wp_type(h, jid, AF_JS_NUMBER) ? "another" : "(missing)",
                   (unsigned long long)id);
    long status = af_wp_get(h, obj, "status");
    if (!af_wp_type(h, status, AF_JS_STRING)) AF_WP_FAIL("result without a status");
    if (in_batch && af_js_is(h->text, h->tok, status, "not_run")) {
        r->status = AF_WP_NOT_RUN;
        goto done;
    }
    bool unsup = af_js_is(h->text, h->tok, status, "unsupported");
    bool crash = in_batch && af_js_is(h->text, h->tok, status, "crash");
    if (unsup || crash || af_js_is(h->text, h->tok, status, "error")) {
        r->status = unsup ? AF_WP_UNSUPPORTED : crash ? AF_WP_CRASH : AF_WP_ERROR;
        long m = af_wp_get(h, obj, unsup ? "reason" : "message");
        if (af_wp_type(h, m, AF_JS_STRING)) {
            af_wp_str(h, m, r->message, sizeof r->message);
        } else {
            snprintf(r->message, sizeof r->message, "(no message)");
        }
        goto done;
    }
    if (!af_js_is(h->text, h->tok, status, "ok")) {
        char s[65];
        af_wp_str(h, status, s, sizeof s);
        AF_WP_FAIL("unknown status \"%s\" (ok, unsupported, error%s)", s, in_batch ? ", crash, not_run" : "");
    }
    r->status = AF_WP_OK;
    long lay = af_wp_get(h, obj, "layout");
    if ((c->serve.forms & AF_SERVE_PACKED) && lay >= 0 && af_js_is(h->text, h->tok, lay, "thd")) {
        r->thd = true;
    } else if (!af_wp_none(h, lay)) {
        int l = af_wp_which(h, lay, af_wp_unpacked, 5);
        if (l < 0) {
            char s[65] = "(not a string)";
            if (af_wp_type(h, lay, AF_JS_STRING)) af_wp_str(h, lay, s, sizeof s);
            AF_WP_FAIL("result: layout %s is not one of bhsd, bshd, sbhd, bsd, channels_first%s", s,
                       (c->serve.forms & AF_SERVE_PACKED) ? ", thd" : "");
        }
        r->layout = (af_layout)l;
    }
    long tensors = af_wp_get(h, obj, "tensors");
    if (!af_wp_type(h, tensors, AF_JS_ARRAY)) AF_WP_FAIL("result ok without a tensors array");
    bool has_out = false;
    unsigned grads = 0;
    size_t need = 0;
    /* element by element along the tokens (a worker may send many: no quadratic walk) */
    long e = af_js_item(h->tok, tensors, 0);
    for (uint32_t k = 0; k < h->tok[tensors].size; k++, e = h->tok[e].next) {
        af_wp_tensor t;
        AF_WP_TRY(af_wp_tensor_parse(h, e, plen, &t, err));
        if (t.end > need) need = t.end;
        if (strcmp(t.name, "out") == 0) {
            r->out = t;
            has_out = true;
        } else if (strcmp(t.name, "dropout_keep") == 0) {
            r->keep = t;
            r->has_keep = true;
        } else if (strcmp(t.name, "lse") == 0) {
            r->lse = t;
            r->has_lse = true;
        } else {
            for (int g = 0; g < AF_GRAD_COUNT; g++) {
                if (strcmp(t.name, af_grad_names[g]) != 0) continue;
                if (!(c->bwd.grads & (1u << g))) AF_WP_FAIL("result has %s, which the case does not ask for", t.name);
                r->grad[g] = t;
                grads |= 1u << g;
            }
        }
    }
    if (!has_out) AF_WP_FAIL("result ok without tensor out");
    for (int g = 0; g < AF_GRAD_COUNT; g++)
        if ((c->bwd.grads & (1u << g)) && !(grads & (1u << g)))
            AF_WP_FAIL("the backward case asks for %s and the result has none", af_grad_names[g]);
    *need_out = need;
    if (r->thd) {
        size_t want[3] = {af_serving_total(c, false), c->q_heads, c->v_head_dim};
        bool ok = r->out.ndim == 3 && r->out.ne[0] == want[0] && r->out.ne[1] == want[1] && r->out.ne[2] == want[2];
        af_dtype dt = r->out.dtype;
        if (!ok || (dt != AF_F32 && dt != AF_F64 && dt != AF_F16 && dt != AF_BF16))
            AF_WP_FAIL("out in layout thd must be a float [%zu,%zu,%zu] tensor (total query tokens, Hq, Dv)", want[0],
                       want[1], want[2]);
    } else {
        AF_WP_TRY(af_wp_check_float(&r->out, r->layout, c, -1, err));
    }
    for (int g = 0; g < AF_GRAD_COUNT; g++)
        if (c->bwd.grads & (1u << g)) AF_WP_TRY(af_wp_check_float(&r->grad[g], r->layout, c, g, err));
    if (r->has_lse) {
        bool ok = r->lse.ndim == 3 && r->lse.ne[0] == c->batch && r->lse.ne[1] == c->q_heads &&
                  r->lse.ne[2] == c->q_len && (r->lse.dtype == AF_F32 || r->lse.dtype == AF_F64);
        if (!ok) AF_WP_FAIL("lse is not a float32/float64 [%u,%u,%u] tensor (B, Hq, Sq)", c->batch, c->q_heads, c->q_len);
        if (hl && !(hl->caps & AF_CAP_LSE)) AF_WP_FAIL("result has lse, but the hello declared no cap lse");
    }
    if (r->has_keep) {
        size_t kw[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
        bool ok = r->keep.dtype == AF_BOOL && r->keep.ndim == 4;
        for (int k = 0; ok && k < 4; k++) ok = r->keep.ne[k] == kw[k];
        if (!ok) AF_WP_FAIL("dropout_keep is not a bool [%zu,%zu,%zu,%zu] tensor", kw[0], kw[1], kw[2], kw[3]);
    } else if (hl && hl->dropout == AF_WP_DROPOUT_KEEP_MASK && c->dropout_p > 0.0) {
        AF_WP_FAIL("no dropout_keep, but conventions.dropout is keep_mask and the case has dropout %g", c->dropout_p);
    }
    AF_WP_TRY(af_wp_guard_writes(h, af_wp_get(h, obj, "guard_writes"), &r->guard, err));
    long tim = af_wp_get(h, obj, "timings");
    if (af_wp_type(h, tim, AF_JS_OBJECT)) {
        double v;
        if (af_js_number(h->text, h->tok, af_wp_get(h, tim, "compile_s"), &v) && v >= 0.0) r->compile_s = v;
        if (af_js_number(h->text, h->tok, af_wp_get(h, tim, "run_s"), &v) && v >= 0.0) r->run_s = v;
    }
done:
#undef AF_WP_FAIL
#undef AF_WP_TRY
    return st;
}

af_status af_wp_parse_result(const uint8_t *body, size_t n, uint64_t id, const af_case *c, const af_wp_hello *hl,
                             af_wp_result *r, const uint8_t **payload, af_error *err) {
    af_wp_header h;
    size_t plen, need = 0;
    af_status st = af_wp_split(body, n, &h, payload, &plen, err);
    if (st == AF_OK) st = af_wp_expect_type(&h, "result", err);
    if (st == AF_OK) st = af_wp_result_item(&h, 0, plen, id, c, hl, false, r, &need, err);
    if (st == AF_OK && plen > need)
        st = af_error_set(err, AF_ERR_FORMAT, "payload of %zu bytes is larger than its tensors need (%zu)", plen, need);
    af_wp_header_free(&h);
    return st;
}

af_status af_wp_parse_batch(const uint8_t *body, size_t n, const uint64_t *ids, const af_case *const *cases,
                            size_t count, const af_wp_hello *hl, af_wp_result *rs, const uint8_t **payload,
                            af_error *err) {
    af_wp_header h;
    size_t plen, need = 0;
    af_status st = af_wp_split(body, n, &h, payload, &plen, err);
    if (st == AF_OK) st = af_wp_expect_type(&h, "result", err);
    long batch = st == AF_OK ? af_wp_get(&h, 0, "batch") : -1;
    if (st == AF_OK && !af_wp_type(&h, batch, AF_JS_ARRAY))
        st = af_error_set(err, AF_ERR_FORMAT, "an answer to a batch without a batch array");
    if (st == AF_OK && h.tok[batch].size != count)
        st = af_error_set(err, AF_ERR_FORMAT, "a batch of %zu cases answered with %u results", count,
                          h.tok[batch].size);
    long it = st == AF_OK ? af_js_item(h.tok, batch, 0) : -1;
    for (size_t i = 0; st == AF_OK && i < count; i++, it = h.tok[it].next) {
        size_t ni = 0;
        st = af_wp_result_item(&h, it, plen, ids[i], cases[i], hl, true, &rs[i], &ni, err);
        /* not_run follows a crash or another not_run, and a crash is followed by not_run only */
        bool after_fault = i > 0 && (rs[i - 1].status == AF_WP_CRASH || rs[i - 1].status == AF_WP_NOT_RUN);
        if (st == AF_OK && (rs[i].status == AF_WP_NOT_RUN) != after_fault)
            st = af_error_set(err, AF_ERR_FORMAT, after_fault ? "an item after a crash was run" : "not_run without a crash before it");
        if (st != AF_OK) af_error_prefix(err, "batch item %zu", i);
        if (ni > need) need = ni;
    }
    if (st == AF_OK && plen > need)
        st = af_error_set(err, AF_ERR_FORMAT, "payload of %zu bytes is larger than its tensors need (%zu)", plen, need);
    af_wp_header_free(&h);
    return st;
}

/* A packed serving case's out: its THD rows scattered to their segments, or its padded
 * view read for the rows that exist; every other row 0. */
static void af_wp_copy_segments(const af_wp_result *r, const uint8_t *payload, const af_case *c, af_tensor *dst) {
    af_view v;
    memset(&v, 0, sizeof v);
    if (!r->thd) {
        af_tensor phys;
        memset(&phys, 0, sizeof phys);
        phys.dtype = r->out.dtype;
        phys.ndim = r->out.ndim;
        for (int k = 0; k < phys.ndim; k++) phys.ne[k] = r->out.ne[k], phys.nb[k] = r->out.nb[k];
        phys.data = (void *)(uintptr_t)(payload + r->out.offset);
        af_layout_view(r->layout, &phys, AF_Q, c->q_heads, c->v_head_dim, &v);
    }
    size_t tok = 0, e = 0, Dv = c->v_head_dim;
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t n = af_case_seg_q(c, b);
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t d = 0; d < Dv; d++, e++) {
                    double x = 0.0;
                    if (i < n && r->thd)
                        x = af_dtype_load(r->out.dtype, payload + r->out.offset,
                                          (tok + i) * r->out.nb[0] + h * r->out.nb[1] + d * r->out.nb[2]);
                    else if (i < n)
                        x = af_dtype_load(v.dtype, v.data, af_view_offset(&v, b, h, i, d));
                    if (dst->dtype == AF_F64)
                        ((double *)dst->data)[e] = x;
                    else
                        ((float *)dst->data)[e] = (float)x;
                }
        tok += n;
    }
}

void af_wp_copy_out(const af_wp_result *r, const uint8_t *payload, const af_case *c, af_tensor *dst) {
    AF_ASSERT(dst->dtype == AF_F32 || dst->dtype == AF_F64);
    if (r->thd || (c->serve.forms & AF_SERVE_PACKED)) {
        af_wp_copy_segments(r, payload, c, dst);
        return;
    }
    /* out in r->layout, as a canonical [B, Hq, Sq, Dv] view (the layout's output is the
     * layout of one tensor with Hq heads, Sq positions and head dim Dv) */
    af_tensor phys;
    memset(&phys, 0, sizeof phys);
    phys.dtype = r->out.dtype;
    phys.ndim = r->out.ndim;
    for (int k = 0; k < phys.ndim; k++) phys.ne[k] = r->out.ne[k], phys.nb[k] = r->out.nb[k];
    phys.data = (void *)(uintptr_t)(payload + r->out.offset);
    af_view v;
    af_layout_view(r->layout, &phys, AF_Q, c->q_heads, c->v_head_dim, &v);
    const uint8_t *base = v.data;
    size_t e = 0;
    for (size_t b = 0; b < v.ne[0]; b++)
        for (size_t h = 0; h < v.ne[1]; h++)
            for (size_t i = 0; i < v.ne[2]; i++)
                for (size_t d = 0; d < v.ne[3]; d++, e++) {
                    double x = af_dtype_load(v.dtype, base, af_view_offset(&v, b, h, i, d));
                    if (dst->dtype == AF_F64)
                        ((double *)dst->data)[e] = x;
                    else
                        ((float *)dst->data)[e] = (float)x; /* exact from f16/bf16/f32 */
                }
}

af_status af_wp_copy_grad(const af_wp_result *r, const uint8_t *payload, const af_case *c, int g, af_tensor *dst,
                          af_error *err) {
    const af_wp_tensor *t = &r->grad[g];
    size_t ne[4];
    af_case_grad_shape(c, g, ne);
    af_dtype dt = t->dtype;
    void *data = dst->data;
    af_tensor_contiguous(dst, dt, 4, ne);
    dst->data = data;
    /* the source as a canonical [B, H, S, D] view (dmask: its own 4-D strides, a dim the
     * mask broadcasts walked in full and summed) */
    af_view v;
    size_t span[4] = {ne[0], ne[1], ne[2], ne[3]};
    if (g == AF_GRAD_COUNT - 1) {
        memset(&v, 0, sizeof v);
        v.dtype = t->dtype;
        v.data = payload + t->offset;
        for (int k = 0; k < 4; k++) v.ne[k] = t->ne[k], v.nb[k] = t->nb[k], span[k] = t->ne[k];
    } else {
        af_tensor phys;
        memset(&phys, 0, sizeof phys);
        phys.dtype = t->dtype;
        phys.ndim = t->ndim;
        for (int k = 0; k < phys.ndim; k++) phys.ne[k] = t->ne[k], phys.nb[k] = t->nb[k];
        phys.data = (void *)(uintptr_t)(payload + t->offset);
        af_layout_view(r->layout, &phys, g == 0 ? AF_Q : g == 1 ? AF_K : AF_V, ne[1], ne[3], &v);
    }
    size_t n = ne[0] * ne[1] * ne[2] * ne[3];
    bool summed = span[0] * span[1] * span[2] * span[3] != n;
    double *acc = summed ? af_calloc(n, sizeof *acc) : NULL;
    AF_RETURN_ERROR_IF(summed && !acc, err, AF_ERR_NOMEM, "out of memory");
    const uint8_t *base = v.data;
    for (size_t b = 0; b < span[0]; b++)
        for (size_t h = 0; h < span[1]; h++)
            for (size_t i = 0; i < span[2]; i++)
                for (size_t d = 0; d < span[3]; d++) {
                    double x = af_dtype_load(v.dtype, base, af_view_offset(&v, b, h, i, d));
                    size_t e = (((b % ne[0]) * ne[1] + h % ne[1]) * ne[2] + i % ne[2]) * ne[3] + d % ne[3];
                    if (acc) {
                        acc[e] += x;
                    } else if (dt == AF_F64) {
                        ((double *)data)[e] = x;
                    } else if (dt == AF_F32) {
                        ((float *)data)[e] = (float)x;
                    } else { /* f16, bf16: the value is one, stored exactly */
                        ((uint16_t *)data)[e] = dt == AF_F16 ? af_f16_from_f64(x) : af_bf16_from_f64(x);
                    }
                }
    if (acc) {
        /* a sum is no longer a value of the worker's dtype: kept in F64 */
        af_tensor_contiguous(dst, AF_F64, 4, ne);
        dst->data = data;
        memcpy(data, acc, n * sizeof *acc);
        af_free(acc);
    }
    return AF_OK;
}

bool af_wp_want_lse(const af_wp_hello *h, const af_case *c) {
    return (h->caps & AF_CAP_LSE) && !c->bwd.grads && !(c->serve.forms & AF_SERVE_PACKED);
}

void af_wp_copy_lse(const af_wp_result *r, const uint8_t *payload, const af_case *c, bool base2, af_tensor *dst) {
    AF_ASSERT(dst->dtype == AF_F64 && dst->ndim == 3);
    const af_wp_tensor *t = &r->lse;
    const uint8_t *base = payload + t->offset;
    double *x = dst->data;
    size_t e = 0;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++, e++) {
                double v = af_dtype_load(t->dtype, base, b * t->nb[0] + h * t->nb[1] + i * t->nb[2]);
                x[e] = base2 ? v * M_LN2 : v; /* log2 s = ln s / ln 2 */
            }
}

void af_wp_copy_keep(const af_wp_result *r, const uint8_t *payload, const af_case *c, uint8_t *keep) {
    const af_wp_tensor *t = &r->keep;
    const uint8_t *base = payload + t->offset;
    size_t e = 0;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++, e++)
                    keep[e] = base[b * t->nb[0] + h * t->nb[1] + i * t->nb[2] + j * t->nb[3]] != 0;
}

/* --- run requests ------------------------------------------------------------------------ */

/* One tensor entry: shape ne[0..nd) with byte strides nb at byte offset off. */
static void af_wp_entry(af_jw *w, const char *name, af_dtype dt, int nd, const size_t *ne, const size_t *nb,
                        size_t off) {
    af_jw_begin(w, '{');
    af_jw_key(w, "name"), af_jw_string(w, name);
    af_jw_key(w, "dtype"), af_jw_string(w, af_dtype_names[dt]);
    af_jw_key(w, "shape"), af_jw_begin(w, '[');
    for (int k = 0; k < nd; k++) af_jw_uint(w, ne[k]);
    af_jw_end(w, ']');
    af_jw_key(w, "strides"), af_jw_begin(w, '[');
    for (int k = 0; k < nd; k++) af_jw_uint(w, nb[k]);
    af_jw_end(w, ']');
    af_jw_key(w, "offset"), af_jw_uint(w, off);
    af_jw_end(w, '}');
}

/* The per-tensor view of q, k or v inside a packed buffer t (ne/nb of the view, byte
 * offset of its first element): [B, S, H, D] for the two qkv_bs* layouts, [B, H*D, S]
 * for qkv_channels_first. */
static int af_wp_packed_view(af_layout l, const af_tensor *t, int w, size_t H, size_t D, size_t *ne, size_t *nb,
                             size_t *off) {
    switch (l) {
    case AF_LAYOUT_QKV_BS3HD: /* [B, S, 3, H, D] */
        ne[0] = t->ne[0], ne[1] = t->ne[1], ne[2] = t->ne[3], ne[3] = t->ne[4];
        nb[0] = t->nb[0], nb[1] = t->nb[1], nb[2] = t->nb[3], nb[3] = t->nb[4];
        *off = (size_t)w * t->nb[2];
        return 4;
    case AF_LAYOUT_QKV_BSH3D: /* [B, S, H, 3, D] */
        ne[0] = t->ne[0], ne[1] = t->ne[1], ne[2] = t->ne[2], ne[3] = t->ne[4];
        nb[0] = t->nb[0], nb[1] = t->nb[1], nb[2] = t->nb[2], nb[3] = t->nb[4];
        *off = (size_t)w * t->nb[3];
        return 4;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: /* [B, 3*H*D, S], chunk(3, dim=1) */
        ne[0] = t->ne[0], ne[1] = H * D, ne[2] = t->ne[2];
        nb[0] = t->nb[0], nb[1] = t->nb[1], nb[2] = t->nb[2];
        *off = (size_t)w * H * D * t->nb[1];
        return 3;
    case AF_LAYOUT_BHSD:
    case AF_LAYOUT_BSHD:
    case AF_LAYOUT_SBHD:
    case AF_LAYOUT_BSD:
    case AF_LAYOUT_CHANNELS_FIRST:
    case AF_LAYOUT_COUNT: break;
    }
    AF_ASSERT(0 && "not a packed layout");
    return 0;
}

/* A serving case's tensors: q, k, v in their physical forms (THD when packed; K and V as
 * page caches when paged; else dense in the case's layout) and the serving tables, the
 * serving buffer travelling as one piece. */
static void af_wp_write_serving(af_jw *hdr, const af_case_tensors *t, af_wp_part *parts, size_t *np, size_t *off) {
    const af_case *c = t->c;
    const af_serving_tensors *s = &t->srv;
    size_t base = *off;
    parts[(*np)++] = (af_wp_part){s->base, s->bytes};
    const af_tensor *qkv[3] = {(c->serve.forms & AF_SERVE_PACKED) ? &s->q : &t->q,
                               af_case_has_lens(c) ? &s->k : &t->k, af_case_has_lens(c) ? &s->v : &t->v};
    const af_tensor *dense[3] = {&t->q, &t->k, &t->v};
    *off += s->bytes;
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        const af_tensor *x = qkv[w];
        size_t at;
        if (x == dense[w] && af_case_is_packed(c)) { /* sinks or ALiBi on a packed QKV buffer */
            af_layout l = c->t[AF_Q].layout;
            size_t ne[AF_MAX_DIMS], nb[AF_MAX_DIMS], voff;
            if (w == 0) {
                af_wp_entry(hdr, "qkv", t->q.dtype, t->q.ndim, t->q.ne, t->q.nb, *off);
                parts[(*np)++] = (af_wp_part){t->q.data, af_tensor_span(&t->q)};
            }
            int nd = af_wp_packed_view(l, &t->q, w, c->q_heads, c->head_dim, ne, nb, &voff);
            af_wp_entry(hdr, af_tensor_names[w], t->q.dtype, nd, ne, nb, *off + voff);
            if (w == AF_QKV_COUNT - 1) *off += af_tensor_span(&t->q);
            continue;
        }
        if (x == dense[w]) {
            at = *off;
            parts[(*np)++] = (af_wp_part){x->data, af_tensor_span(x)};
            *off += af_tensor_span(x);
        } else {
            at = base + (size_t)((const uint8_t *)x->data - (const uint8_t *)s->base);
        }
        af_wp_entry(hdr, af_tensor_names[w], x->dtype, x->ndim, x->ne, x->nb, at);
    }
    const af_tensor *tabs[7] = {&s->cu_seqlens_q, &s->cu_seqlens_k, &s->seqlens_k, &s->block_table,
                                &s->sinks, &s->slopes, NULL};
    static const char *const names[6] = {"cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table", "sinks",
                                         "alibi_slopes"};
    for (int k = 0; tabs[k]; k++) {
        if (!tabs[k]->data) continue;
        af_wp_entry(hdr, names[k], tabs[k]->dtype, tabs[k]->ndim, tabs[k]->ne, tabs[k]->nb,
                    base + (size_t)((const uint8_t *)tabs[k]->data - (const uint8_t *)s->base));
    }
}

/* One run item: id, case, derived values and the tensor entries, their payload pieces
 * appended to parts (*np of them so far) at byte *off of the payload. */
static void af_wp_write_item(af_jw *hdr, uint64_t id, const af_case_tensors *t, bool want_lse, af_wp_part *parts,
                             size_t *np, size_t *off) {
    const af_case *c = t->c;
    af_jw_key(hdr, "id"), af_jw_uint(hdr, id);
    if (want_lse) af_jw_key(hdr, "want_lse"), af_jw_bool(hdr, true);
    af_jw_key(hdr, "case"), af_case_write_json(hdr, c);
    af_jw_key(hdr, "derived"), af_jw_begin(hdr, '{');
    af_jw_key(hdr, "scale"), af_jw_double(hdr, af_case_scale(c));
    af_jw_key(hdr, "diag_offset"), af_jw_begin(hdr, '[');
    for (uint32_t b = 0; b < c->batch; b++) af_jw_int(hdr, af_case_diag_offset(c, b));
    af_jw_end(hdr, ']');
    af_jw_key(hdr, "valid_keys"), af_jw_begin(hdr, '[');
    for (uint32_t b = 0; b < c->batch; b++) af_jw_uint(hdr, af_case_valid_keys(c, b));
    af_jw_end(hdr, ']');
    af_jw_end(hdr, '}');
    af_jw_key(hdr, "tensors"), af_jw_begin(hdr, '[');
    size_t ne[AF_MAX_DIMS], nb[AF_MAX_DIMS];
    if (c->serve.forms) {
        af_wp_write_serving(hdr, t, parts, np, off);
    } else if (af_case_is_packed(c)) {
        af_layout l = c->t[AF_Q].layout;
        size_t span = af_tensor_span(&t->q);
        af_wp_entry(hdr, "qkv", t->q.dtype, t->q.ndim, t->q.ne, t->q.nb, *off);
        for (int w = 0; w < AF_QKV_COUNT; w++) {
            size_t voff;
            int nd = af_wp_packed_view(l, &t->q, w, c->q_heads, c->head_dim, ne, nb, &voff);
            af_wp_entry(hdr, af_tensor_names[w], t->q.dtype, nd, ne, nb, *off + voff);
        }
        parts[(*np)++] = (af_wp_part){t->q.data, span};
        *off += span;
    } else {
        const af_tensor *qkv[3] = {&t->q, &t->k, &t->v};
        for (int w = 0; w < AF_QKV_COUNT; w++) {
            size_t span = af_tensor_span(qkv[w]);
            af_wp_entry(hdr, af_tensor_names[w], qkv[w]->dtype, qkv[w]->ndim, qkv[w]->ne, qkv[w]->nb, *off);
            parts[(*np)++] = (af_wp_part){qkv[w]->data, span};
            *off += span;
        }
    }
    if (c->bwd.grads) {
        size_t span = af_tensor_span(&t->dout);
        af_wp_entry(hdr, "do", t->dout.dtype, t->dout.ndim, t->dout.ne, t->dout.nb, *off);
        parts[(*np)++] = (af_wp_part){t->dout.data, span};
        *off += span;
    }
    const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
    const af_tensor *mt[2] = {&t->amask, &t->bmask};
    static const char *const mnames[2] = {"mask", "bool_mask"};
    for (int m = 0; m < 2; m++) {
        if (!ms[m]->present) continue;
        size_t span = af_tensor_span(mt[m]);
        af_wp_entry(hdr, mnames[m], mt[m]->dtype, mt[m]->ndim, mt[m]->ne, mt[m]->nb, *off);
        parts[(*np)++] = (af_wp_part){mt[m]->data, span};
        *off += span;
    }
    af_jw_end(hdr, ']');
}

/* The frame's length, now that the header and the payload size are known. */
static af_status af_wp_finish(af_jw *hdr, size_t payload, af_error *err) {
    af_jw_raw(hdr, "\n", 1);
    AF_RETURN_ERROR_IF(hdr->failed, err, AF_ERR_NOMEM, "out of memory");
    size_t total = hdr->len - 4 + payload;
    AF_RETURN_ERROR_IF(total > 0xffffffffu, err, AF_ERR_INVALID, "run frame of %zu bytes is over 4 GiB", total);
    for (int k = 0; k < 4; k++) hdr->data[k] = (char)(uint8_t)(total >> (8 * k));
    return AF_OK;
}

af_status af_wp_encode_run(af_jw *hdr, uint64_t id, const af_case_tensors *t, af_wp_part parts[AF_WP_MAX_PARTS],
                           size_t *nparts, af_error *err) {
    return af_wp_encode_run_lse(hdr, id, t, false, parts, nparts, err);
}

af_status af_wp_encode_run_lse(af_jw *hdr, uint64_t id, const af_case_tensors *t, bool want_lse,
                               af_wp_part parts[AF_WP_MAX_PARTS], size_t *nparts, af_error *err) {
    af_jw_reset(hdr);
    af_jw_raw(hdr, "\0\0\0\0", 4); /* the length, filled in last */
    af_jw_begin(hdr, '{');
    af_jw_key(hdr, "type"), af_jw_string(hdr, "run");
    size_t np = 0, off = 0;
    af_wp_write_item(hdr, id, t, want_lse, parts, &np, &off);
    af_jw_end(hdr, '}');
    *nparts = np;
    return af_wp_finish(hdr, off, err);
}

af_status af_wp_encode_batch(af_jw *hdr, const uint64_t *ids, const af_case_tensors *const *ts, size_t n,
                             af_wp_part *parts, size_t *nparts, af_error *err) {
    return af_wp_encode_batch_lse(hdr, ids, ts, NULL, n, parts, nparts, err);
}

af_status af_wp_encode_batch_lse(af_jw *hdr, const uint64_t *ids, const af_case_tensors *const *ts,
                                 const bool *want_lse, size_t n, af_wp_part *parts, size_t *nparts, af_error *err) {
    af_jw_reset(hdr);
    af_jw_raw(hdr, "\0\0\0\0", 4);
    af_jw_begin(hdr, '{');
    af_jw_key(hdr, "type"), af_jw_string(hdr, "run");
    af_jw_key(hdr, "batch"), af_jw_begin(hdr, '[');
    size_t np = 0, off = 0;
    for (size_t i = 0; i < n; i++) {
        af_jw_begin(hdr, '{');
        af_wp_write_item(hdr, ids[i], ts[i], want_lse && want_lse[i], parts, &np, &off);
        af_jw_end(hdr, '}');
    }
    af_jw_end(hdr, ']');
    af_jw_end(hdr, '}');
    *nparts = np;
    return af_wp_finish(hdr, off, err);
}
