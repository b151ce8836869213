/* case_mutate.c - structure-aware mutation and crossover of cases, used by the built-in
 * campaign and by the libFuzzer / AFL++ custom mutators. Byte-level mutation of the
 * encoded case mostly flips seeds and sizes at random; these edits instead move one
 * semantic feature at a time, so a search can walk towards a corner (say, f16 + packed
 * channel-first QKV + large magnitudes) one step after another. */
#include <string.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "case_fp8.h"
#include "case_serving.h"

/* A new value for a dimension, always within 1..hi (the case's arrays are sized by the
 * maxima: kv_valid[] is written up to the batch before repair runs). */
static uint32_t af_nudge(af_rng *r, uint32_t x, uint32_t hi) {
    static const uint32_t awkward[] = {1, 2, 3, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 143, 192, 587};
    uint32_t y;
    switch (af_rng_below(r, 6)) {
    case 0: y = x > 1 ? x - 1 : x + 1; break;
    case 1: y = x + 1; break;
    case 2: y = x * 2; break;
    case 3: y = x > 1 ? x / 2 : 1; break;
    case 4: y = (uint32_t)af_rng_range(r, 1, 16); break;
    default: y = awkward[af_rng_below(r, sizeof awkward / sizeof awkward[0])]; break;
    }
    return y < 1 ? 1 : y > hi ? hi : y;
}

static void af_mutate_dims(af_case *c, af_rng *r) {
    switch (af_rng_below(r, 7)) {
    case 0: c->batch = af_nudge(r, c->batch, AF_MAX_BATCH); break;
    case 1: {
        uint32_t group = c->q_heads / c->kv_heads;
        c->kv_heads = af_nudge(r, c->kv_heads, AF_MAX_KV_HEADS);
        c->q_heads = c->kv_heads * group;
        break;
    }
    case 2: c->q_heads = c->kv_heads * af_nudge(r, c->q_heads / c->kv_heads, AF_MAX_GROUP); break;
    case 3: c->q_len = af_nudge(r, c->q_len, AF_MAX_SEQ); break;
    case 4: c->kv_len = af_nudge(r, c->kv_len, AF_MAX_SEQ); break;
    case 5: c->head_dim = af_nudge(r, c->head_dim, AF_MAX_HEAD_DIM); break;
    default: c->v_head_dim = af_nudge(r, c->v_head_dim, AF_MAX_HEAD_DIM); break;
    }
}

static void af_mutate_layout(af_case *c, af_rng *r) {
    unsigned w = af_rng_below(r, AF_QKV_COUNT);
    switch (af_rng_below(r, 4)) {
    case 0: /* everything packed (the shapes follow in repair) */
        for (int t = 0; t < AF_QKV_COUNT; t++)
            c->t[t].layout = (af_layout)(AF_LAYOUT_FIRST_PACKED + af_rng_below(r, AF_LAYOUT_COUNT - AF_LAYOUT_FIRST_PACKED));
        c->t[AF_K].layout = c->t[AF_V].layout = c->t[AF_Q].layout;
        break;
    case 1: /* one tensor to another unpacked layout */
        if (af_case_is_packed(c))
            for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = AF_LAYOUT_BHSD;
        c->t[w].layout = (af_layout)af_rng_below(r, AF_LAYOUT_FIRST_PACKED);
        break;
    case 2: /* strides */
        switch (af_rng_below(r, 4)) {
        case 0: c->t[w].perm = (uint8_t)af_rng_below(r, 120); break;
        case 1: c->t[w].pad = (uint8_t)af_rng_range(r, 0, 16); break;
        case 2: c->t[w].bcast = (af_bcast)af_rng_below(r, AF_BCAST_COUNT); break;
        default: c->t[w].perm = 0, c->t[w].pad = 0, c->t[w].bcast = AF_BCAST_NONE; break;
        }
        break;
    default: /* back to plain BHSD */
        for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = AF_LAYOUT_BHSD;
        break;
    }
}

