/* case_json.c - a case as JSON (the "case" object of case.json; see docs/case-json.md).
 *
 * Writing (one writer, af_case_write_json: the cJSON forms parse its text) uses names for
 * every enum and round-trips exactly (numbers are printed with the fewest digits that read
 * back as the same double: json_exact.h). Reading accepts what other tools write: missing
 * optional fields take their defaults, numbers may be given for seeds as strings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/case.h"
#include "case_json.h"
#include "case_fp8.h"
#include "case_serving.h"
#include "json_exact.h"

/* --- writing --------------------------------------------------------------------- */

static void af_case_json_u64(af_jw *w, uint64_t v) {
    if (v <= (1ull << 53)) {
        af_jw_uint(w, v);
    } else { /* beyond a double's integers: a decimal string */
        char buf[24];
        af_json_integer(buf, false, v);
        af_jw_string(w, buf);
    }
}

static void af_case_json_mask(af_jw *w, const char *key, const af_mask_spec *m, bool additive) {
    af_jw_key(w, key);
    if (!m->present) {
        af_jw_null(w);
        return;
    }
    char dims[8];
    const char *letters = "bhqk";
    size_t n = 0;
    for (int d = 0; d < 4; d++)
        if (m->dims & (1u << d)) dims[n++] = letters[d];
    dims[n] = 0;
    af_jw_begin(w, '{');
    af_jw_key(w, "full_dims"), af_jw_string(w, dims);
    af_jw_key(w, "rank"), af_jw_uint(w, m->rank2 ? 2 : 4);
    af_jw_key(w, "expanded"), af_jw_bool(w, m->expanded);
    if (additive) af_jw_key(w, "dtype"), af_jw_string(w, af_dtype_names[m->dtype]);
    af_jw_key(w, "pattern"), af_jw_string(w, af_mask_pattern_names[m->pattern]);
    af_jw_key(w, "density"), af_jw_uint(w, m->density);
    if (additive) {
        af_jw_key(w, "fill"), af_jw_string(w, af_mask_fill_names[m->fill]);
        af_jw_key(w, "log10_magnitude"), af_jw_double(w, m->mag_q4 / 4.0);
        af_jw_key(w, "live_zero"), af_jw_bool(w, m->live_zero);
    }
    af_jw_key(w, "seed"), af_jw_uint(w, m->seed);
    af_jw_end(w, '}');
}

static void af_case_json_tensor(af_jw *w, const char *key, const af_tensor_spec *t, bool with_layout) {
    af_jw_key(w, key);
    af_jw_begin(w, '{');
    if (with_layout) af_jw_key(w, "layout"), af_jw_string(w, af_layout_names[t->layout]);
    af_jw_key(w, "perm"), af_jw_uint(w, t->perm);
    af_jw_key(w, "pad"), af_jw_uint(w, t->pad);
    af_jw_key(w, "broadcast"), af_jw_string(w, af_bcast_names[t->bcast]);
    af_jw_key(w, "dist"), af_jw_string(w, af_dist_names[t->dist]);
    af_jw_key(w, "log10_magnitude"), af_jw_double(w, t->mag_q4 / 4.0);
    af_jw_key(w, "special"), af_jw_string(w, af_special_names[t->special]);
    af_jw_key(w, "seed"), af_jw_uint(w, t->seed);
    af_jw_end(w, '}');
}

