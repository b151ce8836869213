/* case_fp8.c - the FP8 part of a case (docs/design.md section 2, "FP8"): Q, K and V in e4m3
 * or e5m2 with a per-tensor descale. Its repair, validation, byte record, JSON, and the
 * generator's and mutator's draws; case.h says what the fields mean. */
#include "case_fp8.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "attnfuzz/rng.h"

const char *const af_fp8_fmt_names[AF_FP8_COUNT] = {"none", "e4m3", "e5m2"};
_Static_assert(sizeof af_fp8_fmt_names / sizeof af_fp8_fmt_names[0] == AF_FP8_COUNT, "names");

static af_dtype af_fp8_dtype(af_fp8_fmt f) { return f == AF_FP8_E5M2 ? AF_E5M2 : AF_E4M3; }

af_dtype af_case_input_dtype(const af_case *c, af_tensor_id w) {
    bool fp8 = c->fp8.fmt != AF_FP8_NONE && !(w == AF_Q && c->fp8.kv_only);
    return fp8 ? af_fp8_dtype(c->fp8.fmt) : c->dtype;
}

double af_case_descale(const af_case *c, af_tensor_id w) {
    return c->fp8.fmt == AF_FP8_NONE ? 1.0 : (double)c->fp8.descale[w];
}

static bool af_fp8_descale_ok(float d) { return d >= AF_FP8_DESCALE_MIN && d <= AF_FP8_DESCALE_MAX; }

void af_fp8_repair(af_case *c) {
    af_fp8_spec *f = &c->fp8;
    if ((unsigned)f->fmt >= AF_FP8_COUNT) f->fmt = AF_FP8_NONE;
    if (f->fmt == AF_FP8_NONE) f->kv_only = false;
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        float d = f->descale[w];
        if (f->fmt == AF_FP8_NONE || (w == AF_Q && f->kv_only) || !(d > 0.0f) || isinf(d))
            d = 1.0f; /* NaN, 0, negative; Q beside an FP8 KV cache */
        f->descale[w] = d < AF_FP8_DESCALE_MIN ? AF_FP8_DESCALE_MIN : d > AF_FP8_DESCALE_MAX ? AF_FP8_DESCALE_MAX : d;
    }
    if (f->fmt == AF_FP8_NONE) return;
    if (c->dtype == AF_F32) c->dtype = AF_BF16; /* what FP8 attention APIs return by default */
    c->allow_tf32 = false;
    memset(&c->bwd, 0, sizeof c->bwd);
    memset(&c->serve, 0, sizeof c->serve);
    /* Q in another dtype than K and V: no packed buffer (Q bshd, the packed layouts' family;
     * K and V keep theirs, unpacked as without packing) */
    if (f->kv_only && c->t[AF_Q].layout >= AF_LAYOUT_FIRST_PACKED) c->t[AF_Q].layout = AF_LAYOUT_BSHD;
}

af_status af_fp8_validate(const af_case *c, af_error *err) {
    const af_fp8_spec *f = &c->fp8;
    AF_RETURN_ERROR_IF((unsigned)f->fmt >= AF_FP8_COUNT, err, AF_ERR_INVALID, "fp8.format must be e4m3 or e5m2");
    AF_RETURN_ERROR_IF(f->kv_only && f->fmt == AF_FP8_NONE, err, AF_ERR_INVALID, "fp8.kv_only without a format");
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        bool one = f->fmt == AF_FP8_NONE || (w == AF_Q && f->kv_only);
        AF_RETURN_ERROR_IF(one ? f->descale[w] != 1.0f : !af_fp8_descale_ok(f->descale[w]), err, AF_ERR_INVALID,
                           "fp8.descale[%d] (%g) must be in 2^-40..2^40 (1 without fp8, and q's with kv_only)", w,
                           (double)f->descale[w]);
    }
    if (f->fmt == AF_FP8_NONE) return AF_OK;
    AF_RETURN_ERROR_IF(f->kv_only && af_case_is_packed(c), err, AF_ERR_INVALID,
                       "fp8.kv_only: q in another dtype than k and v cannot share a packed buffer");
    AF_RETURN_ERROR_IF(c->dtype == AF_F32, err, AF_ERR_INVALID, "fp8: the output dtype must be f16 or bf16");
    AF_RETURN_ERROR_IF(c->bwd.grads, err, AF_ERR_INVALID, "fp8: an FP8 case is forward-only");
    AF_RETURN_ERROR_IF(c->serve.forms, err, AF_ERR_INVALID, "fp8: an FP8 case has no serving form");
    return AF_OK;
}

