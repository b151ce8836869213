/* json_scan.c - a strict JSON reader into caller-owned tokens (see json_scan.h). */
#include "json_scan.h"

#include <stdlib.h>
#include <string.h>

static size_t af_js_ws(const char *s, size_t n, size_t p) {
    while (p < n && (s[p] == ' ' || s[p] == '\t' || s[p] == '\n' || s[p] == '\r')) p++;
    return p;
}

static int af_js_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool af_js_digit(const char *s, size_t n, size_t p) { return p < n && s[p] >= '0' && s[p] <= '9'; }

/* A string at s[p] == '"': returns the offset after its closing quote, 0 when invalid
 * (*at: where). */
static size_t af_js_str(const char *s, size_t n, size_t p, bool *escaped, size_t *at) {
    *escaped = false;
    for (size_t q = p + 1; q < n; q++) {
        unsigned char c = (unsigned char)s[q];
        if (c == '"') return q + 1;
        if (c < 0x20) {
            *at = q;
            return 0;
        }
        if (c != '\\') continue;
        *escaped = true;
        if (++q >= n) break;
        if (s[q] == 'u') {
            for (int k = 1; k <= 4; k++)
                if (q + (size_t)k >= n || af_js_hex(s[q + (size_t)k]) < 0) {
                    *at = q + (size_t)k;
                    return 0;
                }
            q += 4;
        } else if (!strchr("\"\\/bfnrt", s[q]) || !s[q]) {
            *at = q;
            return 0;
        }
    }
    *at = n;
    return 0;
}

/* A number at s[p] by the JSON grammar: returns the offset after it, 0 when invalid. */
static size_t af_js_num(const char *s, size_t n, size_t p, size_t *at) {
    size_t q = p;
    if (q < n && s[q] == '-') q++;
    if (!af_js_digit(s, n, q)) goto bad;
    if (s[q] == '0') {
        q++;
    } else {
        while (af_js_digit(s, n, q)) q++;
    }
    if (q < n && s[q] == '.') {
        if (!af_js_digit(s, n, ++q)) goto bad;
        while (af_js_digit(s, n, q)) q++;
    }
    if (q < n && (s[q] == 'e' || s[q] == 'E')) {
        q++;
        if (q < n && (s[q] == '+' || s[q] == '-')) q++;
        if (!af_js_digit(s, n, q)) goto bad;
        while (af_js_digit(s, n, q)) q++;
    }
    return q;
bad:
    *at = q;
    return 0;
}

long af_js_parse(const char *s, size_t n, af_js_tok *toks, size_t cap, size_t *used) {
    uint32_t stack[AF_JS_MAX_DEPTH], count[AF_JS_MAX_DEPTH]; /* open containers: token, values so far */
    char kind[AF_JS_MAX_DEPTH];                              /* and opening byte */
    int depth = 0;
    size_t nt = 0, p = 0, at = 0;
    if (n >= UINT32_MAX) goto fail;
    p = af_js_ws(s, n, p);
    for (;;) {
        /* a value at p */
        if (p >= n) goto fail;
        size_t me = nt++;
        af_js_tok t = {0, false, (uint32_t)p, 0, 0, 0};
        char c = s[p];
        if (c == '{' || c == '[') {
            if (depth == AF_JS_MAX_DEPTH) goto fail;
            t.type = c == '{' ? AF_JS_OBJECT : AF_JS_ARRAY;
            if (me < cap) toks[me] = t;
            kind[depth] = c, count[depth] = 0, stack[depth++] = (uint32_t)me;
            p = af_js_ws(s, n, p + 1);
            if (p < n && s[p] == (c == '{' ? '}' : ']')) {
                p++;
                depth--;
                if (me < cap) toks[me].end = (uint32_t)p, toks[me].next = (uint32_t)nt;
                goto done_value;
            }
            if (c == '{') goto key;
            continue;
        }
        if (c == '"') {
            size_t e = af_js_str(s, n, p, &t.escaped, &at);
            if (!e) goto fail_at;
            t.type = AF_JS_STRING, t.start = (uint32_t)p + 1, t.end = (uint32_t)e - 1;
            p = e;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t e = af_js_num(s, n, p, &at);
            if (!e) goto fail_at;
            t.type = AF_JS_NUMBER, t.end = (uint32_t)e;
            p = e;
        } else {
            static const char *const lit[3] = {"true", "false", "null"};
            static const uint8_t lit_type[3] = {AF_JS_TRUE, AF_JS_FALSE, AF_JS_NULL};
            int k = c == 't' ? 0 : c == 'f' ? 1 : c == 'n' ? 2 : -1;
            size_t len = k < 0 ? 0 : strlen(lit[k]);
            if (k < 0 || n - p < len || memcmp(s + p, lit[k], len) != 0) goto fail;
            t.type = lit_type[k], t.end = (uint32_t)(p + len);
            p += len;
        }
        t.next = (uint32_t)nt;
        if (me < cap) toks[me] = t;
    done_value:
        /* a complete value: the next member or element, or its container's end */
        if (depth == 0) break;
        p = af_js_ws(s, n, p);
        count[depth - 1]++;
        if (p < n && s[p] == ',') {
            p = af_js_ws(s, n, p + 1);
            if (kind[depth - 1] == '{') goto key;
            continue;
        }
        if (p < n && s[p] == (kind[depth - 1] == '{' ? '}' : ']')) {
            p++;
            depth--;
            uint32_t top = stack[depth];
            if (top < cap) toks[top].end = (uint32_t)p, toks[top].size = count[depth], toks[top].next = (uint32_t)nt;
            goto done_value;
        }
        goto fail;
    key:
        if (p >= n || s[p] != '"') goto fail;
        {
            size_t ki = nt++;
            af_js_tok kt = {AF_JS_STRING, false, (uint32_t)p + 1, 0, 0, 0};
            size_t e = af_js_str(s, n, p, &kt.escaped, &at);
            if (!e) goto fail_at;
            kt.end = (uint32_t)e - 1, kt.next = (uint32_t)nt;
            if (ki < cap) toks[ki] = kt;
            p = af_js_ws(s, n, e);
            if (p >= n || s[p] != ':') goto fail;
            p = af_js_ws(s, n, p + 1);
        }
    }
    *used = p;
    return (long)nt;
fail:
    at = p;
fail_at:
    *used = at;
    return -1;
}

