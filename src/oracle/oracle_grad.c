/* oracle_grad.c - a backward case's gradients against the float64 reference backward
 * (ref_grad.c), by the output's rule (oracle.h) per gradient g (docs/design.md section 5):
 *
 *     atol[r]  = gscale[r] * max(floor_atol[dtype], fudge[g] * max_e (|honest - ref| - sens)_+ / gscale[row(e)])
 *     bound[e] = atol[r] + rtol[dtype] * |ref| + fudge[g] * sens[e]
 *     an element passes when |got - ref| <= bound[e] + u_out * (|ref| + bound[e]) + h_out
 *
 * with gscale[r] the bound on the sum of the absolute values of the terms row r of the
 * gradient adds up, over the terms of nonzero weight (ref.h af_ref_grad_opts.gscale: a huge
 * value behind a zero-weight key loosens nothing), the honest run the explicit backward's
 * roundings at the case precision and sens its sensitivity bound (both made lazily, when
 * a gradient fails the floor alone), fudge[g] the per-gradient factor (dQ 4, dK 2, dV 2,
 * dmask 2, af_oracle_opts.grad_fudge). Classes as for the output: NaN and Inf classified,
 * elements unstable at the case precision excused (and an Inf where the value or, for dQ
 * and dK, the unscaled product gscale / |scale| that another placement of the scale rounds
 * to the dtype, may overflow it), dQ's rows that the forward fully masks
 * must be 0 (a NaN there is masked_row_nan), and NaN only where a term of weight 0 has a
 * non-finite factor is masked_value_leak. */
#include <math.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "backends/ref.h"
#include "backends/ref_honest.h"
#include "oracle_internal.h"
#include "scratch.h"

/* per gradient: the reference, its row scales, leak flags; the honest run, sens, unstable */
enum { GS_REF, GS_SCALE, GS_PSCALE, GS_LEAK, GS_SWAP, GS_HONEST, GS_SENS, GS_UNSTABLE, GS_PER };

struct af_oracle_grads {
    af_scratch ws, refws;
    const af_case_tensors *in;
    double *ref[AF_GRAD_COUNT], *gscale[AF_GRAD_COUNT], *honest[AF_GRAD_COUNT], *sens[AF_GRAD_COUNT];
    double *pscale[2]; /* dq's and dk's rows without the scale (ref.h) */
    uint8_t *leak[AF_GRAD_COUNT], *swap[AF_GRAD_COUNT], *unstable[AF_GRAD_COUNT];
    size_t n[AF_GRAD_COUNT], rows[AF_GRAD_COUNT], ne[AF_GRAD_COUNT][4];
    bool honest_ready, honest_tf32; /* the honest run made, and with TF32 forced */
    double honest_err[AF_GRAD_COUNT]; /* max |honest - ref| beyond sens, per unit of the row's scale */
    double slack;                     /* added to every element's atol (af_oracle_grads_compare_slack) */
};
_Static_assert(GS_PER * AF_GRAD_COUNT <= AF_SCRATCH_SLOTS, "scratch slots");

void af_oracle_grads_destroy(af_oracle_grads *g) {
    if (!g) return;
    af_scratch_release(&g->ws);
    af_scratch_release(&g->refws);
    af_free(g);
}

