/* explicit.c - the unfused graph an exporter writes: matmul, scale, softcap, ALiBi's bias,
 * mask, softmax (a sink logit in its denominator), dropout, matmul. It reads the padded
 * canonical views of a serving case (a segment's lengths mask the rest), as a model that
 * pads its batch does; fused.c reads the physical THD and paged tensors. Inputs and the tensors between ops are in the case dtype;
 * products accumulate in fp32 and scores stay fp32 (cuBLAS gemmEx with an f32 result);
 * softmax runs in fp32 and its output P is rounded to the dtype, as in PyTorch's math
 * path. The scale goes where the case places it; TF32 rounds the products' inputs when
 * the case allows it.
 *
 * Its backward is autograd's of the same graph: dV = Pd^T dO, dP = dO V^T (fp32), the
 * dropout's mask again, the softmax backward dS = P (dP - rowsum(P dP)) in fp32, through the
 * softcap and the scale's placement, dQ = dS K, dK = dS^T Q, each gradient rounded to the
 * dtype (dmask to the mask's); terms of weight 0 give nothing (rule 5). ref_grad.c's honest
 * mode rounds where this file rounds.
 *
 * FP8 inputs are dequantized in f32 (x_fp8.float() * descale, one rounding) and stay f32
 * through the scale's placement, as FP8 kernels fold the descales into fp32 arithmetic; the
 * case dtype (f16 or bf16, the output's) then rounds P and the output as for any case.
 *
 * Shapes per head: q [Sq x D], k [Sk x D], v [Sk x Dv] in f32 (exact copies of the
 * dtype values); scores R rows at a time (R * Sk <= 256K floats). */
#include <math.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/rng.h"
#include "backends.h"
#include "scratch.h"
#include "vmath.h"

enum { WS_Q, WS_K, WS_V, WS_SAVED, WS_ROWS, WS_S, WS_O, WS_ADD, WS_LIVE, WS_KEEP, WS_ROWSTATE, WS_BIAS,
       /* the backward's (af_bwd_bufs from WS_BWD) */
       WS_BWD, WS_PS = WS_BWD + AF_BWD_NSLOTS, WS_BROWSTATE, WS_DMASK, WS_COUNT };
_Static_assert(WS_COUNT <= AF_SCRATCH_SLOTS, "scratch slots");

/* per row of a block */
enum { AF_EX_LIVE, AF_EX_DEAD, AF_EX_NAN };

#define AF_EXPLICIT_BLOCK 262144u


/* x = dtype(x * f) over n values: a scale applied to an input tensor. */
static void af_scale_round(float *x, size_t n, float f, af_dtype dt) {
    for (size_t k = 0; k < n; k++) x[k] = af_round_f32(x[k] * f, dt);
}

/* The graph's fixed parts for one case. */
typedef struct af_ex {
    const af_case_tensors *in;
    const af_case *c;
    size_t Sq, Sk, D, Dv, R;
    af_dtype dt;
    af_dtype in_dt; /* what a scaled input rounds to: the case dtype, f32 for FP8 inputs */
    bool tf32;
    float scale, sq, p, keep_scale;
    uint64_t thr;
    bool alibi, sinks; /* serving forms (forward-only cases) */
    float *bias;       /* Sk floats: a row's ALiBi bias */
} af_ex;

static void af_ex_init(af_ex *x, const af_case_tensors *in) {
    const af_case *c = in->c;
    x->in = in;
    x->c = c;
    x->Sq = c->q_len, x->Sk = c->kv_len, x->D = c->head_dim, x->Dv = c->v_head_dim;
    x->dt = c->dtype;
    x->in_dt = c->fp8.fmt != AF_FP8_NONE ? AF_F32 : c->dtype;
    x->tf32 = c->allow_tf32 && x->dt == AF_F32;
    double scale = af_case_scale(c);
    x->scale = (float)scale;
    x->sq = (float)sqrt(fabs(scale));
    x->p = (float)c->dropout_p;
    x->keep_scale = 1.0f / (1.0f - x->p);
    x->thr = af_dropout_threshold(c->dropout_p);
    x->alibi = c->serve.forms & AF_SERVE_ALIBI;
    x->sinks = c->serve.forms & AF_SERVE_SINKS;
    x->bias = NULL;
    x->R = x->Sk >= AF_EXPLICIT_BLOCK ? 1 : (AF_EXPLICIT_BLOCK / x->Sk < x->Sq ? AF_EXPLICIT_BLOCK / x->Sk : x->Sq);
}

