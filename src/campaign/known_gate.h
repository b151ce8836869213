/* known_gate.h - the campaign loop's gate for known bugs (library-internal): fewer of a known
 * bug's trigger cases (its `when`, known.h) reach a backend that keeps hitting it, and a
 * known crash or timeout bug gets at most one of them per gap (known_gate.c says why). */
#ifndef ATTNFUZZ_KNOWN_GATE_H
#define ATTNFUZZ_KNOWN_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "attnfuzz/stats.h"
#include "attnfuzz/store.h"

#define AF_KNOWN_FAULT_GAP 60.0 /* the default of --known-fault-gap */

/* Per known crash or timeout bug and backend: when the next trigger case may go through. */
typedef struct af_known_gate {
    const af_known *known; /* NULL: no known bugs, nothing is skipped */
    size_t nk;
    double gap;
    double *next; /* [e * AF_EXEC_MAX_BACKENDS + k]; a negative value: e is no fault bug of k */
} af_known_gate;

/* Opens the gate of known's fault bugs on x's backends one gap from now (gap <= 0:
 * AF_KNOWN_FAULT_GAP). AF_ERR_NOMEM. af_known_gate_free releases it (also after an error). */
af_status af_known_gate_init(af_known_gate *g, const af_known *known, const af_exec *x, double gap, af_error *err);
void af_known_gate_free(af_known_gate *g);

/* The backends case c should skip (bit k: af_exec_backend_at(x, k)), and for each the
 * entry it skips for (why[k]); 0 when no known bug was hit yet (store: the hits it counted)
 * and no fault bug's gate is closed. A fault bug's trigger case let through closes its gate
 * for a gap. */
uint32_t af_known_gate_skip(af_known_gate *g, const af_store *store, const af_exec *x, const af_case *c,
                            size_t why[AF_EXEC_MAX_BACKENDS]);
/* Counts the backend runs of mask as skipped for their known bugs (why as af_known_gate_skip
 * gave it) in s. */
void af_known_gate_count(const af_known_gate *g, af_campaign_stats *s, uint32_t mask,
                         const size_t why[AF_EXEC_MAX_BACKENDS]);
/* Would c run on some backend that mask leaves in? */
bool af_known_gate_runs_unskipped(const af_exec *x, const af_case *c, uint32_t mask);

#endif