bool af_fp8_equal(const af_case *a, const af_case *b) {
    return a->fp8.fmt == b->fp8.fmt && a->fp8.kv_only == b->fp8.kv_only &&
           memcmp(a->fp8.descale, b->fp8.descale, sizeof a->fp8.descale) == 0;
}

void af_fp8_decode(af_case *c, const uint8_t *p, size_t n) {
    uint8_t rec[AF_FP8_BYTES] = {0};
    if (p) memcpy(rec, p, n < AF_FP8_BYTES ? n : AF_FP8_BYTES);
    c->fp8.fmt = (af_fp8_fmt)((rec[0] & 3u) % AF_FP8_COUNT);
    c->fp8.kv_only = (rec[0] >> 2) & 1u;
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        uint32_t u = 0;
        for (int i = 0; i < 4; i++) u |= (uint32_t)rec[1 + 4 * w + i] << (8 * i);
        memcpy(&c->fp8.descale[w], &u, 4);
    }
}

void af_fp8_encode(const af_case *c, uint8_t out[AF_FP8_BYTES]) {
    out[0] = (uint8_t)((unsigned)c->fp8.fmt | (c->fp8.kv_only ? 4u : 0u));
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        uint32_t u;
        memcpy(&u, &c->fp8.descale[w], 4);
        for (int i = 0; i < 4; i++) out[1 + 4 * w + i] = (uint8_t)(u >> (8 * i));
    }
}

void af_fp8_write_json(af_jw *w, const af_case *c) {
    if (c->fp8.fmt == AF_FP8_NONE) return;
    af_jw_key(w, "fp8");
    af_jw_begin(w, '{');
    af_jw_key(w, "format"), af_jw_string(w, af_fp8_fmt_names[c->fp8.fmt]);
    if (c->fp8.kv_only) af_jw_key(w, "kv_only"), af_jw_bool(w, true);
    af_jw_key(w, "descale");
    af_jw_begin(w, '[');
    for (int t = 0; t < AF_QKV_COUNT; t++) af_jw_double(w, (double)c->fp8.descale[t]);
    af_jw_end(w, ']');
    af_jw_end(w, '}');
}

af_status af_fp8_read_json(af_case *c, const void *json, af_error *err) {
    af_fp8_spec *f = &c->fp8;
    f->fmt = AF_FP8_NONE;
    f->kv_only = false;
    for (int t = 0; t < AF_QKV_COUNT; t++) f->descale[t] = 1.0f;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive((const cJSON *)json, "fp8");
    if (!o || cJSON_IsNull(o)) return AF_OK;
    AF_RETURN_ERROR_IF(!cJSON_IsObject(o), err, AF_ERR_FORMAT, "field fp8: expected an object or null");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    int k = AF_FP8_COUNT;
    for (int i = 1; i < AF_FP8_COUNT && cJSON_IsString(fmt); i++)
        if (strcmp(fmt->valuestring, af_fp8_fmt_names[i]) == 0) k = i;
    AF_RETURN_ERROR_IF(k == AF_FP8_COUNT, err, AF_ERR_INVALID, "field fp8.format: expected \"e4m3\" or \"e5m2\"");
    f->fmt = (af_fp8_fmt)k;
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(o, "kv_only");
    AF_RETURN_ERROR_IF(kv && !cJSON_IsNull(kv) && !cJSON_IsBool(kv), err, AF_ERR_FORMAT,
                       "field fp8.kv_only: expected true or false");
    f->kv_only = cJSON_IsTrue(kv);
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "descale");
    if (!ds || cJSON_IsNull(ds)) return AF_OK; /* descales 1 */
    AF_RETURN_ERROR_IF(!cJSON_IsArray(ds) || cJSON_GetArraySize(ds) != AF_QKV_COUNT, err, AF_ERR_FORMAT,
                       "field fp8.descale: expected [q, k, v]");
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        const cJSON *it = cJSON_GetArrayItem(ds, t);
        AF_RETURN_ERROR_IF(!cJSON_IsNumber(it), err, AF_ERR_FORMAT, "field fp8.descale[%d]: expected a number", t);
        float d = (float)it->valuedouble;
        AF_RETURN_ERROR_IF((double)d != it->valuedouble, err, AF_ERR_INVALID,
                           "field fp8.descale[%d]: %.17g is not a float32 value", t, it->valuedouble);
        f->descale[t] = d;
    }
    return AF_OK;
}

