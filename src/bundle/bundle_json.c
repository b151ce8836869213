/* bundle_json.c - case.json (schema: docs/case-json.md): the text a bundle's spec writes,
 * and parsing that text back into a bundle.
 *
 * Parsing accepts case.json from other tools: only "case" is required, every other field
 * is optional. A field that is present must have its documented type: a wrong type means
 * the file is not what we think it is, which is AF_ERR_FORMAT naming case.json and the
 * field. Numbers are written so that they read back as the same double (json_exact.h). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "attnfuzz/mem.h"
#include "bundle_internal.h"
#include "json_exact.h"

/* --- writing ------------------------------------------------------------------------------ */

/* JSON building: cJSON reports allocation failure by returning NULL; note it once. */
typedef struct af_bj {
    bool ok;
} af_bj;

static void af_bj_item(af_bj *w, cJSON *o, const char *key, cJSON *item) {
    if (!item || !o || !cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        w->ok = false;
    }
}

static void af_bj_push(af_bj *w, cJSON *arr, cJSON *item) {
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        w->ok = false;
    }
}

/* A count: exact as an integer (cJSON would print counts above 2^31 as doubles). */
static cJSON *af_bj_count(size_t n) {
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", n);
    return cJSON_CreateRaw(buf);
}

static cJSON *af_bj_string(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

static cJSON *af_bj_metrics(af_bj *w, const af_metrics *m) {
    cJSON *o = cJSON_CreateObject();
    af_bj_item(w, o, "max_abs", af_json_double(m->max_abs));
    af_bj_item(w, o, "max_rel", af_json_double(m->max_rel));
    af_bj_item(w, o, "rel_fro", af_json_double(m->rel_fro));
    af_bj_item(w, o, "worst_ratio", af_json_double(m->worst_ratio));
    cJSON *idx = cJSON_CreateArray();
    for (int d = 0; d < 4; d++) af_bj_push(w, idx, af_bj_count(m->worst[d]));
    af_bj_item(w, o, "worst_index", idx);
    af_bj_item(w, o, "worst_out", af_json_double(m->worst_out));
    af_bj_item(w, o, "worst_ref", af_json_double(m->worst_ref));
    af_bj_item(w, o, "n_nan", af_bj_count(m->n_nan));
    af_bj_item(w, o, "n_inf", af_bj_count(m->n_inf));
    af_bj_item(w, o, "n_masked_row_nan", af_bj_count(m->n_masked_row_nan));
    af_bj_item(w, o, "n_masked_value_leak", af_bj_count(m->n_masked_value_leak));
    af_bj_item(w, o, "n_diverge", af_bj_count(m->n_diverge));
    af_bj_item(w, o, "n_unstable", af_bj_count(m->n_unstable));
    af_bj_item(w, o, "n_nan_ref", af_bj_count(m->n_nan_ref));
    af_bj_item(w, o, "n_fail_masked", af_bj_count(m->n_fail_masked));
    af_bj_item(w, o, "fail_score_max", af_json_double(m->fail_score_max));
    af_bj_item(w, o, "fail_product_max", af_json_double(m->fail_product_max));
    af_bj_item(w, o, "n_masked_key_nan", af_bj_count(m->n_masked_key_nan));
    af_bj_item(w, o, "n_waived", af_bj_count(m->n_waived));
    return o;
}

/* {"atol", "rtol", "fudge", "honest"}: the output's tolerance, or a gradient's */
static cJSON *af_bj_tolerance(af_bj *w, const af_tolerance *t) {
    cJSON *o = cJSON_CreateObject();
    af_bj_item(w, o, "atol", af_json_double(t->atol));
    af_bj_item(w, o, "rtol", af_json_double(t->rtol));
    af_bj_item(w, o, "fudge", af_json_double(t->fudge));
    af_bj_item(w, o, "honest", cJSON_CreateBool(t->honest));
    return o;
}

char *af_bundle_json_print(const af_bundle_spec *s, char *const *files, size_t n_files, char *const *out_files,
                           char *const *err_files, char *const *grad_files, char *const *lse_files,
                           const char *bundle_path, cJSON *extra, size_t *len) {
    af_bj w = {true};
    cJSON *root = cJSON_CreateObject();
    char buf[512];
    af_bj_item(&w, root, "format", cJSON_CreateString(AF_BUNDLE_FORMAT));
    af_bj_item(&w, root, "version", cJSON_CreateNumber(AF_BUNDLE_VERSION));
    af_bj_item(&w, root, "tool", cJSON_CreateString("attnfuzz"));
    af_bj_item(&w, root, "kind",
               cJSON_CreateString((unsigned)s->kind < AF_KIND_COUNT ? af_kind_names[s->kind] : "unknown"));
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)s->signature);
    af_bj_item(&w, root, "signature", cJSON_CreateString(buf));
    af_bj_item(&w, root, "who", cJSON_CreateString(s->who ? s->who : ""));
    af_bj_item(&w, root, "relation", af_bj_string(s->relation));
    af_bj_item(&w, root, "tensor", cJSON_CreateString(s->tensor ? s->tensor : "out"));
    if (s->minimized) af_bj_item(&w, root, "minimized", cJSON_CreateBool(s->minimized > 0));
    if (s->guard && s->guard->n) {
        cJSON *gws = cJSON_CreateArray();
        for (size_t i = 0; i < s->guard->n; i++) {
            const af_guard_write *gw = &s->guard->w[i];
            cJSON *o = cJSON_CreateObject();
            af_bj_item(&w, o, "buffer", cJSON_CreateString(gw->buffer));
            af_bj_item(&w, o, "margin", cJSON_CreateString(af_margin_names[gw->margin]));
            af_bj_item(&w, o, "offset", af_bj_count((size_t)gw->offset));
            af_bj_item(&w, o, "count", af_bj_count((size_t)gw->count));
            af_bj_push(&w, gws, o);
        }
        af_bj_item(&w, root, "guard_writes", gws);
    }
    cJSON *case_obj = af_case_to_cjson(s->c); /* numbers already exact */
    af_bj_item(&w, root, "case", case_obj);
    af_case_features_str(s->c, buf, sizeof buf);
    af_bj_item(&w, root, "features", cJSON_CreateString(buf));
    af_bj_item(&w, root, "tolerance", af_bj_tolerance(&w, &s->tol));
    cJSON *bes = cJSON_CreateArray();
    for (size_t i = 0; i < s->n_outputs; i++) {
        const af_bundle_output *o = &s->outputs[i];
        cJSON *be = cJSON_CreateObject();
        af_bj_item(&w, be, "name", cJSON_CreateString(o->backend ? o->backend : ""));
        af_bj_item(&w, be, "version", af_bj_string(o->version));
        af_kind k = o->result.kind;
        af_bj_item(&w, be, "verdict", cJSON_CreateString((unsigned)k < AF_KIND_COUNT ? af_kind_names[k] : "unknown"));
        af_bj_item(&w, be, "error", af_bj_string(o->error));
        af_bj_item(&w, be, "metrics", af_bj_metrics(&w, &o->result.m));
        af_bj_item(&w, be, "output", af_bj_string(out_files[i]));
        if (o->describe) af_bj_item(&w, be, "worker", cJSON_CreateString(o->describe));
        if (o->conventions) {
            cJSON *conv = cJSON_Parse(o->conventions);
            af_bj_item(&w, be, "conventions", conv ? conv : cJSON_CreateString(o->conventions));
        }
        if (err_files[i]) af_bj_item(&w, be, "stderr", cJSON_CreateString(err_files[i]));
        if (o->grads && s->c->bwd.grads) { /* a backward run: each gradient asked for */
            cJSON *gs = cJSON_CreateObject();
            for (int g = 0; g < AF_GRAD_COUNT; g++) {
                if (!(s->c->bwd.grads & (1u << g))) continue;
                const af_result *gr = &o->grad_results[g];
                cJSON *go = cJSON_CreateObject();
                af_bj_item(&w, go, "output", af_bj_string(grad_files[i * AF_GRAD_COUNT + (size_t)g]));
                af_bj_item(&w, go, "verdict",
                           cJSON_CreateString((unsigned)gr->kind < AF_KIND_COUNT ? af_kind_names[gr->kind] : "unknown"));
                af_bj_item(&w, go, "metrics", af_bj_metrics(&w, &gr->m));
                af_bj_item(&w, go, "tolerance", af_bj_tolerance(&w, &gr->tol)); /* its worst element's row's */
                af_bj_item(&w, gs, af_grad_names[g], go);
            }
            af_bj_item(&w, be, "grads", gs);
        }
        if (o->lse) { /* the softmax statistics it returned */
            cJSON *lo = cJSON_CreateObject();
            const af_result *lr = &o->lse_result;
            af_bj_item(&w, lo, "output", af_bj_string(lse_files[i]));
            af_bj_item(&w, lo, "verdict",
                       cJSON_CreateString((unsigned)lr->kind < AF_KIND_COUNT ? af_kind_names[lr->kind] : "unknown"));
            af_bj_item(&w, lo, "metrics", af_bj_metrics(&w, &lr->m));
            af_bj_item(&w, be, "lse", lo);
        }
        af_bj_push(&w, bes, be);
    }
    af_bj_item(&w, root, "backends", bes);
    if (s->replay_cmd) {
        af_bj_item(&w, root, "replay", cJSON_CreateString(s->replay_cmd));
    } else {
        char replay[PATH_MAX + 32];
        snprintf(replay, sizeof replay, "attnfuzz replay %s", bundle_path);
        af_bj_item(&w, root, "replay", cJSON_CreateString(replay));
    }
    cJSON *list = cJSON_CreateArray();
    af_bj_push(&w, list, cJSON_CreateString("case.json"));
    for (size_t i = 0; i < n_files; i++) af_bj_push(&w, list, cJSON_CreateString(files[i]));
    af_bj_item(&w, root, "files", list);
    if (extra) af_bj_item(&w, root, "extra", extra);
    char *text = w.ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return NULL;
    size_t n = strlen(text);
    text[n] = '\n'; /* replaces the NUL: the file ends in a newline */
    *len = n + 1;
    return text;
}

