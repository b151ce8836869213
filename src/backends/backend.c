/* backend.c - the registry of built-in backends and the generic instance wrapper. The
 * registry knows names only; prefixed names (plugin:, worker:, target:) are
 * backend_spec.c's, which sits above this file, plugin.c and worker.c. */
#include "attnfuzz/backend.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"

const char *const af_cap_names[AF_CAP_COUNT] = {
    "f32",     "f16",   "bf16",   "tf32",    "gqa",    "cross",   "dv",      "scale",      "softcap",
    "amask",   "bmask", "causal", "padding", "window", "dropout", "strided", "mask_dtype", "backward",
    "packed",  "paged", "sinks",  "alibi",   "e4m3",   "e5m2",    "fp8_kv",  "lse",
};
_Static_assert(sizeof af_cap_names / sizeof af_cap_names[0] == AF_CAP_COUNT, "names");

const char *const af_margin_names[AF_MARGIN_COUNT] = {"before", "after", "null_page", "page_tail"};
_Static_assert(sizeof af_margin_names / sizeof af_margin_names[0] == AF_MARGIN_COUNT, "names");

int af_margin_from_name(const char *name) {
    for (int i = 0; i < AF_MARGIN_COUNT; i++)
        if (strcmp(name, af_margin_names[i]) == 0) return i;
    return -1;
}
_Static_assert(AF_CAP_ALL == (1u << AF_CAP_COUNT) - 1, "every capability has a name");

struct af_backend {
    const af_backend_vtable *vt;
    void *state;
    char name[256];
};

static const af_backend_vtable *const af_core_backends[] = {&af_backend_ref, &af_backend_explicit,
                                                             &af_backend_fused};
#define AF_CORE_COUNT (sizeof af_core_backends / sizeof af_core_backends[0])

#define AF_MAX_REGISTERED 16
static const af_backend_vtable *af_registered[AF_MAX_REGISTERED];
static size_t af_registered_count;

size_t af_backend_builtin_count(void) { return AF_CORE_COUNT + af_mutant_count + af_registered_count; }

const af_backend_vtable *af_backend_builtin(size_t i) {
    if (i < AF_CORE_COUNT) return af_core_backends[i];
    i -= AF_CORE_COUNT;
    if (i < af_mutant_count) return af_mutant_vtables[i];
    i -= af_mutant_count;
    return i < af_registered_count ? af_registered[i] : NULL;
}

const af_backend_vtable *af_backend_builtin_find(const char *name) {
    for (size_t i = 0; i < af_backend_builtin_count(); i++)
        if (strcmp(af_backend_builtin(i)->name, name) == 0) return af_backend_builtin(i);
    return NULL;
}

bool af_bwd_all_dropped(const af_case *c, af_grads *gr) {
    if (c->dropout_p < 1.0) return false;
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        af_tensor *t = af_grads_at(gr, k);
        if (t->data) memset(t->data, 0, af_tensor_numel(t) * af_dtype_size(t->dtype));
    }
    return true;
}

af_status af_backend_register(const af_backend_vtable *vt, af_error *err) {
    AF_RETURN_ERROR_IF(!vt || !vt->run || !vt->name, err, AF_ERR_INVALID, "backend table without a name or run function");
    AF_RETURN_ERROR_IF(af_backend_builtin_find(vt->name), err, AF_ERR_EXISTS, "a backend named \"%s\" exists",
                       vt->name);
    AF_RETURN_ERROR_IF(af_registered_count == AF_MAX_REGISTERED, err, AF_ERR_INVALID, "too many registered backends");
    af_registered[af_registered_count++] = vt;
    return AF_OK;
}

void af_blas_single_thread(void) {
    static int done;
    if (!done) {
        openblas_set_num_threads(1);
        done = 1;
    }
}

af_status af_scratch_state_create(const char *args, void **state, af_error *err) {
    (void)args;
    *state = af_calloc(1, sizeof(af_scratch));
    AF_RETURN_ERROR_IF(!*state, err, AF_ERR_NOMEM, "out of memory");
    return AF_OK;
}

