/* oracle.c - classification of outputs against the float64 reference (see oracle.h for
 * the tolerance rule). Each comparison is one pass over the elements; when something
 * fails under the floor-only tolerance and the honest run has not been made yet, the
 * honest run is made and the pass repeated with the full tolerance.
 *
 * A backend's conventions (conventions.h) are modelled here, each only for a backend
 * that declares it:
 *   masked_rows "nan"        masked_row_nan is not its kind (a waiver)
 *   masked_rows "mean"       a fully masked row is compared with the mean of V over the keys
 *                            a set-semantics mask masks (when none does: 0, or NaN)
 *   masked_rows "unmasked"   ... with the reference of the case without its set-semantics
 *                            masks (causal, key padding, window, boolean mask)
 *   masked_values "ieee"     masked_value_leak is not its kind (a waiver)
 *   masked_keys "ieee"       NaN is accepted in a row where a set-masked key has a NaN or +Inf
 *                            score (the reference's key_leak flag): adding -inf to it is NaN;
 *                            with scores "dtype" too, also where that score is +Inf in the
 *                            f16/bf16 dtype only (an f16 score past 65504)
 *   denormals "flush"        the output is compared with a second oracle prepared on the
 *                            inputs with their f32-subnormal values flushed to zero, and every
 *                            element gets (2 Sk + 2 D + 4) * 2^-126 more absolute room for the
 *                            intermediate results flushed on the way
 *   products "dtype"         the honest run marks unstable each row with a score of ±Inf or NaN
 *                            when Q K^T's products are rounded to the case dtype (ref.h)
 *   scores "dtype", tf32 "always"   the honest run rounds as that implementation does (its
 *                            own honest slot), so the tolerance and the unstable elements
 *                            are those of that precision model
 *   fp8_probs, fp8_out       an FP8 case's bound grows by what rounding P (times s) to the
 *                            format before P @ V can move each element, u_F sum_j P_ij |v_jd|
 *                            + sum_j min(h_F / s max_k P_ik, P_ij) |v_jd| (from the honest run's
 *                            P, made for that s; not times the fudge), and the output's rounding by O's in the format
 *                            (u_F relative, h_F / scale_o absolute); an Inf of either sign
 *                            that bound reaches is unstable (af_oracle_fp8_model) */
#include "attnfuzz/oracle.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "backends/ref.h"
#include "oracle_internal.h"
#include "scratch.h"
#include "vmath.h"

const char *const af_kind_names[AF_KIND_COUNT] = {"ok",      "nan_mismatch", "inf_mismatch", "masked_row_nan",
                                                  "masked_value_leak",      "diverge",      "error",
                                                  "crash",   "timeout",      "nondeterministic",
                                                  "batch_variant",          "lse_diverge", "guard_write"};
_Static_assert(sizeof(af_kind_names) / sizeof(af_kind_names[0]) == AF_KIND_COUNT, "names");

int af_kind_from_name(const char *name) {
    for (int i = 0; i < AF_KIND_COUNT; i++)
        if (strcmp(name, af_kind_names[i]) == 0) return i;
    return -1;
}

enum { WS_REF, WS_ROWS, WS_EXPECTED, WS_LEAK, WS_VSCALE, WS_ROWMAX, WS_KEYLEAK, WS_ALT, WS_ALT_VSCALE, WS_ADD,
       WS_LIVE, WS_KEEP, WS_ALT_LEAK, WS_ALT_PLAIN, WS_LSE };
enum { HWS_OUT, HWS_SENS, HWS_UNSTABLE, HWS_LSE, HWS_LSE_SENS, HWS_FP8_PV, HWS_FP8_PMAX };

/* The honest runs, one per precision model: bit 0 scores in the dtype, bit 1 TF32 always,
 * bit 2 flushed denormals. */
enum { AF_HONEST_SCORES_DTYPE = 1, AF_HONEST_TF32 = 2, AF_HONEST_FTZ = 4, AF_HONEST_PRODUCTS = 8, AF_HONEST_SLOTS = 16 };

/* One honest run (ref.h): the case recomputed with an implementation's roundings. */
typedef struct af_oracle_honest {
    af_scratch ws;
    double *out, *sens;
    uint8_t *unstable; /* no implementation at this precision is bound there */
    double err;        /* max |honest - ref| beyond sens, over elements finite in both,
                        * relative to the row's vscale */
    double *lse, *lse_sens; /* [nrows]: the statistics at this precision, their score bound */
    double lse_err;    /* max |honest lse - ref lse| beyond lse_sens, over finite rows */
    double *fp8_pv, *fp8_abs; /* an FP8 case's: what P's FP8 rounding may move (ref.h) */
    double fp8_h;               /* ... fp8_abs for this h_F / s */
    bool ready;
} af_oracle_honest;

/* Flushing the f32-subnormal values of the inputs (denormals "flush"). */
#define AF_FTZ_MIN 0x1p-126 /* f32's smallest normal: what an FTZ/DAZ unit keeps */
enum { AF_FTZ_UNKNOWN, AF_FTZ_NONE, AF_FTZ_READY };

struct af_oracle {
    af_oracle_opts opts;
    const af_case_tensors *in;
    af_scratch ws;    /* WS_* */
    af_scratch refws; /* for af_ref_attention */
    double *ref;
    double *target; /* what outputs are compared with: ref, or an expected output */
    uint8_t *rows;     /* fully masked rows */
    uint8_t *leak;     /* [n]: a zero-weight key holds a non-finite V in this column */
    double *vscale;    /* [nrows]: max |V| over the row's keys of nonzero weight (ref.h) */
    double *row_max;   /* [nrows]: the row's largest score (ref.h) */
    uint8_t *key_leak; /* [nrows]: a set-masked key has a NaN or +Inf score (AF_KEY_LEAK_*, ref.h) */
    double *lse;       /* [nrows]: the reference statistics (NULL after prepare_expected) */
    size_t n, nrows, dv;
    double overflow; /* values at or past this round to Inf in the case dtype */
    double fp8_out_scale; /* fp8_out "v_amax": the case's scale_o, 0 until computed */
    af_oracle_honest hon[AF_HONEST_SLOTS];
    /* the comparison in progress: its conventions and honest slot */
    af_conventions conv;
    af_oracle_honest *h;
    double abs_slack; /* added to every bound (denormals "flush") */
    /* masked_rows "mean" / "unmasked": the alternative target of the fully masked rows */
    double *alt, *alt_vscale;
    uint8_t *alt_leak; /* [n]: in alt's model, a zero-weight key holds a non-finite V here */
    uint8_t *alt_plain; /* [nrows]: rows alt's model leaves alone: the reference's 0, or NaN */
    int alt_mode; /* the af_masked_rows computed into alt, -1 none */
    /* denormals "flush": the flushed inputs and their oracle */
    int ftz_state;
    af_scratch ftz_ws;
    af_case_tensors ftz_in;
    af_oracle *ftz;
    /* ... and its gradients' room (af_oracle_grad_ftz), once per case: -1 not yet, 0 / 1
     * whether Q, K, V or dO hold an f32 subnormal */
    int grad_ftz_sub;
    double grad_ftz_slack;
    af_oracle_grads *grads; /* a backward case's (oracle_grad.c) */
    bool backward;          /* the prepared case asks for gradients */
};

void af_oracle_opts_default(af_oracle_opts *o) {
    memset(o, 0, sizeof *o);
    o->fudge = 4.0;
    o->floor_atol[AF_F32] = 1e-5;
    o->floor_atol[AF_F16] = 1e-3;
    o->floor_atol[AF_BF16] = 8e-3;
    o->floor_rtol[AF_F32] = 1.3e-6;
    o->floor_rtol[AF_F16] = 1e-3;
    o->floor_rtol[AF_BF16] = 1.6e-2;
    /* PyTorch's SDPA tests for flash: dQ 4, dK 2, dV 2; the mask's gradient as dK's */
    o->grad_fudge[0] = 4.0;
    o->grad_fudge[1] = o->grad_fudge[2] = o->grad_fudge[3] = 2.0;
}

af_oracle *af_oracle_create(const af_oracle_opts *opts) {
    af_oracle *o = af_calloc(1, sizeof *o);
    if (!o) return NULL;
    if (opts) {
        o->opts = *opts;
    } else {
        af_oracle_opts_default(&o->opts);
    }
    o->h = &o->hon[0];
    o->alt_mode = -1;
    return o;
}

void af_oracle_destroy(af_oracle *o) {
    if (!o) return;
    af_scratch_release(&o->ws);
    af_scratch_release(&o->refws);
    af_oracle_grads_destroy(o->grads);
    for (int s = 0; s < AF_HONEST_SLOTS; s++) af_scratch_release(&o->hon[s].ws);
    af_scratch_release(&o->ftz_ws);
    af_oracle_destroy(o->ftz);
    af_free(o);
}

