/* ref_grad.c - the float64 reference backward (docs/design.md section 2, "Backward") and its
 * honest mode at the case precision; python/attnfuzz/reference.py backward() computes the
 * same rules with numpy.
 *
 * Shapes per (batch b, key/value head g): k [Sk x D], v [Sk x Dv] and the accumulators
 * dK [Sk x D], dV [Sk x Dv]; per query head h of the group: q [Sq x D], dO [Sq x Dv]; per
 * block of R query rows (R * Sk <= 128K): scores, weights W, Pd, dP, dS [R x Sk], dQ [R x D].
 *
 * Passes per row block:
 *   1. S = Q K^T, scale, softcap (its input s0 kept), additive mask, set masks: the
 *      forward's scores
 *   2. W = softmax(S): NaN on the live keys of a row with a NaN score, 0 on masked keys and
 *      on fully masked rows, exp below 2^-1022 flushed to 0 (as the forward); Pd = W under
 *      dropout (kept: W / (1 - p), dropped: exactly 0)
 *   3. dV += Pd^T dO                                   over the terms with Pd != 0
 *   4. dP = dO V^T, times keep / (1 - p) under dropout (dropped: exactly 0)
 *   5. delta = sum_j W dP, dS = W (dP - delta)          over the keys with W != 0 (else 0);
 *      dmask += dS over the mask's broadcast dims; softcap: dS *= 1 - tanh^2(s0 / c)
 *   6. dQ = scale dS K, dK += scale dS^T Q             over the terms with W != 0
 * "Over the terms" is rule 5's: a product with a zero weight gives nothing even where its
 * other factor is NaN or Inf (0 * NaN counts as 0). As in the forward, the products run on
 * operands whose non-finite rows are zeroed, and those rows are added back for the terms of
 * nonzero weight only. GQA: dK and dV accumulate over the group's query heads.
 *
 * Honest mode: the same passes with the explicit backward's roundings (explicit.c): fp32
 * products of dtype inputs (TF32 where the case allows it), P as the forward saved it (in
 * the dtype), dP and dS in fp32, the scale where the case places it, the gradients rounded
 * to the dtype (dmask to the mask's). With sens,
 * it also bounds how far any implementation at the case precision may land from the exact
 * gradients, first order in every rounding (the names are per row i, key j):
 *   d_ij   the score's error bound (the forward's: inputs, fp32 accumulation, softcap)
 *   W*_ij  how far a weight may move: af_sens_weights' normalized bound, or for a kernel that
 *          recomputes P from the forward's log-sum-exp L, P_ij (e^(d_ij + e_L) - 1) with
 *          e_L = sum_j P_ij d_ij + (2 |L| + sqrt(Sk)) u32, whichever is larger
 *   a_ij   |dO_i| . |v_j| (times keep / (1 - p)): dP's absolute size
 *   EdP    (sqrt(Dv) u32 + u + u_tf32) a_ij + u |dP_ij|            (u: the dtype's unit roundoff)
 *   Edel   sum_j W*_ij |dP_ij| + P_ij (EdP_ij + (u + sqrt(Sk) u32) a_ij)   (the last term for a
 *          kernel that takes delta from the output rounded to the dtype)
 *   EdS    W*_ij |dP_ij - delta_i| + P_ij (EdP_ij + Edel_i) + 2 u32 |dS_ij|, through the softcap
 *          (1 - t^2) EdS + |dS| min(1, d0_ij / c)
 *   dQ:    |scale| (EdS + c |dS|) |K| + u |dQ|,   dK: |scale| (EdS + c |dS|)^T |Q| + u |dK|
 *   dV:    (W*d + c' Pd)^T |dO| + u |dV|          dmask: sum of EdS + 4 u32 |dS|, + u_mask |dmask|
 * with c, c' the rounding of dS (or P) and the inputs plus fp32 accumulation over the sum.
 * It flags as unstable: forward rows the forward's honest run flags (fp32 overflow of Q.K^T,
 * Inf meeting a value that may round to 0), fp32 overflow of the products' partial sums, and
 * a non-finite dO, q or k meeting a weight that may round to 0. */
#include "ref.h"
#include "ref_honest.h"

#include <math.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/rng.h"
#include "vmath.h"

enum { WS_K, WS_KZ, WS_KSAVED, WS_KBAD, WS_V, WS_VSAVED, WS_VBAD, WS_DK, WS_DV, WS_KNORM, WS_Q, WS_QZ, WS_QSAVED,
       WS_QBAD, WS_DO, WS_DOZ, WS_DOSAVED, WS_DOBAD, WS_QNORM, WS_S, WS_SPRE, WS_PD, WS_DP, WS_A, WS_DQ, WS_ADD,
       WS_LIVE, WS_KEEP, WS_ROWST, WS_RISKY, WS_GSQ, WS_GSKV, WS_UNST, WS_FA, WS_FB, WS_FC, WS_ABSBUF, WS_DL, WS_D0,
       WS_WSTAR, WS_E, WS_ABSALL, WS_XS, WS_XW, WS_DMASK, WS_GSM, WS_DMA, WS_DSR, WS_COUNT };
_Static_assert(WS_COUNT <= AF_SCRATCH_SLOTS, "scratch slots");

#define AF_RG_BLOCK_ELEMS 131072u

/* per row of a block */
enum { AF_RG_LIVE, AF_RG_DEAD, AF_RG_NAN };

typedef struct af_rg {
    const af_case_tensors *in;
    const af_case *c;
    const af_ref_grad_opts *o;
    double *const *grads;
    size_t B, Hq, Hkv, Sq, Sk, D, Dv, group, R;
    bool honest, tf32, sens, extra, leaks, swaps;
    double scale, p, inv_keep;
    uint64_t thr;
    af_dtype dt;
    double u, utf, u32; /* dtype, TF32 (0 without), fp32 unit roundoffs */
    double ukeep;       /* dropout's 1 / (1 - p) from p in fp32: its relative error (0 without dropout) */
    double ovf;         /* values from here on round to Inf in the dtype */
    /* per (b, g) */
    double *k, *kz, *ksaved, *v, *vsaved, *dk, *dv;
    uint32_t *kbad, *vbad;
    size_t nkbad, nvbad;
    double *knorm; /* [Sk x 4]: max|k_j|, max|v_j|, |v_j|_1 (finite parts), 1 if v_j is not finite */
    bool head_risky, dk_leak_all;
    double kmax, kmin;
    bool k_tinf, k_nonfinite;
    uint8_t *dk_unst, *dv_unst; /* [Sk] */
    /* per h */
    double *q, *qz, *qsaved, *dO, *doz, *dosaved;
    uint32_t *qbad, *dobad;
    size_t nqbad, ndobad;
    double *qnorm; /* [Sq x 4]: max|q_i|, max|dO_i|, |dO_i|_1 (finite parts), 1 if dO_i is not finite */
    /* per block */
    double *S, *spre, *Pd, *dP, *dq, *xs, *xw;
    float *add;
    uint8_t *live, *keep, *rowst;
    /* honest */
    float *fa, *fb, *fc;
    size_t fbig;
    double *dl, *d0, *wstar, *A, *E, *absbuf, *absk, *absq, *absv, *absdo, *sdk, *sdv;
    double *dsr, *dsk; /* sum |dS| per row of a block [R], per key of a head [Sk] */
    size_t big;
    uint8_t *risky;
    double c_in, h_abs; /* the forward's: a scaled input's rounding near the subnormals */
    double h_st;        /* a value an fp32 pass forms: near 0, off by up to the smallest normal (flushed) */
    /* row scales: dQ's of a block [R], dK's and dV's of a head [Sk each] */
    double *gsq, *gsk, *gsv; /* gsk: without |scale| (pscale[1]) */
    /* the mask's gradient and its row scales' work [B' Hq' Sq' Sk'] */
    double *dmask, *gsm;
    double *dma; /* per dmask element: the sum of its dS terms' magnitudes */
    size_t mne[4], mnb[4];
} af_rg;

size_t af_ref_grad_rows(const af_case *c, int g) {
    size_t ne[4];
    af_case_grad_shape(c, g, ne);
    return ne[0] * ne[1] * ne[2];
}

/* --- products ------------------------------------------------------------------------ */

/* C = op(A) op(B) (+ C): mode 0 A[M x K] B[K x N], 1 A[M x K] B[N x K]^T, 2 A[K x M]^T B[K x N].
 * In float64, or (honest) in fp32 from operands exact in f32, TF32-rounded when the case
 * allows it, as the explicit backward's products. */
