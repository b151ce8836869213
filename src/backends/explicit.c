/* explicit.c - the unfused graph an exporter writes: matmul, scale, softcap, ALiBi's bias,
 * mask, softmax (a sink logit in its denominator), dropout, matmul. It reads the padded
 * canonical views of a serving case (a segment's lengths mask the rest), as a model that
 * pads its batch does; fused.c reads the physical THD and paged tensors. Inputs and the tensors between ops are in the case dtype;
 * products accumulate in fp32 and scores stay fp32 (cuBLAS gemmEx with an f32 result);
 * softmax runs in fp32 and its output P is rounded to the dtype, as in PyTorch's math
 * path. The scale goes where the case places it; TF32 rounds the products' inputs when
 * the case allows it.
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

enum { WS_Q, WS_K, WS_V, WS_SAVED, WS_ROWS, WS_S, WS_O, WS_ADD, WS_LIVE, WS_KEEP, WS_ROWSTATE, WS_BIAS };

#define AF_EXPLICIT_BLOCK 262144u


/* x = dtype(x * f) over n values: a scale applied to an input tensor. */
static void af_scale_round(float *x, size_t n, float f, af_dtype dt) {
    for (size_t k = 0; k < n; k++) x[k] = af_round_f32(x[k] * f, dt);
}

