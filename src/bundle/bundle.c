/* bundle.c - repro bundles: one directory per finding (DESIGN.md section 6; schema of
 * case.json in docs/case-json.md).
 *
 * Writing: every file goes into "<crashes>/.tmp-<name>-<pid>-<counter>", which is then
 * renamed to "<crashes>/<name>" in one step without replacing anything (renameat2
 * RENAME_NOREPLACE where the file system has it), so a reader, or a second campaign
 * process that found the same signature, sees no bundle or a whole one, and a stored
 * bundle is never overwritten.
 *
 * Reading accepts bundles from other tools: only "case" is required in case.json, every
 * other field is optional, and the arrays that are missing are generated from the case.
 * A field that is present must have its documented type: a wrong type means the file is
 * not what we think it is, which is AF_ERR_FORMAT naming case.json and the field. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/mem.h"
#include "fileio.h"
#include "json_exact.h"

#define AF_BUNDLE_MAX_JSON ((size_t)16 << 20) /* case.json is a few KiB; refuse absurd ones */

struct af_bundle {
    char *dir;
    af_case c;
    af_kind kind;
    uint64_t signature;
    char *who;
    char *relation; /* NULL when none */
    af_bundle_record *recs;
    char **rec_names; /* full backend names: records truncate them at 127 bytes */
    char **rec_files; /* the output file of each record, NULL when none */
    size_t n_recs;
    bool has_tol;
    af_tolerance tol;
};

/* --- small helpers --------------------------------------------------------------------- */

void af_bundle_name(af_kind kind, uint64_t signature, char *buf, size_t len) {
    const char *k = (unsigned)kind < AF_KIND_COUNT ? af_kind_names[kind] : "unknown";
    snprintf(buf, len, "%s-%016llx", k, (unsigned long long)signature);
}

static af_status af_bundle_join(char *buf, size_t len, const char *dir, const char *name, af_error *err) {
    int w = snprintf(buf, len, "%s/%s", dir, name);
    AF_RETURN_ERROR_IF(w < 0 || (size_t)w >= len, err, AF_ERR_IO, "%s/%s: path is too long", dir, name);
    return AF_OK;
}