static af_status af_oracle_setup(af_oracle *o, const af_case_tensors *in, af_error *err) {
    const af_case *c = in->c;
    o->in = in;
    o->dv = c->v_head_dim;
    o->nrows = (size_t)c->batch * c->q_heads * c->q_len;
    o->n = o->nrows * o->dv;
    o->ref = AF_SCRATCH(&o->ws, WS_REF, double, o->n, err);
    o->rows = AF_SCRATCH(&o->ws, WS_ROWS, uint8_t, o->nrows, err);
    o->leak = AF_SCRATCH(&o->ws, WS_LEAK, uint8_t, o->n, err);
    o->vscale = AF_SCRATCH(&o->ws, WS_VSCALE, double, o->nrows, err);
    o->row_max = AF_SCRATCH(&o->ws, WS_ROWMAX, double, o->nrows, err);
    o->key_leak = AF_SCRATCH(&o->ws, WS_KEYLEAK, uint8_t, o->nrows, err);
    o->lse = AF_SCRATCH(&o->ws, WS_LSE, double, o->nrows, err);
    if (!o->ref || !o->rows || !o->leak || !o->vscale || !o->row_max || !o->key_leak || !o->lse) return AF_ERR_NOMEM;
    for (int s = 0; s < AF_HONEST_SLOTS; s++) {
        o->hon[s].ready = false;
        o->hon[s].err = 0.0;
    }
    o->h = &o->hon[0];
    memset(&o->conv, 0, sizeof o->conv);
    o->abs_slack = 0.0;
    o->alt_mode = -1;
    o->ftz_state = AF_FTZ_UNKNOWN;
    o->grad_ftz_sub = -1;
    o->overflow = af_dtype_overflow(c->dtype);
    o->fp8_out_scale = 0.0;
    return AF_OK;
}

void af_oracle_waive(af_oracle *o, af_kind kind, bool on) {
    if (kind == AF_KIND_MASKED_ROW_NAN) o->opts.waive_masked_row_nan = on;
    if (kind == AF_KIND_MASKED_VALUE_LEAK) o->opts.waive_masked_value_leak = on;
}

bool af_oracle_waived(const af_oracle *o, af_kind kind) {
    if (kind == AF_KIND_MASKED_ROW_NAN) return o->opts.waive_masked_row_nan;
    if (kind == AF_KIND_MASKED_VALUE_LEAK) return o->opts.waive_masked_value_leak;
    return false;
}

af_status af_oracle_prepare(af_oracle *o, const af_case_tensors *in, af_error *err) {
    AF_TRY(af_oracle_setup(o, in, err));
    o->target = o->ref;
    af_ref_opts exact = {.leak = o->leak, .row_vscale = o->vscale, .row_max = o->row_max, .key_leak = o->key_leak,
                         .lse = o->lse};
    AF_TRY(af_ref_attention(in, &in->qv, &in->kv, &in->vv, &exact, o->ref, o->rows, &o->refws, err));
    for (size_t r = 0; r < o->nrows; r++)
        if (!(o->vscale[r] > 1e-300)) o->vscale[r] = 1e-300;
    o->backward = in->c->bwd.grads != 0;
    if (o->backward) AF_TRY(af_oracle_grads_prepare(&o->grads, in, err));
    return AF_OK;
}

const double *af_oracle_ref_grad(const af_oracle *o, int g) { return o->backward ? af_oracle_grads_ref(o->grads, g) : NULL; }

af_status af_oracle_compare_grad(af_oracle *o, int g, const af_tensor *got, af_result *res, af_error *err) {
    AF_RETURN_ERROR_IF(!o->backward, err, AF_ERR_INVALID, "the case asks for no gradients");
    return af_oracle_grads_compare(o->grads, &o->opts, o->rows, g, NULL, got, NULL, NULL, NULL, 1.0, false, res, err);
}

af_status af_oracle_compare_grad_pair_within(af_oracle *o, int g, const af_tensor *a, const af_tensor *b,
                                             const uint32_t *row_map, const uint32_t *col_map, const uint8_t *leak_b,
                                             double tol_mult, af_result *res, af_error *err) {
    AF_RETURN_ERROR_IF(!o->backward, err, AF_ERR_INVALID, "the case asks for no gradients");
    return af_oracle_grads_compare(o->grads, &o->opts, o->rows, g, a, b, row_map, col_map, leak_b, tol_mult, false, res,
                                   err);
}

af_status af_oracle_compare_grad_pair(af_oracle *o, int g, const af_tensor *a, const af_tensor *b,
                                      const uint32_t *row_map, const uint32_t *col_map, const uint8_t *leak_b,
                                      af_result *res, af_error *err) {
    AF_RETURN_ERROR_IF(!o->backward, err, AF_ERR_INVALID, "the case asks for no gradients");
    return af_oracle_grads_compare(o->grads, &o->opts, o->rows, g, a, b, row_map, col_map, leak_b, 2.0, false, res, err);
}

af_status af_oracle_prepare_expected(af_oracle *o, const af_case_tensors *in, const double *expected,
                                     af_error *err) {
    /* The reference still runs: the tolerance (honest error, instability) is measured
     * against it; only the comparison target is the expected output. */
    AF_TRY(af_oracle_prepare(o, in, err));
    o->target = AF_SCRATCH(&o->ws, WS_EXPECTED, double, o->n, err);
    if (!o->target) return AF_ERR_NOMEM;
    memcpy(o->target, expected, o->n * sizeof *o->target);
    return AF_OK;
}

const double *af_oracle_ref(const af_oracle *o) { return o->target; }
const uint8_t *af_oracle_masked_rows(const af_oracle *o) { return o->rows; }

/* The honest slot a backend's conventions call for on this case. */
static int af_oracle_honest_slot(const af_oracle *o, const af_conventions *conv) {
    af_dtype dt = o->in->c->dtype;
    int slot = 0;
    if (dt != AF_F32 && (conv->scores_dtype >> dt & 1u)) slot |= AF_HONEST_SCORES_DTYPE;
    if (dt == AF_F32 && conv->tf32_always && !o->in->c->allow_tf32) slot |= AF_HONEST_TF32;
    if (af_conv_flushes(conv, o->in->c->dtype)) slot |= AF_HONEST_FTZ;
    if (dt != AF_F32 && (conv->products_dtype >> dt & 1u)) slot |= AF_HONEST_PRODUCTS;
    return slot;
}

/* fp8_probs: h_F / s for an FP8 case of a format conv declares, else 0. */
static double af_oracle_fp8_h(const af_oracle *o, const af_conventions *conv) {
    const af_case *c = o->in->c;
    if (c->fp8.fmt == AF_FP8_NONE) return 0.0;
    double s = (double)conv->fp8_probs_scale[c->fp8.fmt == AF_FP8_E5M2 ? 1 : 0];
    return s > 0.0 && isfinite(s) ? 0.5 * af_dtype_min_subnormal(c->fp8.fmt == AF_FP8_E5M2 ? AF_E5M2 : AF_E4M3) / s
                                  : 0.0;
}

static af_status af_oracle_make_honest(af_oracle *o, af_error *err) {
    af_oracle_honest *hn = o->h;
    if (hn->ready) return AF_OK;
    int slot = (int)(hn - o->hon);
    hn->out = AF_SCRATCH(&hn->ws, HWS_OUT, double, o->n, err);
    hn->sens = AF_SCRATCH(&hn->ws, HWS_SENS, double, o->n, err);
    hn->unstable = AF_SCRATCH(&hn->ws, HWS_UNSTABLE, uint8_t, o->n, err);
    hn->lse = AF_SCRATCH(&hn->ws, HWS_LSE, double, o->nrows, err);
    hn->lse_sens = AF_SCRATCH(&hn->ws, HWS_LSE_SENS, double, o->nrows, err);
    if (!hn->out || !hn->sens || !hn->unstable || !hn->lse || !hn->lse_sens) return AF_ERR_NOMEM;
    hn->fp8_pv = hn->fp8_abs = NULL;
    hn->fp8_h = af_oracle_fp8_h(o, &o->conv);
    if (o->in->c->fp8.fmt != AF_FP8_NONE) { /* for a backend declaring fp8_probs */
        hn->fp8_pv = AF_SCRATCH(&hn->ws, HWS_FP8_PV, double, o->n, err);
        hn->fp8_abs = AF_SCRATCH(&hn->ws, HWS_FP8_PMAX, double, o->n, err);
        if (!hn->fp8_pv || !hn->fp8_abs) return AF_ERR_NOMEM;
    }
    af_ref_opts honest = {.honest = true, .sens = hn->sens, .unstable = hn->unstable,
                          .lse = hn->lse, .lse_sens = hn->lse_sens,
                          .fp8_pv = hn->fp8_pv, .fp8_abs = hn->fp8_abs, .fp8_h = hn->fp8_h,
                          .scores_dtype = (slot & AF_HONEST_SCORES_DTYPE) != 0,
                          .products_dtype = (slot & AF_HONEST_PRODUCTS) != 0,
                          .tf32 = (slot & AF_HONEST_TF32) != 0, .ftz = (slot & AF_HONEST_FTZ) != 0};
    const af_case_tensors *in = o->in;
    AF_TRY(af_ref_attention(in, &in->qv, &in->kv, &in->vv, &honest, hn->out, NULL, &o->refws, err));
    /* what the score-sensitivity bound does not explain: P and output rounding,
     * accumulation in P V */
    double mx = 0.0;
    for (size_t e = 0; e < o->n; e++) {
        double d = (fabs(hn->out[e] - o->ref[e]) - hn->sens[e]) / o->vscale[e / o->dv];
        if (isfinite(d) && d > mx && !hn->unstable[e]) mx = d;
    }
    hn->err = mx;
    /* the statistics' analogue (log units: no row scale); an expected output has no
     * reference statistics */
    mx = 0.0;
    for (size_t r = 0; o->lse && r < o->nrows; r++) {
        double d = fabs(hn->lse[r] - o->lse[r]) - hn->lse_sens[r];
        if (isfinite(d) && d > mx && !hn->unstable[r * o->dv]) mx = d;
    }
    hn->lse_err = mx;
    hn->ready = true;
    return AF_OK;
}

