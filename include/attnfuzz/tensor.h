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

/* Canonical 4-D view: element (i0, i1, i2, i3) sits at data + sum(i_k * nb[k]). A view of
 * an FP8 tensor (AF_E4M3, AF_E5M2) carries the tensor's descale: reading it gives the
 * dequantized value stored * descale (exact in float64), writing stores x / descale rounded
 * once to the format; other dtypes ignore descale. */
typedef struct af_view {
    af_dtype dtype;
    const void *data;
    size_t ne[4];
    size_t nb[4];
    float descale;
} af_view;

/* Byte offset of an element: the one place offsets are computed (all size_t). */
static inline size_t af_view_offset(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3) {
    return i0 * v->nb[0] + i1 * v->nb[1] + i2 * v->nb[2] + i3 * v->nb[3];
}
/* The stored byte of an element of an FP8 view (its bits, no descale). */
static inline uint8_t *af_view_fp8_at(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3) {
    return (uint8_t *)(uintptr_t)v->data + af_view_offset(v, i0, i1, i2, i3);
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
/* Reads / writes one canonical element as double (writing rounds once to the dtype; an FP8
 * view dequantizes and quantizes with its descale). */
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

/* --- serving tensors (inputs_serving.c) ------------------------------------------ */

struct af_case_tensors;

/* The physical tensors of a case's serving forms (docs/design.md section 2, "Serving
 * forms"), built from the canonical values (the padded views qv, kv, vv stay the reference's
 * input). A tensor a case does not have has ndim 0 and data NULL.
 *   q, k, v        packed: THD [Tq, Hq, D], [Tk, Hkv, D], [Tk, Hkv, Dv] (segments one after
 *                  the other, with the spec's perm over the 3 dims and pad); paged: k and v
 *                  are the caches [P, page_size, Hkv, D|Dv] instead (perm over 4 dims, pad)
 *   cu_seqlens_q   packed: i32 [B + 1], prefix sums of q_lens
 *   cu_seqlens_k   packed: i32 [B + 1], prefix sums of kv_lens
 *   seqlens_k      packed or paged: i32 [B], kv_lens
 *   block_table    paged: i32 [B, W]: row b's pages in order, then the null page
 *   page_ids       paged: i32 [P]: the physical id of the k-th fresh page in order of (row,
 *                  page), the last the null page's (the shuffle the table draws from)
 *   sinks, slopes  f32 [Hq]: the sink logits, the ALiBi slopes
 * A cache page slot past a row's keys holds the canonical value of that key position (a
 * masked key) where the padded view has one, else 0; the null page holds 64 in K and -64
 * in V (stale data: read by no correct kernel). */
typedef struct af_serving_tensors {
    af_tensor q, k, v;
    af_tensor cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, page_ids;
    af_tensor sinks, slopes;
    uint32_t pages;     /* paged: P, the null page included */
    uint32_t null_page; /* paged: the page unused table entries name */
    const void *base;   /* the one buffer every serving tensor lies in, and its bytes */
    size_t bytes;
} af_serving_tensors;

/* -slope_h * (d(b, i) - j) (symmetric: -slope_h * |d(b, i) - j|) for keys j0 .. j0+n-1 of row
 * (b, h, i), exact in float64 (shift adds to the distance: a seeded bug's). */
void af_serving_alibi_row(const struct af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j0,
                          uint32_t n, int32_t shift, double *bias);
/* The same in f32 arithmetic, as kernels compute it: -(slope * (float)(d - j)). */
void af_serving_alibi_row_f32(const struct af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j0,
                              uint32_t n, float *bias);
/* Head h's sink logit (case with sinks). */
float af_serving_sink(const struct af_case_tensors *t, uint32_t h);
/* Key j (< kv_lens[b]) of row b in the physical paged or THD form: a pointer to element
 * [.., 0] of its row for kv head g in tensor which (AF_K or AF_V), as an implementation
 * reading the physical tensors finds it. */
const void *af_serving_key_row(const struct af_case_tensors *t, af_tensor_id which, uint32_t b, uint32_t g,
                               uint32_t j);
/* Query i (< q_lens[b]) of packed segment b, head h: a pointer to element [.., 0] of its
 * row in THD Q. */
const void *af_serving_query_row(const struct af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i);

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
    /* a serving case's physical tensors (zeroed without a serving form) */
    af_serving_tensors srv;
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
 * float64, rounded once to the tensor dtype, and builds the serving tensors. Deterministic
 * in c. */
af_status af_inputs_generate(af_inputs *in, const af_case *c, af_error *err);
/* A serving case whose canonical values the caller wrote itself (a bundle's arrays, a
 * relation's transform): copies row 0's shared page keys into the rows sharing them, then
 * builds the physical serving tensors from the canonical values. Nothing for other cases. */
void af_inputs_serving(af_inputs *in);

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
