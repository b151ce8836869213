/* bundle_read.c - reading a bundle: its case.json (parsed in bundle_json.c), the
 * accessors, and the recorded outputs as float64.
 *
 * Everything read comes from outside and is bounded before it is allocated: case.json
 * by AF_BUNDLE_MAX_JSON, the case by the caller's budget (af_bundle_check_budget), each
 * array by what the case can give it (af_npy_read_bounded), text files by
 * AF_BUNDLE_MAX_TEXT. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/mem.h"
#include "bundle_internal.h"
#include "fileio.h"

af_status af_bundle_read(const char *dir, af_bundle **out, af_error *err) {
    *out = NULL;
    /* a merged bundle is a symbolic link that attnfuzz merge may point at a smaller
     * version at any moment (merge.h): resolved once, here, every later read of this
     * bundle sees the version case.json came from (a replaced version stays on disk for
     * AF_MERGE_GRACE seconds) */
    char resolved[PATH_MAX];
    struct stat lsb;
    const char *files = dir;
    if (lstat(dir, &lsb) == 0 && S_ISLNK(lsb.st_mode) && realpath(dir, resolved)) files = resolved;
    char path[PATH_MAX];
    AF_TRY(af_bundle_join(path, sizeof path, files, "case.json", err));
    char *text = NULL;
    size_t len = 0;
    AF_TRY(af_file_read(path, AF_BUNDLE_MAX_JSON, &text, &len, err));
    af_bundle *b = af_calloc(1, sizeof *b);
    af_status st = AF_ERR_NOMEM;
    if (b) {
        b->dir = af_strdup(dir);
        b->files = af_strdup(files);
    }
    if (!b || !b->dir || !b->files) {
        af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", path);
    } else {
        st = af_bundle_json_parse(path, text, len, b, err);
    }
    af_free(text);
    /* a nondeterministic finding holds both runs: each recorded output's second run */
    for (size_t i = 0; st == AF_OK && b->kind == AF_KIND_NONDETERMINISTIC && i < b->n_recs; i++) {
        if (!b->rec_files[i] || !b->rec_names[i]) continue;
        char file[200];
        af_bundle_run2_name("out", b->rec_names[i], file, sizeof file);
        if (!af_bundle_is_file(b->files, file))
            st = af_error_set(err, AF_ERR_FORMAT, "%s/%s: missing: a nondeterministic finding's bundle holds the "
                              "second run's output beside the first's", dir, file);
    }
    if (st != AF_OK) {
        af_bundle_free(b);
        return st;
    }
    *out = b;
    return AF_OK;
}

void af_bundle_free(af_bundle *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n_recs; i++) {
        if (b->rec_names) af_free(b->rec_names[i]);
        if (b->rec_files) af_free(b->rec_files[i]);
        for (int g = 0; b->rec_grad_files && g < AF_GRAD_COUNT; g++) af_free(b->rec_grad_files[i * AF_GRAD_COUNT + (size_t)g]);
    }
    for (size_t i = 0; b->rec_lse_files && i < b->n_recs; i++) af_free(b->rec_lse_files[i]);
    af_free(b->rec_grad_files);
    af_free(b->rec_lse_files);
    af_free(b->tensor);
    af_free(b->recs);
    af_free(b->rec_names);
    af_free(b->rec_files);
    af_free(b->who);
    af_free(b->relation);
    af_free(b->dir);
    af_free(b->files);
    af_free(b);
}

af_status af_bundle_check_budget(const af_bundle *b, size_t budget, af_error *err) {
    af_error verr = {AF_OK, ""};
    af_status st = af_case_validate(&b->c, budget, &verr);
    AF_RETURN_ERROR_IF(st != AF_OK, err, st, "%s/case.json: case: %s", b->dir, verr.msg);
    return AF_OK;
}

const af_case *af_bundle_case(const af_bundle *b) { return &b->c; }
const char *af_bundle_dir(const af_bundle *b) { return b->dir; }
af_kind af_bundle_kind(const af_bundle *b) { return b->kind; }
uint64_t af_bundle_signature(const af_bundle *b) { return b->signature; }
const char *af_bundle_who(const af_bundle *b) { return b->who; }
const char *af_bundle_relation(const af_bundle *b) { return b->relation; }
const char *af_bundle_tensor(const af_bundle *b) { return b->tensor ? b->tensor : "out"; }
int af_bundle_grad(const af_bundle *b) {
    for (int g = 0; g < AF_GRAD_COUNT; g++)
        if (b->tensor && !strcmp(b->tensor, af_grad_names[g])) return g;
    return -1;
}
size_t af_bundle_record_count(const af_bundle *b) { return b->n_recs; }

const af_bundle_record *af_bundle_record_at(const af_bundle *b, size_t i) {
    return i < b->n_recs ? &b->recs[i] : NULL;
}

int af_bundle_minimized(const af_bundle *b) { return b->minimized; }
const af_guard_writes *af_bundle_guard_writes(const af_bundle *b) { return &b->guard; }

bool af_bundle_has_tolerance(const af_bundle *b, af_tolerance *tol) {
    if (b->has_tol && tol) *tol = b->tol;
    return b->has_tol;
}


