/* minimize.c - greedy simplification of failing cases (see minimize.h). */
#include "attnfuzz/minimize.h"
#include "clock.h"

#include <math.h>
#include <string.h>
#include <time.h>

const af_finding *af_exec_finding_for(const af_exec *x, size_t check) {
    for (size_t i = 0; i < af_exec_finding_count(x); i++)
        if (af_exec_finding(x, i)->check == check) return af_exec_finding(x, i);
    return NULL;
}

/* One candidate simplification k of c into *out; false when it changes nothing. */
static bool af_simplify(const af_case *c, unsigned k, af_case *o) {
    *o = *c;
    af_tensor_spec *t = &o->t[k % 3];
    switch (k) {
    /* precision */
    case 0: o->dtype = AF_F32; o->allow_tf32 = false; break;
    case 1: o->allow_tf32 = false; break;
    /* layouts and strides */
    case 2: for (int w = 0; w < 3; w++) o->t[w].layout = AF_LAYOUT_BHSD; break;
    case 3: case 4: case 5:
        if (af_case_is_packed(o)) return false;
        t->layout = AF_LAYOUT_BHSD;
        break;
    case 6: case 7: case 8: t->perm = 0; break;
    case 9: case 10: case 11: t->pad = 0; break;
    case 12: case 13: case 14: t->bcast = AF_BCAST_NONE; break;
    /* values */
    case 15: case 16: case 17: t->special = AF_SPECIAL_NONE; break;
    case 18: case 19: case 20: t->dist = AF_DIST_NORMAL; break;
    case 21: case 22: case 23: t->mag_q4 = 0; break;
    /* masks */
    case 24: o->amask.present = false; break;
    case 25: o->bmask.present = false; break;
    case 26: o->key_padding = false; break;
    case 27: o->window_left = o->window_right = -1; break;
    case 28: o->causal = false; break;
    case 29: o->diag = AF_DIAG_TOP_LEFT; o->diag_offset = 0; break;
    /* the plain bottom-right preset instead of the per-row (valid keys) or explicit one:
     * without key padding they place the diagonal alike, and one bug should sign once */
    case 52: if (o->diag == AF_DIAG_TOP_LEFT) return false; o->diag = AF_DIAG_BOTTOM_RIGHT; o->diag_offset = 0; break;
    /* one side of a window at a time (a causal mask makes the right side moot) */
    case 53: o->window_right = -1; break;
    case 54: o->window_left = -1; break;
    /* backward: fewer gradients (one is left), a plain dO, or none at all (a finding on
     * the output then becomes the forward case's) */
    case 55: case 56: case 57: case 58: {
        unsigned g = k - 55, n = 0, grads = o->bwd.grads;
        for (unsigned b = 0; b < AF_GRAD_COUNT; b++) n += (grads >> b) & 1u;
        if (!(grads >> g & 1u) || n < 2) return false;
        o->bwd.grads = (uint8_t)(grads & ~(1u << g));
        break;
    }
    case 59: o->bwd.dout.special = AF_SPECIAL_NONE; break;
    case 60: o->bwd.dout.dist = AF_DIST_NORMAL; break;
    case 61: o->bwd.dout.mag_q4 = 0; break;
    case 62: o->bwd.dout.perm = 0; o->bwd.dout.pad = 0; o->bwd.dout.bcast = AF_BCAST_NONE; break;
    case 63: o->bwd.grads = 0; break;
    case 30: o->amask.dims = AF_MDIM_Q | AF_MDIM_K; o->amask.expanded = false; o->amask.rank2 = false; break;
    case 31: o->bmask.dims = AF_MDIM_Q | AF_MDIM_K; o->bmask.expanded = false; o->bmask.rank2 = false; break;
    case 32: o->amask.dtype = o->dtype; break;
    /* numerics */
    case 33: o->dropout_p = 0.0; break;
    case 34: o->softcap = 0.0; break;
    case 35: o->scale_set = false; o->scale = 0.0; break;
    case 36: o->placement = AF_PLACE_SCORES; break;
    /* shapes: equal, then smaller */
    case 37: o->kv_len = o->q_len; break;
    case 38: o->q_heads = o->kv_heads; break;
    case 39: o->v_head_dim = o->head_dim; break;
    case 40: o->batch = o->batch > 1 ? o->batch / 2 : 1; break;
    case 41: o->batch = 1; break;
    case 42: o->kv_heads = o->kv_heads > 1 ? o->kv_heads / 2 : 1; o->q_heads = o->kv_heads * (c->q_heads / c->kv_heads); break;
    case 43: o->q_heads = o->kv_heads * (c->q_heads / c->kv_heads > 1 ? c->q_heads / c->kv_heads / 2 : 1); break;
    case 44: o->q_len = o->q_len > 1 ? o->q_len / 2 : 1; break;
    case 45: o->kv_len = o->kv_len > 1 ? o->kv_len / 2 : 1; break;
    case 46: o->q_len = o->q_len > 1 ? o->q_len - 1 : 1; break;
    case 47: o->kv_len = o->kv_len > 1 ? o->kv_len - 1 : 1; break;
    case 48: o->head_dim = o->head_dim > 1 ? o->head_dim / 2 : 1; break;
    case 49: o->v_head_dim = o->v_head_dim > 1 ? o->v_head_dim / 2 : 1; break;
    case 50: o->head_dim = o->head_dim > 1 ? o->head_dim - 1 : 1; break;
    case 51: o->v_head_dim = o->v_head_dim > 1 ? o->v_head_dim - 1 : 1; break;
    /* serving forms: each one off (a bug that shows without it signs as the dense one),
     * whole segments, plain pages */
    case 64: case 65: case 66: case 67: o->serve.forms &= (uint8_t)~(1u << (k - 64)); break;
    case 68:
        for (uint32_t b = 0; b < o->batch; b++) o->serve.q_lens[b] = o->q_len, o->serve.kv_lens[b] = o->kv_len;
        break;
    case 69: o->serve.shared_pages = 0; o->serve.page_size = 16; break;
    /* FP8: the same case with inputs in the output dtype (a bug that shows without FP8 signs
     * as that one), else each descale 1 (repair keeps what stays FP8 valid) */
    case 70: o->fp8.fmt = AF_FP8_NONE; break;
    case 71: case 72: case 73: o->fp8.descale[k - 71] = 1.0f; break;
    default: return false;
    }
    af_case_repair(o, 0);
    return !af_case_equal(o, c);
}
#define AF_SIMPLIFY_COUNT 74u