void af_scratch_state_destroy(void *state) {
    if (!state) return;
    af_scratch_release(state);
    af_free(state);
}

af_status af_bwd_bufs_get(af_scratch *ws, int slot0, const af_case *c, size_t rows, size_t cols, af_bwd_bufs *b,
                          af_error *err) {
    const size_t Sq = c->q_len, Sk = c->kv_len, D = c->head_dim, Dv = c->v_head_dim;
    int s = slot0;
#define AF_BWD_GET(f, T, n)                                                                        \
    do {                                                                                           \
        if (!(b->f = AF_SCRATCH(ws, s++, T, n, err))) return AF_ERR_NOMEM;                         \
    } while (0)
    AF_BWD_GET(q, float, Sq * D);
    AF_BWD_GET(qz, float, Sq * D);
    AF_BWD_GET(qsaved, float, Sq * D);
    AF_BWD_GET(qbad, uint32_t, Sq);
    AF_BWD_GET(k, float, Sk * D);
    AF_BWD_GET(kz, float, Sk * D);
    AF_BWD_GET(ksaved, float, Sk * D);
    AF_BWD_GET(kbad, uint32_t, Sk);
    AF_BWD_GET(v, float, Sk * Dv);
    AF_BWD_GET(vsaved, float, Sk * Dv);
    AF_BWD_GET(vbad, uint32_t, Sk);
    AF_BWD_GET(dO, float, Sq * Dv);
    AF_BWD_GET(doz, float, Sq * Dv);
    AF_BWD_GET(dosaved, float, Sq * Dv);
    AF_BWD_GET(dobad, uint32_t, Sq);
    AF_BWD_GET(dk, float, Sk * D);
    AF_BWD_GET(dv, float, Sk * Dv);
    AF_BWD_GET(S, float, rows * cols);
    AF_BWD_GET(spre, float, rows * cols);
    AF_BWD_GET(add, float, cols);
    AF_BWD_GET(dP, float, rows * cols);
    AF_BWD_GET(dq, float, rows * D);
    AF_BWD_GET(live, uint8_t, rows * cols);
    AF_BWD_GET(keep, uint8_t, rows * cols);
#undef AF_BWD_GET
    AF_ASSERT(s == slot0 + AF_BWD_NSLOTS);
    return AF_OK;
}

char *openblas_get_corename(void);

const char *af_blas_better_coretype(void) {
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    const char *core = openblas_get_corename();
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai",
                                          "Coppermine", "Northwood", "Banias", "unknown"};
    bool is_generic = false;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (core && strcmp(core, generic[i]) == 0) is_generic = true;
    if (!is_generic) return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

af_status af_backend_open_vtable(const af_backend_vtable *vt, const char *args, af_backend **out, af_error *err) {
    *out = NULL;
    AF_RETURN_ERROR_IF(!vt || !vt->run, err, AF_ERR_INVALID, "backend has no run function");
    af_blas_single_thread();
    af_backend *be = af_calloc(1, sizeof *be);
    AF_RETURN_ERROR_IF(!be, err, AF_ERR_NOMEM, "out of memory");
    be->vt = vt;
    snprintf(be->name, sizeof be->name, "%s", vt->name);
    if (vt->create) {
        af_status st = vt->create(args, &be->state, err);
        if (st != AF_OK) {
            af_free(be);
            return st;
        }
    }
    *out = be;
    return AF_OK;
}

af_status af_backend_open_state(const af_backend_vtable *vt, void *state, af_backend **out, af_error *err) {
    *out = NULL;
    af_blas_single_thread();
    af_backend *be = af_calloc(1, sizeof *be);
    AF_RETURN_ERROR_IF(!be, err, AF_ERR_NOMEM, "out of memory");
    be->vt = vt;
    be->state = state;
    snprintf(be->name, sizeof be->name, "%s", vt->name);
    *out = be;
    return AF_OK;
}

void af_backend_close(af_backend *be) {
    if (!be) return;
    if (be->vt->destroy) be->vt->destroy(be->state);
    af_free(be);
}