static void af_rg_gemm(af_rg *g, int mode, size_t M, size_t N, size_t K, const double *A, const double *B, double *C,
                       int accumulate) {
    if (!g->honest) {
        if (mode == 0) af_gemm_nn_f64(M, N, K, A, K, B, N, C, N, accumulate);
        if (mode == 1) af_gemm_nt_f64(M, N, K, A, K, B, K, C, N, accumulate);
        if (mode == 2) af_gemm_tn_f64(M, N, K, A, M, B, N, C, N, accumulate);
        return;
    }
    AF_ASSERT(M * K <= g->fbig && N * K <= g->fbig && M * N <= g->fbig);
    af_ref_to_f32(A, g->fa, M * K);
    af_ref_to_f32(B, g->fb, N * K);
    if (g->tf32) {
        af_round_tf32_array(g->fa, M * K);
        af_round_tf32_array(g->fb, N * K);
    }
    if (accumulate) af_ref_to_f32(C, g->fc, M * N);
    if (mode == 0) af_gemm_nn_f32(M, N, K, g->fa, K, g->fb, N, g->fc, N, accumulate);
    if (mode == 1) af_gemm_nt_f32(M, N, K, g->fa, K, g->fb, K, g->fc, N, accumulate);
    if (mode == 2) af_gemm_tn_f32(M, N, K, g->fa, M, g->fb, N, g->fc, N, accumulate);
    for (size_t e = 0; e < M * N; e++) C[e] = (double)g->fc[e];
}

/* x rounded where the explicit implementation rounds: fp32, or the case dtype */
static inline double af_rg_r32(const af_rg *g, double x) { return g->honest ? af_r32(x) : x; }
static inline double af_rg_rdt(const af_rg *g, double x) { return g->honest ? af_rdt(x, g->dt) : x; }
static inline double af_rg_fabs(double x) { return isfinite(x) ? fabs(x) : 0.0; }

/* max|x|, |x|_1 over the finite entries of each of the S rows of x [S x n], and whether
 * the row holds a non-finite one: out[s * 4 + col .. col + 2] */
static void af_rg_norms(const double *x, size_t S, size_t n, double *out, int col) {
    for (size_t s = 0; s < S; s++) {
        double mx = 0.0, l1 = 0.0, bad = 0.0;
        for (size_t d = 0; d < n; d++) {
            double a = x[s * n + d];
            if (!isfinite(a)) {
                bad = 1.0;
                continue;
            }
            a = fabs(a);
            mx = a > mx ? a : mx;
            l1 += a;
        }
        out[s * 4 + (size_t)col] = mx;
        if (col == 1) out[s * 4 + 2] = l1, out[s * 4 + 3] = bad;
    }
}

/* |x| with the non-finite entries as 0 */
static void af_rg_abs(const double *x, size_t n, double *out) {
    for (size_t e = 0; e < n; e++) out[e] = af_rg_fabs(x[e]);
}

/* The factor of the scale left for dQ (q true) or dK after their products: in float64 the
 * whole scale (dS is unscaled); in the explicit graph what its placement puts on the other
 * input (the scaled input's own product already carries it). */
static double af_rg_factor(const af_rg *g, bool q) {
    if (!g->honest) return g->scale;
    double f = sqrt(fabs(g->scale));
    switch (g->c->placement) {
    case AF_PLACE_SCORES: return 1.0;
    case AF_PLACE_Q: return q ? g->scale : 1.0;
    case AF_PLACE_K: return q ? 1.0 : g->scale;
    case AF_PLACE_SQRT_QK: return q ? f : (g->scale < 0 ? -f : f);
    case AF_PLACE_COUNT: break;
    }
    return 1.0;
}

/* A gradient from its accumulated product: times the factor, rounded as the explicit graph
 * rounds (the product in the dtype, then the scaled result). */
static double af_rg_finish(const af_rg *g, double x, double f) {
    if (!g->honest) return x * f;
    x = af_rdt(x, g->dt);
    return f == 1.0 ? x : af_rdt(x * f, g->dt);
}

/* The rounding af_rg_finish adds to x: dV's once; dQ's and dK's twice, the product then a
 * factor after it, which any placement of the scale may make up to max(1, |scale|) (so that
 * two runs under different placements, the relation placement, are judged alike). */
static double af_rg_finish_sens(const af_rg *g, double x, bool scaled) {
    double f = fabs(g->scale) > 1.0 ? fabs(g->scale) : 1.0;
    return scaled ? 2.0 * g->u * af_rg_fabs(x) + (1.0 + f) * g->h_st : g->u * af_rg_fabs(x) + g->h_st;
}

/* --- the mask's gradient --------------------------------------------------------------- */

static size_t af_rg_mask_index(const af_rg *g, size_t b, size_t h, size_t i, size_t j) {
    return (g->mne[0] > 1 ? b : 0) * g->mnb[0] + (g->mne[1] > 1 ? h : 0) * g->mnb[1] +
           (g->mne[2] > 1 ? i : 0) * g->mnb[2] + (g->mne[3] > 1 ? j : 0) * g->mnb[3];
}

/* --- per key/value head and per query head ------------------------------------------- */

static void af_rg_kv(af_rg *g, size_t b, size_t kvh) {
    const af_case *c = g->c;
    const size_t Sk = g->Sk, D = g->D, Dv = g->Dv;
    af_gather_f64(&g->in->kv, b, kvh, g->k, D);
    af_gather_f64(&g->in->vv, b, kvh, g->v, Dv);
    af_rg_norms(g->k, Sk, D, g->knorm, 0);
    af_rg_norms(g->v, Sk, Dv, g->knorm, 1);
    g->head_risky = false;
    g->dk_leak_all = false;
    g->kmax = af_ref_maxabs(g->k, Sk * D); /* the forward's flags, on the unscaled K */
    g->kmin = af_ref_min_abs(g->k, Sk * D);
    g->k_tinf = g->tf32 && af_ref_tf32_overflows(g->k, Sk * D);
    g->k_nonfinite = af_ref_has_nonfinite(g->k, Sk * D);
    if (g->sens) { /* the unscaled inputs: the scale is a factor of the bounds */
        af_rg_abs(g->k, Sk * D, g->absk);
        af_rg_abs(g->v, Sk * Dv, g->absv);
        memset(g->sdk, 0, Sk * D * sizeof *g->sdk);
        memset(g->sdv, 0, Sk * Dv * sizeof *g->sdv);
        memset(g->dsk, 0, Sk * sizeof *g->dsk);
    }
    if (g->honest) {
        double f = sqrt(fabs(g->scale)) * (g->scale < 0 ? -1.0 : 1.0);
        if (c->placement == AF_PLACE_K) af_ref_scale_rows(g->k, Sk * D, g->scale, g->dt);
        if (c->placement == AF_PLACE_SQRT_QK) af_ref_scale_rows(g->k, Sk * D, f, g->dt);
        /* an online-softmax kernel's P V partial sums reach Sk max|V| / (1 - p) (ref.c) */
        double vmax = af_ref_maxabs(g->v, Sk * Dv);
        if (vmax * (double)Sk / (g->p > 0.0 && g->p < 1.0 ? 1.0 - g->p : 1.0) > AF_F32_RISK ||
            (g->tf32 && af_ref_tf32_overflows(g->v, Sk * Dv)))
            g->head_risky = true;
    }
    if (g->dk_unst) memset(g->dk_unst, 0, Sk);
    if (g->dv_unst) memset(g->dv_unst, 0, Sk);
    memcpy(g->kz, g->k, Sk * D * sizeof *g->k);
    g->nkbad = af_split_nonfinite_f64(g->kz, Sk, D, g->kbad, g->ksaved);
    g->nvbad = af_split_nonfinite_f64(g->v, Sk, Dv, g->vbad, g->vsaved);
    memset(g->dk, 0, Sk * D * sizeof *g->dk);
    memset(g->dv, 0, Sk * Dv * sizeof *g->dv);
}

/* Whether the score rows of query head h (q gathered, not yet scaled) may be beyond the
 * case precision, by ref.c's rules on the unscaled inputs: fp32 overflow of Q.K^T
 * (qk_risk, decided per row by af_honest_score_bounds), TF32 rounding an input to Inf, Inf
 * meeting a value that may round to 0, a scale above 1 rounding a large input to Inf. */