static void af_mutate_masks(af_case *c, af_rng *r) {
    af_mask_spec *m = af_rng_chance(r, 1, 2) ? &c->amask : &c->bmask;
    switch (af_rng_below(r, 8)) {
    case 0: c->causal = !c->causal; break;
    case 1: c->diag = (af_diag)af_rng_below(r, AF_DIAG_COUNT); c->causal = true; break;
    case 2: c->diag_offset = (int32_t)af_rng_range(r, -8, 32); c->diag = AF_DIAG_EXPLICIT; break;
    case 3:
        c->key_padding = !c->key_padding;
        for (uint32_t b = 0; b < c->batch && b < AF_MAX_BATCH; b++)
            c->kv_valid[b] = (uint32_t)af_rng_range(r, 0, c->kv_len);
        break;
    case 4:
        if (af_case_has_window(c)) {
            c->window_left = c->window_right = -1;
        } else {
            c->window_left = (int32_t)af_rng_range(r, -1, 32);
            c->window_right = (int32_t)af_rng_range(r, -1, 8);
        }
        break;
    case 5:
        m->present = !m->present;
        if (m->present) {
            m->dims = (uint8_t)af_rng_range(r, 0, AF_MDIM_ALL);
            m->pattern = (af_mask_pattern)af_rng_below(r, AF_MASK_PATTERN_COUNT);
            m->density = (uint8_t)af_rng_below(r, 256);
            m->seed = af_rng_u32(r);
            m->dtype = m == &c->amask ? (af_dtype)af_rng_below(r, AF_CASE_DTYPE_COUNT) : AF_BOOL;
        }
        break;
    case 6:
        m->fill = (af_mask_fill)af_rng_below(r, AF_FILL_COUNT);
        m->pattern = (af_mask_pattern)af_rng_below(r, AF_MASK_PATTERN_COUNT);
        break;
    default:
        m->dims = (uint8_t)af_rng_range(r, 0, AF_MDIM_ALL);
        m->rank2 = af_rng_chance(r, 1, 2);
        m->expanded = af_rng_chance(r, 1, 3);
        break;
    }
}

static void af_mutate_values(af_case *c, af_rng *r) {
    af_tensor_spec *t = &c->t[af_rng_below(r, AF_QKV_COUNT)];
    switch (af_rng_below(r, 5)) {
    case 0: t->mag_q4 = (int8_t)(t->mag_q4 + (int8_t)af_rng_range(r, -4, 4)); break;
    case 1: t->dist = (af_dist)af_rng_below(r, AF_DIST_COUNT); break;
    case 2: t->special = (af_special)af_rng_below(r, AF_SPECIAL_COUNT); break;
    case 3: t->seed = af_rng_u32(r); break;
    default: t->mag_q4 = (int8_t)af_rng_range(r, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX); break;
    }
}

static void af_mutate_numerics(af_case *c, af_rng *r) {
    switch (af_rng_below(r, 6)) {
    case 0: c->dtype = (af_dtype)af_rng_below(r, AF_CASE_DTYPE_COUNT); break;
    case 1: c->allow_tf32 = !c->allow_tf32; c->dtype = AF_F32; break;
    case 2:
        c->scale_set = af_rng_chance(r, 2, 3);
        c->scale = c->scale_set ? (af_rng_chance(r, 1, 2) ? 1.0 / (double)af_rng_range(r, 1, 64) : (double)af_rng_range(r, 1, 100)) : 0.0;
        break;
    case 3: c->placement = (af_placement)af_rng_below(r, AF_PLACE_COUNT); break;
    case 4: c->softcap = c->softcap > 0.0 ? 0.0 : (double)af_rng_range(r, 1, 50); break;
    default:
        c->dropout_p = c->dropout_p > 0.0 ? 0.0 : (double)af_rng_range(r, 1, 100) / 100.0;
        c->dropout_seed = af_rng_u64(r);
        break;
    }
}