/* The tolerance of one row (row < nrows) whose V scale is vs: atol in units of vs, times it. */
static af_tolerance af_oracle_tol_at(const af_oracle *o, double vs) {
    af_dtype dt = o->in->c->dtype;
    af_tolerance t;
    t.fudge = o->opts.fudge;
    t.atol = o->opts.floor_atol[dt];
    t.rtol = o->opts.floor_rtol[dt];
    t.honest = false;
    if (o->h->ready && o->opts.fudge * o->h->err > t.atol) {
        t.atol = o->opts.fudge * o->h->err;
        t.honest = true;
    }
    t.atol *= vs;
    return t;
}

static af_tolerance af_oracle_tol(const af_oracle *o, size_t row) { return af_oracle_tol_at(o, o->vscale[row]); }

/* The tolerance of the row with the largest V scale: the loosest atol in force. */
static af_tolerance af_oracle_tol_widest(const af_oracle *o) {
    size_t best = 0;
    for (size_t r = 1; r < o->nrows; r++)
        if (o->vscale[r] > o->vscale[best]) best = r;
    return af_oracle_tol(o, best);
}

af_status af_oracle_tolerance(af_oracle *o, af_tolerance *tol, af_error *err) {
    AF_TRY(af_oracle_make_honest(o, err));
    *tol = af_oracle_tol_widest(o);
    return AF_OK;
}

/* --- masked_rows "mean" and "unmasked" ------------------------------------------------ */

/* alt (for the fully masked rows) under masked_rows "mean": the mean of V over the keys a
 * set-semantics mask masks (their logits all become the same finite number; keys live but
 * at -inf stay out), with the counter dropout's keep mask. A row where no key is
 * set-masked (a row of -inf only) has no mean: alt_plain, the reference's 0 or the NaN of
 * a softmax over -inf (jax xla gives NaN, cuDNN 0). alt_vscale: the largest finite |V|
 * averaged. In a serving case the keys past a row's kv_lens exist in no physical tensor:
 * they count as zero vectors (the padding of the Sk-long batch such an implementation is
 * called on), and a row past a packed segment's queries, which no worker returns, is 0.
 * alt_leak: the keys of weight 0 there (not set-masked, so at -inf; dropped) that hold a
 * non-finite V. */
static af_status af_oracle_alt_mean(af_oracle *o, af_error *err) {
    const af_case_tensors *in = o->in;
    const af_case *c = in->c;
    const size_t Sk = c->kv_len, group = c->q_heads / c->kv_heads;
    float *add = AF_SCRATCH(&o->ws, WS_ADD, float, Sk, err);
    uint8_t *lv = AF_SCRATCH(&o->ws, WS_LIVE, uint8_t, Sk, err);
    uint8_t *keep = AF_SCRATCH(&o->ws, WS_KEEP, uint8_t, Sk, err);
    if (!add || !lv || !keep) return AF_ERR_NOMEM;
    const double p = c->dropout_p;
    const uint64_t thr = af_dropout_threshold(p);
    for (size_t r = 0; r < o->nrows; r++) {
        if (!o->rows[r]) continue;
        uint32_t b = (uint32_t)(r / ((size_t)c->q_heads * c->q_len)), h = (uint32_t)(r / c->q_len % c->q_heads);
        uint32_t i = (uint32_t)(r % c->q_len);
        double *dst = o->alt + r * o->dv;
        uint8_t *lk = o->alt_leak + r * o->dv;
        o->alt_vscale[r] = 1e-300;
        o->alt_plain[r] = 0;
        memset(lk, 0, o->dv);
        if (i >= af_case_seg_q(c, b)) { /* no such row */
            for (size_t d = 0; d < o->dv; d++) dst[d] = 0.0;
            continue;
        }
        const size_t nk = af_case_seg_k(c, b); /* Sk without serving lengths */
        bool all = af_mask_row(in, b, h, i, 0, (uint32_t)Sk, add, lv);
        size_t nmask = 0;
        for (size_t j = 0; !all && j < Sk; j++) nmask += !lv[j];
        if (nmask == 0) {
            o->alt_plain[r] = 1;
            continue;
        }
        if (p > 0.0) af_dropout_keep_row(in, thr, b, h, i, keep);
        double w = p > 0.0 ? 1.0 / ((double)nmask * (1.0 - p)) : 1.0 / (double)nmask;
        for (size_t d = 0; d < o->dv; d++) dst[d] = 0.0;
        double vs = 0.0;
        for (size_t j = 0; j < nk; j++) {
            if (lv[j] || (p > 0.0 && !keep[j])) { /* weight 0: 0 * Inf in an IEEE P @ V */
                for (size_t d = 0; d < o->dv; d++)
                    if (!isfinite(af_view_get(&in->vv, b, h / group, j, d))) lk[d] = 1;
                continue;
            }
            for (size_t d = 0; d < o->dv; d++) {
                double v = af_view_get(&in->vv, b, h / group, j, d);
                dst[d] += w * v;
                if (isfinite(v) && fabs(v) > vs) vs = fabs(v);
            }
        }
        double scale = p > 0.0 && p < 1.0 ? 1.0 / (1.0 - p) : 1.0;
        if (vs * scale > 1e-300) o->alt_vscale[r] = vs * scale;
    }
    return AF_OK;
}

/* alt under masked_rows "unmasked": the reference of the case without its set-semantics
 * masks (an implementation that adds them as a finite bias: a fully masked row is then
 * softmax(s + bias) over every key, the additive mask still applied). */
static af_status af_oracle_alt_unmasked(af_oracle *o, af_error *err) {
    af_case c2 = *o->in->c;
    c2.causal = false;
    c2.key_padding = false;
    c2.window_left = c2.window_right = -1;
    c2.bmask.present = false;
    af_case_tensors in2 = *o->in;
    in2.c = &c2;
    af_ref_opts exact = {.row_vscale = o->alt_vscale, .leak = o->alt_leak};
    AF_TRY(af_ref_attention(&in2, &in2.qv, &in2.kv, &in2.vv, &exact, o->alt, NULL, &o->refws, err));
    for (size_t r = 0; r < o->nrows; r++)
        if (!(o->alt_vscale[r] > 1e-300)) o->alt_vscale[r] = 1e-300;
    return AF_OK;
}

static af_status af_oracle_make_alt(af_oracle *o, af_masked_rows mode, af_error *err) {
    if (o->alt_mode == (int)mode) return AF_OK;
    bool any = false;
    for (size_t r = 0; r < o->nrows && !any; r++) any = o->rows[r] != 0;
    o->alt = AF_SCRATCH(&o->ws, WS_ALT, double, o->n, err);
    o->alt_vscale = AF_SCRATCH(&o->ws, WS_ALT_VSCALE, double, o->nrows, err);
    o->alt_leak = AF_SCRATCH(&o->ws, WS_ALT_LEAK, uint8_t, o->n, err);
    o->alt_plain = AF_SCRATCH(&o->ws, WS_ALT_PLAIN, uint8_t, o->nrows, err);
    if (!o->alt || !o->alt_vscale || !o->alt_leak || !o->alt_plain) return AF_ERR_NOMEM;
    memset(o->alt_plain, 0, o->nrows);
    if (any) AF_TRY(mode == AF_ROWS_MEAN ? af_oracle_alt_mean(o, err) : af_oracle_alt_unmasked(o, err));
    o->alt_mode = (int)mode;
    return AF_OK;
}

/* --- denormals "flush" --------------------------------------------------------------- */

/* Flushes the f32-subnormal values of a buffer of dtype dt in place (f16 subnormals are
 * normal f32 numbers: an FTZ/DAZ unit computing in f32 keeps them); returns how many. */
static size_t af_oracle_flush(void *data, size_t bytes, af_dtype dt) {
    size_t n = 0;
    if (dt == AF_F32) {
        float *f = data;
        for (size_t i = 0; i < bytes / sizeof *f; i++)
            if (f[i] != 0.0f && fabsf(f[i]) < (float)AF_FTZ_MIN) f[i] = copysignf(0.0f, f[i]), n++;
    } else if (dt == AF_BF16) {
        uint16_t *u = data;
        for (size_t i = 0; i < bytes / sizeof *u; i++)
            if ((u[i] & 0x7f80u) == 0 && (u[i] & 0x007fu) != 0) u[i] &= 0x8000u, n++;
    }
    return n;
}

