/* mem.c - the one allocation hook. Buffers are 64-byte aligned for vector loads: the hook
 * is asked for size + 64 bytes and the original pointer is kept just before the block. */
#include "attnfuzz/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *af_mem_default_alloc(void *opaque, size_t size) {
    (void)opaque;
    return malloc(size);
}
static void af_mem_default_free(void *opaque, void *ptr) {
    (void)opaque;
    free(ptr);
}

static af_allocator af_mem_current = {af_mem_default_alloc, af_mem_default_free, NULL};

void af_mem_set_allocator(const af_allocator *a) {
    if (a && a->alloc && a->free) {
        af_mem_current = *a;
    } else {
        af_mem_current.alloc = af_mem_default_alloc;
        af_mem_current.free = af_mem_default_free;
        af_mem_current.opaque = NULL;
    }
}

#define AF_MEM_ALIGN 64u

void *af_malloc(size_t size) {
    if (size == 0 || size > SIZE_MAX - AF_MEM_ALIGN - sizeof(void *)) return NULL;
    unsigned char *raw = af_mem_current.alloc(af_mem_current.opaque, size + AF_MEM_ALIGN + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t p = (uintptr_t)(raw + sizeof(void *));
    p = (p + AF_MEM_ALIGN - 1) & ~(uintptr_t)(AF_MEM_ALIGN - 1);
    void **slot = (void **)p - 1;
    *slot = raw;
    return (void *)p;
}

void *af_calloc(size_t n, size_t size) {
    size_t total;
    if (!af_size_mul(n, size, &total)) return NULL;
    void *p = af_malloc(total);
    if (p) memset(p, 0, total);
    return p;
}

void af_free(void *ptr) {
    if (!ptr) return;
    void *raw = ((void **)ptr)[-1];
    af_mem_current.free(af_mem_current.opaque, raw);
}

char *af_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = af_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int af_size_mul(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

int af_size_add(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}
