/* parallel.h - running independent pieces of work on several threads (the cases of a
 * batch: their inputs and float64 references). Library-internal. */
#ifndef ATTNFUZZ_PARALLEL_H
#define ATTNFUZZ_PARALLEL_H

#include <stddef.h>

/* Calls fn(ctx, i) for every i in [0, n), on at most `threads` threads (this one among
 * them; threads <= 1 or n <= 1: all here, in order). fn must be safe to run on different
 * i at once. Returns when every call has returned. A thread that cannot be created leaves
 * its share to the others: the work is always done. */
void af_parallel_for(size_t n, unsigned threads, void (*fn)(void *ctx, size_t i), void *ctx);

/* As af_parallel_for, but this thread first calls side(side_ctx) while the other threads
 * start on fn (the batch frames written to the workers while the references are computed);
 * when side returns, this thread joins the work on fn. With threads <= 1 side runs first,
 * then every fn here. side may be NULL. */
void af_parallel_for_beside(size_t n, unsigned threads, void (*fn)(void *ctx, size_t i), void *ctx,
                            void (*side)(void *side_ctx), void *side_ctx);

/* The CPUs this process may run on (sched_getaffinity), at least 1. */
unsigned af_parallel_cpus(void);

#endif
