/* scratch.h - reusable work buffers (library-internal). A kernel asks for slot k of n
 * bytes; the buffer only grows, so the fuzz loop stops allocating once it has seen its
 * largest case (zstd's workspace, ggml's mem_buffer). */
#ifndef ATTNFUZZ_SCRATCH_H
#define ATTNFUZZ_SCRATCH_H

#include <stddef.h>

#include "attnfuzz/status.h"

#define AF_SCRATCH_SLOTS 48

typedef struct af_scratch {
    void *p[AF_SCRATCH_SLOTS];
    size_t cap[AF_SCRATCH_SLOTS];
} af_scratch;

/* Buffer of slot k with at least n bytes (contents not kept when it grows); NULL and an
 * error on allocation failure. n == 0 gives a valid 64-byte buffer. */
void *af_scratch_get(af_scratch *s, int k, size_t n, af_error *err);
/* Frees every slot; the struct can be reused. */
void af_scratch_release(af_scratch *s);

/* Typed helpers: count elements of a type, overflow-checked. */
#define AF_SCRATCH(s, k, T, count, err) ((T *)af_scratch_get_n((s), (k), (count), sizeof(T), (err)))
void *af_scratch_get_n(af_scratch *s, int k, size_t count, size_t size, af_error *err);

#endif
