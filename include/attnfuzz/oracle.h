/* oracle.h - compares outputs with the float64 reference and classifies them.
 *
 * Tolerance follows PyTorch's SDPA tests: the honest error of the same computation at
 * the case precision (ref.c run with the explicit implementation's roundings and fp32
 * accumulation) against float64, times a fudge factor, floored per dtype. One sample of
 * rounding error says little where the softmax is ill-conditioned (logits of 1e3 at
 * TF32 or f16), so a first-order bound sens[e] on the effect of score rounding (ref.h)
 * widens exactly those elements, and the honest error counts only beyond it:
 *
 *     atol[r]  = vscale[r] * max(floor_atol[dtype], fudge * max_e (|honest - ref| - sens)_+ / vscale[row(e)])
 *     bound[e] = atol[r] + rtol[dtype] * |ref| + fudge * sens[e]
 *     an element passes when |out - ref| <= bound[e] + u_out * (|ref| + bound[e]) + h_out
 *
 * where vscale[r] = the largest finite |V| over the keys of nonzero weight in query row r
 * (the row's output is a convex combination of those V rows, scaled by 1/(1-p) under
 * dropout): a huge value behind a masked key loosens nothing. The honest error is pooled
 * over all rows in units of each row's scale. u_out and h_out are the final rounding of
 * an output stored in f16/bf16 (half an ulp relative, half the smallest subnormal); 0 for
 * f32/f64 outputs. af_result.tol is the tolerance of the worst element's row. The honest
 * run is made lazily, only when an output fails the floor alone, so clean cases cost one
 * reference run.
 *
 * NaN and Inf are classified, never skipped. An element where the honest computation
 * and float64 disagree in class (finite, NaN, +Inf, -Inf) cannot be computed at the case
 * precision (say fp32 overflow in Q.K): it is "unstable" and excused. Every other element
 * must match the reference's class, and a fully masked row must be 0. A key of weight
 * exactly 0 (masked, additive -inf, score -inf, dropped) contributes nothing to the
 * reference whatever its V holds; NaN in an output only where such a key holds a
 * non-finite V (IEEE 0 * Inf) is masked_value_leak, waivable, never nan_mismatch. */
#ifndef ATTNFUZZ_ORACLE_H
#define ATTNFUZZ_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "conventions.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finding kinds; AF_KIND_OK is no finding. Stable order: it is the precedence when one
 * output shows several (the first that occurs wins). */
typedef enum af_kind {
    AF_KIND_OK,
    AF_KIND_NAN_MISMATCH,   /* NaN where the reference is not, or the reverse */
    AF_KIND_INF_MISMATCH,   /* Inf of another sign or where the reference is finite */
    AF_KIND_MASKED_ROW_NAN, /* NaN in a fully masked row (the reference gives 0) */
    AF_KIND_MASKED_VALUE_LEAK, /* NaN only through a key of weight 0 whose V is not finite */
    AF_KIND_DIVERGE,        /* finite and beyond tolerance */
    AF_KIND_ERROR,          /* the backend returned an error */
    AF_KIND_CRASH,          /* an external backend died */
    AF_KIND_TIMEOUT,        /* an external backend hung */
    /* the checks beyond one output against the reference (docs/design.md section 4) */
    AF_KIND_NONDETERMINISTIC, /* a second run of the same case was not bitwise equal */
    AF_KIND_BATCH_VARIANT,    /* a batch row alone differs from itself inside the batch */
    AF_KIND_LSE_DIVERGE,      /* the softmax statistics it returned are off (value or class) */
    AF_KIND_GUARD_WRITE,      /* the backend wrote into a guard band around an output */
    AF_KIND_COUNT
} af_kind;
extern const char *const af_kind_names[AF_KIND_COUNT];
int af_kind_from_name(const char *name); /* -1 when unknown */

typedef struct af_tolerance {
    double atol, rtol;
    double fudge;
    bool honest;   /* atol came from the honest run (else the floor alone) */
} af_tolerance;

