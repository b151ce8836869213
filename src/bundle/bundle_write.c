/* bundle_write.c - writing a bundle: one directory per finding (docs/design.md section 6).
 *
 * Every file goes into "<crashes>/.tmp-<name>-<pid>-<counter>", which is then renamed to
 * "<crashes>/<name>" in one step without replacing anything (renameat2 RENAME_NOREPLACE
 * where the file system has it), so a reader, or a second campaign process that found the
 * same signature, sees no bundle or a whole one, and a stored bundle is never overwritten.
 * case.json (bundle_json.c) is written last: it lists the files. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "bundle_internal.h"
#include "fileio.h"

typedef struct af_bw { /* a bundle being written */
    const af_bundle_spec *spec;
    char tmp[PATH_MAX];
    char **files; /* names written so far: input.bin, 5 inputs, ref, one per output */
    size_t n_files, cap_files;
    char **out_files; /* per output: its file name, NULL when it has none */
    char **err_files; /* per output: its stderr file name, NULL when it has none */
    char **grad_files; /* per output and gradient (i * AF_GRAD_COUNT + g): its file, NULL when none */
    char **lse_files;  /* per output: its statistics' file, NULL when none */
    af_error *err;
} af_bw;

static af_status af_bw_add(af_bw *bw, const char *name) {
    AF_ASSERT(bw->n_files < bw->cap_files);
    bw->files[bw->n_files] = af_strdup(name);
    AF_RETURN_ERROR_IF(!bw->files[bw->n_files], bw->err, AF_ERR_NOMEM, "out of memory");
    bw->n_files++;
    return AF_OK;
}

static bool af_bw_has(const af_bw *bw, const char *name) {
    for (size_t i = 0; i < bw->n_files; i++)
        if (strcmp(bw->files[i], name) == 0) return true;
    return false;
}

/* Writes bytes as tmp/name (the directory rename is what makes the bundle atomic). */
static af_status af_bw_raw(af_bw *bw, const char *name, const void *data, size_t n) {
    char path[PATH_MAX];
    AF_TRY(af_bundle_join(path, sizeof path, bw->tmp, name, bw->err));
    AF_TRY(af_file_write(path, data, n, true, bw->err));
    return af_bw_add(bw, name);
}

static af_status af_bw_array(af_bw *bw, const char *name, const af_array *a) {
    char path[PATH_MAX];
    AF_TRY(af_bundle_join(path, sizeof path, bw->tmp, name, bw->err));
    AF_TRY(af_npy_write_zst(path, a, bw->err));
    return af_bw_add(bw, name);
}

static af_status af_bw_fp8(af_bw *bw, const char *name, const af_view *v) {
    af_array a = {.dtype = v->dtype, .ndim = 4};
    size_t n = 1;
    for (int d = 0; d < 4; d++) {
        a.shape[d] = v->ne[d];
        n *= v->ne[d];
    }
    uint8_t *x = af_calloc(n ? n : 1, 1);
    AF_RETURN_ERROR_IF(!x, bw->err, AF_ERR_NOMEM, "%s: out of memory", name);
    size_t e = 0;
    for (size_t i0 = 0; i0 < v->ne[0]; i0++)
        for (size_t i1 = 0; i1 < v->ne[1]; i1++)
            for (size_t i2 = 0; i2 < v->ne[2]; i2++)
                for (size_t i3 = 0; i3 < v->ne[3]; i3++)
                    x[e++] = *af_view_fp8_at(v, i0, i1, i2, i3);
    a.data = x;
    af_status st = af_bw_array(bw, name, &a);
    af_free(x);
    return st;
}

/* q, k or v: the canonical [B, H, S, D] values as float32 (f16 and bf16 are exact in it);
 * an FP8 tensor's stored bytes as uint8 (its dequantized values need float64, and the bits
 * keep which NaN pattern it holds). */
static af_status af_bw_view(af_bw *bw, const char *name, const af_view *v) {
    if (af_dtype_is_fp8(v->dtype)) return af_bw_fp8(bw, name, v);
    af_array a = {.dtype = AF_F32, .ndim = 4};
    size_t n = 1;
    for (int d = 0; d < 4; d++) {
        a.shape[d] = v->ne[d];
        n *= v->ne[d];
    }
    float *x = af_calloc(n ? n : 1, sizeof *x);
    AF_RETURN_ERROR_IF(!x, bw->err, AF_ERR_NOMEM, "%s: out of memory", name);
    size_t e = 0;
    for (size_t i0 = 0; i0 < v->ne[0]; i0++)
        for (size_t i1 = 0; i1 < v->ne[1]; i1++)
            for (size_t i2 = 0; i2 < v->ne[2]; i2++)
                for (size_t i3 = 0; i3 < v->ne[3]; i3++) x[e++] = (float)af_view_get(v, i0, i1, i2, i3);
    a.data = x;
    af_status st = af_bw_array(bw, name, &a);
    af_free(x);
    return st;
}

