/* worker_proto.c - frames of the worker protocol (see worker_proto.h and
 * docs/worker-protocol.md). Nothing here touches a process or a file descriptor. */
#include "worker_proto.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/mem.h"

/* {"type":"bye"} and the newline, after its length (15, little-endian) */
const uint8_t af_wp_bye[AF_WP_BYE_LEN] = {15, 0, 0, 0, '{', '"', 't', 'y', 'p', 'e', '"', ':',
                                          '"', 'b', 'y', 'e', '"', '}', '\n', 0};
_Static_assert(AF_WP_BYE_LEN == 4 + 16, "bye frame size");

/* --- splitting and tensor entries -------------------------------------------------------- */

af_status af_wp_split(const uint8_t *body, size_t n, void **header, const uint8_t **payload, size_t *payload_len,
                      af_error *err) {
    *header = NULL;
    size_t lim = n < AF_WP_MAX_HEADER ? n : AF_WP_MAX_HEADER;
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)body, lim, &end, false);
    if (!h) {
        if (n > lim) {
            /* cut at the limit, a header fails where the cut value began (the opening quote
             * of a long string), not at the cut: parse the whole body to tell a long
             * header from a bad one (error path only) */
            const char *full_end = NULL;
            cJSON *whole = cJSON_ParseWithLengthOpts((const char *)body, n, &full_end, false);
            const char *where = whole ? full_end : cJSON_GetErrorPtr();
            cJSON_Delete(whole);
            if (whole || (where && where >= (const char *)body + lim - 1 && where <= (const char *)body + n))
                return af_error_set(err, AF_ERR_FORMAT, "frame header over %zu bytes", AF_WP_MAX_HEADER);
            lim = n;
        }
        const char *where = cJSON_GetErrorPtr();
        size_t at = where && where >= (const char *)body && where <= (const char *)body + lim
                        ? (size_t)(where - (const char *)body)
                        : 0;
        return af_error_set(err, AF_ERR_FORMAT, "frame header is not valid JSON (at byte %zu of %zu)", at, n);
    }
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return af_error_set(err, AF_ERR_FORMAT, "frame header is not a JSON object");
    }
    size_t hlen = (size_t)(end - (const char *)body);
    if (hlen >= n || body[hlen] != '\n') {
        cJSON_Delete(h);
        return af_error_set(err, AF_ERR_FORMAT, "frame header is not followed by a newline (byte %zu of %zu)", hlen, n);
    }
    *header = h;
    *payload = body + hlen + 1;
    *payload_len = n - hlen - 1;
    return AF_OK;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool af_wp_uint(const cJSON *x, size_t *v) {
    if (!cJSON_IsNumber(x)) return false;
    double d = x->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return false;
    *v = (size_t)d;
    return true;
}

