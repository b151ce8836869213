/* inputs.c - materializes a case: storage for Q, K, V and the masks in their physical
 * layouts, and every value drawn from the case's distributions.
 *
 * Values are a pure function of (tensor seed, canonical element index): element
 * (b, h, s, d) draws Philox block ((b*H + h)*S + s)*D + d, in float64, rounded once to
 * the dtype. A broadcast (stride-0) dim draws index 0, so its copies agree. Padding
 * between rows holds NaN: an implementation that reads it shows it. The upstream
 * gradient dO of a backward case is drawn the same way, as a fourth tensor.
 *
 * FP8 tensors (an FP8 case's Q, K, V) store x / descale rounded once to the format, the
 * magnitude clamped to its largest finite value first (saturating, as users' scaling code
 * clamps before the cast): x is the float64 draw, as a user's tensor holds it before
 * quantizing. The near-overflow and denormal distributions are drawn in the format's own
 * range instead (+-[0.25, 1.05] of its largest finite value: the top ones round or clamp to
 * it; its subnormals), so they reach those stored values whatever the descale. Padding holds
 * the NaN byte 0x7f (NaN in both formats). */
#include <math.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"
#include "inputs_serving.h"
#include "layout_internal.h"

enum { AF_BUF_Q, AF_BUF_K, AF_BUF_V, AF_BUF_AMASK, AF_BUF_BMASK, AF_BUF_DEAD, AF_BUF_DOUT, AF_BUF_SERVE,
       AF_BUF_COUNT };

/* Philox streams: one per drawn object, so no two share random numbers. A tensor's
 * streams are offset by its index: q 0, k 1, v 2, dO 3. */
enum { AF_STREAM_VALUES = 0, AF_STREAM_ONE_HOT = 8, AF_STREAM_SPECIAL = 16, AF_STREAM_AMASK = 24,
       AF_STREAM_BMASK = 25 };

struct af_inputs {
    af_case c;
    af_case_tensors t;
    void *buf[AF_BUF_COUNT];
    size_t cap[AF_BUF_COUNT];
};

af_inputs *af_inputs_create(void) { return af_calloc(1, sizeof(af_inputs)); }

void af_inputs_destroy(af_inputs *in) {
    if (!in) return;
    for (int k = 0; k < AF_BUF_COUNT; k++) af_free(in->buf[k]);
    af_free(in);
}

const af_case_tensors *af_inputs_get(const af_inputs *in) { return &in->t; }
af_case_tensors *af_inputs_get_mut(af_inputs *in) { return &in->t; }

/* Grows buffer k to at least n bytes (contents are not kept). */
static af_status af_inputs_reserve(af_inputs *in, int k, size_t n, af_error *err) {
    if (n <= in->cap[k]) return AF_OK;
    af_free(in->buf[k]);
    in->buf[k] = af_malloc(n);
    in->cap[k] = in->buf[k] ? n : 0;
    AF_RETURN_ERROR_IF(!in->buf[k], err, AF_ERR_NOMEM, "out of memory allocating %zu bytes of tensors", n);
    return AF_OK;
}

static void af_fill_nan(void *p, size_t bytes, af_dtype dt) {
    if (dt == AF_F32) {
        uint32_t nan = 0x7fc00000u;
        for (size_t off = 0; off + 4 <= bytes; off += 4) memcpy((char *)p + off, &nan, 4);
    } else if (af_dtype_is_fp8(dt)) {
        memset(p, 0x7f, bytes);
    } else if (dt == AF_F16 || dt == AF_BF16) {
        uint16_t nan = dt == AF_F16 ? 0x7e00u : 0x7fc0u;
        for (size_t off = 0; off + 2 <= bytes; off += 2) memcpy((char *)p + off, &nan, 2);
    } else {
        memset(p, 0, bytes);
    }
}

