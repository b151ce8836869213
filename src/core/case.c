/* case.c - the case value: names, defaults, repair, validation, derived quantities.
 * The byte codec is case_codec.c, JSON is case_json.c, the generator case_gen.c. */
#include "attnfuzz/case.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnfuzz/tensor.h"
#include "case_fp8.h"
#include "case_serving.h"

const char *const af_layout_names[AF_LAYOUT_COUNT] = {
    "bhsd", "bshd", "sbhd", "bsd", "channels_first", "qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first",
};
_Static_assert(sizeof(af_layout_names) / sizeof(af_layout_names[0]) == AF_LAYOUT_COUNT, "names");

const char *const af_placement_names[AF_PLACE_COUNT] = {"scores", "q", "k", "sqrt_qk"};
_Static_assert(sizeof(af_placement_names) / sizeof(af_placement_names[0]) == AF_PLACE_COUNT, "names");

const char *const af_diag_names[AF_DIAG_COUNT] = {"top_left", "bottom_right", "bottom_right_valid",
                                                  "explicit"};
_Static_assert(sizeof(af_diag_names) / sizeof(af_diag_names[0]) == AF_DIAG_COUNT, "names");

const char *const af_dist_names[AF_DIST_COUNT] = {"normal",  "uniform",       "small_int",
                                                  "one_hot", "near_overflow", "denormal"};
_Static_assert(sizeof(af_dist_names) / sizeof(af_dist_names[0]) == AF_DIST_COUNT, "names");

const char *const af_special_names[AF_SPECIAL_COUNT] = {"none", "nan_masked", "inf_masked", "nan_live",
                                                        "inf_live"};
_Static_assert(sizeof(af_special_names) / sizeof(af_special_names[0]) == AF_SPECIAL_COUNT, "names");

const char *const af_bcast_names[AF_BCAST_COUNT] = {"none", "batch", "heads"};
_Static_assert(sizeof(af_bcast_names) / sizeof(af_bcast_names[0]) == AF_BCAST_COUNT, "names");

const char *const af_mask_pattern_names[AF_MASK_PATTERN_COUNT] = {"random", "block_diag", "full_rows",
                                                                  "key_cols", "none"};
_Static_assert(sizeof(af_mask_pattern_names) / sizeof(af_mask_pattern_names[0]) == AF_MASK_PATTERN_COUNT,
               "names");

const char *const af_mask_fill_names[AF_FILL_COUNT] = {"neg_inf", "lowest", "neg_large"};
_Static_assert(sizeof(af_mask_fill_names) / sizeof(af_mask_fill_names[0]) == AF_FILL_COUNT, "names");

const char *const af_tensor_names[AF_QKV_COUNT] = {"q", "k", "v"};

const char *const af_grad_names[AF_GRAD_COUNT] = {"dq", "dk", "dv", "dmask"};
_Static_assert(sizeof(af_grad_names) / sizeof(af_grad_names[0]) == AF_GRAD_COUNT, "names");
_Static_assert(AF_GRAD_ALL == (1 << AF_GRAD_COUNT) - 1, "one bit per gradient");

af_layout af_out_layout(af_layout l) {
    switch (l) {
    case AF_LAYOUT_QKV_BS3HD:
    case AF_LAYOUT_QKV_BSH3D: return AF_LAYOUT_BSHD;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: return AF_LAYOUT_CHANNELS_FIRST;
    case AF_LAYOUT_BHSD:
    case AF_LAYOUT_BSHD:
    case AF_LAYOUT_SBHD:
    case AF_LAYOUT_BSD:
    case AF_LAYOUT_CHANNELS_FIRST:
    case AF_LAYOUT_COUNT: break;
    }
    return l;
}

void af_case_default(af_case *c) {
    memset(c, 0, sizeof *c);
    c->batch = c->q_heads = c->kv_heads = c->q_len = c->kv_len = c->head_dim = c->v_head_dim = 1;
    c->dtype = AF_F32;
    c->window_left = c->window_right = -1;
    c->amask.dtype = AF_F32;
    c->bmask.dtype = AF_BOOL;
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = AF_LAYOUT_BHSD, c->fp8.descale[t] = 1.0f;
}

static uint32_t af_clamp_u32(uint32_t x, uint32_t lo, uint32_t hi) { return x < lo ? lo : x > hi ? hi : x; }
static int32_t af_clamp_i32(int32_t x, int32_t lo, int32_t hi) { return x < lo ? lo : x > hi ? hi : x; }
static int8_t af_clamp_i8(int8_t x, int8_t lo, int8_t hi) { return x < lo ? lo : x > hi ? hi : x; }