af_status af_oracle_grads_prepare(af_oracle_grads **pg, const af_case_tensors *in, af_error *err) {
    if (!*pg) {
        *pg = af_calloc(1, sizeof **pg);
        AF_RETURN_ERROR_IF(!*pg, err, AF_ERR_NOMEM, "out of memory");
    }
    af_oracle_grads *g = *pg;
    const af_case *c = in->c;
    g->in = in;
    g->honest_ready = false;
    af_ref_grad_opts exact;
    memset(&exact, 0, sizeof exact);
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        g->ref[k] = NULL;
        g->honest_err[k] = 0.0;
        if (!(c->bwd.grads & (1u << k))) continue;
        af_case_grad_shape(c, k, g->ne[k]);
        g->rows[k] = g->ne[k][0] * g->ne[k][1] * g->ne[k][2];
        g->n[k] = g->rows[k] * g->ne[k][3];
        g->ref[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_REF, double, g->n[k], err);
        g->gscale[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_SCALE, double, g->rows[k], err);
        g->leak[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_LEAK, uint8_t, g->n[k], err);
        g->swap[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_SWAP, uint8_t, g->n[k], err);
        if (!g->ref[k] || !g->gscale[k] || !g->leak[k] || !g->swap[k]) return AF_ERR_NOMEM;
        exact.gscale[k] = g->gscale[k];
        if (k < 2) {
            g->pscale[k] = exact.pscale[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_PSCALE, double, g->rows[k], err);
            if (!g->pscale[k]) return AF_ERR_NOMEM;
        }
        exact.leak[k] = g->leak[k];
        exact.nfswap[k] = g->swap[k];
    }
    AF_TRY(af_ref_backward(in, &exact, g->ref, &g->refws, err));
    for (int k = 0; k < AF_GRAD_COUNT; k++)
        for (size_t r = 0; g->ref[k] && r < g->rows[k]; r++)
            if (!(g->gscale[k][r] > 1e-300)) g->gscale[k][r] = 1e-300;
    return AF_OK;
}

const double *af_oracle_grads_ref(const af_oracle_grads *g, int k) {
    return g && k >= 0 && k < AF_GRAD_COUNT ? g->ref[k] : NULL;
}

/* The honest backward (TF32 forced or not): every gradient the case asks for, and how far
 * each strays beyond its sensitivity bound in units of its row scale. */
static af_status af_oracle_grads_honest(af_oracle_grads *g, bool tf32, af_error *err) {
    if (g->honest_ready && g->honest_tf32 == tf32) return AF_OK;
    af_ref_grad_opts ho;
    memset(&ho, 0, sizeof ho);
    ho.honest = true;
    ho.force_tf32 = tf32;
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        g->honest[k] = NULL;
        if (!g->ref[k]) continue;
        g->honest[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_HONEST, double, g->n[k], err);
        g->sens[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_SENS, double, g->n[k], err);
        g->unstable[k] = AF_SCRATCH(&g->ws, k * GS_PER + GS_UNSTABLE, uint8_t, g->n[k], err);
        if (!g->honest[k] || !g->sens[k] || !g->unstable[k]) return AF_ERR_NOMEM;
        ho.sens[k] = g->sens[k];
        ho.unstable[k] = g->unstable[k];
    }
    AF_TRY(af_ref_backward(g->in, &ho, g->honest, &g->refws, err));
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        if (!g->ref[k]) continue;
        size_t len = g->ne[k][3];
        double mx = 0.0;
        for (size_t e = 0; e < g->n[k]; e++) {
            if (isnan(g->sens[k][e])) g->sens[k][e] = HUGE_VAL;
            double d = (fabs(g->honest[k][e] - g->ref[k][e]) - g->sens[k][e]) / g->gscale[k][e / len];
            if (isfinite(d) && d > mx && !g->unstable[k][e]) mx = d;
        }
        g->honest_err[k] = mx;
    }
    g->honest_ready = true;
    g->honest_tf32 = tf32;
    return AF_OK;
}

/* The tolerance of row r of gradient k. */
static af_tolerance af_oracle_grads_tol(const af_oracle_grads *g, const af_oracle_opts *opts, int k, size_t r) {
    af_dtype dt = g->in->c->dtype;
    af_tolerance t;
    t.fudge = opts->grad_fudge[k];
    t.atol = opts->floor_atol[dt];
    t.rtol = opts->floor_rtol[dt];
    t.honest = false;
    if (g->honest_ready && t.fudge * g->honest_err[k] > t.atol) {
        t.atol = t.fudge * g->honest_err[k];
        t.honest = true;
    }
    t.atol *= g->gscale[k][r];
    return t;
}

