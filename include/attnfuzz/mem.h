/* mem.h - every allocation of the library goes through one hook, so tests can inject
 * failures (zstd's customMem, SQLite's sqlite3FaultSim). */
#ifndef ATTNFUZZ_MEM_H
#define ATTNFUZZ_MEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct af_allocator {
    void *(*alloc)(void *opaque, size_t size); /* returns NULL on failure */
    void (*free)(void *opaque, void *ptr);     /* ptr is never NULL */
    void *opaque;
} af_allocator;

/* Installs a process-wide allocator; NULL restores malloc/free. Not thread-safe: call it
 * before any other library function. */
void af_mem_set_allocator(const af_allocator *a);

/* 64-byte aligned, uninitialised; NULL on failure or when size is 0. Free with af_free. */
void *af_malloc(size_t size);
/* Zeroed; NULL on failure or overflow of n * size. */
void *af_calloc(size_t n, size_t size);
/* af_free(NULL) does nothing. */
void af_free(void *ptr);
/* Copies a NUL-terminated string; NULL on failure. */
char *af_strdup(const char *s);

/* Overflow-checked size arithmetic: returns 0 and leaves *out untouched on overflow. */
int af_size_mul(size_t a, size_t b, size_t *out);
int af_size_add(size_t a, size_t b, size_t *out);

#ifdef __cplusplus
}
#endif
#endif
