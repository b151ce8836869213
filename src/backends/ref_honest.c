/* ref_honest.c - the honest mode of the float64 reference (ref.c).
 *
 * In honest mode the same passes round where the explicit implementation rounds and the
 * two products accumulate in fp32 (sgemm on the rounded values), so accumulation error
 * and overflow of fp32 partial sums show as they would in an fp32 kernel; the difference
 * to the exact run is the tolerance's yardstick. It also reports (ref.h):
 *   sens      a bound on how far score rounding can move each output (af_sens_weights),
 *   unstable  outputs no implementation at the case precision is bound to: fp32 partial
 *             sums that may overflow in some order, a scaled input that may round to Inf,
 *             Inf meeting a value that may round to 0, a non-finite V whose weight may
 *             round to 0. The oracle excuses whatever it gets there (see oracle.h). */
#include "ref_honest.h"

#include <math.h>

#include "vmath.h"

/* Scale placed on an input tensor (honest mode): x * f, rounded to the dtype. */
void af_ref_scale_rows(double *x, size_t n, double f, af_dtype dt) {
    for (size_t k = 0; k < n; k++) x[k] = af_rdt(x[k] * f, dt);
}

void af_ref_tf32(double *x, size_t n) {
    for (size_t k = 0; k < n; k++) x[k] = (double)af_round_tf32((float)x[k]);
}

/* Does TF32 rounding turn a finite value into Inf (|x| past the largest TF32 value)? An
 * fp32 kernel may round unscaled inputs where an explicit graph rounds scaled ones. */
bool af_ref_tf32_overflows(const double *x, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (isfinite(x[k]) && fabs(x[k]) >= 0x1.ffep127) return true;
    return false;
}

/* How far the softcap c tanh(x / c) can move when its input is off by up to d. */
double af_sens_cap(double d, double x, double cap) {
    double t = tanh(x / cap);
    double up = fabs(tanh((x + d) / cap) - t), down = fabs(t - tanh((x - d) / cap));
    return cap * (up > down ? up : down);
}

/* Turns per-key score error bounds d_j of one softmax row into bounds W_j on |dP_j|, in
 * place, from the scores s (max m; masked keys -inf) and a sink logit z (-inf: none): a
 * term of the denominator without error and without a value row. With every score off by e_k,
 * |e_k| <= d_k, and a_k = s_k - m, P'_j = 1 / (1 + sum_{k != j} e^{a_k + e_k - a_j - e_j})
 * is monotone in each e, so
 *   P'_j  in  [e^{a_j - d_j} / (e^{a_j - d_j} + R+_j),  e^{a_j + d_j} / (e^{a_j + d_j} + R-_j)],
 *   R+-_j = sum_{k != j} e^{a_k +- d_k}
 * exactly, for any size of error: errors every key shares move nothing (one live key keeps
 * weight 1 however far its score is off). Computed in log space, so a key whose weight
 * underflows to 0 but could take the lead still counts; R_j is the row's sum less key j's
 * term, summed anew for the largest term (where subtracting would cancel). Returns true
 * when a live key whose V row is not finite (bad) may get a weight at or below p_zero,
 * which rounds to 0 (0 * Inf = NaN). */

/* sum_{k != j} e^{a_k + sign d_k - shift} (masked keys left out) plus the sink's e^{az - shift},
 * with shift the largest of those exponents (returned in *shift; -inf and 0 when there are
 * none), so that the sum is at least 1 however far below the largest term of the row
 * (key j's own) the rest lies: shifted by key j's term, it could underflow to 0 while key
 * j's bound (its term at -+d_j) is below it. */
static double af_sens_rest(const double *s, double m, const double *d, size_t n, size_t j, double sign, double az,
                           double *shift) {
    double top = az;
    for (size_t k = 0; k < n; k++) {
        double a = s[k] - m;
        if (k != j && a > -HUGE_VAL && a + sign * d[k] > top) top = a + sign * d[k];
    }
    *shift = top;
    if (!(top > -HUGE_VAL)) return 0.0;
    double r = az > -HUGE_VAL ? exp(az - top) : 0.0;
    for (size_t k = 0; k < n; k++) {
        double a = s[k] - m;
        if (k != j && a > -HUGE_VAL) r += exp(a + sign * d[k] - top);
    }
    return r;
}

