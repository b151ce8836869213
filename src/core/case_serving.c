/* case_serving.c - the serving part of a case (docs/design.md section 2, "Serving forms"):
 * names, per-row lengths, repair, validation, equality, tensor bytes, the byte record, JSON
 * and the compile-key part. The generator's and the mutator's share is case_serving_gen.c,
 * the physical tensors inputs_serving.c.
 *
 * The serving bytes follow the backward ones (docs/case-json.md, case_codec.c), with B the
 * batch as its byte reads (before repair):
 *
 *   off size field                    off size field
 *   0   1    forms (AF_SERVE_* bits)   9   4    sink_seed
 *   1   2    page_size                 13  1    alibi flags: symmetric, random
 *   3   1    shared_pages              14  1    alibi_mag_q4
 *   4   4    page_seed                 15  4    alibi_seed
 *   8   1    sink_mag_q4               19  4*B  q_lens (u32), then 4*B kv_lens (u32)
 */
#include "case_serving.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnfuzz/tensor.h"
#include "layout_internal.h"

const char *const af_serve_form_names[AF_SERVE_FORM_COUNT] = {"packed", "paged", "sinks", "alibi"};
_Static_assert(sizeof(af_serve_form_names) / sizeof(af_serve_form_names[0]) == AF_SERVE_FORM_COUNT, "names");
_Static_assert(AF_SERVE_ALL == (1 << AF_SERVE_FORM_COUNT) - 1, "one bit per form");

#define AF_ALIBI_MAG_MIN (-12) /* random slopes: U(0, 1) * 10^(q4 / 4), 1e-3 .. 10 */
#define AF_ALIBI_MAG_MAX 4

/* --- per-row lengths ------------------------------------------------------------------ */

bool af_case_has_lens(const af_case *c) { return (c->serve.forms & (AF_SERVE_PACKED | AF_SERVE_PAGED)) != 0; }

uint32_t af_case_seg_q(const af_case *c, uint32_t b) {
    if (!(c->serve.forms & AF_SERVE_PACKED)) return c->q_len;
    return c->serve.q_lens[b] < c->q_len ? c->serve.q_lens[b] : c->q_len;
}

uint32_t af_case_seg_k(const af_case *c, uint32_t b) {
    if (!af_case_has_lens(c)) return c->kv_len;
    return c->serve.kv_lens[b] < c->kv_len ? c->serve.kv_lens[b] : c->kv_len;
}

uint32_t af_case_pages(const af_case *c, uint32_t b) {
    if (!(c->serve.forms & AF_SERVE_PAGED) || c->serve.page_size == 0) return 0;
    return (af_case_seg_k(c, b) + c->serve.page_size - 1u) / c->serve.page_size;
}

bool af_case_split_kv(const af_case *c) {
    if (c->q_len > AF_DECODE_MAX_Q) return false;
    for (uint32_t b = 0; b < c->batch; b++)
        if (af_case_seg_k(c, b) > AF_SPLIT_KV_CHUNK) return true;
    return false;
}

uint32_t af_serving_shared(const af_case *c, uint32_t b) {
    if (b == 0 || !(c->serve.forms & AF_SERVE_PAGED) || c->serve.page_size == 0) return 0;
    uint32_t full0 = af_case_seg_k(c, 0) / c->serve.page_size, full = af_case_seg_k(c, b) / c->serve.page_size;
    uint32_t n = full0 < full ? full0 : full;
    return c->serve.shared_pages < n ? c->serve.shared_pages : n;
}

uint32_t af_serving_page_count(const af_case *c, uint32_t *max_pages) {
    uint32_t total = 0, widest = 0;
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t n = af_case_pages(c, b);
        total += n - af_serving_shared(c, b);
        widest = n > widest ? n : widest;
    }
    if (max_pages) *max_pages = widest ? widest : 1; /* a table of width 0 is no table */
    return total + 1;                                  /* the null page */
}

uint32_t af_serving_total(const af_case *c, bool keys) {
    uint32_t t = 0;
    for (uint32_t b = 0; b < c->batch; b++) t += keys ? af_case_seg_k(c, b) : af_case_seg_q(c, b);
    return t;
}