/* Prepares the oracle of the flushed inputs (o->ftz) when the inputs hold an f32-subnormal
 * value; AF_FTZ_NONE when they hold none (the oracle itself then serves). Each distinct
 * buffer (a packed QKV buffer once) is copied, flushed, and the views rebased onto it. */
static af_status af_oracle_make_ftz(af_oracle *o, af_error *err) {
    if (o->ftz_state != AF_FTZ_UNKNOWN) return AF_OK;
    const af_case_tensors *in = o->in;
    o->ftz_in = *in;
    af_case_tensors *f = &o->ftz_in;
    af_tensor *ts[4] = {&f->q, &f->k, &f->v, &f->amask};
    const af_tensor *orig[4] = {&in->q, &in->k, &in->v, &in->amask};
    af_view *views[4] = {&f->qv, &f->kv, &f->vv, &f->am};
    size_t flushed = 0;
    for (int t = 0; t < 4; t++) {
        if (t == 3 && !in->c->amask.present) break;
        const unsigned char *base = orig[t]->data;
        size_t span = af_tensor_span(orig[t]);
        int same = -1;
        for (int u = 0; u < t; u++)
            if (orig[u]->data == orig[t]->data) same = u;
        if (same >= 0) {
            ts[t]->data = ts[same]->data;
        } else {
            void *copy = af_scratch_get(&o->ftz_ws, t, span, err);
            if (!copy) return AF_ERR_NOMEM;
            memcpy(copy, base, span);
            flushed += af_oracle_flush(copy, span, orig[t]->dtype);
            ts[t]->data = copy;
        }
        /* every view that points into this buffer follows it */
        for (int v = 0; v < 4; v++) {
            const af_view *ov = v == 0 ? &in->qv : v == 1 ? &in->kv : v == 2 ? &in->vv : &in->am;
            if (v == 3 && !in->c->amask.present) continue;
            const unsigned char *p = ov->data;
            if (p >= base && p < base + span) views[v]->data = (const unsigned char *)ts[t]->data + (p - base);
        }
    }
    if (!flushed) {
        o->ftz_state = AF_FTZ_NONE;
        return AF_OK;
    }
    if (!o->ftz) {
        o->ftz = af_oracle_create(&o->opts);
        AF_RETURN_ERROR_IF(!o->ftz, err, AF_ERR_NOMEM, "out of memory");
    }
    AF_TRY(af_oracle_prepare(o->ftz, &o->ftz_in, err));
    o->ftz_state = AF_FTZ_READY;
    return AF_OK;
}

/* --- comparing ------------------------------------------------------------------------- */

/* The key_leak flags (ref.h) that explain a NaN for a backend of conventions conv: a masked
 * key's non-finite score always; one that is +Inf only in the dtype where it declared its
 * scores in the dtype. */
static uint8_t af_oracle_key_leak_bits(const af_conventions *conv, af_dtype dt) {
    bool lowp = dt != AF_F32 && (conv->scores_dtype >> dt & 1u);
    return (uint8_t)(AF_KEY_LEAK_ANY | (lowp ? AF_KEY_LEAK_DTYPE : 0));
}

/* fp8_out "v_amax" (conventions.h): the case's scale_o, 2^floor(log2(P2 / 2 / amax)) with
 * amax the largest finite |V| (dequantized), 1 without one; computed once per case. */
static double af_oracle_fp8_out_scale(af_oracle *o, af_dtype fmt) {
    if (o->fp8_out_scale > 0.0) return o->fp8_out_scale;
    const af_view *v = &o->in->vv;
    double amax = 0.0;
    for (size_t a = 0; a < v->ne[0]; a++)
        for (size_t b = 0; b < v->ne[1]; b++)
            for (size_t i = 0; i < v->ne[2]; i++)
                for (size_t d = 0; d < v->ne[3]; d++) {
                    double x = fabs(af_view_get(v, a, b, i, d));
                    if (isfinite(x) && x > amax) amax = x;
                }
    double p2 = ldexp(1.0, ilogb(af_dtype_max(fmt)));
    o->fp8_out_scale = amax > 0.0 ? ldexp(1.0, (int)floor(log2(p2 / 2.0 / amax))) : 1.0;
    return o->fp8_out_scale;
}

/* An FP8 case under conventions conv: the factors of the fp8_probs bound (ref.h's fp8_pv and
 * fp8_abs; 0 without the convention), u_F and 1 widened for the honest run's P (rounded to
 * the case dtype, fp32 exponentials) standing for the exact one; and the rounding fp8_out
 * "v_amax" adds to the output's, relative and absolute. */
static void af_oracle_fp8_model(af_oracle *o, const af_conventions *conv, double *pu, double *pa, double *out_rel,
                                double *out_abs) {
    const af_case *c = o->in->c;
    *pu = *pa = *out_rel = *out_abs = 0.0;
    if (c->fp8.fmt == AF_FP8_NONE) return;
    af_dtype fmt = c->fp8.fmt == AF_FP8_E5M2 ? AF_E5M2 : AF_E4M3;
    double h = 0.5 * af_dtype_min_subnormal(fmt);
    if (af_oracle_fp8_h(o, conv) > 0.0) {
        double widen = 1.0 + 4.0 * af_dtype_eps(c->dtype);
        *pu = af_dtype_eps(fmt) * widen;
        *pa = widen;
    }
    if (conv->fp8_out == AF_FP8_OUT_V_AMAX) {
        *out_rel = af_dtype_eps(fmt);
        *out_abs = h / af_oracle_fp8_out_scale(o, fmt);
    }
}

/* The largest |q_d k_d| over the keys and the head dim of query row ra (B, Hq, Sq order),
 * NaN products skipped (an Inf one counts): the metric fail_product_max. NaN where the
 * prepared K is not one dense [B, Hkv, Sk, D] view (the serving forms' pages and segments). */
static double af_oracle_row_product_max(const af_oracle *o, size_t ra) {
    const af_case *c = o->in->c;
    const af_view *qv = &o->in->qv, *kv = &o->in->kv;
    if (kv->ne[0] != c->batch || kv->ne[1] != c->kv_heads || kv->ne[2] != c->kv_len || kv->ne[3] != c->head_dim ||
        qv->ne[0] != c->batch || qv->ne[1] != c->q_heads || qv->ne[2] != c->q_len || qv->ne[3] != c->head_dim)
        return (double)NAN;
    size_t b = ra / ((size_t)c->q_heads * c->q_len), h = ra / c->q_len % c->q_heads, i = ra % c->q_len;
    size_t hk = h / (c->q_heads / c->kv_heads);
    double best = 0.0;
    for (size_t j = 0; j < c->kv_len; j++)
        for (size_t d = 0; d < c->head_dim; d++) {
            double p = fabs(af_view_get(qv, b, h, i, d) * af_view_get(kv, b, hk, j, d));
            if (p > best) best = p;
        }
    return best;
}

/* One pass: compare `got` with `want` (the reference, or a's output for pairs). leak_b
 * (may be NULL) flags the elements of `got` where a zero-weight key holds a non-finite
 * V in the case `got` was computed on; else the prepared case's flags apply. The
 * conventions in o->conv apply (alt rows only against the reference itself). */