bool af_sens_weights(const double *s, double m, double *d, size_t n, const uint32_t *bad, size_t nbad,
                     double p_zero, double z) {
    double az = z - m; /* the sink's term, exact */
    double up = az, lo = az;
    size_t jup = n, jlo = n; /* n: the largest term is the sink's (no key's rest to sum anew) */
    for (size_t j = 0; j < n; j++) {
        double a = s[j] - m;
        if (!(a > -HUGE_VAL)) continue; /* masked (or NaN): no weight */
        if (a + d[j] > up) up = a + d[j], jup = j;
        if (a - d[j] > lo) lo = a - d[j], jlo = j;
    }
    if (!(up > -HUGE_VAL)) {
        for (size_t j = 0; j < n; j++) d[j] = 0.0;
        return false;
    }
    double sp = az > -HUGE_VAL ? exp(az - up) : 0.0, sm = az > -HUGE_VAL ? exp(az - lo) : 0.0;
    double s0 = az > -HUGE_VAL ? exp(az) : 0.0;
    for (size_t j = 0; j < n; j++) {
        double a = s[j] - m;
        if (!(a > -HUGE_VAL)) continue;
        sp += exp(a + d[j] - up);
        sm += exp(a - d[j] - lo);
        s0 += exp(a);
    }
    double l0 = log(s0);
    /* the largest terms' rests, summed without them, each shifted by its own largest term */
    double sh_up, sh_lo;
    double rp_up = af_sens_rest(s, m, d, n, jup, 1.0, az, &sh_up), rm_lo = af_sens_rest(s, m, d, n, jlo, -1.0, az, &sh_lo);
    bool risky = false;
    for (size_t k = 0; k < nbad; k++) {
        size_t j = bad[k];
        double a = s[j] - m;
        if (!(a > -HUGE_VAL)) continue;
        double rp = j == jup ? rp_up : fmax(sp - exp(a + d[j] - up), 0.0);
        double low = rp > 0.0 ? 1.0 / (1.0 + rp * exp((j == jup ? sh_up : up) - (a - d[j]))) : 1.0;
        if (!(low > p_zero)) risky = true;
    }
    for (size_t j = 0; j < n; j++) {
        double a = s[j] - m;
        if (!(a > -HUGE_VAL)) {
            d[j] = 0.0;
            continue;
        }
        double rp = j == jup ? rp_up : fmax(sp - exp(a + d[j] - up), 0.0);
        double rm = j == jlo ? rm_lo : fmax(sm - exp(a - d[j] - lo), 0.0);
        /* rest * e^{shift - (a +- d)}: 0 when nothing else is live (0 * Inf counts as 0) */
        double low = rp > 0.0 ? 1.0 / (1.0 + rp * exp((j == jup ? sh_up : up) - (a - d[j]))) : 1.0;
        double hi = rm > 0.0 ? 1.0 / (1.0 + rm * exp((j == jlo ? sh_lo : lo) - (a + d[j]))) : 1.0;
        double p = exp(a - l0);
        d[j] = hi - p > p - low ? hi - p : p - low;
    }
    return risky;
}

bool af_ref_has_nonfinite(const double *x, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!isfinite(x[k])) return true;
    return false;
}

/* Smallest nonzero finite |x| (HUGE_VAL if none). */
double af_ref_min_abs(const double *x, size_t n) {
    double m = HUGE_VAL;
    for (size_t k = 0; k < n; k++) {
        double a = fabs(x[k]);
        if (a > 0.0 && a < m) m = a;
    }
    return m;
}

/* conventions.products "dtype": whether query row q against the Sk keys k ([Sk, D]) gives a
 * score of ±Inf or NaN (times scale, the scale on the scores) when each product q_d k_d is
 * rounded to dt before the sum: such a row is NaN (+Inf, NaN) or drops a key the exact
 * scores weigh (-Inf) in an implementation that multiplies in the dtype. Keys (or a row) with a non-finite input are the reference's own business. */
bool af_ref_products_overflow(const double *q, const double *k, size_t Sk, size_t D, af_dtype dt, double scale) {
    if (af_ref_has_nonfinite(q, D)) return false;
    for (size_t j = 0; j < Sk; j++) {
        if (af_ref_has_nonfinite(k + j * D, D)) continue;
        double s = 0.0;
        for (size_t d = 0; d < D; d++) s += af_round_f64(q[d] * k[j * D + d], dt);
        s *= scale;
        if (!isfinite(s)) return true;
    }
    return false;
}

/* Largest finite |x|: NaN and Inf are classified separately, not a risk of overflow. */
double af_ref_maxabs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t k = 0; k < n; k++) {
        double a = fabs(x[k]);
        if (a > m && a < HUGE_VAL) m = a; /* NaN fails the first test */
    }
    return m;
}

