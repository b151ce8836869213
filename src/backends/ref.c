/* ref.c - the float64 oracle: straightforward attention, one query head at a time.
 *
 * Shapes: q [Sq x D], k [Sk x D], v [Sk x Dv] gathered per head into float64 (exact: the
 * inputs are f32/f16/bf16 values); scores are made R query rows at a time, R * Sk <= 256K,
 * so memory stays bounded for long sequences while the products are big enough for dgemm.
 *
 * Passes per row block:
 *   1. S = Q K^T (dgemm or loops)
 *   2. per row: scale, softcap, ALiBi's bias, masks (set -inf / add), softmax (a fully
 *      masked row -> 0, a NaN score -> NaN weights; a sink logit z_h joins the denominator
 *      only: sum_j exp(s_j - m) + exp(z_h - m), m the larger of the row's max and z_h),
 *      dropout (dropped weights are exactly 0, so a NaN row whose live keys are all dropped
 *      gives 0, as p = 1 does)
 *   3. O = P V with V's non-finite rows zeroed, then their contribution added back for
 *      the keys of nonzero weight only: a key of weight 0 (masked, an additive -inf, a
 *      score of -inf, dropped) must not leak 0 * NaN (docs/design.md section 2 rule 5).
 *
 * In honest mode the same passes round where the explicit implementation rounds; the
 * machinery of that mode (sensitivity bound, instability flags) is in ref_honest.c. */
#include "ref.h"
#include "ref_honest.h"

#include <math.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "backends.h"
#include "vmath.h"

enum { WS_Q, WS_K, WS_V, WS_SAVED, WS_ROWS, WS_S, WS_O, WS_ADD, WS_LIVE, WS_KEEP, WS_F32A, WS_F32B, WS_F32C,
       WS_ABS, WS_RISK, WS_DELTA, WS_VABS, WS_E, WS_PVABS, WS_RINV, WS_ROWST, WS_VROWMAX, WS_BIAS, WS_SINKW,
       WS_FP8W, WS_FP8E, WS_QRAW, WS_KRAW };
/* per row of a block: which keys are live, or why the row is special */
enum { AF_ROW_ALL_LIVE, AF_ROW_SOME_LIVE, AF_ROW_MASKED, AF_ROW_NAN };

#define AF_REF_BLOCK_ELEMS 131072u

/* A score as the honest run holds it: in f32, or in the dtype under scores "dtype". */
static inline double af_ref_rsc(bool lowp, af_dtype dt, double x) { return lowp ? af_rdt(x, dt) : af_r32(x); }

/* Can a kernel that reads row b's whole pages, or its block table's whole width, reach the
 * case's poison (inputs_serving.c)? Its last page's unused slots (past kv_len they have no
 * key in the padded view) and its table's entries past its pages (the null page) hold it: a
 * kernel that multiplies masked keys' values gets NaN there, which the leak map flags as a
 * masked value's. widest: the most pages any row takes. */
static bool af_ref_poison_reach(const af_case *c, size_t b, uint32_t widest) {
    if (!(c->serve.forms & AF_SERVE_PAGED)) return false;
    uint32_t n = af_case_pages(c, (uint32_t)b);
    return n < widest || (size_t)n * c->serve.page_size > af_case_seg_k(c, (uint32_t)b);
}