/* Physical mask tensor and its canonical [B, Hq, Sq, Sk] view. */
static size_t af_mask_layout(const af_case *c, const af_mask_spec *m, af_tensor *t, af_view *v) {
    size_t full[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
    size_t ne4[4];
    for (int d = 0; d < 4; d++) ne4[d] = (m->dims & (1u << d)) ? full[d] : 1;
    memset(t, 0, sizeof *t);
    t->dtype = m->dtype;
    /* stored dims: contiguous over the dims that are full; broadcast dims cost nothing */
    size_t nb4[4];
    size_t stride = af_dtype_size(m->dtype);
    for (int d = 3; d >= 0; d--) {
        nb4[d] = ne4[d] > 1 ? stride : 0;
        stride *= ne4[d];
    }
    int first = m->rank2 ? 2 : 0;
    t->ndim = 4 - first;
    for (int d = first; d < 4; d++) {
        t->ne[d - first] = m->expanded ? full[d] : ne4[d];
        t->nb[d - first] = nb4[d];
    }
    v->dtype = m->dtype;
    for (int d = 0; d < 4; d++) {
        v->ne[d] = full[d];
        v->nb[d] = nb4[d];
    }
    return stride;
}

af_status af_inputs_alloc(af_inputs *in, const af_case *c, af_error *err) {
    in->c = *c;
    c = &in->c;
    af_case_tensors *t = &in->t;
    memset(t, 0, sizeof *t);
    t->c = c;
    af_tensor *qkv[3] = {&t->q, &t->k, &t->v};
    af_view *views[3] = {&t->qv, &t->kv, &t->vv};
    bool packed = af_case_is_packed(c);
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        if (packed && w > 0) {
            *qkv[w] = t->q;
        } else {
            size_t span = af_case_input_layout(c, (af_tensor_id)w, qkv[w]);
            AF_TRY(af_inputs_reserve(in, AF_BUF_Q + w, span, err));
            af_fill_nan(in->buf[AF_BUF_Q + w], span, qkv[w]->dtype);
            qkv[w]->data = in->buf[AF_BUF_Q + w];
        }
        size_t H, S, D;
        af_case_tensor_dims(c, (af_tensor_id)w, &H, &S, &D);
        af_layout_view(c->t[packed ? AF_Q : w].layout, qkv[w], (af_tensor_id)w, H, D, views[w]);
        views[w]->descale = (float)af_case_descale(c, (af_tensor_id)w);
    }
    const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
    af_tensor *mt[2] = {&t->amask, &t->bmask};
    af_view *mv[2] = {&t->am, &t->bm};
    for (int k = 0; k < 2; k++) {
        if (!ms[k]->present) continue;
        size_t bytes = af_mask_layout(c, ms[k], mt[k], mv[k]);
        AF_TRY(af_inputs_reserve(in, AF_BUF_AMASK + k, bytes, err));
        mt[k]->data = in->buf[AF_BUF_AMASK + k];
        mv[k]->data = in->buf[AF_BUF_AMASK + k];
    }
    if (c->bwd.grads) {
        size_t span = af_case_dout_layout(c, &t->dout);
        AF_TRY(af_inputs_reserve(in, AF_BUF_DOUT, span, err));
        af_fill_nan(in->buf[AF_BUF_DOUT], span, c->dtype);
        t->dout.data = in->buf[AF_BUF_DOUT];
        af_layout_view(c->bwd.dout.layout, &t->dout, AF_Q, c->q_heads, c->v_head_dim, &t->dov);
    }
    if (c->serve.forms) { /* the physical serving tensors, in one buffer (inputs_serving.c) */
        size_t bytes = af_serving_place(c, &t->srv, NULL);
        AF_TRY(af_inputs_reserve(in, AF_BUF_SERVE, bytes, err));
        af_fill_nan(in->buf[AF_BUF_SERVE], bytes, c->dtype);
        af_serving_place(c, &t->srv, in->buf[AF_BUF_SERVE]);
    }
    return AF_OK;
}

void af_inputs_serving(af_inputs *in) {
    if (!in->c.serve.forms) return;
    af_serving_share(&in->t);
    af_serving_fill(&in->t);
}

/* --- values ---------------------------------------------------------------------- */

static double af_mag(int8_t q4) { return pow(10.0, q4 / 4.0); }

/* Standard normal number e of a stream: Box-Muller on block e / 2 gives the pair
 * (r cos t, r sin t) for elements 2k and 2k + 1; the pair is cached for the next call. */
typedef struct af_normal_cache {
    uint64_t seed, block;
    uint32_t stream;
    double z[2];
    int valid;
} af_normal_cache;

static double af_normal_at(af_normal_cache *nc, uint64_t seed, uint32_t stream, uint64_t e) {
    uint64_t block = e >> 1;
    if (!nc->valid || nc->block != block || nc->seed != seed || nc->stream != stream) {
        uint32_t w[4];
        af_philox_at(seed, stream, block, w);
        double u1 = af_u53(w[0], w[1]), u2 = af_u53(w[2], w[3]);
        double rad = sqrt(-2.0 * log(1.0 - u1));
        nc->z[0] = rad * cos(2.0 * M_PI * u2);
        nc->z[1] = rad * sin(2.0 * M_PI * u2);
        nc->seed = seed, nc->block = block, nc->stream = stream, nc->valid = 1;
    }
    return nc->z[e & 1];
}

