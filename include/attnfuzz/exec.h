/* exec.h - one execution: bytes or a case in, findings out. The campaign, `replay`, and
 * the libFuzzer / AFL++ harnesses all run cases through this, so they agree on what a
 * finding is.
 *
 * An executor holds a set of checks:
 *   backend B        B against the float64 reference           who = "B"
 *   pair A,B         both against the reference; a finding     who = "A,B"
 *                    when either side is off
 *   relation R on B  B run twice on transformed inputs         who = "R@B"
 *   determinism on B B run a second time on the same inputs     who = "determinism@B"
 *                    (a share of executions): bitwise equal
 *                    outputs and gradients, but for the passes
 *                    B declares nondeterministic (AF_TRAIT_*)
 * and every buffer an execution needs, reused across executions. */
#ifndef ATTNFUZZ_EXEC_H
#define ATTNFUZZ_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "bundle.h"
#include "case.h"
#include "oracle.h"
#include "relation.h"
#include "status.h"
#include "worker.h"

struct af_backend_pool;

#ifdef __cplusplus
extern "C" {
#endif

#define AF_EXEC_MAX_CHECKS 64
#define AF_EXEC_MAX_BACKENDS 16
#define AF_EXEC_MAX_BATCH 256 /* cases one af_exec_run_batch may hold */

/* Where an executor's time went, summed over its executions (wall seconds on the calling
 * thread; the batch phases that run on helper threads count their wall time once). */
typedef struct af_exec_timing {
    uint64_t cases;      /* cases run (single or in batches) */
    double generate_s;   /* drawing the inputs */
    double reference_s;  /* the float64 references */
    double backends_s;   /* waiting for the backends (in-process runs, worker exchanges) */
    double target_s;     /* of which the workers reported running the cases */
    double compile_s;    /* of which they reported compiling */
    double checks_s;     /* comparisons and relations */
    double relations_s;  /* of which the relations (their backend runs and comparisons) */
    double determinism_s; /* the determinism checks' second runs (made where the backends run,
                             before the checks; their comparisons are in checks_s) */
    uint64_t determinism_runs; /* second runs made by determinism checks */
} af_exec_timing;

typedef struct af_exec_config {
    const char *backends[AF_EXEC_MAX_BACKENDS]; /* each compared with the reference */
    size_t n_backends;
    const char *pairs[AF_EXEC_MAX_BACKENDS];    /* "A,B" */
    size_t n_pairs;
    bool relations[AF_REL_COUNT];               /* run on every backend of the config */
    bool sample_relations;                      /* per backend, run one of the enabled relations
                                                   that apply, picked from the case's seeds */
    double determinism;                         /* the share of executions (0..1) in which each
                                                   backend runs the case a second time (0: no
                                                   determinism checks); picked from the case's
                                                   seeds, so an input always runs the same checks */
    af_oracle_opts oracle;
    size_t budget;                              /* bytes of tensors per case, 0 = default */
    af_worker_opts worker;                      /* for worker: and target: backends; zeros = defaults */
    struct af_backend_pool *pool;               /* NULL: the executor opens its backends and closes
                                                   them when destroyed; else it borrows them from
                                                   the pool (backend_pool.h), which keeps them open
                                                   for the next executor */
} af_exec_config;

/* No backend options: the pair explicit,fused and every relation on both. */
void af_exec_config_default(af_exec_config *cfg);

typedef struct af_finding {
    af_kind kind;
    uint64_t signature; /* af_signature_finding of kind, who, tensor, error_class and the case */
    char who[160];
    char tensor[8];    /* what it is on: "out", or a gradient of a backward case ("dq", "dk", "dv", "dmask") */
    size_t check;      /* index of the check that produced it */
    af_result result;  /* of the failing side */
    char message[512]; /* the backend's error, for kind error */
    uint64_t error_class; /* kind error: af_error_class of who and message (0: none) */
    af_guard_writes guard; /* kind guard_write: the bands that changed */
} af_finding;

typedef struct af_exec af_exec;

af_exec *af_exec_create(const af_exec_config *cfg, af_error *err); /* NULL on error (err says why) */
void af_exec_destroy(af_exec *x);                                   /* NULL does nothing */
/* An executor of x's configuration (so the same checks, in the same order) beside x, whose
 * records are its own: the store minimizes on one (store.h), so that x keeps the record of
 * the execution being stored. own_backends: backends opened anew, never borrowed from a
 * pool (in-process ones instantiated again, a worker's own processes), so it may run on
 * another thread while x runs; else it borrows x's (x must outlive it; one thread runs
 * both) and its single executions first collect x's batch in flight, as x's own do.
 * Checks against an expected output (af_exec_run_bundle) are not copied. NULL on error
 * (err says why). */
af_exec *af_exec_create_beside(af_exec *x, bool own_backends, af_error *err);

/* Decodes (totally) and runs. Findings of this execution replace the previous ones. */
af_status af_exec_run_bytes(af_exec *x, const uint8_t *data, size_t size, af_error *err);
/* Runs a case (generated from its seeds). */
af_status af_exec_run_case(af_exec *x, const af_case *c, af_error *err);
/* Runs n cases at once: their inputs and float64 references on up to `threads` threads,
 * every backend that takes batches (a worker that declared `batch`) sent its cases in one
 * frame while the references are computed, the others case by case. skips (NULL: none):
 * per case, the backends it leaves out for their known bugs (as af_exec_skip_next). Findings
 * of each case are read after af_exec_select(x, i); af_exec_run_batch leaves case 0
 * selected. Single executions (af_exec_run_case, ...) have a slot of their own and leave the
 * batch's alone. n <= AF_EXEC_MAX_BATCH. AF_ERR_INVALID while a batch is pending (below).
 * The same as af_exec_batch_send, af_exec_batch_collect and af_exec_batch_check in a row. */
af_status af_exec_run_batch(af_exec *x, const af_case *cases, const uint32_t *skips, size_t n, unsigned threads,
                           af_error *err);
/* A batch in three steps, so that a campaign can pipeline batches: the workers compute one
 * batch while this process checks and stores the one before and generates the next.
 *   af_exec_batch_send     the inputs (on `threads` threads), each batching backend sent its
 *                          cases in one frame, the float64 references computed while the
 *                          frames are written; AF_ERR_INVALID while a batch is sent and not
 *                          collected (a worker takes one frame at a time);
 *   af_exec_batch_collect  every backend's answers to the batch sent (the non-batching
 *                          backends run here, case by case); nothing when none is in flight;
 *   af_exec_batch_check    the checks of the batch collected (on `threads` threads where
 *                          each only compares), which af_exec_select then reads, case 0 first
 *                          selected; AF_ERR_INVALID when none is collected.
 * One batch may be sent while another waits, collected, to be checked; af_exec_select reads
 * the batch checked last until the next af_exec_batch_send takes its bank (after two sends).
 * A single execution (af_exec_run_case, _check, _bundle) first collects a batch in flight,
 * which is then checked as usual. */
af_status af_exec_batch_send(af_exec *x, const af_case *cases, const uint32_t *skips, size_t n, unsigned threads,
                             af_error *err);
af_status af_exec_batch_collect(af_exec *x, af_error *err);
af_status af_exec_batch_check(af_exec *x, unsigned threads, af_error *err);
/* A batch sent or collected and not yet checked. */
bool af_exec_batch_pending(const af_exec *x);
/* Whether every check only compares outputs (backend and pair checks: no relation runs a
 * backend again, no expected output): checks may then run on helper threads, and a
 * campaign may pipeline batches. */
bool af_exec_checks_parallel(const af_exec *x);
/* Makes case i of the batch checked last the one the accessors below see (findings, case,
 * input, check results, bundles). */
af_status af_exec_select(af_exec *x, size_t i, af_error *err);
/* The largest batch every batching backend takes (AF_EXEC_MAX_BATCH when none limits it). */
size_t af_exec_batch_max(const af_exec *x);
/* Where the time went, since the executor was created. */
const af_exec_timing *af_exec_timing_of(const af_exec *x);

/* Runs one check on a case (generated from its seeds): the reference (the oracle needs
 * it) and only the backends of that check - its backend, both sides of a pair, a
 * relation's backend (twice) - never the others; a relation runs whether or not a sampled
 * execution would have picked it. The other checks do not run (af_exec_check_ran is
 * false for them). Minimizing a finding (minimize.h) runs only its check this way: a
 * step costs the failing backend, not every backend of the campaign. AF_ERR_INVALID when
 * there is no such check; otherwise as af_exec_run_case. */
af_status af_exec_run_check(af_exec *x, size_t check, const af_case *c, af_error *err);
/* Runs the inputs of a bundle (its arrays or its case's seeds); when the bundle has an
 * expected output, every backend, and the reference itself, is also compared with it
 * (who = "B~expected"). */
af_status af_exec_run_bundle(af_exec *x, const af_bundle *b, af_error *err);

size_t af_exec_finding_count(const af_exec *x);
const af_finding *af_exec_finding(const af_exec *x, size_t i);
/* The case of the last execution and its encoded bytes. */
const af_case *af_exec_case(const af_exec *x);
size_t af_exec_input(const af_exec *x, const uint8_t **bytes);

/* Per check of the last execution: its name and result (kind AF_KIND_OK with zero
 * metrics when it did not apply or the backend does not support the case). On a backward
 * case a backend that declares the backward capability runs it backward
 * (af_backend_run_backward) and a check's result is the first failing of its output and
 * gradients (out, dq, dk, dv, dmask; the finding's tensor names it). */
size_t af_exec_check_count(const af_exec *x);
const char *af_exec_check_name(const af_exec *x, size_t i);
bool af_exec_check_ran(const af_exec *x, size_t i);
const af_result *af_exec_check_result(const af_exec *x, size_t i);
/* What check i's result is on: "out", or a gradient's name (a backward case). */
const char *af_exec_check_tensor(const af_exec *x, size_t i);

/* The backends the executor opened (in the order of first mention). */
size_t af_exec_backend_count(const af_exec *x);
af_backend *af_exec_backend_at(const af_exec *x, size_t i);
/* The stderr backend i's run of the last execution left (its af_run_result.stderr_tail:
 * a worker's last 4 KiB; a fault's is of the process it killed), or NULL: in-process, not
 * run, or empty. Valid until the next execution. */
const char *af_exec_stderr_tail(const af_exec *x, size_t i);
/* Would any check run on case c (does some backend support it)? Cheap: no backend runs. */
bool af_exec_would_run(const af_exec *x, const af_case *c);

/* Compile-aware scheduling (worker.h): the union of the compile keys (AF_KEY_*, case_key.h) of the
 * backends that compile, 0 when none does; and the seconds the backends of the last
 * execution spent compiling: what each worker reported, or, for a worker that reports no
 * timings, the whole wall time of a run on a compile key new to it (an upper bound). */
uint32_t af_exec_compile_key(const af_exec *x);
double af_exec_compile_seconds(const af_exec *x);

/* The generator's hook for known bugs (known_gate.c, loop.c): the next single execution does not run the
 * backends whose bit (index as af_exec_backend_at) is set in mask, as if they did not
 * support the case; later executions (minimizing, replaying) run every backend again.
 * af_exec_skipped counts the backend runs skipped so far. */
void af_exec_skip_next(af_exec *x, uint32_t mask);
uint64_t af_exec_skipped(const af_exec *x);
/* Gradients a backend returned that were not judged, so far: its declared conventions change
 * them in a way the oracle does not model on that case (af_oracle_compare_grad_conv). */
uint64_t af_exec_grads_unjudged(const af_exec *x);

/* An execution's record held beyond the next execution (the minimizer beside the loop,
 * store.h, keeps the record of each finding it was handed until it signs it):
 * af_exec_keep takes the selected execution's record out of x's slots (a fresh slot takes
 * its place; keeping a kept record again counts one more hold) and leaves it selected;
 * af_exec_select_record makes a kept record (or any af_exec_selected gave; NULL: the
 * single executions' slot) the one the accessors read; af_exec_release drops one hold,
 * the last frees it (if selected, the single executions' slot is selected instead). On
 * x's thread only; x must outlive its kept records. */
typedef struct af_exec_record af_exec_record;
af_exec_record *af_exec_keep(af_exec *x, af_error *err); /* NULL: out of memory */
af_exec_record *af_exec_selected(af_exec *x);
void af_exec_select_record(af_exec *x, af_exec_record *r);
bool af_exec_release(af_exec *x, af_exec_record *r); /* true: freed; NULL does nothing */

/* Writes finding i of the last execution as a bundle under dir (see bundle.h), from the
 * execution's record as it is: each side's results as its check judged them (a backend is
 * judged once per execution), a relation's transformed run as its check kept it; nothing
 * runs again. */
af_status af_exec_write_bundle(af_exec *x, size_t i, const char *dir, char *path, size_t path_len,
                               af_error *err);
/* The same under a given signature (the campaign's, taken on the minimized case). */
af_status af_exec_write_bundle_as(af_exec *x, size_t i, uint64_t signature, const char *dir, char *path,
                                  size_t path_len, af_error *err);
/* How a bundle is written (the store step, store.h; a known bug's exemplar). */
typedef struct af_exec_bundle_opts {
    uint64_t signature;     /* the name's signature (the campaign's, taken on the minimized case) */
    signed char minimized;  /* case.json "minimized": +1 true, -1 false (stored as found), 0 unsaid */
    const char *old_dir;    /* non-NULL: a bundle of that name stored as found is replaced and moved
                               there (af_bundle_write_over) */
    const char *name;       /* NULL: <kind>-<signature>; else the directory name (bundle.h
                               af_bundle_spec.name: a known bug's known-<id>) */
    const char *extra_json; /* NULL, or a JSON object text stored in case.json as "extra" */
} af_exec_bundle_opts;
af_status af_exec_write_bundle_with(af_exec *x, size_t i, const char *dir, const af_exec_bundle_opts *bo, char *path,
                                    size_t path_len, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
