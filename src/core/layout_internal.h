/* layout_internal.h - layout helpers shared inside the library (not public API). */
#ifndef ATTNFUZZ_LAYOUT_INTERNAL_H
#define ATTNFUZZ_LAYOUT_INTERNAL_H

#include "attnfuzz/tensor.h"

/* Index of the batch ('b') or heads ('h') dim in layout l's physical shape; -1 if folded. */
int af_layout_dim(af_layout l, char which);
/* Memory order (outermost first) of permutation number perm of ndim dims. */
void af_perm_order(unsigned perm, int ndim, int order[AF_MAX_DIMS]);
/* Fills t->nb for t->ne / t->dtype: memory order perm, pad elements after each innermost
 * row, stride 0 on the dims in bcast_dims (bit per dim). Returns the span in bytes. */
size_t af_strides_for(af_tensor *t, unsigned perm, unsigned pad, uint32_t bcast_dims);
/* Canonical H, S, D of input tensor `which`. */
void af_case_tensor_dims(const af_case *c, af_tensor_id which, size_t *H, size_t *S, size_t *D);
/* Shape and strides of input `which` (data NULL); returns its span in bytes. */
size_t af_case_input_layout(const af_case *c, af_tensor_id which, af_tensor *t);
/* Shape and strides of dO (data NULL) in its layout; returns its span in bytes. */
size_t af_case_dout_layout(const af_case *c, af_tensor *t);

#endif