const char *af_backend_name(const af_backend *be) { return be->name; }
const char *af_backend_version(const af_backend *be) { return be->vt->version ? be->vt->version : ""; }
const af_backend_vtable *af_backend_vt(const af_backend *be) { return be->vt; }
const af_backend_ext *af_backend_ext_of(const af_backend *be) { return be->vt->ext ? be->vt->ext(be->state) : NULL; }

size_t af_backend_batch_max(const af_backend *be) { return be->vt->batch_max ? be->vt->batch_max(be->state) : 1; }

af_status af_backend_batch_begin(af_backend *be, const af_case_tensors *const *in, size_t n, af_error *err) {
    AF_RETURN_ERROR_IF(!be->vt->batch_begin || n > af_backend_batch_max(be), err, AF_ERR_INVALID,
                       "%s: a batch of %zu cases (it takes %zu)", be->name, n, af_backend_batch_max(be));
    return be->vt->batch_begin(be->state, in, n, err);
}

af_status af_backend_batch_end(af_backend *be, af_tensor *const *outs, af_grads *const *grads, af_run_result *res,
                               af_error *err) {
    return be->vt->batch_end(be->state, outs, grads, res, err);
}

int af_backend_batch_push(af_backend *be) { return be->vt->batch_push ? be->vt->batch_push(be->state) : -1; }

uint32_t af_case_required_caps(const af_case *c) {
    uint32_t caps = c->dtype == AF_F32 ? AF_CAP_F32 : c->dtype == AF_F16 ? AF_CAP_F16 : AF_CAP_BF16;
    if (c->allow_tf32) caps |= AF_CAP_TF32;
    if (c->q_heads != c->kv_heads) caps |= AF_CAP_GQA;
    /* Sq != Sk; in a serving case, some row's queries and keys (a segment is its own attention) */
    for (uint32_t b = 0; b < (af_case_has_lens(c) ? c->batch : 1); b++)
        if (af_case_seg_q(c, b) != af_case_seg_k(c, b)) caps |= AF_CAP_CROSS;
    if (c->head_dim != c->v_head_dim) caps |= AF_CAP_DV;
    if (c->scale_set) caps |= AF_CAP_SCALE;
    if (c->softcap > 0.0) caps |= AF_CAP_SOFTCAP;
    if (c->amask.present) caps |= AF_CAP_AMASK;
    if (c->amask.present && c->amask.dtype != c->dtype) caps |= AF_CAP_MASK_DTYPE;
    if (c->bmask.present) caps |= AF_CAP_BMASK;
    if (c->causal) caps |= AF_CAP_CAUSAL;
    if (c->key_padding) caps |= AF_CAP_PADDING;
    if (af_case_has_window(c)) caps |= AF_CAP_WINDOW;
    if (c->dropout_p > 0.0) caps |= AF_CAP_DROPOUT;
    for (int t = 0; t < AF_QKV_COUNT; t++)
        if (c->t[t].perm || c->t[t].pad || c->t[t].bcast != AF_BCAST_NONE) caps |= AF_CAP_STRIDED;
    if ((c->amask.present && c->amask.expanded) || (c->bmask.present && c->bmask.expanded)) caps |= AF_CAP_STRIDED;
    if (c->bwd.grads) caps |= AF_CAP_BACKWARD;
    if (c->serve.forms & AF_SERVE_PACKED) caps |= AF_CAP_PACKED;
    if (c->serve.forms & AF_SERVE_PAGED) caps |= AF_CAP_PAGED;
    if (c->serve.forms & AF_SERVE_SINKS) caps |= AF_CAP_SINKS;
    if (c->serve.forms & AF_SERVE_ALIBI) caps |= AF_CAP_ALIBI;
    if (c->fp8.fmt == AF_FP8_E4M3) caps |= AF_CAP_E4M3;
    if (c->fp8.fmt == AF_FP8_E5M2) caps |= AF_CAP_E5M2;
    if (c->fp8.kv_only) caps |= AF_CAP_FP8_KV;
    return caps;
}