static double af_draw_value(af_normal_cache *nc, const af_tensor_spec *s, af_dtype dt, uint32_t stream, uint64_t e,
                      double mag) {
    uint32_t w[4];
    switch (s->dist) {
    case AF_DIST_NORMAL: return af_normal_at(nc, s->seed, stream, e) * mag;
    case AF_DIST_UNIFORM:
        af_philox_at(s->seed, stream, e, w);
        return (2.0 * af_u53(w[0], w[1]) - 1.0) * mag;
    case AF_DIST_SMALL_INT: af_philox_at(s->seed, stream, e, w); return (double)(w[0] % 9u) - 4.0;
    case AF_DIST_ONE_HOT: return 0.0; /* spikes are placed per row by the caller */
    case AF_DIST_NEAR_OVERFLOW:
        af_philox_at(s->seed, stream, e, w);
        return (w[2] & 1u ? -1.0 : 1.0) * (0.25 + 0.75 * af_u53(w[0], w[1])) * af_dtype_max(dt);
    case AF_DIST_DENORMAL:
        af_philox_at(s->seed, stream, e, w);
        return (w[2] & 1u ? -1.0 : 1.0) * af_u53(w[0], w[1]) * af_dtype_min_normal(dt);
    case AF_DIST_COUNT: break;
    }
    return 0.0;
}

/* The spec of tensor w (0..2: q, k, v; 3: dO) and the one its strides come from (a packed
 * buffer's: Q's). */
#define AF_TENSOR_DOUT 3u
static const af_tensor_spec *af_spec_of(const af_case *c, uint32_t w) {
    return w == AF_TENSOR_DOUT ? &c->bwd.dout : &c->t[w];
}
static const af_tensor_spec *af_buffer_spec_of(const af_case *c, uint32_t w) {
    return w == AF_TENSOR_DOUT ? &c->bwd.dout : &c->t[af_case_is_packed(c) ? AF_Q : w];
}

/* An FP8 tensor's stored value for draw x (the file's head comment): e = element index. */
static void af_set_fp8(const af_view *v, const af_tensor_spec *s, uint32_t stream, uint64_t e, double x, size_t b,
                       size_t h, size_t i, size_t d) {
    double fmax = af_dtype_max(v->dtype), r = x / (double)v->descale;
    if (s->dist == AF_DIST_NEAR_OVERFLOW || s->dist == AF_DIST_DENORMAL) {
        uint32_t w[4];
        af_philox_at(s->seed, stream, e, w);
        double u = af_u53(w[0], w[1]), sign = w[2] & 1u ? -1.0 : 1.0;
        r = sign * (s->dist == AF_DIST_DENORMAL ? u * af_dtype_min_normal(v->dtype) : (0.25 + 0.8 * u) * fmax);
    }
    *af_view_fp8_at(v, b, h, i, d) = af_fp8_from_f64(r, v->dtype, 1);
}

static void af_fill_values(const af_case *c, const af_view *v, uint32_t w) {
    const af_tensor_spec *s = af_spec_of(c, w);
    const af_tensor_spec *bs = af_buffer_spec_of(c, w); /* strides belong to the buffer */
    size_t B = v->ne[0], H = v->ne[1], S = v->ne[2], D = v->ne[3];
    size_t Bn = bs->bcast == AF_BCAST_BATCH ? 1 : B;
    size_t Hn = bs->bcast == AF_BCAST_HEADS ? 1 : H;
    uint32_t stream = AF_STREAM_VALUES + (uint32_t)w;
    double mag = af_mag(s->mag_q4);
    af_normal_cache nc = {0};
    for (size_t b = 0; b < Bn; b++)
        for (size_t h = 0; h < Hn; h++)
            for (size_t i = 0; i < S; i++) {
                size_t row = (b * H + h) * S + i;
                size_t spike = SIZE_MAX;
                double spike_val = 0.0;
                if (s->dist == AF_DIST_ONE_HOT) {
                    uint32_t r[4];
                    af_philox_at(s->seed, AF_STREAM_ONE_HOT + (uint32_t)w, row, r);
                    spike = r[0] % D;
                    spike_val = (r[1] & 1u ? -1.0 : 1.0) * mag;
                }
                for (size_t d = 0; d < D; d++) {
                    double x = s->dist == AF_DIST_ONE_HOT ? (d == spike ? spike_val : 0.0)
                                                          : af_draw_value(&nc, s, c->dtype, stream, row * D + d, mag);
                    if (af_dtype_is_fp8(v->dtype)) {
                        af_set_fp8(v, s, stream, row * D + d, x, b, h, i, d);
                    } else {
                        af_view_set(v, b, h, i, d, x);
                    }
                }
            }
}

