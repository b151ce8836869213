/* ref.h - the float64 reference computation, shared by the `ref` backend, the oracle's
 * honest run and the seeded-bug mutants (library-internal). */
#ifndef ATTNFUZZ_REF_H
#define ATTNFUZZ_REF_H

#include <stdbool.h>

#include "attnfuzz/tensor.h"
#include "scratch.h"

typedef struct af_ref_opts {
    /* Round where the explicit implementation rounds (scaled Q/K and P to the case dtype,
     * scores and softmax to f32, output to the case dtype), with TF32 when the case
     * allows it: the "honest" computation at the case precision. */
    bool honest;
    /* Round the inputs of both matrix products to TF32. */
    bool tf32;
    /* Honest mode only: the scores in the case dtype (a worker's conventions.scores
     * "dtype"): Q.K^T, the scale on the scores, the softcap and the additive mask (its
     * values rounded to the dtype first) each rounded to the dtype instead of f32, so an
     * f16 score past 65504 is Inf as in such an implementation. */
    bool scores_dtype;
    /* Honest mode only: results below f32's smallest normal are flushed (a worker's
     * conventions.denormals "flush"): a weight that small becomes 0, so a non-finite V
     * behind it gives 0 * Inf = NaN (the unstable flags). */
    bool ftz;
    /* Round Q.K^T to f16 before applying the scale (a seeded bug). */
    bool qk_f16_before_scale;
    /* Seeded bugs of the serving forms (never with honest): ALiBi's distance plus this
     * (d - j + shift); sinks ignored (1) or meeting a value row of ones in the numerator (2). */
    int32_t alibi_shift;
    int sink_mode;
    /* Honest mode only, may be NULL: [B, Hq, Sq, Dv] first-order bound on how far any
     * implementation at the case precision may land from the exact output because its
     * scores are off by their rounding error d_ij (the scaled inputs rounded to the dtype
     * at any placement, TF32, fp32 accumulation over D, the score's own rounding, through
     * the softcap), which moves each weight by at most W_ij (see af_sens_weights):
     *     sens[i][d] = sum_j W_ij |v_jd|    >=   |sum_j dP_ij v_jd|
     * plus the rounding of P and of the output and the accumulation of P V:
     *                + (u_P + sqrt(Sk) u_f32) sum_j P_ij |v_jd| + u_dtype |out_id|
     * Large where the softmax is ill-conditioned (huge logits at low precision). */
    double *sens;
    /* Honest mode only, may be NULL: [B, Hq, Sq, Dv], 1 where some fp32 partial sum may
     * overflow in some summation order (|q| . |k| or Sk max|V| past the fp32 range, or
     * TF32 rounding a finite input to Inf): no fp32 implementation is bound there. */
    uint8_t *unstable;
    /* May be NULL: [B, Hq, Sq, Dv], 1 where some key of weight exactly 0 (masked, an
     * additive -inf, a score of -inf, dropped) holds a non-finite V value in that column.
     * Such a key contributes nothing here (0 * NaN counts as 0, docs/design.md section 2 rule
     * 5); an implementation computing 0 * Inf = NaN there is a masked_value_leak. */
    uint8_t *leak;
    /* May be NULL: [B, Hq, Sq], the largest finite |v| over the keys of nonzero weight,
     * times 1/(1-p) under dropout (0 for rows without any): the row's error scale. */
    double *row_vscale;
    /* May be NULL: [B, Hq, Sq], the row's largest score after scale, softcap and masks
     * (-inf for a fully masked row, NaN when a live score is NaN): where a finding's rows
     * sit (known.h's score_max). */
    double *row_max;
    /* Exact mode only, may be NULL: [B, Hq, Sq], 1 where a key masked by set semantics
     * (causal, key padding, window, boolean mask) has a NaN or +Inf score before it is
     * masked (scale, softcap and additive mask applied): an implementation that adds such
     * a mask as -inf gets NaN + -inf or Inf + -inf = NaN there (conventions.masked_keys
     * "ieee"). */
    uint8_t *key_leak;
} af_ref_opts;

/* Attention of the case in float64 over the given canonical views (normally in->qv,
 * in->kv, in->vv). out: [B, Hq, Sq, Dv]; masked_rows (may be NULL): [B, Hq, Sq], 1 where
 * every key is masked. */
af_status af_ref_attention(const af_case_tensors *in, const af_view *q, const af_view *k, const af_view *v,
                           const af_ref_opts *opts, double *out, uint8_t *masked_rows, af_scratch *ws,
                           af_error *err);

#endif