uint32_t af_backend_caps(const af_backend *be) {
    uint32_t caps = be->vt->caps & AF_CAP_ALL;
    return be->vt->run_backward ? caps : caps & ~(uint32_t)AF_CAP_BACKWARD;
}

uint32_t af_backend_traits(const af_backend *be) {
    const af_backend_ext *e = af_backend_ext_of(be);
    return e ? e->traits : be->vt->traits;
}

bool af_backend_supports(const af_backend *be, const af_case *c, char *why, size_t why_len) {
    uint32_t missing = af_case_required_caps(c) & ~af_backend_caps(be);
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        /* a tensor in THD or page-cache form travels in no layout of section 3 */
        bool physical = (c->serve.forms & AF_SERVE_PACKED) || (t != AF_Q && af_case_has_lens(c));
        if (!physical && !(be->vt->layouts & (1u << c->t[t].layout))) {
            if (why) snprintf(why, why_len, "layout %s", af_layout_names[c->t[t].layout]);
            return false;
        }
    }
    if (missing) {
        if (why) snprintf(why, why_len, "%s", af_cap_names[__builtin_ctz(missing)]);
        return false;
    }
    return !be->vt->supports || be->vt->supports(be->state, c, why, why_len);
}

void af_backend_out_shape(const af_backend *be, const af_case *c, af_tensor *out) {
    size_t ne[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    af_tensor_contiguous(out, be->vt->out_dtype, 4, ne);
}

void af_case_grad_shape(const af_case *c, int g, size_t ne[4]) {
    size_t H = g == 0 ? c->q_heads : c->kv_heads, S = g == 0 ? c->q_len : c->kv_len;
    ne[0] = c->batch, ne[1] = H, ne[2] = S, ne[3] = g == 2 ? c->v_head_dim : c->head_dim;
    if (g == 3) { /* the additive mask's broadcast shape */
        size_t full[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
        for (int d = 0; d < 4; d++) ne[d] = (c->amask.dims & (1u << d)) ? full[d] : 1;
    }
}

void af_backend_grads_shape(const af_backend *be, const af_case *c, af_grads *g) {
    memset(g, 0, sizeof *g);
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        if (!(c->bwd.grads & (1u << k))) continue;
        size_t ne[4];
        af_case_grad_shape(c, k, ne);
        af_tensor_contiguous(af_grads_at(g, k), be->vt->out_dtype, 4, ne);
    }
}

/* Is out the [B, Hq, Sq, Dv] out_dtype tensor case c needs, and lse (NULL: none asked) its
 * F64 [B, Hq, Sq] statistics? AF_ERR_INVALID when not. */
static af_status af_backend_check_out(const af_backend *be, const af_case *c, const af_tensor *out,
                                      const af_tensor *lse, af_error *err) {
    AF_RETURN_ERROR_IF(out->ndim != 4 || out->dtype != be->vt->out_dtype || !out->data || out->ne[0] != c->batch ||
                           out->ne[1] != c->q_heads || out->ne[2] != c->q_len || out->ne[3] != c->v_head_dim,
                       err, AF_ERR_INVALID, "%s: output tensor has the wrong shape or dtype", be->name);
    AF_RETURN_ERROR_IF(lse && (lse->ndim != 3 || lse->dtype != AF_F64 || !lse->data || lse->ne[0] != c->batch ||
                               lse->ne[1] != c->q_heads || lse->ne[2] != c->q_len),
                       err, AF_ERR_INVALID, "%s: lse tensor has the wrong shape or dtype", be->name);
    return AF_OK;
}

/* out as af_backend_check_out wants it, and g with data for exactly the gradients case c
 * asks for, each of its shape; AF_ERR_UNSUPPORTED for a backend without a backward. */
static af_status af_backend_check_grads(const af_backend *be, const af_case *c, const af_tensor *out,
                                        const af_grads *g, af_error *err) {
    AF_RETURN_ERROR_IF(!be->vt->run_backward, err, AF_ERR_UNSUPPORTED, "%s: no backward", be->name);
    AF_TRY(af_backend_check_out(be, c, out, NULL, err));
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        const af_tensor *t = af_grads_get(g, k);
        if (!(c->bwd.grads & (1u << k))) {
            AF_RETURN_ERROR_IF(t->data, err, AF_ERR_INVALID, "%s: %s given but not asked", be->name, af_grad_names[k]);
            continue;
        }
        size_t ne[4];
        af_case_grad_shape(c, k, ne);
        AF_RETURN_ERROR_IF(t->ndim != 4 || t->dtype != be->vt->out_dtype || !t->data || t->ne[0] != ne[0] ||
                               t->ne[1] != ne[1] || t->ne[2] != ne[2] || t->ne[3] != ne[3],
                           err, AF_ERR_INVALID, "%s: gradient %s has the wrong shape or dtype", be->name,
                           af_grad_names[k]);
    }
    return AF_OK;
}

