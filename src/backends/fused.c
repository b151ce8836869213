/* fused.c - tiled single-pass attention with an online softmax, FlashAttention-2 style
 * (Dao, "FlashAttention-2", 2023, Algorithm 1): the [Sq x Sk] score matrix is never
 * formed; each query tile streams over key tiles keeping a running max m, a running sum
 * l and an unnormalized accumulator acc.
 *
 * For each query tile (Br rows) and key tile (Bc keys), per row:
 *   S      = Q_tile K_tile^T * scale, softcapped and masked          (fp32)
 *   m_new  = max(m, rowmax(S))
 *   P      = exp(S - m_new)                                          (fp32, then dtype)
 *   l      = l * exp(m - m_new) + rowsum(P)     (before rounding and dropout, as FA2)
 *   acc    = acc * exp(m - m_new) + dropout(P) V_tile
 * and at the end out = acc / l, a row with m = -inf (fully masked) giving 0.
 *
 * Serving forms: Q, K and V are read from the physical tensors (THD rows through
 * cu_seqlens, cache slots through the block table; inputs_serving.h), ALiBi's bias is added
 * after softcap in f32, a sink logit z joins l at the end (l * e^(m - m') + e^(z - m'),
 * m' = max(m, z)). A decode step (af_case_split_kv: at most 16 queries, a row of more than
 * 256 keys) takes the split-KV path: each key tile is a split with its own (m, l, acc),
 * kept in a partials buffer and combined at the end (FlashDecoding):
 *   m = max_s m_s,  l = sum_s l_s e^(m_s - m),  acc = sum_s acc_s e^(m_s - m).
 * Key tiles outside every row's structural window are skipped: they contribute exactly
 * nothing. Inputs stay in the case dtype (exact in fp32), P is rounded to it before the
 * second product, and the output is rounded to it once. The scale applies to the fp32
 * scores whatever the case's placement (placement is for explicit graphs). */
#include <math.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/rng.h"
#include "backends.h"
#include "scratch.h"
#include "inputs_serving.h"
#include "vmath.h"

enum { WS_Q, WS_K, WS_V, WS_SAVED, WS_ROWS, WS_S, WS_ACC, WS_ADD, WS_LIVE, WS_KEEP, WS_ROWSTATE, WS_BIAS, WS_PART,
       /* the backward's (af_bwd_bufs from WS_BWD) */
       WS_BWD, WS_LSE = WS_BWD + AF_BWD_NSLOTS, WS_DELTA, WS_P, WS_PD, WS_DMASK, WS_COUNT };
_Static_assert(WS_COUNT <= AF_SCRATCH_SLOTS, "scratch slots");

#define AF_FUSED_BR 128u
#define AF_FUSED_BC 256u
_Static_assert(AF_FUSED_BC == AF_SPLIT_KV_CHUNK, "a split-KV split is one key tile");


typedef struct af_row_state {
    float m, l;
    int64_t lo, hi; /* structural window of live keys */
    int nan;
    int kept; /* some live key survived dropout */
} af_row_state;

/* The forward; lse (may be NULL): [B, Hq, Sq], each row's log-sum-exp L = log sum_j exp(s_j)
 * in the scores' scaled units (NaN for a row whose weights are NaN, -inf for a fully masked
 * one; a sink's exp(z) in the sum, serving cases being forward-only), which a
 * FlashAttention-2 backward recomputes P = exp(s - L) from. */
