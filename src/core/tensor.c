/* tensor.c - strided tensors and canonical views (tensor.h, its first section): element
 * counts, the bytes a tensor spans, contiguous strides, and one element read or written
 * as a double. Layouts (layout.c), a case's materialized inputs (inputs.c) and mask
 * semantics (mask.c) build on these. */
#include "attnfuzz/tensor.h"

#include <stdint.h>
#include <string.h>

size_t af_tensor_numel(const af_tensor *t) {
    size_t n = 1;
    for (int k = 0; k < t->ndim; k++) n *= t->ne[k];
    return n;
}

size_t af_tensor_span(const af_tensor *t) {
    size_t last = 0;
    for (int k = 0; k < t->ndim; k++) {
        if (t->ne[k] == 0) return 0;
        last += (t->ne[k] - 1) * t->nb[k];
    }
    return last + af_dtype_size(t->dtype);
}

void af_tensor_contiguous(af_tensor *t, af_dtype dt, int ndim, const size_t *ne) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    size_t stride = af_dtype_size(dt);
    for (int k = ndim - 1; k >= 0; k--) {
        t->ne[k] = ne[k];
        t->nb[k] = stride;
        stride *= ne[k];
    }
}

double af_view_get(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3) {
    double x = af_dtype_load(v->dtype, v->data, af_view_offset(v, i0, i1, i2, i3));
    return af_dtype_is_fp8(v->dtype) ? x * (double)v->descale : x; /* <= 4 + 24 bits: exact */
}

void af_view_set(const af_view *v, size_t i0, size_t i1, size_t i2, size_t i3, double x) {
    if (af_dtype_is_fp8(v->dtype)) x /= (double)v->descale; /* exact for a dequantized value */
    af_dtype_store(v->dtype, (void *)(uintptr_t)v->data, af_view_offset(v, i0, i1, i2, i3), x);
}