static void af_rg_score_risk(af_rg *g, bool *qk_risk, bool *qk_inf) {
    const size_t Sq = g->Sq, D = g->D;
    const double scale = g->scale, ovf = af_dtype_overflow(g->dt);
    double sub = g->tf32 && 0x1p-136 > af_dtype_min_subnormal(g->dt) ? 0x1p-136 : af_dtype_min_subnormal(g->dt);
    double qmax = af_ref_maxabs(g->q, Sq * D);
    *qk_risk = qmax * g->kmax * (double)D * (fabs(scale) > 1.0 ? fabs(scale) : 1.0) > AF_F32_RISK;
    bool inf = g->k_tinf || (g->tf32 && af_ref_tf32_overflows(g->q, Sq * D));
    if (af_ref_has_nonfinite(g->q, Sq * D) || g->k_nonfinite) {
        double zero = 2.0 * sub / (fabs(scale) < 1.0 ? sqrt(fabs(scale)) + 1e-300 : 1.0);
        if (af_ref_min_abs(g->q, Sq * D) < zero || g->kmin < zero) inf = true;
    }
    if (fabs(scale) > 1.0 && (qmax > 0.5 * ovf / fabs(scale) || g->kmax > 0.5 * ovf / fabs(scale))) inf = true;
    *qk_inf = inf;
}

/* Gathers q and dO of query head h (q scaled where the explicit graph places the scale),
 * their row norms and split copies; the score rows' flags (honest) in qk_risk, qk_inf. */
static void af_rg_q(af_rg *g, size_t b, size_t h, bool *qk_risk, bool *qk_inf) {
    const af_case *c = g->c;
    const size_t Sq = g->Sq, D = g->D, Dv = g->Dv;
    af_gather_f64(&g->in->qv, b, h, g->q, D);
    af_gather_f64(&g->in->dov, b, h, g->dO, Dv);
    *qk_risk = *qk_inf = false;
    if (g->honest) af_rg_score_risk(g, qk_risk, qk_inf);
    af_rg_norms(g->q, Sq, D, g->qnorm, 0);
    af_rg_norms(g->dO, Sq, Dv, g->qnorm, 1);
    if (g->sens) {
        af_rg_abs(g->q, Sq * D, g->absq);
        af_rg_abs(g->dO, Sq * Dv, g->absdo);
    }
    if (g->honest) {
        if (c->placement == AF_PLACE_Q) af_ref_scale_rows(g->q, Sq * D, g->scale, g->dt);
        if (c->placement == AF_PLACE_SQRT_QK) af_ref_scale_rows(g->q, Sq * D, sqrt(fabs(g->scale)), g->dt);
    }
    memcpy(g->qz, g->q, Sq * D * sizeof *g->q);
    g->nqbad = af_split_nonfinite_f64(g->qz, Sq, D, g->qbad, g->qsaved);
    memcpy(g->doz, g->dO, Sq * Dv * sizeof *g->dO);
    g->ndobad = af_split_nonfinite_f64(g->doz, Sq, Dv, g->dobad, g->dosaved);
}

/* --- passes 1 and 2 ------------------------------------------------------------------- */

/* Pass 1 for rows r0 .. r0+rn-1 of query head h of key/value head kvh: S holds the masked
 * scores (-inf at keys a set mask removes), spre the softcap's inputs, xs (seeded bugs
 * that bring keys back) the scores before the set masks; with sens, dl the scores' error
 * bounds and d0 those before the softcap. */
static void af_rg_scores(af_rg *g, size_t b, size_t h, size_t kvh, size_t r0, size_t rn, bool qk_risk) {
    const af_case *c = g->c;
    const size_t Sk = g->Sk;
    af_rg_gemm(g, 1, rn, Sk, g->D, g->q + r0 * g->D, g->k, g->S, 0);
    if (g->honest && (qk_risk || g->sens))
        af_honest_score_bounds(&g->in->qv, &g->in->kv, b, h, kvh, r0, rn, Sk, g->D, g->scale, g->c_in, g->h_abs,
                               qk_risk, g->absbuf, g->big, g->risky, g->sens ? g->dl : NULL);
    if (g->sens) memcpy(g->d0, g->dl, rn * Sk * sizeof *g->d0);
    for (size_t r = 0; r < rn; r++) {
        double *s = g->S + r * Sk;
        uint8_t *lv = g->live + r * Sk;
        if (af_mask_row(g->in, (uint32_t)b, (uint32_t)h, (uint32_t)(r0 + r), 0, (uint32_t)Sk, g->add, lv))
            memset(lv, 1, Sk);
        /* honest: a live score that rounding turned into -inf (an f32 score + mask past
         * f32's range), as the forward's honest run flags it */
        bool rounded_out = false;
        for (size_t j = 0; j < Sk; j++) {
            double x = s[j];
            if (!g->honest) {
                x *= g->scale;
            } else {
                double in = x;
                x = af_r32(x);
                if (c->placement == AF_PLACE_SCORES) x = af_r32(x * (double)(float)g->scale);
                rounded_out |= lv[j] && isfinite(in) && x == -HUGE_VAL;
            }
            double pre = x;
            g->spre[r * Sk + j] = x;
            if (c->softcap > 0.0) x = af_rg_r32(g, c->softcap * tanh(x / c->softcap));
            if (c->amask.present) {
                bool finite_in = isfinite(x) && isfinite((double)g->add[j]);
                x = af_rg_r32(g, x + (double)g->add[j]);
                rounded_out |= g->honest && lv[j] && finite_in && x == -HUGE_VAL;
            }
            if (g->xs) g->xs[r * Sk + j] = x;
            s[j] = lv[j] ? x : -HUGE_VAL;
            if (g->sens) { /* through the softcap, plus the rounding of the score and the mask's addition */
                double *dl = g->dl + r * Sk + j;
                double dc = c->softcap > 0.0 ? af_sens_cap(*dl, pre, c->softcap) : *dl;
                *dl = lv[j] && isfinite(x) ? dc + 2.0 * fabs(x) * g->u32 : 0.0;
            }
        }
        /* every live key rounded away: the precision cannot compute this row (its forward is
         * unstable), nor its gradients */
        bool all_out = rounded_out;
        for (size_t j = 0; j < Sk && all_out; j++) all_out = !(lv[j] && s[j] > -HUGE_VAL);
        if (all_out) g->risky[r] = 1;
    }
}

/* The keys a seeded bug brings back in row i (mutants.c): set masks the buggy backward
 * drops (causal, or key padding up to the end of the last 16-key tile). */
static void af_rg_extra_keys(const af_rg *g, size_t b, size_t h, size_t i, const uint8_t *lv, uint8_t *extra) {
    const af_case *c = g->c;
    const size_t Sk = g->Sk;
    af_case bent = *c;
    af_case_tensors bt = *g->in;
    bt.c = &bent;
    if (g->o->bug == AF_GRAD_BUG_CAUSAL_MISSING_IN_DS) bent.causal = false;
    if (g->o->bug == AF_GRAD_BUG_TAIL_TILE_PAST_SK) bent.key_padding = false;
    if (af_mask_row(&bt, (uint32_t)b, (uint32_t)h, (uint32_t)i, 0, (uint32_t)Sk, NULL, extra)) memset(extra, 1, Sk);
    size_t valid = af_case_valid_keys(c, (uint32_t)b), tail = (valid + 15) / 16 * 16;
    for (size_t j = 0; j < Sk; j++) {
        if (g->o->bug == AF_GRAD_BUG_TAIL_TILE_PAST_SK && !(j >= valid && j < tail)) extra[j] = 0;
        if (lv[j]) extra[j] = 0;
    }
}

/* Pass 2 for row r (query row i) in place: the weights replace the scores (rowst: live,
 * dead or NaN), Pd their dropout; a seeded bug's brought-back keys get their P' in xw;
 * with sens, W* (wstar) and the row's instability. */