static af_status af_fused_forward(af_scratch *ws, const af_case_tensors *in, af_tensor *outt, float *lse,
                                  af_error *err) {
    const af_case *c = in->c;
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = c->q_len, Sk = c->kv_len;
    const size_t D = c->head_dim, Dv = c->v_head_dim, group = Hq / Hkv;
    const af_dtype dt = c->dtype;
    const bool tf32 = c->allow_tf32 && dt == AF_F32;
    const float scale = (float)af_case_scale(c);
    const float p = (float)c->dropout_p;
    const float keep_scale = 1.0f / (1.0f - p);
    const uint64_t thr = af_dropout_threshold(c->dropout_p);
    const bool bmask = c->bmask.present, amask = c->amask.present;
    const size_t Br = AF_FUSED_BR, Bc = AF_FUSED_BC;
    const bool alibi = c->serve.forms & AF_SERVE_ALIBI, sinks = c->serve.forms & AF_SERVE_SINKS;
    const bool fold = scale > 0.0f && !(c->softcap > 0.0) && !amask && !alibi && !sinks;
    const bool split = af_case_split_kv(c);
    const size_t nsplit = (Sk + Bc - 1) / Bc, pw = Dv + 2; /* a split's partial: m, l, acc[Dv] */
    const float k_exp = fold ? scale : 1.0f;
    float *out = outt->data;

    float *q = AF_SCRATCH(ws, WS_Q, float, Sq * D, err);
    float *k = AF_SCRATCH(ws, WS_K, float, Sk * D, err);
    float *v = AF_SCRATCH(ws, WS_V, float, Sk * Dv, err);
    float *saved = AF_SCRATCH(ws, WS_SAVED, float, Sk * Dv, err);
    uint32_t *bad = AF_SCRATCH(ws, WS_ROWS, uint32_t, Sk, err);
    float *S = AF_SCRATCH(ws, WS_S, float, Br * Bc, err);
    float *acc = AF_SCRATCH(ws, WS_ACC, float, Br * Dv, err);
    float *add = AF_SCRATCH(ws, WS_ADD, float, Bc, err);
    uint8_t *live = AF_SCRATCH(ws, WS_LIVE, uint8_t, Br * Bc, err);
    uint8_t *keep = AF_SCRATCH(ws, WS_KEEP, uint8_t, Bc, err);
    af_row_state *rs = AF_SCRATCH(ws, WS_ROWSTATE, af_row_state, Br, err);
    float *bias = AF_SCRATCH(ws, WS_BIAS, float, Bc, err);
    float *part = split ? AF_SCRATCH(ws, WS_PART, float, Br * nsplit * pw, err) : NULL;
    if (!q || !k || !v || !saved || !bad || !S || !acc || !add || !live || !keep || !rs || !bias || (split && !part))
        return AF_ERR_NOMEM;

    for (size_t b = 0; b < B; b++) {
        for (size_t g = 0; g < Hkv; g++) {
            af_serving_gather_f32(in, AF_K, (uint32_t)b, (uint32_t)g, k, D);
            af_serving_gather_f32(in, AF_V, (uint32_t)b, (uint32_t)g, v, Dv);
            if (tf32) {
                af_round_tf32_array(k, Sk * D);
                af_round_tf32_array(v, Sk * Dv);
            }
            size_t nbad = af_split_nonfinite_f32(v, Sk, Dv, bad, saved);

            for (size_t h = g * group; h < (g + 1) * group; h++) {
                af_serving_gather_f32(in, AF_Q, (uint32_t)b, (uint32_t)h, q, D);
                if (tf32) af_round_tf32_array(q, Sq * D);

                for (size_t i0 = 0; i0 < Sq; i0 += Br) {
                    size_t rn = Sq - i0 < Br ? Sq - i0 : Br;
                    int64_t jmin = INT64_MAX, jmax = INT64_MIN;
                    for (size_t r = 0; r < rn; r++) {
                        af_row_state *st = &rs[r];
                        af_mask_row_bounds(c, (uint32_t)b, (uint32_t)(i0 + r), &st->lo, &st->hi);
                        st->m = -INFINITY;
                        st->l = 0.0f;
                        st->nan = 0;
                        st->kept = 0;
                        if (st->hi >= st->lo) {
                            jmin = st->lo < jmin ? st->lo : jmin;
                            jmax = st->hi > jmax ? st->hi : jmax;
                        }
                    }
                    memset(acc, 0, rn * Dv * sizeof *acc);
                    if (split) /* every split starts empty: a tile outside every row stays so */
                        for (size_t e = 0; e < rn * nsplit; e++) {
                            part[e * pw] = -INFINITY;
                            memset(part + e * pw + 1, 0, (pw - 1) * sizeof *part);
                        }

                    for (size_t j0 = 0; j0 < Sk; j0 += Bc) {
                        size_t cn = Sk - j0 < Bc ? Sk - j0 : Bc;
                        if ((int64_t)j0 > jmax || (int64_t)(j0 + cn - 1) < jmin) continue; /* all masked */
                        if (split) { /* each split starts its own running state */
                            for (size_t r = 0; r < rn; r++) rs[r].m = -INFINITY, rs[r].l = 0.0f;
                            memset(acc, 0, rn * Dv * sizeof *acc);
                        }
                        /* S = Q_tile K_tile^T, fp32 */
                        af_gemm_nt_f32(rn, cn, D, q + i0 * D, D, k + j0 * D, D, S, cn, 0);
                        for (size_t r = 0; r < rn; r++) {
                            af_row_state *st = &rs[r];
                            size_t i = i0 + r;
                            float *s = S + r * cn;
                            uint8_t *lv = live + r * cn;
                            /* with nothing between scale and softmax the scale is folded into
                             * the exponential, and m is kept on unscaled scores */
                            if (!fold)
                                for (size_t j = 0; j < cn; j++) s[j] *= scale;
                            if (c->softcap > 0.0) {
                                float cap = (float)c->softcap;
                                for (size_t j = 0; j < cn; j++) s[j] = cap * tanhf(s[j] / cap);
                            }
                            if (alibi) {
                                af_serving_alibi_row_f32(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j0,
                                                         (uint32_t)cn, bias);
                                for (size_t j = 0; j < cn; j++) s[j] += bias[j];
                            }
                            bool inside = !bmask && (int64_t)j0 >= st->lo && (int64_t)(j0 + cn - 1) <= st->hi;
                            if (inside) {
                                memset(lv, 1, cn);
                                if (amask) af_mask_row(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j0,
                                                       (uint32_t)cn, add, lv);
                            } else {
                                af_mask_row(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j0, (uint32_t)cn,
                                            add, lv);
                            }
                            if (amask)
                                for (size_t j = 0; j < cn; j++) s[j] += add[j];
                            if (!inside)
                                for (size_t j = 0; j < cn; j++) s[j] = lv[j] ? s[j] : -INFINITY;
                            if (p > 0.0f) {
                                af_dropout_row(c->dropout_seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i,
                                               (uint32_t)j0, (uint32_t)cn, keep);
                                for (size_t j = 0; j < cn; j++) st->kept |= keep[j] && lv[j];
                            }
                            /* online softmax step */
                            int has_nan;
                            float mt = af_max_f32(s, cn, &has_nan);
                            st->nan |= has_nan;
                            float m_new = mt > st->m ? mt : st->m;
                            if (m_new == -INFINITY) {
                                memset(s, 0, cn * sizeof *s); /* nothing live yet */
                                continue;
                            }
                            /* equal maxima (also both +Inf: Inf - Inf would be NaN) rescale by 1 */
                            float alpha = st->m == m_new ? 1.0f
                                          : st->m == -INFINITY ? 0.0f
                                                               : expf((st->m - m_new) * k_exp);
                            float rowsum = af_exp_sub_sum_f32(s, cn, m_new, k_exp);
                            st->l = st->l * alpha + rowsum;
                            st->m = m_new;
                            if (alpha != 1.0f) {
                                float *a = acc + r * Dv;
                                for (size_t d = 0; d < Dv; d++) a[d] *= alpha;
                            }
                            af_round_f32_array(s, cn, dt);
                            if (p > 0.0f) {
                                for (size_t j = 0; j < cn; j++) s[j] = keep[j] ? s[j] * keep_scale : 0.0f;
                                af_round_f32_array(s, cn, dt);
                            }
                            if (tf32) af_round_tf32_array(s, cn);
                        }
                        /* acc += P V_tile */
                        af_gemm_nn_f32(rn, Dv, cn, S, cn, v + j0 * Dv, Dv, acc, Dv, 1);
                        for (size_t n = 0; n < nbad; n++) {
                            size_t j = bad[n];
                            if (j < j0 || j >= j0 + cn) continue;
                            for (size_t r = 0; r < rn; r++) {
                                float w = S[r * cn + (j - j0)];
                                /* weight 0 (masked, -inf, dropped): nothing, 0 * NaN counts as 0 */
                                if (!live[r * cn + (j - j0)] || w == 0.0f) continue;
                                for (size_t d = 0; d < Dv; d++) acc[r * Dv + d] += w * saved[n * Dv + d];
                            }
                        }
                        if (split) /* the split's partial, for the combine */
                            for (size_t r = 0; r < rn; r++) {
                                float *pp = part + (r * nsplit + j0 / Bc) * pw;
                                pp[0] = rs[r].m, pp[1] = rs[r].l;
                                memcpy(pp + 2, acc + r * Dv, Dv * sizeof *acc);
                            }
                    }
                    if (split) /* combine: m = max m_s, l and acc rescaled by e^(m_s - m) */
                        for (size_t r = 0; r < rn; r++) {
                            af_row_state *st = &rs[r];
                            float *a = acc + r * Dv;
                            st->m = -INFINITY;
                            for (size_t t = 0; t < nsplit; t++) {
                                float ms = part[(r * nsplit + t) * pw];
                                st->m = ms > st->m ? ms : st->m;
                            }
                            st->l = 0.0f;
                            memset(a, 0, Dv * sizeof *a);
                            for (size_t t = 0; t < nsplit && st->m > -INFINITY; t++) {
                                const float *pp = part + (r * nsplit + t) * pw;
                                if (pp[0] == -INFINITY) continue;
                                float f = pp[0] == st->m ? 1.0f : expf((pp[0] - st->m) * k_exp);
                                st->l += pp[1] * f;
                                for (size_t d = 0; d < Dv; d++) a[d] += pp[2 + d] * f;
                            }
                        }
                    for (size_t r = 0; r < rn; r++) {
                        const af_row_state *st = &rs[r];
                        float *dst = out + ((b * Hq + h) * Sq + i0 + r) * Dv;
                        const float *a = acc + r * Dv;
                        /* NaN weights (a NaN score, or an infinite one making l NaN) */
                        bool nan_row = st->nan || isnan(st->l);
                        if (lse) { /* m is on unscaled scores when the scale is folded into exp */
                            float L = nan_row ? NAN : st->m == -INFINITY ? -INFINITY : st->m * k_exp + logf(st->l);
                            if (sinks && !nan_row && st->m != -INFINITY) { /* the sink's term: fold is off */
                                float z = af_serving_sink(in, (uint32_t)h), mz = z > st->m ? z : st->m;
                                L = mz + logf(st->l * expf(st->m - mz) + expf(z - mz));
                            }
                            lse[(b * Hq + h) * Sq + i0 + r] = L;
                        }
                        if (nan_row && (p <= 0.0f || st->kept)) {
                            for (size_t d = 0; d < Dv; d++) dst[d] = NAN;
                        } else if (nan_row) {
                            /* NaN weights, every live one dropped: the sum of 0 * V */
                            for (size_t d = 0; d < Dv; d++) dst[d] = af_round_f32(a[d], dt);
                        } else if (st->m == -INFINITY) {
                            for (size_t d = 0; d < Dv; d++) dst[d] = 0.0f;
                        } else if (sinks) { /* l * e^(m - m') + e^(z - m'), m' = max(m, z); fold is off */
                            float z = af_serving_sink(in, (uint32_t)h);
                            float mz = z > st->m ? z : st->m;
                            float f = expf(st->m - mz), inv = f / (st->l * f + expf(z - mz));
                            for (size_t d = 0; d < Dv; d++) dst[d] = af_round_f32(a[d] * inv, dt);
                        } else {
                            float inv = 1.0f / st->l;
                            for (size_t d = 0; d < Dv; d++) dst[d] = af_round_f32(a[d] * inv, dt);
                        }
                    }
                }
            }
        }
    }
    return AF_OK;
}

