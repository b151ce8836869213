/* case_gen.c - the generator's distribution over cases.
 *
 * Uniform bytes through the decoder would mostly draw huge, overflowing, meaningless
 * cases. The generator instead draws each field from a distribution shaped by where
 * attention bugs live (docs/design.md section 1): mostly tiny shapes (most bugs show at S <= 16), a tail
 * of awkward and large ones (odd lengths like 143 and 587, S % 128 == 64, kv_len % 32
 * == 1, head dims 21 and 203), and every rare corner - fully masked rows, finfo.min
 * masks, NaN in masked keys, bottom-right causal with Sq != Sk, stride-0 K/V, packed
 * layouts - at a few percent, so a campaign meets each within seconds. */
#include <math.h>
#include <string.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "case_fp8.h"
#include "case_serving.h"


/* Sequence lengths by size class: tiny (most bugs show at S <= 16), medium (tiling
 * boundaries: 64 +- 1, 128 +- 1, S % 128 == 64, kv_len % 32 == 1, 143), large (587 and
 * long sequences, rare: their cost dominates a campaign). */
static uint32_t af_gen_seq(af_rng *r, int cls) {
    static const uint32_t awkward[] = {17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 143, 192, 255, 257};
    if (cls == 0) return (uint32_t)af_rng_range(r, 1, 16);
    if (cls == 1) {
        switch (AF_RNG_PICK(r, 40, 45, 15)) {
        case 0: return (uint32_t)af_rng_range(r, 17, 96);
        case 1: return awkward[af_rng_below(r, sizeof awkward / sizeof awkward[0])];
        default: return 128u * (uint32_t)af_rng_range(r, 0, 3) + (af_rng_chance(r, 1, 2) ? 64u : 33u);
        }
    }
    return af_rng_chance(r, 1, 3) ? 587u : (uint32_t)af_rng_range(r, 300, 2048);
}

static uint32_t af_gen_head_dim(af_rng *r) {
    static const uint32_t common[] = {16, 32, 64, 64, 80, 96, 128};
    switch (AF_RNG_PICK(r, 50, 35, 8, 7)) {
    case 0: return (uint32_t)af_rng_range(r, 1, 8);
    case 1: return common[af_rng_below(r, sizeof common / sizeof common[0])];
    case 2: return af_rng_chance(r, 1, 2) ? 21u : 203u; /* head_dim % 8 != 0 */
    default: return (uint32_t)af_rng_range(r, 9, 256);
    }
}

/* Shrinks batch, then heads, then head dims (not below 8), then lengths until the case
 * costs at most max_flops: the awkward lengths survive as long as anything else can go. */
void af_case_cap_flops(af_case *c, double max_flops, size_t budget) {
    for (int guard = 0; guard < 64 && af_case_flops(c) > max_flops; guard++) {
        if (c->batch > 1) {
            c->batch = (c->batch + 1) / 2;
        } else if (c->q_heads / c->kv_heads > 1) {
            c->q_heads = c->kv_heads * ((c->q_heads / c->kv_heads + 1) / 2);
        } else if (c->kv_heads > 1) {
            c->kv_heads = (c->kv_heads + 1) / 2;
            c->q_heads = c->kv_heads;
        } else if (c->head_dim > 8 || c->v_head_dim > 8) {
            if (c->head_dim > 8) c->head_dim = (c->head_dim + 1) / 2;
            if (c->v_head_dim > 8) c->v_head_dim = (c->v_head_dim + 1) / 2;
        } else if (c->q_len >= c->kv_len && c->q_len > 1) {
            c->q_len = (c->q_len + 1) / 2;
        } else if (c->kv_len > 1) {
            c->kv_len = (c->kv_len + 1) / 2;
        } else {
            break;
        }
        af_case_repair(c, budget);
    }
}

static int8_t af_gen_mag(af_rng *r) {
    /* log10 magnitude in quarter decades: mostly near 1, tails to 1e-3 and 1e4 */
    switch (AF_RNG_PICK(r, 60, 25, 15)) {
    case 0: return (int8_t)af_rng_range(r, -2, 2);
    case 1: return (int8_t)af_rng_range(r, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX);
    default: return (int8_t)af_rng_range(r, 8, AF_MAG_Q4_MAX); /* 1e2 .. 1e4: logits past f16 range */
    }
}

static void af_gen_tensor(af_rng *r, af_tensor_spec *t, af_layout layout) {
    t->layout = layout;
    t->perm = 0;
    t->pad = 0;
    t->bcast = AF_BCAST_NONE;
    switch (AF_RNG_PICK(r, 70, 10, 12, 8)) {
    case 1: t->pad = (uint8_t)af_rng_range(r, 1, 16); break;
    case 2: t->perm = (uint8_t)af_rng_range(r, 1, 119); break; /* repaired modulo the dims' count */
    case 3: t->bcast = af_rng_chance(r, 1, 2) ? AF_BCAST_BATCH : AF_BCAST_HEADS; break;
    default: break;
    }
    t->dist = (af_dist)AF_RNG_PICK(r, 55, 18, 9, 6, 6, 6);
    t->mag_q4 = af_gen_mag(r);
    t->special = af_rng_chance(r, 1, 12) ? (af_special)af_rng_range(r, 1, AF_SPECIAL_COUNT - 1) : AF_SPECIAL_NONE;
    t->seed = af_rng_u32(r);
}

