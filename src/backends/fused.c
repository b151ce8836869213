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

enum { WS_Q, WS_K, WS_V, WS_SAVED, WS_ROWS, WS_S, WS_ACC, WS_ADD, WS_LIVE, WS_KEEP, WS_ROWSTATE, WS_BIAS, WS_PART };

#define AF_FUSED_BR 128u
#define AF_FUSED_BC 256u
_Static_assert(AF_FUSED_BC == AF_SPLIT_KV_CHUNK, "a split-KV split is one key tile");


typedef struct af_row_state {
    float m, l;
    int64_t lo, hi; /* structural window of live keys */
    int nan;
    int kept; /* some live key survived dropout */
} af_row_state;

static af_status af_fused_run(void *state, const af_case_tensors *in, af_tensor *outt, af_error *err) {
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

const af_backend_vtable af_backend_fused = {
    .name = "fused",
    .version = "1",
    .summary = "tiled online-softmax kernel (FlashAttention-2 style), fp32 scores, P in the case dtype",
    .caps = AF_CAP_ALL,
    .layouts = AF_LAYOUTS_ALL,
    .out_dtype = AF_F32,
    .create = af_scratch_state_create,
    .destroy = af_scratch_state_destroy,
    .run = af_fused_run,
};