/* --- physical shapes ------------------------------------------------------------------ */

static void af_serving_dims(const af_case *c, af_tensor_id w, size_t *H, size_t *D) {
    *H = w == AF_Q ? c->q_heads : c->kv_heads;
    *D = w == AF_V ? c->v_head_dim : c->head_dim;
}

size_t af_serving_thd_layout(const af_case *c, af_tensor_id w, size_t T, af_tensor *t) {
    size_t H, D;
    af_serving_dims(c, w, &H, &D);
    memset(t, 0, sizeof *t);
    t->dtype = c->dtype;
    t->ndim = 3;
    t->ne[0] = T, t->ne[1] = H, t->ne[2] = D;
    return af_strides_for(t, c->t[w].perm % 6u, c->t[w].pad, 0);
}

size_t af_serving_cache_layout(const af_case *c, af_tensor_id w, size_t P, af_tensor *t) {
    size_t H, D;
    af_serving_dims(c, w, &H, &D);
    memset(t, 0, sizeof *t);
    t->dtype = c->dtype;
    t->ndim = 4;
    t->ne[0] = P, t->ne[1] = c->serve.page_size, t->ne[2] = H, t->ne[3] = D;
    return af_strides_for(t, c->t[w].perm % 24u, c->t[w].pad, 0);
}

double af_serving_tensor_bytes(const af_case *c) {
    const af_serving_spec *s = &c->serve;
    if (!s->forms) return 0.0;
    af_tensor t;
    double sum = 0.0;
    if (s->forms & AF_SERVE_PACKED) {
        sum += (double)af_serving_thd_layout(c, AF_Q, af_serving_total(c, false), &t);
        if (!(s->forms & AF_SERVE_PAGED))
            for (int w = AF_K; w <= AF_V; w++)
                sum += (double)af_serving_thd_layout(c, (af_tensor_id)w, af_serving_total(c, true), &t);
        sum += 8.0 * (c->batch + 1);
    }
    if (s->forms & AF_SERVE_PAGED) {
        uint32_t widest;
        uint32_t P = af_serving_page_count(c, &widest);
        for (int w = AF_K; w <= AF_V; w++) sum += (double)af_serving_cache_layout(c, (af_tensor_id)w, P, &t);
        sum += 4.0 * c->batch * ((double)widest + 1.0);
    }
    if (s->forms & AF_SERVE_SINKS) sum += 4.0 * c->q_heads;
    if (s->forms & AF_SERVE_ALIBI) sum += 4.0 * c->q_heads;
    return sum;
}

/* --- repair and validation ------------------------------------------------------------ */

/* Lengths within the shapes: an out-of-range one wraps (decoding: any value is some
 * length) or saturates (after the budget's shrinking, which counted it as the whole view:
 * wrapping then could shorten row 0, share fewer pages and need more bytes). */
static void af_serving_clamp_lens(af_case *c, bool wrap) {
    af_serving_spec *s = &c->serve;
    bool packed = s->forms & AF_SERVE_PACKED;
    for (uint32_t b = 0; b < AF_MAX_BATCH; b++) {
        if (!packed || b >= c->batch) {
            s->q_lens[b] = 0;
        } else if (s->q_lens[b] > c->q_len) {
            s->q_lens[b] = wrap ? s->q_lens[b] % (c->q_len + 1) : c->q_len;
        }
        if (!af_case_has_lens(c) || b >= c->batch) {
            s->kv_lens[b] = 0;
        } else if (s->kv_lens[b] > c->kv_len) {
            s->kv_lens[b] = wrap ? s->kv_lens[b] % (c->kv_len + 1) : c->kv_len;
        }
    }
}