static af_status af_explicit_run(void *state, const af_case_tensors *in, af_tensor *outt, af_error *err) {
    af_scratch *ws = state;
    const af_case *c = in->c;
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = c->q_len, Sk = c->kv_len;
    const size_t D = c->head_dim, Dv = c->v_head_dim, group = Hq / Hkv;
    const af_dtype dt = c->dtype;
    const bool tf32 = c->allow_tf32 && dt == AF_F32;
    const double scale_d = af_case_scale(c);
    const float scale = (float)scale_d;
    const float sq = (float)sqrt(fabs(scale_d));
    const float p = (float)c->dropout_p;
    const float keep_scale = 1.0f / (1.0f - p);
    const uint64_t thr = af_dropout_threshold(c->dropout_p);
    const size_t R = Sk >= AF_EXPLICIT_BLOCK ? 1 : (AF_EXPLICIT_BLOCK / Sk < Sq ? AF_EXPLICIT_BLOCK / Sk : Sq);
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
    const bool alibi = c->serve.forms & AF_SERVE_ALIBI, sinks = c->serve.forms & AF_SERVE_SINKS;
    if (!q || !k || !v || !saved || !bad || !S || !O || !add || !live || !keep || !rowstate || !bias)
        return AF_ERR_NOMEM;

    for (size_t b = 0; b < B; b++) {
        for (size_t g = 0; g < Hkv; g++) {
            af_gather_f32(&in->kv, b, g, k, D);
            af_gather_f32(&in->vv, b, g, v, Dv);
            if (c->placement == AF_PLACE_K) af_scale_round(k, Sk * D, scale, dt);
            if (c->placement == AF_PLACE_SQRT_QK) af_scale_round(k, Sk * D, scale_d < 0 ? -sq : sq, dt);
            if (tf32) {
                af_round_tf32_array(k, Sk * D);
                af_round_tf32_array(v, Sk * Dv);
            }
            size_t nbad = af_split_nonfinite_f32(v, Sk, Dv, bad, saved);

            for (size_t h = g * group; h < (g + 1) * group; h++) {
                af_gather_f32(&in->qv, b, h, q, D);
                if (c->placement == AF_PLACE_Q) af_scale_round(q, Sq * D, scale, dt);
                if (c->placement == AF_PLACE_SQRT_QK) af_scale_round(q, Sq * D, sq, dt);
                if (tf32) af_round_tf32_array(q, Sq * D);

                for (size_t r0 = 0; r0 < Sq; r0 += R) {
                    size_t rn = Sq - r0 < R ? Sq - r0 : R;
                    /* matmul 1: fp32 scores */
                    af_gemm_nt_f32(rn, Sk, D, q + r0 * D, D, k, D, S, Sk, 0);
                    for (size_t r = 0; r < rn; r++) {
                        size_t i = r0 + r;
                        float *s = S + r * Sk;
                        uint8_t *lv = live + r * Sk;
                        if (af_mask_row(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, add, lv))
                            memset(lv, 1, Sk);
                        if (c->placement == AF_PLACE_SCORES)
                            for (size_t j = 0; j < Sk; j++) s[j] *= scale;
                        if (c->softcap > 0.0) {
                            float cap = (float)c->softcap;
                            for (size_t j = 0; j < Sk; j++) s[j] = cap * tanhf(s[j] / cap);
                        }
                        if (alibi) {
                            af_serving_alibi_row_f32(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, bias);
                            for (size_t j = 0; j < Sk; j++) s[j] += bias[j];
                        }
                        if (c->amask.present)
                            for (size_t j = 0; j < Sk; j++) s[j] += add[j];
                        for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] : -INFINITY;
                        /* softmax in fp32; P rounded to the dtype */
                        int has_nan;
                        float m = af_max_f32(s, Sk, &has_nan);
                        rowstate[r] = has_nan ? 2 : (m == -INFINITY ? 1 : 0);
                        if (has_nan && p > 0.0f) {
                            /* dropped weights are exactly 0: NaN only if a live key is kept */
                            af_dropout_row(c->dropout_seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0,
                                           (uint32_t)Sk, keep);
                            bool kept = false;
                            for (size_t j = 0; j < Sk; j++) kept |= keep[j] && lv[j];
                            if (!kept) {
                                memset(s, 0, Sk * sizeof *s);
                                rowstate[r] = 0;
                                continue;
                            }
                        }
                        if (rowstate[r]) {
                            memset(s, 0, Sk * sizeof *s);
                            continue;
                        }
                        /* a sink logit joins the denominator: exponents from max(m, z) */
                        float z = sinks ? af_serving_sink(in, (uint32_t)h) : 0.0f;
                        float ms = sinks && z > m ? z : m;
                        float sum = af_exp_sub_sum_f32(s, Sk, ms, 1.0f) + (sinks ? expf(z - ms) : 0.0f);
                        for (size_t j = 0; j < Sk; j++) s[j] = s[j] / sum;
                        if (!isfinite(sum)) /* an infinite score: NaN weights, masked keys stay 0 */
                            for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] : 0.0f;
                        af_round_f32_array(s, Sk, dt);
                        if (p > 0.0f) {
                            af_dropout_row(c->dropout_seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0,
                                           (uint32_t)Sk, keep);
                            for (size_t j = 0; j < Sk; j++) s[j] = keep[j] ? s[j] * keep_scale : 0.0f;
                            af_round_f32_array(s, Sk, dt);
                        }
                        if (tf32) af_round_tf32_array(s, Sk);
                    }
                    /* matmul 2: O = P V (zeroed non-finite V rows, then live ones added back) */
                    af_gemm_nn_f32(rn, Dv, Sk, S, Sk, v, Dv, O, Dv, 0);
                    for (size_t r = 0; r < rn; r++) {
                        size_t i = r0 + r;
                        float *o = O + r * Dv;
                        const float *s = S + r * Sk;
                        const uint8_t *lv = live + r * Sk;
                        if (rowstate[r]) {
                            float fill = rowstate[r] == 2 ? NAN : 0.0f;
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

const af_backend_vtable af_backend_explicit = {
    .name = "explicit",
    .version = "1",
    .summary = "unfused graph at the case dtype, fp32 scores and accumulation, honours scale placement",
    .caps = AF_CAP_ALL,
    .layouts = AF_LAYOUTS_ALL,
    .out_dtype = AF_F32,
    .create = af_scratch_state_create,
    .destroy = af_scratch_state_destroy,
    .run = af_explicit_run,
};