void af_ref_to_f32(const double *x, float *y, size_t n) {
    for (size_t k = 0; k < n; k++) y[k] = (float)x[k];
}

/* The honest products: operands are values of the case dtype (exact in f32), products
 * accumulate in fp32 as an fp32 kernel's would. */
void af_ref_gemm_f32(int nt, size_t M, size_t N, size_t K, const double *A, const double *B, double *C,
                     float *fa, float *fb, float *fc) {
    af_ref_to_f32(A, fa, M * K);
    af_ref_to_f32(B, fb, N * K);
    if (nt) {
        af_gemm_nt_f32(M, N, K, fa, K, fb, K, fc, N, 0);
    } else {
        af_gemm_nn_f32(M, N, K, fa, K, fb, N, fc, N, 0);
    }
    for (size_t k = 0; k < M * N; k++) C[k] = (double)fc[k];
}

/* Bound on the partial sums of A . B^T: |A| |B|^T, in float64. */
void af_ref_abs_gemm_nt(size_t M, size_t N, size_t K, const double *A, const double *B, double *C,
                        double *absa, double *absb) {
    for (size_t k = 0; k < M * K; k++) absa[k] = fabs(A[k]);
    for (size_t k = 0; k < N * K; k++) absb[k] = fabs(B[k]);
    af_gemm_nt_f64(M, N, K, absa, K, absb, K, C, N, 0);
}


/* Pass 1 of honest mode for rows r0 .. r0+rn-1 of query head h (key head g) of batch b:
 * |q| |k| on the unscaled inputs (absbuf: 2 * big + rn * Sk doubles of work space, big >=
 * Sq * D and Sk * D). With qk_risk, flags in risky[r] the rows whose Q.K^T partial sums
 * may overflow fp32 (max(1, |scale|) times |q| |k| bounds them whether the scale comes
 * before or after the product). With delta ([rn x Sk], may be NULL), bounds each score's
 * error: |scale| |q| . |k| c_in, plus h_abs (|q_i|_1 + |k_j|_1) for the scaled inputs
 * rounded near the subnormals. */
void af_honest_score_bounds(const af_view *qv, const af_view *kv, size_t b, size_t h, size_t g, size_t r0, size_t rn,
                            size_t Sk, size_t D, double scale, double c_in, double h_abs, bool qk_risk,
                            double *absbuf, size_t big, uint8_t *risky, double *delta) {
    /* |q| |k| on the unscaled inputs: max(1, |scale|) times it bounds
     * the partial sums whether the scale comes before or after */
    double *qa = absbuf, *ka = absbuf + big, *A = absbuf + 2 * big;
    af_gather_f64(qv, b, h, qa, D);
    af_gather_f64(kv, b, g, ka, D);
    af_ref_abs_gemm_nt(rn, Sk, D, qa + r0 * D, ka, A, qa + r0 * D, ka);
    double f = fabs(scale) > 1.0 ? fabs(scale) : 1.0;
    for (size_t r = 0; r < rn && qk_risk; r++)
        for (size_t j = 0; j < Sk && !risky[r]; j++) risky[r] = A[r * Sk + j] * f > AF_F32_RISK;
    if (delta)
        for (size_t e = 0; e < rn * Sk; e++) delta[e] = A[e] * fabs(scale) * c_in;
    if (delta && h_abs > 0.0) {
        /* scaled inputs rounded near the subnormals are off by up to half a
         * quantum, whatever their size: |q_i|_1 + |k_j|_1 times it */
        double fh = (fabs(scale) > 1.0 ? sqrt(fabs(scale)) : 1.0) * h_abs;
        for (size_t j = 0; j < Sk; j++) {
            double k1 = 0.0;
            for (size_t e = 0; e < D; e++) k1 += isfinite(ka[j * D + e]) ? fabs(ka[j * D + e]) : 0.0;
            for (size_t r = 0; r < rn; r++) delta[r * Sk + j] += fh * k1;
        }
        for (size_t r = 0; r < rn; r++) {
            double q1 = 0.0;
            const double *qr = qa + (r0 + r) * D;
            for (size_t e = 0; e < D; e++) q1 += isfinite(qr[e]) ? fabs(qr[e]) : 0.0;
            for (size_t j = 0; j < Sk; j++) delta[r * Sk + j] += fh * q1;
        }
    }
}