static void af_rg_weights(af_rg *g, size_t b, size_t h, size_t r, size_t i) {
    const size_t Sk = g->Sk;
    double *s = g->S + r * Sk, *pd = g->Pd + r * Sk;
    const uint8_t *lv = g->live + r * Sk;
    int has_nan;
    double m = af_max_f64(s, Sk, &has_nan);
    uint8_t st = AF_RG_LIVE;
    double sum = 0.0;
    if (g->sens) {
        /* the weights' error bounds, from the scores (before they become weights); a
         * non-finite V at a live key whose weight may round to 0 makes the row unstable */
        memcpy(g->wstar + r * Sk, g->dl + r * Sk, Sk * sizeof *g->wstar);
        if (!has_nan && m > -HUGE_VAL &&
            af_sens_weights(s, m, g->wstar + r * Sk, Sk, g->vbad, g->nvbad, 2.0 * g->h_st, -HUGE_VAL)) /* no sink */
            g->risky[r] = 1;
    }
    if (!has_nan && m == -HUGE_VAL) {
        memset(s, 0, Sk * sizeof *s);
        st = AF_RG_DEAD;
    } else if (has_nan) {
        for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? (double)NAN : 0.0;
        st = AF_RG_NAN;
    } else {
        sum = af_exp_sub_sum_f64(s, Sk, m, 1.0);
        if (g->honest) { /* fp32 exponentials and sum, P rounded to the dtype */
            sum = 0.0;
            for (size_t j = 0; j < Sk; j++) {
                s[j] = af_r32(s[j]);
                sum += s[j];
            }
            sum = af_r32(sum);
            for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? af_rdt(s[j] / sum, g->dt) : 0.0;
        } else {
            /* an infinite score makes sum NaN: NaN on every live key, 0 on masked ones */
            for (size_t j = 0; j < Sk; j++) s[j] = lv[j] ? s[j] / sum : 0.0;
        }
        if (g->o->bug == AF_GRAD_BUG_LSE_NAN && m + log(sum) < 0.0) {
            /* the kernel takes the logarithm of a negative log-sum-exp: NaN everywhere */
            for (size_t j = 0; j < Sk; j++) s[j] = (double)NAN;
            st = AF_RG_NAN;
        }
    }
    g->rowst[r] = st;
    if (g->xw) {
        uint8_t *extra = g->keep + r * Sk; /* the row's keep is drawn below */
        af_rg_extra_keys(g, b, h, i, lv, extra);
        for (size_t j = 0; j < Sk; j++)
            g->xw[r * Sk + j] = extra[j] && st == AF_RG_LIVE ? exp(g->xs[r * Sk + j] - m) / sum : 0.0;
    }
    if (g->sens && st == AF_RG_LIVE) {
        /* a kernel that recomputes P = exp(s - L) from the forward's log-sum-exp L: unnormalized */
        double *ws = g->wstar + r * Sk;
        const double *d = g->dl + r * Sk;
        double el = 0.0;
        for (size_t j = 0; j < Sk; j++) el += s[j] * d[j];
        el += (2.0 * fabs(m + log(sum)) + sqrt((double)Sk)) * g->u32;
        for (size_t j = 0; j < Sk; j++) {
            double rec = s[j] * expm1(d[j] + el);
            rec = rec < 1.0 ? rec : 1.0;
            ws[j] = rec > ws[j] ? rec : ws[j];
        }
    } else if (g->sens) {
        memset(g->wstar + r * Sk, 0, Sk * sizeof *g->wstar);
    }
    bool dropout = g->p > 0.0 && g->o->bug != AF_GRAD_BUG_DROPOUT_NOT_REAPPLIED;
    if (dropout) {
        af_dropout_keep_row(g->in, g->thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, g->keep + r * Sk);
        const uint8_t *keep = g->keep + r * Sk;
        for (size_t j = 0; j < Sk; j++) pd[j] = keep[j] && g->p < 1.0 ? af_rg_rdt(g, s[j] * g->inv_keep) : 0.0;
    } else {
        memcpy(pd, s, Sk * sizeof *pd);
    }
    if (g->xw && g->o->bug == AF_GRAD_BUG_TAIL_TILE_PAST_SK) /* past the end: dV too */
        for (size_t j = 0; j < Sk; j++)
            if (g->xw[r * Sk + j] != 0.0) pd[j] = g->xw[r * Sk + j];
}

/* --- passes 4 and 5 ------------------------------------------------------------------- */

/* Passes 4 (dropout) and 5 for row r (query row i) of a block whose dP row holds dO . v:
 * delta, dS in place of dP, dmask, the softcap. A[r] ends holding the bound on |dS| the
 * row scales use (with sens it arrives holding |dO_i| . |v_j|); E[r] (sens) the dS error
 * bound plus the rounding the products add, per unit of |scale|. Returns the bound of
 * sum_j |dS_ij| max|k_j| (dQ's row scale without |scale|). */
static double af_rg_ds_row(af_rg *g, size_t b, size_t h, size_t r, size_t i) {
    const af_case *c = g->c;
    const size_t Sk = g->Sk;
    const double *w = g->S + r * Sk;
    const double *xw = g->xw ? g->xw + r * Sk : NULL;
    double *dp = g->dP + r * Sk, *A = g->A + r * Sk, *E = g->sens ? g->E + r * Sk : NULL;
    const uint8_t *lv = g->live + r * Sk;
    const double *qn = g->qnorm + i * 4;
    const bool dropout = g->p > 0.0 && g->o->bug != AF_GRAD_BUG_DROPOUT_NOT_REAPPLIED;
    const uint8_t *keep = g->keep + r * Sk;
    if (dropout)
        for (size_t j = 0; j < Sk; j++) dp[j] = keep[j] && g->p < 1.0 ? af_rg_r32(g, dp[j] * g->inv_keep) : 0.0;
    /* a_ij >= |dO_i . v_j| (times keep / (1 - p)): from the norms, or the abs product (sens) */
    for (size_t j = 0; j < Sk; j++) {
        const double *kn = g->knorm + j * 4;
        double a1 = qn[2] * kn[1], a2 = qn[1] * kn[2];
        double a = E ? A[j] : a1 < a2 ? a1 : a2;
        A[j] = dropout ? (keep[j] && g->p < 1.0 ? a * g->inv_keep : 0.0) : a;
    }
    double delta = 0.0, asum = 0.0;
    for (size_t j = 0; j < Sk; j++) {
        if (w[j] == 0.0) continue;
        delta = af_rg_r32(g, delta + w[j] * dp[j]);
        if (isfinite(w[j])) asum += w[j] * A[j];
    }
    if (E) {
        const double *ws = g->wstar + r * Sk;
        /* dP: fp32 accumulation, TF32 inputs; an implementation may hold it in the dtype
         * (twice rounded under dropout) */
        const double cdp = sqrt((double)g->Dv) * g->u32 + (dropout ? 2.0 : 1.0) * g->u + 2.0 * g->utf + g->ukeep;
        const double cdel = g->u + sqrt((double)Sk) * g->u32;
        double e_del = g->h_abs * qn[2]; /* O rounded to the dtype: half its smallest quantum per element */
        for (size_t j = 0; j < Sk; j++) {
            double edp = cdp * A[j] + g->u * af_rg_fabs(dp[j]) + g->h_st;
            e_del += ws[j] * af_rg_fabs(dp[j]) + af_rg_fabs(w[j]) * (edp + cdel * A[j]);
            if (A[j] > AF_F32_RISK) g->risky[r] = 1; /* dP's partial sums past fp32 */
        }
        for (size_t j = 0; j < Sk; j++) {
            double edp = cdp * A[j] + g->u * af_rg_fabs(dp[j]) + g->h_st;
            /* the weight's movement and rounding (P is held in the dtype; a live key's weight may
             * round to or from 0), dP's and delta's errors */
            double pr = lv[j] ? g->u * af_rg_fabs(w[j]) + g->h_st : 0.0;
            E[j] = (ws[j] + pr) * af_rg_fabs(dp[j] - delta) + af_rg_fabs(w[j]) * (edp + e_del);
        }
    }
    double *ds = dp; /* dS replaces dP */
    for (size_t j = 0; j < Sk; j++) {
        double x = 0.0;
        if (w[j] != 0.0) {
            x = af_rg_r32(g, w[j] * af_rg_r32(g, dp[j] - delta));
        } else if (xw && xw[j] != 0.0) {
            x = xw[j] * (dp[j] - delta); /* a key a seeded bug brings back */
        }
        ds[j] = x;
        /* |dS_ij| <= W_ij (a_ij + sum_k W_ik a_ik) */
        A[j] = isfinite(w[j]) ? w[j] * (A[j] + asum) : 0.0;
        if (E) E[j] += 2.0 * g->u32 * af_rg_fabs(x);
    }
    if (g->grads[3]) {
        for (size_t j = 0; j < Sk; j++) {
            size_t e = af_rg_mask_index(g, b, h, i, j);
            g->dmask[e] += ds[j];
            g->dma[e] += af_rg_fabs(ds[j]);
            if (g->gsm) g->gsm[e] += A[j];
            if (E && g->o->sens[3]) g->o->sens[3][e] += E[j] + 2.0 * g->u32 * af_rg_fabs(ds[j]);
        }
    }
    if (c->softcap > 0.0 && g->o->bug != AF_GRAD_BUG_SOFTCAP_NO_DERIVATIVE) {
        for (size_t j = 0; j < Sk; j++) {
            /* 1 - tanh^2(x) as 1 / cosh^2(x): exact in relative terms where tanh saturates (1 -
             * t t cancels to 0 in float64 from |x| = 19 on); the explicit graph's fp32 1 - t t */
            double x = g->spre[r * Sk + j] / c->softcap, f;
            if (g->honest) {
                double t = af_r32(tanh(x));
                f = af_r32(1.0 - t * t);
            } else {
                double ch = cosh(x);
                f = 1.0 / (ch * ch);
            }
            if (E) { /* the derivative's own error: |d(1 - t^2)/ds0| <= 0.77 / c, and fp32's 1 - t t */
                double d0 = g->d0[r * Sk + j] / c->softcap;
                E[j] = E[j] * f + af_rg_fabs(ds[j]) * ((d0 < 1.0 ? d0 : 1.0) + 2.0 * g->u32);
            }
            A[j] *= isfinite(f) ? f : 1.0; /* |1 - t^2| <= 1 (a NaN score: none) */
            if (ds[j] != 0.0) ds[j] = af_rg_r32(g, ds[j] * f);
        }
    }
    double gsq = 0.0;
    for (size_t j = 0; j < Sk; j++) gsq += A[j] * g->knorm[j * 4];
    if (E) { /* the products' own rounding: dS and the inputs to the dtype (near the
              * subnormals half a quantum whatever their size), fp32 accumulation */
        double sum_len = (double)(Sk > g->Sq * g->group ? Sk : g->Sq * g->group);
        double cr = g->u + g->utf + g->c_in + sqrt(sum_len) * g->u32; /* c_in: the other input's roundings */
        /* a kernel may round dS scaled (FlashAttention-2's, and the explicit graph with the
         * scale on the scores): its quantum counts up to 1 / |scale| here */
        double hq = g->scale != 0.0 && fabs(g->scale) < 1.0 ? g->h_st / fabs(g->scale) : g->h_st;
        for (size_t j = 0; j < Sk; j++) E[j] += cr * af_rg_fabs(ds[j]) + (lv[j] ? hq : 0.0);
        /* the other input scaled and rounded near the subnormals: half a quantum per term */
        double l1 = 0.0;
        for (size_t j = 0; j < Sk; j++) {
            l1 += af_rg_fabs(ds[j]);
            g->dsk[j] += af_rg_fabs(ds[j]);
        }
        g->dsr[r] = l1;
    }
    if (E) {
        /* an implementation that rounds dS to the dtype for its products (FlashAttention-2's
         * tensor cores) may overflow there: the row is beyond the case precision */
        double f = fabs(g->scale) > 1.0 ? fabs(g->scale) : 1.0; /* a kernel may round dS scaled */
        for (size_t j = 0; j < Sk; j++)
            if ((af_rg_fabs(ds[j]) + E[j]) * f >= g->ovf) g->risky[r] = 1;
    }
    if (g->honest && c->placement == AF_PLACE_SCORES) /* the scale on the scores (fp32) */
        for (size_t j = 0; j < Sk; j++) ds[j] = af_r32(ds[j] * (double)(float)g->scale);
    return gsq;
}

