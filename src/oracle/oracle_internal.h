/* oracle_internal.h - what oracle.c (the output) and oracle_grad.c (a backward case's
 * gradients) share (library-internal). */
#ifndef ATTNFUZZ_ORACLE_INTERNAL_H
#define ATTNFUZZ_ORACLE_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "attnfuzz/oracle.h"

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static inline int af_class(double x) {
    if (isnan(x)) return 1;
    if (isinf(x)) return x > 0 ? 2 : 3;
    return 0;
}

/* Element e of a contiguous F64, F32, F16 or BF16 tensor. */
static inline double af_out_at(const af_tensor *t, size_t e) {
    switch (t->dtype) {
    case AF_F64: return ((const double *)t->data)[e];
    case AF_F16: return (double)af_f16_to_f32(((const uint16_t *)t->data)[e]);
    case AF_BF16: return (double)af_bf16_to_f32(((const uint16_t *)t->data)[e]);
    case AF_F32:
    case AF_BOOL:
    case AF_I32:
    case AF_E4M3:
    case AF_E5M2:
    case AF_DTYPE_COUNT: break;
    }
    return (double)((const float *)t->data)[e];
}

/* Relative and absolute rounding of an output stored in t's dtype (f16/bf16: half an ulp
 * relative, half the smallest subnormal near 0; f32/f64 outputs are judged as the case). */
static inline void af_out_rounding(const af_tensor *t, double *rel, double *abs_) {
    *rel = *abs_ = 0.0;
    if (t && (t->dtype == AF_F16 || t->dtype == AF_BF16)) {
        *rel = af_dtype_eps(t->dtype);
        *abs_ = 0.5 * af_dtype_min_subnormal(t->dtype);
    }
}

static inline bool af_oracle_out_dtype_ok(af_dtype dt) {
    return dt == AF_F32 || dt == AF_F64 || dt == AF_F16 || dt == AF_BF16;
}

/* A finite element of an output stored with rounding out_rel, out_abs (af_out_rounding)
 * against want within bound: max_abs, max_rel (relative to max(|want|, atol)) and the
 * Frobenius sums fro[0] (of the errors squared), fro[1] (of want squared) updated. Returns
 * |out - want| over the bound widened by the output's rounding: above 1 it is beyond. */
static inline double af_oracle_measure(af_metrics *m, double out, double want, double bound, double atol,
                                       double out_rel, double out_abs, double fro[2]) {
    double diff = fabs(out - want);
    bound += out_rel * (fabs(want) + bound) + out_abs;
    if (diff > m->max_abs) m->max_abs = diff;
    double rel = diff / (fabs(want) > atol ? fabs(want) : atol);
    if (rel > m->max_rel) m->max_rel = rel;
    fro[0] += diff * diff;
    fro[1] += want * want;
    return diff / bound;
}

/* The result's kind from its counts, the first of the precedence order that occurs. */
static inline af_kind af_oracle_kind_of(const af_metrics *m, const af_oracle_opts *opts) {
    if (m->n_nan) return AF_KIND_NAN_MISMATCH;
    if (m->n_inf) return AF_KIND_INF_MISMATCH;
    if (m->n_masked_row_nan && !opts->waive_masked_row_nan) return AF_KIND_MASKED_ROW_NAN;
    if (m->n_masked_value_leak && !opts->waive_masked_value_leak) return AF_KIND_MASKED_VALUE_LEAK;
    if (m->n_diverge) return AF_KIND_DIVERGE;
    return AF_KIND_OK;
}

/* --- oracle_grad.c: the gradients of a backward case ----------------------------------- */

typedef struct af_oracle_grads af_oracle_grads;

/* Runs the float64 reference backward on in (a backward case) into *pg (created on first
 * use, reused after): reference gradients, their row scales and leak flags. */
af_status af_oracle_grads_prepare(af_oracle_grads **pg, const af_case_tensors *in, af_error *err);
void af_oracle_grads_destroy(af_oracle_grads *g); /* NULL does nothing */
/* The reference gradient k of the prepared case, NULL when it does not ask for it. */
const double *af_oracle_grads_ref(const af_oracle_grads *g, int k);
/* Compares got (gradient k; F64, F32, F16 or BF16, contiguous, af_case_grad_shape) with
 * the reference (want_t NULL) or with want_t (a pair: tol_mult 2); row r of got is row
 * row_map[r] of the reference's rows (NULL: the same), element d of a row its col_map[d]
 * (NULL: the same); leak_b (NULL: the prepared case's flags) flags got's elements that a
 * zero-weight term with a non-finite factor may make NaN; masked_rows (dq only, may be
 * NULL): the forward's fully masked rows; tf32: the honest run with TF32 products
 * whatever the case allows (tf32 "always"). */
af_status af_oracle_grads_compare(af_oracle_grads *g, const af_oracle_opts *opts, const uint8_t *masked_rows, int k,
                                  const af_tensor *want_t, const af_tensor *got, const uint32_t *row_map,
                                  const uint32_t *col_map, const uint8_t *leak_b, double tol_mult, bool tf32,
                                  af_result *res, af_error *err);
/* The same against the reference with slack added to every element's absolute tolerance
 * (a convention's: denormals "flush"). */
af_status af_oracle_grads_compare_slack(af_oracle_grads *g, const af_oracle_opts *opts, const uint8_t *masked_rows,
                                        int k, const af_tensor *got, double slack, bool tf32, af_result *res,
                                        af_error *err);

#endif