/* The inputs of key/value head g as the graph holds them: K scaled where placed, TF32. */
static void af_ex_kv(const af_ex *x, size_t b, size_t g, float *k, float *v) {
    const af_case *c = x->c;
    af_gather_f32(&x->in->kv, b, g, k, x->D);
    af_gather_f32(&x->in->vv, b, g, v, x->Dv);
    if (c->placement == AF_PLACE_K) af_scale_round(k, x->Sk * x->D, x->scale, x->in_dt);
    if (c->placement == AF_PLACE_SQRT_QK) af_scale_round(k, x->Sk * x->D, af_case_scale(c) < 0 ? -x->sq : x->sq, x->in_dt);
    if (x->tf32) {
        af_round_tf32_array(k, x->Sk * x->D);
        af_round_tf32_array(v, x->Sk * x->Dv);
    }
}

static void af_ex_q(const af_ex *x, size_t b, size_t h, float *q) {
    const af_case *c = x->c;
    af_gather_f32(&x->in->qv, b, h, q, x->D);
    if (c->placement == AF_PLACE_Q) af_scale_round(q, x->Sq * x->D, x->scale, x->in_dt);
    if (c->placement == AF_PLACE_SQRT_QK) af_scale_round(q, x->Sq * x->D, x->sq, x->in_dt);
    if (x->tf32) af_round_tf32_array(q, x->Sq * x->D);
}

/* Rows r0 .. r0+rn-1 of query head h: matmul 1, scale, softcap, masks, softmax and dropout.
 * S ends holding the weights P V takes (the dtype's, dropout applied, TF32); rowstate live,
 * dead (every key masked) or NaN. The forward (ps NULL) leaves a dead or NaN row's weights 0
 * (its output is filled in); the backward gets in ps the weights before dropout (in the
 * dtype; NaN on a NaN row's live keys, as the reference) and in spre the softcap's inputs.
 * lse (may be NULL): rn floats, each row's statistics from the softmax's own max and fp32
 * sum, ms + logf(sum) (NaN for a NaN row, -inf for a dead row, +inf for a +Inf score). */