static void af_oracle_pass(af_oracle *o, const af_tensor *want_t, const double *want_ref, const af_tensor *got,
                           const uint32_t *row_map, const uint8_t *leak_b, double tol_mult, af_result *res) {
    af_metrics *m = &res->m;
    memset(res, 0, sizeof *res);
    res->tol = af_oracle_tol_widest(o);
    res->tol.atol *= tol_mult;
    res->tol.rtol *= tol_mult;
    m->fail_score_max = m->fail_product_max = (double)NAN;
    double row_prod = (double)NAN; /* this row's product max, computed at its first failing element */
    const af_case *c = o->in->c;
    const af_oracle_honest *hn = o->h;
    const af_masked_rows rows_conv = af_conv_masked_rows(&o->conv, c->dtype);
    const bool alt = want_ref && want_ref == o->ref && o->alt_mode >= 0 &&
                     (rows_conv == AF_ROWS_MEAN || rows_conv == AF_ROWS_UNMASKED);
    const bool keys_ieee = o->conv.masked_keys_ieee;
    const uint8_t key_leaks = af_oracle_key_leak_bits(&o->conv, o->in->c->dtype);
    size_t rows = got->ne[0] * got->ne[1] * got->ne[2];
    size_t dv = o->dv;
    double rel_a, abs_a, rel_b, abs_b;
    af_out_rounding(want_t, &rel_a, &abs_a);
    af_out_rounding(got, &rel_b, &abs_b);
    double fp8_u, fp8_a, fp8_rel, fp8_abs;
    af_oracle_fp8_model(o, &o->conv, &fp8_u, &fp8_a, &fp8_rel, &fp8_abs);
    const bool fp8_probs = hn->ready && hn->fp8_pv && fp8_u > 0.0 && hn->fp8_h == af_oracle_fp8_h(o, &o->conv);
    const double out_rel = rel_a + rel_b + fp8_rel, out_abs = abs_a + abs_b + fp8_abs + o->abs_slack;
    double overflow = o->overflow;
    if (got->dtype == AF_F16 || got->dtype == AF_BF16) {
        double ov = af_dtype_overflow(got->dtype);
        overflow = ov < overflow ? ov : overflow;
    }
    double fro[2] = {0.0, 0.0};
    double worst = -1.0;
    for (size_t r = 0; r < rows; r++) {
        size_t ra = row_map ? row_map[r] : r;
        bool in_masked = o->rows[ra] != 0;
        /* a fully masked row of a backend whose convention gives it another value is
         * compared with that value, as a row like any other; a row that convention leaves
         * alone (alt_plain) is the reference's 0, or NaN */
        bool plain = alt && in_masked && o->alt_plain[ra];
        bool use_alt = alt && in_masked && !plain;
        bool masked = in_masked && !use_alt;
        af_tolerance tol = use_alt ? af_oracle_tol_at(o, o->alt_vscale[ra]) : af_oracle_tol(o, ra);
        tol.atol *= tol_mult;
        tol.rtol *= tol_mult;
        for (size_t d = 0; d < dv; d++) {
            size_t ea = ra * dv + d, eb = r * dv + d;
            double want = use_alt ? o->alt[ea] : want_ref ? want_ref[ea] : af_out_at(want_t, ea);
            double out = af_out_at(got, eb);
            int cw = af_class(want), co = af_class(out);
            /* the risk flags (no implementation at this precision is bound there) hold for an
             * alternative target too; the class comparison is the reference's */
            bool unstable = hn->ready && (hn->unstable[ea] || (!use_alt && af_class(hn->out[ea]) != af_class(o->ref[ea])));
            double ratio;
            bool failed = true, waived = false;
            /* under the FP8 model the error may exceed |want|: an Inf of either sign the bound reaches */
            bool fp8_model = fp8_probs || fp8_rel > 0.0;
            if (cw != co && hn->ready && (co == 2 || co == 3) && cw == 0 && (fp8_model || (want > 0) == (co == 2))) {
                /* rounding a value this close to the dtype's largest may overflow */
                double bound = tol.atol + tol.rtol * fabs(want) + (use_alt ? 0.0 : tol_mult * tol.fudge * hn->sens[ea]);
                if (fp8_probs && !use_alt) bound += tol_mult * (fp8_u * hn->fp8_pv[ea] + fp8_a * hn->fp8_abs[ea]);
                bound += fp8_rel * (fabs(want) + bound) + fp8_abs;
                if ((co == 2 ? want : -want) + bound >= overflow) unstable = true;
            }
            if (cw != co) {
                if (unstable) {
                    m->n_unstable++;
                    continue;
                }
                if (co == 1 && keys_ieee && (o->key_leak[ra] & key_leaks)) {
                    /* masked_keys "ieee": a set-masked key's NaN or +Inf score plus -inf */
                    m->n_masked_key_nan++;
                    continue;
                }
                /* in an alternative row, the zero-weight keys of its own model */
                bool leak = leak_b ? leak_b[eb] != 0 : use_alt ? o->alt_leak[ea] != 0 : o->leak[ea] != 0;
                if (co == 1 && masked && cw != 1 && !(leak && o->opts.waive_masked_value_leak)) {
                    /* a fully masked row that is NaN; when a zero-weight key of the row
                     * holds a non-finite V (every key has weight 0 here) and the backend
                     * declared IEEE P @ V (masked_values "ieee"), 0 * Inf explains the NaN
                     * and it counts as the masked_value_leak below instead */
                    m->n_masked_row_nan += !plain; /* NaN is what a plain row may give */
                    waived = o->opts.waive_masked_row_nan || plain;
                } else if (co == 1 && leak) {
                    /* NaN only through a key of weight 0 (0 * Inf, 0 * NaN): IEEE
                     * arithmetic, a legitimate choice, not a nan_mismatch */
                    m->n_masked_value_leak++;
                    waived = o->opts.waive_masked_value_leak;
                } else if (co == 1 || cw == 1) {
                    m->n_nan++;
                    if (co != 1) m->n_nan_ref++;
                } else {
                    m->n_inf++;
                }
                ratio = HUGE_VAL;
            } else if (cw != 0) {
                continue; /* the same NaN or Inf */
            } else {
                double bound = tol.atol + tol.rtol * fabs(want);
                if (hn->ready && !use_alt) bound += tol_mult * tol.fudge * hn->sens[ea];
                /* fp8_probs: the rounding of P itself, a bound (no fudge) */
                if (fp8_probs && !use_alt) bound += tol_mult * (fp8_u * hn->fp8_pv[ea] + fp8_a * hn->fp8_abs[ea]);
                /* an output stored in f16/bf16 carries that final rounding */
                ratio = af_oracle_measure(m, out, want, bound, tol.atol, out_rel, out_abs, fro);
                if (ratio > 1.0) {
                    if (unstable) {
                        m->n_unstable++;
                        continue;
                    }
                    m->n_diverge++;
                } else {
                    failed = false;
                }
            }
            if (waived) {
                /* a kind the backend's conventions (or --waive) allow: counted, but it is
                 * no failing element, neither the worst nor where a finding sits */
                m->n_waived++;
                continue;
            }
            if (failed) {
                /* where the failing elements sit (known.h matches on it): in fully masked
                 * rows, and the rows' largest scores (a NaN score counts as +Inf) */
                double rm = isnan(o->row_max[ra]) ? HUGE_VAL : o->row_max[ra];
                if (in_masked) m->n_fail_masked++;
                if (isnan(m->fail_score_max) || rm > m->fail_score_max) m->fail_score_max = rm;
                if (isnan(row_prod)) row_prod = af_oracle_row_product_max(o, ra);
                if (isnan(m->fail_product_max) || row_prod > m->fail_product_max) m->fail_product_max = row_prod;
            }
            if (ratio > worst) {
                worst = ratio;
                m->worst[0] = ra / ((size_t)c->q_heads * c->q_len);
                m->worst[1] = ra / c->q_len % c->q_heads;
                m->worst[2] = ra % c->q_len;
                m->worst[3] = d;
                m->worst_out = out;
                m->worst_ref = want;
                res->tol = tol; /* the tolerance of the worst element's row */
            }
        }
    }
    m->worst_ratio = worst < 0 ? 0.0 : worst;
    m->rel_fro = fro[1] > 0 ? sqrt(fro[0] / fro[1]) : sqrt(fro[0]);
    res->kind = af_oracle_kind_of(m, &o->opts);
}

static af_status af_oracle_check(af_oracle *o, const af_tensor *want_t, const double *want_ref, const af_tensor *got,
                                 const uint32_t *row_map, const uint8_t *leak_b, double tol_mult, af_result *res,
                                 af_error *err) {
    AF_RETURN_ERROR_IF(got->ndim != 4 || got->ne[3] != o->dv || got->ne[1] != o->in->c->q_heads ||
                           got->ne[2] != o->in->c->q_len || !af_oracle_out_dtype_ok(got->dtype) ||
                           (want_t && !af_oracle_out_dtype_ok(want_t->dtype)),
                       err, AF_ERR_INVALID, "output has the wrong shape or dtype for this case");
    af_oracle_pass(o, want_t, want_ref, got, row_map, leak_b, tol_mult, res);
    bool failing = res->m.n_nan || res->m.n_inf || res->m.n_masked_row_nan || res->m.n_masked_value_leak ||
                   res->m.n_diverge;
    if (failing && !o->h->ready) {
        AF_TRY(af_oracle_make_honest(o, err));
        af_oracle_pass(o, want_t, want_ref, got, row_map, leak_b, tol_mult, res);
    }
    return AF_OK;
}

af_status af_oracle_compare(af_oracle *o, const af_tensor *out, af_result *res, af_error *err) {
    AF_RETURN_ERROR_IF(out->ne[0] != o->in->c->batch, err, AF_ERR_INVALID, "output has the wrong batch size");
    return af_oracle_check(o, NULL, o->target, out, NULL, NULL, 1.0, res, err);
}

/* af_oracle_compare under conventions conv, every bound widened by slack. */
static af_status af_oracle_compare_in(af_oracle *o, const af_tensor *out, const af_conventions *conv, double slack,
                                      af_result *res, af_error *err) {
    bool against_ref = o->target == o->ref;
    af_oracle_opts saved = o->opts;
    const af_masked_rows rows = af_conv_masked_rows(conv, o->in->c->dtype);
    if (rows == AF_ROWS_NAN) o->opts.waive_masked_row_nan = true;
    if (conv->masked_values_ieee) o->opts.waive_masked_value_leak = true;
    if (against_ref && (rows == AF_ROWS_MEAN || rows == AF_ROWS_UNMASKED)) {
        af_status st = af_oracle_make_alt(o, rows, err);
        if (st != AF_OK) {
            o->opts = saved;
            return st;
        }
    }
    o->conv = *conv;
    o->h = &o->hon[af_oracle_honest_slot(o, conv)];
    /* an honest run made for another fp8_probs scale (or none) is made again for this one */
    if (o->h->ready && o->in->c->fp8.fmt != AF_FP8_NONE && o->h->fp8_h != af_oracle_fp8_h(o, conv)) o->h->ready = false;
    o->abs_slack = slack;
    af_status st = af_oracle_check(o, NULL, o->target, out, NULL, NULL, 1.0, res, err);
    o->opts = saved;
    memset(&o->conv, 0, sizeof o->conv);
    o->h = &o->hon[0];
    o->abs_slack = 0.0;
    return st;
}