bool af_case_is_packed(const af_case *c) { return c->t[AF_Q].layout >= AF_LAYOUT_FIRST_PACKED; }

bool af_case_has_window(const af_case *c) { return c->window_left >= 0 || c->window_right >= 0; }

double af_case_scale(const af_case *c) {
    return c->scale_set ? c->scale : 1.0 / sqrt((double)c->head_dim);
}

uint32_t af_case_valid_keys(const af_case *c, uint32_t b) {
    if (af_case_has_lens(c)) return af_case_seg_k(c, b);
    return c->key_padding ? c->kv_valid[b] : c->kv_len;
}

int32_t af_case_diag_offset(const af_case *c, uint32_t b) {
    switch (c->diag) {
    case AF_DIAG_TOP_LEFT: return 0;
    /* a serving segment is its own attention: its lengths, not the padded view's */
    case AF_DIAG_BOTTOM_RIGHT: return (int32_t)af_case_seg_k(c, b) - (int32_t)af_case_seg_q(c, b);
    case AF_DIAG_BOTTOM_RIGHT_VALID: return (int32_t)af_case_valid_keys(c, b) - (int32_t)af_case_seg_q(c, b);
    case AF_DIAG_EXPLICIT: return c->diag_offset;
    case AF_DIAG_COUNT: break;
    }
    return 0;
}

/* Can layout l broadcast dimension kind bc with a stride of 0? Folded layouts merge heads
 * into one dimension, so only the batch can broadcast there. */
static bool af_bcast_ok(af_layout l, af_bcast bc) {
    if (bc != AF_BCAST_HEADS) return true;
    return !(l == AF_LAYOUT_BSD || l == AF_LAYOUT_CHANNELS_FIRST || l == AF_LAYOUT_QKV_CHANNELS_FIRST);
}

static void af_tensor_spec_repair(af_tensor_spec *t) {
    if ((unsigned)t->layout >= AF_LAYOUT_COUNT) t->layout = AF_LAYOUT_BHSD;
    t->perm = (uint8_t)(t->perm % af_layout_perm_count(t->layout));
    if (t->pad > AF_MAX_PAD) t->pad = (uint8_t)(t->pad % (AF_MAX_PAD + 1));
    if ((unsigned)t->bcast >= AF_BCAST_COUNT || !af_bcast_ok(t->layout, t->bcast)) t->bcast = AF_BCAST_NONE;
    if ((unsigned)t->dist >= AF_DIST_COUNT) t->dist = AF_DIST_NORMAL;
    t->mag_q4 = af_clamp_i8(t->mag_q4, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX);
    if ((unsigned)t->special >= AF_SPECIAL_COUNT) t->special = AF_SPECIAL_NONE;
}

static void af_mask_spec_repair(af_mask_spec *m, bool additive) {
    if (!m->present) {
        memset(m, 0, sizeof *m);
        m->dtype = additive ? AF_F32 : AF_BOOL;
        return;
    }
    m->dims &= AF_MDIM_ALL;
    if (m->dims & (AF_MDIM_B | AF_MDIM_H)) m->rank2 = false;
    if (additive) {
        if ((unsigned)m->dtype >= AF_CASE_DTYPE_COUNT) m->dtype = AF_F32;
        if ((unsigned)m->fill >= AF_FILL_COUNT) m->fill = AF_FILL_NEG_INF;
        m->mag_q4 = af_clamp_i8(m->mag_q4, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX);
    } else {
        m->dtype = AF_BOOL;
        m->fill = AF_FILL_NEG_INF;
        m->mag_q4 = 0;
        m->live_zero = false;
    }
    if ((unsigned)m->pattern >= AF_MASK_PATTERN_COUNT) m->pattern = AF_MASK_RANDOM;
}

/* The backward part: known gradients only, dmask only with an additive mask, dO in the
 * output's layout; a forward-only case holds zeros there. Q's layout and the additive
 * mask must be repaired first. */
static void af_backward_repair(af_case *c) {
    af_backward_spec *bw = &c->bwd;
    bw->grads &= AF_GRAD_ALL;
    if (!c->amask.present) bw->grads &= (uint8_t)~AF_GRAD_DMASK;
    if (!bw->grads) {
        memset(bw, 0, sizeof *bw);
        return;
    }
    bw->dout.layout = af_out_layout(c->t[AF_Q].layout);
    af_tensor_spec_repair(&bw->dout);
}

