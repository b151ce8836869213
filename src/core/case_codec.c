/* case_codec.c - the byte form of a case: a fixed record read like zstd's
 * fuzz_data_producer (a field past the end of the input reads as 0), so any byte string
 * decodes and a byte change touches one field. Little-endian throughout.
 *
 *   off size field                     off size field
 *   0   1    batch - 1 (mod 64)        30  1    diagonal (mod 4)
 *   1   1    kv_heads - 1 (mod 64)     31  4    diagonal_offset (i32)
 *   2   1    group - 1 (mod 16)        35  4    window_left (i32)
 *   3   2    q_len - 1                 39  4    window_right (i32)
 *   5   2    kv_len - 1                43  8    dropout_p (f64)
 *   7   2    head_dim - 1 (mod 512)    51  8    dropout_seed
 *   9   2    v_head_dim - 1 (mod 512)  59  11   additive mask spec
 *   11  1    dtype (mod 3)             70  11   boolean mask spec
 *   12  1    flags: tf32, scale_set,   81  33   q, k, v tensor specs (11 bytes each)
 *            causal, key_padding
 *   13  1    scale_placement (mod 4)   114 4*B  key_padding lengths (u32)
 *   14  8    scale (f64)               X   1    backward: grads (AF_GRAD_* bits)
 *   22  8    softcap (f64)             X+1 10   backward: dO spec, without layout
 *
 * with X = 114 + 4*B (B as the batch byte reads, before repair), then at X+11 the serving
 * record (case_serving.c, 19 + 8*B bytes), then the FP8 record (case_fp8.c: format, three
 * float32 descales). Each part comes after everything older, so an input written
 * before it existed (it ends at X, or at X+11) decodes without it (missing bytes read 0:
 * forward-only, no serving form, no FP8), a forward-only case without a serving form encodes
 * without either, one with a serving form writes eleven zero backward bytes first, and an
 * FP8 case (forward-only, dense) writes zero backward and serving records before its own.
 *
 * mask spec: flags (present, rank2, expanded, live_zero), dims, dtype, pattern, density,
 * fill, mag_q4, seed(4). tensor spec: layout, perm, pad, bcast, dist, mag_q4, special,
 * seed(4); dO's has no layout byte (it is the output's). Repair (case.c) then makes every
 * field valid. */
#include <string.h>

#include "attnfuzz/case.h"
#include "case_fp8.h"
#include "case_serving.h"

/* The longest encoding: the fixed record, every batch row's key padding, the backward. */
_Static_assert(114 + 4 * AF_MAX_BATCH + 1 + 10 + AF_SERVING_FIXED_BYTES + 8 * AF_MAX_BATCH + AF_FP8_BYTES <=
                   AF_CASE_ENCODED_MAX,
               "AF_CASE_ENCODED_MAX holds every case");

typedef struct af_reader {
    const uint8_t *p;
    size_t left;
} af_reader;