af_status af_oracle_compare_conv(af_oracle *o, const af_tensor *out, const af_conventions *conv, af_result *res,
                                 af_error *err) {
    static const af_conventions none;
    if (!conv) conv = &none;
    AF_RETURN_ERROR_IF(out->ne[0] != o->in->c->batch, err, AF_ERR_INVALID, "output has the wrong batch size");
    if (!af_conv_flushes(conv, o->in->c->dtype)) return af_oracle_compare_in(o, out, conv, 0.0, res, err);
    /* FTZ/DAZ: each flushed product or partial sum (Q.K over D, P V over Sk) is off by less
     * than the smallest normal; and against the flushed inputs when they had subnormals */
    const af_case *c = o->in->c;
    double slack = AF_FTZ_MIN * (2.0 * c->kv_len + 2.0 * c->head_dim + 4.0);
    af_conventions rest = *conv; /* compare_in does not delegate again; its honest slot flushes */
    if (o->target == o->ref) {
        AF_TRY(af_oracle_make_ftz(o, err));
        if (o->ftz_state == AF_FTZ_READY) {
            o->ftz->opts.waive_masked_row_nan = o->opts.waive_masked_row_nan;
            o->ftz->opts.waive_masked_value_leak = o->opts.waive_masked_value_leak;
            AF_TRY(af_oracle_compare_in(o->ftz, out, &rest, slack, res, err));
            if (res->kind == AF_KIND_OK) return AF_OK;
            /* "flush" says the backend may flush, not that every kernel of it does (PyTorch's
             * CPU bf16 GEMM flushes on the oneDNN path of larger products only): the
             * unflushed inputs' answer is right too (a subnormal Q against an Inf K is then
             * +-Inf, not NaN) */
            af_result kept;
            AF_TRY(af_oracle_compare_in(o, out, &rest, slack, &kept, err));
            if (kept.kind == AF_KIND_OK) *res = kept;
            return AF_OK;
        }
    }
    return af_oracle_compare_in(o, out, &rest, slack, res, err);
}

/* The largest |x| over a view's elements, and whether one is an f32 subnormal (what an
 * FTZ/DAZ unit reads as 0; f16's are normal f32 numbers). */
static double af_view_maxabs_sub(const af_view *v, bool *subnormal) {
    double m = 0.0;
    for (size_t a = 0; a < v->ne[0]; a++)
        for (size_t b = 0; b < v->ne[1]; b++)
            for (size_t i = 0; i < v->ne[2]; i++)
                for (size_t d = 0; d < v->ne[3]; d++) {
                    double x = fabs(af_view_get(v, a, b, i, d));
                    if (x > m) m = x;
                    if (x != 0.0 && x < AF_FTZ_MIN && v->dtype != AF_F16) *subnormal = true;
                }
    return m;
}

/* FTZ/DAZ on the gradients, once per case: whether Q, K, V or dO hold a subnormal (then
 * they are not modelled, as with the forward's flushed inputs); and each product or partial sum of the
 * backward that lands below the smallest normal is flushed, which moves a gradient element
 * by less than that times the largest factor met on the way (scale, Q, K, V, dO) for every
 * term it sums (Sq for dK and dV, Sk for dQ, D and Dv for dP and the delta). */
static void af_oracle_grad_ftz(af_oracle *o) {
    if (o->grad_ftz_sub >= 0) return;
    const af_case *c = o->in->c;
    bool sub = false;
    double m = 1.0;
    const af_view *vs[4] = {&o->in->qv, &o->in->kv, &o->in->vv, &o->in->dov};
    for (int t = 0; t < 4; t++) m = fmax(m, af_view_maxabs_sub(vs[t], &sub));
    m *= fmax(1.0, fabs(af_case_scale(c)));
    o->grad_ftz_sub = sub;
    o->grad_ftz_slack = AF_FTZ_MIN * m * (2.0 * (c->q_len + c->kv_len + c->head_dim + c->v_head_dim) + 8.0);
}

af_status af_oracle_compare_grad_conv(af_oracle *o, int g, const af_tensor *got, const af_conventions *conv,
                                      af_result *res, af_error *err) {
    static const af_conventions none;
    if (!conv) conv = &none;
    AF_RETURN_ERROR_IF(!o->backward, err, AF_ERR_INVALID, "the case asks for no gradients");
    const af_case *c = o->in->c;
    bool any_masked = false, any_key_leak = false;
    for (size_t r = 0; r < o->nrows; r++) {
        any_masked |= o->rows[r] != 0;
        any_key_leak |= (o->key_leak[r] & af_oracle_key_leak_bits(conv, c->dtype)) != 0;
    }
    bool ftz = false;
    double slack = 0.0;
    if (af_conv_flushes(conv, c->dtype)) {
        AF_TRY(af_oracle_make_ftz(o, err)); /* subnormal Q, K, V or additive mask */
        af_oracle_grad_ftz(o);
        ftz = o->ftz_state == AF_FTZ_READY || o->grad_ftz_sub;
        slack = o->grad_ftz_slack;
    }
    AF_RETURN_ERROR_IF(af_conv_masked_rows(conv, c->dtype) != AF_ROWS_ZERO && any_masked, err, AF_ERR_UNSUPPORTED,
                       "masked_rows \"%s\" with a fully masked row: its gradients are not modelled",
                       af_masked_rows_names[af_conv_masked_rows(conv, c->dtype)]);
    AF_RETURN_ERROR_IF(c->dtype != AF_F32 && (conv->scores_dtype >> c->dtype & 1u), err, AF_ERR_UNSUPPORTED,
                       "scores \"dtype\" in %s: its gradients are not modelled", af_dtype_names[c->dtype]);
    AF_RETURN_ERROR_IF(ftz, err, AF_ERR_UNSUPPORTED, "denormals \"flush\" on subnormal inputs: its gradients are not modelled");
    AF_RETURN_ERROR_IF(conv->masked_keys_ieee && any_key_leak, err, AF_ERR_UNSUPPORTED,
                       "masked_keys \"ieee\" with a non-finite masked score: its gradients are not modelled");
    af_oracle_opts opts = o->opts;
    opts.waive_masked_value_leak |= conv->masked_values_ieee;
    bool tf32 = conv->tf32_always && c->dtype == AF_F32;
    return af_oracle_grads_compare_slack(o->grads, &opts, o->rows, g, got, slack, tf32, res, err);
}

af_status af_oracle_compare_pair(af_oracle *o, const af_tensor *a, const af_tensor *b, const uint32_t *row_map,
                                 af_result *res, af_error *err) {
    return af_oracle_check(o, a, NULL, b, row_map, NULL, 2.0, res, err);
}

af_status af_oracle_compare_pair_leak(af_oracle *o, const af_tensor *a, const af_tensor *b, const uint32_t *row_map,
                                      const uint8_t *leak_b, af_result *res, af_error *err) {
    return af_oracle_check(o, a, NULL, b, row_map, leak_b, 2.0, res, err);
}

af_status af_oracle_compare_pair_within(af_oracle *o, const af_tensor *a, const af_tensor *b, const uint32_t *row_map,
                                        const uint8_t *leak_b, double tol_mult, af_result *res, af_error *err) {
    return af_oracle_check(o, a, NULL, b, row_map, leak_b, tol_mult, res, err);
}

/* Bitwise: no tolerance, no reference; a difference in the last bit is one. */
af_status af_oracle_compare_bitwise(const af_tensor *a, const af_tensor *b, const uint32_t *row_map, af_kind kind,
                                    af_result *res, af_error *err) {
    memset(res, 0, sizeof *res);
    res->m.fail_score_max = res->m.fail_product_max = (double)NAN;
    AF_RETURN_ERROR_IF(a->ndim < 1 || b->ndim != a->ndim || a->ne[a->ndim - 1] != b->ne[b->ndim - 1], err,
                       AF_ERR_INVALID, "bitwise: the two tensors' rows differ in length");
    size_t len = a->ne[a->ndim - 1], na = af_tensor_numel(a), nb = af_tensor_numel(b);
    AF_RETURN_ERROR_IF(!row_map && na != nb, err, AF_ERR_INVALID, "bitwise: %zu elements against %zu", na, nb);
    size_t esa = af_dtype_size(a->dtype), esb = af_dtype_size(b->dtype);
    bool first = true;
    for (size_t r = 0; len && r < nb / len; r++) {
        size_t ra = row_map ? row_map[r] : r;
        AF_RETURN_ERROR_IF((ra + 1) * len > na, err, AF_ERR_INVALID, "bitwise: row %zu maps outside (%zu)", r, ra);
        for (size_t d = 0; d < len; d++) {
            double x = af_dtype_load(a->dtype, a->data, (ra * len + d) * esa);
            double y = af_dtype_load(b->dtype, b->data, (r * len + d) * esb);
            if ((isnan(x) && isnan(y)) || memcmp(&x, &y, sizeof x) == 0) continue;
            res->m.n_diverge++;
            double diff = fabs(x - y);
            if (isfinite(diff) && diff > res->m.max_abs) res->m.max_abs = diff;
            if (!first) continue;
            first = false;
            size_t e = ra * len + d; /* (b, h, i, d) of a 4-D tensor; the leading dims folded otherwise */
            size_t ne1 = a->ndim == 4 ? a->ne[1] : 1, ne2 = a->ndim >= 3 ? a->ne[a->ndim - 2] : 1;
            res->m.worst[3] = e % len;
            res->m.worst[2] = e / len % ne2;
            res->m.worst[1] = e / len / ne2 % ne1;
            res->m.worst[0] = e / len / ne2 / ne1;
            res->m.worst_out = y;
            res->m.worst_ref = x;
        }
    }
    if (res->m.n_diverge) {
        res->kind = kind;
        res->m.worst_ratio = (double)INFINITY;
    }
    return AF_OK;
}