/* --- reading ------------------------------------------------------------------------------ */

typedef struct af_br {
    const char *file; /* "<dir>/case.json", for messages */
    af_error *err;
    af_status st;
} af_br;

static void af_br_fail(af_br *r, const char *field, const char *what) {
    if (r->st == AF_OK) r->st = af_error_set(r->err, AF_ERR_FORMAT, "%s: field %s: %s", r->file, field, what);
}

/* An item that is present and not null. */
static const cJSON *af_br_get(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static bool af_br_nonfinite(const char *s, double *x) {
    double sign = 1.0;
    if (*s == '-' || *s == '+') sign = *s++ == '-' ? -1.0 : 1.0;
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0) {
        *x = sign * HUGE_VAL;
        return true;
    }
    if (strcasecmp(s, "nan") == 0) {
        *x = (double)NAN;
        return true;
    }
    return false;
}

/* A double: a number, or one of the strings "inf", "-inf", "nan". */
static double af_br_double(af_br *r, const cJSON *o, const char *key, const char *field, double dflt) {
    const cJSON *it = af_br_get(o, key);
    double x = dflt;
    if (!it) return dflt;
    if (cJSON_IsNumber(it)) return it->valuedouble;
    if (cJSON_IsString(it) && af_br_nonfinite(it->valuestring, &x)) return x;
    af_br_fail(r, field, "expected a number or \"inf\", \"-inf\", \"nan\"");
    return dflt;
}

