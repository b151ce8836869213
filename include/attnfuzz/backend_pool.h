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
 * not one per bundle). Not thread-safe: one pool per thread or process. */
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
} af_backend_pool_stats;
void af_backend_pool_stats_of(const af_backend_pool *p, af_backend_pool_stats *s);

#ifdef __cplusplus
}
#endif
#endif