typedef struct af_metrics {
    double max_abs;     /* max |out - ref| over elements finite in both */
    double max_rel;     /* max |out - ref| / max(|ref|, atol) */
    double rel_fro;     /* ||out - ref||_F / ||ref||_F over finite pairs (0/0 = 0) */
    double worst_ratio; /* max |out - ref| / (atol + rtol |ref|); Inf for class mismatches */
    size_t worst[4];    /* (b, h, i, d) of the worst element */
    double worst_out, worst_ref;
    size_t n_nan, n_inf, n_masked_row_nan, n_diverge, n_unstable;
    size_t n_masked_value_leak; /* NaN only through a zero-weight key (0 * Inf, 0 * NaN) */
    /* where the failing elements (those counted above but n_unstable) sit, for matching a
     * finding against known bugs (known.h) */
    size_t n_nan_ref;        /* of n_nan: the reference is NaN and the output is not */
    size_t n_fail_masked;    /* failing elements in fully masked rows */
    double fail_score_max;   /* the largest score (after scale, softcap and masks) of any row
                                holding a failing element: -Inf when they are all fully masked
                                rows, +Inf for a row with a NaN score; NaN when none fails */
    double fail_product_max; /* the largest |q_d k_d| (one product of Q K^T, unscaled, any key)
                                of any row holding a failing element: what overflows a kernel
                                that multiplies in the case dtype; NaN when none fails or the
                                case's K is not one dense [B, Hkv, Sk, D] view (serving forms) */
    size_t n_masked_key_nan; /* NaN excused by conventions.masked_keys "ieee" (not failing) */
    size_t n_waived;         /* of n_masked_row_nan and n_masked_value_leak: elements of a kind
                                the backend's conventions or the user waive (not failing: they
                                are neither the worst nor counted in n_fail_masked and
                                fail_score_max) */
} af_metrics;

typedef struct af_result {
    af_kind kind;
    af_metrics m;
    af_tolerance tol;
} af_result;

/* Per-dtype floors and the default fudge factor. */
typedef struct af_oracle_opts {
    double fudge;                            /* default 4 */
    double floor_atol[AF_CASE_DTYPE_COUNT];  /* x the row's vscale; default f32 1e-5, f16 1e-3, bf16 8e-3 */
    double floor_rtol[AF_CASE_DTYPE_COUNT];  /* default f32 1.3e-6, f16 1e-3, bf16 1.6e-2 */
    bool waive_masked_row_nan;               /* report such outputs as ok */
    bool waive_masked_value_leak;            /* likewise for masked_value_leak */
    double grad_fudge[AF_GRAD_COUNT];        /* per gradient (dq, dk, dv, dmask); default 4, 2, 2, 2 */
} af_oracle_opts;
void af_oracle_opts_default(af_oracle_opts *o);

typedef struct af_oracle af_oracle;

af_oracle *af_oracle_create(const af_oracle_opts *opts); /* NULL opts: defaults; NULL on OOM */
void af_oracle_destroy(af_oracle *o);                    /* NULL does nothing */

/* Waives (on) or stops waiving a waivable kind (AF_KIND_MASKED_ROW_NAN, AF_KIND_MASKED_VALUE_LEAK) for the following
 * comparisons: a backend that declares that convention is compared with it waived. Other
 * kinds are not waivable and are ignored. af_oracle_waived says whether it is waived. */
void af_oracle_waive(af_oracle *o, af_kind kind, bool on);
bool af_oracle_waived(const af_oracle *o, af_kind kind);

/* Runs the float64 reference on the case (the tensors must outlive the comparisons). */
af_status af_oracle_prepare(af_oracle *o, const af_case_tensors *in, af_error *err);
/* Uses a reference supplied by the caller instead (float64, [B, Hq, Sq, Dv]), e.g. an
 * expected output from another tool; copied. */
af_status af_oracle_prepare_expected(af_oracle *o, const af_case_tensors *in, const double *expected,
                                     af_error *err);

/* The comparison target (the reference output, or the expected output of
 * af_oracle_prepare_expected; [B, Hq, Sq, Dv] float64) and per-row fully-masked flags
 * ([B, Hq, Sq] bytes, 1 = every key masked). Valid after prepare. */
const double *af_oracle_ref(const af_oracle *o);
const uint8_t *af_oracle_masked_rows(const af_oracle *o);

/* Compares an output (F32, F64, F16 or BF16, contiguous [B, Hq, Sq, Dv]) with the
 * reference; f16/bf16 outputs get their final rounding in the tolerance. */
af_status af_oracle_compare(af_oracle *o, const af_tensor *out, af_result *res, af_error *err);

/* af_oracle_compare for a backend that declared conventions (conventions.h; NULL: none):
 * each models what the backend may do (oracle.c says how), so what they explain is no
 * finding, and nothing else is loosened. masked_rows "mean"/"unmasked" and denormals
 * "flush" apply against the reference (not an expected output of
 * af_oracle_prepare_expected). */
af_status af_oracle_compare_conv(af_oracle *o, const af_tensor *out, const af_conventions *conv, af_result *res,
                                 af_error *err);