af_status af_wp_tensor_parse(const void *entry, size_t payload_len, af_wp_tensor *t, af_error *err) {
    const cJSON *e = entry;
    memset(t, 0, sizeof *t);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    AF_RETURN_ERROR_IF(!cJSON_IsObject(e) || !cJSON_IsString(name), err, AF_ERR_FORMAT, "tensor entry without a name");
    snprintf(t->name, sizeof t->name, "%s", name->valuestring);
    const char *nm = t->name;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    int d = cJSON_IsString(dt) ? af_dtype_from_name(dt->valuestring) : -1;
    AF_RETURN_ERROR_IF(d < 0, err, AF_ERR_FORMAT, "tensor %s: unknown dtype %s", nm,
                       cJSON_IsString(dt) ? dt->valuestring : "(missing)");
    t->dtype = (af_dtype)d;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *strides = cJSON_GetObjectItemCaseSensitive(e, "strides");
    AF_RETURN_ERROR_IF(!cJSON_IsArray(shape) || !cJSON_IsArray(strides), err, AF_ERR_FORMAT,
                       "tensor %s: shape and strides must be arrays", nm);
    int nd = cJSON_GetArraySize(shape);
    AF_RETURN_ERROR_IF(nd > AF_MAX_DIMS, err, AF_ERR_FORMAT, "tensor %s: %d dims (at most %d)", nm, nd, AF_MAX_DIMS);
    AF_RETURN_ERROR_IF(cJSON_GetArraySize(strides) != nd, err, AF_ERR_FORMAT, "tensor %s: %d dims but %d strides",
                       nm, nd, cJSON_GetArraySize(strides));
    t->ndim = nd;
    for (int k = 0; k < nd; k++) {
        AF_RETURN_ERROR_IF(!af_wp_uint(cJSON_GetArrayItem(shape, k), &t->ne[k]) ||
                               !af_wp_uint(cJSON_GetArrayItem(strides, k), &t->nb[k]),
                           err, AF_ERR_FORMAT, "tensor %s: shape and strides must be non-negative integers", nm);
    }
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "offset");
    t->offset = 0;
    AF_RETURN_ERROR_IF(off && !af_wp_uint(off, &t->offset), err, AF_ERR_FORMAT,
                       "tensor %s: offset must be a non-negative integer", nm);
    /* the last byte an element touches, in exact arithmetic (no size_t wrap) */
    bool empty = false;
    for (int k = 0; k < nd; k++) empty |= t->ne[k] == 0;
    double end = (double)t->offset;
    if (!empty) {
        end += (double)af_dtype_size(t->dtype);
        for (int k = 0; k < nd; k++) end += (double)(t->ne[k] - 1) * (double)t->nb[k];
    }
    AF_RETURN_ERROR_IF(end > (double)payload_len, err, AF_ERR_FORMAT,
                       "tensor %s: elements up to byte %.0f lie outside the payload of %zu bytes", nm, end, payload_len);
    t->end = (size_t)end;
    return AF_OK;
}

/* --- hello ----------------------------------------------------------------------------- */

static int af_wp_name_index(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(s, names[i]) == 0) return i;
    return -1;
}

static void af_wp_str(const cJSON *o, const char *key, char *buf, size_t len) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    snprintf(buf, len, "%s", cJSON_IsString(x) ? x->valuestring : "");
}

/* Names of a string array as bits of the table names[0..n). */
static af_status af_wp_name_bits(const cJSON *arr, const char *what, const char *const *names, int n, uint32_t *bits,
                                 af_error *err) {
    AF_RETURN_ERROR_IF(!cJSON_IsArray(arr), err, AF_ERR_FORMAT, "hello: %s must be an array of names", what);
    *bits = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        AF_RETURN_ERROR_IF(!cJSON_IsString(it), err, AF_ERR_FORMAT, "hello: %s must be an array of names", what);
        int i = af_wp_name_index(it->valuestring, names, n);
        AF_RETURN_ERROR_IF(i < 0, err, AF_ERR_FORMAT, "hello: unknown %s \"%s\"", what, it->valuestring);
        *bits |= 1u << i;
    }
    return AF_OK;
}

static const char *const af_wp_float_names[3] = {"f32", "f16", "bf16"}; /* af_dtype order */
static const char *const af_wp_unpacked[5] = {"bhsd", "bshd", "sbhd", "bsd", "channels_first"};