/* --- leaks ---------------------------------------------------------------------------- */

/* Where an IEEE implementation meets 0 * Inf through a term of weight 0 (rows r0 .. r0+rn-1
 * of head h): dV where a zero Pd meets a non-finite dO; every dQ element of a row (and its
 * dmask row, and all of dK) where a zero weight meets a non-finite dP (V's row or dO's
 * row not finite) or a non-finite delta (dS_ij = P_ij (dP_ij - delta_i): a non-finite V
 * row at a key of nonzero weight, or a NaN row); dQ where a zero weight meets a
 * non-finite K, dK a non-finite Q. A NaN row (a NaN score at a live key) has NaN weights
 * at its masked keys too in an IEEE softmax (its max is NaN): their dK and dV rows. */
static void af_rg_leaks(af_rg *g, size_t b, size_t h, size_t kvh, size_t r0, size_t rn) {
    const size_t Sk = g->Sk, D = g->D, Dv = g->Dv;
    uint8_t *const *lk = g->o->leak;
    for (size_t r = 0; r < rn; r++) {
        size_t i = r0 + r;
        const double *w = g->S + r * Sk, *pd = g->Pd + r * Sk;
        const double *qn = g->qnorm + i * 4;
        bool do_bad = qn[3] != 0.0, q_bad = false;
        for (size_t d = 0; d < D; d++) q_bad |= !isfinite(g->q[i * D + d]);
        bool rowleak = false, row_nan = false, delta_bad = do_bad;
        for (size_t j = 0; j < Sk; j++) {
            row_nan |= isnan(w[j]);
            delta_bad |= w[j] != 0.0 && g->knorm[j * 4 + 3] != 0.0;
        }
        delta_bad |= row_nan;
        uint8_t *lq = lk[0] && g->grads[0] ? lk[0] + ((b * g->Hq + h) * g->Sq + i) * D : NULL;
        for (size_t j = 0; j < Sk; j++) {
            const double *kn = g->knorm + j * 4;
            if (do_bad && pd[j] == 0.0 && lk[2] && g->grads[2])
                for (size_t d = 0; d < Dv; d++)
                    if (!isfinite(g->dO[i * Dv + d])) lk[2][((b * g->Hkv + kvh) * Sk + j) * Dv + d] = 1;
            if (w[j] != 0.0) continue;
            rowleak |= delta_bad || kn[3] != 0.0;
            if (row_nan && lk[2] && g->grads[2]) memset(lk[2] + ((b * g->Hkv + kvh) * Sk + j) * Dv, 1, Dv);
            if (row_nan && lk[1] && g->grads[1]) memset(lk[1] + ((b * g->Hkv + kvh) * Sk + j) * D, 1, D);
            if (lq && g->nkbad)
                for (size_t d = 0; d < D; d++)
                    if (!isfinite(g->k[j * D + d])) lq[d] = 1;
            if (q_bad && lk[1] && g->grads[1])
                for (size_t d = 0; d < D; d++)
                    if (!isfinite(g->q[i * D + d])) lk[1][((b * g->Hkv + kvh) * Sk + j) * D + d] = 1;
        }
        if (!rowleak) continue;
        if (lq) memset(lq, 1, D);
        g->dk_leak_all = true;
        if (lk[3] && g->grads[3])
            for (size_t j = 0; j < Sk; j++) lk[3][af_rg_mask_index(g, b, h, i, j)] = 1;
    }
}

/* --- a block of query rows ------------------------------------------------------------- */

/* Whether the weight w of a live key, off by up to ws, may be 0 in one implementation and
 * not in another: formed in fp32 (flushed below its normals) and held in the dtype. A
 * weight 0 that cannot move (a score of -inf) is 0 in every one. */
static bool af_rg_tiny(const af_rg *g, bool live, double w, double ws) {
    return live && isfinite(w) && (w != 0.0 || ws > 0.0) && w - ws <= 2.0 * g->h_st;
}

/* A non-finite q (dK) or dO row (dV, and delta = sum_j P_ij dP_ij: the whole row of dQ and
 * dmask, and every key of the head through dS) meeting a weight that may round to 0 */
static void af_rg_tiny_flags(af_rg *g, size_t b, size_t h, size_t r0, size_t rn) {
    const size_t Sq = g->Sq, Sk = g->Sk, D = g->D;
    double *const *grads = g->grads;
    const af_ref_grad_opts *o = g->o;
    for (size_t r = 0; r < rn; r++) {
        size_t i = r0 + r;
        bool qb = false, db = g->qnorm[i * 4 + 3] != 0.0;
        for (size_t d = 0; d < D; d++) qb |= !isfinite(g->q[i * D + d]);
        if (!qb && !db) continue;
        for (size_t j = 0; j < Sk; j++) {
            if (!af_rg_tiny(g, g->live[r * Sk + j], g->S[r * Sk + j], g->wstar[r * Sk + j])) continue;
            if (qb) g->dk_unst[j] = 1;
            if (!db) continue;
            g->dv_unst[j] = 1;
            /* delta: sum_j P dP with a non-finite dP, or not, by the rounding of P */
            g->head_risky = true;
            if (grads[0] && o->unstable[0]) memset(o->unstable[0] + ((b * g->Hq + h) * Sq + i) * D, 1, D);
            if (grads[3] && o->unstable[3])
                for (size_t jj = 0; jj < Sk; jj++) o->unstable[3][af_rg_mask_index(g, b, h, i, jj)] = 1;
        }
    }
}

/* Where the reference is NaN or Inf through a non-finite dP (rows r0 .. r0+rn-1 of head h):
 * a non-finite dO row, or a non-finite V row at a key of nonzero weight, makes dP_ij
 * non-finite; delta as sum_j P_ij dP_ij or as rowsum(dO O) (equal in exact arithmetic)
 * then gives Inf - Inf = NaN or stays Inf: the row of dQ and dmask, and dK's rows of the
 * keys of nonzero weight, may hold either class. */