/* A backward case: the gradients asked for, dO's values or strides, or back to forward-only. */
static void af_mutate_backward(af_case *c, af_rng *r) {
    af_tensor_spec *t = &c->bwd.dout;
    switch (af_rng_below(r, 6)) {
    case 0: c->bwd.grads = (uint8_t)af_rng_range(r, 1, AF_GRAD_ALL); break;
    case 1: c->bwd.grads = 0; break; /* repair clears dO */
    case 2: t->dist = (af_dist)af_rng_below(r, AF_DIST_COUNT); break;
    case 3: t->special = (af_special)af_rng_below(r, AF_SPECIAL_COUNT); break;
    case 4: t->mag_q4 = (int8_t)af_rng_range(r, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX); break;
    default:
        switch (af_rng_below(r, 4)) {
        case 0: t->perm = (uint8_t)af_rng_below(r, 120); break;
        case 1: t->pad = (uint8_t)af_rng_range(r, 0, 16); break;
        case 2: t->bcast = (af_bcast)af_rng_below(r, AF_BCAST_COUNT); break;
        default: t->seed = af_rng_u32(r); break;
        }
        break;
    }
}

void af_case_mutate(af_case *c, af_rng *r, size_t budget) {
    unsigned edits = 1 + af_rng_below(r, 3);
    for (unsigned e = 0; e < edits; e++) {
        /* a forward-only case without a serving form draws among the first five, as it
         * always did; a backward case adds the sixth, a serving case (forward-only) the
         * seventh, an FP8 case (forward-only, dense) the eighth */
        unsigned extra[3], n = 0;
        if (c->bwd.grads) extra[n++] = 5;
        if (c->serve.forms) extra[n++] = 6;
        if (c->fp8.fmt != AF_FP8_NONE) extra[n++] = 7;
        unsigned op = af_rng_below(r, 5u + n);
        if (op >= 5) op = extra[op - 5];
        switch (op) {
        case 0: af_mutate_dims(c, r); break;
        case 1: af_mutate_layout(c, r); break;
        case 2: af_mutate_masks(c, r); break;
        case 3: af_mutate_values(c, r); break;
        case 4: af_mutate_numerics(c, r); break;
        case 5: af_mutate_backward(c, r); break;
        case 6: af_serving_mutate(c, r); break;
        default: af_fp8_mutate(c, r); break;
        }
    }
    af_case_repair(c, budget);
}

void af_case_crossover(const af_case *a, const af_case *b, af_case *out, af_rng *r, size_t budget) {
    af_case x = *a;
    const af_case *y = b;
    if (af_rng_chance(r, 1, 2)) { /* shape */
        x.batch = y->batch, x.q_heads = y->q_heads, x.kv_heads = y->kv_heads;
        x.q_len = y->q_len, x.kv_len = y->kv_len, x.head_dim = y->head_dim, x.v_head_dim = y->v_head_dim;
        memcpy(x.kv_valid, y->kv_valid, sizeof x.kv_valid);
    }
    if (af_rng_chance(r, 1, 2)) x.dtype = y->dtype, x.allow_tf32 = y->allow_tf32;
    if (af_rng_chance(r, 1, 2)) x.scale_set = y->scale_set, x.scale = y->scale, x.placement = y->placement, x.softcap = y->softcap;
    if (af_rng_chance(r, 1, 2)) {
        x.causal = y->causal, x.diag = y->diag, x.diag_offset = y->diag_offset, x.key_padding = y->key_padding;
        x.window_left = y->window_left, x.window_right = y->window_right;
        memcpy(x.kv_valid, y->kv_valid, sizeof x.kv_valid);
    }
    if (af_rng_chance(r, 1, 2)) x.amask = y->amask;
    if (af_rng_chance(r, 1, 2)) x.bmask = y->bmask;
    if (af_rng_chance(r, 1, 2)) x.dropout_p = y->dropout_p, x.dropout_seed = y->dropout_seed;
    for (int t = 0; t < AF_QKV_COUNT; t++)
        if (af_rng_chance(r, 1, 2)) x.t[t] = y->t[t];
    if ((a->bwd.grads || b->bwd.grads) && af_rng_chance(r, 1, 2)) x.bwd = y->bwd;
    if ((a->serve.forms || b->serve.forms) && af_rng_chance(r, 1, 2)) x.serve = y->serve;
    if ((a->fp8.fmt || b->fp8.fmt) && af_rng_chance(r, 1, 2)) x.fp8 = y->fp8, x.dtype = y->dtype;
    af_case_repair(&x, budget);
    *out = x;
}