af_status af_wp_parse_hello(const uint8_t *body, size_t n, af_wp_hello *h, af_error *err) {
    _Static_assert(AF_F32 == 0 && AF_F16 == 1 && AF_BF16 == 2, "af_wp_float_names follows af_dtype");
    memset(h, 0, sizeof *h);
    void *hv;
    const uint8_t *payload;
    size_t plen;
    AF_TRY(af_wp_split(body, n, &hv, &payload, &plen, err));
    cJSON *j = hv;
    af_status st = AF_OK;
#define AF_WP_FAIL(...)                                                                                                \
    do {                                                                                                               \
        st = af_error_set(err, AF_ERR_FORMAT, __VA_ARGS__);                                                            \
        goto done;                                                                                                     \
    } while (0)
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "hello") != 0)
        AF_WP_FAIL("expected a hello frame, got type %s", cJSON_IsString(type) ? type->valuestring : "(missing)");
    if (plen) AF_WP_FAIL("hello: %zu payload bytes (a hello has none)", plen);
    const cJSON *proto = cJSON_GetObjectItemCaseSensitive(j, "protocol");
    if (!cJSON_IsNumber(proto) || proto->valuedouble != AF_WORKER_PROTOCOL)
        AF_WP_FAIL("hello: protocol %g, this attnfuzz speaks %d", cJSON_IsNumber(proto) ? proto->valuedouble : -1.0,
                   AF_WORKER_PROTOCOL);
    af_wp_str(j, "name", h->name, sizeof h->name);
    if (!h->name[0]) AF_WP_FAIL("hello: no name");
    af_wp_str(j, "version", h->version, sizeof h->version);
    af_wp_str(j, "variant", h->variant, sizeof h->variant);
    if ((st = af_wp_name_bits(cJSON_GetObjectItemCaseSensitive(j, "caps"), "capability", af_cap_names, 17, &h->caps,
                              err)) != AF_OK)
        goto done;
    if ((st = af_wp_name_bits(cJSON_GetObjectItemCaseSensitive(j, "layouts"), "layout", af_layout_names,
                              AF_LAYOUT_COUNT, &h->layouts, err)) != AF_OK)
        goto done;
    const cJSON *dts = cJSON_GetObjectItemCaseSensitive(j, "dtypes");
    h->dtypes = 7;
    if (dts && (st = af_wp_name_bits(dts, "dtype", af_wp_float_names, 3, &h->dtypes, err)) != AF_OK) goto done;
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(j, "limits");
    if (lim && !cJSON_IsObject(lim) && !cJSON_IsNull(lim)) AF_WP_FAIL("hello: limits must be an object");
    static const char *const lim_names[6] = {"max_head_dim", "head_dim_multiple", "max_seq",
                                             "max_batch",    "max_heads",         "max_bytes"};
    uint64_t *lim_vals[6] = {&h->max_head_dim, &h->head_dim_multiple, &h->max_seq,
                             &h->max_batch,    &h->max_heads,         &h->max_bytes};
    for (int i = 0; i < 6 && cJSON_IsObject(lim); i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(lim, lim_names[i]);
        size_t v = 0;
        if (x && !cJSON_IsNull(x) && !af_wp_uint(x, &v)) AF_WP_FAIL("hello: limits.%s must be a non-negative integer", lim_names[i]);
        *lim_vals[i] = v;
    }
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(j, "conventions");
    if (conv && !cJSON_IsObject(conv) && !cJSON_IsNull(conv)) AF_WP_FAIL("hello: conventions must be an object");
    h->diagonals = (1u << AF_DIAG_COUNT) - 1;
    const cJSON *cc = cJSON_IsObject(conv) ? cJSON_GetObjectItemCaseSensitive(conv, "causal") : NULL;
    if (cc && (st = af_wp_name_bits(cc, "causal diagonal", af_diag_names, AF_DIAG_COUNT, &h->diagonals, err)) != AF_OK)
        goto done;
    const char *mr = "zero", *mv = "exclude", *dr = "counter";
    if (cJSON_IsObject(conv)) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(conv, "masked_rows");
        if (x) {
            if (!cJSON_IsString(x) || (strcmp(x->valuestring, "zero") != 0 && strcmp(x->valuestring, "nan") != 0))
                AF_WP_FAIL("hello: conventions.masked_rows must be \"zero\" or \"nan\"");
            mr = x->valuestring;
        }
        x = cJSON_GetObjectItemCaseSensitive(conv, "masked_values");
        if (x) {
            if (!cJSON_IsString(x) || (strcmp(x->valuestring, "exclude") != 0 && strcmp(x->valuestring, "ieee") != 0))
                AF_WP_FAIL("hello: conventions.masked_values must be \"exclude\" or \"ieee\"");
            mv = x->valuestring;
        }
        x = cJSON_GetObjectItemCaseSensitive(conv, "dropout");
        if (x) {
            if (!cJSON_IsString(x) || (strcmp(x->valuestring, "counter") != 0 &&
                                       strcmp(x->valuestring, "keep_mask") != 0 && strcmp(x->valuestring, "none") != 0))
                AF_WP_FAIL("hello: conventions.dropout must be \"counter\", \"keep_mask\" or \"none\"");
            dr = x->valuestring;
        }
    }
    h->masked_rows_nan = strcmp(mr, "nan") == 0;
    h->masked_values_ieee = strcmp(mv, "ieee") == 0;
    h->dropout = strcmp(dr, "keep_mask") == 0 ? AF_WP_DROPOUT_KEEP_MASK
                 : strcmp(dr, "none") == 0    ? AF_WP_DROPOUT_NONE
                                              : AF_WP_DROPOUT_COUNTER;
    if (h->dropout == AF_WP_DROPOUT_NONE) h->caps &= ~(uint32_t)AF_CAP_DROPOUT;
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(j, "compile_key");
    h->compile_key = AF_KEY_ALL;
    if (ck && !cJSON_IsNull(ck) &&
        (st = af_wp_name_bits(ck, "compile_key field", af_key_names, AF_KEY_COUNT_, &h->compile_key, err)) != AF_OK)
        goto done;
    /* the conventions in effect, defaults included, for listings and bundles */
    {
        char diags[160] = "";
        size_t k = 0;
        for (int d = 0; d < AF_DIAG_COUNT; d++) {
            if (!(h->diagonals & (1u << d))) continue;
            int w = snprintf(diags + k, sizeof diags - k, "%s\"%s\"", k ? "," : "", af_diag_names[d]);
            if (w > 0) k += (size_t)w;
        }
        snprintf(h->conventions, sizeof h->conventions,
                 "{\"causal\":[%s],\"masked_rows\":\"%s\",\"dropout\":\"%s\",\"masked_values\":\"%s\"}", diags, mr, dr,
                 mv);
    }