static af_status af_fused_run(void *state, const af_case_tensors *in, af_tensor *outt, af_error *err) {
    return af_fused_forward(state, in, outt, NULL, err);
}

/* run with the statistics the tiles' running max and sum leave (F32 into the caller's lse) */
static af_status af_fused_run_lse(void *state, const af_case_tensors *in, af_tensor *outt, af_tensor *lse,
                                  af_error *err) {
    af_backend_lse_f32(lse);
    return af_fused_forward(state, in, outt, lse->data, err);
}

/* --- the backward: FlashAttention-2 (Dao 2023, Algorithm 2) ------------------------------ *
 *
 * The forward stores each row's log-sum-exp L; the backward never forms the [Sq x Sk]
 * matrices either. With D_i = rowsum(dO_i * O_i) (O as the forward returned it, in the
 * dtype), for each query tile (Br rows) and key tile (Bc keys):
 *   S  = Q_tile K_tile^T * scale, softcapped and masked                  (fp32)
 *   P  = exp(S - L)             (0 at masked keys and on fully masked rows; NaN rows stay NaN)
 *   dV_tile += dropout(P in the dtype)^T dO_tile
 *   dP = dropout(dO_tile V_tile^T)                                       (fp32)
 *   dS = P (dP - D)                             over the keys with P != 0 (the others: 0)
 *   dmask += dS; softcap: dS *= 1 - tanh^2; dS *= scale, rounded to the dtype (the
 *   tensor cores' operand)
 *   dQ_tile += dS K_tile,  dK_tile += dS^T Q_tile                       (fp32 accumulators)
 * Each gradient is rounded to the dtype once at the end (dmask to the mask's). Products with
 * a zero weight give nothing even with a NaN or Inf factor (rule 5), as in the forward. */