/* --- signatures -------------------------------------------------------------------- */

enum {
    AF_FEAT_DTYPE = 0,      /* 2 bits */
    AF_FEAT_TF32 = 2,
    AF_FEAT_LAYOUT_Q = 3,   /* 3 bits each */
    AF_FEAT_LAYOUT_K = 6,
    AF_FEAT_LAYOUT_V = 9,
    AF_FEAT_AMASK = 12,
    AF_FEAT_BMASK = 13,
    AF_FEAT_CAUSAL = 14,
    AF_FEAT_DIAG = 15,      /* 2 bits, when causal or windowed */
    AF_FEAT_PADDING = 17,
    AF_FEAT_WINDOW = 18,
    AF_FEAT_GQA = 19,
    AF_FEAT_CROSS = 20,
    AF_FEAT_DV = 21,
    AF_FEAT_DROPOUT = 22,
    AF_FEAT_SOFTCAP = 23,
    AF_FEAT_PLACEMENT = 24, /* 2 bits */
    AF_FEAT_STRIDED = 26,
    AF_FEAT_SPECIAL = 27,
    AF_FEAT_SCALE = 28,
    AF_FEAT_MASK_DTYPE = 29,
    AF_FEAT_OVERFLOW = 30,
    AF_FEAT_DENORMAL = 31,
    AF_FEAT_SERVING = 32,   /* af_case_serving_features: forms, split-KV, symmetric ALiBi (0 for a dense case) */
    AF_FEAT_BITS = 40
};

uint64_t af_case_features(const af_case *c) {
    uint64_t f = 0;
    f |= (uint64_t)c->dtype << AF_FEAT_DTYPE;
    f |= (uint64_t)c->allow_tf32 << AF_FEAT_TF32;
    f |= (uint64_t)c->t[AF_Q].layout << AF_FEAT_LAYOUT_Q;
    f |= (uint64_t)c->t[AF_K].layout << AF_FEAT_LAYOUT_K;
    f |= (uint64_t)c->t[AF_V].layout << AF_FEAT_LAYOUT_V;
    f |= (uint64_t)c->amask.present << AF_FEAT_AMASK;
    f |= (uint64_t)c->bmask.present << AF_FEAT_BMASK;
    f |= (uint64_t)c->causal << AF_FEAT_CAUSAL;
    if (c->causal || af_case_has_window(c)) f |= (uint64_t)c->diag << AF_FEAT_DIAG;
    f |= (uint64_t)c->key_padding << AF_FEAT_PADDING;
    f |= (uint64_t)af_case_has_window(c) << AF_FEAT_WINDOW;
    f |= (uint64_t)(c->q_heads != c->kv_heads) << AF_FEAT_GQA;
    f |= (uint64_t)(c->q_len != c->kv_len) << AF_FEAT_CROSS;
    f |= (uint64_t)(c->head_dim != c->v_head_dim) << AF_FEAT_DV;
    f |= (uint64_t)(c->dropout_p > 0.0) << AF_FEAT_DROPOUT;
    f |= (uint64_t)(c->softcap > 0.0) << AF_FEAT_SOFTCAP;
    f |= (uint64_t)c->placement << AF_FEAT_PLACEMENT;
    bool strided = false, special = false, overflow = false, denormal = false;
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        strided |= c->t[t].perm || c->t[t].pad || c->t[t].bcast != AF_BCAST_NONE;
        special |= c->t[t].special != AF_SPECIAL_NONE;
        overflow |= c->t[t].dist == AF_DIST_NEAR_OVERFLOW;
        denormal |= c->t[t].dist == AF_DIST_DENORMAL;
    }
    f |= (uint64_t)strided << AF_FEAT_STRIDED;
    f |= (uint64_t)special << AF_FEAT_SPECIAL;
    f |= (uint64_t)c->scale_set << AF_FEAT_SCALE;
    f |= (uint64_t)(c->amask.present && c->amask.dtype != c->dtype) << AF_FEAT_MASK_DTYPE;
    f |= (uint64_t)overflow << AF_FEAT_OVERFLOW;
    f |= (uint64_t)denormal << AF_FEAT_DENORMAL;
    f |= (uint64_t)af_case_serving_features(c) << AF_FEAT_SERVING;
    return f;
}

void af_case_features_str(const af_case *c, char *buf, size_t len) {
    size_t n = 0;
#define AF_PUT(...)                                                                                \
    do {                                                                                           \
        int w_ = n < len ? snprintf(buf + n, len - n, __VA_ARGS__) : 0;                            \
        if (w_ > 0) n += (size_t)w_;                                                               \
    } while (0)
    if (len) buf[0] = 0;
    AF_PUT("%s%s", af_dtype_names[c->dtype], c->allow_tf32 ? "+tf32" : "");
    if (af_case_is_packed(c)) {
        AF_PUT(" %s", af_layout_names[c->t[AF_Q].layout]);
    } else {
        AF_PUT(" q:%s k:%s v:%s", af_layout_names[c->t[AF_Q].layout], af_layout_names[c->t[AF_K].layout],
               af_layout_names[c->t[AF_V].layout]);
    }
    if (c->q_heads != c->kv_heads) AF_PUT(" gqa");
    if (c->q_len != c->kv_len) AF_PUT(" sq!=sk");
    if (c->head_dim != c->v_head_dim) AF_PUT(" d!=dv");
    if (c->causal) AF_PUT(" causal:%s", af_diag_names[c->diag]);
    if (af_case_has_window(c)) AF_PUT(" window(%d,%d)", c->window_left, c->window_right);
    if (c->key_padding) AF_PUT(" key_padding");
    if (c->amask.present) AF_PUT(" additive_mask:%s", af_dtype_names[c->amask.dtype]);
    if (c->bmask.present) AF_PUT(" bool_mask");
    if (c->scale_set) AF_PUT(" scale=%g@%s", c->scale, af_placement_names[c->placement]);
    if (c->softcap > 0.0) AF_PUT(" softcap=%g", c->softcap);
    if (c->dropout_p > 0.0) AF_PUT(" dropout=%g", c->dropout_p);
    uint64_t f = af_case_features(c);
    if (f >> AF_FEAT_STRIDED & 1) AF_PUT(" strided");
    if (f >> AF_FEAT_SPECIAL & 1) AF_PUT(" specials");
    if (f >> AF_FEAT_OVERFLOW & 1) AF_PUT(" near_overflow");
    if (f >> AF_FEAT_DENORMAL & 1) AF_PUT(" denormal");
    char serving[96];
    af_case_serving_str(c, serving, sizeof serving);
    AF_PUT("%s", serving);
#undef AF_PUT
}

/* --- the softmax statistics (oracle.h) ------------------------------------------------- */

const double *af_oracle_ref_lse(const af_oracle *o) { return o->lse; }

/* finite, NaN, +inf, -inf */
static int af_oracle_lse_class(double x) { return isnan(x) ? 1 : x == HUGE_VAL ? 2 : x == -HUGE_VAL ? 3 : 0; }

/* One pass over the rows of lse against the reference statistics, with the honest run's
 * terms when it is ready (oracle.h gives the bound). */
