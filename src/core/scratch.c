/* scratch.c - grow-only work buffers. */
#include "scratch.h"

#include "attnfuzz/mem.h"

void *af_scratch_get(af_scratch *s, int k, size_t n, af_error *err) {
    AF_ASSERT(k >= 0 && k < AF_SCRATCH_SLOTS);
    if (n == 0) n = 64;
    if (n > s->cap[k]) {
        af_free(s->p[k]);
        size_t grown = n + n / 4; /* a little slack against creeping sizes */
        if (grown < n) grown = n;
        s->p[k] = af_malloc(grown);
        s->cap[k] = s->p[k] ? grown : 0;
        if (!s->p[k]) {
            af_error_set(err, AF_ERR_NOMEM, "out of memory allocating %zu bytes of workspace", n);
            return NULL;
        }
    }
    return s->p[k];
}

void *af_scratch_get_n(af_scratch *s, int k, size_t count, size_t size, af_error *err) {
    size_t n;
    if (!af_size_mul(count, size, &n)) {
        af_error_set(err, AF_ERR_NOMEM, "workspace size overflows");
        return NULL;
    }
    return af_scratch_get(s, k, n, err);
}

void af_scratch_release(af_scratch *s) {
    for (int k = 0; k < AF_SCRATCH_SLOTS; k++) {
        af_free(s->p[k]);
        s->p[k] = NULL;
        s->cap[k] = 0;
    }
}