void af_case_write_json(af_jw *w, const af_case *c) {
    af_jw_begin(w, '{');
    af_jw_key(w, "batch"), af_jw_uint(w, c->batch);
    af_jw_key(w, "q_heads"), af_jw_uint(w, c->q_heads);
    af_jw_key(w, "kv_heads"), af_jw_uint(w, c->kv_heads);
    af_jw_key(w, "q_len"), af_jw_uint(w, c->q_len);
    af_jw_key(w, "kv_len"), af_jw_uint(w, c->kv_len);
    af_jw_key(w, "head_dim"), af_jw_uint(w, c->head_dim);
    af_jw_key(w, "v_head_dim"), af_jw_uint(w, c->v_head_dim);
    af_jw_key(w, "dtype"), af_jw_string(w, af_dtype_names[c->dtype]);
    af_jw_key(w, "allow_tf32"), af_jw_bool(w, c->allow_tf32);
    af_jw_key(w, "scale");
    if (c->scale_set) {
        af_jw_double(w, c->scale);
    } else {
        af_jw_null(w);
    }
    af_jw_key(w, "scale_placement"), af_jw_string(w, af_placement_names[c->placement]);
    af_jw_key(w, "softcap"), af_jw_double(w, c->softcap);
    af_jw_key(w, "causal"), af_jw_bool(w, c->causal);
    af_jw_key(w, "diagonal"), af_jw_string(w, af_diag_names[c->diag]);
    af_jw_key(w, "diagonal_offset"), af_jw_int(w, c->diag_offset);
    af_jw_key(w, "key_padding");
    if (c->key_padding) {
        af_jw_begin(w, '[');
        for (uint32_t b = 0; b < c->batch; b++) af_jw_uint(w, c->kv_valid[b]);
        af_jw_end(w, ']');
    } else {
        af_jw_null(w);
    }
    af_jw_key(w, "window");
    af_jw_begin(w, '[');
    af_jw_int(w, c->window_left);
    af_jw_int(w, c->window_right);
    af_jw_end(w, ']');
    af_case_json_mask(w, "additive_mask", &c->amask, true);
    af_case_json_mask(w, "bool_mask", &c->bmask, false);
    af_jw_key(w, "dropout_p"), af_jw_double(w, c->dropout_p);
    af_jw_key(w, "dropout_seed"), af_case_json_u64(w, c->dropout_seed);
    for (int t = 0; t < AF_QKV_COUNT; t++) af_case_json_tensor(w, af_tensor_names[t], &c->t[t], true);
    if (c->bwd.grads) { /* absent: forward-only */
        af_jw_key(w, "backward");
        af_jw_begin(w, '{');
        af_jw_key(w, "grads");
        af_jw_begin(w, '[');
        for (int g = 0; g < AF_GRAD_COUNT; g++)
            if (c->bwd.grads & (1u << g)) af_jw_string(w, af_grad_names[g]);
        af_jw_end(w, ']');
        af_case_json_tensor(w, "do", &c->bwd.dout, false); /* in the output's layout */
        af_jw_end(w, '}');
    }
    af_serving_write_json(w, c); /* absent: no serving form */
    af_fp8_write_json(w, c);     /* absent: no FP8 */
    af_jw_end(w, '}');
}