/* Compares two outputs of one backend that must agree (relations). a is the output on
 * the prepared case; b may cover a subset or a permutation of its rows: row r of b
 * (a (batch, head, query) triple, flattened) corresponds to row row_map[r] of a (row_map
 * NULL: the identity). Each side may deviate from the reference by the tolerance, so
 * they must agree within twice it; an element unstable at the case precision is excused. */
af_status af_oracle_compare_pair(af_oracle *o, const af_tensor *a, const af_tensor *b, const uint32_t *row_map,
                                 af_result *res, af_error *err);

/* The same where b was computed on a case whose values differ from the prepared one's at
 * zero-weight keys: leak_b ([rows of b, Dv], may be NULL) flags where b's case has a
 * zero-weight key with a non-finite V value (relation masked_values). */
af_status af_oracle_compare_pair_leak(af_oracle *o, const af_tensor *a, const af_tensor *b, const uint32_t *row_map,
                                      const uint8_t *leak_b, af_result *res, af_error *err);

/* af_oracle_compare_pair_leak with the tolerance times tol_mult instead of 2 (batch_split's
 * non-declared strength: each run within the oracle's own tolerance of the other). */
af_status af_oracle_compare_pair_within(af_oracle *o, const af_tensor *a, const af_tensor *b, const uint32_t *row_map,
                                        const uint8_t *leak_b, double tol_mult, af_result *res, af_error *err);

/* Two runs that must be bitwise equal (a determinism check, batch_split on a backend that
 * declares batch_invariant): a and b hold rows of a->ne[ndim-1] elements (any float dtype,
 * contiguous; b's dtype may differ only where both are read exactly as doubles); b's row r
 * is a's row row_map[r] (NULL: the same rows, b as large as a). Two elements are equal when
 * their values are identical bits as doubles (+0 and -0 differ) or both are NaN. res->kind
 * is `kind` when some element differs, else AF_KIND_OK; m.n_diverge counts them, m.max_abs
 * is the largest finite difference, m.worst the (b, h, i, d) of the first. Needs no
 * prepared oracle. AF_ERR_INVALID when the shapes do not fit. */
af_status af_oracle_compare_bitwise(const af_tensor *a, const af_tensor *b, const uint32_t *row_map, af_kind kind,
                                    af_result *res, af_error *err);

/* --- the gradients of a backward case ----------------------------------------------
 *
 * af_oracle_prepare on a backward case also runs the float64 reference backward. Each
 * gradient g (af_grad_names: dq, dk, dv, dmask) is judged like the output, with its own
 * row scale (the sum of the absolute values of the terms its row adds up, over the terms
 * of nonzero weight), the honest backward at the case precision and its sensitivity bound,
 * and the factor grad_fudge[g] (docs/design.md section 5; src/oracle/oracle_grad.c). */

/* The reference gradient g of the prepared case (canonical, af_case_grad_shape, float64),
 * NULL when the case does not ask for it. Valid after prepare. */
const double *af_oracle_ref_grad(const af_oracle *o, int g);
/* Compares a backend's gradient g (F32, F64, F16 or BF16, contiguous, af_case_grad_shape)
 * with the reference. AF_ERR_INVALID for a gradient the case does not ask for or of the
 * wrong shape. A NaN in a row of dQ that the forward fully masks is masked_row_nan; NaN only
 * where a term of weight 0 has a non-finite factor masked_value_leak (both waivable). */
af_status af_oracle_compare_grad(af_oracle *o, int g, const af_tensor *got, af_result *res, af_error *err);
/* af_oracle_compare_grad under the conventions a backend declared (conv NULL: none):
 * masked_values "ieee" waives masked_value_leak, tf32 "always" judges f32 cases by the
 * honest backward in TF32. AF_ERR_UNSUPPORTED (err says which) where a convention that
 * changes the gradients is not modelled on this case: masked_rows other than "zero" with
 * a fully masked row, scores "dtype" in f16/bf16, denormals "flush" on subnormal inputs,
 * masked_keys "ieee" with a non-finite masked score. */
af_status af_oracle_compare_grad_conv(af_oracle *o, int g, const af_tensor *got, const af_conventions *conv,
                                      af_result *res, af_error *err);
/* Two runs of one backend (relations): b's row r is a's row row_map[r] of the gradient's
 * rows ([B, H, S] flattened; NULL: the same), element d of a row a's col_map[d] (NULL: the
 * same: a dmask whose keys were permuted); leak_b (may be NULL) as in
 * af_oracle_compare_pair_leak. They must agree within twice the tolerance. */