done:
#undef AF_WP_FAIL
    cJSON_Delete(j);
    return st;
}

/* --- result ---------------------------------------------------------------------------- */

/* The output shape of unpacked layout l (the case's output [B, Hq, Sq, Dv]). */
static int af_wp_out_shape(af_layout l, const af_case *c, size_t ne[AF_MAX_DIMS]) {
    return af_layout_shape(l, c->batch, c->q_heads, c->q_len, c->v_head_dim, ne);
}

af_status af_wp_parse_result(const uint8_t *body, size_t n, uint64_t id, const af_case *c, const af_wp_hello *h,
                             af_wp_result *r, const uint8_t **payload, af_error *err) {
    memset(r, 0, sizeof *r);
    r->compile_s = r->run_s = -1.0;
    r->layout = AF_LAYOUT_BHSD;
    void *hv;
    size_t plen;
    AF_TRY(af_wp_split(body, n, &hv, payload, &plen, err));
    cJSON *j = hv;
    af_status st = AF_OK;
#define AF_WP_FAIL(...)                                                                                                \
    do {                                                                                                               \
        st = af_error_set(err, AF_ERR_FORMAT, __VA_ARGS__);                                                            \
        goto done;                                                                                                     \
    } while (0)
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "result") != 0)
        AF_WP_FAIL("expected a result frame, got type %s", cJSON_IsString(type) ? type->valuestring : "(missing)");
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(j, "id");
    size_t got_id;
    if (!af_wp_uint(jid, &got_id) || got_id != id)
        AF_WP_FAIL("result for id %s, the request was %llu",
                   cJSON_IsNumber(jid) ? "another" : "(missing)", (unsigned long long)id);
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");
    if (!cJSON_IsString(status)) AF_WP_FAIL("result without a status");
    const char *s = status->valuestring;
    if (strcmp(s, "unsupported") == 0 || strcmp(s, "error") == 0) {
        r->status = s[0] == 'u' ? AF_WP_UNSUPPORTED : AF_WP_ERROR;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, r->status == AF_WP_UNSUPPORTED ? "reason" : "message");
        snprintf(r->message, sizeof r->message, "%s", cJSON_IsString(m) ? m->valuestring : "(no message)");
        goto done;
    }
    if (strcmp(s, "ok") != 0) AF_WP_FAIL("unknown status \"%.64s\" (ok, unsupported, error)", s);
    r->status = AF_WP_OK;
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    if (lay && !cJSON_IsNull(lay)) {
        int l = cJSON_IsString(lay) ? af_wp_name_index(lay->valuestring, af_wp_unpacked, 5) : -1;
        if (l < 0)
            AF_WP_FAIL("result: layout %s is not one of bhsd, bshd, sbhd, bsd, channels_first",
                       cJSON_IsString(lay) ? lay->valuestring : "(not a string)");
        r->layout = (af_layout)l;
    }
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    if (!cJSON_IsArray(tensors)) AF_WP_FAIL("result ok without a tensors array");
    bool has_out = false;
    size_t need = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tensors) {
        af_wp_tensor t;
        if ((st = af_wp_tensor_parse(it, plen, &t, err)) != AF_OK) goto done;
        if (t.end > need) need = t.end;
        if (strcmp(t.name, "out") == 0) {
            r->out = t;
            has_out = true;
        } else if (strcmp(t.name, "dropout_keep") == 0) {
            r->keep = t;
            r->has_keep = true;
        }
    }
    if (!has_out) AF_WP_FAIL("result ok without tensor out");
    if (plen > need) AF_WP_FAIL("payload of %zu bytes is larger than its tensors need (%zu)", plen, need);
    af_dtype od = r->out.dtype;
    if (od != AF_F32 && od != AF_F64 && od != AF_F16 && od != AF_BF16)
        AF_WP_FAIL("out has dtype %s, not a float dtype", af_dtype_names[od]);
    size_t want[AF_MAX_DIMS];
    int wn = af_wp_out_shape(r->layout, c, want);
    bool same = wn == r->out.ndim;
    for (int k = 0; same && k < wn; k++) same = want[k] == r->out.ne[k];
    if (!same) {
        char got[96] = "", exp[96] = "";
        size_t a = 0, b = 0;
        for (int k = 0; k < r->out.ndim && a < sizeof got; k++) {
            int w = snprintf(got + a, sizeof got - a, "%s%zu", k ? "," : "", r->out.ne[k]);
            if (w > 0) a += (size_t)w;
        }
        for (int k = 0; k < wn && b < sizeof exp; k++) {
            int w = snprintf(exp + b, sizeof exp - b, "%s%zu", k ? "," : "", want[k]);
            if (w > 0) b += (size_t)w;
        }
        AF_WP_FAIL("out has shape [%s], the case's %s output is [%s]", got, af_layout_names[r->layout], exp);
    }
    if (r->has_keep) {
        size_t kw[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
        bool ok = r->keep.dtype == AF_BOOL && r->keep.ndim == 4;
        for (int k = 0; ok && k < 4; k++) ok = r->keep.ne[k] == kw[k];
        if (!ok) AF_WP_FAIL("dropout_keep is not a bool [%zu,%zu,%zu,%zu] tensor", kw[0], kw[1], kw[2], kw[3]);
    } else if (h && h->dropout == AF_WP_DROPOUT_KEEP_MASK && c->dropout_p > 0.0) {
        AF_WP_FAIL("no dropout_keep, but conventions.dropout is keep_mask and the case has dropout %g", c->dropout_p);
    }
    const cJSON *tim = cJSON_GetObjectItemCaseSensitive(j, "timings");
    if (cJSON_IsObject(tim)) {
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(tim, "compile_s");
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(tim, "run_s");
        if (cJSON_IsNumber(cs) && cs->valuedouble >= 0.0) r->compile_s = cs->valuedouble;
        if (cJSON_IsNumber(rs) && rs->valuedouble >= 0.0) r->run_s = rs->valuedouble;
    }
done:
#undef AF_WP_FAIL
    cJSON_Delete(j);
    return st;
}