/* Halves the dimension that contributes most, keeping the shape rules. */
static void af_case_shrink_step(af_case *c) {
    bool packed = af_case_is_packed(c);
    uint32_t s = c->q_len > c->kv_len ? c->q_len : c->kv_len;
    uint32_t d = c->head_dim > c->v_head_dim ? c->head_dim : c->v_head_dim;
    if (s > 64 || (s > 1 && c->batch == 1 && c->q_heads == 1)) {
        if (packed || c->q_len == c->kv_len) {
            c->q_len = c->kv_len = (s + 1) / 2;
        } else if (c->q_len > c->kv_len) {
            c->q_len = (c->q_len + 1) / 2;
        } else {
            c->kv_len = (c->kv_len + 1) / 2;
        }
    } else if (c->batch > 1) {
        c->batch = (c->batch + 1) / 2;
    } else if (c->q_heads > 1) {
        uint32_t group = c->q_heads / c->kv_heads;
        if (group > 1) {
            c->q_heads = c->kv_heads * ((group + 1) / 2);
        } else {
            c->kv_heads = (c->kv_heads + 1) / 2;
            c->q_heads = c->kv_heads;
        }
    } else if (d > 1) {
        if (packed || c->head_dim == c->v_head_dim) {
            c->head_dim = c->v_head_dim = (d + 1) / 2;
        } else if (c->head_dim > c->v_head_dim) {
            c->head_dim = (c->head_dim + 1) / 2;
        } else {
            c->v_head_dim = (c->v_head_dim + 1) / 2;
        }
    } else if (s > 1) {
        c->q_len = (c->q_len + 1) / 2;
        c->kv_len = (c->kv_len + 1) / 2;
    } else {
        /* 1x1x1x1: only padding can still be large */
        for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].pad = 0;
    }
}

void af_case_repair(af_case *c, size_t budget) {
    if (budget == 0) budget = AF_DEFAULT_BUDGET;
    if ((unsigned)c->dtype >= AF_CASE_DTYPE_COUNT) c->dtype = AF_F32;
    af_fp8_repair(c); /* first: an FP8 case drops its backward and serving parts */
    if (c->dtype != AF_F32) c->allow_tf32 = false;

    c->batch = af_clamp_u32(c->batch, 1, AF_MAX_BATCH);
    c->kv_heads = af_clamp_u32(c->kv_heads, 1, AF_MAX_KV_HEADS);
    uint32_t group = c->q_heads / c->kv_heads;
    group = af_clamp_u32(group, 1, AF_MAX_GROUP);
    while (c->kv_heads * group > AF_MAX_Q_HEADS) group--;
    c->q_heads = c->kv_heads * group;
    c->q_len = af_clamp_u32(c->q_len, 1, AF_MAX_SEQ);
    c->kv_len = af_clamp_u32(c->kv_len, 1, AF_MAX_SEQ);
    c->head_dim = af_clamp_u32(c->head_dim, 1, AF_MAX_HEAD_DIM);
    c->v_head_dim = af_clamp_u32(c->v_head_dim, 1, AF_MAX_HEAD_DIM);

    for (int t = 0; t < AF_QKV_COUNT; t++) af_tensor_spec_repair(&c->t[t]);
    if (af_case_is_packed(c)) {
        /* One buffer: K and V share Q's layout and strides; the shapes must agree. */
        for (int t = AF_K; t <= AF_V; t++) {
            c->t[t].layout = c->t[AF_Q].layout;
            c->t[t].perm = c->t[AF_Q].perm;
            c->t[t].pad = c->t[AF_Q].pad;
            c->t[t].bcast = c->t[AF_Q].bcast;
        }
        c->kv_len = c->q_len;
        if (c->q_heads > AF_MAX_KV_HEADS) c->q_heads = AF_MAX_KV_HEADS; /* Hq = Hkv <= 64 */
        c->kv_heads = c->q_heads;
        c->v_head_dim = c->head_dim;
    } else {
        for (int t = AF_K; t <= AF_V; t++) {
            if (c->t[t].layout >= AF_LAYOUT_FIRST_PACKED) {
                c->t[t].layout = AF_LAYOUT_BHSD;
                af_tensor_spec_repair(&c->t[t]);
            }
        }
    }

    /* after packing: a serving form turns a packed QKV buffer into three bshd tensors
     * (the shapes packing forced stay) */
    af_serving_repair_pre(c);

    if (c->scale_set) {
        if (!isfinite(c->scale)) {
            c->scale_set = false;
        } else if (fabs(c->scale) > AF_MAX_SCALE) {
            c->scale = copysign(AF_MAX_SCALE, c->scale);
        }
    }
    if (!c->scale_set) c->scale = 0.0;
    if ((unsigned)c->placement >= AF_PLACE_COUNT) c->placement = AF_PLACE_SCORES;
    if (!(c->softcap > 0.0)) c->softcap = 0.0; /* also NaN */
    if (c->softcap > AF_MAX_SOFTCAP) c->softcap = AF_MAX_SOFTCAP;
    if (c->softcap > 0.0 && c->softcap < AF_MIN_SOFTCAP) c->softcap = AF_MIN_SOFTCAP;

    if ((unsigned)c->diag >= AF_DIAG_COUNT) c->diag = AF_DIAG_TOP_LEFT;
    c->diag_offset = af_clamp_i32(c->diag_offset, -AF_MAX_SEQ, AF_MAX_SEQ);
    if (c->diag != AF_DIAG_EXPLICIT) c->diag_offset = 0;
    c->window_left = af_clamp_i32(c->window_left, -1, AF_MAX_SEQ);
    c->window_right = af_clamp_i32(c->window_right, -1, AF_MAX_SEQ);

    af_mask_spec_repair(&c->amask, true);
    af_mask_spec_repair(&c->bmask, false);
    af_backward_repair(c);

    if (!(c->dropout_p > 0.0)) c->dropout_p = 0.0; /* also NaN */
    if (c->dropout_p > 1.0) c->dropout_p = 1.0;

    for (int guard = 0; guard < 200 && af_case_tensor_bytes(c) > budget; guard++) af_case_shrink_step(c);
    af_serving_repair_post(c);

    for (uint32_t b = 0; b < AF_MAX_BATCH; b++) {
        if (!c->key_padding || b >= c->batch) {
            c->kv_valid[b] = 0;
        } else if (c->kv_valid[b] > c->kv_len) {
            c->kv_valid[b] = c->kv_valid[b] % (c->kv_len + 1);
        }
    }
}