/* --- loading arrays ------------------------------------------------------------------------ */

af_status af_bundle_load_array(const af_bundle *b, const char *name, const size_t want[4], af_array *a, char *path,
                               size_t path_len, af_error *err) {
    AF_TRY(af_bundle_join(path, path_len, b->files, name, err));
    char shape[160], what[176];
    af_bundle_shape_str(shape, sizeof shape, want, 4);
    snprintf(what, sizeof what, "the case %s", shape);
    af_npy_bound bound = {1, what};
    for (int d = 0; d < 4; d++)
        if (!af_size_mul(bound.max_numel, want[d], &bound.max_numel)) bound.max_numel = SIZE_MAX;
    return af_npy_read_bounded(path, &bound, a, err);
}

af_status af_bundle_shape_error(const char *path, const af_array *a, const size_t *want, int nd,
                                       af_error *err) {
    char got_s[160], want_s[160];
    af_bundle_shape_str(got_s, sizeof got_s, a->shape, a->ndim);
    af_bundle_shape_str(want_s, sizeof want_s, want, nd);
    return af_error_set(err, AF_ERR_FORMAT, "%s: shape %s does not match the case %s", path, got_s, want_s);
}

bool af_bundle_same_shape(const af_array *a, const size_t *want, int nd) {
    if (a->ndim != nd) return false;
    for (int d = 0; d < nd; d++)
        if (a->shape[d] != want[d]) return false;
    return true;
}


/* name as float64 of shape want. */
static af_status af_bundle_load_shaped(const af_bundle *b, const char *name, const size_t want[4], double **out,
                                       af_error *err) {
    *out = NULL;
    af_array a;
    char path[PATH_MAX];
    AF_TRY(af_bundle_load_array(b, name, want, &a, path, sizeof path, err));
    if (!af_bundle_same_shape(&a, want, 4)) {
        af_status st = af_bundle_shape_error(path, &a, want, 4, err);
        af_array_free(&a);
        return st;
    }
    if (a.dtype == AF_F64) {
        *out = a.data; /* af_malloc'ed by the reader: the caller af_frees it */
        return AF_OK;
    }
    size_t n = af_array_numel(&a), es = af_dtype_size(a.dtype);
    double *x = af_malloc(n * sizeof *x);
    if (!x) {
        af_array_free(&a);
        return af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t e = 0; e < n; e++) x[e] = af_dtype_load(a.dtype, a.data, e * es);
    af_array_free(&a);
    *out = x;
    return AF_OK;
}