void af_serving_repair_pre(af_case *c) {
    af_serving_spec *s = &c->serve;
    s->forms &= AF_SERVE_ALL;
    if (!s->forms) {
        memset(s, 0, sizeof *s);
        return;
    }
    memset(&c->bwd, 0, sizeof c->bwd); /* serving cases are forward-only */
    if (af_case_has_lens(c)) {
        /* the per-row lengths take the place of key padding; Q, K and V are separate
         * tensors (a packed QKV buffer holds no THD or paged form) */
        c->key_padding = false;
        if (c->t[AF_Q].layout >= AF_LAYOUT_FIRST_PACKED)
            for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = AF_LAYOUT_BSHD;
    }
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        af_tensor_spec *ts = &c->t[t];
        if (s->forms & AF_SERVE_PACKED) ts->layout = AF_LAYOUT_BSHD; /* the padded view of THD */
        /* THD and the page caches have no batch dim to broadcast */
        if ((s->forms & AF_SERVE_PACKED) || ((s->forms & AF_SERVE_PAGED) && t != AF_Q)) ts->bcast = AF_BCAST_NONE;
        if ((unsigned)ts->layout < AF_LAYOUT_COUNT) ts->perm = (uint8_t)(ts->perm % af_layout_perm_count(ts->layout));
    }
    af_serving_clamp_lens(c, true);
    if (s->forms & AF_SERVE_PAGED) {
        if (s->page_size == 0 || s->page_size > AF_MAX_PAGE_SIZE)
            s->page_size = (uint16_t)(1u + s->page_size % AF_MAX_PAGE_SIZE);
        /* shared pages hold one copy of row 0's keys: planted values would differ between
         * rows (before the budget's shrinking: fewer shared pages are more bytes) */
        if (c->t[AF_K].special != AF_SPECIAL_NONE || c->t[AF_V].special != AF_SPECIAL_NONE) s->shared_pages = 0;
    } else {
        s->page_size = 0, s->shared_pages = 0, s->page_seed = 0;
    }
    if (s->forms & AF_SERVE_SINKS) {
        if (s->sink_mag_q4 < AF_MAG_Q4_MIN) s->sink_mag_q4 = AF_MAG_Q4_MIN;
        if (s->sink_mag_q4 > AF_MAG_Q4_MAX) s->sink_mag_q4 = AF_MAG_Q4_MAX;
    } else {
        s->sink_mag_q4 = 0, s->sink_seed = 0;
    }
    if (!(s->forms & AF_SERVE_ALIBI)) {
        s->alibi_symmetric = s->alibi_random = false;
        s->alibi_mag_q4 = 0, s->alibi_seed = 0;
    } else if (!s->alibi_random) {
        s->alibi_mag_q4 = 0, s->alibi_seed = 0;
    } else {
        if (s->alibi_mag_q4 < AF_ALIBI_MAG_MIN) s->alibi_mag_q4 = AF_ALIBI_MAG_MIN;
        if (s->alibi_mag_q4 > AF_ALIBI_MAG_MAX) s->alibi_mag_q4 = AF_ALIBI_MAG_MAX;
    }
}

void af_serving_repair_post(af_case *c) {
    if (c->serve.forms) af_serving_clamp_lens(c, false); /* as the shrinking counted them */
}