af_status af_backend_run(af_backend *be, const af_case_tensors *in, af_tensor *out, af_error *err) {
    AF_TRY(af_backend_check_out(be, in->c, out, NULL, err));
    af_status st = be->vt->run(be->state, in, out, err);
    if (st != AF_OK) af_error_prefix(err, "%s", be->name);
    return st;
}

/* A run alone with its facts: through the backend's run_result where it has one, else its
 * run, run_lse or run_backward with the facts an in-process run has (none but its status). */
af_status af_backend_execute(af_backend *be, const af_case_tensors *in, af_tensor *out, af_grads *g, af_tensor *lse,
                             af_run_result *res, af_error *err) {
    memset(res, 0, sizeof *res);
    res->compile_s = res->run_s = -1.0;
    if (!be->vt->run_result)
        res->st = g     ? af_backend_run_backward(be, in, out, g, &res->err)
                  : lse ? af_backend_run_lse(be, in, out, lse, &res->err)
                        : af_backend_run(be, in, out, &res->err);
    else {
        af_tensor *asked = !g && lse && (be->vt->caps & AF_CAP_LSE) ? lse : NULL; /* as af_backend_run_lse */
        res->st = g ? af_backend_check_grads(be, in->c, out, g, &res->err)
                    : af_backend_check_out(be, in->c, out, asked, &res->err);
        if (lse) lse->ndim = 0; /* until statistics come back */
        if (res->st == AF_OK) {
            res->st = be->vt->run_result(be->state, in, out, g, asked, res, &res->err);
            if (res->st != AF_OK) af_error_prefix(&res->err, "%s", be->name);
        }
    }
    res->lse = res->st == AF_OK && lse && lse->ndim == 3 ? lse : NULL;
    if (res->st != AF_OK) *err = res->err;
    return res->st;
}

void af_backend_lse_shape(const af_case *c, af_tensor *lse) {
    size_t ne[3] = {c->batch, c->q_heads, c->q_len};
    af_tensor_contiguous(lse, AF_F64, 3, ne);
    lse->data = NULL;
}

void af_backend_lse_f32(af_tensor *lse) {
    void *data = lse->data;
    size_t ne[3] = {lse->ne[0], lse->ne[1], lse->ne[2]};
    af_tensor_contiguous(lse, AF_F32, 3, ne);
    lse->data = data;
}

af_status af_backend_run_lse(af_backend *be, const af_case_tensors *in, af_tensor *out, af_tensor *lse, af_error *err) {
    if (!be->vt->run_lse || !(be->vt->caps & AF_CAP_LSE)) {
        lse->ndim = 0;
        return af_backend_run(be, in, out, err);
    }
    AF_TRY(af_backend_check_out(be, in->c, out, lse, err));
    af_status st = be->vt->run_lse(be->state, in, out, lse, err);
    if (st != AF_OK) af_error_prefix(err, "%s", be->name);
    return st;
}

af_status af_backend_run_backward(af_backend *be, const af_case_tensors *in, af_tensor *out, af_grads *g,
                                  af_error *err) {
    AF_TRY(af_backend_check_grads(be, in->c, out, g, err));
    af_status st = be->vt->run_backward(be->state, in, out, g, err);
    if (st != AF_OK) af_error_prefix(err, "%s", be->name);
    return st;
}
