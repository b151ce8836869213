/* test_json.c - the JSON pieces under the worker protocol: the strict token reader
 * (json_scan.h), the streaming writer (json_write.h) and exact numbers (json_exact.h).
 *
 * The reader is checked against hand-written documents (RFC 8259 forms it must refuse,
 * tokens it must produce) and against cJSON, an independent parser: random documents and
 * byte-level mutations of them; whatever the reader accepts, cJSON must accept with the
 * same tree (types, member counts, decoded strings, numbers bit for bit). The number
 * printer's fast paths are checked against the plain %.15g/%.16g/%.17g search. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_exact.h"
#include "json_scan.h"
#include "json_write.h"

static size_t scaled(size_t n) { return scaled_at_least(n, 100); }

/* --- the reader on hand-written documents ----------------------------------------------- */

static long parse(const char *s, af_js_tok *t, size_t cap, size_t *used) {
    return af_js_parse(s, strlen(s), t, cap, used);
}

static void test_scan_tokens(void **state) {
    (void)state;
    const char *s = " {\"a\":[1,-2.5e1,{\"b\":null}],\"c\":\"x\\\"y\",\"d\":true,\"e\":false,\"a\":7} tail";
    af_js_tok t[32];
    size_t used;
    long n = parse(s, t, 32, &used);
    /* object, a, [, 1, -25, {, b, null, c, "x\"y", d, true, e, false, a, 7 */
    assert_int_equal(n, 16);
    assert_int_equal(used, strlen(s) - strlen(" tail"));
    assert_int_equal(t[0].type, AF_JS_OBJECT);
    assert_int_equal(t[0].size, 5);
    assert_int_equal(t[0].next, 16);
    long a = af_js_get(s, t, 0, "a");
    assert_int_equal(a, 2); /* the first of duplicate keys, as cJSON */
    assert_int_equal(t[a].type, AF_JS_ARRAY);
    assert_int_equal(t[a].size, 3);
    assert_int_equal(t[a].next, 8);
    double v;
    assert_true(af_js_number(s, t, af_js_item(t, a, 0), &v) && v == 1.0);
    assert_true(af_js_number(s, t, af_js_item(t, a, 1), &v) && v == -25.0);
    long inner = af_js_item(t, a, 2);
    assert_int_equal(t[af_js_get(s, t, inner, "b")].type, AF_JS_NULL);
    assert_int_equal(af_js_item(t, a, 3), -1);
    long c = af_js_get(s, t, 0, "c");
    char buf[16];
    assert_true(af_js_string(s, t, c, buf, sizeof buf));
    assert_string_equal(buf, "x\"y");
    assert_true(t[c].escaped);
    assert_true(af_js_is(s, t, c, "x\"y"));
    assert_false(af_js_is(s, t, c, "x\"yz"));
    assert_false(af_js_is(s, t, c, "x\""));
    assert_int_equal(t[af_js_get(s, t, 0, "d")].type, AF_JS_TRUE);
    assert_int_equal(t[af_js_get(s, t, 0, "e")].type, AF_JS_FALSE);
    assert_int_equal(af_js_get(s, t, 0, "zz"), -1);
    assert_int_equal(af_js_get(s, t, a, "a"), -1); /* not an object */
    assert_false(af_js_number(s, t, c, &v));       /* not a number */
    assert_false(af_js_string(s, t, a, buf, sizeof buf));

    /* too few tokens: the count needed, the text checked all the same */
    af_js_tok few[3];
    assert_int_equal(parse(s, few, 3, &used), 16);
    assert_int_equal(parse("[1,2,3,]", few, 1, &used), -1);
    assert_int_equal(parse("[]", t, 0, &used), 1);

    /* escapes: \u as UTF-8, a surrogate pair as one 4-byte character, a lone one as U+FFFD */
    const char *e = "[\"\\u00e9\\/\\b\\f\\n\\r\\t\\\\\",\"\\ud83d\\ude00\",\"\\udc00x\",\"a\\u0000b\"]";
    assert_int_equal(parse(e, t, 32, &used), 5);
    assert_true(af_js_string(e, t, 1, buf, sizeof buf));
    assert_string_equal(buf, "\xc3\xa9/\b\f\n\r\t\\");
    assert_true(af_js_string(e, t, 2, buf, sizeof buf));
    assert_string_equal(buf, "\xf0\x9f\x98\x80");
    assert_true(af_js_string(e, t, 3, buf, sizeof buf));
    assert_string_equal(buf, "\xef\xbf\xbdx");
    assert_true(af_js_string(e, t, 4, buf, sizeof buf));
    assert_string_equal(buf, "a"); /* \u0000 ends it */
    assert_true(af_js_is(e, t, 1, "\xc3\xa9/\b\f\n\r\t\\"));
    /* cut to the buffer */
    assert_true(af_js_string(e, t, 1, buf, 3));
    assert_string_equal(buf, "\xc3\xa9");
    assert_true(af_js_string(e, t, 1, buf, 2));
    assert_string_equal(buf, "");

    /* numbers: integers exact, the rest as strtod reads them, a bare top-level number too */
    static const char *const nums[] = {"0",          "-0",       "123456789012345", "1234567890123456789",
                                       "0.1",        "1.5e-7",   "-2E+3",           "9007199254740993",
                                       "1e400",      "5e-324"};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        char doc[64];
        snprintf(doc, sizeof doc, "[%s]", nums[i]);
        assert_int_equal(parse(doc, t, 32, &used), 2);
        assert_true(af_js_number(doc, t, 1, &v));
        double want = strtod(nums[i], NULL);
        assert_memory_equal(&v, &want, sizeof v);
        assert_int_equal(parse(nums[i], t, 32, &used), 1);
        assert_true(af_js_number(nums[i], t, 0, &v));
        assert_memory_equal(&v, &want, sizeof v);
    }
}