static void af_rg_nfswap(af_rg *g, size_t b, size_t h, size_t kvh, size_t r0, size_t rn) {
    const size_t Sk = g->Sk, D = g->D;
    uint8_t *const *sw = g->o->nfswap;
    for (size_t r = 0; r < rn; r++) {
        size_t i = r0 + r;
        const double *w = g->S + r * Sk;
        bool bad = g->qnorm[i * 4 + 3] != 0.0;
        for (size_t j = 0; j < Sk && !bad; j++) bad = w[j] != 0.0 && g->knorm[j * 4 + 3] != 0.0;
        if (!bad) continue;
        if (sw[0] && g->grads[0]) memset(sw[0] + ((b * g->Hq + h) * g->Sq + i) * D, 1, D);
        for (size_t j = 0; j < Sk; j++) {
            if (sw[3] && g->grads[3]) sw[3][af_rg_mask_index(g, b, h, i, j)] = 1;
            if (sw[1] && g->grads[1] && w[j] != 0.0) memset(sw[1] + ((b * g->Hkv + kvh) * Sk + j) * D, 1, D);
        }
    }
}

static void af_rg_block(af_rg *g, size_t b, size_t h, size_t kvh, size_t r0, size_t rn, bool qk_risk, bool qk_inf,
                        bool counts) {
    const size_t Sq = g->Sq, Sk = g->Sk, D = g->D, Dv = g->Dv;
    double *const *grads = g->grads;
    const af_ref_grad_opts *o = g->o;
    for (size_t r = 0; r < rn; r++) g->risky[r] = qk_inf;
    /* 1. scores; 2. weights and dropout */
    af_rg_scores(g, b, h, kvh, r0, rn, qk_risk);
    for (size_t r = 0; r < rn; r++) af_rg_weights(g, b, h, r, r0 + r);
    if (g->leaks) af_rg_leaks(g, b, h, kvh, r0, rn);
    if (g->swaps) af_rg_nfswap(g, b, h, kvh, r0, rn);
    for (size_t r = 0; r < rn && g->honest; r++) {
        /* an output that may overflow the dtype (sum_j Pd_ij max|v_j| bounds it) gives a
         * kernel taking delta as rowsum(dO O) Inf there */
        double ob = 0.0;
        for (size_t j = 0; j < Sk; j++) ob += af_rg_fabs(g->Pd[r * Sk + j]) * g->knorm[j * 4 + 1];
        if (ob >= 0.5 * g->ovf) g->risky[r] = 1;
        if (g->risky[r]) g->head_risky = true; /* an unstable forward row spreads to every key of the head */
    }
    if (g->sens) af_rg_tiny_flags(g, b, h, r0, rn);
    /* 3. dV += Pd^T dO over the terms with Pd != 0; its row scale sum_i Pd_ij max|dO_i| */
    if (grads[2] && counts) {
        af_rg_gemm(g, 2, Sk, Dv, rn, g->Pd, g->doz + r0 * Dv, g->dv, 1);
        af_add_back_rows_f64(r0, rn, Sk, g->Pd, g->Pd, g->dobad, g->ndobad, g->dosaved, Dv, g->dv);
        for (size_t r = 0; r < rn; r++)
            for (size_t j = 0; j < Sk; j++)
                g->gsv[j] += af_rg_fabs(g->Pd[r * Sk + j]) * g->qnorm[(r0 + r) * 4 + 1];
        if (g->sens) {
            /* the weights' movement (under dropout), P's rounding (twice with dropout: P,
             * then P / (1 - p); a live key's weight may round to or from 0), TF32 on both
             * inputs and fp32 accumulation; E is free until pass 5 */
            const double cv =
                (g->p > 0.0 ? 2.0 : 1.0) * g->u + 2.0 * g->utf + g->ukeep + sqrt((double)(Sq * g->group)) * g->u32;
            for (size_t r = 0; r < rn; r++)
                for (size_t j = 0; j < Sk; j++) {
                    double kp = g->p > 0.0 ? (g->keep[r * Sk + j] && g->p < 1.0 ? g->inv_keep : 0.0) : 1.0;
                    double hp = g->live[r * Sk + j] && kp != 0.0 ? (g->p > 0.0 ? kp + 1.0 : 1.0) * g->h_st : 0.0;
                    g->E[r * Sk + j] = kp * g->wstar[r * Sk + j] + cv * af_rg_fabs(g->Pd[r * Sk + j]) + hp;
                }
            af_gemm_tn_f64(Sk, Dv, rn, g->E, Sk, g->absdo + r0 * Dv, Dv, g->sdv, Dv, 1);
        }
    }
    if (!grads[0] && !grads[1] && !grads[3]) return;
    /* 4. dP = dO V^T, the non-finite V rows recomputed where the weight is not 0 */
    af_rg_gemm(g, 1, rn, Sk, Dv, g->dO + r0 * Dv, g->v, g->dP, 0);
    for (size_t n = 0; n < g->nvbad; n++) {
        size_t j = g->vbad[n];
        for (size_t r = 0; r < rn; r++) {
            if (g->S[r * Sk + j] == 0.0 && !(g->xw && g->xw[r * Sk + j] != 0.0)) continue;
            double acc = 0.0;
            for (size_t d = 0; d < Dv; d++) acc += g->dO[(r0 + r) * Dv + d] * g->vsaved[n * Dv + d];
            g->dP[r * Sk + j] = acc;
        }
    }
    if (g->sens) /* |dO| |V|^T: dP's absolute size */
        af_gemm_nt_f64(rn, Sk, Dv, g->absdo + r0 * Dv, Dv, g->absv, Dv, g->A, Sk, 0);
    /* 5. dropout, delta, dS, dmask, softcap */
    double *gsq = g->gsq;
    for (size_t r = 0; r < rn; r++) {
        double un = af_rg_ds_row(g, b, h, r, r0 + r);
        gsq[r] = fabs(g->scale) * un;
        if (o->pscale[0] && grads[0]) o->pscale[0][(b * g->Hq + h) * Sq + r0 + r] = un;
    }
    for (size_t r = 0; r < rn && g->honest; r++)
        if (g->risky[r]) g->head_risky = true; /* pass 5's: dP or dS past fp32 or the dtype */
    /* the keys a seeded bug brought back count as terms of nonzero weight from here on */
    if (g->xw)
        for (size_t e = 0; e < rn * Sk; e++)
            if (g->S[e] == 0.0 && g->xw[e] != 0.0) g->S[e] = g->xw[e];
    /* dK's row scale |scale| sum_i |dS_ij| max|q_i| (A holds the |dS| bound) */
    if (grads[1] && counts)
        for (size_t r = 0; r < rn; r++)
            for (size_t j = 0; j < Sk; j++)
                g->gsk[j] += g->A[r * Sk + j] * g->qnorm[(r0 + r) * 4];
    /* 6. dQ = dS K over the terms with W != 0 */
    if (grads[0]) {
        af_rg_gemm(g, 0, rn, D, Sk, g->dP, g->kz, g->dq, 0);
        af_add_back_keys_f64(rn, Sk, g->S, g->dP, g->kbad, g->nkbad, g->ksaved, D, g->dq);
        double f = o->bug == AF_GRAD_BUG_DQ_NO_SCALE ? 1.0 : af_rg_factor(g, true);
        for (size_t r = 0; r < rn; r++) {
            size_t row = (b * g->Hq + h) * Sq + r0 + r;
            double *dst = grads[0] + row * D;
            for (size_t d = 0; d < D; d++) dst[d] = af_rg_finish(g, g->dq[r * D + d], f);
            if (o->gscale[0]) o->gscale[0][row] = gsq[r];
            if (o->unstable[0]) {
                bool u = g->risky[r] || g->head_risky || gsq[r] > AF_F32_RISK;
                for (size_t n = 0; n < g->nkbad && g->sens && !u; n++) { /* a non-finite k meeting a tiny weight */
                    size_t j = g->kbad[n];
                    u = af_rg_tiny(g, g->live[r * Sk + j], g->S[r * Sk + j], g->wstar[r * Sk + j]);
                }
                if (u) memset(o->unstable[0] + row * D, 1, D); /* or set before (af_rg_tiny_flags) */
            }
        }
        if (o->sens[0]) {
            af_gemm_nn_f64(rn, D, Sk, g->E, Sk, g->absk, D, g->dq, D, 0);
            for (size_t r = 0; r < rn; r++) {
                size_t row = (b * g->Hq + h) * Sq + r0 + r;
                for (size_t d = 0; d < D; d++)
                    o->sens[0][row * D + d] = fabs(g->scale) * g->dq[r * D + d] + g->h_abs * (1.0 + fabs(f)) * g->dsr[r] +
                                              af_rg_finish_sens(g, grads[0][row * D + d], true);
            }
        }
    }
    /* dK += dS^T Q over the terms with W != 0 */
    if (grads[1] && counts) {
        af_rg_gemm(g, 2, Sk, D, rn, g->dP, g->qz + r0 * D, g->dk, 1);
        af_add_back_rows_f64(r0, rn, Sk, g->S, g->dP, g->qbad, g->nqbad, g->qsaved, D, g->dk);
        if (g->sens) af_gemm_tn_f64(Sk, D, rn, g->E, Sk, g->absq + r0 * D, D, g->sdk, D, 1);
    }
    /* a forward row's instability spreads to every key of the head, and to dmask's row */
    for (size_t r = 0; r < rn && o->unstable[3] && grads[3]; r++)
        if (g->risky[r] || g->head_risky)
            for (size_t j = 0; j < Sk; j++) o->unstable[3][af_rg_mask_index(g, b, h, r0 + r, j)] = 1;
}