/* name as float64 [B, Hq, Sq, Dv]. */
static af_status af_bundle_load_f64(const af_bundle *b, const char *name, double **out, af_error *err) {
    const af_case *c = &b->c;
    size_t want[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    return af_bundle_load_shaped(b, name, want, out, err);
}

af_status af_bundle_load_grad(const af_bundle *b, const char *name, int g, double **out, af_error *err) {
    *out = NULL;
    AF_RETURN_ERROR_IF(g < 0 || g >= AF_GRAD_COUNT, err, AF_ERR_INVALID, "no gradient %d", g);
    const af_case *c = &b->c;
    if (!(c->bwd.grads & (1u << g))) return AF_OK;
    size_t want[4];
    af_case_grad_shape(c, g, want);
    char file[160];
    const char *use = NULL;
    if (strcmp(name, "ref") == 0) {
        snprintf(file, sizeof file, "ref_%s.npy.zst", af_grad_names[g]);
        use = file;
    } else {
        for (size_t i = 0; i < b->n_recs && !use; i++)
            if (b->rec_names[i] && strcmp(b->rec_names[i], name) == 0)
                use = b->rec_grad_files[i * AF_GRAD_COUNT + (size_t)g];
        if (!use) {
            af_bundle_array_name(af_grad_names[g], name, file, sizeof file);
            use = file;
        }
    }
    if (!af_bundle_is_file(b->files, use)) return AF_OK;
    return af_bundle_load_shaped(b, use, want, out, err);
}

af_status af_bundle_load_run2(const af_bundle *b, const char *name, int g, double **out, af_error *err) {
    *out = NULL;
    AF_RETURN_ERROR_IF(g < -1 || g >= AF_GRAD_COUNT, err, AF_ERR_INVALID, "no gradient %d", g);
    const af_case *c = &b->c;
    size_t want[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    if (g >= 0) {
        if (!(c->bwd.grads & (1u << g))) return AF_OK;
        af_case_grad_shape(c, g, want);
    }
    char file[200];
    af_bundle_run2_name(g < 0 ? "out" : af_grad_names[g], name, file, sizeof file);
    if (!af_bundle_is_file(b->files, file)) return AF_OK;
    return af_bundle_load_shaped(b, file, want, out, err);
}

af_status af_bundle_load_lse(const af_bundle *b, const char *name, double **out, af_error *err) {
    *out = NULL;
    const af_case *c = &b->c;
    char file[160];
    const char *use = NULL;
    if (strcmp(name, "ref") == 0) {
        use = "ref_lse.npy.zst";
    } else {
        for (size_t i = 0; i < b->n_recs && !use; i++)
            if (b->rec_names[i] && strcmp(b->rec_names[i], name) == 0) use = b->rec_lse_files[i];
        if (!use) {
            af_bundle_array_name("lse", name, file, sizeof file);
            use = file;
        }
    }
    if (!af_bundle_is_file(b->files, use)) return AF_OK;
    /* [B, Hq, Sq]: bounded as a [B, Hq, Sq, 1] array, then checked as 3-D */
    size_t want[4] = {c->batch, c->q_heads, c->q_len, 1};
    af_array a;
    char path[PATH_MAX];
    AF_TRY(af_bundle_load_array(b, use, want, &a, path, sizeof path, err));
    af_status st = AF_OK;
    if (!af_bundle_same_shape(&a, want, 3)) {
        st = af_bundle_shape_error(path, &a, want, 3, err);
    } else if (a.dtype != AF_F32 && a.dtype != AF_F64) {
        st = af_error_set(err, AF_ERR_FORMAT, "%s: dtype %s, the statistics are float32 or float64", path,
                          (unsigned)a.dtype < AF_DTYPE_COUNT ? af_dtype_names[a.dtype] : "?");
    }
    size_t n = want[0] * want[1] * want[2], es = af_dtype_size(a.dtype);
    double *x = st == AF_OK ? af_malloc(n * sizeof *x) : NULL;
    if (st == AF_OK && !x) st = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", path);
    for (size_t e = 0; x && e < n; e++) x[e] = af_dtype_load(a.dtype, a.data, e * es);
    af_array_free(&a);
    *out = x;
    return st;
}

af_kind af_bundle_record_verdict(const af_bundle_record *r) {
    af_kind k = r->kind;
    for (int g = 0; g < AF_GRAD_COUNT; g++)
        if (r->has_grad[g] && r->grad_kind[g] != AF_KIND_OK && (k == AF_KIND_OK || r->grad_kind[g] < k)) k = r->grad_kind[g];
    if (r->has_lse && r->lse_kind != AF_KIND_OK && k == AF_KIND_OK) k = r->lse_kind;
    return k;
}

af_status af_bundle_load_expected(const af_bundle *b, double **out, af_error *err) {
    *out = NULL;
    if (!af_bundle_is_file(b->files, "expected.npy.zst")) return AF_OK;
    return af_bundle_load_f64(b, "expected.npy.zst", out, err);
}

af_status af_bundle_load_output(const af_bundle *b, const char *name, double **out, af_error *err) {
    *out = NULL;
    if (strcmp(name, "ref") == 0) return af_bundle_load_f64(b, "ref.npy.zst", out, err);
    for (size_t i = 0; i < b->n_recs; i++)
        if (b->rec_names[i] && strcmp(b->rec_names[i], name) == 0 && b->rec_files[i])
            return af_bundle_load_f64(b, b->rec_files[i], out, err);
    char file[160];
    af_bundle_out_name(name, file, sizeof file);
    return af_bundle_load_f64(b, file, out, err);
}

af_status af_bundle_load_keep(const af_bundle *b, const char *backend, uint8_t **out, af_error *err) {
    *out = NULL;
    char file[160], path[PATH_MAX];
    af_bundle_array_name("keep", backend, file, sizeof file);
    if (!af_bundle_is_file(b->files, file)) return AF_OK;
    AF_TRY(af_bundle_join(path, sizeof path, b->files, file, err));
    const af_case *c = &b->c;
    size_t want[4] = {c->batch, c->q_heads, c->q_len, c->kv_len}, n = want[0] * want[1] * want[2] * want[3];
    af_array a;
    AF_TRY(af_npy_read_zst_max(path, n, &a, err));
    bool ok = a.dtype == AF_BOOL && a.ndim == 4;
    for (int d = 0; ok && d < 4; d++) ok = a.shape[d] == want[d];
    if (!ok) {
        char got[64], exp[64];
        af_bundle_shape_str(got, sizeof got, a.shape, a.ndim);
        af_bundle_shape_str(exp, sizeof exp, want, 4);
        const char *dt = (unsigned)a.dtype < AF_DTYPE_COUNT ? af_dtype_names[a.dtype] : "?";
        af_error_set(err, AF_ERR_FORMAT, "%s/%s: a keep mask is bool %s, not %s %s", b->dir, file, exp, dt, got);
        af_array_free(&a);
        return AF_ERR_FORMAT;
    }
    *out = a.data;
    return AF_OK;
}

af_status af_bundle_load_text(const af_bundle *b, const char *name, char **out, size_t *len, af_error *err) {
    *out = NULL;
    *len = 0;
    AF_RETURN_ERROR_IF(!af_bundle_plain_name(name), err, AF_ERR_INVALID, "%s: \"%s\" is not a file name inside it",
                       b->dir, name);
    char path[PATH_MAX];
    AF_TRY(af_bundle_join(path, sizeof path, b->files, name, err));
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) return AF_OK;
    return af_file_read(path, AF_BUNDLE_MAX_TEXT, out, len, err);
}