static void af_ex_weights(const af_ex *x, size_t b, size_t h, size_t r0, size_t rn, const float *q, const float *k,
                          float *S, float *add, uint8_t *live, uint8_t *keep, uint8_t *rowstate, float *ps, float *spre,
                          float *lse) {
    const af_case *c = x->c;
    const size_t Sk = x->Sk;
    af_gemm_nt_f32(rn, Sk, x->D, q + r0 * x->D, x->D, k, x->D, S, Sk, 0);
    for (size_t r = 0; r < rn; r++) {
        size_t i = r0 + r;
        float *s = S + r * Sk;
        uint8_t *lv = live + r * Sk;
        if (af_mask_row(x->in, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, add, lv)) memset(lv, 1, Sk);
        if (c->placement == AF_PLACE_SCORES)
            for (size_t j = 0; j < Sk; j++) s[j] *= x->scale;
        if (spre) memcpy(spre + r * Sk, s, Sk * sizeof *s);
        if (c->softcap > 0.0) {
            float cap = (float)c->softcap;
            for (size_t j = 0; j < Sk; j++) s[j] = cap * tanhf(s[j] / cap);
        }
        if (x->alibi) {
            af_serving_alibi_row_f32(x->in, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, x->bias);
            for (size_t j = 0; j < Sk; j++) s[j] += x->bias[j];
        }
        if (c->amask.present)
            for (size_t j = 0; j < Sk; j++) s[j] += add[j];
        for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] : -INFINITY;
        /* softmax in fp32; P rounded to the dtype */
        int has_nan;
        float m = af_max_f32(s, Sk, &has_nan);
        rowstate[r] = has_nan ? AF_EX_NAN : (m == -INFINITY ? AF_EX_DEAD : AF_EX_LIVE);
        if (lse) lse[r] = has_nan ? NAN : m;
        uint8_t *kp = ps ? keep + r * Sk : keep;
        if (x->p > 0.0f)
            af_dropout_row(c->dropout_seed, x->thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, kp);
        if (!ps && has_nan && x->p > 0.0f) {
            /* dropped weights are exactly 0: NaN only if a live key is kept */
            bool kept = false;
            for (size_t j = 0; j < Sk; j++) kept |= kp[j] && lv[j];
            if (!kept) {
                memset(s, 0, Sk * sizeof *s);
                rowstate[r] = AF_EX_LIVE;
                continue;
            }
        }
        if (rowstate[r] != AF_EX_LIVE) {
            /* the forward fills the row; the backward's weights: NaN on live keys, or 0 */
            float w = ps && rowstate[r] == AF_EX_NAN ? NAN : 0.0f;
            for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? w : 0.0f;
        } else {
            /* a sink logit joins the denominator: exponents from max(m, z) */
            float z = x->sinks ? af_serving_sink(x->in, (uint32_t)h) : 0.0f;
            float ms = x->sinks && z > m ? z : m;
            float sum = af_exp_sub_sum_f32(s, Sk, ms, 1.0f) + (x->sinks ? expf(z - ms) : 0.0f);
            if (lse) lse[r] = m == INFINITY ? INFINITY : ms + logf(sum);
            for (size_t j = 0; j < Sk; j++) s[j] = s[j] / sum;
            if (!isfinite(sum)) /* an infinite score: NaN weights, masked keys stay 0 */
                for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] : 0.0f;
            af_round_f32_array(s, Sk, x->dt);
        }
        if (ps) memcpy(ps + r * Sk, s, Sk * sizeof *s);
        if (ps && rowstate[r] == AF_EX_DEAD) continue;
        if (!ps && rowstate[r] != AF_EX_LIVE) continue;
        if (x->p > 0.0f) {
            for (size_t j = 0; j < Sk; j++) s[j] = kp[j] ? s[j] * x->keep_scale : 0.0f;
            af_round_f32_array(s, Sk, x->dt);
        }
        if (x->tf32) af_round_tf32_array(s, Sk);
    }
}