af_status af_serving_validate(const af_case *c, af_error *err) {
    const af_serving_spec *s = &c->serve;
    AF_RETURN_ERROR_IF(s->forms & ~AF_SERVE_ALL, err, AF_ERR_INVALID, "serving: unknown form bits");
    if (!s->forms) return AF_OK;
    AF_RETURN_ERROR_IF(c->bwd.grads, err, AF_ERR_INVALID, "serving: a serving case is forward-only (no backward)");
    bool lens = af_case_has_lens(c);
    AF_RETURN_ERROR_IF(lens && c->key_padding, err, AF_ERR_INVALID,
                       "serving: kv_lens take the place of key_padding (leave it null)");
    AF_RETURN_ERROR_IF(lens && af_case_is_packed(c), err, AF_ERR_INVALID,
                       "serving: packed and paged forms need separate q, k, v (not %s)",
                       af_layout_names[c->t[AF_Q].layout]);
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        AF_RETURN_ERROR_IF((s->forms & AF_SERVE_PACKED) && c->t[t].layout != AF_LAYOUT_BSHD, err, AF_ERR_INVALID,
                           "serving: a packed case keeps %s in layout bshd (its padded view of THD)",
                           af_tensor_names[t]);
        bool no_bcast = (s->forms & AF_SERVE_PACKED) || ((s->forms & AF_SERVE_PAGED) && t != AF_Q);
        AF_RETURN_ERROR_IF(no_bcast && c->t[t].bcast != AF_BCAST_NONE, err, AF_ERR_INVALID,
                           "serving: %s cannot broadcast in THD or paged form", af_tensor_names[t]);
    }
    for (uint32_t b = 0; b < c->batch; b++) {
        AF_RETURN_ERROR_IF((s->forms & AF_SERVE_PACKED) && s->q_lens[b] > c->q_len, err, AF_ERR_INVALID,
                           "serving.q_lens[%u] (%u) exceeds q_len (%u)", b, s->q_lens[b], c->q_len);
        AF_RETURN_ERROR_IF(lens && s->kv_lens[b] > c->kv_len, err, AF_ERR_INVALID,
                           "serving.kv_lens[%u] (%u) exceeds kv_len (%u)", b, s->kv_lens[b], c->kv_len);
    }
    AF_RETURN_ERROR_IF((s->forms & AF_SERVE_PAGED) && (s->page_size < 1 || s->page_size > AF_MAX_PAGE_SIZE), err,
                       AF_ERR_INVALID, "serving.page_size (%u) must be in 1..%d", s->page_size, AF_MAX_PAGE_SIZE);
    AF_RETURN_ERROR_IF((s->forms & AF_SERVE_PAGED) && s->shared_pages &&
                           (c->t[AF_K].special != AF_SPECIAL_NONE || c->t[AF_V].special != AF_SPECIAL_NONE),
                       err, AF_ERR_INVALID, "serving.shared_pages: shared pages cannot hold planted specials of k or v");
    AF_RETURN_ERROR_IF(s->sink_mag_q4 < AF_MAG_Q4_MIN || s->sink_mag_q4 > AF_MAG_Q4_MAX, err, AF_ERR_INVALID,
                       "serving.sink_log10_magnitude out of [-3, 4]");
    AF_RETURN_ERROR_IF(s->alibi_mag_q4 < AF_ALIBI_MAG_MIN || s->alibi_mag_q4 > AF_ALIBI_MAG_MAX, err,
                       AF_ERR_INVALID, "serving.alibi_log10_magnitude out of [-3, 1]");
    return AF_OK;
}

bool af_serving_equal(const af_case *a, const af_case *b) {
    const af_serving_spec *x = &a->serve, *y = &b->serve;
    return x->forms == y->forms && memcmp(x->q_lens, y->q_lens, sizeof x->q_lens) == 0 &&
           memcmp(x->kv_lens, y->kv_lens, sizeof x->kv_lens) == 0 && x->page_size == y->page_size &&
           x->shared_pages == y->shared_pages && x->page_seed == y->page_seed && x->sink_mag_q4 == y->sink_mag_q4 &&
           x->sink_seed == y->sink_seed && x->alibi_symmetric == y->alibi_symmetric &&
           x->alibi_random == y->alibi_random && x->alibi_mag_q4 == y->alibi_mag_q4 && x->alibi_seed == y->alibi_seed;
}

/* --- the byte record ------------------------------------------------------------------ */

static uint32_t af_serving_le(const uint8_t *p, size_t n, size_t *at, unsigned bytes) {
    uint32_t v = 0;
    for (unsigned i = 0; i < bytes; i++, (*at)++) v |= (uint32_t)(*at < n ? p[*at] : 0) << (8 * i);
    return v;
}

void af_serving_decode(af_case *c, const uint8_t *p, size_t n, uint32_t batch) {
    af_serving_spec *s = &c->serve;
    size_t at = 0;
    if (!p) n = 0;
    s->forms = (uint8_t)af_serving_le(p, n, &at, 1);
    s->page_size = (uint16_t)af_serving_le(p, n, &at, 2);
    s->shared_pages = (uint8_t)af_serving_le(p, n, &at, 1);
    s->page_seed = af_serving_le(p, n, &at, 4);
    s->sink_mag_q4 = (int8_t)af_serving_le(p, n, &at, 1);
    s->sink_seed = af_serving_le(p, n, &at, 4);
    uint32_t flags = af_serving_le(p, n, &at, 1);
    s->alibi_symmetric = flags & 1;
    s->alibi_random = (flags >> 1) & 1;
    s->alibi_mag_q4 = (int8_t)af_serving_le(p, n, &at, 1);
    s->alibi_seed = af_serving_le(p, n, &at, 4);
    for (uint32_t b = 0; b < batch && b < AF_MAX_BATCH; b++) s->q_lens[b] = af_serving_le(p, n, &at, 4);
    for (uint32_t b = 0; b < batch && b < AF_MAX_BATCH; b++) s->kv_lens[b] = af_serving_le(p, n, &at, 4);
}