void *af_case_to_cjson(const af_case *c) {
    af_jw w = {0};
    af_case_write_json(&w, c);
    af_jw_raw(&w, "", 1); /* the NUL */
    cJSON *o = w.failed ? NULL : cJSON_ParseWithLength(w.data, w.len);
    af_jw_free(&w);
    /* cJSON would print the parsed doubles with 15 digits: keep them exact */
    if (o && !af_json_exact_numbers(o->child)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *af_case_to_json(const af_case *c) {
    cJSON *o = af_case_to_cjson(c);
    if (!o) return NULL;
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/* --- reading --------------------------------------------------------------------- */

typedef struct af_jr {
    af_error *err;
    af_status st;
    const char *where; /* "q", "additive_mask", or "" */
} af_jr;

static af_status af_jr_fail(af_jr *jr, af_status code, const char *key, const char *what) {
    if (jr->st == AF_OK)
        jr->st = af_error_set(jr->err, code, "field %s%s%s: %s", jr->where, *jr->where ? "." : "", key, what);
    return jr->st;
}

static const cJSON *af_jr_get(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return (it && !cJSON_IsNull(it)) ? it : NULL;
}

static double af_jr_num(af_jr *jr, const cJSON *o, const char *key, double dflt, double lo, double hi) {
    const cJSON *it = af_jr_get(o, key);
    if (!it) return dflt;
    if (!cJSON_IsNumber(it)) {
        af_jr_fail(jr, AF_ERR_FORMAT, key, "expected a number");
        return dflt;
    }
    if (!(it->valuedouble >= lo && it->valuedouble <= hi)) {
        char buf[128];
        snprintf(buf, sizeof buf, "%g is out of range [%g, %g]", it->valuedouble, lo, hi);
        af_jr_fail(jr, AF_ERR_INVALID, key, buf);
        return dflt;
    }
    return it->valuedouble;
}

static uint32_t af_jr_u32(af_jr *jr, const cJSON *o, const char *key, uint32_t dflt, uint32_t lo, uint32_t hi) {
    double d = af_jr_num(jr, o, key, dflt, lo, hi);
    if (d != floor(d)) af_jr_fail(jr, AF_ERR_INVALID, key, "expected an integer");
    return (uint32_t)d;
}

static bool af_jr_bool(af_jr *jr, const cJSON *o, const char *key, bool dflt) {
    const cJSON *it = af_jr_get(o, key);
    if (!it) return dflt;
    if (!cJSON_IsBool(it)) {
        af_jr_fail(jr, AF_ERR_FORMAT, key, "expected true or false");
        return dflt;
    }
    return cJSON_IsTrue(it);
}

static int af_jr_enum(af_jr *jr, const cJSON *o, const char *key, const char *const *names, int count, int dflt) {
    const cJSON *it = af_jr_get(o, key);
    if (!it) return dflt;
    if (!cJSON_IsString(it)) {
        af_jr_fail(jr, AF_ERR_FORMAT, key, "expected a string");
        return dflt;
    }
    for (int i = 0; i < count; i++)
        if (strcmp(it->valuestring, names[i]) == 0) return i;
    char buf[256];
    int n = snprintf(buf, sizeof buf, "unknown value \"%.40s\" (one of:", it->valuestring);
    for (int i = 0; i < count && n > 0 && (size_t)n < sizeof buf; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, " %s", names[i]);
    if (n > 0 && (size_t)n < sizeof buf - 1) snprintf(buf + n, sizeof buf - (size_t)n, ")");
    af_jr_fail(jr, AF_ERR_INVALID, key, buf);
    return dflt;
}

static uint64_t af_jr_u64(af_jr *jr, const cJSON *o, const char *key) {
    const cJSON *it = af_jr_get(o, key);
    if (!it) return 0;
    if (cJSON_IsString(it)) {
        char *end = NULL;
        unsigned long long v = strtoull(it->valuestring, &end, 10);
        if (!end || *end || !*it->valuestring) af_jr_fail(jr, AF_ERR_FORMAT, key, "expected a decimal integer");
        return v;
    }
    return (uint64_t)af_jr_num(jr, o, key, 0, 0, 0x1p64);
}

static int8_t af_jr_mag(af_jr *jr, const cJSON *o) {
    double m = af_jr_num(jr, o, "log10_magnitude", 0.0, AF_MAG_Q4_MIN / 4.0, AF_MAG_Q4_MAX / 4.0);
    return (int8_t)lrint(m * 4.0);
}

static void af_jr_mask(af_jr *jr, const cJSON *o, const char *key, af_mask_spec *m, bool additive) {
    const cJSON *mo = af_jr_get(o, key);
    memset(m, 0, sizeof *m);
    m->dtype = additive ? AF_F32 : AF_BOOL;
    if (!mo) return;
    if (!cJSON_IsObject(mo)) {
        af_jr_fail(jr, AF_ERR_FORMAT, key, "expected an object or null");
        return;
    }
    jr->where = key;
    m->present = true;
    const cJSON *dims = af_jr_get(mo, "full_dims");
    m->dims = AF_MDIM_Q | AF_MDIM_K;
    if (dims) {
        if (!cJSON_IsString(dims)) {
            af_jr_fail(jr, AF_ERR_FORMAT, "full_dims", "expected a string of the letters b, h, q, k");
        } else {
            m->dims = 0;
            for (const char *p = dims->valuestring; *p; p++) {
                const char *letters = "bhqk";
                const char *at = strchr(letters, *p);
                if (!at) {
                    af_jr_fail(jr, AF_ERR_INVALID, "full_dims", "letters must be among b, h, q, k");
                    break;
                }
                m->dims |= (uint8_t)(1u << (at - letters));
            }
        }
    }
    uint32_t rank = af_jr_u32(jr, mo, "rank", 4, 2, 4);
    if (rank == 3) af_jr_fail(jr, AF_ERR_INVALID, "rank", "must be 2 or 4");
    m->rank2 = rank == 2;
    m->expanded = af_jr_bool(jr, mo, "expanded", false);
    if (additive) {
        m->dtype = (af_dtype)af_jr_enum(jr, mo, "dtype", af_dtype_names, AF_CASE_DTYPE_COUNT, AF_F32);
        m->fill = (af_mask_fill)af_jr_enum(jr, mo, "fill", af_mask_fill_names, AF_FILL_COUNT, AF_FILL_NEG_INF);
        m->mag_q4 = af_jr_mag(jr, mo);
        m->live_zero = af_jr_bool(jr, mo, "live_zero", false);
    }
    m->pattern = (af_mask_pattern)af_jr_enum(jr, mo, "pattern", af_mask_pattern_names, AF_MASK_PATTERN_COUNT,
                                             AF_MASK_RANDOM);
    m->density = (uint8_t)af_jr_u32(jr, mo, "density", 0, 0, 255);
    m->seed = af_jr_u32(jr, mo, "seed", 0, 0, UINT32_MAX);
    jr->where = "";
}

/* The tensor spec under key (where: its path for messages); with_layout false for dO,
 * whose layout is the output's. */
static void af_jr_tensor(af_jr *jr, const cJSON *o, const char *key, const char *where, af_tensor_spec *t,
                         bool with_layout) {
    const cJSON *to = af_jr_get(o, key);
    memset(t, 0, sizeof *t);
    if (!to) return;
    if (!cJSON_IsObject(to)) {
        af_jr_fail(jr, AF_ERR_FORMAT, key, "expected an object");
        return;
    }
    jr->where = where;
    if (with_layout)
        t->layout = (af_layout)af_jr_enum(jr, to, "layout", af_layout_names, AF_LAYOUT_COUNT, AF_LAYOUT_BHSD);
    t->perm = (uint8_t)af_jr_u32(jr, to, "perm", 0, 0, 255);
    t->pad = (uint8_t)af_jr_u32(jr, to, "pad", 0, 0, AF_MAX_PAD);
    t->bcast = (af_bcast)af_jr_enum(jr, to, "broadcast", af_bcast_names, AF_BCAST_COUNT, AF_BCAST_NONE);
    t->dist = (af_dist)af_jr_enum(jr, to, "dist", af_dist_names, AF_DIST_COUNT, AF_DIST_NORMAL);
    t->mag_q4 = af_jr_mag(jr, to);
    t->special = (af_special)af_jr_enum(jr, to, "special", af_special_names, AF_SPECIAL_COUNT, AF_SPECIAL_NONE);
    t->seed = af_jr_u32(jr, to, "seed", 0, 0, UINT32_MAX);
    jr->where = "";
}

/* "backward": {"grads": [names], "do": {tensor spec without layout}}; absent or null:
 * forward-only. The layout of dO is the output's (af_out_layout of Q's). */
static void af_jr_backward(af_jr *jr, const cJSON *o, af_case *c) {
    const cJSON *bo = af_jr_get(o, "backward");
    if (!bo) return;
    if (!cJSON_IsObject(bo)) {
        af_jr_fail(jr, AF_ERR_FORMAT, "backward", "expected an object or null");
        return;
    }
    jr->where = "backward";
    const cJSON *gl = af_jr_get(bo, "grads");
    if (!gl || !cJSON_IsArray(gl)) {
        af_jr_fail(jr, AF_ERR_FORMAT, "grads", "expected an array of dq, dk, dv, dmask");
        return;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, gl) {
        int g = -1;
        for (int k = 0; k < AF_GRAD_COUNT && cJSON_IsString(it); k++)
            if (strcmp(it->valuestring, af_grad_names[k]) == 0) g = k;
        if (g < 0) {
            af_jr_fail(jr, AF_ERR_INVALID, "grads", "names must be among dq, dk, dv, dmask");
            return;
        }
        c->bwd.grads |= (uint8_t)(1u << g);
    }
    if (!c->bwd.grads) af_jr_fail(jr, AF_ERR_INVALID, "grads", "name at least one gradient (or leave backward out)");
    jr->where = "";
    af_jr_tensor(jr, bo, "do", "backward.do", &c->bwd.dout, false);
    c->bwd.dout.layout = af_out_layout(c->t[AF_Q].layout);
}

af_status af_case_from_cjson(af_case *c, const void *json, af_error *err) {
    const cJSON *o = json;
    af_jr jr = {err, AF_OK, ""};
    AF_RETURN_ERROR_IF(!cJSON_IsObject(o), err, AF_ERR_FORMAT, "the case must be a JSON object");
    af_case_default(c);
    c->batch = af_jr_u32(&jr, o, "batch", 1, 1, AF_MAX_BATCH);
    c->q_heads = af_jr_u32(&jr, o, "q_heads", 1, 1, AF_MAX_Q_HEADS);
    c->kv_heads = af_jr_u32(&jr, o, "kv_heads", c->q_heads, 1, AF_MAX_KV_HEADS);
    c->q_len = af_jr_u32(&jr, o, "q_len", 1, 1, AF_MAX_SEQ);
    c->kv_len = af_jr_u32(&jr, o, "kv_len", c->q_len, 1, AF_MAX_SEQ);
    c->head_dim = af_jr_u32(&jr, o, "head_dim", 1, 1, AF_MAX_HEAD_DIM);
    c->v_head_dim = af_jr_u32(&jr, o, "v_head_dim", c->head_dim, 1, AF_MAX_HEAD_DIM);
    c->dtype = (af_dtype)af_jr_enum(&jr, o, "dtype", af_dtype_names, AF_CASE_DTYPE_COUNT, AF_F32);
    c->allow_tf32 = af_jr_bool(&jr, o, "allow_tf32", false);
    const cJSON *scale = af_jr_get(o, "scale");
    if (scale) {
        c->scale_set = true;
        c->scale = af_jr_num(&jr, o, "scale", 0.0, -AF_MAX_SCALE, AF_MAX_SCALE);
    }
    c->placement = (af_placement)af_jr_enum(&jr, o, "scale_placement", af_placement_names, AF_PLACE_COUNT,
                                            AF_PLACE_SCORES);
    c->softcap = af_jr_num(&jr, o, "softcap", 0.0, 0.0, AF_MAX_SOFTCAP);
    c->causal = af_jr_bool(&jr, o, "causal", false);
    c->diag = (af_diag)af_jr_enum(&jr, o, "diagonal", af_diag_names, AF_DIAG_COUNT, AF_DIAG_TOP_LEFT);
    c->diag_offset = (int32_t)af_jr_num(&jr, o, "diagonal_offset", 0, -AF_MAX_SEQ, AF_MAX_SEQ);
    const cJSON *kp = af_jr_get(o, "key_padding");
    if (kp) {
        if (!cJSON_IsArray(kp) || (uint32_t)cJSON_GetArraySize(kp) != c->batch) {
            af_jr_fail(&jr, AF_ERR_INVALID, "key_padding", "expected an array of one length per batch row");
        } else {
            c->key_padding = true;
            uint32_t b = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, kp) {
                if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > c->kv_len ||
                    it->valuedouble != floor(it->valuedouble)) {
                    af_jr_fail(&jr, AF_ERR_INVALID, "key_padding", "lengths must be integers in 0..kv_len");
                    break;
                }
                c->kv_valid[b++] = (uint32_t)it->valuedouble;
            }
        }
    }
    const cJSON *win = af_jr_get(o, "window");
    if (win) {
        if (!cJSON_IsArray(win) || cJSON_GetArraySize(win) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(win, 0)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(win, 1))) {
            af_jr_fail(&jr, AF_ERR_FORMAT, "window", "expected [left, right] (-1 = unbounded)");
        } else {
            double l = cJSON_GetArrayItem(win, 0)->valuedouble, r = cJSON_GetArrayItem(win, 1)->valuedouble;
            if (!(l >= -1 && l <= AF_MAX_SEQ && r >= -1 && r <= AF_MAX_SEQ))
                af_jr_fail(&jr, AF_ERR_INVALID, "window", "bounds must be -1 or 0..65536");
            c->window_left = (int32_t)l;
            c->window_right = (int32_t)r;
        }
    }
    af_jr_mask(&jr, o, "additive_mask", &c->amask, true);
    af_jr_mask(&jr, o, "bool_mask", &c->bmask, false);
    c->dropout_p = af_jr_num(&jr, o, "dropout_p", 0.0, 0.0, 1.0);
    c->dropout_seed = af_jr_u64(&jr, o, "dropout_seed");
    for (int t = 0; t < AF_QKV_COUNT; t++) af_jr_tensor(&jr, o, af_tensor_names[t], af_tensor_names[t], &c->t[t], true);
    af_jr_backward(&jr, o, c);
    if (jr.st != AF_OK) return jr.st;
    AF_TRY(af_serving_read_json(c, o, err));
    AF_TRY(af_fp8_read_json(c, o, err));
    /* Fields a writer may leave out: packed K/V follow Q. */
    if (af_case_is_packed(c)) {
        for (int t = AF_K; t <= AF_V; t++) {
            if (!af_jr_get(o, af_tensor_names[t])) {
                c->t[t] = c->t[AF_Q];
                c->t[t].seed = c->t[AF_Q].seed + (uint32_t)t;
            }
        }
    }
    return af_case_validate(c, SIZE_MAX, err);
}

af_status af_case_from_json(af_case *c, const char *text, af_error *err) {
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(text, &end, 0);
    if (!o) {
        /* the parse position, not cJSON's global error pointer */
        unsigned line = 1;
        for (const char *p = text; end && p < end && *p; p++) line += *p == '\n';
        return af_error_set(err, AF_ERR_FORMAT, "malformed JSON at line %u near \"%.24s\"", line,
                            end ? end : "");
    }
    af_status st = af_case_from_cjson(c, o, err);
    cJSON_Delete(o);
    return st;
}