static af_status af_fused_run_backward(void *state, const af_case_tensors *in, af_tensor *outt, af_grads *gr,
                                       af_error *err) {
    af_scratch *ws = state;
    const af_case *c = in->c;
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = c->q_len, Sk = c->kv_len;
    const size_t D = c->head_dim, Dv = c->v_head_dim, group = Hq / Hkv;
    const af_dtype dt = c->dtype;
    const bool tf32 = c->allow_tf32 && dt == AF_F32;
    const float scale = (float)af_case_scale(c);
    const float p = (float)c->dropout_p;
    const float keep_scale = 1.0f / (1.0f - p);
    const uint64_t thr = af_dropout_threshold(c->dropout_p);
    const size_t Br = AF_FUSED_BR, Bc = AF_FUSED_BC;
    float *gq = gr->dq.data, *gk = gr->dk.data, *gv = gr->dv.data, *gm = gr->dmask.data;

    float *lse = AF_SCRATCH(ws, WS_LSE, float, B * Hq * Sq, err);
    if (!lse) return AF_ERR_NOMEM;
    AF_TRY(af_fused_forward(ws, in, outt, lse, err));
    if (af_bwd_all_dropped(c, gr)) return AF_OK;
    const float *out = outt->data;

    af_bwd_bufs bb;
    AF_TRY(af_bwd_bufs_get(ws, WS_BWD, c, Br, Bc, &bb, err));
    float *q = bb.q, *qz = bb.qz, *qsaved = bb.qsaved, *k = bb.k, *kz = bb.kz, *ksaved = bb.ksaved, *v = bb.v;
    float *vsaved = bb.vsaved, *dO = bb.dO, *doz = bb.doz, *dosaved = bb.dosaved, *dk = bb.dk, *dv = bb.dv;
    uint32_t *qbad = bb.qbad, *kbad = bb.kbad, *vbad = bb.vbad, *dobad = bb.dobad;
    float *S = bb.S, *spre = bb.spre, *add = bb.add, *dP = bb.dP, *dq = bb.dq;
    uint8_t *live = bb.live, *keep = bb.keep;
    float *delta = AF_SCRATCH(ws, WS_DELTA, float, Sq, err);
    float *P = AF_SCRATCH(ws, WS_P, float, Br * Bc, err);
    float *Pd = AF_SCRATCH(ws, WS_PD, float, Br * Bc, err);
    if (!delta || !P || !Pd) return AF_ERR_NOMEM;
    size_t mne[4] = {1, 1, 1, 1}, nm = 1;
    float *dmask = NULL;
    if (gm) {
        af_case_grad_shape(c, 3, mne);
        nm = mne[0] * mne[1] * mne[2] * mne[3];
        dmask = AF_SCRATCH(ws, WS_DMASK, float, nm, err);
        if (!dmask) return AF_ERR_NOMEM;
        memset(dmask, 0, nm * sizeof *dmask);
    }

    for (size_t b = 0; b < B; b++) {
        for (size_t g = 0; g < Hkv; g++) {
            af_gather_f32(&in->kv, b, g, k, D);
            af_gather_f32(&in->vv, b, g, v, Dv);
            if (tf32) {
                af_round_tf32_array(k, Sk * D);
                af_round_tf32_array(v, Sk * Dv);
            }
            memcpy(kz, k, Sk * D * sizeof *k);
            size_t nkbad = af_split_nonfinite_f32(kz, Sk, D, kbad, ksaved);
            size_t nvbad = af_split_nonfinite_f32(v, Sk, Dv, vbad, vsaved);
            memset(dk, 0, Sk * D * sizeof *dk);
            memset(dv, 0, Sk * Dv * sizeof *dv);
            for (size_t h = g * group; h < (g + 1) * group; h++) {
                af_gather_f32(&in->qv, b, h, q, D);
                af_gather_f32(&in->dov, b, h, dO, Dv);
                /* D_i = rowsum(dO_i * O_i) on what the forward returned (before TF32); under
                 * dropout an output row of zeros is one whose every weight was dropped or
                 * vanished: D = 0 whatever dO holds, as sum_j P_ij dP_ij gives (rule 5's 0 * NaN) */
                for (size_t i = 0; i < Sq; i++) {
                    const float *o = out + ((b * Hq + h) * Sq + i) * Dv;
                    bool zero = p > 0.0f;
                    for (size_t d = 0; d < Dv && zero; d++) zero = o[d] == 0.0f;
                    float acc = 0.0f;
                    for (size_t d = 0; d < Dv && !zero; d++) acc += dO[i * Dv + d] * o[d];
                    delta[i] = acc;
                }
                if (tf32) {
                    af_round_tf32_array(q, Sq * D);
                    af_round_tf32_array(dO, Sq * Dv);
                }
                memcpy(qz, q, Sq * D * sizeof *q);
                size_t nqbad = af_split_nonfinite_f32(qz, Sq, D, qbad, qsaved);
                memcpy(doz, dO, Sq * Dv * sizeof *dO);
                size_t ndobad = af_split_nonfinite_f32(doz, Sq, Dv, dobad, dosaved);
                const float *L = lse + (b * Hq + h) * Sq;

                for (size_t i0 = 0; i0 < Sq; i0 += Br) {
                    size_t rn = Sq - i0 < Br ? Sq - i0 : Br;
                    memset(dq, 0, rn * D * sizeof *dq);
                    for (size_t j0 = 0; j0 < Sk; j0 += Bc) {
                        size_t cn = Sk - j0 < Bc ? Sk - j0 : Bc;
                        /* S, masks, P = exp(S - L), its dropout */
                        af_gemm_nt_f32(rn, cn, D, q + i0 * D, D, k + j0 * D, D, S, cn, 0);
                        bool any = false;
                        for (size_t r = 0; r < rn; r++) {
                            size_t i = i0 + r;
                            float *s = S + r * cn, *pr = P + r * cn, *pd = Pd + r * cn;
                            uint8_t *lv = live + r * cn, *kp = keep + r * cn;
                            if (af_mask_row(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j0, (uint32_t)cn, add, lv))
                                memset(lv, 1, cn);
                            for (size_t j = 0; j < cn; j++) s[j] *= scale;
                            memcpy(spre + r * cn, s, cn * sizeof *s);
                            if (c->softcap > 0.0) {
                                float cap = (float)c->softcap;
                                for (size_t j = 0; j < cn; j++) s[j] = cap * tanhf(s[j] / cap);
                            }
                            if (c->amask.present)
                                for (size_t j = 0; j < cn; j++) s[j] += add[j];
                            if (L[i] == -INFINITY) { /* a fully masked row: no weights */
                                memset(pr, 0, cn * sizeof *pr);
                            } else {
                                for (size_t j = 0; j < cn; j++) s[j] = lv[j] ? s[j] : -INFINITY;
                                memcpy(pr, s, cn * sizeof *s);
                                af_exp_sub_sum_f32(pr, cn, L[i], 1.0f);
                                for (size_t j = 0; j < cn; j++) pr[j] = lv[j] ? pr[j] : 0.0f;
                            }
                            for (size_t j = 0; j < cn; j++) any |= pr[j] != 0.0f;
                            /* the forward's P V operand: P in the dtype, dropped, TF32 */
                            memcpy(pd, pr, cn * sizeof *pd);
                            af_round_f32_array(pd, cn, dt);
                            if (p > 0.0f) {
                                af_dropout_row(c->dropout_seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j0,
                                               (uint32_t)cn, kp);
                                for (size_t j = 0; j < cn; j++) pd[j] = kp[j] && p < 1.0f ? pd[j] * keep_scale : 0.0f;
                                af_round_f32_array(pd, cn, dt);
                            }
                            if (tf32) af_round_tf32_array(pd, cn);
                        }
                        if (!any) continue; /* no weight in the tile: it gives nothing */
                        /* dV_tile += Pd^T dO over the terms with Pd != 0 */
                        if (gv) {
                            af_gemm_tn_f32(cn, Dv, rn, Pd, cn, doz + i0 * Dv, Dv, dv + j0 * Dv, Dv, 1);
                            af_add_back_rows_f32(i0, rn, cn, Pd, Pd, dobad, ndobad, dosaved, Dv, dv + j0 * Dv);
                        }
                        if (!gq && !gk && !gm) continue;
                        /* dP = dO V_tile^T, its dropout; dS = P (dP - D) over P != 0 */
                        af_gemm_nt_f32(rn, cn, Dv, dO + i0 * Dv, Dv, v + j0 * Dv, Dv, dP, cn, 0);
                        for (size_t n = 0; n < nvbad; n++) {
                            size_t j = vbad[n];
                            if (j < j0 || j >= j0 + cn) continue;
                            for (size_t r = 0; r < rn; r++) {
                                if (P[r * cn + (j - j0)] == 0.0f) continue;
                                float acc = 0.0f;
                                for (size_t d = 0; d < Dv; d++) acc += dO[(i0 + r) * Dv + d] * vsaved[n * Dv + d];
                                dP[r * cn + (j - j0)] = acc;
                            }
                        }
                        for (size_t r = 0; r < rn; r++) {
                            size_t i = i0 + r;
                            float *ds = dP + r * cn;
                            const float *pr = P + r * cn;
                            const uint8_t *kp = keep + r * cn;
                            for (size_t j = 0; j < cn; j++) {
                                float dpj = p > 0.0f ? (kp[j] && p < 1.0f ? ds[j] * keep_scale : 0.0f) : ds[j];
                                ds[j] = pr[j] != 0.0f ? pr[j] * (dpj - delta[i]) : 0.0f;
                            }
                            if (dmask) {
                                size_t eb = (mne[0] > 1 ? b : 0) * mne[1], eh = (eb + (mne[1] > 1 ? h : 0)) * mne[2];
                                float *row = dmask + (eh + (mne[2] > 1 ? i : 0)) * mne[3];
                                for (size_t j = 0; j < cn; j++) row[mne[3] > 1 ? j0 + j : 0] += ds[j];
                            }
                            if (c->softcap > 0.0) {
                                float cap = (float)c->softcap;
                                for (size_t j = 0; j < cn; j++) {
                                    float t = tanhf(spre[r * cn + j] / cap);
                                    if (ds[j] != 0.0f) ds[j] *= 1.0f - t * t;
                                }
                            }
                            for (size_t j = 0; j < cn; j++) ds[j] *= scale;
                            af_round_f32_array(ds, cn, dt);
                            if (tf32) af_round_tf32_array(ds, cn);
                        }
                        /* dQ_tile += dS K_tile, dK_tile += dS^T Q_tile over the terms with P != 0 */
                        if (gq) {
                            af_gemm_nn_f32(rn, D, cn, dP, cn, kz + j0 * D, D, dq, D, 1);
                            for (size_t n = 0; n < nkbad; n++) {
                                size_t j = kbad[n];
                                if (j < j0 || j >= j0 + cn) continue;
                                for (size_t r = 0; r < rn; r++) {
                                    if (P[r * cn + (j - j0)] == 0.0f) continue;
                                    float f = dP[r * cn + (j - j0)];
                                    for (size_t d = 0; d < D; d++) dq[r * D + d] += f * ksaved[n * D + d];
                                }
                            }
                        }
                        if (gk) {
                            af_gemm_tn_f32(cn, D, rn, dP, cn, qz + i0 * D, D, dk + j0 * D, D, 1);
                            af_add_back_rows_f32(i0, rn, cn, P, dP, qbad, nqbad, qsaved, D, dk + j0 * D);
                        }
                    }
                    for (size_t r = 0; gq && r < rn; r++)
                        for (size_t d = 0; d < D; d++)
                            gq[((b * Hq + h) * Sq + i0 + r) * D + d] = af_round_f32(dq[r * D + d], dt);
                }
            }
            for (size_t j = 0; j < Sk; j++) {
                size_t row = (b * Hkv + g) * Sk + j;
                for (size_t d = 0; gk && d < D; d++) gk[row * D + d] = af_round_f32(dk[j * D + d], dt);
                for (size_t d = 0; gv && d < Dv; d++) gv[row * Dv + d] = af_round_f32(dv[j * Dv + d], dt);
            }
        }
    }
    if (gm)
        for (size_t e = 0; e < nm; e++) gm[e] = af_round_f32(dmask[e], c->amask.dtype);
    return AF_OK;
}

const af_backend_vtable af_backend_fused = {
    .name = "fused",
    .version = "1",
    .summary = "tiled online-softmax kernel (FlashAttention-2 style), fp32 scores, P in the case dtype; "
               "the backward recomputes P from the saved log-sum-exp",
    .caps = AF_CAP_ALL,
    .layouts = AF_LAYOUTS_ALL,
    .out_dtype = AF_F32,
    .create = af_scratch_state_create,
    .destroy = af_scratch_state_destroy,
    .run = af_fused_run,
    .run_backward = af_fused_run_backward,
    .run_lse = af_fused_run_lse,
    .traits = AF_TRAIT_BATCH_INVARIANT, /* each (batch, head) row computed alone: bitwise the same in any batch */
};
