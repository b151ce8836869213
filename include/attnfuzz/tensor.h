/* tensor.h - strided tensors, layouts, and the materialized inputs of a case.
 *
 * A physical tensor (af_tensor) is what an implementation receives: dtype, element
 * counts in the layout's own dimension order and byte strides (ggml's ne[]/nb[]). Any
 * layout is a view of the canonical [B, H, S, D] tensor; af_view is that view: four
 * byte strides over the same storage (folded dims split, packed buffers offset).
 *
 * One header, four implementation files, one per section: tensors and views (tensor.c),
 * layouts (layout.c), materialized inputs (inputs.c), mask semantics (mask.c). */
#ifndef ATTNFUZZ_TENSOR_H
#define ATTNFUZZ_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "dtype.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- tensors and views (tensor.c) ----------------------------------------------- */

#define AF_MAX_DIMS 5

typedef struct af_tensor {
    af_dtype dtype;
    int ndim;
    size_t ne[AF_MAX_DIMS]; /* element counts, outermost first */
    size_t nb[AF_MAX_DIMS]; /* byte strides (0 for broadcast dims) */
    void *data;             /* element [0, ..., 0] */
} af_tensor;

/* Canonical 4-D view: element (i0, i1, i2, i3) sits at data + sum(i_k * nb[k]). */
typedef struct af_view {
    af_dtype dtype;
    const void *data;
    size_t ne[4];
    size_t nb[4];
} af_view;

/* Byte offset of an element: the one place offsets are computed (all size_t). */
static inline size_t af_view_offset(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3) {
    return i0 * v->nb[0] + i1 * v->nb[1] + i2 * v->nb[2] + i3 * v->nb[3];
}
static inline size_t af_tensor_offset(const af_tensor *t, const size_t *idx) {
    size_t off = 0;
    for (int k = 0; k < t->ndim; k++) off += idx[k] * t->nb[k];
    return off;
}

/* Element count of a tensor, and the bytes its storage spans (0 if any dim is 0). */
size_t af_tensor_numel(const af_tensor *t);
size_t af_tensor_span(const af_tensor *t);
/* A contiguous tensor of the given shape (data NULL). */
void af_tensor_contiguous(af_tensor *t, af_dtype dt, int ndim, const size_t *ne);
/* Reads / writes one canonical element as double (writing rounds once to the dtype). */
double af_view_get(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3);
void af_view_set(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3, double x);

/* --- layouts (layout.c) --------------------------------------------------------- */

/* Physical shape of layout l for one tensor of H heads, S positions, head dim D (for
 * packed layouts: the whole [B, S, 3, H, D] / [B, S, H, 3, D] / [B, 3*H*D, S] buffer).
 * Returns ndim. */
int af_layout_shape(af_layout l, size_t B, size_t H, size_t S, size_t D, size_t ne[AF_MAX_DIMS]);

/* Canonical view of tensor `which` inside physical tensor t laid out as l. H and D are
 * the canonical heads and head dim (needed to split folded dims). For packed layouts t
 * is the packed buffer and `which` picks the Q, K or V part. */
void af_layout_view(af_layout l, const af_tensor *t, af_tensor_id which, size_t H, size_t D,
                    af_view *out);

/* Storage bytes of input tensor `which` of case c under its spec (layout, perm, pad,
 * broadcast); for packed layouts the whole buffer. */
size_t af_case_input_span(const af_case *c, af_tensor_id which);

/* Storage bytes of the upstream gradient dO of a backward case ([B, Hq, Sq, Dv] in the
 * output layout of Q's layout, under c->bwd.dout's perm, pad and broadcast); 0 for a
 * forward-only case. */
size_t af_case_dout_span(const af_case *c);

/* Number of memory orders available for perm (the permutations of ndim dims). */
unsigned af_layout_perm_count(af_layout l);

/* --- materialized inputs (inputs.c) --------------------------------------------- */

/* The tensors of one case, as every implementation receives them. For packed layouts
 * q, k and v are the same buffer. amask/bmask are valid when c->amask.present /
 * c->bmask.present; their views am/bm are [B, Hq, Sq, Sk] with stride 0 where the
 * mask broadcasts. dout (the upstream gradient dO, physical, in af_out_layout of Q's
 * layout with its own strides) and its canonical view dov [B, Hq, Sq, Dv] are valid when
 * c->bwd.grads != 0 (zeroed otherwise). */
typedef struct af_case_tensors {
    const af_case *c;
    af_tensor q, k, v, amask, bmask, dout;
    af_view qv, kv, vv, am, bm, dov;
    /* NULL: dropout keeps by the counter rule (rng.h). Else [B, Hq, Sq, Sk] bytes, 1 = kept:
     * the keep mask a worker drew with its own RNG, which the reference then follows. */
    const uint8_t *dropout_keep;
} af_case_tensors;

/* Owns the storage of a case's tensors; buffers grow and are reused across cases, so a
 * campaign stops allocating once it has seen its largest case. */
typedef struct af_inputs af_inputs;

af_inputs *af_inputs_create(void);
void af_inputs_destroy(af_inputs *in); /* NULL does nothing */

/* Allocates storage for case c (copied into in) and lays out the tensors; padding
 * elements are filled with NaN, values are left for the caller. */
af_status af_inputs_alloc(af_inputs *in, const af_case *c, af_error *err);
/* af_inputs_alloc, then draws every value from the case's distributions and seeds: in
 * float64, rounded once to the tensor dtype. Deterministic in c. */
af_status af_inputs_generate(af_inputs *in, const af_case *c, af_error *err);

const af_case_tensors *af_inputs_get(const af_inputs *in);
af_case_tensors *af_inputs_get_mut(af_inputs *in);

/* --- mask semantics (mask.c) ---------------------------------------------------- */

/* Keys live under the structural masks (causal, key padding, window) for query row i of
 * batch b: lo..hi inclusive, hi < lo when none. */
void af_mask_row_bounds(const af_case *c, uint32_t b, uint32_t i, int64_t *lo, int64_t *hi);

/* Is (b, h, i, j) masked by a set-semantics mask (structural or boolean)? */
bool af_mask_is_set(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j);

/* keep[0..Sk) for row (b, h, i): the tensors' dropout_keep when set, else the counter
 * rule with threshold (af_dropout_threshold of the case's p). */
void af_dropout_keep_row(const af_case_tensors *t, uint64_t threshold, uint32_t b, uint32_t h, uint32_t i,
                         uint8_t *keep);

/* dead[(b * Hkv + g) * Sk + j] = 1 when key j of kv head g is masked (set semantics) for
 * every query that reads it. dead must hold B * Hkv * Sk bytes. */
void af_mask_dead_keys(const af_case_tensors *t, uint8_t *dead);

#ifdef __cplusplus
}
#endif
#endif