/* Is position (i, j) of a mask masked by its pattern? Indices are the mask's own. */
static bool af_pattern_masked(const af_mask_spec *m, uint32_t stream, size_t b, size_t h, size_t i, size_t j,
                              size_t Hm, size_t Sqm, size_t Skm) {
    uint32_t w[4];
    uint32_t thr = (uint32_t)m->density << 24; /* probability density / 256 */
    switch (m->pattern) {
    case AF_MASK_RANDOM:
        af_philox_at(m->seed, stream, ((b * Hm + h) * Sqm + i) * Skm + j, w);
        return w[0] < thr;
    case AF_MASK_BLOCK_DIAG: {
        size_t bsz = 1u + m->density % 32u;
        return i / bsz != j / bsz;
    }
    case AF_MASK_FULL_ROWS:
        af_philox_at(m->seed, stream, (b * Hm + h) * Sqm + i, w);
        return w[1] < thr;
    case AF_MASK_KEY_COLS:
        af_philox_at(m->seed, stream, (b * Hm + h) * Skm + j + ((uint64_t)1 << 40), w);
        return w[2] < thr;
    case AF_MASK_NONE: return false;
    case AF_MASK_PATTERN_COUNT: break;
    }
    return false;
}

static void af_fill_mask(const af_case *c, const af_mask_spec *m, const af_view *v, bool additive) {
    size_t ne[4];
    for (int d = 0; d < 4; d++) ne[d] = v->nb[d] ? v->ne[d] : 1; /* stored extent */
    /* a dim of size 1 in the case also has nb 0; it is stored once either way */
    double fill = -HUGE_VAL;
    if (additive && m->fill == AF_FILL_LOWEST) fill = -af_dtype_max(m->dtype);
    if (additive && m->fill == AF_FILL_NEG_LARGE) fill = -1e4;
    uint32_t stream = additive ? AF_STREAM_AMASK : AF_STREAM_BMASK;
    double mag = af_mag(m->mag_q4);
    af_normal_cache nc = {0};
    for (size_t b = 0; b < ne[0]; b++)
        for (size_t h = 0; h < ne[1]; h++)
            for (size_t i = 0; i < ne[2]; i++)
                for (size_t j = 0; j < ne[3]; j++) {
                    bool masked = af_pattern_masked(m, stream, b, h, i, j, ne[1], ne[2], ne[3]);
                    double x;
                    if (!additive) {
                        x = masked ? 0.0 : 1.0;
                    } else if (masked) {
                        x = fill;
                    } else {
                        size_t e = ((b * ne[1] + h) * ne[2] + i) * ne[3] + j;
                        x = m->live_zero ? 0.0 : af_normal_at(&nc, m->seed, stream + 100, e) * mag;
                    }
                    af_view_set(v, b, h, i, j, x);
                }
    (void)c;
}

/* One planted value: an FP8 NaN's bit pattern (fp8_nan >= 0) as it is, else val. */
static void af_plant_at(const af_view *v, size_t b, size_t h, size_t i, size_t d, double val, int fp8_nan) {
    if (fp8_nan < 0) {
        af_view_set(v, b, h, i, d, val);
        return;
    }
    *af_view_fp8_at(v, b, h, i, d) = (uint8_t)fp8_nan;
}

/* Plants NaN or Inf per the tensor's special. Masked targets are rows no query uses:
 * fully masked query rows of Q and dO, fully masked keys of K and V. A broadcast row is
 * shared by every batch row (or head), so it is a target only when dead in all of them. */
