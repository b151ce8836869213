/* worker.h - out-of-process backends: `worker:COMMAND` and `target:STACK/VARIANT`
 * (docs/design.md section 7; the bytes: docs/worker-protocol.md).
 *
 * A worker is a persistent child process speaking length-prefixed frames (a JSON header,
 * a newline, raw little-endian tensor bytes) on its stdin and stdout. It is opened as an
 * ordinary backend (backend.h); what it declared in its hello (capabilities, layouts,
 * dtypes, limits, conventions, compile_key: AF_KEY_* bits of case_key.h) is read through
 * af_backend_ext (backend.h); what a run left behind (stderr tail, timings, keep mask,
 * guard writes, statistics) is that run's af_run_result (af_backend_execute for a run
 * alone, af_backend_batch_end for a batch). A run alone is a batch of one: the same path
 * from the request to its result, sent as a run frame of one request.
 *
 * Faults are findings, never the end of a run: a worker that dies while a case is in
 * flight gives AF_ERR_CRASH, one silent past the timeout is killed and gives
 * AF_ERR_TIMEOUT, a frame that breaks the protocol gives AF_ERR_BACKEND with a message
 * starting "protocol:"; in each case the worker is restarted before the next run (with
 * backoff), and the run reports 0 s of compiling (af_run_result.compile_s), so the time a
 * fault took is never taken for a compile worth reusing. A worker that cannot start at all is AF_ERR_INVALID from af_worker_open,
 * with its stderr in the message; one that can no longer be restarted mid-campaign is
 * AF_ERR_IO from run (a runtime error, not a finding). */
#ifndef ATTNFUZZ_WORKER_H
#define ATTNFUZZ_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "case.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AF_WORKER_PROTOCOL 1
#define AF_WORKER_STDERR_TAIL 4096 /* bytes of a worker's stderr kept for bundles */

/* Options of every worker an executor opens. */
typedef struct af_worker_opts {
    double timeout;           /* seconds per case; 0 = default 10 */
    double compile_timeout;   /* extra seconds for the first run of a compile key (and for the
                                 hello); 0 = default 60 */
    double unsupported_learn; /* refusals with no success after which a feature counts as a
                                 missing capability; 0 = default 20, negative = never learn */
    bool no_spare;            /* false (the default): after a worker's first fault, a spare
                                 process started ahead takes over at the next one */
} af_worker_opts;
void af_worker_opts_default(af_worker_opts *o);

/* Opens "worker:COMMAND" or "target:STACK/VARIANT" (see docs/worker-protocol.md for how a
 * target becomes a command). Starts the process and reads its hello. AF_ERR_INVALID when
 * the spec is malformed or the worker cannot start (its stderr is in the message). opts
 * may be NULL (defaults). */
af_status af_worker_open(const char *spec, const af_worker_opts *opts, af_backend **out, af_error *err);

/* The argv a spec runs, with no shell: argv[0] the program, NULL-terminated.
 * worker:COMMAND splits COMMAND into words as a POSIX shell would (quotes and backslashes,
 * no expansion). target:STACK/VARIANT runs PYTHON -m attnfuzz.targets.STACK VARIANT with
 * the project's Python: <root>/.venv/bin/python when executable, else $ATTNFUZZ_PYTHON,
 * else python3, where <root> is the first ancestor of the executable's directory, else of
 * the current directory, holding python/attnfuzz/__init__.py; *pythonpath then receives
 * <root>/python, to prepend to the child's PYTHONPATH (NULL when no root was found, and
 * for worker: specs). Both are the caller's: af_worker_argv_free them. AF_ERR_INVALID for
 * an empty command, unbalanced quotes, a target without STACK/VARIANT or a stack name
 * outside [a-z0-9_]; AF_ERR_NOMEM. */
af_status af_worker_argv(const char *spec, char ***argv, char **pythonpath, af_error *err);
void af_worker_argv_free(char **argv, char *pythonpath); /* NULLs do nothing */

#ifdef __cplusplus
}
#endif
#endif