af_status af_oracle_compare_grad_pair(af_oracle *o, int g, const af_tensor *a, const af_tensor *b,
                                      const uint32_t *row_map, const uint32_t *col_map, const uint8_t *leak_b,
                                      af_result *res, af_error *err);

/* af_oracle_compare_grad_pair with the tolerance times tol_mult instead of 2 (batch_split). */
af_status af_oracle_compare_grad_pair_within(af_oracle *o, int g, const af_tensor *a, const af_tensor *b,
                                             const uint32_t *row_map, const uint32_t *col_map, const uint8_t *leak_b,
                                             double tol_mult, af_result *res, af_error *err);

/* --- the softmax statistics (LSE) -------------------------------------------------------
 *
 * af_oracle_prepare also gives each row's statistics in float64 (ref.h af_ref_opts.lse: the
 * natural log of the sum of exp of the scaled, soft-capped, masked scores, a sink's term
 * included; -inf for a fully masked row). A backend's are judged row by row:
 *     bound[r] = floor_atol[dtype] + (floor_rtol[dtype] + u_out) |ref[r]|
 *                + fudge * (err_h + lse_sens[r])
 * where lse_sens[r] = sum_j P_rj d_rj is the first-order effect of the scores' rounding
 * errors d (the bound the output's sens uses: d lse / d s_j = P_j), err_h the honest run's
 * error beyond it pooled over the rows (its fp32 sum and logf, the rounding of the result),
 * u_out 2^-24 for statistics returned in f32. Log units need no row scale. The honest run is
 * made only when a row fails the floor alone. A row whose reference is -inf, +inf or NaN must
 * be that exactly (NaN: any NaN; +inf, a +Inf score's, may also be NaN, as m + log(sum)
 * gives); a row the honest run finds unstable is excused; under
 * conventions masked_rows other than "zero" a fully masked row is not judged (that
 * implementation's row is not empty); conventions lse_masked_rows gives the value a fully
 * masked row may have instead of -inf (0, +inf, NaN), masked_keys "ieee" NaN where the
 * output may be NaN for it. Any failing row is AF_KIND_LSE_DIVERGE. */

/* The reference statistics ([B, Hq, Sq] float64), valid after af_oracle_prepare (and
 * af_oracle_prepare_expected, which runs the reference too). */
const double *af_oracle_ref_lse(const af_oracle *o);
/* Judges a backend's statistics (contiguous [B, Hq, Sq], F32 or F64, natural log) under the
 * conventions it declared (NULL: none). AF_ERR_INVALID for another shape or dtype, or when
 * nothing was prepared. */
af_status af_oracle_compare_lse(af_oracle *o, const af_tensor *lse, const af_conventions *conv, af_result *res,
                                af_error *err);

/* The tolerance in force (the row with the largest V scale) (computing the honest run if it was not yet needed). */
af_status af_oracle_tolerance(af_oracle *o, af_tolerance *tol, af_error *err);

/* Signature of a finding: xxHash64 of the kind, the backend names (or relation) and the
 * case features that matter (af_case_features). One bug seen many times signs once. */
uint64_t af_signature(af_kind kind, const char *who, const af_case *c);
/* The same for a finding on one tensor: "out" (or NULL) signs as af_signature does; a
 * gradient's name ("dq", ...) is part of the hash: a bug in dQ and one in the output are
 * two findings. */
uint64_t af_signature_tensor(af_kind kind, const char *who, const char *tensor, const af_case *c);
/* The class of a backend's error message: the text (after a leading "who:") with every
 * number, hex literal or address as '#' (a name's digits kept: f16, sm_90, 4x8xf16's
 * f16) and white space collapsed, its first
 * AF_ERROR_CLASS_CHARS characters hashed; 0 for none (NULL or blank). One error raised on
 * ten thousand cases, its shapes in the text, is one class. */
#define AF_ERROR_CLASS_CHARS 300
uint64_t af_error_class(const char *who, const char *message);
/* A finding's signature: an error with a message class (af_error_class, nonzero) signs by
 * kind, who, tensor and that class, not the case's features (one error on many cases is one
 * finding, as a fuzzer dedups a crash by its stack); any other finding as
 * af_signature_tensor. */
uint64_t af_signature_finding(af_kind kind, const char *who, const char *tensor, uint64_t error_class,
                              const af_case *c);
/* The features as a bit set (dtype, tf32, layout classes, masks, alignment, GQA, Sq != Sk,
 * D != Dv, dropout, softcap, placement, strides, specials) and as readable text. */
uint64_t af_case_features(const af_case *c);
void af_case_features_str(const af_case *c, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
