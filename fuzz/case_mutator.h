/* case_mutator.h - structure-aware mutation of fuzz inputs, shared by the libFuzzer
 * hooks (mutator.c) and the AFL++ custom mutator library (afl_mutator.c).
 *
 * An input is the byte form of a case (case.h). Mutating bytes mostly flips seeds and
 * sizes at random; these functions decode, apply af_case_mutate / af_case_crossover (one
 * meaningful edit at a time), cap the cost of the case at the harness's flop limit (so
 * the engine does not spend executions on inputs the harness would skip) and encode.
 * Every function here is pure in its inputs and seed: no globals, no allocation. */
#ifndef ATTNFUZZ_FUZZ_CASE_MUTATOR_H
#define ATTNFUZZ_FUZZ_CASE_MUTATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/case.h"

typedef struct af_casemut_opts {
    size_t budget;    /* bytes of tensors per case, 0 = AF_DEFAULT_BUDGET */
    double max_flops; /* cap on af_case_flops of a mutated case */
} af_casemut_opts;

/* ATTNFUZZ_BUDGET_MIB and ATTNFUZZ_MAX_FLOPS as the harness reads them (fuzz_config.h);
 * values that do not parse leave the defaults (the harness itself reports them). */
void af_casemut_opts_from_env(af_casemut_opts *o);

/* Writes the shortest byte form of c into out (at most max bytes): af_case_encode with
 * trailing zero bytes dropped, which decodes to the same case because the decoder reads
 * missing bytes as 0. When that does not fit, halves the batch (each batch row carries
 * 4 bytes of key-padding length) until it does, changing *c. Returns the length, or 0
 * when even batch 1 does not fit. */
size_t af_casemut_encode(af_case *c, uint8_t *out, size_t max, const af_casemut_opts *o);

/* Decodes in, mutates it with a Philox stream seeded from seed, caps its flops and
 * encodes it into out (max bytes; out may equal in). Returns the length or 0. */
size_t af_casemut_mutate(const uint8_t *in, size_t in_size, uint8_t *out, size_t max, uint64_t seed,
                         const af_casemut_opts *o);

/* Field-wise crossover of the cases decoded from a and b into out (max bytes, may alias
 * neither). Returns the length or 0. */
size_t af_casemut_crossover(const uint8_t *a, size_t a_size, const uint8_t *b, size_t b_size, uint8_t *out,
                            size_t max, uint64_t seed, const af_casemut_opts *o);

/* Structural shrinking for trimming: step k in [0, AF_CASEMUT_SHRINK_STEPS) applies one
 * simplification (halve the lengths, the batch, the heads or the head dims; drop a mask,
 * the window, key padding, causal, dropout, softcap or an explicit scale; plain BHSD
 * contiguous layouts; no special values; normal values; f32) and repairs. Returns false,
 * leaving c as it was, when the step changes nothing. Halving steps may apply again. */
#define AF_CASEMUT_SHRINK_STEPS 16u
bool af_casemut_shrink(af_case *c, unsigned step, const af_casemut_opts *o);
bool af_casemut_shrink_repeats(unsigned step); /* may a step that applied apply again? */

#endif