bool af_serving_encode(const af_case *c, uint8_t *out, size_t cap, size_t *len) {
    const af_serving_spec *s = &c->serve;
    size_t need = AF_SERVING_FIXED_BYTES + 8u * c->batch, at = 0;
    if (need > cap) return false;
    uint32_t fields[][2] = {{s->forms, 1},
                            {s->page_size, 2},
                            {s->shared_pages, 1},
                            {s->page_seed, 4},
                            {(uint8_t)s->sink_mag_q4, 1},
                            {s->sink_seed, 4},
                            {(uint32_t)s->alibi_symmetric | (uint32_t)s->alibi_random << 1, 1},
                            {(uint8_t)s->alibi_mag_q4, 1},
                            {s->alibi_seed, 4}};
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
        for (uint32_t i = 0; i < fields[f][1]; i++) out[at++] = (uint8_t)(fields[f][0] >> (8 * i));
    for (int k = 0; k < 2; k++)
        for (uint32_t b = 0; b < c->batch; b++) {
            uint32_t v = k == 0 ? s->q_lens[b] : s->kv_lens[b];
            for (int i = 0; i < 4; i++) out[at++] = (uint8_t)(v >> (8 * i));
        }
    *len = at;
    return true;
}

/* --- JSON ----------------------------------------------------------------------------- */

static void af_serving_json_lens(af_jw *w, const char *key, const uint32_t *lens, uint32_t batch) {
    af_jw_key(w, key);
    af_jw_begin(w, '[');
    for (uint32_t b = 0; b < batch; b++) af_jw_uint(w, lens[b]);
    af_jw_end(w, ']');
}

void af_serving_write_json(af_jw *w, const af_case *c) {
    const af_serving_spec *s = &c->serve;
    if (!s->forms) return;
    af_jw_key(w, "serving");
    af_jw_begin(w, '{');
    af_jw_key(w, "forms");
    af_jw_begin(w, '[');
    for (int f = 0; f < AF_SERVE_FORM_COUNT; f++)
        if (s->forms & (1u << f)) af_jw_string(w, af_serve_form_names[f]);
    af_jw_end(w, ']');
    if (s->forms & AF_SERVE_PACKED) af_serving_json_lens(w, "q_lens", s->q_lens, c->batch);
    if (af_case_has_lens(c)) af_serving_json_lens(w, "kv_lens", s->kv_lens, c->batch);
    if (s->forms & AF_SERVE_PAGED) {
        af_jw_key(w, "page_size"), af_jw_uint(w, s->page_size);
        af_jw_key(w, "shared_pages"), af_jw_uint(w, s->shared_pages);
        af_jw_key(w, "page_seed"), af_jw_uint(w, s->page_seed);
    }
    if (s->forms & AF_SERVE_SINKS) {
        af_jw_key(w, "sink_log10_magnitude"), af_jw_double(w, s->sink_mag_q4 / 4.0);
        af_jw_key(w, "sink_seed"), af_jw_uint(w, s->sink_seed);
    }
    if (s->forms & AF_SERVE_ALIBI) {
        af_jw_key(w, "alibi_symmetric"), af_jw_bool(w, s->alibi_symmetric);
        af_jw_key(w, "alibi_slopes"), af_jw_string(w, s->alibi_random ? "random" : "geometric");
        if (s->alibi_random) {
            af_jw_key(w, "alibi_log10_magnitude"), af_jw_double(w, s->alibi_mag_q4 / 4.0);
            af_jw_key(w, "alibi_seed"), af_jw_uint(w, s->alibi_seed);
        }
    }
    af_jw_end(w, '}');
}

