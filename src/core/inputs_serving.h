/* inputs_serving.h - the serving tensors inside the library: how inputs.c lays them out in
 * one buffer and fills them (inputs_serving.c). */
#ifndef ATTNFUZZ_INPUTS_SERVING_H
#define ATTNFUZZ_INPUTS_SERVING_H

#include "attnfuzz/tensor.h"

/* Shapes and strides of every serving tensor of case c in s, placed one after another
 * (64-byte aligned) from base; with base NULL only the size is computed. Returns the bytes
 * the buffer needs (0 without a serving form). */
size_t af_serving_place(const af_case *c, af_serving_tensors *s, void *base);
/* Paged: the poison (af_serving_poison) into the canonical K and V views at the slots of
 * each row's last page past its kv_lens[b] (within kv_len), and, with shared pages, row 0's
 * keys and values of the shared pages copied into each row sharing them (so that the padded
 * view equals the gathered cache, tails included). */
void af_serving_share(af_case_tensors *t);
/* The value a paged case's null page and its rows' unused page tails hold: NaN, or +Inf or
 * -Inf (a quarter of the cases together), drawn from the case's page_seed. */
double af_serving_poison(const af_case *c);
/* Fills the serving tensors placed in t->srv from t's canonical views and the case's seeds. */
void af_serving_fill(af_case_tensors *t);

/* Rows 0..S-1 of head h (kv head for K and V) of row b of tensor which as the physical
 * serving form holds them, into dst[s * ld + d] as f32: Q from THD (packed), K and V from THD
 * or the page cache; rows past the segment's length are 0. S is the padded view's Sq or Sk. */
void af_serving_gather_f32(const af_case_tensors *t, af_tensor_id which, uint32_t b, uint32_t h, float *dst,
                           size_t ld);

#endif
