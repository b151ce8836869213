/* conventions.h - what a correct implementation may choose where docs/design.md section 2
 * picks one answer (docs/design.md section 5 "Conventions"; the hello's `conventions`,
 * docs/worker-protocol.md). A backend declares them, the oracle models them
 * (af_oracle_compare_conv): what a declared convention explains is no finding, and
 * nothing is loosened for a backend that did not declare it. All zeros: the reference's
 * own semantics. */
#ifndef ATTNFUZZ_CONVENTIONS_H
#define ATTNFUZZ_CONVENTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a fully masked row gives (every key masked, or of weight 0). */
typedef enum af_masked_rows {
    AF_ROWS_ZERO,     /* 0 (section 2 rule 5) */
    AF_ROWS_NAN,      /* NaN (softmax of a row of -inf): masked_row_nan is no finding */
    AF_ROWS_MEAN,     /* the mean of V over the keys a set-semantics mask (causal, key padding,
                         window, boolean) masks: masked logits replaced by a finite large
                         negative (jax "xla": -0.7 * finfo.max; jax "cudnn" in bf16). A row
                         where none does (-inf only) has no mean: 0 or NaN */
    AF_ROWS_UNMASKED, /* attention as if the set-semantics masks were absent: the mask added as
                         a finite bias (jax "cudnn" in f16) */
    AF_ROWS_COUNT
} af_masked_rows;
extern const char *const af_masked_rows_names[AF_ROWS_COUNT]; /* "zero", "nan", "mean", "unmasked" */

/* What the softmax statistics (cap lse) of a fully masked row are: log 0 = -inf (the
 * reference's), or the value a kernel guards an empty row with. */
typedef enum af_lse_masked {
    AF_LSE_MASKED_NEG_INF, /* "-inf" */
    AF_LSE_MASKED_ZERO,    /* "zero": PyTorch's CPU flash kernel (measured, torch 2.15) */
    AF_LSE_MASKED_INF,     /* "inf": FlashAttention-2's (lse = INFINITY when the row sum is 0) */
    AF_LSE_MASKED_NAN,     /* "nan" */
    AF_LSE_MASKED_COUNT
} af_lse_masked;
extern const char *const af_lse_masked_names[AF_LSE_MASKED_COUNT];

/* Where an FP8 case's output is rounded (fp8_out). */
typedef enum af_fp8_out {
    AF_FP8_OUT_DTYPE,  /* "dtype": O computed in f32 and returned in the case dtype (f16/bf16) */
    AF_FP8_OUT_V_AMAX, /* "v_amax": O times scale_o rounded to the case's FP8 format, then divided
                          by scale_o (exact) and returned in the case dtype; scale_o =
                          2^floor(log2(P2 / 2 / amax)), P2 the format's largest power of two (e4m3
                          256, e5m2 32768), amax the largest finite |V| of the case (dequantized;
                          scale_o 1 when there is none; oracle.c). cuDNN's sdpa_fp8 on
                          Hopper, as the cudnn target scales it */
    AF_FP8_OUT_COUNT
} af_fp8_out;
extern const char *const af_fp8_out_names[AF_FP8_OUT_COUNT]; /* "dtype", "v_amax" */

typedef struct af_conventions {
    /* masked_rows per case dtype (af_dtype: f32, f16, bf16), an af_masked_rows each: a
     * string in the hello sets every dtype, an object the dtypes it names (the others
     * "zero"). af_conv_masked_rows reads it for a case's dtype */
    uint8_t masked_rows[AF_CASE_DTYPE_COUNT];
    /* masked_values "ieee": 0 * Inf = NaN leaks from a zero-weight key's V */
    bool masked_values_ieee;
    /* masked_keys "ieee": a set-semantics mask is added as -inf, so a masked key whose score
     * is NaN or +Inf (a non-finite Q or K) makes its row NaN (pytorch#101967's class) */
    bool masked_keys_ieee;
    /* denormals "flush" (or a list of dtypes): bit d set = for case dtype d, subnormal inputs
     * and results are flushed to zero (FTZ/DAZ; e.g. bf16 dot products that treat subnormal
     * inputs as 0). af_conv_flushes tells for a case's dtype */
    uint32_t denormals_flush;
    /* scores "dtype" (or a list of dtypes): bit d set = for case dtype d, Q K^T, the scale on
     * the scores, the softcap and the additive mask (itself rounded to d first) are computed
     * and rounded in d, not in f32 */
    uint32_t scores_dtype;
    /* products "dtype" (or a list of dtypes): bit d set = for case dtype d, each product
     * q_d k_d of Q K^T is rounded to d before the sum (which may be wider): an f16 product past
     * 65504 is Inf, and a row with a non-finite score so made is NaN or drops a key (the
     * honest run marks it unstable) */
    uint32_t products_dtype;
    /* tf32 "always": f32 matmuls run in TF32 whatever the case allows */
    bool tf32_always;
    /* lse_masked_rows: the statistics of a fully masked row (an af_lse_masked) */
    uint8_t lse_masked;
    /* fp8_probs {"e4m3": s, "e5m2": s}: per FP8 case format ([0] e4m3, [1] e5m2), the scale s (a power
     * of two, > 0) by which an FP8 case's probabilities are multiplied and rounded to that
     * format before P @ V (then multiplied by 1 / s, exact); 0: not rounded (the default).
     * What is rounded is the online softmax's numerator exp(s_ij - m), m the running row max
     * (each in [0, 1], or up to 2^t where a lazy rescale lets m lag by t, s then divided by
     * 2^t); the row sum is taken before the rounding and divides O at the end (cuDNN's
     * sdpa_fp8: P in Q's format, scale_s / 16; its test reference fp8_ref.py). The oracle
     * adds to every element's bound the error this rounding can make (af_oracle_compare_conv):
     *     sum_j (u_F P_ij + min((h_F / s) max_k P_ik, P_ij)) |v_jd|    over the row's live keys,
     * u_F the format's unit roundoff, h_F half its smallest subnormal (|round(x) - x| <=
     * u_F x + min(h_F, x); the absolute part of exp(s_ij - m) reaches O through
     * exp(m - m_row) / l_i <= 1 / l_i = max_k P_ik, also where the running max lags the row's
     * by a lazy rescale, whose larger numerators a smaller s keeps in range: declare that s),
     * not multiplied by the fudge factor */
    float fp8_probs_scale[2];
    /* fp8_out: where an FP8 case's output is rounded (an af_fp8_out) */
    uint8_t fp8_out;
} af_conventions;

/* What a fully masked row gives under conv in a case of dtype dt (zero without conv). */
static inline af_masked_rows af_conv_masked_rows(const af_conventions *conv, unsigned dt) {
    return conv && dt < AF_CASE_DTYPE_COUNT ? (af_masked_rows)conv->masked_rows[dt] : AF_ROWS_ZERO;
}

/* Whether conv flushes denormals in a case of dtype dt. */
static inline bool af_conv_flushes(const af_conventions *conv, unsigned dt) {
    return conv && dt < 32 && (conv->denormals_flush >> dt & 1u);
}

#ifdef __cplusplus
}
#endif
#endif