af_status af_ref_attention(const af_case_tensors *in, const af_view *qv, const af_view *kv, const af_view *vv,
                           const af_ref_opts *opts, double *out, uint8_t *masked_rows, af_scratch *ws,
                           af_error *err) {
    const af_case *c = in->c;
    uint32_t widest = 1; /* the block table's width (inputs_serving.c) */
    for (uint32_t b = 0; b < c->batch; b++)
        if (af_case_pages(c, b) > widest) widest = af_case_pages(c, b);
    const size_t B = c->batch, Hq = c->q_heads, Hkv = c->kv_heads, Sq = c->q_len, Sk = c->kv_len;
    const size_t D = c->head_dim, Dv = c->v_head_dim, group = Hq / Hkv;
    const af_dtype dt = c->dtype;
    const bool honest = opts->honest;
    const bool tf32 = opts->tf32 || (honest && c->allow_tf32 && dt == AF_F32);
    const double scale = af_case_scale(c);
    const double p = c->dropout_p;
    const uint64_t thr = af_dropout_threshold(p);
    const size_t R = Sk >= AF_REF_BLOCK_ELEMS ? 1 : (AF_REF_BLOCK_ELEMS / Sk < Sq ? AF_REF_BLOCK_ELEMS / Sk : Sq);

    double *q = AF_SCRATCH(ws, WS_Q, double, Sq * D, err);
    double *k = AF_SCRATCH(ws, WS_K, double, Sk * D, err);
    double *v = AF_SCRATCH(ws, WS_V, double, Sk * Dv, err);
    double *saved = AF_SCRATCH(ws, WS_SAVED, double, Sk * Dv, err);
    uint32_t *bad = AF_SCRATCH(ws, WS_ROWS, uint32_t, Sk, err);
    double *S = AF_SCRATCH(ws, WS_S, double, R * Sk, err);
    double *O = AF_SCRATCH(ws, WS_O, double, R * Dv, err);
    float *add = AF_SCRATCH(ws, WS_ADD, float, Sk, err);
    uint8_t *live = AF_SCRATCH(ws, WS_LIVE, uint8_t, R * Sk, err);
    uint8_t *keep = AF_SCRATCH(ws, WS_KEEP, uint8_t, Sk, err);
    uint8_t *risky = AF_SCRATCH(ws, WS_RISK, uint8_t, R, err);
    double *rinv = AF_SCRATCH(ws, WS_RINV, double, R, err);
    uint8_t *rowst = AF_SCRATCH(ws, WS_ROWST, uint8_t, R, err);
    double *vrowmax = AF_SCRATCH(ws, WS_VROWMAX, double, Sk, err);
    /* serving forms: ALiBi's bias of one row, each row's sink weight exp(z - m) */
    const bool alibi = c->serve.forms & AF_SERVE_ALIBI, sinks = (c->serve.forms & AF_SERVE_SINKS) && opts->sink_mode != 1;
    const bool sink_numerator = sinks && opts->sink_mode == 2; /* a seeded bug's */
    double *bias = AF_SCRATCH(ws, WS_BIAS, double, Sk, err);
    double *sinkw = AF_SCRATCH(ws, WS_SINKW, double, R, err);
    if (!q || !k || !v || !saved || !bad || !S || !O || !add || !live || !keep || !risky || !rinv || !rowst ||
        !vrowmax || !bias || !sinkw)
        return AF_ERR_NOMEM;
    const double vdrop = p > 0.0 && p < 1.0 ? 1.0 / (1.0 - p) : 1.0;
    size_t big = Sk * (D > Dv ? D : Dv) + R * (Sk > Dv ? Sk : Dv) + Sq * D;
    float *fa = NULL, *fb = NULL, *fc = NULL;
    double *absbuf = NULL;
    double *delta = NULL, *vabs = NULL, *ebuf = NULL, *pv_abs = NULL, *fp8w = NULL, *fp8e = NULL;
    double *sens = honest ? opts->sens : NULL;
    /* score error per unit of |scale| |q| . |k|: input roundings, fp32 accumulation */
    const double u32 = 0x1p-24, udt = af_dtype_eps(dt), ovf = af_dtype_overflow(dt);
    /* scores held in f32, or in the dtype (conventions.scores "dtype") */
    const bool lowp = honest && opts->scores_dtype;
    const double u_sc = lowp ? udt : u32;
    /* Any placement is a legitimate rewrite (compilers move the scale), so the bound
     * covers rounding both scaled inputs to the dtype, whichever placement the case has. */
    double c_in = sqrt((double)D) * u32 + (tf32 ? 2.0 * 0x1p-11 : 0.0) + 2.0 * udt;
    /* P is rounded to the dtype (TF32 too, when allowed) before P V accumulates in fp32 */
    const double u_pv = (tf32 && 0x1p-11 > udt ? 0x1p-11 : udt) + sqrt((double)Sk) * u32;
    /* absolute rounding error of a scaled input near the subnormals (dtype, or TF32); a
     * flushing unit (opts->ftz) turns a scaled f32 or bf16 input below f32's smallest normal
     * into 0: off by up to 2^-126, which a K near f32's overflow makes an O(1) score error */
    double h_abs = 0.5 * (tf32 && 0x1p-136 > af_dtype_min_subnormal(dt) ? 0x1p-136 : af_dtype_min_subnormal(dt));
    if (honest && opts->ftz && dt != AF_F16 && h_abs < 0x1p-126) h_abs = 0x1p-126;
    if (sens) {
        delta = AF_SCRATCH(ws, WS_DELTA, double, R * Sk, err);
        vabs = AF_SCRATCH(ws, WS_VABS, double, Sk * Dv, err);
        ebuf = AF_SCRATCH(ws, WS_E, double, R * Dv, err);
        pv_abs = AF_SCRATCH(ws, WS_PVABS, double, R * Dv, err);
        if (!delta || !vabs || !ebuf || !pv_abs) return AF_ERR_NOMEM;
        if (opts->fp8_abs) {
            fp8w = AF_SCRATCH(ws, WS_FP8W, double, R * Sk, err);
            fp8e = AF_SCRATCH(ws, WS_FP8E, double, R * Dv, err);
            if (!fp8w || !fp8e) return AF_ERR_NOMEM;
        }
    }
    /* conventions.products: Q and K as the case has them, before the honest run scales them */
    const bool products = honest && opts->products_dtype && dt != AF_F32;
    double *qraw = NULL, *kraw = NULL;
    if (products) {
        qraw = AF_SCRATCH(ws, WS_QRAW, double, Sq * D, err);
        kraw = AF_SCRATCH(ws, WS_KRAW, double, Sk * D, err);
        if (!qraw || !kraw) return AF_ERR_NOMEM;
    }
    if (honest) {
        fa = AF_SCRATCH(ws, WS_F32A, float, big, err);
        fb = AF_SCRATCH(ws, WS_F32B, float, big, err);
        fc = AF_SCRATCH(ws, WS_F32C, float, big, err);
        absbuf = AF_SCRATCH(ws, WS_ABS, double, 2 * big + R * (Sk > Dv ? Sk : Dv), err);
        if (!fa || !fb || !fc || !absbuf) return AF_ERR_NOMEM;
    }

    for (size_t b = 0; b < B; b++) {
        for (size_t g = 0; g < Hkv; g++) {
            af_gather_f64(kv, b, g, k, D);
            af_gather_f64(vv, b, g, v, Dv);
            if (products) memcpy(kraw, k, Sk * D * sizeof *k);
            bool vrisk_force = false;
            double kmax = af_ref_maxabs(k, Sk * D);
            bool k_tf32_inf = tf32 && af_ref_tf32_overflows(k, Sk * D);
            bool k_nonfinite = honest && af_ref_has_nonfinite(k, Sk * D);
            bool k_leaky = opts->key_leak && af_ref_has_nonfinite(k, Sk * D);
            double kmin = honest ? af_ref_min_abs(k, Sk * D) : 0.0;
            if (tf32 && af_ref_tf32_overflows(v, Sk * Dv)) vrisk_force = true;
            /* An online-softmax kernel accumulates weights exp(s - running max), each up to 1,
             * so its P V partial sums are bounded only by Sk max|V| / (1 - p): past the fp32
             * range, every output of these heads is unstable. */
            bool v_risk = vrisk_force || af_ref_maxabs(v, Sk * Dv) * (double)Sk /
                                                 (p > 0.0 && p < 1.0 ? 1.0 - p : 1.0) > AF_F32_RISK;
            if (honest) {
                double f = sqrt(fabs(scale)) * (scale < 0 ? -1.0 : 1.0);
                if (c->placement == AF_PLACE_K) af_ref_scale_rows(k, Sk * D, scale, dt);
                if (c->placement == AF_PLACE_SQRT_QK) af_ref_scale_rows(k, Sk * D, f, dt);
            }
            if (tf32) {
                af_ref_tf32(k, Sk * D);
                af_ref_tf32(v, Sk * Dv);
            }
            if (sens) /* before the split: the finite entries of a NaN row still count */
                for (size_t e = 0; e < Sk * Dv; e++) vabs[e] = isfinite(v[e]) ? fabs(v[e]) : 0.0;
            if (opts->row_vscale)
                for (size_t j = 0; j < Sk; j++) vrowmax[j] = af_ref_maxabs(v + j * Dv, Dv);
            size_t nbad = af_split_nonfinite_f64(v, Sk, Dv, bad, saved);

            for (size_t h = g * group; h < (g + 1) * group; h++) {
                af_gather_f64(qv, b, h, q, D);
                if (products) memcpy(qraw, q, Sq * D * sizeof *q);
                /* a non-finite Q or K can give a masked key a NaN or +Inf score (key_leak) */
                bool qk_leaky = k_leaky || (opts->key_leak && af_ref_has_nonfinite(q, Sq * D));
                /* |q| |k| bounds Q.K^T's partial sums, scaled or not (a fused kernel scales
                 * after the product, an explicit graph may scale before) */
                bool qk_risk = honest && af_ref_maxabs(q, Sq * D) * kmax * (double)D *
                                                 (fabs(scale) > 1.0 ? fabs(scale) : 1.0) > AF_F32_RISK;
                bool qk_inf = honest && (k_tf32_inf || (tf32 && af_ref_tf32_overflows(q, Sq * D)));
                /* Inf or NaN in Q or K against a tiny value of the other, which rounding (the
                 * scaled inputs to the dtype, or TF32) may turn into 0: Inf * 0 is NaN for
                 * some implementations and not for others */
                if (honest && (af_ref_has_nonfinite(q, Sq * D) || k_nonfinite)) {
                    double zero = 2.0 * (tf32 && 0x1p-136 > af_dtype_min_subnormal(dt) ? 0x1p-136 : af_dtype_min_subnormal(dt));
                    zero /= fabs(scale) < 1.0 ? sqrt(fabs(scale)) + 1e-300 : 1.0;
                    if (af_ref_min_abs(q, Sq * D) < zero || kmin < zero) qk_inf = true;
                }
                /* a scale above 1 placed on Q or K may round a large input to Inf in the dtype */
                if (honest && fabs(scale) > 1.0 &&
                    (af_ref_maxabs(q, Sq * D) > 0.5 * ovf / fabs(scale) || kmax > 0.5 * ovf / fabs(scale)))
                    qk_inf = true;
                if (honest) {
                    if (c->placement == AF_PLACE_Q) af_ref_scale_rows(q, Sq * D, scale, dt);
                    if (c->placement == AF_PLACE_SQRT_QK) af_ref_scale_rows(q, Sq * D, sqrt(fabs(scale)), dt);
                }
                if (tf32) af_ref_tf32(q, Sq * D);

                for (size_t r0 = 0; r0 < Sq; r0 += R) {
                    size_t rn = Sq - r0 < R ? Sq - r0 : R;
                    /* pass 1: scores */
                    for (size_t r = 0; r < rn; r++) risky[r] = qk_inf;
                    /* products in the dtype, of Q and K as given (the scale on the scores after)
                     * or as the case's placement scales them: either may overflow */
                    if (products)
                        for (size_t r = 0; r < rn; r++)
                            if (!risky[r])
                                risky[r] = af_ref_products_overflow(qraw + (r0 + r) * D, kraw, Sk, D, dt, scale) ||
                                           af_ref_products_overflow(q + (r0 + r) * D, k, Sk, D, dt,
                                                                    c->placement == AF_PLACE_SCORES ? scale : 1.0);
                    if (honest) {
                        if (qk_risk || sens)
                            af_honest_score_bounds(qv, kv, b, h, g, r0, rn, Sk, D, scale, c_in, h_abs, qk_risk, absbuf,
                                                   big, risky, sens ? delta : NULL);
                        af_ref_gemm_f32(1, rn, Sk, D, q + r0 * D, k, S, fa, fb, fc);
                    } else {
                        af_gemm_nt_f64(rn, Sk, D, q + r0 * D, D, k, D, S, Sk, 0);
                    }
                    /* pass 2: row-wise scale, softcap, masks, softmax, dropout */
                    for (size_t r = 0; r < rn; r++) {
                        size_t i = r0 + r;
                        double *s = S + r * Sk;
                        uint8_t *lv = live + r * Sk;
                        bool all_live = af_mask_row(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, add, lv);
                        if (opts->key_leak) {
                            /* before the scores change: the score a masked key would have
                             * had, had the mask been added (exact mode: s holds Q.K^T) */
                            uint8_t kl = 0;
                            for (size_t j = 0; qk_leaky && !all_live && j < Sk && !(kl & AF_KEY_LEAK_ANY); j++) {
                                if (lv[j]) continue;
                                double x = s[j] * scale;
                                if (c->softcap > 0.0) x = c->softcap * tanh(x / c->softcap);
                                if (c->amask.present) x += (double)add[j];
                                if (isnan(x) || x == HUGE_VAL) kl |= AF_KEY_LEAK_ANY;
                            }
                            /* ... and as an implementation holding the scores in an f16/bf16
                             * dtype has it (conventions.scores "dtype"): the product rounded
                             * to the dtype after the scale or before it, then the softcap and
                             * the mask, each rounded: a finite score past the dtype's range is
                             * +Inf there (an f16 score past 65504) */
                            for (size_t j = 0; dt != AF_F32 && !all_live && j < Sk && !kl; j++) {
                                if (lv[j]) continue;
                                for (int form = 0; form < 2; form++) {
                                    double x = form ? af_rdt(af_rdt(s[j], dt) * scale, dt) : af_rdt(s[j] * scale, dt);
                                    if (c->softcap > 0.0) x = af_rdt(c->softcap * tanh(x / c->softcap), dt);
                                    if (c->amask.present) x = af_rdt(x + af_rdt((double)add[j], dt), dt);
                                    if (isnan(x) || x == HUGE_VAL) kl |= AF_KEY_LEAK_DTYPE;
                                }
                            }
                            opts->key_leak[(b * Hq + h) * Sq + i] = kl;
                        }
                        rowst[r] = all_live ? AF_ROW_ALL_LIVE : AF_ROW_SOME_LIVE;
                        sinkw[r] = 0.0;
                        if (alibi)
                            af_serving_alibi_row(in, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk,
                                                 opts->alibi_shift, bias);
                        if (all_live && (honest || opts->qk_f16_before_scale)) {
                            memset(lv, 1, Sk); /* the general path below reads it */
                            rowst[r] = AF_ROW_SOME_LIVE;
                        }
                        /* exact path with nothing between scale and softmax: the scale is folded
                         * into the exponential (max taken on the unscaled scores) */
                        double fold = 1.0;
                        /* honest mode: a live score that rounding (an overflow, or a finite
                         * mask value rounded to the dtype's -Inf) turned into -inf */
                        bool rounded_out = false;
                        /* ... and, scores in the dtype, a live score that the error of its
                         * inputs' roundings (the placement of the scale, the accumulation:
                         * not the score's own rounding, which is exact about the threshold)
                         * may take past the dtype's range: +Inf, a NaN row (an f16 score of
                         * 65529 is Inf where the honest run's placement rounds it to 65504) */
                        bool may_ovf = false;
                        if (!honest && !opts->qk_f16_before_scale && scale > 0.0 && !(c->softcap > 0.0) &&
                            !c->amask.present && !alibi && !sinks) {
                            fold = scale;
                            if (!all_live)
                                for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] : -HUGE_VAL;
                        } else if (!honest && !opts->qk_f16_before_scale) {
                            /* the oracle's own path: plain passes that vectorize */
                            for (size_t j = 0; j < Sk; j++) s[j] *= scale;
                            if (c->softcap > 0.0)
                                for (size_t j = 0; j < Sk; j++) s[j] = c->softcap * tanh(s[j] / c->softcap);
                            if (alibi)
                                for (size_t j = 0; j < Sk; j++) s[j] += bias[j];
                            if (c->amask.present)
                                for (size_t j = 0; j < Sk; j++) s[j] += (double)add[j];
                            if (!all_live)
                                for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] : -HUGE_VAL;
                        } else for (size_t j = 0; j < Sk; j++) {
                            double x = s[j];
                            if (opts->qk_f16_before_scale) x = af_round_f64(x, AF_F16);
                            if (!honest) {
                                x *= scale;
                            } else {
                                double pre = x;
                                x = af_ref_rsc(lowp, dt, x);
                                if (c->placement == AF_PLACE_SCORES) x = af_ref_rsc(lowp, dt, x * (double)(float)scale);
                                rounded_out |= lv[j] && isfinite(pre) && x == -HUGE_VAL;
                            }
                            double pre_cap = x;
                            if (c->softcap > 0.0) {
                                x = c->softcap * tanh(x / c->softcap);
                                if (honest) x = af_ref_rsc(lowp, dt, x);
                            }
                            if (alibi) { /* a kernel's f32 bias: -(slope * dist), one rounding */
                                x += honest ? af_r32(bias[j]) : bias[j];
                                if (honest) x = af_ref_rsc(lowp, dt, x);
                            }
                            double mask_err = 0.0;
                            if (c->amask.present) {
                                double a = lowp ? af_rdt((double)add[j], dt) : (double)add[j];
                                if (lowp && isfinite(a)) mask_err = fabs(a) * udt;
                                bool finite_in = isfinite(x) && isfinite((double)add[j]);
                                x += a;
                                if (honest) x = af_ref_rsc(lowp, dt, x);
                                rounded_out |= honest && lv[j] && finite_in && x == -HUGE_VAL;
                            }
                            s[j] = lv[j] ? x : -HUGE_VAL;
                            if (sens) {
                                /* the error reaching the softmax: through the softcap, plus
                                 * the rounding of the score and of the mask addition */
                                double *dl = delta + r * Sk + j;
                                double dc = c->softcap > 0.0 ? af_sens_cap(*dl, pre_cap, c->softcap) : *dl;
                                double e_in = dc + mask_err + (alibi ? fabs(bias[j]) * u32 : 0.0);
                                *dl = lv[j] && isfinite(x) ? e_in + 2.0 * fabs(x) * u_sc : 0.0;
                                may_ovf |= lowp && lv[j] && isfinite(x) && x + e_in >= ovf;
                            }
                        }
                        int has_nan;
                        double m = af_max_f64(s, Sk, &has_nan);
                        /* every live key rounded away: the dtype cannot compute this row (an
                         * f32 score + mask past f32's range, f32's lowest as a bf16 mask) */
                        if (m == -HUGE_VAL && !has_nan && rounded_out) risky[r] = 1;
                        if (may_ovf) risky[r] = 1;
                        size_t row_out = ((b * Hq + h) * Sq + i);
                        if (masked_rows) masked_rows[row_out] = !has_nan && m == -HUGE_VAL;
                        if (opts->row_max) opts->row_max[row_out] = has_nan ? (double)NAN : m * fold;
                        /* the statistics of a NaN or fully masked row; a live row's below */
                        if (opts->lse) opts->lse[row_out] = has_nan ? (double)NAN : m * fold;
                        if (honest && opts->lse_sens) opts->lse_sens[row_out] = 0.0;
                        if (has_nan && p > 0.0) {
                            /* NaN weights, but dropout zeroes the dropped ones: with every live
                             * key dropped the row is all zero weights, as p = 1 gives zeros */
                            af_dropout_keep_row(in, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, keep);
                            bool kept = false;
                            for (size_t j = 0; j < Sk; j++) kept |= keep[j] && (rowst[r] == AF_ROW_ALL_LIVE || lv[j]);
                            if (!kept) {
                                memset(s, 0, Sk * sizeof *s);
                                rinv[r] = 1.0;
                                if (sens) memset(delta + r * Sk, 0, Sk * sizeof *delta);
                                continue;
                            }
                        }
                        if (has_nan || m == -HUGE_VAL) {
                            /* NaN propagates through softmax; a fully masked row gives 0 */
                            double fillv = has_nan ? (double)NAN : 0.0;
                            for (size_t j = 0; j < Sk; j++) s[j] = 0.0;
                            s[0] = fillv;
                            rowst[r] = has_nan ? AF_ROW_NAN : AF_ROW_MASKED;
                            if (sens) memset(delta + r * Sk, 0, Sk * sizeof *delta);
                            continue;
                        }
                        double z = sinks ? (double)af_serving_sink(in, (uint32_t)h) : 0.0;
                        if (sens && opts->lse_sens) {
                            /* the statistics' bound: the weighted mean of the score errors
                             * (before af_sens_weights turns them into weight bounds) */
                            double mz = sinks && z > m ? z : m, num = 0.0, den = sinks ? exp(z - mz) : 0.0;
                            for (size_t j = 0; j < Sk; j++) {
                                double e = exp(s[j] - mz);
                                if (e > 0.0) num += e * delta[r * Sk + j];
                                den += e;
                            }
                            double ls = den > 0.0 ? num / den : 0.0;
                            opts->lse_sens[row_out] = isnan(ls) ? HUGE_VAL : ls;
                        }
                        if (sens) {
                            /* the weights' error bounds, from the scores (before they become
                             * weights; a sink's term in every denominator); a non-finite V at a
                             * live key whose weight may round to 0 in the dtype (0 * Inf = NaN)
                             * makes the row unstable */
                            double p_zero = af_dtype_min_subnormal(dt);
                            if (opts->ftz && p_zero < 0x1p-126) p_zero = 0x1p-126;
                            if (af_sens_weights(s, m, delta + r * Sk, Sk, bad, nbad, p_zero, sinks ? z : -HUGE_VAL))
                                risky[r] = 1;
                        }
                        /* with a sink, exponents count from the larger of m and z (exp(z - m) may
                         * overflow where every weight is tiny) */
                        double ms = sinks && z > m ? z : m;
                        double sum = af_exp_sub_sum_f64(s, Sk, ms, fold);
                        double ez = sinks ? exp(z - ms) : 0.0;
                        if (honest) { /* fp32 exponentials and sum */
                            sum = 0.0;
                            for (size_t j = 0; j < Sk; j++) {
                                s[j] = af_r32(s[j]);
                                sum += s[j];
                            }
                            ez = af_r32(ez);
                            sum = af_r32(sum + (sinks ? ez : 0.0));
                        } else if (sinks) {
                            sum += ez;
                        }
                        if (sink_numerator) sinkw[r] = ez; /* the sink meets a value row of ones */
                        if (opts->lse) {
                            /* the max and sum the weights use: m + log(sum) (the exact path's m
                             * is taken on unscaled scores: fold); a +Inf score makes the sum
                             * NaN (inf - inf) where log sum exp is +inf: +inf (the oracle also
                             * takes the NaN that m + log(sum) gives there) */
                            double l = m == HUGE_VAL ? HUGE_VAL : ms * fold + log(sum);
                            opts->lse[row_out] = honest && isfinite(sum) ? af_r32(ms + af_r32(log(sum))) : l;
                        }
                        /* exact path: P stays unnormalized, the output row is divided instead
                         * (Dv products instead of Sk; the same value in exact arithmetic) */
                        rinv[r] = 1.0;
                        if (honest) {
                            for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? af_rdt(s[j] / sum, dt) : 0.0;
                        } else if (isfinite(sum) && sum > 0.0) {
                            rinv[r] = 1.0 / sum;
                        } else {
                            /* a NaN sum (an infinite score): NaN weights on the live keys (so
                             * that dropout can still zero the dropped ones); masked keys stay 0 */
                            for (size_t j = 0; j < Sk; j++)
                                s[j] = rowst[r] == AF_ROW_ALL_LIVE || lv[j] ? s[j] / sum : 0.0;
                        }
                        if (p > 0.0) {
                            af_dropout_keep_row(in, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, keep);
                            for (size_t j = 0; j < Sk; j++) {
                                double w = keep[j] ? s[j] / (1.0 - p) : 0.0;
                                s[j] = honest ? af_rdt(w, dt) : w;
                                if (sens) delta[r * Sk + j] = keep[j] ? delta[r * Sk + j] / (1.0 - p) : 0.0;
                            }
                        }
                        if (tf32) af_ref_tf32(s, Sk);
                    }
                    /* pass 3: O = P V, then the non-finite V rows for live keys */
                    if (honest) {
                        af_ref_gemm_f32(0, rn, Dv, Sk, S, v, O, fa, fb, fc);
                    } else {
                        af_gemm_nn_f64(rn, Dv, Sk, S, Sk, v, Dv, O, Dv, 0);
                    }
                    if (sens) {
                        /* E = W |V| (delta holds W, dropout applied); |P| |V| for P's rounding */
                        for (size_t e = 0; e < rn * Sk; e++) absbuf[e] = isfinite(S[e]) ? fabs(S[e]) : 0.0;
                        af_gemm_nn_f64(rn, Dv, Sk, delta, Sk, vabs, Dv, ebuf, Dv, 0);
                        af_gemm_nn_f64(rn, Dv, Sk, absbuf, Sk, vabs, Dv, pv_abs, Dv, 0);
                    }
                    if (fp8w) {
                        /* min(h_F / s max_k P_ik, P_ij + e) on each live key of a row with
                         * weights, for fp8_abs: a weight rounds to 0 at worst */
                        const double p_e = af_dtype_min_subnormal(dt);
                        for (size_t r = 0; r < rn; r++) {
                            const double *pr = absbuf + r * Sk;
                            double pm = 0.0;
                            bool weights = rowst[r] != AF_ROW_MASKED && rowst[r] != AF_ROW_NAN;
                            for (size_t j = 0; weights && j < Sk; j++) pm = pr[j] > pm ? pr[j] : pm;
                            double cap = opts->fp8_h * pm;
                            for (size_t j = 0; j < Sk; j++) {
                                double pj = pr[j] * (1.0 + udt) + p_e;
                                bool on = weights && (rowst[r] == AF_ROW_ALL_LIVE || live[r * Sk + j]);
                                fp8w[r * Sk + j] = on ? (pj < cap ? pj : cap) : 0.0;
                            }
                        }
                        af_gemm_nn_f64(rn, Dv, Sk, fp8w, Sk, vabs, Dv, fp8e, Dv, 0);
                    }
                    for (size_t r = 0; r < rn; r++) {
                        size_t i = r0 + r;
                        double *o = O + r * Dv;
                        const double *s = S + r * Sk;
                        const uint8_t *lv = live + r * Sk;
                        bool special_row = rowst[r] == AF_ROW_MASKED || rowst[r] == AF_ROW_NAN;
                        if (special_row) {
                            double fillv = rowst[r] == AF_ROW_NAN ? (double)NAN : 0.0;
                            for (size_t d = 0; d < Dv; d++) o[d] = fillv;
                        }
                        uint8_t *lk = opts->leak ? opts->leak + ((b * Hq + h) * Sq + i) * Dv : NULL;
                        if (lk) memset(lk, 0, Dv);
                        for (size_t n = 0; n < nbad && rowst[r] != AF_ROW_NAN; n++) {
                            size_t j = bad[n];
                            /* a fully masked row gives every key weight 0: its non-finite
                             * V entries are flagged too (0 * Inf in an IEEE P @ V) */
                            if (special_row || (rowst[r] != AF_ROW_ALL_LIVE && !lv[j]) || s[j] == 0.0) {
                                /* weight 0: nothing, whatever V holds (0 * NaN counts as 0) */
                                if (lk)
                                    for (size_t d = 0; d < Dv; d++) if (!isfinite(saved[n * Dv + d])) lk[d] = 1;
                                continue;
                            }
                            for (size_t d = 0; d < Dv; d++) o[d] += s[j] * saved[n * Dv + d];
                        }
                        if (lk && af_ref_poison_reach(c, b, widest)) memset(lk, 1, Dv);
                        if (opts->row_vscale) {
                            double vs = 0.0;
                            if (!special_row)
                                for (size_t j = 0; j < Sk; j++)
                                    if (s[j] != 0.0 && vrowmax[j] > vs) vs = vrowmax[j];
                            opts->row_vscale[(b * Hq + h) * Sq + i] = vs * vdrop;
                        }
                        if (!special_row && sinkw[r] != 0.0) /* (never in honest mode) */
                            for (size_t d = 0; d < Dv; d++) o[d] += sinkw[r];
                        if (!special_row && rinv[r] != 1.0)
                            for (size_t d = 0; d < Dv; d++) o[d] *= rinv[r];
                        double *dst = out + ((b * Hq + h) * Sq + i) * Dv;
                        for (size_t d = 0; d < Dv; d++) {
                            dst[d] = honest ? af_rdt(o[d], dt) : o[d];
                        }
                        if (opts->unstable)
                            memset(opts->unstable + ((b * Hq + h) * Sq + i) * Dv, risky[r] || v_risk, Dv);
                        if (sens) {
                            double *se = sens + ((b * Hq + h) * Sq + i) * Dv;
                            for (size_t d = 0; d < Dv; d++) {
                                double ao = isfinite(o[d]) ? fabs(o[d]) : 0.0;
                                double e = ebuf[r * Dv + d] + u_pv * pv_abs[r * Dv + d] + udt * ao;
                                se[d] = isnan(e) ? HUGE_VAL : e;
                            }
                            if (fp8w) {
                                double *pa = opts->fp8_pv + ((b * Hq + h) * Sq + i) * Dv;
                                double *pm = opts->fp8_abs + ((b * Hq + h) * Sq + i) * Dv;
                                for (size_t d = 0; d < Dv; d++) {
                                    pa[d] = isnan(pv_abs[r * Dv + d]) ? HUGE_VAL : pv_abs[r * Dv + d];
                                    pm[d] = isnan(fp8e[r * Dv + d]) ? HUGE_VAL : fp8e[r * Dv + d];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    return AF_OK;
}

/* --- the `ref` backend ------------------------------------------------------------ */

static af_status af_ref_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    af_ref_opts opts = {0};
    return af_ref_attention(in, &in->qv, &in->kv, &in->vv, &opts, out->data, NULL, state, err);
}

/* run with the statistics: the reference's own (float64) */
static af_status af_ref_run_lse(void *state, const af_case_tensors *in, af_tensor *out, af_tensor *lse, af_error *err) {
    af_ref_opts opts = {.lse = lse->data};
    return af_ref_attention(in, &in->qv, &in->kv, &in->vv, &opts, out->data, NULL, state, err);
}

const af_backend_vtable af_backend_ref = {
    .name = "ref",
    .version = "1",
    .summary = "float64 oracle: straightforward attention, masked keys excluded exactly",
    .caps = AF_CAP_ALL,
    .layouts = AF_LAYOUTS_ALL,
    .out_dtype = AF_F64,
    .create = af_scratch_state_create,
    .destroy = af_scratch_state_destroy,
    .run = af_ref_run,
    .run_backward = af_ref_run_backward,
    .run_lse = af_ref_run_lse,
    .traits = AF_TRAIT_BATCH_INVARIANT, /* each (batch, head) row computed alone: bitwise the same in any batch */
};