/* A mask as a 4-D array with size 1 on the dims it broadcasts over (dims bit d clear). */
static af_status af_bw_mask(af_bw *bw, const char *name, const af_view *v, uint8_t dims, bool boolean) {
    af_array a = {.dtype = boolean ? AF_BOOL : AF_F32, .ndim = 4};
    size_t n = 1;
    for (int d = 0; d < 4; d++) {
        a.shape[d] = (dims & (1u << d)) ? v->ne[d] : 1;
        n *= a.shape[d];
    }
    void *x = af_calloc(n ? n : 1, boolean ? 1 : sizeof(float));
    AF_RETURN_ERROR_IF(!x, bw->err, AF_ERR_NOMEM, "%s: out of memory", name);
    size_t e = 0;
    for (size_t i0 = 0; i0 < a.shape[0]; i0++)
        for (size_t i1 = 0; i1 < a.shape[1]; i1++)
            for (size_t i2 = 0; i2 < a.shape[2]; i2++)
                for (size_t i3 = 0; i3 < a.shape[3]; i3++, e++) {
                    double val = af_view_get(v, i0, i1, i2, i3);
                    if (boolean) {
                        ((uint8_t *)x)[e] = val != 0.0;
                    } else {
                        ((float *)x)[e] = (float)val;
                    }
                }
    a.data = x;
    af_status st = af_bw_array(bw, name, &a);
    af_free(x);
    return st;
}

/* A backend's tensor of shape want (its output [B, Hq, Sq, Dv] or a gradient; any float
 * dtype, any strides): F32 and F64 in their own dtype, F16 and BF16 as float32 (exact),
 * like the inputs. */
static af_status af_bw_output(af_bw *bw, const char *name, const af_tensor *t, const size_t want[4],
                              const char *backend) {
    AF_RETURN_ERROR_IF(t->ndim != 4 || t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2] ||
                           t->ne[3] != want[3] ||
                           (t->dtype != AF_F32 && t->dtype != AF_F64 && t->dtype != AF_F16 && t->dtype != AF_BF16) ||
                           !t->data,
                       bw->err, AF_ERR_INVALID, "%s: %s of %s is not a float tensor of the case's shape", name,
                       strncmp(name, "out.", 4) == 0 ? "output" : "gradient", backend ? backend : "?");
    bool half = t->dtype == AF_F16 || t->dtype == AF_BF16;
    af_array a = {.dtype = half ? AF_F32 : t->dtype, .ndim = 4};
    size_t es = af_dtype_size(t->dtype), n = 1;
    bool contiguous = !half;
    for (int d = 3; d >= 0; d--) {
        a.shape[d] = t->ne[d];
        contiguous &= t->nb[d] == es * n || t->ne[d] == 1;
        n *= t->ne[d];
    }
    if (contiguous) {
        a.data = t->data;
        return af_bw_array(bw, name, &a);
    }
    uint8_t *x = af_malloc(n * (half ? sizeof(float) : es));
    AF_RETURN_ERROR_IF(!x, bw->err, AF_ERR_NOMEM, "%s: out of memory", name);
    size_t idx[4], e = 0;
    for (idx[0] = 0; idx[0] < want[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < want[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < want[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < want[3]; idx[3]++, e++) {
                    if (half) {
                        float f = (float)af_dtype_load(t->dtype, t->data, af_tensor_offset(t, idx));
                        memcpy(x + e * sizeof f, &f, sizeof f);
                    } else {
                        memcpy(x + e * es, (const uint8_t *)t->data + af_tensor_offset(t, idx), es);
                    }
                }
    a.data = x;
    af_status st = af_bw_array(bw, name, &a);
    af_free(x);
    return st;
}


/* mkdir -p (fileio.h). */
static af_status af_bundle_mkdirs(const char *dir, af_error *err) {
    AF_RETURN_ERROR_IF(dir[0] == 0, err, AF_ERR_INVALID, "the crashes directory name is empty");
    return af_file_mkdirs(dir, err);
}

static void af_bundle_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd); /* durability only: the rename has already decided the outcome */
    close(fd);
}