static bool af_bundle_is_file(const char *dir, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    if (af_bundle_join(path, sizeof path, dir, name, NULL) != AF_OK) return false;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A name inside the bundle directory: no separators, no way out of it. */
static bool af_bundle_plain_name(const char *s) {
    size_t n = strlen(s);
    return n > 0 && n < 256 && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* "out.<backend>.npy.zst" with the backend name made safe for a file name: worker and
 * plugin names hold paths and colons ("plugin:/opt/x.so:fast" -> "plugin__opt_x.so_fast"). */
static void af_bundle_out_name(const char *backend, char *buf, size_t len) {
    char safe[97];
    size_t n = 0;
    for (const char *p = backend; *p && n < sizeof safe - 1; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '-' || ch == '+' || ch == '.';
        safe[n++] = ok ? ch : '_';
    }
    safe[n] = 0;
    snprintf(buf, len, "out.%s.npy.zst", n ? safe : "_");
}

static void af_bundle_shape_str(char *buf, size_t len, const size_t *shape, int ndim) {
    size_t n = 0;
    int w = snprintf(buf, len, "[");
    n = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < ndim && n < len; d++) {
        w = snprintf(buf + n, len - n, "%s%zu", d ? ", " : "", shape[d]);
        if (w > 0) n += (size_t)w;
    }
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* Reads a whole small file into a NUL-terminated af_malloc'ed buffer. */
static af_status af_bundle_slurp(const char *path, size_t cap, char **out, size_t *len, af_error *err) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    AF_RETURN_ERROR_IF(fd < 0, err, AF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = af_malloc(cap + 1);
    if (!buf) {
        close(fd);
        return af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = 0;
    af_status st = AF_OK;
    for (;;) {
        if (n > cap) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: file is too large (over %zu bytes)", path, cap);
            break;
        }
        ssize_t r = read(fd, buf + n, cap + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = af_error_set(err, AF_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (st != AF_OK) {
        af_free(buf);
        return st;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return AF_OK;
}

/* --- writing ---------------------------------------------------------------------------- */

typedef struct af_bw { /* a bundle being written */
    const af_bundle_spec *spec;
    char tmp[PATH_MAX];
    char **files; /* names written so far: input.bin, 5 inputs, ref, one per output */
    size_t n_files, cap_files;
    char **out_files; /* per output: its file name, NULL when it has none */
    char **err_files; /* per output: its stderr file name, NULL when it has none */
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

/* q, k or v: the canonical [B, H, S, D] values as float32 (f16 and bf16 are exact in it). */
static af_status af_bw_view(af_bw *bw, const char *name, const af_view *v) {
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

/* An output tensor ([B, Hq, Sq, Dv], F32 or F64, any strides) in its own dtype. */
static af_status af_bw_output(af_bw *bw, const char *name, const af_bundle_output *o) {
    const af_case *c = bw->spec->c;
    const af_tensor *t = o->out;
    size_t want[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    AF_RETURN_ERROR_IF(t->ndim != 4 || t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2] ||
                           t->ne[3] != want[3] ||
                           (t->dtype != AF_F32 && t->dtype != AF_F64 && t->dtype != AF_F16 && t->dtype != AF_BF16) ||
                           !t->data,
                       bw->err, AF_ERR_INVALID, "%s: output of %s is not a [B, Hq, Sq, Dv] float tensor", name,
                       o->backend ? o->backend : "?");
    /* f16/bf16 outputs are stored as float32 (exact), like the inputs */
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

/* JSON building: cJSON reports allocation failure by returning NULL; note it once. */
typedef struct af_jw {
    bool ok;
} af_jw;

static void af_jw_item(af_jw *w, cJSON *o, const char *key, cJSON *item) {
    if (!item || !o || !cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        w->ok = false;
    }
}

static void af_jw_push(af_jw *w, cJSON *arr, cJSON *item) {
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        w->ok = false;
    }
}

/* A count: exact as an integer (cJSON would print counts above 2^31 as doubles). */
static cJSON *af_jw_count(size_t n) {
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", n);
    return cJSON_CreateRaw(buf);
}

static cJSON *af_jw_string(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

static cJSON *af_jw_metrics(af_jw *w, const af_metrics *m) {
    cJSON *o = cJSON_CreateObject();
    af_jw_item(w, o, "max_abs", af_json_double(m->max_abs));
    af_jw_item(w, o, "max_rel", af_json_double(m->max_rel));
    af_jw_item(w, o, "rel_fro", af_json_double(m->rel_fro));
    af_jw_item(w, o, "worst_ratio", af_json_double(m->worst_ratio));
    cJSON *idx = cJSON_CreateArray();
    for (int d = 0; d < 4; d++) af_jw_push(w, idx, af_jw_count(m->worst[d]));
    af_jw_item(w, o, "worst_index", idx);
    af_jw_item(w, o, "worst_out", af_json_double(m->worst_out));
    af_jw_item(w, o, "worst_ref", af_json_double(m->worst_ref));
    af_jw_item(w, o, "n_nan", af_jw_count(m->n_nan));
    af_jw_item(w, o, "n_inf", af_jw_count(m->n_inf));
    af_jw_item(w, o, "n_masked_row_nan", af_jw_count(m->n_masked_row_nan));
    af_jw_item(w, o, "n_diverge", af_jw_count(m->n_diverge));
    af_jw_item(w, o, "n_unstable", af_jw_count(m->n_unstable));
    return o;
}

/* case.json, written last: it lists the files. Takes ownership of extra. */
static af_status af_bw_case_json(af_bw *bw, const char *bundle_path, cJSON *extra) {
    const af_bundle_spec *s = bw->spec;
    af_jw w = {true};
    cJSON *root = cJSON_CreateObject();
    char buf[512];
    af_jw_item(&w, root, "format", cJSON_CreateString(AF_BUNDLE_FORMAT));
    af_jw_item(&w, root, "version", cJSON_CreateNumber(AF_BUNDLE_VERSION));
    af_jw_item(&w, root, "tool", cJSON_CreateString("attnfuzz"));
    af_jw_item(&w, root, "kind",
               cJSON_CreateString((unsigned)s->kind < AF_KIND_COUNT ? af_kind_names[s->kind] : "unknown"));
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)s->signature);
    af_jw_item(&w, root, "signature", cJSON_CreateString(buf));
    af_jw_item(&w, root, "who", cJSON_CreateString(s->who ? s->who : ""));
    af_jw_item(&w, root, "relation", af_jw_string(s->relation));
    cJSON *case_obj = af_case_to_cjson(s->c); /* numbers already exact */
    af_jw_item(&w, root, "case", case_obj);
    af_case_features_str(s->c, buf, sizeof buf);
    af_jw_item(&w, root, "features", cJSON_CreateString(buf));
    cJSON *tol = cJSON_CreateObject();
    af_jw_item(&w, tol, "atol", af_json_double(s->tol.atol));
    af_jw_item(&w, tol, "rtol", af_json_double(s->tol.rtol));
    af_jw_item(&w, tol, "fudge", af_json_double(s->tol.fudge));
    af_jw_item(&w, tol, "honest", cJSON_CreateBool(s->tol.honest));
    af_jw_item(&w, root, "tolerance", tol);
    cJSON *bes = cJSON_CreateArray();
    for (size_t i = 0; i < s->n_outputs; i++) {
        const af_bundle_output *o = &s->outputs[i];
        cJSON *be = cJSON_CreateObject();
        af_jw_item(&w, be, "name", cJSON_CreateString(o->backend ? o->backend : ""));
        af_jw_item(&w, be, "version", af_jw_string(o->version));
        af_kind k = o->result.kind;
        af_jw_item(&w, be, "verdict", cJSON_CreateString((unsigned)k < AF_KIND_COUNT ? af_kind_names[k] : "unknown"));
        af_jw_item(&w, be, "error", af_jw_string(o->error));
        af_jw_item(&w, be, "metrics", af_jw_metrics(&w, &o->result.m));
        af_jw_item(&w, be, "output", af_jw_string(bw->out_files[i]));
        if (o->describe) af_jw_item(&w, be, "worker", cJSON_CreateString(o->describe));
        if (o->conventions) {
            cJSON *conv = cJSON_Parse(o->conventions);
            af_jw_item(&w, be, "conventions", conv ? conv : cJSON_CreateString(o->conventions));
        }
        if (bw->err_files[i]) af_jw_item(&w, be, "stderr", cJSON_CreateString(bw->err_files[i]));
        af_jw_push(&w, bes, be);
    }
    af_jw_item(&w, root, "backends", bes);
    if (s->replay_cmd) {
        af_jw_item(&w, root, "replay", cJSON_CreateString(s->replay_cmd));
    } else {
        char replay[PATH_MAX + 32];
        snprintf(replay, sizeof replay, "attnfuzz replay %s", bundle_path);
        af_jw_item(&w, root, "replay", cJSON_CreateString(replay));
    }
    cJSON *files = cJSON_CreateArray();
    af_jw_push(&w, files, cJSON_CreateString("case.json"));
    for (size_t i = 0; i < bw->n_files; i++) af_jw_push(&w, files, cJSON_CreateString(bw->files[i]));
    af_jw_item(&w, root, "files", files);
    if (extra) af_jw_item(&w, root, "extra", extra);
    char *text = w.ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    AF_RETURN_ERROR_IF(!text, bw->err, AF_ERR_NOMEM, "case.json: out of memory");
    size_t n = strlen(text);
    text[n] = '\n'; /* replaces the NUL: the file ends in a newline, nothing reads text after */
    af_status st = af_bw_raw(bw, "case.json", text, n + 1);
    cJSON_free(text);
    return st;
}

/* mkdir -p. */
static af_status af_bundle_mkdirs(const char *dir, af_error *err) {
    char buf[PATH_MAX];
    size_t n = strlen(dir);
    AF_RETURN_ERROR_IF(n == 0, err, AF_ERR_INVALID, "the crashes directory name is empty");
    AF_RETURN_ERROR_IF(n >= sizeof buf, err, AF_ERR_IO, "%s: path is too long", dir);
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char save = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return af_error_set(err, AF_ERR_IO, "%s: cannot create directory %s: %s", dir, buf, strerror(errno));
        *p = save;
        if (!save) break;
    }
    struct stat st;
    AF_RETURN_ERROR_IF(stat(dir, &st) != 0, err, AF_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    AF_RETURN_ERROR_IF(!S_ISDIR(st.st_mode), err, AF_ERR_IO, "%s: cannot create directory: %s", dir,
                       strerror(ENOTDIR));
    return AF_OK;
}

/* Removes a directory we filled with plain files. */
static void af_bundle_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    }
    rmdir(dir);
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
    for (size_t i = 0; st == AF_OK && i < s->n_outputs; i++) {
        if (!s->outputs[i].out) continue;
        char name[160];
        af_bundle_out_name(s->outputs[i].backend ? s->outputs[i].backend : "", name, sizeof name);
        /* two runs of one backend (a relation) get out.NAME.2.npy.zst, ... */
        for (unsigned k = 2; af_bw_has(bw, name); k++) {
            char base[160];
            af_bundle_out_name(s->outputs[i].backend ? s->outputs[i].backend : "", base, sizeof base);
            base[strlen(base) - strlen(".npy.zst")] = 0;
            snprintf(name, sizeof name, "%.140s.%u.npy.zst", base, k);
        }
        st = af_bw_output(bw, name, &s->outputs[i]);
        if (st == AF_OK && !(bw->out_files[i] = af_strdup(name)))
            st = af_error_set(bw->err, AF_ERR_NOMEM, "out of memory");
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
    if (st == AF_OK) {
        st = af_bw_case_json(bw, final, extra);
    } else {
        cJSON_Delete(extra);
    }
    return st;
}

af_status af_bundle_write(const char *crashes_dir, const af_bundle_spec *spec, char *path, size_t path_len,
                          af_error *err) {
    static atomic_uint af_bundle_counter;
    AF_RETURN_ERROR_IF(!crashes_dir || !spec || !spec->c, err, AF_ERR_INVALID, "af_bundle_write: missing argument");
    AF_RETURN_ERROR_IF(!spec->input && spec->input_len, err, AF_ERR_INVALID, "af_bundle_write: input_len without input");
    char name[64], final[PATH_MAX];
    af_bundle_name(spec->kind, spec->signature, name, sizeof name);
    AF_TRY(af_bundle_join(final, sizeof final, crashes_dir, name, err));
    if (path && path_len) snprintf(path, path_len, "%s", final);
    AF_TRY(af_bundle_mkdirs(crashes_dir, err));
    struct stat st;
    AF_RETURN_ERROR_IF(lstat(final, &st) == 0, err, AF_ERR_EXISTS, "%s: already stored", final);
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

    bw.cap_files = 2 * spec->n_outputs + 8;
    bw.files = af_calloc(bw.cap_files, sizeof *bw.files);
    bw.out_files = af_calloc(spec->n_outputs + 1, sizeof *bw.out_files);
    bw.err_files = af_calloc(spec->n_outputs + 1, sizeof *bw.err_files);
    af_status status = AF_OK;
    if (!bw.files || !bw.out_files || !bw.err_files) {
        cJSON_Delete(extra);
        status = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", final);
    } else {
        status = af_bw_files(&bw, final, extra);
    }
    if (status == AF_OK) {
        af_bundle_sync_dir(bw.tmp);
        if (af_bundle_rename_noreplace(bw.tmp, final) != 0) {
            int e = errno;
            if (e == EEXIST || e == ENOTEMPTY) {
                status = af_error_set(err, AF_ERR_EXISTS, "%s: already stored", final);
            } else {
                status = af_error_set(err, AF_ERR_IO, "%s: cannot rename %s into place: %s", final, bw.tmp,
                                      strerror(e));
            }
        } else {
            af_bundle_sync_dir(crashes_dir);
        }
    }
    if (status != AF_OK) af_bundle_rmtree(bw.tmp);
    for (size_t i = 0; bw.files && i < bw.n_files; i++) af_free(bw.files[i]);
    for (size_t i = 0; bw.out_files && i < spec->n_outputs; i++) af_free(bw.out_files[i]);
    for (size_t i = 0; bw.err_files && i < spec->n_outputs; i++) af_free(bw.err_files[i]);
    af_free(bw.files);
    af_free(bw.out_files);
    af_free(bw.err_files);
    return status;
}

/* --- reading case.json --------------------------------------------------------------------- */

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
        af_br_fail(r, field, "unknown kind (ok, nan_mismatch, inf_mismatch, masked_row_nan, diverge, error, "
                             "crash, timeout)");
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
    AF_BR_N(n_diverge);
    AF_BR_N(n_unstable);
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
    if (!b->recs || !b->rec_names || !b->rec_files) {
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
        (void)af_br_string(r, be, "error", fn);
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
        if (r->st != AF_OK) return;
        bool nomem = !(b->rec_names[i - 1] = af_strdup(name));
        if (file && af_bundle_is_file(b->dir, file)) {
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
    if (!to) return;
    if (!cJSON_IsObject(to)) {
        af_br_fail(r, "tolerance", "expected an object");
        return;
    }
    b->has_tol = true;
    b->tol.atol = af_br_double(r, to, "atol", "tolerance.atol", 0.0);
    b->tol.rtol = af_br_double(r, to, "rtol", "tolerance.rtol", 0.0);
    b->tol.fudge = af_br_double(r, to, "fudge", "tolerance.fudge", 4.0); /* af_oracle_opts_default's */
    const cJSON *h = af_br_get(to, "honest");
    if (h && !cJSON_IsBool(h)) af_br_fail(r, "tolerance.honest", "expected true or false");
    b->tol.honest = h && cJSON_IsTrue(h);
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
        if (!af_bundle_is_file(b->dir, it->valuestring) && r->st == AF_OK)
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
    if (r->st != AF_OK) return r->st;
    b->who = af_strdup(who ? who : "");
    if (rel) b->relation = af_strdup(rel);
    if (!b->who || (rel && !b->relation)) return af_error_set(r->err, AF_ERR_NOMEM, "%s: out of memory", r->file);
    af_br_backends(r, root, b);
    af_br_tolerance(r, root, b);
    af_br_files(r, root, b);
    return r->st;
}

af_status af_bundle_read(const char *dir, af_bundle **out, af_error *err) {
    *out = NULL;
    char path[PATH_MAX];
    AF_TRY(af_bundle_join(path, sizeof path, dir, "case.json", err));
    char *text = NULL;
    size_t len = 0;
    AF_TRY(af_bundle_slurp(path, AF_BUNDLE_MAX_JSON, &text, &len, err));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        unsigned line = 1;
        for (const char *p = text; end && p < end && p < text + len; p++) line += *p == '\n';
        af_status st = af_error_set(err, AF_ERR_FORMAT, "%s: malformed JSON at line %u", path, line);
        af_free(text);
        return st;
    }
    /* cJSON stops after the first value; anything but white space after it is damage */
    while (end && end < text + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
    bool trailing = end && end < text + len;
    af_free(text);
    if (trailing) {
        cJSON_Delete(root);
        return af_error_set(err, AF_ERR_FORMAT, "%s: text after the JSON object", path);
    }
    af_bundle *b = af_calloc(1, sizeof *b);
    af_status st = AF_ERR_NOMEM;
    if (b) b->dir = af_strdup(dir);
    if (!b || !b->dir) {
        af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", path);
    } else {
        af_br r = {path, err, AF_OK};
        st = af_br_root(&r, root, b);
    }
    cJSON_Delete(root);
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
    }
    af_free(b->recs);
    af_free(b->rec_names);
    af_free(b->rec_files);
    af_free(b->who);
    af_free(b->relation);
    af_free(b->dir);
    af_free(b);
}

const af_case *af_bundle_case(const af_bundle *b) { return &b->c; }
const char *af_bundle_dir(const af_bundle *b) { return b->dir; }
af_kind af_bundle_kind(const af_bundle *b) { return b->kind; }
uint64_t af_bundle_signature(const af_bundle *b) { return b->signature; }
const char *af_bundle_who(const af_bundle *b) { return b->who; }
const char *af_bundle_relation(const af_bundle *b) { return b->relation; }
size_t af_bundle_record_count(const af_bundle *b) { return b->n_recs; }

const af_bundle_record *af_bundle_record_at(const af_bundle *b, size_t i) {
    return i < b->n_recs ? &b->recs[i] : NULL;
}

bool af_bundle_has_tolerance(const af_bundle *b, af_tolerance *tol) {
    if (b->has_tol && tol) *tol = b->tol;
    return b->has_tol;
}

/* --- loading arrays ------------------------------------------------------------------------ */

static af_status af_bundle_load_array(const af_bundle *b, const char *name, af_array *a, char *path, size_t path_len,
                                      af_error *err) {
    AF_TRY(af_bundle_join(path, path_len, b->dir, name, err));
    return af_npy_read_zst(path, a, err);
}

static af_status af_bundle_shape_error(const char *path, const af_array *a, const size_t *want, int nd,
                                       af_error *err) {
    char got_s[160], want_s[160];
    af_bundle_shape_str(got_s, sizeof got_s, a->shape, a->ndim);
    af_bundle_shape_str(want_s, sizeof want_s, want, nd);
    return af_error_set(err, AF_ERR_FORMAT, "%s: shape %s does not match the case %s", path, got_s, want_s);
}

static bool af_bundle_same_shape(const af_array *a, const size_t *want, int nd) {
    if (a->ndim != nd) return false;
    for (int d = 0; d < nd; d++)
        if (a->shape[d] != want[d]) return false;
    return true;
}

/* x as the view's dtype would store it: what reading it back must give. */
static double af_bundle_as_stored(af_dtype dt, double x) {
    uint8_t tmp[8];
    af_dtype_store(dt, tmp, 0, x);
    return af_dtype_load(dt, tmp, 0);
}

/* Writes array element (i0..i3) (dims of size 1 read at 0) into view element (i0..i3) for
 * every index below ext, rounding once to the view's dtype. With check set, reads every
 * element back instead and reports whether it holds that value: where the case stores a
 * dim once (stride 0), values that differ along it cannot be represented. */
static bool af_bundle_copy_in(const af_array *a, const size_t ashape[4], const af_view *v, const size_t ext[4],
                              bool check) {
    size_t es = af_dtype_size(a->dtype), st[4];
    size_t s = 1;
    for (int d = 3; d >= 0; d--) {
        st[d] = ashape[d] == 1 ? 0 : s;
        s *= ashape[d];
    }
    for (size_t i0 = 0; i0 < ext[0]; i0++)
        for (size_t i1 = 0; i1 < ext[1]; i1++)
            for (size_t i2 = 0; i2 < ext[2]; i2++)
                for (size_t i3 = 0; i3 < ext[3]; i3++) {
                    size_t e = i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
                    double x = af_dtype_load(a->dtype, a->data, e * es);
                    if (!check) {
                        af_view_set(v, i0, i1, i2, i3, x);
                        continue;
                    }
                    double want = af_bundle_as_stored(v->dtype, x), got = af_view_get(v, i0, i1, i2, i3);
                    if (!(got == want || (isnan(got) && isnan(want)))) return false;
                }
    return true;
}

static bool af_bundle_view_broadcasts(const af_view *v) {
    for (int d = 0; d < 4; d++)
        if (v->nb[d] == 0 && v->ne[d] > 1) return true;
    return false;
}

/* q, k or v: exactly [B, H, S, D]. */
static af_status af_bundle_fill_qkv(const af_bundle *b, const char *name, const af_view *v, af_error *err) {
    af_array a;
    char path[PATH_MAX];
    AF_TRY(af_bundle_load_array(b, name, &a, path, sizeof path, err));
    af_status st = AF_OK;
    if (!af_bundle_same_shape(&a, v->ne, 4)) {
        st = af_bundle_shape_error(path, &a, v->ne, 4, err);
    } else {
        af_bundle_copy_in(&a, a.shape, v, v->ne, false);
        if (af_bundle_view_broadcasts(v) && !af_bundle_copy_in(&a, a.shape, v, v->ne, true))
            st = af_error_set(err, AF_ERR_FORMAT, "%s: values differ along a dimension the case broadcasts", path);
    }
    af_array_free(&a);
    return st;
}

/* A mask: up to 4-D, aligned to [B, Hq, Sq, Sk] from the right like numpy broadcasting;
 * each dim is 1 (read at index 0) or the case's extent for that dim (1 where the case's
 * mask broadcasts). */
static af_status af_bundle_fill_mask(const af_bundle *b, const char *name, const af_view *v, const af_mask_spec *m,
                                     bool additive, af_error *err) {
    af_array a;
    char path[PATH_MAX];
    AF_TRY(af_bundle_load_array(b, name, &a, path, sizeof path, err));
    size_t ext[4], ashape[4] = {1, 1, 1, 1};
    for (int d = 0; d < 4; d++) ext[d] = (m->dims & (1u << d)) ? v->ne[d] : 1;
    bool ok = a.ndim <= 4;
    for (int k = 0; ok && k < a.ndim; k++) ashape[4 - a.ndim + k] = a.shape[k];
    for (int d = 0; ok && d < 4; d++) ok = ashape[d] == 1 || ashape[d] == ext[d];
    af_status st = AF_OK;
    if (!ok) {
        st = af_bundle_shape_error(path, &a, ext, 4, err);
    } else if (additive && a.dtype == AF_BOOL) {
        st = af_error_set(err, AF_ERR_FORMAT, "%s: an additive mask must hold floats, not bool", path);
    } else {
        af_bundle_copy_in(&a, ashape, v, ext, false);
    }
    af_array_free(&a);
    return st;
}

af_status af_bundle_load_inputs(const af_bundle *b, af_inputs *in, af_error *err) {
    const af_case *c = &b->c;
    static const char *const qkv[3] = {"q.npy.zst", "k.npy.zst", "v.npy.zst"};
    bool have[3], all = true;
    for (int w = 0; w < 3; w++) all &= have[w] = af_bundle_is_file(b->dir, qkv[w]);
    bool have_am = c->amask.present && af_bundle_is_file(b->dir, "mask.npy.zst");
    bool have_bm = c->bmask.present && af_bundle_is_file(b->dir, "bool_mask.npy.zst");
    all &= have_am == c->amask.present && have_bm == c->bmask.present;
    /* everything given: only lay out the storage; else draw what is missing from the case
     * and overwrite what is given */
    if (all) {
        AF_TRY(af_inputs_alloc(in, c, err));
    } else {
        AF_TRY(af_inputs_generate(in, c, err));
    }
    const af_case_tensors *t = af_inputs_get(in);
    const af_view *views[3] = {&t->qv, &t->kv, &t->vv};
    for (int w = 0; w < 3; w++)
        if (have[w]) AF_TRY(af_bundle_fill_qkv(b, qkv[w], views[w], err));
    if (have_am) AF_TRY(af_bundle_fill_mask(b, "mask.npy.zst", &t->am, &c->amask, true, err));
    if (have_bm) AF_TRY(af_bundle_fill_mask(b, "bool_mask.npy.zst", &t->bm, &c->bmask, false, err));
    return AF_OK;
}

/* name as float64 [B, Hq, Sq, Dv]. */
static af_status af_bundle_load_f64(const af_bundle *b, const char *name, double **out, af_error *err) {
    *out = NULL;
    const af_case *c = &b->c;
    size_t want[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    af_array a;
    char path[PATH_MAX];
    AF_TRY(af_bundle_load_array(b, name, &a, path, sizeof path, err));
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

af_status af_bundle_load_expected(const af_bundle *b, double **out, af_error *err) {
    *out = NULL;
    if (!af_bundle_is_file(b->dir, "expected.npy.zst")) return AF_OK;
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
