/* backend_pool.h - backends opened once and lent to many executors.
 *
 * An executor (exec.h) normally opens the backends of its checks and closes them when it is
 * destroyed: a worker (worker.h) then starts a process, and a Python stack imports, once per
 * executor. Replaying a corpus (`attnfuzz regress`, `replay` of many bundles) builds one
 * executor per set of checks; given a pool (af_exec_config.pool) every executor borrows its
 * backends from it instead, so a backend named by many bundles starts once for the whole
 * corpus. A worker that crashes or hangs restarts itself at its next run (worker.h): the pool
 * keeps the same backend, it never reopens one.
 *
 * A backend is the same one when it is opened with the same name (spec, as
 * af_backend_spec_open takes it) and the same worker options. A spec that cannot be opened is
 * not tried again: later opens give the first error (a missing stack costs one failed start,
 * not one per bundle). A worker's start-up is mostly waiting (an interpreter, a stack's
 * import, a GPU context: ~13 s for a CUDA target), so af_backend_pool_open_all starts the
 * workers a corpus names side by side, on threads of its own, before the first run. Not
 * thread-safe otherwise: one pool per thread or process, used by one thread at a time. */
#ifndef ATTNFUZZ_BACKEND_POOL_H
#define ATTNFUZZ_BACKEND_POOL_H

#include <stdint.h>

#include "backend.h"
#include "status.h"
#include "worker.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct af_backend_pool af_backend_pool;

/* An empty pool; NULL when out of memory. */
af_backend_pool *af_backend_pool_create(void);
/* Closes every backend of the pool (a worker's process ends). NULL does nothing. The
 * executors that borrowed them must be destroyed first. */
void af_backend_pool_destroy(af_backend_pool *p);

/* The backend opened from spec with worker options wopts (NULL: defaults), opened now
 * (af_backend_spec_open) the first time. *out stays the pool's: never af_backend_close it.
 * Errors: those of af_backend_spec_open, the same again on every later open of a spec that
 * failed; AF_ERR_NOMEM. */
af_status af_backend_pool_open(af_backend_pool *p, const char *spec, const af_worker_opts *wopts, af_backend **out,
                               af_error *err);
/* Threads af_backend_pool_open_all uses at most: it waits on pipes, not on the CPU. */
#define AF_BACKEND_POOL_THREADS 16

/* Opens every spec of specs[0 .. n) that p does not hold yet with options wopts (a spec
 * named twice once), as af_backend_pool_open would one after another, but the worker specs
 * (worker:, target:) all at once: min(threads, AF_BACKEND_POOL_THREADS) start side by side
 * (threads <= 1: one after another), so their start-ups overlap. Builtin and plugin specs are
 * opened on this thread, before. Returns when every open has succeeded or failed. A spec
 * that cannot be opened is remembered as af_backend_pool_open remembers it (its later opens
 * give its error); that is not this call's error. Errors: AF_ERR_NOMEM (nothing opened). */
af_status af_backend_pool_open_all(af_backend_pool *p, const char *const *specs, size_t n,
                                   const af_worker_opts *wopts, unsigned threads, af_error *err);

/* Closes the backends opened from spec (whatever their worker options) and forgets a failed
 * open of it: when no later executor needs it, its process ends now rather than with the
 * pool. No executor may still hold it. */
void af_backend_pool_close(af_backend_pool *p, const char *spec);

/* What a pool has done so far, closed backends included. */
typedef struct af_backend_pool_stats {
    uint64_t opened;   /* backends opened (af_backend_spec_open calls that succeeded) */
    uint64_t workers;  /* of which workers (worker:, target:): worker processes started */
    uint64_t restarts; /* worker restarts after a fault (a crash, a hang, a broken frame) */
    uint64_t failed;   /* specs that could not be opened */
    uint64_t running;  /* workers open now (af_backend_pool_close and _destroy end them) */
} af_backend_pool_stats;
void af_backend_pool_stats_of(const af_backend_pool *p, af_backend_pool_stats *s);

#ifdef __cplusplus
}
#endif
#endif