static void af_gen_mask(af_rng *r, af_mask_spec *m, bool additive, af_dtype dtype) {
    m->present = true;
    static const uint8_t dims[] = {AF_MDIM_Q | AF_MDIM_K, AF_MDIM_ALL, AF_MDIM_B | AF_MDIM_Q | AF_MDIM_K,
                                   AF_MDIM_H | AF_MDIM_Q | AF_MDIM_K, AF_MDIM_K, AF_MDIM_B | AF_MDIM_K};
    m->dims = dims[af_rng_below(r, sizeof dims)];
    m->rank2 = !(m->dims & (AF_MDIM_B | AF_MDIM_H)) && af_rng_chance(r, 1, 2);
    m->expanded = af_rng_chance(r, 1, 5);
    m->pattern = (af_mask_pattern)AF_RNG_PICK(r, 40, 15, 20, 15, 10);
    m->density = af_rng_chance(r, 1, 6) ? 255 : (uint8_t)af_rng_range(r, 16, 200);
    m->seed = af_rng_u32(r);
    if (additive) {
        m->dtype = af_rng_chance(r, 3, 4) ? dtype : (af_dtype)af_rng_below(r, AF_CASE_DTYPE_COUNT);
        m->fill = (af_mask_fill)AF_RNG_PICK(r, 60, 25, 15);
        m->live_zero = af_rng_chance(r, 1, 2);
        m->mag_q4 = (int8_t)af_rng_range(r, -4, 4);
    } else {
        m->dtype = AF_BOOL;
    }
}

/* The backward part: any non-empty set of the gradients the case has (dmask only with an
 * additive mask), half the time all of them; dO drawn like an input in the output's
 * layout, a stride-0 dimension more often (the expanded gradient of a `sum().backward()`). */
static void af_gen_backward(af_rng *r, af_case *c) {
    int avail = c->amask.present ? AF_GRAD_ALL : AF_GRAD_ALL & ~AF_GRAD_DMASK;
    c->bwd.grads = (uint8_t)(af_rng_chance(r, 1, 2) ? avail : af_rng_range(r, 1, avail));
    af_gen_tensor(r, &c->bwd.dout, af_out_layout(c->t[AF_Q].layout));
    if (af_rng_chance(r, 1, 8)) c->bwd.dout.bcast = af_rng_chance(r, 1, 2) ? AF_BCAST_BATCH : AF_BCAST_HEADS;
}

void af_case_generate(af_case *c, af_rng *r, size_t budget, double max_flops) {
    af_gen_opts o = {budget, max_flops, 0.0, 0.0, 0.0};
    af_case_generate_opts(c, r, &o);
}

void af_case_generate_opts(af_case *c, af_rng *r, const af_gen_opts *o) { af_case_generate_edges(c, r, o, NULL); }