af_status af_case_validate(const af_case *c, size_t budget, af_error *err) {
    if (budget == 0) budget = AF_DEFAULT_BUDGET;
    AF_RETURN_ERROR_IF((unsigned)c->dtype >= AF_CASE_DTYPE_COUNT, err, AF_ERR_INVALID,
                       "dtype must be f32, f16 or bf16");
    AF_RETURN_ERROR_IF(c->batch < 1 || c->batch > AF_MAX_BATCH, err, AF_ERR_INVALID,
                       "batch (%u) must be in 1..%d", c->batch, AF_MAX_BATCH);
    AF_RETURN_ERROR_IF(c->kv_heads < 1 || c->kv_heads > AF_MAX_KV_HEADS, err, AF_ERR_INVALID,
                       "kv_heads (%u) must be in 1..%d", c->kv_heads, AF_MAX_KV_HEADS);
    AF_RETURN_ERROR_IF(c->q_heads < 1 || c->q_heads > AF_MAX_Q_HEADS, err, AF_ERR_INVALID,
                       "q_heads (%u) must be in 1..%d", c->q_heads, AF_MAX_Q_HEADS);
    AF_RETURN_ERROR_IF(c->q_heads % c->kv_heads != 0, err, AF_ERR_INVALID,
                       "q_heads (%u) is not a multiple of kv_heads (%u)", c->q_heads, c->kv_heads);
    AF_RETURN_ERROR_IF(c->q_heads / c->kv_heads > AF_MAX_GROUP, err, AF_ERR_INVALID,
                       "q_heads / kv_heads (%u) exceeds %d", c->q_heads / c->kv_heads, AF_MAX_GROUP);
    AF_RETURN_ERROR_IF(c->q_len < 1 || c->q_len > AF_MAX_SEQ || c->kv_len < 1 || c->kv_len > AF_MAX_SEQ,
                       err, AF_ERR_INVALID, "q_len (%u) and kv_len (%u) must be in 1..%d", c->q_len,
                       c->kv_len, AF_MAX_SEQ);
    AF_RETURN_ERROR_IF(c->head_dim < 1 || c->head_dim > AF_MAX_HEAD_DIM || c->v_head_dim < 1 ||
                           c->v_head_dim > AF_MAX_HEAD_DIM,
                       err, AF_ERR_INVALID, "head_dim (%u) and v_head_dim (%u) must be in 1..%d",
                       c->head_dim, c->v_head_dim, AF_MAX_HEAD_DIM);
    AF_RETURN_ERROR_IF(c->dtype != AF_F32 && c->allow_tf32, err, AF_ERR_INVALID,
                       "allow_tf32 applies to f32 cases only");
    for (int t = 0; t <= AF_QKV_COUNT; t++) {
        if (t == AF_QKV_COUNT && !c->bwd.grads) break;
        const af_tensor_spec *s = t < AF_QKV_COUNT ? &c->t[t] : &c->bwd.dout;
        const char *n = t < AF_QKV_COUNT ? af_tensor_names[t] : "backward.do";
        AF_RETURN_ERROR_IF((unsigned)s->layout >= AF_LAYOUT_COUNT, err, AF_ERR_INVALID, "%s: unknown layout", n);
        AF_RETURN_ERROR_IF(s->perm >= af_layout_perm_count(s->layout), err, AF_ERR_INVALID,
                           "%s: perm %u out of range for layout %s", n, s->perm, af_layout_names[s->layout]);
        AF_RETURN_ERROR_IF(s->pad > AF_MAX_PAD, err, AF_ERR_INVALID, "%s: pad %u exceeds %d", n, s->pad,
                           AF_MAX_PAD);
        AF_RETURN_ERROR_IF((unsigned)s->bcast >= AF_BCAST_COUNT || !af_bcast_ok(s->layout, s->bcast), err,
                           AF_ERR_INVALID, "%s: layout %s cannot broadcast over heads", n,
                           af_layout_names[s->layout]);
        AF_RETURN_ERROR_IF((unsigned)s->dist >= AF_DIST_COUNT, err, AF_ERR_INVALID, "%s: unknown dist", n);
        AF_RETURN_ERROR_IF(s->mag_q4 < AF_MAG_Q4_MIN || s->mag_q4 > AF_MAG_Q4_MAX, err, AF_ERR_INVALID,
                           "%s: log10_magnitude out of [-3, 4]", n);
        AF_RETURN_ERROR_IF((unsigned)s->special >= AF_SPECIAL_COUNT, err, AF_ERR_INVALID,
                           "%s: unknown special", n);
    }
    if (af_case_is_packed(c)) {
        for (int t = AF_K; t <= AF_V; t++)
            AF_RETURN_ERROR_IF(c->t[t].layout != c->t[AF_Q].layout || c->t[t].perm != c->t[AF_Q].perm ||
                                   c->t[t].pad != c->t[AF_Q].pad || c->t[t].bcast != c->t[AF_Q].bcast,
                               err, AF_ERR_INVALID,
                               "packed layout %s: k and v must share q's layout, perm, pad and broadcast",
                               af_layout_names[c->t[AF_Q].layout]);
        AF_RETURN_ERROR_IF(c->q_len != c->kv_len || c->q_heads != c->kv_heads || c->head_dim != c->v_head_dim,
                           err, AF_ERR_INVALID,
                           "packed layout %s needs q_len == kv_len, q_heads == kv_heads, head_dim == "
                           "v_head_dim (got %u/%u, %u/%u, %u/%u)",
                           af_layout_names[c->t[AF_Q].layout], c->q_len, c->kv_len, c->q_heads, c->kv_heads,
                           c->head_dim, c->v_head_dim);
    } else {
        for (int t = AF_K; t <= AF_V; t++)
            AF_RETURN_ERROR_IF(c->t[t].layout >= AF_LAYOUT_FIRST_PACKED, err, AF_ERR_INVALID,
                               "%s uses packed layout %s but q does not", af_tensor_names[t],
                               af_layout_names[c->t[t].layout]);
    }
    AF_RETURN_ERROR_IF(c->scale_set && (!isfinite(c->scale) || fabs(c->scale) > AF_MAX_SCALE), err,
                       AF_ERR_INVALID, "scale (%g) must be finite with |scale| <= %g", c->scale, AF_MAX_SCALE);
    AF_RETURN_ERROR_IF((unsigned)c->placement >= AF_PLACE_COUNT, err, AF_ERR_INVALID, "unknown scale_placement");
    AF_RETURN_ERROR_IF(!(c->softcap >= 0.0) || c->softcap > AF_MAX_SOFTCAP ||
                           (c->softcap > 0.0 && c->softcap < AF_MIN_SOFTCAP),
                       err, AF_ERR_INVALID, "softcap (%g) must be 0 (off) or in [%g, %g]", c->softcap,
                       AF_MIN_SOFTCAP, AF_MAX_SOFTCAP);
    AF_RETURN_ERROR_IF((unsigned)c->diag >= AF_DIAG_COUNT, err, AF_ERR_INVALID, "unknown diagonal");
    AF_RETURN_ERROR_IF(c->diag_offset < -AF_MAX_SEQ || c->diag_offset > AF_MAX_SEQ, err, AF_ERR_INVALID,
                       "diagonal_offset (%d) out of range", c->diag_offset);
    AF_RETURN_ERROR_IF(c->window_left < -1 || c->window_right < -1 || c->window_left > AF_MAX_SEQ ||
                           c->window_right > AF_MAX_SEQ,
                       err, AF_ERR_INVALID, "window (%d, %d) must be -1 (unbounded) or 0..%d", c->window_left,
                       c->window_right, AF_MAX_SEQ);
    if (c->key_padding)
        for (uint32_t b = 0; b < c->batch; b++)
            AF_RETURN_ERROR_IF(c->kv_valid[b] > c->kv_len, err, AF_ERR_INVALID,
                               "key_padding[%u] (%u) exceeds kv_len (%u)", b, c->kv_valid[b], c->kv_len);
    const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
    for (int k = 0; k < 2; k++) {
        const af_mask_spec *m = ms[k];
        const char *n = k == 0 ? "additive_mask" : "bool_mask";
        if (!m->present) continue;
        AF_RETURN_ERROR_IF(m->dims > AF_MDIM_ALL, err, AF_ERR_INVALID, "%s: bad broadcast dims", n);
        AF_RETURN_ERROR_IF(m->rank2 && (m->dims & (AF_MDIM_B | AF_MDIM_H)), err, AF_ERR_INVALID,
                           "%s: a 2-D mask cannot vary over batch or heads", n);
        AF_RETURN_ERROR_IF(k == 0 && (unsigned)m->dtype >= AF_CASE_DTYPE_COUNT, err, AF_ERR_INVALID,
                           "%s: dtype must be f32, f16 or bf16", n);
        AF_RETURN_ERROR_IF((unsigned)m->pattern >= AF_MASK_PATTERN_COUNT, err, AF_ERR_INVALID,
                           "%s: unknown pattern", n);
        AF_RETURN_ERROR_IF((unsigned)m->fill >= AF_FILL_COUNT, err, AF_ERR_INVALID, "%s: unknown fill", n);
    }
    AF_RETURN_ERROR_IF(!(c->dropout_p >= 0.0 && c->dropout_p <= 1.0), err, AF_ERR_INVALID,
                       "dropout_p (%g) must be in [0, 1]", c->dropout_p);
    AF_RETURN_ERROR_IF(c->bwd.grads & ~AF_GRAD_ALL, err, AF_ERR_INVALID, "backward.grads: unknown gradient bits");
    AF_RETURN_ERROR_IF((c->bwd.grads & AF_GRAD_DMASK) && !c->amask.present, err, AF_ERR_INVALID,
                       "backward.grads: dmask needs an additive mask");
    AF_RETURN_ERROR_IF(c->bwd.grads && c->bwd.dout.layout != af_out_layout(c->t[AF_Q].layout), err, AF_ERR_INVALID,
                       "backward.do: layout %s is not the output layout of q (%s)",
                       af_layout_names[c->bwd.dout.layout % AF_LAYOUT_COUNT],
                       af_layout_names[af_out_layout(c->t[AF_Q].layout)]);
    AF_TRY(af_serving_validate(c, err));
    AF_TRY(af_fp8_validate(c, err));
    size_t bytes = af_case_tensor_bytes(c);
    AF_RETURN_ERROR_IF(bytes > budget, err, AF_ERR_INVALID,
                       "tensors need %zu bytes, over the budget of %zu (raise it with --budget)", bytes, budget);
    return AF_OK;
}

