/* parallel.c - af_parallel_for (see parallel.h): threads take the next index from a
 * shared counter until none is left, so uneven pieces (a large case beside small ones)
 * balance themselves. */
#include "parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#define AF_PARALLEL_MAX 64

typedef struct af_parallel_job {
    size_t n;
    atomic_size_t next;
    void (*fn)(void *ctx, size_t i);
    void *ctx;
} af_parallel_job;

static void *af_parallel_worker(void *arg) {
    af_parallel_job *j = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) break;
        j->fn(j->ctx, i);
    }
    return NULL;
}

void af_parallel_for_beside(size_t n, unsigned threads, void (*fn)(void *ctx, size_t i), void *ctx,
                            void (*side)(void *side_ctx), void *side_ctx) {
    /* helpers beside this thread: one per piece at most, and one fewer when this thread
     * takes pieces from the start (no side work) */
    size_t helpers = threads > 1 ? threads - 1 : 0, cap = side || n == 0 ? n : n - 1;
    if (helpers > AF_PARALLEL_MAX - 1) helpers = AF_PARALLEL_MAX - 1;
    if (helpers > cap) helpers = cap;
    if (helpers == 0) {
        if (side) side(side_ctx);
        for (size_t i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    af_parallel_job j = {.n = n, .fn = fn, .ctx = ctx};
    atomic_init(&j.next, 0);
    pthread_t tid[AF_PARALLEL_MAX];
    bool started[AF_PARALLEL_MAX] = {false};
    for (size_t t = 0; t < helpers; t++) started[t] = pthread_create(&tid[t], NULL, af_parallel_worker, &j) == 0;
    if (side) side(side_ctx);
    af_parallel_worker(&j);
    for (size_t t = 0; t < helpers; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}

void af_parallel_for(size_t n, unsigned threads, void (*fn)(void *ctx, size_t i), void *ctx) {
    af_parallel_for_beside(n, threads, fn, ctx, NULL, NULL);
}

unsigned af_parallel_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? (unsigned)n : 1;
}