void af_case_generate_edges(af_case *c, af_rng *r, const af_gen_opts *o, af_gen_edges_opts *e) {
    const size_t budget = o->budget;
    const double max_flops = o->max_flops;
    af_case_default(c);
    int cls = (int)AF_RNG_PICK(r, 88, 10, 2); /* tiny, medium, large */
    /* batch and heads: mostly 1 or 2 (the bugs need B > 1 or H > 1, rarely more) */
    c->batch = (uint32_t)(AF_RNG_PICK(r, 60, 30, 10) == 0 ? 1 : af_rng_range(r, 2, 4));
    if (af_rng_chance(r, 1, 40)) c->batch = (uint32_t)af_rng_range(r, 5, 16);
    c->kv_heads = (uint32_t)AF_RNG_PICK(r, 55, 25, 15, 5);
    c->kv_heads = c->kv_heads == 0 ? 1 : c->kv_heads == 1 ? 2 : c->kv_heads == 2 ? (uint32_t)af_rng_range(r, 3, 4)
                                                                                   : (uint32_t)af_rng_range(r, 5, 8);
    uint32_t group = (uint32_t)AF_RNG_PICK(r, 55, 25, 15, 5);
    group = group == 0 ? 1 : group == 1 ? 2 : group == 2 ? (uint32_t)af_rng_range(r, 3, 4) : (uint32_t)af_rng_range(r, 5, 8);
    c->q_heads = c->kv_heads * group;
    c->q_len = af_gen_seq(r, cls);
    c->kv_len = af_rng_chance(r, 1, 2) ? c->q_len : af_gen_seq(r, cls);
    c->head_dim = af_gen_head_dim(r);
    c->v_head_dim = af_rng_chance(r, 3, 4) ? c->head_dim : af_gen_head_dim(r);

    c->dtype = (af_dtype)AF_RNG_PICK(r, 40, 30, 30);
    c->allow_tf32 = c->dtype == AF_F32 && af_rng_chance(r, 1, 4);
    if (af_rng_chance(r, 2, 5)) {
        c->scale_set = true;
        static const double scales[] = {1.0, 0.5, 0.125, 2.0, 10.0, 1e-3, 0.0, -0.5};
        switch (AF_RNG_PICK(r, 50, 25, 25)) {
        case 0: c->scale = scales[af_rng_below(r, sizeof scales / sizeof scales[0])]; break;
        case 1: c->scale = 1.0 / (double)c->head_dim; break;
        default: c->scale = pow(10.0, af_rng_uniform(r) * 5.0 - 3.0); break;
        }
    }
    c->placement = (af_placement)af_rng_below(r, AF_PLACE_COUNT);
    if (af_rng_chance(r, 1, 8)) {
        static const double caps[] = {1.0, 5.0, 20.0, 30.0, 50.0};
        c->softcap = caps[af_rng_below(r, sizeof caps / sizeof caps[0])];
    }

    c->causal = af_rng_chance(r, 3, 10);
    c->diag = (af_diag)af_rng_below(r, AF_DIAG_COUNT);
    if (c->diag == AF_DIAG_EXPLICIT) c->diag_offset = (int32_t)af_rng_range(r, -8, 32);
    if (af_rng_chance(r, 1, 5)) {
        c->key_padding = true;
        for (uint32_t b = 0; b < c->batch; b++) {
            switch (AF_RNG_PICK(r, 60, 10, 15, 15)) {
            case 0: c->kv_valid[b] = (uint32_t)af_rng_range(r, 1, c->kv_len); break;
            case 1: c->kv_valid[b] = 0; break; /* every row of this batch fully masked */
            case 2: c->kv_valid[b] = c->kv_len; break;
            default: c->kv_valid[b] = c->kv_len > 1 ? 1 : 0; break;
            }
        }
    }
    if (af_rng_chance(r, 1, 10)) {
        c->window_left = af_rng_chance(r, 1, 4) ? -1 : (int32_t)af_rng_range(r, 0, 64);
        c->window_right = af_rng_chance(r, 1, 2) ? -1 : (int32_t)af_rng_range(r, 0, 16);
    }
    if (af_rng_chance(r, 1, 4)) af_gen_mask(r, &c->amask, true, c->dtype);
    if (af_rng_chance(r, 1, 4)) af_gen_mask(r, &c->bmask, false, c->dtype);
    if (af_rng_chance(r, 3, 20)) {
        static const double ps[] = {0.1, 0.5, 0.9, 1.0};
        c->dropout_p = af_rng_chance(r, 3, 4) ? ps[af_rng_below(r, 4)] : af_rng_uniform(r);
        c->dropout_seed = af_rng_u64(r);
    }

    /* layouts: mostly BHSD, a third mixed per tensor, a fifth packed */
    switch (AF_RNG_PICK(r, 45, 35, 20)) {
    case 0:
        for (int t = 0; t < AF_QKV_COUNT; t++) af_gen_tensor(r, &c->t[t], AF_LAYOUT_BHSD);
        break;
    case 1:
        for (int t = 0; t < AF_QKV_COUNT; t++)
            af_gen_tensor(r, &c->t[t], (af_layout)af_rng_below(r, AF_LAYOUT_FIRST_PACKED));
        break;
    default: {
        af_layout l = (af_layout)(AF_LAYOUT_FIRST_PACKED + af_rng_below(r, AF_LAYOUT_COUNT - AF_LAYOUT_FIRST_PACKED));
        for (int t = 0; t < AF_QKV_COUNT; t++) af_gen_tensor(r, &c->t[t], l);
        break;
    }
    }

    /* last, so that a forward-only generator draws what it always drew */
    if (o->backward > 0.0 && af_rng_uniform(r) < o->backward) af_gen_backward(r, c);
    /* after it, for the same reason; a serving case is forward-only (repair drops the
     * backward part); a decode step is a medium or a large case */
    if (o->serving > 0.0 && af_rng_uniform(r) < o->serving) {
        int dc = af_serving_generate(c, r);
        if (dc) cls = dc;
    }

    /* after it, for the same reason; an FP8 case is forward-only and dense (repair) */
    if (o->fp8 > 0.0 && af_rng_uniform(r) < o->fp8) af_fp8_generate(c, r);

    /* after it, for the same reason: the shape on both sides of the eligibility switches
     * (case_gen_edges.c), under the whole cap (an edge costs what it costs) */
    bool edges = e && e->share > 0.0 && af_rng_uniform(r) < e->share;
    af_case_repair(c, budget);
    unsigned fields = edges ? af_gen_edges(c, r, e->weight, max_flops, budget) : 0u;
    if (e) e->fields = (uint8_t)fields;
    /* medium cases get a sixteenth of the cap: a campaign spends its time evenly */
    if (!edges && max_flops > 0) af_case_cap_flops(c, cls == 2 ? max_flops : max_flops / 16.0, budget);
}