static double af_wp_load(af_dtype dt, const uint8_t *p) {
    switch (dt) {
    case AF_F32: {
        float f;
        memcpy(&f, p, 4);
        return (double)f;
    }
    case AF_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case AF_F16:
    case AF_BF16: {
        uint16_t u;
        memcpy(&u, p, 2);
        return (double)(dt == AF_F16 ? af_f16_to_f32(u) : af_bf16_to_f32(u));
    }
    case AF_BOOL: return (double)(p[0] != 0);
    case AF_DTYPE_COUNT: break;
    }
    AF_ASSERT(0 && "unknown dtype");
    return 0.0;
}

void af_wp_copy_out(const af_wp_result *r, const uint8_t *payload, const af_case *c, af_tensor *dst) {
    /* out in r->layout, as a canonical [B, Hq, Sq, Dv] view (the layout's output is the
     * layout of one tensor with Hq heads, Sq positions and head dim Dv) */
    af_tensor phys;
    memset(&phys, 0, sizeof phys);
    phys.dtype = r->out.dtype;
    phys.ndim = r->out.ndim;
    for (int k = 0; k < phys.ndim; k++) phys.ne[k] = r->out.ne[k], phys.nb[k] = r->out.nb[k];
    phys.data = (void *)(uintptr_t)(payload + r->out.offset);
    af_view v;
    af_layout_view(r->layout, &phys, AF_Q, c->q_heads, c->v_head_dim, &v);
    AF_ASSERT(dst->dtype == AF_F32 || dst->dtype == AF_F64);
    const uint8_t *base = v.data;
    size_t e = 0;
    for (size_t b = 0; b < v.ne[0]; b++)
        for (size_t h = 0; h < v.ne[1]; h++)
            for (size_t i = 0; i < v.ne[2]; i++)
                for (size_t d = 0; d < v.ne[3]; d++, e++) {
                    double x = af_wp_load(v.dtype, base + af_view_offset(&v, b, h, i, d));
                    if (dst->dtype == AF_F64)
                        ((double *)dst->data)[e] = x;
                    else
                        ((float *)dst->data)[e] = (float)x; /* exact from f16/bf16/f32 */
                }
}