/* A number of o under key within [lo, hi] (absent: dflt); a quarter-step magnitude when q4. */
static af_status af_serving_json_num(const cJSON *o, const char *key, double lo, double hi, double dflt,
                                     bool integer, double *out, af_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = dflt;
    if (!it || cJSON_IsNull(it)) return AF_OK;
    AF_RETURN_ERROR_IF(!cJSON_IsNumber(it), err, AF_ERR_FORMAT, "field serving.%s: expected a number", key);
    double v = it->valuedouble;
    AF_RETURN_ERROR_IF(!(v >= lo && v <= hi) || (integer && v != floor(v)), err, AF_ERR_INVALID,
                       "field serving.%s: %g is not %s in [%g, %g]", key, v, integer ? "an integer" : "a number", lo,
                       hi);
    *out = v;
    return AF_OK;
}

static af_status af_serving_json_lens_read(const cJSON *o, const char *key, uint32_t *lens, uint32_t batch,
                                           uint32_t max, af_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    AF_RETURN_ERROR_IF(!a || !cJSON_IsArray(a) || (uint32_t)cJSON_GetArraySize(a) != batch, err, AF_ERR_INVALID,
                       "field serving.%s: expected an array of one length per batch row", key);
    uint32_t b = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        AF_RETURN_ERROR_IF(!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > max ||
                               it->valuedouble != floor(it->valuedouble),
                           err, AF_ERR_INVALID, "field serving.%s: lengths must be integers in 0..%u", key, max);
        lens[b++] = (uint32_t)it->valuedouble;
    }
    return AF_OK;
}

af_status af_serving_read_json(af_case *c, const void *json, af_error *err) {
    af_serving_spec *s = &c->serve;
    memset(s, 0, sizeof *s);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive((const cJSON *)json, "serving");
    if (!o || cJSON_IsNull(o)) return AF_OK;
    AF_RETURN_ERROR_IF(!cJSON_IsObject(o), err, AF_ERR_FORMAT, "field serving: expected an object or null");
    const cJSON *forms = cJSON_GetObjectItemCaseSensitive(o, "forms");
    AF_RETURN_ERROR_IF(!forms || !cJSON_IsArray(forms), err, AF_ERR_FORMAT,
                       "field serving.forms: expected an array of packed, paged, sinks, alibi");
    const cJSON *it;
    cJSON_ArrayForEach(it, forms) {
        int f = -1;
        for (int k = 0; k < AF_SERVE_FORM_COUNT && cJSON_IsString(it); k++)
            if (strcmp(it->valuestring, af_serve_form_names[k]) == 0) f = k;
        AF_RETURN_ERROR_IF(f < 0, err, AF_ERR_INVALID, "field serving.forms: names must be among packed, paged, sinks, alibi");
        s->forms |= (uint8_t)(1u << f);
    }
    AF_RETURN_ERROR_IF(!s->forms, err, AF_ERR_INVALID, "field serving.forms: name at least one form (or leave serving out)");
    if (s->forms & AF_SERVE_PACKED) AF_TRY(af_serving_json_lens_read(o, "q_lens", s->q_lens, c->batch, c->q_len, err));
    if (af_case_has_lens(c)) AF_TRY(af_serving_json_lens_read(o, "kv_lens", s->kv_lens, c->batch, c->kv_len, err));
    double v;
    if (s->forms & AF_SERVE_PAGED) {
        AF_TRY(af_serving_json_num(o, "page_size", 1, AF_MAX_PAGE_SIZE, 16, true, &v, err));
        s->page_size = (uint16_t)v;
        AF_TRY(af_serving_json_num(o, "shared_pages", 0, 255, 0, true, &v, err));
        s->shared_pages = (uint8_t)v;
        AF_TRY(af_serving_json_num(o, "page_seed", 0, UINT32_MAX, 0, true, &v, err));
        s->page_seed = (uint32_t)v;
    }
    if (s->forms & AF_SERVE_SINKS) {
        AF_TRY(af_serving_json_num(o, "sink_log10_magnitude", AF_MAG_Q4_MIN / 4.0, AF_MAG_Q4_MAX / 4.0, 0, false, &v, err));
        s->sink_mag_q4 = (int8_t)lrint(v * 4.0);
        AF_TRY(af_serving_json_num(o, "sink_seed", 0, UINT32_MAX, 0, true, &v, err));
        s->sink_seed = (uint32_t)v;
    }
    if (s->forms & AF_SERVE_ALIBI) {
        const cJSON *sym = cJSON_GetObjectItemCaseSensitive(o, "alibi_symmetric");
        AF_RETURN_ERROR_IF(sym && !cJSON_IsNull(sym) && !cJSON_IsBool(sym), err, AF_ERR_FORMAT,
                           "field serving.alibi_symmetric: expected true or false");
        s->alibi_symmetric = cJSON_IsTrue(sym);
        const cJSON *sl = cJSON_GetObjectItemCaseSensitive(o, "alibi_slopes");
        if (sl && !cJSON_IsNull(sl)) {
            bool geo = cJSON_IsString(sl) && strcmp(sl->valuestring, "geometric") == 0;
            s->alibi_random = cJSON_IsString(sl) && strcmp(sl->valuestring, "random") == 0;
            AF_RETURN_ERROR_IF(!geo && !s->alibi_random, err, AF_ERR_INVALID,
                               "field serving.alibi_slopes: \"geometric\" or \"random\"");
        }
        if (s->alibi_random) {
            AF_TRY(af_serving_json_num(o, "alibi_log10_magnitude", AF_ALIBI_MAG_MIN / 4.0, AF_ALIBI_MAG_MAX / 4.0, 0,
                                       false, &v, err));
            s->alibi_mag_q4 = (int8_t)lrint(v * 4.0);
            AF_TRY(af_serving_json_num(o, "alibi_seed", 0, UINT32_MAX, 0, true, &v, err));
            s->alibi_seed = (uint32_t)v;
        }
    }
    return AF_OK;
}

