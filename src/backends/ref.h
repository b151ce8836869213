/* ref.h - the float64 reference computation, shared by the `ref` backend, the oracle's
 * honest run and the seeded-bug mutants (library-internal). */
#ifndef ATTNFUZZ_REF_H
#define ATTNFUZZ_REF_H

#include <stdbool.h>

#include "attnfuzz/backend.h"
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
    /* Honest mode only: each product q_d k_d rounded to the case dtype before the sum (a
     * worker's conventions.products "dtype"): a row whose scores so made hold ±Inf or NaN
     * is flagged unstable. */
    bool products_dtype;
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
    /* Exact mode only, may be NULL: [B, Hq, Sq], AF_KEY_LEAK_ANY where a key masked by set
     * semantics (causal, key padding, window, boolean mask) has a NaN or +Inf score before
     * it is masked (scale, softcap and additive mask applied): an implementation that adds
     * such a mask as -inf gets NaN + -inf or Inf + -inf = NaN there (conventions.masked_keys
     * "ieee"); AF_KEY_LEAK_DTYPE where such a score is finite but an implementation holding
     * the scores in the case's f16/bf16 dtype has it +Inf or NaN (conventions.scores
     * "dtype": an f16 score past 65504), 0 elsewhere. */
    uint8_t *key_leak;
    /* May be NULL: [B, Hq, Sq], the softmax statistics of each row from the same max and
     * sum the weights use: m + log(sum_j exp(s_j - m) (+ exp(z_h - m) with a sink)), the
     * natural log; -inf for a fully masked row, NaN for a row with a NaN score, +inf for a
     * row with a +Inf score (whose weights are NaN). In honest mode as an fp32 implementation has it: m and the
     * fp32 sum, m + logf(sum) rounded to f32. */
    double *lse;
    /* Honest mode only, may be NULL: [B, Hq, Sq], the first-order bound on how far the
     * statistics of any implementation at the case precision may land from the exact ones
     * because its scores are off by their rounding error d_j (the bound sens uses):
     *     lse_sens[i] = sum_j P_ij d_ij   >=   |sum_j P_ij delta s_ij| = |delta lse_i|
     * (d lse / d s_j = P_j: the statistics move by the weighted mean score error; a sink's
     * logit is exact). 0 for a fully masked or NaN row. */
    double *lse_sens;
    /* Honest mode with sens only, both NULL or both set: [B, Hq, Sq, Dv], what an FP8 rounding
     * of the probabilities before P @ V can move the output by (conventions fp8_probs):
     *     fp8_pv[i][d]  = sum_j P_ij |v_jd|                            (the relative part's factor)
     *     fp8_abs[i][d] = sum_j min(fp8_h * max_k P_ik, P_ij + e) |v_jd|    (the absolute part),
     * j the row's live keys, fp8_h = h_F / s, with the honest run's P (normalized, rounded to the
     * case dtype: e its rounding, |P_ij| u + the dtype's smallest subnormal); 0 in a fully
     * masked or NaN row. */
    double *fp8_pv, *fp8_abs;
    double fp8_h;
} af_ref_opts;

enum { AF_KEY_LEAK_ANY = 1, AF_KEY_LEAK_DTYPE = 2 };

/* --- the backward (ref_grad.c) -------------------------------------------------------- */

/* A seeded bug of the backward (mutants.c); the reference's own runs have none. */
typedef enum af_grad_bug {
    AF_GRAD_BUG_NONE,
    AF_GRAD_BUG_DQ_NO_SCALE,           /* dQ without the softmax scale */
    AF_GRAD_BUG_GQA_NO_SUM,            /* dK, dV of a key/value head from its last query head only */
    AF_GRAD_BUG_DROPOUT_NOT_REAPPLIED, /* the backward uses the weights before dropout */
    AF_GRAD_BUG_SOFTCAP_NO_DERIVATIVE, /* dS not multiplied by 1 - tanh^2(s / c) */
    AF_GRAD_BUG_CAUSAL_MISSING_IN_DS,  /* dS from weights recomputed without the causal mask */
    AF_GRAD_BUG_TAIL_TILE_PAST_SK,     /* keys past a sequence's valid length, up to the end of its
                                          16-key tile, taken as live in the backward */
    AF_GRAD_BUG_LSE_NAN,               /* a row with a negative log-sum-exp gives NaN everywhere */
    AF_GRAD_BUG_COUNT
} af_grad_bug;