static bool af_mask_equal(const af_mask_spec *a, const af_mask_spec *b) {
    return a->present == b->present && a->rank2 == b->rank2 && a->expanded == b->expanded &&
           a->dims == b->dims && a->dtype == b->dtype && a->pattern == b->pattern && a->density == b->density &&
           a->fill == b->fill && a->mag_q4 == b->mag_q4 && a->live_zero == b->live_zero && a->seed == b->seed;
}

bool af_case_equal(const af_case *a, const af_case *b) {
    if (a->batch != b->batch || a->q_heads != b->q_heads || a->kv_heads != b->kv_heads ||
        a->q_len != b->q_len || a->kv_len != b->kv_len || a->head_dim != b->head_dim ||
        a->v_head_dim != b->v_head_dim || a->dtype != b->dtype || a->allow_tf32 != b->allow_tf32 ||
        a->scale_set != b->scale_set || memcmp(&a->scale, &b->scale, sizeof a->scale) != 0 ||
        a->placement != b->placement || memcmp(&a->softcap, &b->softcap, sizeof a->softcap) != 0 ||
        a->causal != b->causal || a->diag != b->diag || a->diag_offset != b->diag_offset ||
        a->key_padding != b->key_padding || a->window_left != b->window_left ||
        a->window_right != b->window_right || memcmp(&a->dropout_p, &b->dropout_p, sizeof a->dropout_p) != 0 ||
        a->dropout_seed != b->dropout_seed)
        return false;
    if (memcmp(a->kv_valid, b->kv_valid, sizeof a->kv_valid) != 0) return false;
    if (!af_mask_equal(&a->amask, &b->amask) || !af_mask_equal(&a->bmask, &b->bmask)) return false;
    if (a->bwd.grads != b->bwd.grads || !af_serving_equal(a, b) || !af_fp8_equal(a, b)) return false;
    for (int t = 0; t <= AF_QKV_COUNT; t++) {
        const af_tensor_spec *x = t < AF_QKV_COUNT ? &a->t[t] : &a->bwd.dout;
        const af_tensor_spec *y = t < AF_QKV_COUNT ? &b->t[t] : &b->bwd.dout;
        if (x->layout != y->layout || x->perm != y->perm || x->pad != y->pad || x->bcast != y->bcast ||
            x->dist != y->dist || x->mag_q4 != y->mag_q4 || x->special != y->special || x->seed != y->seed)
            return false;
    }
    return true;
}