void af_wp_copy_keep(const af_wp_result *r, const uint8_t *payload, const af_case *c, uint8_t *keep) {
    const af_wp_tensor *t = &r->keep;
    const uint8_t *base = payload + t->offset;
    size_t e = 0;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < c->q_len; i++)
                for (size_t j = 0; j < c->kv_len; j++, e++)
                    keep[e] = base[b * t->nb[0] + h * t->nb[1] + i * t->nb[2] + j * t->nb[3]] != 0;
}

/* --- run requests ------------------------------------------------------------------------ */

void af_wp_buf_free(af_wp_buf *b) {
    if (!b) return;
    af_free(b->data);
    memset(b, 0, sizeof *b);
}

static void af_wp_reserve(af_wp_buf *b, size_t extra) {
    if (b->failed || b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *n = af_malloc(cap);
    if (!n) {
        b->failed = true;
        return;
    }
    if (b->len) memcpy(n, b->data, b->len);
    af_free(b->data);
    b->data = n;
    b->cap = cap;
}

static void af_wp_put(af_wp_buf *b, const char *s, size_t n) {
    af_wp_reserve(b, n);
    if (b->failed) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

/* ",%zu" / "%zu" without printf (every entry of every run frame has a dozen) */
static void af_wp_put_uint(af_wp_buf *b, bool comma, unsigned long long u) {
    char tmp[24];
    int n = sizeof tmp;
    do tmp[--n] = (char)('0' + u % 10); while ((u /= 10) != 0);
    if (comma) tmp[--n] = ',';
    af_wp_put(b, tmp + n, sizeof tmp - (size_t)n);
}

static void af_wp_printf(af_wp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void af_wp_printf(af_wp_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if ((size_t)w < sizeof tmp) {
        af_wp_put(b, tmp, (size_t)w);
        return;
    }
    af_wp_reserve(b, (size_t)w + 1);
    if (b->failed) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)w + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)w;
}

/* One tensor entry: shape ne[0..nd) with byte strides nb at byte offset off. */
static void af_wp_entry(af_wp_buf *b, bool first, const char *name, af_dtype dt, int nd, const size_t *ne,
                        const size_t *nb, size_t off) {
    af_wp_printf(b, "%s{\"name\":\"%s\",\"dtype\":\"%s\",\"shape\":[", first ? "" : ",", name, af_dtype_names[dt]);
    for (int k = 0; k < nd; k++) af_wp_put_uint(b, k > 0, ne[k]);
    af_wp_put(b, "],\"strides\":[", 13);
    for (int k = 0; k < nd; k++) af_wp_put_uint(b, k > 0, nb[k]);
    af_wp_put(b, "],\"offset\":", 11);
    af_wp_put_uint(b, false, off);
    af_wp_put(b, "}", 1);
}

/* The per-tensor view of q, k or v inside a packed buffer t (ne/nb of the view, byte
 * offset of its first element): [B, S, H, D] for the two qkv_bs* layouts, [B, H*D, S]
 * for qkv_channels_first. */
static int af_wp_packed_view(af_layout l, const af_tensor *t, int w, size_t H, size_t D, size_t *ne, size_t *nb,
                             size_t *off) {
    switch (l) {
    case AF_LAYOUT_QKV_BS3HD: /* [B, S, 3, H, D] */
        ne[0] = t->ne[0], ne[1] = t->ne[1], ne[2] = t->ne[3], ne[3] = t->ne[4];
        nb[0] = t->nb[0], nb[1] = t->nb[1], nb[2] = t->nb[3], nb[3] = t->nb[4];
        *off = (size_t)w * t->nb[2];
        return 4;
    case AF_LAYOUT_QKV_BSH3D: /* [B, S, H, 3, D] */
        ne[0] = t->ne[0], ne[1] = t->ne[1], ne[2] = t->ne[2], ne[3] = t->ne[4];
        nb[0] = t->nb[0], nb[1] = t->nb[1], nb[2] = t->nb[2], nb[3] = t->nb[4];
        *off = (size_t)w * t->nb[3];
        return 4;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: /* [B, 3*H*D, S], chunk(3, dim=1) */
        ne[0] = t->ne[0], ne[1] = H * D, ne[2] = t->ne[2];
        nb[0] = t->nb[0], nb[1] = t->nb[1], nb[2] = t->nb[2];
        *off = (size_t)w * H * D * t->nb[1];
        return 3;
    case AF_LAYOUT_BHSD:
    case AF_LAYOUT_BSHD:
    case AF_LAYOUT_SBHD:
    case AF_LAYOUT_BSD:
    case AF_LAYOUT_CHANNELS_FIRST:
    case AF_LAYOUT_COUNT: break;
    }
    AF_ASSERT(0 && "not a packed layout");
    return 0;
}

af_status af_wp_encode_run(af_wp_buf *hdr, uint64_t id, const af_case_tensors *t, af_wp_part parts[AF_WP_MAX_PARTS],
                           size_t *nparts, af_error *err) {
    const af_case *c = t->c;
    hdr->len = 0;
    hdr->failed = false;
    af_wp_put(hdr, "\0\0\0\0", 4); /* the length, filled in last */
    af_wp_printf(hdr, "{\"type\":\"run\",\"id\":%llu,\"case\":", (unsigned long long)id);
    cJSON *cj = af_case_to_cjson(c);
    AF_RETURN_ERROR_IF(!cj, err, AF_ERR_NOMEM, "out of memory");
    char *ctext = cJSON_PrintUnformatted(cj);
    cJSON_Delete(cj);
    AF_RETURN_ERROR_IF(!ctext, err, AF_ERR_NOMEM, "out of memory");
    af_wp_put(hdr, ctext, strlen(ctext));
    free(ctext);
    af_wp_printf(hdr, ",\"derived\":{\"scale\":%.17g,\"diag_offset\":[", af_case_scale(c));
    for (uint32_t b = 0; b < c->batch; b++) af_wp_printf(hdr, "%s%d", b ? "," : "", (int)af_case_diag_offset(c, b));
    af_wp_put(hdr, "],\"valid_keys\":[", 16);
    for (uint32_t b = 0; b < c->batch; b++) af_wp_put_uint(hdr, b > 0, af_case_valid_keys(c, b));
    af_wp_put(hdr, "]},\"tensors\":[", 14);

    size_t np = 0, off = 0;
    size_t ne[AF_MAX_DIMS], nb[AF_MAX_DIMS];
    if (af_case_is_packed(c)) {
        af_layout l = c->t[AF_Q].layout;
        size_t span = af_tensor_span(&t->q);
        af_wp_entry(hdr, true, "qkv", t->q.dtype, t->q.ndim, t->q.ne, t->q.nb, 0);
        for (int w = 0; w < AF_QKV_COUNT; w++) {
            size_t voff;
            int nd = af_wp_packed_view(l, &t->q, w, c->q_heads, c->head_dim, ne, nb, &voff);
            af_wp_entry(hdr, false, af_tensor_names[w], t->q.dtype, nd, ne, nb, voff);
        }
        parts[np++] = (af_wp_part){t->q.data, span};
        off = span;
    } else {
        const af_tensor *qkv[3] = {&t->q, &t->k, &t->v};
        for (int w = 0; w < AF_QKV_COUNT; w++) {
            size_t span = af_tensor_span(qkv[w]);
            af_wp_entry(hdr, w == 0, af_tensor_names[w], qkv[w]->dtype, qkv[w]->ndim, qkv[w]->ne, qkv[w]->nb, off);
            parts[np++] = (af_wp_part){qkv[w]->data, span};
            off += span;
        }
    }
    const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
    const af_tensor *mt[2] = {&t->amask, &t->bmask};
    static const char *const mnames[2] = {"mask", "bool_mask"};
    for (int m = 0; m < 2; m++) {
        if (!ms[m]->present) continue;
        size_t span = af_tensor_span(mt[m]);
        af_wp_entry(hdr, false, mnames[m], mt[m]->dtype, mt[m]->ndim, mt[m]->ne, mt[m]->nb, off);
        parts[np++] = (af_wp_part){mt[m]->data, span};
        off += span;
    }
    af_wp_put(hdr, "]}\n", 3);
    AF_RETURN_ERROR_IF(hdr->failed, err, AF_ERR_NOMEM, "out of memory");
    size_t total = hdr->len - 4 + off;
    AF_RETURN_ERROR_IF(total > 0xffffffffu, err, AF_ERR_INVALID, "run frame of %zu bytes is over 4 GiB", total);
    for (int k = 0; k < 4; k++) hdr->data[k] = (char)(uint8_t)(total >> (8 * k));
    *nparts = np;
    return AF_OK;
}