/* One pass over got's elements (see af_oracle_grads_compare). */
static void af_oracle_grads_pass(const af_oracle_grads *g, const af_oracle_opts *opts, const uint8_t *masked_rows,
                                 int k, const af_tensor *want_t, const af_tensor *got, const uint32_t *row_map,
                                 const uint32_t *col_map, const uint8_t *leak_b, double tol_mult, af_result *res) {
    af_metrics *m = &res->m;
    memset(res, 0, sizeof *res);
    m->fail_score_max = m->fail_product_max = (double)NAN; /* no score is named (known.h matches outputs) */
    res->tol = af_oracle_grads_tol(g, opts, k, 0);
    const size_t *ne = g->ne[k], len = ne[3];
    size_t rows = got->ne[0] * got->ne[1] * got->ne[2];
    double rel_a, abs_a, rel_b, abs_b;
    af_out_rounding(want_t, &rel_a, &abs_a);
    af_out_rounding(got, &rel_b, &abs_b);
    const double out_rel = rel_a + rel_b, out_abs = abs_a + abs_b;
    /* values at or past this round to Inf where the gradient is held (dmask: the mask's dtype) */
    double overflow = af_dtype_overflow(k == 3 ? g->in->c->amask.dtype : g->in->c->dtype);
    if (got->dtype == AF_F16 || got->dtype == AF_BF16) {
        double ov = af_dtype_overflow(got->dtype);
        overflow = ov < overflow ? ov : overflow;
    }
    const double *ref = g->ref[k];
    const bool scale0 = af_case_scale(g->in->c) == 0.0;
    double fro[2] = {0.0, 0.0}, worst = -1.0;
    for (size_t r = 0; r < rows; r++) {
        size_t ra = row_map ? row_map[r] : r;
        bool masked = masked_rows && masked_rows[ra];
        af_tolerance tol = af_oracle_grads_tol(g, opts, k, ra);
        /* dQ and dK: an implementation may scale after the product (the scale on the other
         * input, or after dS K rounded to the dtype), which may overflow there */
        bool row_overflows = k < 2 && g->pscale[k][ra] >= 0.5 * overflow;
        tol.atol = tol.atol * tol_mult + g->slack;
        tol.rtol *= tol_mult;
        for (size_t d = 0; d < len; d++) {
            size_t da = col_map ? col_map[d] : d, ea = ra * len + da, eb = r * len + d;
            double want = want_t ? af_out_at(want_t, ea) : ref[ea];
            double out = af_out_at(got, eb);
            int cw = af_class(want), co = af_class(out);
            double sens = g->honest_ready ? g->sens[k][ea] : 0.0;
            bool unstable = g->honest_ready && (g->unstable[k][ea] || af_class(g->honest[k][ea]) != af_class(ref[ea]));
            if (cw != co && g->honest_ready && co != 0 && cw == 0) {
                /* a value within the bound of the largest of the dtype may round to that Inf;
                 * one within it of fp32's, whose partial sums may overflow, to NaN (Inf - Inf) */
                double bound = tol.atol + tol.rtol * fabs(want) + tol_mult * tol.fudge * sens;
                if (co == 2 ? want + bound >= overflow
                            : co == 3 ? want - bound <= -overflow : fabs(want) + bound >= AF_F32_RISK)
                    unstable = true;
                if (row_overflows && (co >= 2 || scale0)) unstable = true; /* the product's Inf (times 0: NaN) */
            }
            double ratio;
            /* NaN or Inf through a non-finite dP: either class is right (ref.h nfswap) */
            bool swap = cw != 0 && co != 0 && g->swap[k][ea] != 0;
            if (cw != co && !swap) {
                if (unstable) {
                    m->n_unstable++;
                    continue;
                }
                bool leak = leak_b ? leak_b[eb] != 0 : g->leak[k][ea] != 0;
                if (co == 1 && masked && cw != 1 && !(leak && opts->waive_masked_value_leak)) {
                    m->n_masked_row_nan++; /* a dQ row the forward fully masks: 0 */
                } else if (co == 1 && leak) {
                    m->n_masked_value_leak++; /* NaN only through a term of weight 0 */
                } else if (co == 1 || cw == 1) {
                    m->n_nan++;
                    if (co != 1) m->n_nan_ref++; /* as the output's oracle counts it */
                } else {
                    m->n_inf++;
                }
                ratio = HUGE_VAL;
            } else if (cw != 0) {
                continue; /* the same NaN or Inf, or either where both are right */
            } else {
                double bound = tol.atol + tol.rtol * fabs(want) + tol_mult * tol.fudge * sens;
                ratio = af_oracle_measure(m, out, want, bound, tol.atol, out_rel, out_abs, fro);
                if (ratio > 1.0) {
                    if (unstable) {
                        m->n_unstable++;
                        continue;
                    }
                    m->n_diverge++;
                }
            }
            if (ratio > worst) {
                worst = ratio;
                m->worst[0] = ra / (ne[1] * ne[2]);
                m->worst[1] = ra / ne[2] % ne[1];
                m->worst[2] = ra % ne[2];
                m->worst[3] = da;
                m->worst_out = out;
                m->worst_ref = want;
                res->tol = tol;
            }
        }
    }
    m->worst_ratio = worst < 0 ? 0.0 : worst;
    m->rel_fro = fro[1] > 0 ? sqrt(fro[0] / fro[1]) : sqrt(fro[0]);
    res->kind = af_oracle_kind_of(m, opts);
}

