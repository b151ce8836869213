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

void af_parallel_for(size_t n, unsigned threads, void (*fn)(void *ctx, size_t i), void *ctx) {
    if (threads <= 1 || n <= 1) {
        for (size_t i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    if (threads > AF_PARALLEL_MAX) threads = AF_PARALLEL_MAX;
    if (threads > n) threads = (unsigned)n;
    af_parallel_job j = {.n = n, .fn = fn, .ctx = ctx};
    atomic_init(&j.next, 0);
    pthread_t tid[AF_PARALLEL_MAX];
    bool started[AF_PARALLEL_MAX] = {false};
    for (unsigned t = 1; t < threads; t++) started[t] = pthread_create(&tid[t], NULL, af_parallel_worker, &j) == 0;
    af_parallel_worker(&j);
    for (unsigned t = 1; t < threads; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}

unsigned af_parallel_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? (unsigned)n : 1;
}
