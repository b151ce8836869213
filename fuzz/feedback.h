/* feedback.h - semantic feedback for coverage-guided engines.
 *
 * Code coverage says little about an attention case: the same loops run whether the
 * case is f16 with a bottom-right causal mask over packed QKV or plain f32 BHSD. So the
 * harness also reports, as coverage, two things an engine should keep inputs for:
 *
 *   combination  layout of Q (8) x precision (f32, f16, bf16, f32+TF32) x which masks
 *                (additive, boolean, causal, key padding, window: 5 bits) x diagonal
 *                preset (4, when causal or windowed) x GQA x Sq != Sk x dropout:
 *                2^15 = 32768 ids, from the case fields (a coarser af_case_features);
 *   closeness    per check (at most AF_EXEC_MAX_CHECKS), how close its output came to
 *                the tolerance: floor(log2(worst_ratio)) in 29 buckets, plus "error"
 *                and "non-finite / class mismatch" - an input that brings an output
 *                from 2^-12 to 2^-3 of its tolerance is a step towards a divergence.
 *
 * How it reaches the engine depends on the build (compile definitions):
 *   AF_FEEDBACK_COUNTERS  libFuzzer extra counters: one byte per id in the section
 *                         __libfuzzer_extra_counters, which libFuzzer clears before each
 *                         input and reads as features after it (exact, no collisions).
 *   AF_FEEDBACK_EDGES     AFL++: a call through a table of AF_FEEDBACK_EDGE_COUNT distinct
 *                         noinline functions, each a basic block that afl-clang-fast
 *                         instruments with its own map slot (fuzz/README.md says why
 *                         this rather than writing into __afl_area_ptr).
 *   neither               af_feedback_record does nothing (replay, "plain" builds). */
#ifndef ATTNFUZZ_FUZZ_FEEDBACK_H
#define ATTNFUZZ_FUZZ_FEEDBACK_H

#include <stdbool.h>
#include <stdint.h>

#include "attnfuzz/case.h"
#include "attnfuzz/exec.h"

#define AF_FEEDBACK_COMBOS 32768u
#define AF_FEEDBACK_BUCKETS 32u
#define AF_FEEDBACK_CLOSENESS (AF_EXEC_MAX_CHECKS * AF_FEEDBACK_BUCKETS)

/* The combination id of a case, in [0, AF_FEEDBACK_COMBOS). */
uint32_t af_feedback_combo(const af_case *c);

/* Closeness bucket of a check result, in [0, AF_FEEDBACK_BUCKETS): 0 for an exact match,
 * 1..29 for floor(log2(worst_ratio)) from -22 (and below) to 6 (and above), 30 for a
 * backend error, crash or timeout, 31 for NaN/Inf class mismatches. */
unsigned af_feedback_bucket(const af_result *r);

/* Reports the last execution of x (its case and every check that ran) to the engine. */
void af_feedback_record(const af_exec *x);

/* Whether this build reports anything ("counters", "edges" or "off"). */
const char *af_feedback_mode(void);

#endif