/* The amax a user's tensor of spec t has, roughly (the scaling recipes take it from the
 * data): a normal draw's largest of a few thousand values sits near 4 sigma. The near-overflow
 * and denormal distributions are drawn in the format's own range (inputs.c), so their descale
 * only sets the magnitude of the dequantized values. */
static double af_fp8_amax(const af_tensor_spec *t, double fmax) {
    double mag = pow(10.0, t->mag_q4 / 4.0);
    switch (t->dist) {
    case AF_DIST_NORMAL: return 4.0 * mag;
    case AF_DIST_UNIFORM:
    case AF_DIST_ONE_HOT: return mag;
    case AF_DIST_SMALL_INT: return 4.0;
    case AF_DIST_NEAR_OVERFLOW:
    case AF_DIST_DENORMAL: return mag * fmax;
    case AF_DIST_COUNT: break;
    }
    return mag;
}

/* descale = amax / max_representable, as per-tensor scaling recipes compute it; a fifth of the
 * time off by a power of two (a stale amax history, a delayed-scaling window: the stored
 * values then saturate or sink into the subnormals), a tenth by a factor in [0.5, 2). */
static float af_fp8_draw_descale(af_rng *r, const af_tensor_spec *t, af_dtype fmt) {
    double fmax = af_dtype_max(fmt);
    double d = af_fp8_amax(t, fmax) / fmax;
    switch (AF_RNG_PICK(r, 70, 20, 10)) {
    case 0: break;
    case 1: d = ldexp(d, (int)af_rng_range(r, -4, 10)); break;
    default: d *= 0.5 + 1.5 * af_rng_uniform(r); break;
    }
    float f = (float)d;
    return f < AF_FP8_DESCALE_MIN ? AF_FP8_DESCALE_MIN : f > AF_FP8_DESCALE_MAX ? AF_FP8_DESCALE_MAX : f;
}

void af_fp8_generate(af_case *c, af_rng *r) {
    c->fp8.fmt = af_rng_chance(r, 3, 5) ? AF_FP8_E4M3 : AF_FP8_E5M2;
    c->fp8.kv_only = af_rng_chance(r, 1, 3); /* an FP8 KV cache beside f16/bf16 queries */
    c->dtype = af_rng_chance(r, 7, 10) ? AF_BF16 : AF_F16;
    c->allow_tf32 = false;
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        /* the format's corners more often than the dense generator draws them */
        if (af_rng_chance(r, 1, 6))
            c->t[t].dist = af_rng_chance(r, 1, 2) ? AF_DIST_NEAR_OVERFLOW : AF_DIST_DENORMAL;
        c->fp8.descale[t] = af_fp8_draw_descale(r, &c->t[t], af_fp8_dtype(c->fp8.fmt));
    }
}

void af_fp8_revalue(af_case *c, af_rng *r) {
    if (c->fp8.fmt == AF_FP8_NONE) return;
    for (int t = 0; t < AF_QKV_COUNT; t++)
        c->fp8.descale[t] = af_fp8_draw_descale(r, &c->t[t], af_fp8_dtype(c->fp8.fmt));
}

void af_fp8_mutate(af_case *c, af_rng *r) {
    switch (af_rng_below(r, 5)) {
    case 0: c->fp8.fmt = c->fp8.fmt == AF_FP8_E4M3 ? AF_FP8_E5M2 : AF_FP8_E4M3; break;
    case 1: c->fp8.fmt = AF_FP8_NONE; break; /* the same case in f16/bf16 (repair resets descales) */
    case 2: /* Q in FP8 too, or back in the case dtype */
        c->fp8.kv_only = !c->fp8.kv_only;
        if (!c->fp8.kv_only) c->fp8.descale[AF_Q] = af_fp8_draw_descale(r, &c->t[AF_Q], af_fp8_dtype(c->fp8.fmt));
        break;
    default: {
        int t = (int)af_rng_below(r, AF_QKV_COUNT);
        c->fp8.descale[t] = af_fp8_draw_descale(r, &c->t[t], af_fp8_dtype(c->fp8.fmt));
        break;
    }
    }
}