/* The seeds of a candidate's values, redrawn (attempt 1, 2, ...). Where a planted special
 * value or a large entry lands depends on the shapes and the seeds together, so a
 * simplification that moves a NaN from a masked key onto a live one (or off the one row
 * that showed it) loses the finding by accident, not because the bug needs the feature:
 * a few other draws of the values tell the two apart. */
static void af_reseed(af_case *c, unsigned k, unsigned attempt) {
    for (int t = 0; t < AF_QKV_COUNT; t++)
        c->t[t].seed = (uint32_t)((c->t[t].seed ^ (k * 0x9e3779b9u + attempt * 0x85ebca6bu + (unsigned)t)) * 0xc2b2ae35u);
    c->bwd.dout.seed = (c->bwd.dout.seed ^ (k * 0x9e3779b9u + attempt)) * 0xc2b2ae35u;
    c->amask.seed = c->amask.seed * 0x27d4eb2du + attempt;
    c->bmask.seed = c->bmask.seed * 0x165667b1u + attempt;
}
/* Redraws per simplification that lost the finding (only in the passes with redraws). */
static unsigned af_reseeds(unsigned k) { return k >= 24 && k <= 36 ? 8u : 6u; }

/* The simplifications that change what a case is rather than how large it is (the shape
 * steps 40-51 halve and shorten): a pattern decides these. */
static bool af_feature_step(unsigned k) { return k < 40 || k >= 52; }

/* c with, at once, every feature simplification that `pattern` is already simple in (the
 * step would change nothing on it); never a costlier case. */