/* The forward; lse (may be NULL): [B, Hq, Sq] floats, each row's statistics (af_ex_weights). */
static af_status af_explicit_forward(af_scratch *ws, const af_case_tensors *in, af_tensor *outt, float *lse,
                                     af_error *err) {
    const af_case *c = in->c;
    af_ex x;
    af_ex_init(&x, in);
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = x.Sq, Sk = x.Sk, D = x.D, Dv = x.Dv;
    const size_t group = Hq / Hkv, R = x.R;
    const af_dtype dt = x.dt;
    float *out = outt->data;

    float *q = AF_SCRATCH(ws, WS_Q, float, Sq * D, err);
    float *k = AF_SCRATCH(ws, WS_K, float, Sk * D, err);
    float *v = AF_SCRATCH(ws, WS_V, float, Sk * Dv, err);
    float *saved = AF_SCRATCH(ws, WS_SAVED, float, Sk * Dv, err);
    uint32_t *bad = AF_SCRATCH(ws, WS_ROWS, uint32_t, Sk, err);
    float *S = AF_SCRATCH(ws, WS_S, float, R * Sk, err);
    float *O = AF_SCRATCH(ws, WS_O, float, R * Dv, err);
    float *add = AF_SCRATCH(ws, WS_ADD, float, Sk, err);
    uint8_t *live = AF_SCRATCH(ws, WS_LIVE, uint8_t, R * Sk, err);
    uint8_t *keep = AF_SCRATCH(ws, WS_KEEP, uint8_t, Sk, err);
    uint8_t *rowstate = AF_SCRATCH(ws, WS_ROWSTATE, uint8_t, R, err);
    float *bias = AF_SCRATCH(ws, WS_BIAS, float, Sk, err);
    if (!q || !k || !v || !saved || !bad || !S || !O || !add || !live || !keep || !rowstate || !bias)
        return AF_ERR_NOMEM;
    x.bias = bias;

    for (size_t b = 0; b < B; b++) {
        for (size_t g = 0; g < Hkv; g++) {
            af_ex_kv(&x, b, g, k, v);
            size_t nbad = af_split_nonfinite_f32(v, Sk, Dv, bad, saved);

            for (size_t h = g * group; h < (g + 1) * group; h++) {
                af_ex_q(&x, b, h, q);
                for (size_t r0 = 0; r0 < Sq; r0 += R) {
                    size_t rn = Sq - r0 < R ? Sq - r0 : R;
                    af_ex_weights(&x, b, h, r0, rn, q, k, S, add, live, keep, rowstate, NULL, NULL,
                                  lse ? lse + (b * Hq + h) * Sq + r0 : NULL);
                    /* matmul 2: O = P V (zeroed non-finite V rows, then live ones added back) */
                    af_gemm_nn_f32(rn, Dv, Sk, S, Sk, v, Dv, O, Dv, 0);
                    for (size_t r = 0; r < rn; r++) {
                        size_t i = r0 + r;
                        float *o = O + r * Dv;
                        const float *s = S + r * Sk;
                        const uint8_t *lv = live + r * Sk;
                        if (rowstate[r] != AF_EX_LIVE) {
                            float fill = rowstate[r] == AF_EX_NAN ? NAN : 0.0f;
                            for (size_t d = 0; d < Dv; d++) o[d] = fill;
                        } else {
                            for (size_t n = 0; n < nbad; n++) {
                                /* weight 0 (masked, -inf, dropped): nothing, 0 * NaN counts as 0 */
                                if (!lv[bad[n]] || s[bad[n]] == 0.0f) continue;
                                for (size_t d = 0; d < Dv; d++) o[d] += s[bad[n]] * saved[n * Dv + d];
                            }
                        }
                        float *dst = out + ((b * Hq + h) * Sq + i) * Dv;
                        for (size_t d = 0; d < Dv; d++) dst[d] = af_round_f32(o[d], dt);
                    }
                }
            }
        }
    }
    return AF_OK;
}

static af_status af_explicit_run(void *state, const af_case_tensors *in, af_tensor *outt, af_error *err) {
    return af_explicit_forward(state, in, outt, NULL, err);
}

/* run with the statistics, as an fp32 softmax has them: F32 into the caller's lse */
static af_status af_explicit_run_lse(void *state, const af_case_tensors *in, af_tensor *outt, af_tensor *lse,
                                     af_error *err) {
    af_backend_lse_f32(lse);
    return af_explicit_forward(state, in, outt, lse->data, err);
}

/* --- the backward ------------------------------------------------------------------------- */

/* The factor of the scale left for dQ (q true) or dK after their products: what the
 * placement puts on the other input (the scores' own scale is already in dS). */
static float af_ex_factor(const af_ex *x, bool q) {
    switch (x->c->placement) {
    case AF_PLACE_SCORES: return 1.0f;
    case AF_PLACE_Q: return q ? x->scale : 1.0f;
    case AF_PLACE_K: return q ? 1.0f : x->scale;
    case AF_PLACE_SQRT_QK: return q || af_case_scale(x->c) >= 0 ? x->sq : -x->sq;
    case AF_PLACE_COUNT: break;
    }
    return 1.0f;
}

/* A gradient element: the product rounded to the dtype, then times the factor, rounded again. */
static float af_ex_grad(float acc, float f, af_dtype dt) {
    float y = af_round_f32(acc, dt);
    return f == 1.0f ? y : af_round_f32(y * f, dt);
}