/* --- compile key and features ------------------------------------------------------------ */

static uint64_t af_serving_mix(uint64_t h, uint64_t v) {
    uint64_t z = h + v + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t af_serving_key(const af_case *c, bool shapes, bool causal) {
    const af_serving_spec *s = &c->serve;
    if (!s->forms) return 0;
    uint64_t h = af_serving_mix(0x7365727665ull, s->forms);
    if (shapes) {
        for (uint32_t b = 0; b < c->batch; b++) h = af_serving_mix(h, (uint64_t)s->q_lens[b] << 32 | s->kv_lens[b]);
        uint32_t widest = 0;
        uint32_t P = (s->forms & AF_SERVE_PAGED) ? af_serving_page_count(c, &widest) : 0;
        h = af_serving_mix(h, (uint64_t)s->page_size << 48 | (uint64_t)widest << 24 | P);
    }
    if (causal) h = af_serving_mix(h, s->alibi_symmetric);
    return h;
}

uint32_t af_case_serving_features(const af_case *c) {
    uint32_t f = c->serve.forms;
    if (af_case_split_kv(c)) f |= 1u << AF_SERVE_FORM_COUNT;
    if (c->serve.alibi_symmetric) f |= 2u << AF_SERVE_FORM_COUNT;
    return f;
}

void af_case_serving_str(const af_case *c, char *buf, size_t len) {
    size_t n = 0;
    if (len) buf[0] = 0;
    for (int f = 0; f < AF_SERVE_FORM_COUNT; f++) {
        if (!(c->serve.forms & (1u << f)) || n >= len) continue;
        int w = snprintf(buf + n, len - n, " %s", af_serve_form_names[f]);
        if (w > 0) n += (size_t)w;
        if ((1u << f) == AF_SERVE_PAGED && n < len) {
            w = snprintf(buf + n, len - n, "(%u)", c->serve.page_size);
            if (w > 0) n += (size_t)w;
        }
        if ((1u << f) == AF_SERVE_ALIBI && c->serve.alibi_symmetric && n < len) {
            w = snprintf(buf + n, len - n, "(symmetric)");
            if (w > 0) n += (size_t)w;
        }
    }
    if (af_case_split_kv(c) && n < len) snprintf(buf + n, len - n, " split_kv");
}