static void af_plant(af_inputs *in, uint32_t w, const uint8_t *dead_keys) {
    const af_case *c = &in->c;
    const af_tensor_spec *s = af_spec_of(c, w);
    const af_tensor_spec *bs = af_buffer_spec_of(c, w);
    const af_view *views[4] = {&in->t.qv, &in->t.kv, &in->t.vv, &in->t.dov};
    const af_view *v = views[w];
    bool query_rows = w == AF_Q || w == AF_TENSOR_DOUT;
    size_t B = v->ne[0], H = v->ne[1], S = v->ne[2], D = v->ne[3];
    uint32_t r[4];
    af_philox_at(s->seed, AF_STREAM_SPECIAL + (uint32_t)w, 0, r);
    bool nan = s->special == AF_SPECIAL_NAN_MASKED || s->special == AF_SPECIAL_NAN_LIVE;
    double val = nan ? (double)NAN : (r[3] & 1u ? -HUGE_VAL : HUGE_VAL);
    /* FP8: a NaN is one of the format's NaN bit patterns, either sign (e5m2 has three:
     * 0x7d..0x7f); an Inf is e5m2's, and in e4m3fn (no Inf) what a cast of Inf gives, NaN */
    int fp8_nan = -1;
    if (af_dtype_is_fp8(v->dtype) && nan) {
        unsigned pick = r[2] % (v->dtype == AF_E5M2 ? 3u : 1u);
        fp8_nan = (int)((r[3] & 1u ? 0x80u : 0u) | (0x7fu - pick));
    }
    if (s->special == AF_SPECIAL_NAN_LIVE || s->special == AF_SPECIAL_INF_LIVE) {
        size_t Bn = bs->bcast == AF_BCAST_BATCH ? 1 : B, Hn = bs->bcast == AF_BCAST_HEADS ? 1 : H;
        size_t n = Bn * Hn * S * D;
        size_t e = (size_t)((((uint64_t)r[0] << 32) | r[1]) % n);
        af_plant_at(v, e / (Hn * S * D), e / (S * D) % Hn, e / D % S, e % D, val, fp8_nan);
        return;
    }
    size_t Bn = bs->bcast == AF_BCAST_BATCH ? 1 : B, Hn = bs->bcast == AF_BCAST_HEADS ? 1 : H;
    for (size_t b = 0; b < Bn; b++)
        for (size_t h = 0; h < Hn; h++)
            for (size_t i = 0; i < S; i++) {
                bool dead = true;
                for (size_t bb = b; bb < (Bn == 1 ? B : b + 1) && dead; bb++)
                    for (size_t hh = h; hh < (Hn == 1 ? H : h + 1) && dead; hh++) {
                        if (query_rows) {
                            for (uint32_t j = 0; j < c->kv_len && dead; j++)
                                dead = af_mask_is_set(&in->t, (uint32_t)bb, (uint32_t)hh, (uint32_t)i, j);
                        } else {
                            dead = dead_keys[(bb * c->kv_heads + hh) * c->kv_len + i] != 0;
                        }
                    }
                if (!dead) continue;
                for (size_t d = 0; d < D; d++) af_plant_at(v, b, h, i, d, val, fp8_nan);
            }
}

af_status af_inputs_generate(af_inputs *in, const af_case *c, af_error *err) {
    AF_TRY(af_inputs_alloc(in, c, err));
    c = &in->c;
    if (c->amask.present) af_fill_mask(c, &c->amask, &in->t.am, true);
    if (c->bmask.present) af_fill_mask(c, &c->bmask, &in->t.bm, false);
    const af_view *views[4] = {&in->t.qv, &in->t.kv, &in->t.vv, &in->t.dov};
    uint32_t ntensors = c->bwd.grads ? 4 : 3;
    for (uint32_t w = 0; w < ntensors; w++) af_fill_values(c, views[w], w);

    bool masked_k = c->t[AF_K].special == AF_SPECIAL_NAN_MASKED || c->t[AF_K].special == AF_SPECIAL_INF_MASKED;
    bool masked_v = c->t[AF_V].special == AF_SPECIAL_NAN_MASKED || c->t[AF_V].special == AF_SPECIAL_INF_MASKED;
    uint8_t *dead = NULL;
    if (masked_k || masked_v) {
        size_t n = (size_t)c->batch * c->kv_heads * c->kv_len;
        AF_TRY(af_inputs_reserve(in, AF_BUF_DEAD, n, err));
        dead = in->buf[AF_BUF_DEAD];
        af_mask_dead_keys(&in->t, dead);
    }
    for (uint32_t w = 0; w < ntensors; w++)
        if (af_spec_of(c, w)->special != AF_SPECIAL_NONE) af_plant(in, w, dead);
    af_inputs_serving(in);
    return AF_OK;
}
