/* json_write.c - JSON text into a growable buffer (see json_write.h). */
#include "json_write.h"

#include <math.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "json_exact.h"

void af_jw_reset(af_jw *w) {
    w->len = 0;
    w->failed = false;
    w->need_comma = false;
}

void af_jw_free(af_jw *w) {
    if (!w) return;
    af_free(w->data);
    memset(w, 0, sizeof *w);
}

/* Room for extra more bytes; false (and failed set) when there is none. */
bool af_jw_grow(af_jw *w, size_t extra) {
    if (w->failed) return false;
    if (extra <= w->cap - w->len) return true;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap - w->len < extra) {
        if (cap > SIZE_MAX / 2) {
            w->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *n = af_malloc(cap);
    if (!n) {
        w->failed = true;
        return false;
    }
    if (w->len) memcpy(n, w->data, w->len);
    af_free(w->data);
    w->data = n;
    w->cap = cap;
    return true;
}

/* The comma before a value or key at the current level. */
static void af_jw_sep(af_jw *w) {
    if (w->need_comma) af_jw_raw(w, ",", 1);
}

void af_jw_begin(af_jw *w, char open) {
    af_jw_sep(w);
    af_jw_raw(w, &open, 1);
    w->need_comma = false;
}

void af_jw_end(af_jw *w, char close) {
    af_jw_raw(w, &close, 1);
    w->need_comma = true;
}

void af_jw_key(af_jw *w, const char *key) {
    af_jw_sep(w);
    size_t n = strlen(key);
    if (!af_jw_grow(w, n + 3)) return;
    char *p = w->data + w->len;
    p[0] = '"';
    memcpy(p + 1, key, n);
    p[n + 1] = '"';
    p[n + 2] = ':';
    w->len += n + 3;
    w->need_comma = false;
}

/* A value's text (after its comma). */
static void af_jw_value(af_jw *w, const char *s, size_t n) {
    af_jw_sep(w);
    af_jw_raw(w, s, n);
    w->need_comma = true;
}

void af_jw_uint(af_jw *w, uint64_t v) {
    char buf[24];
    af_jw_value(w, buf, af_json_integer(buf, false, v));
}

void af_jw_int(af_jw *w, int64_t v) {
    char buf[24];
    af_jw_value(w, buf, af_json_integer(buf, v < 0, v < 0 ? 0 - (uint64_t)v : (uint64_t)v));
}

void af_jw_double(af_jw *w, double x) {
    if (!isfinite(x)) {
        af_jw_null(w);
        return;
    }
    char buf[AF_JSON_NUMBER_MAX];
    size_t n = af_json_format(buf, x);
    af_jw_value(w, buf, n);
}

void af_jw_bool(af_jw *w, bool b) { af_jw_value(w, b ? "true" : "false", b ? 4 : 5); }

void af_jw_null(af_jw *w) { af_jw_value(w, "null", 4); }

void af_jw_string(af_jw *w, const char *s) {
    af_jw_sep(w);
    af_jw_raw(w, "\"", 1);
    static const char hex[] = "0123456789abcdef";
    const char *run = s; /* bytes not yet written that need no escape */
    for (const char *p = s;; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch != 0 && ch >= 0x20 && ch != '"' && ch != '\\') continue;
        af_jw_raw(w, run, (size_t)(p - run));
        if (ch == 0) break;
        char esc[6] = {'\\', (char)ch, 0, 0, 0, 0};
        size_t n = 2;
        switch (ch) {
        case '\n': esc[1] = 'n'; break;
        case '\t': esc[1] = 't'; break;
        case '\r': esc[1] = 'r'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '"':
        case '\\': break;
        default:
            esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[ch >> 4], esc[5] = hex[ch & 15];
            n = 6;
        }
        af_jw_raw(w, esc, n);
        run = p + 1;
    }
    af_jw_raw(w, "\"", 1);
    w->need_comma = true;
}