/* Rows of gradient g (af_grad_names order): dq [B, Hq, Sq], dk and dv [B, Hkv, Sk], dmask the
 * mask's [B', Hq', Sq']; each row holds D, D, Dv or Sk' elements. */
size_t af_ref_grad_rows(const af_case *c, int g);

typedef struct af_ref_grad_opts {
    /* Round where the explicit backward rounds (explicit.c): the honest run. */
    bool honest;
    /* Honest run: TF32 products whatever the case allows (a backend declaring tf32 "always"). */
    bool force_tf32;
    af_grad_bug bug;
    /* Exact run, each may be NULL: per row of gradient g, a bound of the sum of absolute
     * values of the terms the row's elements add up (for dQ |scale| sum_j |dS_ij| max|k_j|
     * with |dS_ij| bounded by W_ij (a_ij + sum_k W_ik a_ik), a_ij bounding |dO_i . v_j|;
     * likewise dK; for dV sum_i Pd_ij max|dO_i|; for dmask the largest such sum of dS over
     * the row's elements), over the terms of nonzero weight and finite values only: the
     * row's error scale, as the forward's per-row V scale (a huge value behind a
     * zero-weight key loosens nothing). */
    double *gscale[AF_GRAD_COUNT];
    /* Exact run, each may be NULL: for dq and dk (g 0, 1), per row the same sum without the
     * scale: the size of the product dS K (dS^T Q) that an implementation scaling after it
     * (another placement of the scale) rounds to the dtype. */
    double *pscale[2];
    /* Exact run, each may be NULL: per element of gradient g, 1 where a term of weight 0
     * has a non-finite factor, so that an IEEE implementation gets NaN there (0 * Inf):
     * a masked_value_leak, not a nan_mismatch. */
    uint8_t *leak[AF_GRAD_COUNT];
    /* Exact run, each may be NULL: per element of dq, dk, dmask, 1 where the reference is
     * NaN or Inf through a non-finite dP (dO's row or V's at a term of nonzero weight):
     * formulas equal in exact arithmetic (delta as sum_j P_ij dP_ij, or as rowsum(dO O),
     * FlashAttention-2's) give NaN there or Inf, and either class is right. */
    uint8_t *nfswap[AF_GRAD_COUNT];
    /* Honest run, each may be NULL: per element, a bound on how far an implementation at
     * the case precision may land from the exact gradient: score rounding moving the
     * weights (af_sens_weights; and a kernel that recomputes P from the forward's
     * log-sum-exp, FlashAttention-2's backward, unnormalized), the rounding of P, dP, dS
     * and the inputs, fp32 accumulation, the output's rounding (ref_grad.c). */
    double *sens[AF_GRAD_COUNT];
    /* Honest run, each may be NULL: per element, 1 where no implementation at the case
     * precision is bound: an fp32 partial sum that may overflow, a forward row that is
     * unstable, a non-finite factor meeting a weight that may round to 0. */
    uint8_t *unstable[AF_GRAD_COUNT];
} af_ref_grad_opts;

/* The gradients of sum(out * dO) for a backward case (in->dov holds dO): grads[g] for
 * each gradient the case asks for ([shape of af_case_grad_shape], float64; NULL for the
 * others), by the rules of docs/design.md section 2 "Backward". */
af_status af_ref_backward(const af_case_tensors *in, const af_ref_grad_opts *opts, double *const grads[AF_GRAD_COUNT],
                          af_scratch *ws, af_error *err);

/* The `ref` backend's run_backward: the forward (af_ref_attention) into out, the asked
 * gradients (float64) into g. state: an af_scratch. */
af_status af_ref_run_backward(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g, af_error *err);

/* Attention of the case in float64 over the given canonical views (normally in->qv,
 * in->kv, in->vv). out: [B, Hq, Sq, Dv]; masked_rows (may be NULL): [B, Hq, Sq], 1 where
 * every key is masked. */
af_status af_ref_attention(const af_case_tensors *in, const af_view *q, const af_view *k, const af_view *v,
                           const af_ref_opts *opts, double *out, uint8_t *masked_rows, af_scratch *ws,
                           af_error *err);

#endif