static af_case af_follow(const af_case *c, const af_case *pattern) {
    af_case out = *c, o, tmp;
    for (unsigned k = 0; k < AF_SIMPLIFY_COUNT; k++)
        if (af_feature_step(k) && !af_simplify(pattern, k, &tmp) && af_simplify(&out, k, &o) &&
            af_case_flops(&o) <= af_case_flops(&out))
            out = o;
    return out;
}

/* Does the finding f of a smaller case stand for the one minimized: its kind, on its tensor? */
static bool af_minimize_holds(const af_finding *f, af_kind kind, const af_minimize_opts *o) {
    return f && f->kind == kind && (!o->tensor || strcmp(f->tensor, o->tensor) == 0) &&
           (!o->error_class || f->error_class == o->error_class);
}

/* Passes of plain simplifications until one changes nothing, then one pass that also
 * tries redrawn values for each simplification that lost the finding; repeated while
 * that pass changes something. Patterns (o->hints) are tried first. */
af_status af_minimize(af_exec *x, size_t check, af_kind kind, af_case *c, const af_minimize_opts *o,
                      af_minimize_result *r, af_error *err) {
    static const af_minimize_opts none = {0};
    if (!o) o = &none;
    af_minimize_result local;
    if (!r) r = &local;
    memset(r, 0, sizeof *r);
    unsigned max_execs = o->max_execs ? o->max_execs : 400, spent = 0;
    bool changed = true, reseed = false, done = false;
    double deadline = o->max_seconds > 0 ? af_now() + o->max_seconds : HUGE_VAL;
    for (size_t h = 0; h < o->n_hints && spent < max_execs && af_now() < deadline; h++) {
        af_case trial = af_follow(c, &o->hints[h]);
        if (af_case_equal(&trial, c)) continue;
        spent++;
        AF_TRY(af_exec_run_check(x, check, &trial, err));
        const af_finding *f = af_exec_finding_for(x, check);
        if (!af_minimize_holds(f, kind, o)) continue;
        *c = trial;
        r->hint = h + 1;
        if (o->known && o->known(o->ctx, f->signature)) {
            r->known = true;
            r->signature = f->signature;
            r->execs = spent;
            return AF_OK;
        }
        break;
    }
    while (spent < max_execs && af_now() < deadline) {
        changed = false;
        for (unsigned k = 0; k < AF_SIMPLIFY_COUNT && spent < max_execs; k++) {
            af_case cand;
            if (!af_simplify(c, k, &cand)) continue;
            /* never a costlier case: kv_len = q_len on a 15000 x 3 case is a 15000^2 one */
            if (af_case_flops(&cand) > af_case_flops(c)) continue;
            unsigned attempts = reseed ? af_reseeds(k) : 0;
            if (af_now() >= deadline) break;
            for (unsigned attempt = 0; attempt <= attempts && spent < max_execs; attempt++) {
                af_case trial = cand;
                if (attempt) af_reseed(&trial, k, attempt);
                spent++;
                AF_TRY(af_exec_run_check(x, check, &trial, err)); /* the failing check only */
                const af_finding *f = af_exec_finding_for(x, check);
                if (af_minimize_holds(f, kind, o)) {
                    *c = trial;
                    changed = true;
                    k--; /* the same step again at once: halving a length goes on while it holds */
                    if (o->known && o->known(o->ctx, f->signature)) {
                        r->known = true; /* x holds *c's execution: nothing to run again */
                        r->signature = f->signature;
                        r->execs = spent;
                        return AF_OK;
                    }
                    break;
                }
            }
        }
        if (reseed && !changed) {
            done = true; /* nothing more, even with other values */
            break;
        }
        reseed = !changed; /* plain passes until stuck, then one with redraws */
    }
    r->cut = !done && spent < max_execs; /* the time ran out, not the steps or the executions */
    /* leave x holding the execution of the result */
    AF_TRY(af_exec_run_check(x, check, c, err));
    r->execs = ++spent;
    return AF_OK;
}