static af_status af_explicit_run_backward(void *state, const af_case_tensors *in, af_tensor *outt, af_grads *gr,
                                          af_error *err) {
    AF_TRY(af_explicit_run(state, in, outt, err));
    if (af_bwd_all_dropped(in->c, gr)) return AF_OK;
    af_scratch *ws = state;
    const af_case *c = in->c;
    af_ex x;
    af_ex_init(&x, in);
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = x.Sq, Sk = x.Sk, D = x.D, Dv = x.Dv;
    const size_t group = Hq / Hkv, R = x.R;
    const af_dtype dt = x.dt;
    float *gq = gr->dq.data, *gk = gr->dk.data, *gv = gr->dv.data, *gm = gr->dmask.data;

    af_bwd_bufs bb;
    AF_TRY(af_bwd_bufs_get(ws, WS_BWD, c, R, Sk, &bb, err));
    float *q = bb.q, *qz = bb.qz, *qsaved = bb.qsaved, *k = bb.k, *kz = bb.kz, *ksaved = bb.ksaved, *v = bb.v;
    float *vsaved = bb.vsaved, *dO = bb.dO, *doz = bb.doz, *dosaved = bb.dosaved, *dk = bb.dk, *dv = bb.dv;
    uint32_t *qbad = bb.qbad, *kbad = bb.kbad, *vbad = bb.vbad, *dobad = bb.dobad;
    float *S = bb.S, *spre = bb.spre, *add = bb.add, *dP = bb.dP, *dq = bb.dq;
    uint8_t *live = bb.live, *keep = bb.keep;
    uint8_t *rowstate = AF_SCRATCH(ws, WS_BROWSTATE, uint8_t, R, err);
    float *ps = AF_SCRATCH(ws, WS_PS, float, R * Sk, err);
    if (!rowstate || !ps) return AF_ERR_NOMEM;
    AF_ASSERT(!x.alibi && !x.sinks); /* serving cases run forward only (af_case_repair) */
    size_t mne[4] = {1, 1, 1, 1}, nm = 1;
    float *dmask = NULL;
    if (gm) {
        af_case_grad_shape(c, 3, mne);
        nm = mne[0] * mne[1] * mne[2] * mne[3];
        dmask = AF_SCRATCH(ws, WS_DMASK, float, nm, err);
        if (!dmask) return AF_ERR_NOMEM;
        memset(dmask, 0, nm * sizeof *dmask);
    }
    const float fq = af_ex_factor(&x, true), fk = af_ex_factor(&x, false);

    for (size_t b = 0; b < B; b++) {
        for (size_t g = 0; g < Hkv; g++) {
            af_ex_kv(&x, b, g, k, v);
            memcpy(kz, k, Sk * D * sizeof *k);
            size_t nkbad = af_split_nonfinite_f32(kz, Sk, D, kbad, ksaved);
            size_t nvbad = af_split_nonfinite_f32(v, Sk, Dv, vbad, vsaved);
            memset(dk, 0, Sk * D * sizeof *dk);
            memset(dv, 0, Sk * Dv * sizeof *dv);
            for (size_t h = g * group; h < (g + 1) * group; h++) {
                af_ex_q(&x, b, h, q);
                memcpy(qz, q, Sq * D * sizeof *q);
                size_t nqbad = af_split_nonfinite_f32(qz, Sq, D, qbad, qsaved);
                af_gather_f32(&in->dov, b, h, dO, Dv);
                if (x.tf32) af_round_tf32_array(dO, Sq * Dv);
                memcpy(doz, dO, Sq * Dv * sizeof *dO);
                size_t ndobad = af_split_nonfinite_f32(doz, Sq, Dv, dobad, dosaved);
                for (size_t r0 = 0; r0 < Sq; r0 += R) {
                    size_t rn = Sq - r0 < R ? Sq - r0 : R;
                    af_ex_weights(&x, b, h, r0, rn, q, k, S, add, live, keep, rowstate, ps, spre, NULL);
                    /* dV += Pd^T dO over the terms with Pd != 0 */
                    if (gv) {
                        af_gemm_tn_f32(Sk, Dv, rn, S, Sk, doz + r0 * Dv, Dv, dv, Dv, 1);
                        af_add_back_rows_f32(r0, rn, Sk, S, S, dobad, ndobad, dosaved, Dv, dv);
                    }
                    if (!gq && !gk && !gm) continue;
                    /* dP = dO V^T, the non-finite V rows where the weight is not 0 */
                    af_gemm_nt_f32(rn, Sk, Dv, dO + r0 * Dv, Dv, v, Dv, dP, Sk, 0);
                    for (size_t n = 0; n < nvbad; n++)
                        for (size_t r = 0; r < rn; r++) {
                            size_t j = vbad[n];
                            if (ps[r * Sk + j] == 0.0f) continue;
                            float acc = 0.0f;
                            for (size_t d = 0; d < Dv; d++) acc += dO[(r0 + r) * Dv + d] * vsaved[n * Dv + d];
                            dP[r * Sk + j] = acc;
                        }
                    /* the softmax backward in fp32 over the keys of nonzero weight */
                    for (size_t r = 0; r < rn; r++) {
                        size_t i = r0 + r;
                        float *dp = dP + r * Sk;
                        const float *w = ps + r * Sk;
                        const uint8_t *kp = keep + r * Sk;
                        if (x.p > 0.0f)
                            for (size_t j = 0; j < Sk; j++) dp[j] = kp[j] && x.p < 1.0f ? dp[j] * x.keep_scale : 0.0f;
                        float delta = 0.0f;
                        for (size_t j = 0; j < Sk; j++)
                            if (w[j] != 0.0f) delta += w[j] * dp[j];
                        for (size_t j = 0; j < Sk; j++) dp[j] = w[j] != 0.0f ? w[j] * (dp[j] - delta) : 0.0f;
                        if (dmask) {
                            size_t eb = (mne[0] > 1 ? b : 0) * mne[1], eh = (eb + (mne[1] > 1 ? h : 0)) * mne[2];
                            float *row = dmask + (eh + (mne[2] > 1 ? i : 0)) * mne[3];
                            for (size_t j = 0; j < Sk; j++) row[mne[3] > 1 ? j : 0] += dp[j];
                        }
                        if (c->softcap > 0.0) {
                            float cap = (float)c->softcap;
                            for (size_t j = 0; j < Sk; j++) {
                                float t = tanhf(spre[r * Sk + j] / cap);
                                if (dp[j] != 0.0f) dp[j] *= 1.0f - t * t;
                            }
                        }
                        if (c->placement == AF_PLACE_SCORES)
                            for (size_t j = 0; j < Sk; j++) dp[j] *= x.scale;
                        if (x.tf32) af_round_tf32_array(dp, Sk);
                    }
                    /* dQ = dS K, dK += dS^T Q over the terms with W != 0 */
                    if (gq) {
                        af_gemm_nn_f32(rn, D, Sk, dP, Sk, kz, D, dq, D, 0);
                        af_add_back_keys_f32(rn, Sk, ps, dP, kbad, nkbad, ksaved, D, dq);
                        for (size_t r = 0; r < rn; r++)
                            for (size_t d = 0; d < D; d++)
                                gq[((b * Hq + h) * Sq + r0 + r) * D + d] = af_ex_grad(dq[r * D + d], fq, dt);
                    }
                    if (gk) {
                        af_gemm_tn_f32(Sk, D, rn, dP, Sk, qz + r0 * D, D, dk, D, 1);
                        af_add_back_rows_f32(r0, rn, Sk, ps, dP, qbad, nqbad, qsaved, D, dk);
                    }
                }
            }
            for (size_t j = 0; j < Sk; j++) {
                size_t row = (b * Hkv + g) * Sk + j;
                for (size_t d = 0; gk && d < D; d++) gk[row * D + d] = af_ex_grad(dk[j * D + d], fk, dt);
                for (size_t d = 0; gv && d < Dv; d++) gv[row * Dv + d] = af_round_f32(dv[j * Dv + d], dt);
            }
        }
    }
    if (gm)
        for (size_t e = 0; e < nm; e++) gm[e] = af_round_f32(dmask[e], c->amask.dtype);
    return AF_OK;
}

const af_backend_vtable af_backend_explicit = {
    .name = "explicit",
    .version = "1",
    .summary = "unfused graph at the case dtype, fp32 scores and accumulation, honours scale placement; autograd's backward",
    .caps = AF_CAP_ALL,
    .layouts = AF_LAYOUTS_ALL,
    .out_dtype = AF_F32,
    .create = af_scratch_state_create,
    .destroy = af_scratch_state_destroy,
    .run = af_explicit_run,
    .run_backward = af_explicit_run_backward,
    .run_lse = af_explicit_run_lse,
    .traits = AF_TRAIT_BATCH_INVARIANT, /* each (batch, head) row computed alone: bitwise the same in any batch */
};
