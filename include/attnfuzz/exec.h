/* exec.h - one execution: bytes or a case in, findings out. The campaign, `replay`, and
 * the libFuzzer / AFL++ harnesses all run cases through this, so they agree on what a
 * finding is.
 *
 * An executor holds a set of checks:
 *   backend B        B against the float64 reference           who = "B"
 *   pair A,B         both against the reference; a finding     who = "A,B"
 *                    when either side is off
 *   relation R on B  B run twice on transformed inputs         who = "R@B"
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

#ifdef __cplusplus
extern "C" {
#endif

#define AF_EXEC_MAX_CHECKS 64
#define AF_EXEC_MAX_BACKENDS 16

typedef struct af_exec_config {
    const char *backends[AF_EXEC_MAX_BACKENDS]; /* each compared with the reference */
    size_t n_backends;
    const char *pairs[AF_EXEC_MAX_BACKENDS];    /* "A,B" */
    size_t n_pairs;
    bool relations[AF_REL_COUNT];               /* run on every backend of the config */
    bool sample_relations;                      /* per backend, run one of the enabled relations
                                                   that apply, picked from the case's seeds */
    af_oracle_opts oracle;
    size_t budget;                              /* bytes of tensors per case, 0 = default */
    af_worker_opts worker;                      /* for worker: and target: backends; zeros = defaults */
} af_exec_config;

/* No backend options: the pair explicit,fused and every relation on both. */
void af_exec_config_default(af_exec_config *cfg);

typedef struct af_finding {
    af_kind kind;
    uint64_t signature;
    char who[160];
    size_t check;      /* index of the check that produced it */
    af_result result;  /* of the failing side */
    char message[512]; /* the backend's error, for kind error */
} af_finding;

typedef struct af_exec af_exec;

af_exec *af_exec_create(const af_exec_config *cfg, af_error *err); /* NULL on error (err says why) */
void af_exec_destroy(af_exec *x);                                   /* NULL does nothing */

/* Decodes (totally) and runs. Findings of this execution replace the previous ones. */
af_status af_exec_run_bytes(af_exec *x, const uint8_t *data, size_t size, af_error *err);
/* Runs a case (generated from its seeds). */
af_status af_exec_run_case(af_exec *x, const af_case *c, af_error *err);
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
 * metrics when it did not apply or the backend does not support the case). */
size_t af_exec_check_count(const af_exec *x);
const char *af_exec_check_name(const af_exec *x, size_t i);
bool af_exec_check_ran(const af_exec *x, size_t i);
const af_result *af_exec_check_result(const af_exec *x, size_t i);

/* The backends the executor opened (in the order of first mention). */
size_t af_exec_backend_count(const af_exec *x);
af_backend *af_exec_backend_at(const af_exec *x, size_t i);
/* Would any check run on case c (does some backend support it)? Cheap: no backend runs. */
bool af_exec_would_run(const af_exec *x, const af_case *c);

/* Compile-aware scheduling (worker.h): the union of the compile keys (AF_KEY_*, case_key.h) of the
 * backends that compile, 0 when none does; and the seconds the backends of the last
 * execution spent compiling: what each worker reported, or, for a worker that reports no
 * timings, the whole wall time of a run on a compile key new to it (an upper bound). */
uint32_t af_exec_compile_key(const af_exec *x);
double af_exec_compile_seconds(const af_exec *x);

/* Writes finding i of the last execution as a bundle under dir (see bundle.h). */
af_status af_exec_write_bundle(af_exec *x, size_t i, const char *dir, char *path, size_t path_len,
                               af_error *err);
/* The same under a given signature (the campaign's, taken on the minimized case). */
af_status af_exec_write_bundle_as(af_exec *x, size_t i, uint64_t signature, const char *dir, char *path,
                                  size_t path_len, af_error *err);
/* How the store step writes a bundle (store.h). */
typedef struct af_exec_bundle_opts {
    uint64_t signature;    /* the name's signature (the campaign's, taken on the minimized case) */
    signed char minimized; /* case.json "minimized": +1 true, -1 false (stored as found), 0 unsaid */
    const char *old_dir;   /* non-NULL: a bundle of that name stored as found is replaced and moved
                              there (af_bundle_write_over) */
} af_exec_bundle_opts;
af_status af_exec_write_bundle_with(af_exec *x, size_t i, const char *dir, const af_exec_bundle_opts *bo, char *path,
                                    size_t path_len, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