/* --- per key/value head: dK, dV ------------------------------------------------------- */

static void af_rg_kv_finish(af_rg *g, size_t b, size_t kvh) {
    const size_t Sk = g->Sk, D = g->D, Dv = g->Dv;
    double *const *grads = g->grads;
    const af_ref_grad_opts *o = g->o;
    double fk = af_rg_factor(g, false);
    for (size_t j = 0; j < Sk; j++) {
        size_t row = (b * g->Hkv + kvh) * Sk + j;
        if (grads[1]) {
            double *dst = grads[1] + row * D;
            for (size_t d = 0; d < D; d++) dst[d] = af_rg_finish(g, g->dk[j * D + d], fk);
            double gs = fabs(g->scale) * g->gsk[j];
            if (o->gscale[1]) o->gscale[1][row] = gs;
            if (o->pscale[1]) o->pscale[1][row] = g->gsk[j];
            if (o->leak[1] && g->dk_leak_all) memset(o->leak[1] + row * D, 1, D);
            if (o->sens[1])
                for (size_t d = 0; d < D; d++)
                    o->sens[1][row * D + d] = fabs(g->scale) * g->sdk[j * D + d] + g->h_abs * (1.0 + fabs(fk)) * g->dsk[j] +
                                              af_rg_finish_sens(g, dst[d], true);
            if (o->unstable[1])
                memset(o->unstable[1] + row * D, g->head_risky || g->dk_unst[j] || gs > AF_F32_RISK, D);
        }
        if (grads[2]) {
            double *dst = grads[2] + row * Dv;
            for (size_t d = 0; d < Dv; d++) dst[d] = af_rg_rdt(g, g->dv[j * Dv + d]);
            if (o->gscale[2]) o->gscale[2][row] = g->gsv[j];
            if (o->sens[2])
                for (size_t d = 0; d < Dv; d++)
                    o->sens[2][row * Dv + d] = g->sdv[j * Dv + d] + af_rg_finish_sens(g, dst[d], false);
            if (o->unstable[2])
                memset(o->unstable[2] + row * Dv, g->head_risky || g->dv_unst[j] || g->gsv[j] > AF_F32_RISK, Dv);
        }
    }
}

/* --- the entry ------------------------------------------------------------------------ */

static af_status af_rg_alloc(af_rg *g, af_scratch *ws, af_error *err) {
    const size_t Sq = g->Sq, Sk = g->Sk, D = g->D, Dv = g->Dv, R = g->R;
    const size_t Dm = D > Dv ? D : Dv;
#define AF_RG_GET(ptr, slot, T, n)                                                                 \
    do {                                                                                           \
        g->ptr = AF_SCRATCH(ws, slot, T, n, err);                                                  \
        if (!g->ptr) return AF_ERR_NOMEM;                                                          \
    } while (0)
    AF_RG_GET(k, WS_K, double, Sk * D);
    AF_RG_GET(kz, WS_KZ, double, Sk * D);
    AF_RG_GET(ksaved, WS_KSAVED, double, Sk * D);
    AF_RG_GET(kbad, WS_KBAD, uint32_t, Sk);
    AF_RG_GET(v, WS_V, double, Sk * Dv);
    AF_RG_GET(vsaved, WS_VSAVED, double, Sk * Dv);
    AF_RG_GET(vbad, WS_VBAD, uint32_t, Sk);
    AF_RG_GET(dk, WS_DK, double, Sk * D);
    AF_RG_GET(dv, WS_DV, double, Sk * Dv);
    AF_RG_GET(knorm, WS_KNORM, double, Sk * 4);
    AF_RG_GET(q, WS_Q, double, Sq * D);
    AF_RG_GET(qz, WS_QZ, double, Sq * D);
    AF_RG_GET(qsaved, WS_QSAVED, double, Sq * D);
    AF_RG_GET(qbad, WS_QBAD, uint32_t, Sq);
    AF_RG_GET(dO, WS_DO, double, Sq * Dv);
    AF_RG_GET(doz, WS_DOZ, double, Sq * Dv);
    AF_RG_GET(dosaved, WS_DOSAVED, double, Sq * Dv);
    AF_RG_GET(dobad, WS_DOBAD, uint32_t, Sq);
    AF_RG_GET(qnorm, WS_QNORM, double, Sq * 4);
    AF_RG_GET(S, WS_S, double, R * Sk);
    AF_RG_GET(spre, WS_SPRE, double, R * Sk);
    AF_RG_GET(Pd, WS_PD, double, R * Sk);
    AF_RG_GET(dP, WS_DP, double, R * Sk);
    AF_RG_GET(A, WS_A, double, R * Sk);
    AF_RG_GET(dq, WS_DQ, double, R * Dm);
    AF_RG_GET(add, WS_ADD, float, Sk);
    AF_RG_GET(live, WS_LIVE, uint8_t, R * Sk);
    AF_RG_GET(keep, WS_KEEP, uint8_t, R * Sk);
    AF_RG_GET(rowst, WS_ROWST, uint8_t, R);
    AF_RG_GET(risky, WS_RISKY, uint8_t, R);
    AF_RG_GET(gsq, WS_GSQ, double, R);
    AF_RG_GET(gsk, WS_GSKV, double, 2 * Sk);
    g->gsv = g->gsk + Sk;
    g->dk_unst = g->dv_unst = NULL;
    if (g->honest) {
        uint8_t *u = AF_SCRATCH(ws, WS_UNST, uint8_t, 2 * Sk, err);
        if (!u) return AF_ERR_NOMEM;
        g->dk_unst = u;
        g->dv_unst = u + Sk;
        size_t big = R * Sk;
        const size_t sizes[] = {Sk * D, Sk * Dv, Sq * D, Sq * Dv, R * Dm, Sk * Dm};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) big = sizes[k] > big ? sizes[k] : big;
        g->fbig = big;
        AF_RG_GET(fa, WS_FA, float, big);
        AF_RG_GET(fb, WS_FB, float, big);
        AF_RG_GET(fc, WS_FC, float, big);
        g->big = Sk * D > Sq * D ? Sk * D : Sq * D;
        AF_RG_GET(absbuf, WS_ABSBUF, double, 2 * g->big + R * Sk);
    }
    if (g->sens) {
        AF_RG_GET(dl, WS_DL, double, R * Sk);
        AF_RG_GET(d0, WS_D0, double, R * Sk);
        AF_RG_GET(wstar, WS_WSTAR, double, R * Sk);
        AF_RG_GET(E, WS_E, double, R * Sk);
        double *ab = AF_SCRATCH(ws, WS_ABSALL, double, Sk * D + Sk * Dv + Sq * D + Sq * Dv + Sk * D + Sk * Dv, err);
        if (!ab) return AF_ERR_NOMEM;
        g->absk = ab, ab += Sk * D;
        g->absv = ab, ab += Sk * Dv;
        g->absq = ab, ab += Sq * D;
        g->absdo = ab, ab += Sq * Dv;
        g->sdk = ab, ab += Sk * D;
        g->sdv = ab;
        AF_RG_GET(dsr, WS_DSR, double, R + Sk);
        g->dsk = g->dsr + R;
    }
    if (g->extra) {
        AF_RG_GET(xs, WS_XS, double, R * Sk);
        AF_RG_GET(xw, WS_XW, double, R * Sk);
    }
    if (g->grads[3]) {
        size_t n = g->mne[0] * g->mne[1] * g->mne[2] * g->mne[3];
        AF_RG_GET(dmask, WS_DMASK, double, n);
        memset(g->dmask, 0, n * sizeof *g->dmask);
        AF_RG_GET(gsm, WS_GSM, double, n);
        memset(g->gsm, 0, n * sizeof *g->gsm);
        AF_RG_GET(dma, WS_DMA, double, n);
        memset(g->dma, 0, n * sizeof *g->dma);
    }
#undef AF_RG_GET
    return AF_OK;
}

/* Dropout p = 1 drops every weight: the output is the constant 0 (docs/design.md section 2
 * rule 6), so every gradient is 0 whatever the inputs hold (0 * NaN counts as 0), in the
 * exact run and the honest one. A non-finite input planted in Q, K, V or dO reaches an IEEE
 * chain rule only through those zero weights: a NaN anywhere is then a leak. */