/* Renames without replacing: RENAME_NOREPLACE, or rename(2) where the file system lacks
 * it (which still refuses a non-empty target). */
static int af_bundle_rename_noreplace(const char *from, const char *to) {
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
    struct stat st;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

/* "<prefix>.<backend>.npy.zst", and for a second array of that name (two runs of one
 * backend: a relation) "<prefix>.<backend>.2.npy.zst", ... */
static void af_bw_unique_name(const af_bw *bw, const char *prefix, const char *backend, char *name, size_t len) {
    af_bundle_array_name(prefix, backend, name, len);
    for (unsigned k = 2; af_bw_has(bw, name); k++) {
        char base[160];
        af_bundle_array_name(prefix, backend, base, sizeof base);
        base[strlen(base) - strlen(".npy.zst")] = 0;
        snprintf(name, len, "%.140s.%u.npy.zst", base, k);
    }
}

static af_status af_bw_files(af_bw *bw, const char *final, cJSON *extra) {
    const af_bundle_spec *s = bw->spec;
    const af_case *c = s->c;
    uint8_t enc[AF_CASE_ENCODED_MAX];
    const uint8_t *input = s->input;
    size_t input_len = s->input_len;
    if (!input) {
        input_len = af_case_encode(c, enc, sizeof enc);
        input = enc;
    }
    af_status st = af_bw_raw(bw, "input.bin", input, input_len);
    const af_case_tensors *t = s->tensors;
    if (st == AF_OK && t) st = af_bw_view(bw, "q.npy.zst", &t->qv);
    if (st == AF_OK && t) st = af_bw_view(bw, "k.npy.zst", &t->kv);
    if (st == AF_OK && t) st = af_bw_view(bw, "v.npy.zst", &t->vv);
    if (st == AF_OK && t && c->amask.present) st = af_bw_mask(bw, "mask.npy.zst", &t->am, c->amask.dims, false);
    if (st == AF_OK && t && c->bmask.present) st = af_bw_mask(bw, "bool_mask.npy.zst", &t->bm, c->bmask.dims, true);
    if (st == AF_OK && s->ref) {
        af_array a = {.dtype = AF_F64, .ndim = 4, .shape = {c->batch, c->q_heads, c->q_len, c->v_head_dim}};
        a.data = (void *)(uintptr_t)s->ref; /* only read */
        st = af_bw_array(bw, "ref.npy.zst", &a);
    }
    if (st == AF_OK && t && c->bwd.grads) st = af_bw_view(bw, "do.npy.zst", &t->dov);
    for (int g = 0; st == AF_OK && g < AF_GRAD_COUNT; g++) {
        if (!(c->bwd.grads & (1u << g)) || !s->ref_grads[g]) continue;
        char name[32];
        af_array a = {.dtype = AF_F64, .ndim = 4};
        af_case_grad_shape(c, g, a.shape);
        a.data = (void *)(uintptr_t)s->ref_grads[g]; /* only read */
        snprintf(name, sizeof name, "ref_%s.npy.zst", af_grad_names[g]);
        st = af_bw_array(bw, name, &a);
    }
    /* the statistics: the reference's when some output has its own, and each output's */
    bool any_lse = false;
    for (size_t i = 0; i < s->n_outputs; i++) any_lse |= s->outputs[i].lse != NULL;
    if (st == AF_OK && any_lse && s->ref_lse) {
        af_array a = {.dtype = AF_F64, .ndim = 3, .shape = {c->batch, c->q_heads, c->q_len}};
        a.data = (void *)(uintptr_t)s->ref_lse; /* only read */
        st = af_bw_array(bw, "ref_lse.npy.zst", &a);
    }
    for (size_t i = 0; st == AF_OK && i < s->n_outputs; i++) {
        const af_tensor *l = s->outputs[i].lse;
        if (!l) continue;
        if (l->ndim != 3 || l->ne[0] != c->batch || l->ne[1] != c->q_heads || l->ne[2] != c->q_len ||
            (l->dtype != AF_F32 && l->dtype != AF_F64) || !l->data) {
            st = af_error_set(bw->err, AF_ERR_INVALID, "the statistics of %s are not a float [B, Hq, Sq] tensor",
                              s->outputs[i].backend ? s->outputs[i].backend : "?");
            break;
        }
        char name[160];
        af_bw_unique_name(bw, "lse", s->outputs[i].backend ? s->outputs[i].backend : "", name, sizeof name);
        af_array a = {.dtype = l->dtype, .ndim = 3, .shape = {c->batch, c->q_heads, c->q_len}};
        a.data = l->data; /* contiguous (run_lse's contract) */
        st = af_bw_array(bw, name, &a);
        if (st == AF_OK && !(bw->lse_files[i] = af_strdup(name)))
            st = af_error_set(bw->err, AF_ERR_NOMEM, "out of memory");
    }
    size_t want_out[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    for (size_t i = 0; st == AF_OK && i < s->n_outputs; i++) {
        const af_bundle_output *o = &s->outputs[i];
        const char *backend = o->backend ? o->backend : "";
        char name[160];
        if (o->out) {
            af_bw_unique_name(bw, "out", backend, name, sizeof name);
            st = af_bw_output(bw, name, o->out, want_out, backend);
            if (st == AF_OK && !(bw->out_files[i] = af_strdup(name)))
                st = af_error_set(bw->err, AF_ERR_NOMEM, "out of memory");
        }
        for (int g = 0; st == AF_OK && o->grads && g < AF_GRAD_COUNT; g++) {
            const af_tensor *gt = af_grads_get(o->grads, g);
            if (!(c->bwd.grads & (1u << g)) || !gt->data) continue;
            size_t want[4];
            af_case_grad_shape(c, g, want);
            af_bw_unique_name(bw, af_grad_names[g], backend, name, sizeof name);
            st = af_bw_output(bw, name, gt, want, backend);
            if (st == AF_OK && !(bw->grad_files[i * AF_GRAD_COUNT + (size_t)g] = af_strdup(name)))
                st = af_error_set(bw->err, AF_ERR_NOMEM, "out of memory");
        }
    }
    /* a nondeterministic finding's second run (the names fixed: a reader finds them by rule) */
    for (size_t i = 0; st == AF_OK && i < s->n_outputs; i++) {
        const af_bundle_output *o = &s->outputs[i];
        const char *backend = o->backend ? o->backend : "";
        char name[200];
        if (o->out_run2) {
            af_bundle_run2_name("out", backend, name, sizeof name);
            st = af_bw_output(bw, name, o->out_run2, want_out, backend);
        }
        for (int g = 0; st == AF_OK && o->grads_run2 && g < AF_GRAD_COUNT; g++) {
            const af_tensor *gt = af_grads_get(o->grads_run2, g);
            if (!(c->bwd.grads & (1u << g)) || !gt->data) continue;
            size_t want[4];
            af_case_grad_shape(c, g, want);
            af_bundle_run2_name(af_grad_names[g], backend, name, sizeof name);
            st = af_bw_output(bw, name, gt, want, backend);
        }
    }
    /* a worker's own dropout keep mask, which the reference followed */
    for (size_t i = 0; st == AF_OK && i < s->n_outputs; i++) {
        const af_bundle_output *o = &s->outputs[i];
        if (!o->dropout_keep) continue;
        char name[160];
        af_bw_unique_name(bw, "keep", o->backend ? o->backend : "", name, sizeof name);
        af_array a = {.dtype = AF_BOOL, .ndim = 4, .shape = {c->batch, c->q_heads, c->q_len, c->kv_len}};
        a.data = (void *)(uintptr_t)o->dropout_keep; /* only read */
        st = af_bw_array(bw, name, &a);
    }
    /* a worker's stderr tail: stderr.txt, stderr.2.txt for a second worker */
    for (size_t i = 0; st == AF_OK && i < s->n_outputs; i++) {
        const char *tail = s->outputs[i].stderr_tail;
        if (!tail || !tail[0]) continue;
        char name[32] = "stderr.txt";
        for (unsigned k = 2; af_bw_has(bw, name); k++) snprintf(name, sizeof name, "stderr.%u.txt", k);
        st = af_bw_raw(bw, name, tail, strlen(tail));
        if (st == AF_OK && !(bw->err_files[i] = af_strdup(name)))
            st = af_error_set(bw->err, AF_ERR_NOMEM, "out of memory");
    }
    if (st != AF_OK) {
        cJSON_Delete(extra);
        return st;
    }
    /* case.json, written last: it lists the files */
    size_t len = 0;
    char *text = af_bundle_json_print(s, bw->files, bw->n_files, bw->out_files, bw->err_files, bw->grad_files, bw->lse_files,
                                      final,
                                      extra, &len);
    AF_RETURN_ERROR_IF(!text, bw->err, AF_ERR_NOMEM, "case.json: out of memory");
    st = af_bw_raw(bw, "case.json", text, len);
    cJSON_free(text);
    return st;
}

/* The bundle at dir says it was stored as found ("minimized": false). */
static bool af_bundle_unminimized_at(const char *dir) {
    af_bundle *b = NULL;
    af_error err;
    bool yes = af_bundle_read(dir, &b, &err) == AF_OK && af_bundle_minimized(b) < 0;
    af_bundle_free(b);
    return yes;
}

/* Moves the bundle directory at `from` to old_dir/name. Where that name is taken, `from`
 * is removed (a copy is kept there already); where old_dir cannot be had, `from` is removed
 * only when `drop` says so (a temporary name nobody else would clean). */
static void af_bundle_move_old(const char *from, const char *old_dir, const char *name, bool drop) {
    char to[PATH_MAX];
    af_error err;
    if (af_bundle_mkdirs(old_dir, &err) != AF_OK || af_bundle_join(to, sizeof to, old_dir, name, &err) != AF_OK) {
        if (drop) af_file_remove_dir(from);
        return;
    }
    if (af_bundle_rename_noreplace(from, to) != 0 && (drop || errno == EEXIST || errno == ENOTEMPTY))
        af_file_remove_dir(from);
}

/* Puts the written bundle tmp at final: without replacing anything, or (old_dir) in
 * exchange for the bundle stored as found there, which goes to old_dir. */
static af_status af_bundle_place(const char *tmp, const char *final, const char *name, const char *old_dir,
                                 af_error *err) {
    struct stat st;
    if (old_dir && lstat(final, &st) == 0) {
        if (!af_bundle_unminimized_at(final)) return af_error_set(err, AF_ERR_EXISTS, "%s: already stored", final);
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            af_bundle_move_old(tmp, old_dir, name, true); /* tmp now holds the bundle as found */
            return AF_OK;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return af_error_set(err, AF_ERR_IO, "%s: cannot exchange %s with it: %s", final, tmp, strerror(errno));
        /* no exchange on this file system: the old one out of the way first (kept in old_dir) */
        af_bundle_move_old(final, old_dir, name, false);
    }
    if (af_bundle_rename_noreplace(tmp, final) == 0) return AF_OK;
    int e = errno;
    if (e == EEXIST || e == ENOTEMPTY) return af_error_set(err, AF_ERR_EXISTS, "%s: already stored", final);
    return af_error_set(err, AF_ERR_IO, "%s: cannot rename %s into place: %s", final, tmp, strerror(e));
}

static af_status af_bundle_write_to(const char *crashes_dir, const af_bundle_spec *spec, const char *old_dir,
                                    char *path, size_t path_len, af_error *err) {
    static atomic_uint af_bundle_counter;
    AF_RETURN_ERROR_IF(!crashes_dir || !spec || !spec->c, err, AF_ERR_INVALID, "af_bundle_write: missing argument");
    AF_RETURN_ERROR_IF(!spec->input && spec->input_len, err, AF_ERR_INVALID, "af_bundle_write: input_len without input");
    char name[64], final[PATH_MAX];
    if (spec->name) {
        size_t n = strlen(spec->name);
        AF_RETURN_ERROR_IF(!n || n >= sizeof name || strspn(spec->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != n ||
                               spec->name[0] == '.',
                           err, AF_ERR_INVALID, "af_bundle_write: bad bundle name \"%.80s\"", spec->name);
        snprintf(name, sizeof name, "%s", spec->name);
    } else {
        af_bundle_name(spec->kind, spec->signature, name, sizeof name);
    }
    AF_TRY(af_bundle_join(final, sizeof final, crashes_dir, name, err));
    if (path && path_len) snprintf(path, path_len, "%s", final);
    AF_TRY(af_bundle_mkdirs(crashes_dir, err));
    struct stat st;
    AF_RETURN_ERROR_IF(lstat(final, &st) == 0 && !(old_dir && af_bundle_unminimized_at(final)), err, AF_ERR_EXISTS,
                       "%s: already stored", final);
    cJSON *extra = NULL;
    if (spec->extra_json) {
        extra = cJSON_Parse(spec->extra_json);
        AF_RETURN_ERROR_IF(!extra, err, AF_ERR_INVALID, "%s: extra_json is not valid JSON", final);
    }

    af_bw bw;
    memset(&bw, 0, sizeof bw);
    bw.spec = spec;
    bw.err = err;
    for (int tries = 0;; tries++) {
        unsigned k = atomic_fetch_add(&af_bundle_counter, 1u);
        char leaf[128];
        snprintf(leaf, sizeof leaf, ".tmp-%s-%ld-%u", name, (long)getpid(), k);
        af_status jst = af_bundle_join(bw.tmp, sizeof bw.tmp, crashes_dir, leaf, err);
        if (jst != AF_OK) {
            cJSON_Delete(extra);
            return jst;
        }
        if (mkdir(bw.tmp, 0755) == 0) break;
        /* EEXIST: a leftover of a process that had our pid; take the next counter */
        if (errno != EEXIST || tries > 100) {
            int e = errno;
            cJSON_Delete(extra);
            return af_error_set(err, AF_ERR_IO, "%s: cannot create directory: %s", bw.tmp, strerror(e));
        }
    }

    size_t n_names = (3 + AF_GRAD_COUNT) * spec->n_outputs; /* out, stderr, the gradients and lse of each */
    /* and the case's own: input.bin, q, k, v, mask, bool_mask, ref, do, ref_<g> of each
     * gradient, ref_lse, case.json */
    bw.cap_files = n_names + spec->n_outputs + 10 + AF_GRAD_COUNT; /* and a keep mask of each */
    bw.files = af_calloc(bw.cap_files, sizeof *bw.files);
    bw.out_files = af_calloc(n_names + 1, sizeof *bw.out_files);
    bw.err_files = bw.out_files ? bw.out_files + spec->n_outputs : NULL;
    bw.grad_files = bw.out_files ? bw.out_files + 2 * spec->n_outputs : NULL;
    bw.lse_files = bw.out_files ? bw.grad_files + AF_GRAD_COUNT * spec->n_outputs : NULL;
    af_status status = AF_OK;
    if (!bw.files || !bw.out_files) {
        cJSON_Delete(extra);
        status = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", final);
    } else {
        status = af_bw_files(&bw, final, extra);
    }
    if (status == AF_OK) {
        af_bundle_sync_dir(bw.tmp);
        status = af_bundle_place(bw.tmp, final, name, old_dir, err);
        if (status == AF_OK) af_bundle_sync_dir(crashes_dir);
    }
    if (status != AF_OK) af_file_remove_dir(bw.tmp);
    for (size_t i = 0; bw.files && i < bw.n_files; i++) af_free(bw.files[i]);
    for (size_t i = 0; bw.out_files && i < n_names; i++) af_free(bw.out_files[i]);
    af_free(bw.files);
    af_free(bw.out_files);
    return status;
}

bool af_bundle_retire(const char *crashes_dir, const char *name, const char *old_dir) {
    char from[PATH_MAX];
    af_error err;
    if (af_bundle_join(from, sizeof from, crashes_dir, name, &err) != AF_OK || !af_bundle_unminimized_at(from))
        return false;
    af_bundle_move_old(from, old_dir, name, false);
    return true;
}

af_status af_bundle_write(const char *crashes_dir, const af_bundle_spec *spec, char *path, size_t path_len,
                          af_error *err) {
    return af_bundle_write_to(crashes_dir, spec, NULL, path, path_len, err);
}

af_status af_bundle_write_over(const char *crashes_dir, const af_bundle_spec *spec, const char *old_dir, char *path,
                               size_t path_len, af_error *err) {
    AF_RETURN_ERROR_IF(!old_dir, err, AF_ERR_INVALID, "af_bundle_write_over: missing old_dir");
    return af_bundle_write_to(crashes_dir, spec, old_dir, path, path_len, err);
}


size_t af_bundle_remove_partial(const char *crashes_dir, long pid) {
    DIR *d = opendir(crashes_dir);
    if (!d) return 0;
    char mark[32];
    snprintf(mark, sizeof mark, "-%ld-", pid);
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        /* ".tmp-<name>-<pid>-<counter>": the pid between the last two dashes */
        if (strncmp(e->d_name, ".tmp-", 5) != 0) continue;
        const char *last = strrchr(e->d_name, '-');
        const char *at = last ? strstr(e->d_name, mark) : NULL;
        while (at && at + strlen(mark) - 1 != last) at = strstr(at + 1, mark);
        if (!at || last[1] == 0 || strspn(last + 1, "0123456789") != strlen(last + 1)) continue;
        char path[PATH_MAX];
        if (af_bundle_join(path, sizeof path, crashes_dir, e->d_name, NULL) != AF_OK) continue;
        af_file_remove_dir(path);
        removed++;
    }
    closedir(d);
    return removed;
}