af_status af_oracle_grads_compare(af_oracle_grads *g, const af_oracle_opts *opts, const uint8_t *masked_rows, int k,
                                  const af_tensor *want_t, const af_tensor *got, const uint32_t *row_map,
                                  const uint32_t *col_map, const uint8_t *leak_b, double tol_mult, bool tf32,
                                  af_result *res, af_error *err) {
    AF_RETURN_ERROR_IF(!g || k < 0 || k >= AF_GRAD_COUNT || !g->ref[k], err, AF_ERR_INVALID,
                       "the case does not ask for gradient %d", k);
    const size_t *ne = g->ne[k];
    bool shape_ok = got->ndim == 4 && got->ne[3] == ne[3] && af_oracle_out_dtype_ok(got->dtype) && got->data &&
                    (want_t == NULL || af_oracle_out_dtype_ok(want_t->dtype));
    if (!row_map) shape_ok = shape_ok && got->ne[0] == ne[0] && got->ne[1] == ne[1] && got->ne[2] == ne[2];
    AF_RETURN_ERROR_IF(!shape_ok, err, AF_ERR_INVALID, "gradient %s has the wrong shape or dtype for this case",
                       af_grad_names[k]);
    if (k != 0) masked_rows = NULL;
    if (g->honest_ready && g->honest_tf32 != tf32) AF_TRY(af_oracle_grads_honest(g, tf32, err));
    af_oracle_grads_pass(g, opts, masked_rows, k, want_t, got, row_map, col_map, leak_b, tol_mult, res);
    bool failing = res->m.n_nan || res->m.n_inf || res->m.n_masked_row_nan || res->m.n_masked_value_leak ||
                   res->m.n_diverge;
    if (failing && !g->honest_ready) {
        AF_TRY(af_oracle_grads_honest(g, tf32, err));
        af_oracle_grads_pass(g, opts, masked_rows, k, want_t, got, row_map, col_map, leak_b, tol_mult, res);
    }
    return AF_OK;
}

af_status af_oracle_grads_compare_slack(af_oracle_grads *g, const af_oracle_opts *opts, const uint8_t *masked_rows,
                                        int k, const af_tensor *got, double slack, bool tf32, af_result *res,
                                        af_error *err) {
    g->slack = slack;
    af_status st = af_oracle_grads_compare(g, opts, masked_rows, k, NULL, got, NULL, NULL, NULL, 1.0, tf32, res, err);
    g->slack = 0.0;
    return st;
}
