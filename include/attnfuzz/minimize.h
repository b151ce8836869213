/* minimize.h - shrink a failing case to its essentials (`attnfuzz minimize`, and every
 * new finding of any engine before it is signed and stored: store.h).
 *
 * Greedy, in passes: try one simplification at a time - f32 instead of f16, BHSD
 * instead of another layout, contiguous strides, no planted specials, plain values, each
 * mask kind off, no dropout or softcap, the default scale, smaller and equal shapes -
 * and keep it when the same check still fails with the same kind (a step that holds is
 * tried again at once; no candidate costs more flops than the case). When a plain pass
 * changes nothing, one pass retries each step with redrawn value seeds; a pass with
 * redraws that changes nothing ends it. What survives is what the bug needs, so the
 * signature of the minimized case names the bug, not the incidental features it was
 * found with. */
#ifndef ATTNFUZZ_MINIMIZE_H
#define ATTNFUZZ_MINIMIZE_H

#include "exec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How far af_minimize goes. All zeros: 400 executions, no time limit, no early stop. */
typedef struct af_minimize_opts {
    unsigned max_execs; /* 0 = 400 */
    double max_seconds; /* > 0: no new step after this long (a target that compiles each new
                           shape for seconds would otherwise spend minutes) */
    /* Optional: asked about the signature of each smaller failing case found; true ends
     * minimizing there. The store step answers true for a signature whose minimized
     * signature it knows: that case is a finding of the same bug (store.h). */
    bool (*known)(void *ctx, uint64_t signature);
    void *ctx;
    /* Optional: minimized cases of bugs found before (the same check and kind), tried
     * first, one execution each: the case with every simplification that the pattern is
     * already simple in applied at once (its dtype, layouts, plain strides and values, the
     * masks and options it lacks). A new finding of a known bug with other incidental
     * features then reaches that bug's signature in one step instead of dozens. */
    const af_case *hints;
    size_t n_hints;
    /* Optional: the tensor the finding is on (af_finding.tensor: "out", "dq", ...); a
     * smaller case counts only when its finding is on the same one (a bug in dK is not
     * minimized into one in the output). NULL: any. */
    const char *tensor;
    /* Optional: for an error, its message's class (af_error_class); a smaller case counts
     * only when it fails with the same one (an error is not minimized into another). 0: any. */
    uint64_t error_class;
} af_minimize_opts;

typedef struct af_minimize_result {
    unsigned execs;     /* executions spent */
    bool cut;           /* max_seconds stopped it before it was done (a case that may shrink
                           further: store.h does not sign on it) */
    bool known;         /* opts.known ended it: *c signs as `signature` */
    uint64_t signature;
    size_t hint;        /* 1 + the index of the pattern that held, 0 for none */
} af_minimize_result;

/* Minimizes *c, on which check `check` of x fails with `kind`, within o (NULL: the
 * defaults). Each step runs that check alone (af_exec_run_check): the backends of the
 * other checks never run. On return *c is the smallest failing case found and x holds its
 * execution of that check (so af_exec_write_bundle can store it); *r (may be NULL) says
 * what it spent and why it stopped. An execution error is returned as is. */
af_status af_minimize(af_exec *x, size_t check, af_kind kind, af_case *c, const af_minimize_opts *o,
                      af_minimize_result *r, af_error *err);

/* The finding of x's last execution for check `check`, or NULL. */
const af_finding *af_exec_finding_for(const af_exec *x, size_t check);

#ifdef __cplusplus
}
#endif
#endif