/* A count or index: an integer in 0..2^53. */
static size_t af_br_count(af_br *r, const cJSON *it, const char *field) {
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0.0 && it->valuedouble <= 0x1p53) ||
        it->valuedouble != floor(it->valuedouble)) {
        af_br_fail(r, field, "expected a non-negative integer");
        return 0;
    }
    return (size_t)it->valuedouble;
}

static const char *af_br_string(af_br *r, const cJSON *o, const char *key, const char *field) {
    const cJSON *it = af_br_get(o, key);
    if (!it) return NULL;
    if (!cJSON_IsString(it)) {
        af_br_fail(r, field, "expected a string");
        return NULL;
    }
    return it->valuestring;
}

static af_kind af_br_kind(af_br *r, const cJSON *o, const char *key, const char *field) {
    const char *s = af_br_string(r, o, key, field);
    if (!s) return AF_KIND_OK;
    int k = af_kind_from_name(s);
    if (k < 0) {
        af_br_fail(r, field, "unknown kind (ok, nan_mismatch, inf_mismatch, masked_row_nan, masked_value_leak, "
                             "diverge, error, crash, timeout)");
        return AF_KIND_OK;
    }
    return (af_kind)k;
}

static uint64_t af_br_signature(af_br *r, const cJSON *o) {
    const cJSON *it = af_br_get(o, "signature");
    if (!it) return 0;
    if (cJSON_IsNumber(it)) return (uint64_t)af_br_count(r, it, "signature");
    const char *s = cJSON_IsString(it) ? it->valuestring : NULL;
    if (s && (strncmp(s, "0x", 2) == 0 || strncmp(s, "0X", 2) == 0)) s += 2;
    size_t n = s ? strlen(s) : 0;
    bool ok = n >= 1 && n <= 16;
    for (size_t i = 0; ok && i < n; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F');
    if (!ok) {
        af_br_fail(r, "signature", "expected up to 16 hex digits");
        return 0;
    }
    return (uint64_t)strtoull(s, NULL, 16);
}

static void af_br_metrics(af_br *r, const cJSON *mo, const char *where, af_metrics *m) {
    char f[128]; /* where is shorter than 96 */
#define AF_BR_D(key)                                                                                   \
    do {                                                                                               \
        snprintf(f, sizeof f, "%s.%s", where, #key);                                                   \
        m->key = af_br_double(r, mo, #key, f, 0.0);                                                    \
    } while (0)
#define AF_BR_N(key)                                                                                   \
    do {                                                                                               \
        const cJSON *it_ = af_br_get(mo, #key);                                                        \
        snprintf(f, sizeof f, "%s.%s", where, #key);                                                   \
        if (it_) m->key = af_br_count(r, it_, f);                                                      \
    } while (0)
    AF_BR_D(max_abs);
    AF_BR_D(max_rel);
    AF_BR_D(rel_fro);
    AF_BR_D(worst_ratio);
    AF_BR_D(worst_out);
    AF_BR_D(worst_ref);
    AF_BR_N(n_nan);
    AF_BR_N(n_inf);
    AF_BR_N(n_masked_row_nan);
    AF_BR_N(n_masked_value_leak);
    AF_BR_N(n_diverge);
    AF_BR_N(n_unstable);
    AF_BR_N(n_nan_ref);
    AF_BR_N(n_fail_masked);
    AF_BR_N(n_masked_key_nan);
    AF_BR_N(n_waived);
    snprintf(f, sizeof f, "%s.fail_score_max", where);
    m->fail_score_max = af_br_double(r, mo, "fail_score_max", f, (double)NAN); /* older bundles: unknown */
    snprintf(f, sizeof f, "%s.fail_product_max", where);
    m->fail_product_max = af_br_double(r, mo, "fail_product_max", f, (double)NAN);
#undef AF_BR_D
#undef AF_BR_N
    const cJSON *wi = af_br_get(mo, "worst_index");
    snprintf(f, sizeof f, "%s.worst_index", where);
    if (wi && (!cJSON_IsArray(wi) || cJSON_GetArraySize(wi) != 4)) {
        af_br_fail(r, f, "expected [b, h, i, d]");
    } else if (wi) {
        for (int d = 0; d < 4; d++) m->worst[d] = af_br_count(r, cJSON_GetArrayItem(wi, d), f);
    }
}

/* One recorded tensor of a backend (a gradient, its statistics) at go, named fn in
 * messages: its verdict and metrics, and its file (as recorded, or <prefix>.<name>.npy.zst
 * by the naming rule) into *file when the bundle holds it. */
static void af_br_entry(af_br *r, const cJSON *go, const char *fn, const char *prefix, const char *name,
                        const af_bundle *b, af_kind *kind, af_metrics *m, bool *has_output, char **file_out) {
    char fk[160];
    snprintf(fk, sizeof fk, "%s.verdict", fn);
    *kind = af_br_kind(r, go, "verdict", fk);
    const cJSON *mo = af_br_get(go, "metrics");
    snprintf(fk, sizeof fk, "%s.metrics", fn);
    if (mo && !cJSON_IsObject(mo)) {
        af_br_fail(r, fk, "expected an object");
    } else if (mo) {
        af_br_metrics(r, mo, fk, m);
    }
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(go, "output");
    char dflt[160];
    const char *file = NULL;
    snprintf(fk, sizeof fk, "%s.output", fn);
    if (!out) {
        af_bundle_array_name(prefix, name, dflt, sizeof dflt);
        file = dflt;
    } else if (cJSON_IsString(out)) {
        file = out->valuestring;
        if (!af_bundle_plain_name(file)) af_br_fail(r, fk, "expected a file name inside the bundle");
    } else if (!cJSON_IsNull(out)) {
        af_br_fail(r, fk, "expected a file name or null");
    }
    if (r->st != AF_OK || !file || !af_bundle_is_file(b->files, file)) return;
    *has_output = true;
    if (!(*file_out = af_strdup(file))) r->st = af_error_set(r->err, AF_ERR_NOMEM, "%s: out of memory", r->file);
}

/* backends[i].lse: the statistics' verdict, metrics and file. */
static void af_br_lse(af_br *r, const cJSON *be, const char *f, const char *name, af_bundle *b, size_t i) {
    const cJSON *lo = af_br_get(be, "lse");
    if (!lo) return;
    char fn[128];
    snprintf(fn, sizeof fn, "%s.lse", f);
    if (!cJSON_IsObject(lo)) {
        af_br_fail(r, fn, "expected an object");
        return;
    }
    af_bundle_record *rec = &b->recs[i];
    rec->has_lse = true;
    af_br_entry(r, lo, fn, "lse", name, b, &rec->lse_kind, &rec->lse_m, &rec->has_lse_output, &b->rec_lse_files[i]);
}

/* A tolerance object at to ({"atol", "rtol", "fudge", "honest"}; missing fields 0, fudge 4,
 * honest false), named where in messages: true when it is an object. */
static bool af_br_tol_obj(af_br *r, const cJSON *to, const char *where, af_tolerance *t) {
    char f[200];
    if (!cJSON_IsObject(to)) {
        af_br_fail(r, where, "expected an object");
        return false;
    }
    snprintf(f, sizeof f, "%s.atol", where);
    t->atol = af_br_double(r, to, "atol", f, 0.0);
    snprintf(f, sizeof f, "%s.rtol", where);
    t->rtol = af_br_double(r, to, "rtol", f, 0.0);
    snprintf(f, sizeof f, "%s.fudge", where);
    t->fudge = af_br_double(r, to, "fudge", f, 4.0); /* af_oracle_opts_default's */
    const cJSON *h = af_br_get(to, "honest");
    snprintf(f, sizeof f, "%s.honest", where);
    if (h && !cJSON_IsBool(h)) af_br_fail(r, f, "expected true or false");
    t->honest = h && cJSON_IsTrue(h);
    return true;
}

/* backends[i].grads: per gradient its file (as recorded, or by the naming rule), verdict
 * and metrics. */
static void af_br_grads(af_br *r, const cJSON *be, const char *f, const char *name, af_bundle *b, size_t i) {
    const cJSON *gs = af_br_get(be, "grads");
    if (!gs) return;
    char fn[128];
    snprintf(fn, sizeof fn, "%s.grads", f);
    if (!cJSON_IsObject(gs)) {
        af_br_fail(r, fn, "expected an object");
        return;
    }
    af_bundle_record *rec = &b->recs[i];
    for (int g = 0; g < AF_GRAD_COUNT && r->st == AF_OK; g++) {
        const cJSON *go = af_br_get(gs, af_grad_names[g]);
        if (!go) continue;
        snprintf(fn, sizeof fn, "%s.grads.%s", f, af_grad_names[g]);
        if (!cJSON_IsObject(go)) {
            af_br_fail(r, fn, "expected an object");
            return;
        }
        rec->has_grad[g] = true;
        af_br_entry(r, go, fn, af_grad_names[g], name, b, &rec->grad_kind[g], &rec->grad_m[g],
                    &rec->has_grad_output[g], &b->rec_grad_files[i * AF_GRAD_COUNT + (size_t)g]);
        const cJSON *to = af_br_get(go, "tolerance");
        if (to) {
            snprintf(fn, sizeof fn, "%s.grads.%s.tolerance", f, af_grad_names[g]);
            rec->has_grad_tol[g] = af_br_tol_obj(r, to, fn, &rec->grad_tol[g]);
        }
    }
}

/* "guard_writes": at most AF_GUARD_MAX {buffer, margin, offset, count}. */
static void af_br_guard_writes(af_br *r, const cJSON *root, af_bundle *b) {
    const cJSON *gws = af_br_get(root, "guard_writes");
    if (!gws) return;
    if (!cJSON_IsArray(gws) || cJSON_GetArraySize(gws) > AF_GUARD_MAX) {
        af_br_fail(r, "guard_writes", "expected an array of at most 8 guard writes");
        return;
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, gws) {
        af_guard_write *gw = &b->guard.w[b->guard.n];
        const cJSON *buf = af_br_get(o, "buffer"), *mg = af_br_get(o, "margin");
        int m = cJSON_IsString(mg) ? af_margin_from_name(mg->valuestring) : -1;
        if (!cJSON_IsString(buf) || m < 0) {
            af_br_fail(r, "guard_writes", "expected {buffer, margin (before, after, null_page, page_tail), offset, count}");
            return;
        }
        snprintf(gw->buffer, sizeof gw->buffer, "%s", buf->valuestring);
        gw->margin = (af_margin)m;
        gw->offset = af_br_count(r, af_br_get(o, "offset"), "guard_writes.offset");
        gw->count = af_br_count(r, af_br_get(o, "count"), "guard_writes.count");
        b->guard.n++;
    }
}

static void af_br_backends(af_br *r, const cJSON *root, af_bundle *b) {
    const cJSON *bes = af_br_get(root, "backends");
    if (!bes) return;
    if (!cJSON_IsArray(bes)) {
        af_br_fail(r, "backends", "expected an array");
        return;
    }
    int n = cJSON_GetArraySize(bes);
    if (n <= 0) return;
    b->recs = af_calloc((size_t)n, sizeof *b->recs);
    b->rec_names = af_calloc((size_t)n, sizeof *b->rec_names);
    b->rec_files = af_calloc((size_t)n, sizeof *b->rec_files);
    b->rec_grad_files = af_calloc((size_t)n * AF_GRAD_COUNT, sizeof *b->rec_grad_files);
    b->rec_lse_files = af_calloc((size_t)n, sizeof *b->rec_lse_files);
    if (!b->recs || !b->rec_names || !b->rec_files || !b->rec_grad_files || !b->rec_lse_files) {
        if (r->st == AF_OK) r->st = af_error_set(r->err, AF_ERR_NOMEM, "%s: out of memory", r->file);
        return;
    }
    const cJSON *be;
    size_t i = 0;
    cJSON_ArrayForEach(be, bes) {
        char f[64];
        snprintf(f, sizeof f, "backends[%zu]", i);
        if (!cJSON_IsObject(be)) {
            af_br_fail(r, f, "expected an object");
            return;
        }
        af_bundle_record *rec = &b->recs[i];
        b->n_recs = ++i; /* counted before filling: af_bundle_free frees what is there */
        char fn[96];
        snprintf(fn, sizeof fn, "%s.name", f);
        const char *name = af_br_string(r, be, "name", fn);
        if (!name) {
            af_br_fail(r, fn, "each backend needs a name");
            return;
        }
        snprintf(rec->backend, sizeof rec->backend, "%s", name);
        snprintf(fn, sizeof fn, "%s.version", f);
        const char *version = af_br_string(r, be, "version", fn);
        snprintf(rec->version, sizeof rec->version, "%s", version ? version : "");
        snprintf(fn, sizeof fn, "%s.verdict", f);
        rec->kind = af_br_kind(r, be, "verdict", fn);
        snprintf(fn, sizeof fn, "%s.error", f);
        const char *error = af_br_string(r, be, "error", fn);
        snprintf(rec->error, sizeof rec->error, "%s", error ? error : "");
        const cJSON *conv = af_br_get(be, "conventions");
        if (cJSON_IsObject(conv)) {
            char *text = cJSON_PrintUnformatted(conv);
            if (text && strlen(text) < sizeof rec->conventions) memcpy(rec->conventions, text, strlen(text) + 1);
            cJSON_free(text);
        }
        const cJSON *mo = af_br_get(be, "metrics");
        snprintf(fn, sizeof fn, "%s.metrics", f);
        if (mo && !cJSON_IsObject(mo)) {
            af_br_fail(r, fn, "expected an object");
        } else if (mo) {
            af_br_metrics(r, mo, fn, &rec->m);
        }
        /* the output file: as recorded, or by the naming rule when not recorded */
        snprintf(fn, sizeof fn, "%s.output", f);
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(be, "output");
        char dflt[160];
        const char *file = NULL;
        if (!out) {
            af_bundle_out_name(name, dflt, sizeof dflt);
            file = dflt;
        } else if (cJSON_IsString(out)) {
            file = out->valuestring;
            if (!af_bundle_plain_name(file)) af_br_fail(r, fn, "expected a file name inside the bundle");
        } else if (!cJSON_IsNull(out)) {
            af_br_fail(r, fn, "expected a file name or null");
        }
        af_br_grads(r, be, f, name, b, i - 1);
        af_br_lse(r, be, f, name, b, i - 1);
        if (r->st != AF_OK) return;
        bool nomem = !(b->rec_names[i - 1] = af_strdup(name));
        if (file && af_bundle_is_file(b->files, file)) {
            rec->has_output = true;
            nomem |= !(b->rec_files[i - 1] = af_strdup(file));
        }
        if (nomem) {
            r->st = af_error_set(r->err, AF_ERR_NOMEM, "%s: out of memory", r->file);
            return;
        }
    }
}

static void af_br_tolerance(af_br *r, const cJSON *root, af_bundle *b) {
    const cJSON *to = af_br_get(root, "tolerance");
    if (to) b->has_tol = af_br_tol_obj(r, to, "tolerance", &b->tol);
}

/* Every file that case.json lists must be there: a bundle copied in part is corrupt. */
static void af_br_files(af_br *r, const cJSON *root, const af_bundle *b) {
    const cJSON *files = af_br_get(root, "files");
    if (!files) return;
    if (!cJSON_IsArray(files)) {
        af_br_fail(r, "files", "expected an array of file names");
        return;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, files) {
        if (!cJSON_IsString(it) || !af_bundle_plain_name(it->valuestring)) {
            af_br_fail(r, "files", "expected an array of file names inside the bundle");
            return;
        }
        if (!af_bundle_is_file(b->files, it->valuestring) && r->st == AF_OK)
            r->st = af_error_set(r->err, AF_ERR_FORMAT, "%s: lists %s, but %s/%s is missing", r->file,
                                 it->valuestring, b->dir, it->valuestring);
    }
}

static af_status af_br_root(af_br *r, const cJSON *root, af_bundle *b) {
    if (!cJSON_IsObject(root)) return af_error_set(r->err, AF_ERR_FORMAT, "%s: expected a JSON object", r->file);
    const char *format = af_br_string(r, root, "format", "format");
    if (format && strcmp(format, AF_BUNDLE_FORMAT) != 0) af_br_fail(r, "format", "expected \"" AF_BUNDLE_FORMAT "\"");
    const cJSON *version = af_br_get(root, "version");
    if (version) {
        size_t v = af_br_count(r, version, "version");
        if (r->st == AF_OK && (v < 1 || v > AF_BUNDLE_VERSION)) {
            char what[96];
            snprintf(what, sizeof what, "version %zu is not one this reader knows (1..%d)", v, AF_BUNDLE_VERSION);
            af_br_fail(r, "version", what);
        }
    }
    if (r->st != AF_OK) return r->st;
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(root, "case");
    if (!co) return af_error_set(r->err, AF_ERR_FORMAT, "%s: no \"case\" object", r->file);
    af_error cerr = {AF_OK, ""};
    af_status cst = af_case_from_cjson(&b->c, co, &cerr);
    if (cst != AF_OK)
        return af_error_set(r->err, cst == AF_ERR_NOMEM ? AF_ERR_NOMEM : AF_ERR_FORMAT, "%s: case: %s", r->file,
                            cerr.msg);
    b->kind = af_br_kind(r, root, "kind", "kind");
    b->signature = af_br_signature(r, root);
    const char *who = af_br_string(r, root, "who", "who");
    const char *rel = af_br_string(r, root, "relation", "relation");
    const char *tensor = af_br_string(r, root, "tensor", "tensor");
    bool tensor_ok = !tensor || strcmp(tensor, "out") == 0 || strcmp(tensor, "lse") == 0;
    for (int g = 0; g < AF_GRAD_COUNT && tensor; g++) tensor_ok |= strcmp(tensor, af_grad_names[g]) == 0;
    if (!tensor_ok) af_br_fail(r, "tensor", "expected out, dq, dk, dv, dmask or lse");
    if (r->st != AF_OK) return r->st;
    b->who = af_strdup(who ? who : "");
    if (rel) b->relation = af_strdup(rel);
    b->tensor = af_strdup(tensor ? tensor : "out");
    if (!b->who || (rel && !b->relation) || !b->tensor)
        return af_error_set(r->err, AF_ERR_NOMEM, "%s: out of memory", r->file);
    const cJSON *minimized = af_br_get(root, "minimized");
    if (minimized && !cJSON_IsBool(minimized)) af_br_fail(r, "minimized", "expected true or false");
    if (minimized) b->minimized = cJSON_IsTrue(minimized) ? 1 : -1;
    af_br_guard_writes(r, root, b);
    af_br_backends(r, root, b);
    af_br_tolerance(r, root, b);
    af_br_files(r, root, b);
    return r->st;
}


af_status af_bundle_json_parse(const char *path, const char *text, size_t len, af_bundle *b, af_error *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        unsigned line = 1;
        for (const char *p = text; end && p < end && p < text + len; p++) line += *p == '\n';
        return af_error_set(err, AF_ERR_FORMAT, "%s: malformed JSON at line %u", path, line);
    }
    /* cJSON stops after the first value; anything but white space after it is damage */
    while (end && end < text + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
    if (end && end < text + len) {
        cJSON_Delete(root);
        return af_error_set(err, AF_ERR_FORMAT, "%s: text after the JSON object", path);
    }
    af_br r = {path, err, AF_OK};
    af_status st = af_br_root(&r, root, b);
    cJSON_Delete(root);
    return st;
}