static uint64_t af_read_le(af_reader *r, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t byte = 0;
        if (r->left > 0) {
            byte = *r->p++;
            r->left--;
        }
        v |= byte << (8 * i);
    }
    return v;
}
static uint8_t af_read_u8(af_reader *r) { return (uint8_t)af_read_le(r, 1); }
static uint32_t af_read_u32(af_reader *r) { return (uint32_t)af_read_le(r, 4); }
static double af_read_f64(af_reader *r) {
    uint64_t u = af_read_le(r, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static void af_read_mask(af_reader *r, af_mask_spec *m) {
    uint8_t flags = af_read_u8(r);
    m->present = flags & 1;
    m->rank2 = (flags >> 1) & 1;
    m->expanded = (flags >> 2) & 1;
    m->live_zero = (flags >> 3) & 1;
    m->dims = af_read_u8(r) & AF_MDIM_ALL;
    m->dtype = (af_dtype)(af_read_u8(r) % AF_CASE_DTYPE_COUNT);
    m->pattern = (af_mask_pattern)(af_read_u8(r) % AF_MASK_PATTERN_COUNT);
    m->density = af_read_u8(r);
    m->fill = (af_mask_fill)(af_read_u8(r) % AF_FILL_COUNT);
    m->mag_q4 = (int8_t)af_read_u8(r);
    m->seed = af_read_u32(r);
}

static void af_read_tensor(af_reader *r, af_tensor_spec *t, bool with_layout) {
    if (with_layout) t->layout = (af_layout)(af_read_u8(r) % AF_LAYOUT_COUNT);
    t->perm = af_read_u8(r);
    t->pad = af_read_u8(r);
    t->bcast = (af_bcast)(af_read_u8(r) % AF_BCAST_COUNT);
    t->dist = (af_dist)(af_read_u8(r) % AF_DIST_COUNT);
    t->mag_q4 = (int8_t)af_read_u8(r);
    t->special = (af_special)(af_read_u8(r) % AF_SPECIAL_COUNT);
    t->seed = af_read_u32(r);
}

void af_case_decode(af_case *c, const uint8_t *data, size_t size, size_t budget) {
    af_reader r = {data, data ? size : 0};
    af_case_default(c);
    c->batch = 1u + af_read_u8(&r) % AF_MAX_BATCH;
    c->kv_heads = 1u + af_read_u8(&r) % AF_MAX_KV_HEADS;
    c->q_heads = c->kv_heads * (1u + af_read_u8(&r) % AF_MAX_GROUP);
    c->q_len = 1u + (uint32_t)af_read_le(&r, 2);
    c->kv_len = 1u + (uint32_t)af_read_le(&r, 2);
    c->head_dim = 1u + (uint32_t)af_read_le(&r, 2) % AF_MAX_HEAD_DIM;
    c->v_head_dim = 1u + (uint32_t)af_read_le(&r, 2) % AF_MAX_HEAD_DIM;
    c->dtype = (af_dtype)(af_read_u8(&r) % AF_CASE_DTYPE_COUNT);
    uint8_t flags = af_read_u8(&r);
    c->allow_tf32 = flags & 1;
    c->scale_set = (flags >> 1) & 1;
    c->causal = (flags >> 2) & 1;
    c->key_padding = (flags >> 3) & 1;
    c->placement = (af_placement)(af_read_u8(&r) % AF_PLACE_COUNT);
    c->scale = af_read_f64(&r);
    c->softcap = af_read_f64(&r);
    c->diag = (af_diag)(af_read_u8(&r) % AF_DIAG_COUNT);
    c->diag_offset = (int32_t)af_read_u32(&r);
    c->window_left = (int32_t)af_read_u32(&r);
    c->window_right = (int32_t)af_read_u32(&r);
    c->dropout_p = af_read_f64(&r);
    c->dropout_seed = af_read_le(&r, 8);
    af_read_mask(&r, &c->amask);
    af_read_mask(&r, &c->bmask);
    for (int t = 0; t < AF_QKV_COUNT; t++) af_read_tensor(&r, &c->t[t], true);
    for (uint32_t b = 0; b < c->batch; b++) c->kv_valid[b] = af_read_u32(&r);
    c->bwd.grads = af_read_u8(&r);
    af_read_tensor(&r, &c->bwd.dout, false);
    af_serving_decode(c, r.p, r.left, c->batch);
    size_t serving = AF_SERVING_FIXED_BYTES + 8u * c->batch; /* the record's bytes, as read */
    if (serving > r.left) serving = r.left;
    af_fp8_decode(c, r.p ? r.p + serving : NULL, r.left - serving);
    /* kv_valid (and the backward bytes after it) are read before repair clamps the batch,
     * so their position depends only on the batch byte; repair then fits every field. */
    af_case_repair(c, budget);
}

typedef struct af_writer {
    uint8_t *p;
    size_t left;
    bool overflow;
} af_writer;

static void af_write_le(af_writer *w, uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        if (w->left == 0) {
            w->overflow = true;
            return;
        }
        *w->p++ = (uint8_t)(v >> (8 * i));
        w->left--;
    }
}
static void af_write_f64(af_writer *w, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    af_write_le(w, u, 8);
}

static void af_write_mask(af_writer *w, const af_mask_spec *m) {
    af_write_le(w, (uint64_t)(m->present | (m->rank2 << 1) | (m->expanded << 2) | (m->live_zero << 3)), 1);
    af_write_le(w, m->dims, 1);
    af_write_le(w, (uint64_t)(m->dtype == AF_BOOL ? 0 : m->dtype), 1);
    af_write_le(w, (uint64_t)m->pattern, 1);
    af_write_le(w, m->density, 1);
    af_write_le(w, (uint64_t)m->fill, 1);
    af_write_le(w, (uint8_t)m->mag_q4, 1);
    af_write_le(w, m->seed, 4);
}

static void af_write_tensor(af_writer *w, const af_tensor_spec *t, bool with_layout) {
    if (with_layout) af_write_le(w, (uint64_t)t->layout, 1);
    af_write_le(w, t->perm, 1);
    af_write_le(w, t->pad, 1);
    af_write_le(w, (uint64_t)t->bcast, 1);
    af_write_le(w, (uint64_t)t->dist, 1);
    af_write_le(w, (uint8_t)t->mag_q4, 1);
    af_write_le(w, (uint64_t)t->special, 1);
    af_write_le(w, t->seed, 4);
}

size_t af_case_encode(const af_case *c, uint8_t *out, size_t cap) {
    af_writer w = {out, cap, false};
    af_write_le(&w, c->batch - 1, 1);
    af_write_le(&w, c->kv_heads - 1, 1);
    af_write_le(&w, c->q_heads / c->kv_heads - 1, 1);
    af_write_le(&w, c->q_len - 1, 2);
    af_write_le(&w, c->kv_len - 1, 2);
    af_write_le(&w, c->head_dim - 1, 2);
    af_write_le(&w, c->v_head_dim - 1, 2);
    af_write_le(&w, (uint64_t)c->dtype, 1);
    af_write_le(&w, (uint64_t)(c->allow_tf32 | (c->scale_set << 1) | (c->causal << 2) | (c->key_padding << 3)), 1);
    af_write_le(&w, (uint64_t)c->placement, 1);
    af_write_f64(&w, c->scale);
    af_write_f64(&w, c->softcap);
    af_write_le(&w, (uint64_t)c->diag, 1);
    af_write_le(&w, (uint32_t)c->diag_offset, 4);
    af_write_le(&w, (uint32_t)c->window_left, 4);
    af_write_le(&w, (uint32_t)c->window_right, 4);
    af_write_f64(&w, c->dropout_p);
    af_write_le(&w, c->dropout_seed, 8);
    af_write_mask(&w, &c->amask);
    af_write_mask(&w, &c->bmask);
    for (int t = 0; t < AF_QKV_COUNT; t++) af_write_tensor(&w, &c->t[t], true);
    for (uint32_t b = 0; b < c->batch; b++) af_write_le(&w, c->kv_valid[b], 4);
    bool fp8 = c->fp8.fmt != AF_FP8_NONE;
    if (c->bwd.grads || c->serve.forms || fp8) {
        af_write_le(&w, c->bwd.grads, 1);
        af_write_tensor(&w, &c->bwd.dout, false);
    }
    if ((c->serve.forms || fp8) && !w.overflow) { /* without a form: a record of zeros */
        size_t n = 0;
        if (af_serving_encode(c, w.p, w.left, &n)) {
            w.p += n, w.left -= n;
        } else {
            w.overflow = true;
        }
    }
    if (fp8 && !w.overflow) {
        uint8_t rec[AF_FP8_BYTES];
        af_fp8_encode(c, rec);
        for (size_t i = 0; i < AF_FP8_BYTES; i++) af_write_le(&w, rec[i], 1);
    }
    return w.overflow ? 0 : cap - w.left;
}
