/* json_write.h - JSON text written straight into a growable buffer (library-internal).
 *
 * For text written on every execution (a worker's run frame): no tree, no allocation once
 * the buffer has grown to its working size. Commas are placed by the writer: call
 * af_jw_key before each member of an object, then one value; array elements are values in
 * a row. Numbers are exact (json_exact.h). An allocation failure is remembered in
 * `failed` and every later call does nothing; check it once at the end.
 *
 *   af_jw_begin(&w, '{'); af_jw_key(&w, "n"); af_jw_uint(&w, 3); af_jw_end(&w, '}');
 *   -> {"n":3}                                                                      */
#ifndef ATTNFUZZ_JSON_WRITE_H
#define ATTNFUZZ_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct af_jw {
    char *data; /* len bytes of text (not NUL-terminated); owned, af_jw_free */
    size_t len, cap;
    bool failed;     /* an allocation failed: the text is incomplete */
    bool need_comma; /* a value was written at this level: the next one needs a comma */
} af_jw;

/* Empties the text (keeps the storage). */
void af_jw_reset(af_jw *w);
void af_jw_free(af_jw *w);
/* Bytes as they are (no comma logic): frame prefixes, pre-made JSON. Inline: a run frame
 * is a few hundred short pieces. */
bool af_jw_grow(af_jw *w, size_t extra);
static inline void af_jw_raw(af_jw *w, const void *s, size_t n) {
    if (n > w->cap - w->len && !af_jw_grow(w, n)) return;
    if (n == 0 || w->failed) return;
    memcpy(w->data + w->len, s, n);
    w->len += n;
}

/* '{' or '[' opens, the matching '}' or ']' closes. */
void af_jw_begin(af_jw *w, char open);
void af_jw_end(af_jw *w, char close);
/* A member's key (a plain identifier: written without escaping) and its colon. */
void af_jw_key(af_jw *w, const char *key);

void af_jw_uint(af_jw *w, uint64_t v);
void af_jw_int(af_jw *w, int64_t v);
/* A double as the shortest exact number; null when not finite (JSON has no Inf or NaN). */
void af_jw_double(af_jw *w, double x);
void af_jw_bool(af_jw *w, bool b);
void af_jw_null(af_jw *w);
/* A string, escaped as JSON requires (quotes, backslashes, control characters). */
void af_jw_string(af_jw *w, const char *s);

#endif