/* --- reading tokens ------------------------------------------------------------------------- */

long af_js_get(const char *text, const af_js_tok *toks, long obj, const char *key) {
    if (obj < 0 || toks[obj].type != AF_JS_OBJECT) return -1;
    size_t len = strlen(key);
    long k = obj + 1;
    for (uint32_t m = 0; m < toks[obj].size; m++) {
        const af_js_tok *t = &toks[k];
        if (t->escaped ? af_js_is(text, toks, k, key)
                       : t->end - t->start == len && memcmp(text + t->start, key, len) == 0)
            return k + 1;
        k = toks[k + 1].next;
    }
    return -1;
}

long af_js_item(const af_js_tok *toks, long arr, uint32_t i) {
    if (arr < 0 || toks[arr].type != AF_JS_ARRAY || i >= toks[arr].size) return -1;
    long k = arr + 1;
    while (i--) k = toks[k].next;
    return k;
}

/* The next character of a string's text at *q (below end) as UTF-8 into out; returns its
 * length (1 to 4). The text was checked by af_js_str. */
static size_t af_js_char(const char *s, size_t *q, size_t end, char out[4]) {
    if (s[*q] != '\\') {
        out[0] = s[(*q)++];
        return 1;
    }
    char e = s[*q + 1];
    *q += 2;
    switch (e) {
    case 'b': out[0] = '\b'; return 1;
    case 'f': out[0] = '\f'; return 1;
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case 'u': break;
    default: out[0] = e; return 1; /* " \ / */
    }
    uint32_t cp = 0;
    for (int k = 0; k < 4; k++) cp = cp << 4 | (uint32_t)af_js_hex(s[*q + (size_t)k]);
    *q += 4;
    if (cp >= 0xd800 && cp < 0xdc00 && *q + 6 <= end && s[*q] == '\\' && s[*q + 1] == 'u') {
        uint32_t lo = 0;
        for (int k = 0; k < 4; k++) lo = lo << 4 | (uint32_t)af_js_hex(s[*q + 2 + (size_t)k]);
        if (lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            *q += 6;
        }
    }
    if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd; /* a lone surrogate */
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3f)), out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f)), out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

bool af_js_is(const char *text, const af_js_tok *toks, long i, const char *s) {
    if (i < 0 || toks[i].type != AF_JS_STRING) return false;
    const af_js_tok *t = &toks[i];
    size_t len = strlen(s);
    if (!t->escaped) return t->end - t->start == len && memcmp(text + t->start, s, len) == 0;
    size_t q = t->start, k = 0;
    while (q < t->end) {
        char ch[4];
        size_t m = af_js_char(text, &q, t->end, ch);
        if (k + m > len || memcmp(s + k, ch, m) != 0) return false;
        k += m;
    }
    return k == len;
}

bool af_js_string(const char *text, const af_js_tok *toks, long i, char *buf, size_t len) {
    if (i < 0 || toks[i].type != AF_JS_STRING) return false;
    if (!len) return true;
    size_t q = toks[i].start, k = 0;
    while (q < toks[i].end) {
        char ch[4];
        size_t m = af_js_char(text, &q, toks[i].end, ch);
        if (k + m > len - 1 || (m == 1 && ch[0] == 0)) break;
        memcpy(buf + k, ch, m);
        k += m;
    }
    buf[k] = 0;
    return true;
}

bool af_js_number(const char *text, const af_js_tok *toks, long i, double *v) {
    if (i < 0 || toks[i].type != AF_JS_NUMBER) return false;
    const char *p = text + toks[i].start;
    size_t len = toks[i].end - toks[i].start;
    /* an integer of up to 15 digits: exact as a double, no strtod */
    bool neg = p[0] == '-';
    if (len - neg <= 15) {
        uint64_t u = 0;
        size_t k = neg;
        while (k < len && p[k] >= '0' && p[k] <= '9') u = u * 10 + (uint64_t)(p[k++] - '0');
        if (k == len) {
            *v = neg ? -(double)u : (double)u;
            return true;
        }
    }
    /* strtod stops at the byte after the number: inside an object or array there is one
     * (a delimiter, never part of a number); the top-level value (token 0) may end the text */
    if (i == 0) {
        char tmp[128];
        if (len >= sizeof tmp) return false;
        memcpy(tmp, p, len);
        tmp[len] = 0;
        *v = strtod(tmp, NULL);
        return true;
    }
    *v = strtod(p, NULL);
    return true;
}