static void af_rg_all_dropped(const af_case *c, const af_ref_grad_opts *opts, double *const grads[AF_GRAD_COUNT]) {
    bool planted = c->bwd.dout.special != AF_SPECIAL_NONE;
    for (int t = 0; t < 3; t++) planted |= c->t[t].special != AF_SPECIAL_NONE;
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        if (!grads[k]) continue;
        size_t ne[4];
        af_case_grad_shape(c, k, ne);
        size_t rows = ne[0] * ne[1] * ne[2], n = rows * ne[3];
        memset(grads[k], 0, n * sizeof(double));
        if (opts->leak[k]) memset(opts->leak[k], planted, n);
        if (opts->nfswap[k]) memset(opts->nfswap[k], 0, n);
        if (opts->unstable[k]) memset(opts->unstable[k], 0, n);
        if (opts->sens[k]) memset(opts->sens[k], 0, n * sizeof(double));
        if (opts->gscale[k]) memset(opts->gscale[k], 0, rows * sizeof(double));
        if (k < 2 && opts->pscale[k]) memset(opts->pscale[k], 0, rows * sizeof(double));
    }
}

af_status af_ref_backward(const af_case_tensors *in, const af_ref_grad_opts *opts, double *const grads[AF_GRAD_COUNT],
                          af_scratch *ws, af_error *err) {
    const af_case *c = in->c;
    af_rg g;
    memset(&g, 0, sizeof g);
    g.in = in, g.c = c, g.o = opts, g.grads = grads;
    g.B = c->batch, g.Hq = c->q_heads, g.Hkv = c->kv_heads, g.Sq = c->q_len, g.Sk = c->kv_len;
    g.D = c->head_dim, g.Dv = c->v_head_dim, g.group = g.Hq / g.Hkv;
    g.R = g.Sk >= AF_RG_BLOCK_ELEMS ? 1 : (AF_RG_BLOCK_ELEMS / g.Sk < g.Sq ? AF_RG_BLOCK_ELEMS / g.Sk : g.Sq);
    g.honest = opts->honest;
    g.dt = c->dtype;
    g.tf32 = g.honest && (c->allow_tf32 || opts->force_tf32) && g.dt == AF_F32;
    g.sens = false;
    for (int k = 0; k < AF_GRAD_COUNT; k++) g.sens |= g.honest && opts->sens[k] != NULL;
    g.extra = opts->bug == AF_GRAD_BUG_CAUSAL_MISSING_IN_DS || opts->bug == AF_GRAD_BUG_TAIL_TILE_PAST_SK;
    g.scale = af_case_scale(c);
    g.p = c->dropout_p;
    g.inv_keep = g.p > 0.0 && g.p < 1.0 ? 1.0 / (1.0 - g.p) : 1.0;
    g.thr = af_dropout_threshold(g.p);
    g.u = g.honest ? af_dtype_eps(g.dt) : 0.0;
    g.u32 = g.honest ? 0x1p-24 : 0.0;
    g.utf = g.tf32 ? 0x1p-11 : 0.0;
    /* p rounded to fp32 moves 1 - p by up to u32 p: relatively u32 p / (1 - p), then the
     * subtraction and the division round once each */
    g.ukeep = g.honest && g.p > 0.0 ? 0x1p-24 * (2.0 + g.p * g.inv_keep) : 0.0;
    g.ovf = af_dtype_overflow(g.dt);
    if (g.honest) {
        /* as the forward's: either placement of the scale may round the scaled inputs */
        g.c_in = sqrt((double)g.D) * 0x1p-24 + (g.tf32 ? 2.0 * 0x1p-11 : 0.0) + 2.0 * af_dtype_eps(g.dt);
        double sub = af_dtype_min_subnormal(g.dt);
        g.h_abs = 0.5 * (g.tf32 && 0x1p-136 > sub ? 0x1p-136 : sub);
        g.h_st = g.h_abs > 0x1p-126 ? g.h_abs : 0x1p-126;
    }
    if (grads[3]) {
        af_case_grad_shape(c, 3, g.mne);
        g.mnb[3] = 1, g.mnb[2] = g.mne[3], g.mnb[1] = g.mne[2] * g.mnb[2], g.mnb[0] = g.mne[1] * g.mnb[1];
    }
    if (g.p >= 1.0) {
        af_rg_all_dropped(c, opts, grads);
        return AF_OK;
    }
    AF_TRY(af_rg_alloc(&g, ws, err));
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        size_t n = 0;
        if (grads[k]) {
            size_t ne[4];
            af_case_grad_shape(c, k, ne);
            n = ne[0] * ne[1] * ne[2] * ne[3];
        }
        if (opts->leak[k] && grads[k]) memset(opts->leak[k], 0, n);
        if (opts->nfswap[k] && grads[k]) memset(opts->nfswap[k], 0, n);
        if (opts->unstable[k] && grads[k]) memset(opts->unstable[k], 0, n);
        if (k == 3 && opts->sens[k] && grads[k]) memset(opts->sens[k], 0, n * sizeof(double));
    }
    bool anyleak = false, anyswap = false;
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        anyleak |= opts->leak[k] && grads[k];
        anyswap |= opts->nfswap[k] && grads[k];
    }
    const bool last_only = opts->bug == AF_GRAD_BUG_GQA_NO_SUM;

    for (size_t b = 0; b < g.B; b++) {
        for (size_t kvh = 0; kvh < g.Hkv; kvh++) {
            af_rg_kv(&g, b, kvh);
            memset(g.gsk, 0, 2 * g.Sk * sizeof *g.gsk);
            for (size_t h = kvh * g.group; h < (kvh + 1) * g.group; h++) {
                bool qk_risk, qk_inf;
                af_rg_q(&g, b, h, &qk_risk, &qk_inf);
                g.leaks = anyleak && (g.nkbad || g.nvbad || g.nqbad || g.ndobad);
                g.swaps = anyswap && (g.nvbad || g.ndobad);
                bool counts = !last_only || h == (kvh + 1) * g.group - 1;
                for (size_t r0 = 0; r0 < g.Sq; r0 += g.R)
                    af_rg_block(&g, b, h, kvh, r0, g.Sq - r0 < g.R ? g.Sq - r0 : g.R, qk_risk, qk_inf, counts);
            }
            af_rg_kv_finish(&g, b, kvh);
        }
    }
    if (grads[3]) {
        /* dmask in the mask's dtype; its row scales the largest |dS| sum of the row */
        af_dtype mdt = c->amask.dtype;
        size_t rows = g.mne[0] * g.mne[1] * g.mne[2], Skm = g.mne[3];
        /* A mask broadcast over some dimension sums `terms` dS entries into each element.
         * An implementation may hold each of them in the mask's dtype before the sum (the
         * gradient of a stride-0 leaf: PyTorch's autograd gives one per element, summed
         * over the broadcast afterwards), so each term's rounding is allowed (eps x the sum
         * of the terms' magnitudes), not only the sum's */
        size_t terms = (size_t)c->batch * c->q_heads * c->q_len * c->kv_len / (rows * Skm);
        for (size_t e = 0; e < rows * Skm; e++) {
            double x = g.dmask[e];
            grads[3][e] = g.honest ? (double)af_round_f32((float)x, mdt) : x;
            if (!opts->sens[3]) continue;
            double mag = terms > 1 ? g.dma[e] : af_rg_fabs(grads[3][e]);
            opts->sens[3][e] += af_dtype_eps(mdt) * mag + 0.5 * af_dtype_min_subnormal(mdt) * (double)terms;
        }
        if (opts->gscale[3])
            for (size_t r = 0; r < rows; r++) {
                double mx = 0.0;
                for (size_t j = 0; j < Skm; j++) mx = g.gsm[r * Skm + j] > mx ? g.gsm[r * Skm + j] : mx;
                opts->gscale[3][r] = mx;
            }
        if (opts->unstable[3])
            for (size_t r = 0; r < rows; r++) {
                double mx = 0.0;
                for (size_t j = 0; j < Skm; j++) mx = g.gsm[r * Skm + j] > mx ? g.gsm[r * Skm + j] : mx;
                if (mx > AF_F32_RISK) memset(opts->unstable[3] + r * Skm, 1, Skm);
            }
    }
    return AF_OK;
}

/* --- the `ref` backend's backward -------------------------------------------------------- */

af_status af_ref_run_backward(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g, af_error *err) {
    af_ref_opts fwd = {0};
    AF_TRY(af_ref_attention(in, &in->qv, &in->kv, &in->vv, &fwd, out->data, NULL, state, err));
    double *grads[AF_GRAD_COUNT];
    for (int k = 0; k < AF_GRAD_COUNT; k++) grads[k] = af_grads_at(g, k)->data;
    af_ref_grad_opts o = {0};
    return af_ref_backward(in, &o, grads, state, err);
}