size_t af_case_tensor_bytes(const af_case *c) {
    size_t total = af_case_input_span(c, AF_Q);
    if (!af_case_is_packed(c)) total += af_case_input_span(c, AF_K) + af_case_input_span(c, AF_V);
    const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
    double full[4] = {(double)c->batch, (double)c->q_heads, (double)c->q_len, (double)c->kv_len};
    double sum = (double)total;
    for (int k = 0; k < 2; k++) {
        if (!ms[k]->present) continue;
        double n = (double)af_dtype_size(ms[k]->dtype);
        for (int d = 0; d < 4; d++) /* broadcast dims are size 1 or stride 0: no storage */
            if (ms[k]->dims & (1u << d)) n *= full[d];
        sum += n;
    }
    sum += (double)c->batch * c->q_heads * c->q_len * c->v_head_dim * (double)af_dtype_size(c->dtype);
    if (c->bwd.grads) { /* dO, and each gradient asked for at the case dtype (dmask at the mask's) */
        sum += (double)af_case_dout_span(c);
        for (int g = 0; g < AF_GRAD_COUNT; g++) {
            if (!(c->bwd.grads & (1u << g))) continue;
            double n = (double)af_dtype_size(g == 3 ? c->amask.dtype : c->dtype);
            if (g == 3) {
                for (int d = 0; d < 4; d++)
                    if (c->amask.dims & (1u << d)) n *= full[d];
            } else {
                n *= (double)c->batch * (g == 0 ? c->q_heads : c->kv_heads) * (g == 0 ? c->q_len : c->kv_len) *
                     (g == 2 ? c->v_head_dim : c->head_dim);
            }
            sum += n;
        }
    }
    sum += af_serving_tensor_bytes(c);
    return sum > (double)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)sum;
}

double af_case_flops(const af_case *c) {
    double f = 2.0 * c->batch * c->q_heads * (double)c->q_len * c->kv_len * (double)(c->head_dim + c->v_head_dim);
    /* a backward recomputes S and adds dV, dP, dQ and dK: five products where the forward
     * has two (FlashAttention-2's count), 2.5 times the forward */
    return c->bwd.grads ? 3.5 * f : f;
}
