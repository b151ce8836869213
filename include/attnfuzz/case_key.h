/* case_key.h - compile keys: which fields of a case a compiled artifact depends on.
 *
 * A backend that compiles per structure (a worker, docs/worker-protocol.md "compile_key")
 * names the groups of case fields whose change forces a recompile; two cases that agree on
 * those groups run the same compiled structure. The vocabulary belongs to the case: the
 * worker protocol reads it (worker_proto.c), the campaign uses it to reuse a structure for
 * many value draws (af_case_revalue), and it depends on nothing but the case. */
#ifndef ATTNFUZZ_CASE_KEY_H
#define ATTNFUZZ_CASE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "case.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The compile_key vocabulary: one bit per group of case fields. */
enum {
    AF_KEY_SHAPES = 1u << 0,  /* B, Hq, Hkv, Sq, Sk, D, Dv */
    AF_KEY_DTYPE = 1u << 1,   /* dtype, allow_tf32 */
    AF_KEY_LAYOUTS = 1u << 2, /* layout, perm, pad, broadcast of q/k/v */
    AF_KEY_MASKS = 1u << 3,   /* presence, rank, dims, dtype, expanded of each tensor mask */
    AF_KEY_CAUSAL = 1u << 4,  /* causal, diagonal (and its explicit offset), key padding presence, window */
    AF_KEY_SCALE = 1u << 5,   /* scale value and placement */
    AF_KEY_SOFTCAP = 1u << 6, /* softcap value */
    AF_KEY_DROPOUT = 1u << 7, /* dropout p */
    AF_KEY_COUNT_ = 8,
    AF_KEY_ALL = (1u << 8) - 1
};
/* The names of the bits, in bit order ("shapes", "dtype", ...), as the protocol spells them. */
extern const char *const af_key_names[AF_KEY_COUNT_];

/* Hash of the fields of c named by key (AF_KEY_* bits): two cases with equal hashes run
 * the same compiled structure. Deterministic across runs and processes. The gradients a
 * backward case asks for always count (a backward graph is compiled apart from the
 * forward), and AF_KEY_LAYOUTS covers dO's strides; a forward-only case hashes as it did
 * before cases had a backward part. */
uint64_t af_case_key_hash(const af_case *c, uint32_t key);

/* Redraws the fields of c outside key: value seeds and distributions (dO's too), mask contents,
 * the dropout seed, key padding lengths, and the scale, softcap and dropout p values
 * when the key does not name them (a field that is off stays off, one that is on stays
 * on, so the capabilities the case needs do not change). The result is repaired within
 * budget; af_case_key_hash(c, key) is unchanged. */
struct af_rng;
void af_case_revalue(af_case *c, struct af_rng *rng, uint32_t key, size_t budget);

#ifdef __cplusplus
}
#endif
#endif