static void test_scan_refuses(void **state) {
    (void)state;
    static const struct {
        const char *text;
        size_t at; /* where the reader must say it stopped */
    } bad[] = {
        {"", 0},           {"   ", 3},           {"{", 1},          {"[1,]", 3},        {"{\"a\"}", 4},
        {"{\"a\":1,}", 7}, {"{\"a\" 1}", 5},     {"{1:2}", 1},      {"[1 2]", 3},       {"[01]", 2},
        {"1.", 2},         {".5", 0},            {"+1", 0},         {"-", 1},           {"1e", 2},
        {"1e+", 3},        {"-a", 1},            {"\"abc", 4},      {"\"a\x01b\"", 2},  {"\"\\x\"", 2},
        {"\"\\u12g4\"", 5}, {"\"\\u12\"", 5},    {"tru", 0},        {"nul", 0},
        {"[true false]", 6}, {"]", 0},           {"NaN", 0},         {"[Infinity]", 1},
        {"'a'", 0},        {"[1,,2]", 3},        {"{\"a\":1 \"b\":2}", 7},
        /* a valid value followed by more: the reader stops after the value (the caller
         * decides what may follow: a frame header, a newline) */
        {"{\"a\":1}}", 7}, {"truex", 4}, {"01", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        af_js_tok t[16];
        size_t used = 99;
        long n = parse(bad[i].text, t, 16, &used);
        if (i >= sizeof bad / sizeof bad[0] - 3) { /* the last three */
            assert_true(n > 0);
            assert_int_equal(used, bad[i].at);
            continue;
        }
        if (n >= 0 || used != bad[i].at)
            fail_msg("\"%s\": got %ld tokens, stopped at %zu (want a refusal at %zu)", bad[i].text, n, used, bad[i].at);
    }
    /* nesting: AF_JS_MAX_DEPTH levels are read, one more is refused */
    char deep[2 * AF_JS_MAX_DEPTH + 8];
    for (int extra = 0; extra < 2; extra++) {
        int d = AF_JS_MAX_DEPTH + extra;
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        deep[2 * d] = 0;
        af_js_tok t[AF_JS_MAX_DEPTH + 2];
        size_t used;
        long n = parse(deep, t, AF_JS_MAX_DEPTH + 2, &used);
        assert_int_equal(n, extra ? -1 : d);
    }
}

/* --- the reader against cJSON ------------------------------------------------------------- */

/* A random JSON value into w (depth-limited): every token kind, escapes and non-ASCII in
 * strings, numbers of every form the grammar allows. */
static void random_value(af_jw *w, xorshift *x, int depth) {
    unsigned kind = (unsigned)(xs_next(x) % (depth < 4 ? 9 : 6));
    char buf[64];
    switch (kind) {
    case 0: af_jw_null(w); break;
    case 1: af_jw_bool(w, xs_next(x) & 1); break;
    case 2: af_jw_double(w, (double)(int64_t)(xs_next(x) % 2000001) - 1e6); break;
    case 3: {
        uint64_t bits = xs_next(x);
        double d;
        memcpy(&d, &bits, sizeof d);
        af_jw_double(w, isfinite(d) ? d : 0.5); /* any finite double, exactly */
        break;
    }
    case 4: { /* a number the writer never makes: exponents, fractions, -0 */
        static const char *const forms[] = {"1e5", "-0", "2.50E-3", "0.000", "-7e+0", "123456789012345678"};
        size_t f = (size_t)(xs_next(x) % 6);
        if (w->need_comma) af_jw_raw(w, ",", 1);
        af_jw_raw(w, forms[f], strlen(forms[f]));
        w->need_comma = true;
        break;
    }
    case 5: {
        size_t n = (size_t)(xs_next(x) % 12);
        for (size_t i = 0; i < n; i++) {
            static const char pool[] = "ab\"\\/\n\t\x01\x1f~ \xc3\xa9";
            buf[i] = pool[xs_next(x) % (sizeof pool - 1)];
        }
        buf[n] = 0;
        af_jw_string(w, buf);
        break;
    }
    case 6:
    case 7: {
        af_jw_begin(w, '[');
        unsigned n = (unsigned)(xs_next(x) % 5);
        for (unsigned i = 0; i < n; i++) random_value(w, x, depth + 1);
        af_jw_end(w, ']');
        break;
    }
    default: {
        af_jw_begin(w, '{');
        unsigned n = (unsigned)(xs_next(x) % 5);
        for (unsigned i = 0; i < n; i++) {
            static const char *const keys[] = {"a", "b", "id", "shape", "type"};
            af_jw_key(w, keys[xs_next(x) % 5]);
            random_value(w, x, depth + 1);
        }
        af_jw_end(w, '}');
    }
    }
}

/* Token i of text against cJSON item j; returns the index after i's subtree. */
static long same_tree(const char *text, const af_js_tok *t, long i, const cJSON *j) {
    char buf[256];
    switch (t[i].type) {
    case AF_JS_NULL: assert_true(cJSON_IsNull(j)); break;
    case AF_JS_TRUE: assert_true(cJSON_IsTrue(j)); break;
    case AF_JS_FALSE: assert_true(cJSON_IsFalse(j)); break;
    case AF_JS_NUMBER: {
        double v;
        assert_true(cJSON_IsNumber(j));
        assert_true(af_js_number(text, t, i, &v));
        assert_memory_equal(&v, &j->valuedouble, sizeof v);
        break;
    }
    case AF_JS_STRING:
        assert_true(cJSON_IsString(j));
        assert_true(af_js_string(text, t, i, buf, sizeof buf));
        assert_string_equal(buf, j->valuestring);
        break;
    case AF_JS_ARRAY:
    case AF_JS_OBJECT: {
        bool obj = t[i].type == AF_JS_OBJECT;
        assert_true(obj ? cJSON_IsObject(j) : cJSON_IsArray(j));
        assert_int_equal((int)t[i].size, cJSON_GetArraySize(j));
        long k = i + 1;
        for (const cJSON *it = j->child; it; it = it->next) {
            if (obj) {
                assert_true(af_js_string(text, t, k, buf, sizeof buf));
                assert_string_equal(buf, it->string);
                k++;
            }
            k = same_tree(text, t, k, it);
        }
        assert_int_equal(k, t[i].next);
        return k;
    }
    default: fail_msg("token %ld has type %d", i, t[i].type);
    }
    return i + 1;
}

static void test_scan_against_cjson(void **state) {
    (void)state;
    xorshift x = {0x2545f4914f6cdd1dull};
    size_t docs = scaled(3000), accepted_mutants = 0, mutants = 0;
    af_js_tok *t = malloc(4096 * sizeof *t);
    char *m = malloc(1 << 16);
    assert_non_null(t);
    assert_non_null(m);
    af_jw w = {0};
    for (size_t d = 0; d < docs; d++) {
        af_jw_reset(&w);
        random_value(&w, &x, 0);
        assert_false(w.failed);
        for (int k = 0; k < 8; k++) {
            /* the document itself, then mutants: bytes replaced, inserted, deleted */
            size_t n = w.len;
            memcpy(m, w.data, n);
            if (k > 0) {
                static const char pool[] = "{}[],:\"\\0123456789-+.eEtrufalsn \x01u";
                size_t at = n ? (size_t)(xs_next(&x) % n) : 0;
                char ch = pool[xs_next(&x) % (sizeof pool - 1)];
                unsigned op = (unsigned)(xs_next(&x) % 3);
                if (op == 0 && n) {
                    m[at] = ch;
                } else if (op == 1) {
                    memmove(m + at + 1, m + at, n - at);
                    m[at] = ch;
                    n++;
                } else if (n) {
                    memmove(m + at, m + at + 1, n - at - 1);
                    n--;
                }
                mutants++;
            }
            m[n] = 0;
            size_t used;
            long nt = af_js_parse(m, n, t, 4096, &used);
            if (k == 0 && nt < 0) fail_msg("the writer's own text is refused at %zu: %s", used, m);
            if (nt < 0) continue;
            assert_true(nt <= 4096);
            if (used != n) continue; /* text after the value: a different question */
            if (strstr(m, "\\ud") || strstr(m, "\\uD")) continue; /* cJSON refuses lone surrogates */
            cJSON *j = cJSON_ParseWithLength(m, n);
            if (!j) fail_msg("accepted here, refused by cJSON: %s", m);
            assert_int_equal(same_tree(m, t, 0, j), nt);
            cJSON_Delete(j);
            accepted_mutants += k > 0;
        }
    }
    /* the mutants exercised both answers */
    assert_true(accepted_mutants > mutants / 20 && accepted_mutants < mutants);
    af_jw_free(&w);
    free(m);
    free(t);
}

/* --- the writer and exact numbers --------------------------------------------------------- */

static void test_write(void **state) {
    (void)state;
    af_jw w = {0};
    af_jw_begin(&w, '{');
    af_jw_key(&w, "n"), af_jw_uint(&w, 18446744073709551615ull);
    af_jw_key(&w, "i"), af_jw_int(&w, INT64_MIN);
    af_jw_key(&w, "a"), af_jw_begin(&w, '[');
    af_jw_double(&w, 0.25), af_jw_double(&w, NAN), af_jw_bool(&w, false), af_jw_null(&w);
    af_jw_begin(&w, '{'), af_jw_end(&w, '}');
    af_jw_begin(&w, '['), af_jw_end(&w, ']');
    af_jw_end(&w, ']');
    af_jw_key(&w, "s"), af_jw_string(&w, "q\"b\\c\n\x01\x1f\x7f\xc3\xa9");
    af_jw_end(&w, '}');
    af_jw_raw(&w, "", 1);
    assert_false(w.failed);
    assert_string_equal(w.data, "{\"n\":18446744073709551615,\"i\":-9223372036854775808,"
                                "\"a\":[0.25,null,false,null,{},[]],\"s\":\"q\\\"b\\\\c\\n\\u0001\\u001f\x7f\xc3\xa9\"}");
    /* every byte below 0x20 escaped, and read back as itself */
    char all[32];
    for (int c = 1; c < 32; c++) all[c - 1] = (char)c;
    all[31] = 0;
    af_jw_reset(&w);
    af_jw_string(&w, all);
    af_js_tok t[2];
    size_t used;
    assert_int_equal(af_js_parse(w.data, w.len, t, 2, &used), 1);
    assert_int_equal(used, w.len);
    char back[64];
    assert_true(af_js_string(w.data, t, 0, back, sizeof back));
    assert_string_equal(back, all);
    af_jw_free(&w);
    af_jw_free(NULL);
}

/* The plain search af_json_format's fast paths must agree with. */
static void format_slow(char *buf, double x) {
    static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
    for (int i = 0; i < 3; i++) {
        snprintf(buf, AF_JSON_NUMBER_MAX, fmts[i], x);
        if (strtod(buf, NULL) == x) return;
    }
}

static void check_format(double x) {
    char fast[AF_JSON_NUMBER_MAX], slow[AF_JSON_NUMBER_MAX];
    size_t n = af_json_format(fast, x);
    assert_int_equal(n, strlen(fast));
    double back = strtod(fast, NULL);
    if (memcmp(&back, &x, sizeof x) != 0) fail_msg("%.17g printed as %s", x, fast);
    format_slow(slow, x);
    if (strcmp(fast, slow) != 0) fail_msg("%.17g: %s, the %%g search prints %s", x, fast, slow);
}

static void test_format(void **state) {
    (void)state;
    static const double hand[] = {0.0,  -0.0,   1.0,     -1.0,  0.5,       -0.0625, 3.75,  1e15,     1e15 - 1,
                                  1e16, 0x1p30, 0x1p30 + 0.5, 0.1, 1.0 / 3.0, 5e-324, 1e-5, -123.9375, 0.022979362286534105};
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) check_format(hand[i]);
    xorshift x = {42};
    for (size_t i = 0; i < scaled(200000); i++) {
        uint64_t r = xs_next(&x);
        double d;
        switch (r % 4) {
        case 0: d = (double)(int64_t)(xs_next(&x) >> (r >> 2) % 64) * ((r >> 8) & 1 ? -1.0 : 1.0); break;
        case 1: d = (double)(int64_t)(xs_next(&x) % (1ull << 36)) / 16.0 * ((r >> 8) & 1 ? -1.0 : 1.0); break;
        case 2: d = (double)(int8_t)(r >> 16) / 4.0; break; /* log10 magnitudes */
        default: {
            uint64_t bits = xs_next(&x);
            memcpy(&d, &bits, sizeof d);
            if (!isfinite(d)) d = 1.0;
        }
        }
        check_format(d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_tokens),
        cmocka_unit_test(test_scan_refuses),
        cmocka_unit_test(test_scan_against_cjson),
        cmocka_unit_test(test_write),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
