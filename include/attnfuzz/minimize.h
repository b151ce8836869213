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

/* Minimizes *c, on which check `check` of x fails with `kind`, in at most max_execs
 * executions (0 = 400) and, when max_seconds > 0, no new step after max_seconds (a target
 * that compiles each new shape for seconds would otherwise spend minutes). Each step runs
 * that check alone (af_exec_run_check): the backends of the other checks never run. On
 * return *c is the smallest failing case found and x holds its execution of that check (so
 * af_exec_write_bundle can store it); *execs (if not NULL) counts the executions spent;
 * *cut (if not NULL) says whether max_seconds stopped it before it was done (a case that
 * may shrink further: store.h does not sign on it). An execution error is returned as is. */
af_status af_minimize(af_exec *x, size_t check, af_kind kind, af_case *c, unsigned max_execs, double max_seconds,
                      unsigned *execs, bool *cut, af_error *err);

/* The finding of x's last execution for check `check`, or NULL. */
const af_finding *af_exec_finding_for(const af_exec *x, size_t check);

#ifdef __cplusplus
}
#endif
#endif