static void af_oracle_lse_pass(const af_oracle *o, const af_tensor *lse, const af_conventions *conv, bool skip_masked,
                               af_result *res) {
    const af_case *c = o->in->c;
    const af_dtype dt = c->dtype;
    const af_oracle_honest *hn = o->h->ready ? o->h : NULL;
    const double u_out = lse->dtype == AF_F32 ? 0x1p-24 : 0.0;
    const double fudge = o->opts.fudge, atol = o->opts.floor_atol[dt], rtol = o->opts.floor_rtol[dt];
    af_metrics *m = &res->m;
    memset(res, 0, sizeof *res);
    m->fail_score_max = m->fail_product_max = (double)NAN;
    res->tol = (af_tolerance){.atol = atol + (hn ? fudge * hn->lse_err : 0.0), .rtol = rtol, .fudge = fudge,
                              .honest = hn != NULL};
    for (size_t r = 0; r < o->nrows; r++) {
        double ref = o->lse[r];
        double got = lse->dtype == AF_F32 ? (double)((const float *)lse->data)[r] : ((const double *)lse->data)[r];
        if (skip_masked && o->rows[r]) continue;
        double bound = res->tol.atol + (rtol + u_out) * fabs(ref) + (hn ? fudge * hn->lse_sens[r] : 0.0);
        bool ok, cls = false;
        static const double masked_as[AF_LSE_MASKED_COUNT] = {-HUGE_VAL, 0.0, HUGE_VAL, (double)NAN};
        double empty = masked_as[conv->lse_masked < AF_LSE_MASKED_COUNT ? conv->lse_masked : 0];
        if (conv->masked_keys_ieee && (o->key_leak[r] & AF_KEY_LEAK_ANY) && isnan(got)) {
            ok = true; /* a set-masked key's NaN or +Inf score added to -inf: NaN (as the output) */
        } else if (isnan(ref) || isinf(ref)) {
            ok = isnan(ref) ? isnan(got) : got == ref;
            /* a +Inf score: log sum exp is +inf, m + log(sum exp(s - m)) NaN: either */
            ok |= ref == HUGE_VAL && isnan(got);
            /* a fully masked row: -inf, or the value its declared convention gives */
            if (!ok && ref == -HUGE_VAL && o->rows[r]) ok = isnan(empty) ? isnan(got) : got == empty;
            cls = !ok;
        } else if (!isfinite(got)) {
            ok = false;
            cls = true;
        } else {
            double d = fabs(got - ref);
            ok = d <= bound;
            if (d > m->max_abs) m->max_abs = d;
        }
        if (ok) continue;
        /* no implementation at the case precision is bound: the honest run flags the row, or
         * its statistics differ from float64's in class (fp32 scores past the range) */
        if (hn && (hn->unstable[r * o->dv] || af_oracle_lse_class(hn->lse[r]) != af_oracle_lse_class(ref))) {
            m->n_unstable++;
            continue;
        }
        m->n_diverge += !cls;
        m->n_nan += cls && (isnan(got) || isnan(ref));
        m->n_nan_ref += cls && isnan(ref) && !isnan(got);
        m->n_inf += cls && !isnan(got) && !isnan(ref);
        m->n_fail_masked += o->rows[r];
        double sm = o->row_max[r];
        if (isnan(m->fail_score_max) || sm > m->fail_score_max || isnan(sm)) m->fail_score_max = sm;
        double pm = af_oracle_row_product_max(o, r);
        if (isnan(m->fail_product_max) || pm > m->fail_product_max) m->fail_product_max = pm;
        double ratio = cls ? HUGE_VAL : fabs(got - ref) / bound;
        if (ratio > m->worst_ratio || (m->worst_ratio == 0.0 && ratio == 0.0)) {
            m->worst_ratio = ratio;
            m->worst[0] = r / ((size_t)c->q_heads * c->q_len);
            m->worst[1] = r / c->q_len % c->q_heads;
            m->worst[2] = r % c->q_len;
            m->worst[3] = 0;
            m->worst_out = got;
            m->worst_ref = ref;
        }
    }
    res->kind = m->n_diverge || m->n_nan || m->n_inf ? AF_KIND_LSE_DIVERGE : AF_KIND_OK;
}

/* The statistics lse judged against o's (af_oracle_compare_lse without the flushed inputs). */
static af_status af_oracle_lse_judge(af_oracle *o, const af_tensor *lse, const af_conventions *conv, af_result *res,
                                     af_error *err) {
    const af_case *c = o->in->c;
    AF_RETURN_ERROR_IF(!o->lse, err, AF_ERR_INVALID, "no reference statistics prepared");
    AF_RETURN_ERROR_IF(lse->ndim != 3 || lse->ne[0] != c->batch || lse->ne[1] != c->q_heads ||
                           lse->ne[2] != c->q_len || (lse->dtype != AF_F32 && lse->dtype != AF_F64) || !lse->data ||
                           lse->nb[2] != af_dtype_size(lse->dtype) || lse->nb[1] != lse->nb[2] * c->q_len ||
                           lse->nb[0] != lse->nb[1] * c->q_heads,
                       err, AF_ERR_INVALID, "lse is not a contiguous f32/f64 [%u,%u,%u] tensor", c->batch, c->q_heads,
                       c->q_len);
    static const af_conventions none;
    if (!conv) conv = &none;
    /* a fully masked row another convention fills is not empty there: no -inf to hold */
    bool skip_masked = af_conv_masked_rows(conv, c->dtype) != AF_ROWS_ZERO;
    af_oracle_honest *saved = o->h;
    o->h = &o->hon[af_oracle_honest_slot(o, conv)];
    af_oracle_lse_pass(o, lse, conv, skip_masked, res);
    af_status st = AF_OK;
    if (res->kind != AF_KIND_OK && !o->h->ready) {
        st = af_oracle_make_honest(o, err);
        if (st == AF_OK) af_oracle_lse_pass(o, lse, conv, skip_masked, res);
    }
    o->h = saved;
    return st;
}

af_status af_oracle_compare_lse(af_oracle *o, const af_tensor *lse, const af_conventions *conv, af_result *res,
                                af_error *err) {
    AF_TRY(af_oracle_lse_judge(o, lse, conv, res, err));
    /* denormals "flush": the statistics of the inputs with their f32-subnormal values flushed
     * are right too, as af_oracle_compare_conv takes the output's (a subnormal Q against an
     * Inf K is then 0 * Inf = NaN, not -Inf) */
    if (res->kind == AF_KIND_OK || !conv || !af_conv_flushes(conv, o->in->c->dtype) || o->target != o->ref)
        return AF_OK;
    AF_TRY(af_oracle_make_ftz(o, err));
    if (o->ftz_state != AF_FTZ_READY) return AF_OK;
    af_result flushed;
    AF_TRY(af_oracle_lse_judge(o->ftz, lse, conv, &flushed, err));
    if (flushed.kind == AF_KIND_OK) *res = flushed;
    return AF_OK;
}

uint64_t af_signature_tensor(af_kind kind, const char *who, const char *tensor, const af_case *c) {
    if (!tensor || strcmp(tensor, "out") == 0) return af_signature(kind, who, c);
    char buf[256];
    snprintf(buf, sizeof buf, "%.200s/%s", who, tensor);
    return af_signature(kind, buf, c);
}

uint64_t af_error_class(const char *who, const char *message) {
    if (!message) return 0;
    size_t wn = who ? strlen(who) : 0;
    if (wn && strncmp(message, who, wn) == 0 && message[wn] == ':') message += wn + 1; /* "who: text" is text */
    char buf[AF_ERROR_CLASS_CHARS];
    size_t n = 0;
    for (const char *p = message; *p && n < sizeof buf;) {
        unsigned char ch = (unsigned char)*p;
        if (isspace(ch)) {
            while (isspace((unsigned char)*p)) p++;
            if (n) buf[n++] = ' ';
        } else if (isdigit(ch) && n && (isalpha((unsigned char)buf[n - 1]) || buf[n - 1] == '_') &&
                   !(buf[n - 1] == 'x' && n >= 2 && buf[n - 2] == '#')) {
            buf[n++] = (char)ch; /* a name's digits (f16, sm_90, conv2d), not a shape's (4x8xf16) */
            p++;
        } else if (isdigit(ch)) {
            /* a number, a hex literal or address (0x7f3a...): one '#' */
            if (ch == '0' && (p[1] == 'x' || p[1] == 'X') && isxdigit((unsigned char)p[2])) p += 2;
            while (isxdigit((unsigned char)*p) || *p == '.') p++;
            buf[n++] = '#';
        } else {
            buf[n++] = (char)ch;
            p++;
        }
    }
    while (n && buf[n - 1] == ' ') n--;
    if (!n) return 0;
    uint64_t h = XXH64(buf, n, 0x6572726f72636c73ull);
    return h ? h : 1;
}

uint64_t af_signature_finding(af_kind kind, const char *who, const char *tensor, uint64_t error_class,
                              const af_case *c) {
    uint64_t cls = kind == AF_KIND_ERROR ? error_class : 0;
    if (!cls) return af_signature_tensor(kind, who, tensor, c);
    unsigned char buf[512];
    uint32_t k = (uint32_t)kind;
    int wn = snprintf((char *)buf + 12, sizeof buf - 12, "%.200s/%s", who,
                      tensor && strcmp(tensor, "out") != 0 ? tensor : "");
    memcpy(buf, &k, 4);
    memcpy(buf + 4, &cls, 8);
    return XXH64(buf, 12 + (size_t)wn, 0x61747466757a7a01ull); /* another seed: never a case's signature */
}

uint64_t af_signature(af_kind kind, const char *who, const af_case *c) {
    unsigned char buf[512];
    uint32_t k = (uint32_t)kind;
    uint64_t f = af_case_features(c);
    size_t wn = strnlen(who, sizeof buf - 16);
    memcpy(buf, &k, 4);
    memcpy(buf + 4, &f, 8);
    memcpy(buf + 12, who, wn);
    return XXH64(buf, 12 + wn, 0x61747466757a7a00ull);
}
