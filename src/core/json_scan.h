/* json_scan.h - a strict JSON reader that does not allocate (library-internal; the C
 * test worker compiles it too: it depends on the C library only).
 *
 * af_js_parse checks one JSON value against RFC 8259 (objects, arrays, strings with their
 * escapes, numbers by the JSON grammar, true, false, null; nesting up to AF_JS_MAX_DEPTH)
 * and describes it as a flat array of tokens in document order, the caller's storage: an
 * object's token is followed by key and value tokens, an array's by its elements, and
 * every token knows where its subtree ends, so lookups skip what they do not read. For
 * frames read on every execution (a worker's result) where a cJSON tree would cost an
 * allocation per value. Texts are addressed by byte offsets below 4 GiB.
 *
 *   af_js_tok t[64]; size_t used;
 *   long n = af_js_parse(text, len, t, 64, &used);  // n > 64: call again with n tokens
 *   long id = af_js_get(text, t, 0, "id");          // the value's token, or -1        */
#ifndef ATTNFUZZ_JSON_SCAN_H
#define ATTNFUZZ_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AF_JS_MAX_DEPTH 64

typedef enum af_js_type {
    AF_JS_OBJECT = 1,
    AF_JS_ARRAY,
    AF_JS_STRING,
    AF_JS_NUMBER,
    AF_JS_TRUE,
    AF_JS_FALSE,
    AF_JS_NULL
} af_js_type;

typedef struct af_js_tok {
    uint8_t type;    /* af_js_type */
    bool escaped;    /* a string with a backslash escape (compare through af_js_string) */
    uint32_t start;  /* bytes [start, end) of text: a string without its quotes */
    uint32_t end;
    uint32_t size;   /* an object's members, an array's elements */
    uint32_t next;   /* the index of the first token after this one's subtree */
} af_js_tok;

/* Parses the JSON value at text[0..n) (whitespace before it allowed) and stops right after
 * it: *used is the offset of the byte after the value (as cJSON's parse end). Returns the number of
 * tokens the value needs; when that is more than cap, only the first cap were written
 * (the text is checked all the same): call again with room for them. -1: not valid JSON
 * (or nested deeper than AF_JS_MAX_DEPTH, or a text of 4 GiB or more); *used is then the
 * offset of the first byte that could not be read. */
long af_js_parse(const char *text, size_t n, af_js_tok *toks, size_t cap, size_t *used);

/* The value of member key in object token obj, -1 when absent or obj is not an object
 * (the first of duplicate keys wins, as in cJSON). Every token must have been written. */
long af_js_get(const char *text, const af_js_tok *toks, long obj, const char *key);
/* The i-th element of array token arr, -1 when out of range (i steps: to visit every
 * element, start at af_js_item(toks, arr, 0) and step with toks[k].next). */
long af_js_item(const af_js_tok *toks, long arr, uint32_t i);

/* Whether token i is the string s (escapes decoded). */
bool af_js_is(const char *text, const af_js_tok *toks, long i, const char *s);
/* String token i decoded into buf as UTF-8 (cut to len - 1 bytes, NUL-terminated; a
 * \u0000 ends it; a lone surrogate becomes U+FFFD). False when i is not a string. */
bool af_js_string(const char *text, const af_js_tok *toks, long i, char *buf, size_t len);
/* Number token i as a double (the nearest, as strtod). False when i is not a number, or
 * is a top-level number (token 0) of over 127 characters. */
bool af_js_number(const char *text, const af_js_tok *toks, long i, double *v);

#endif
