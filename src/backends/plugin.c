/* plugin.c - `plugin:PATH.so[:ARGS]`: an implementation in a shared library, behind the
 * plugin ABI of include/attnfuzz/plugin.h, run in-process (a crash of the plugin ends the
 * process; an external worker is the isolated alternative). */
#include "attnfuzz/plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/mem.h"
#include "backends.h"

_Static_assert((unsigned)AF_PLUGIN_CAP_ALL == (unsigned)AF_CAP_FORWARD_ALL, "plugin capability bits follow backend.h");
_Static_assert((int)AF_PLUGIN_LAYOUT_QKV_CHANNELS_FIRST == (int)AF_LAYOUT_QKV_CHANNELS_FIRST, "plugin layouts follow case.h");
_Static_assert((int)AF_PLUGIN_BOOL == (int)AF_BOOL, "plugin dtypes follow dtype.h");

typedef struct af_plugin_host {
    af_backend_vtable vt; /* first: the backend's table points into this allocation */
    char name[256];
    void *dl;
    const af_plugin *pl;
    void *state;
    int32_t diag[AF_MAX_BATCH], valid[AF_MAX_BATCH];
} af_plugin_host;

static void af_plugin_tensor_from(af_plugin_tensor *p, const af_tensor *t, int32_t layout) {
    memset(p, 0, sizeof *p);
    p->data = t->data;
    p->dtype = (int32_t)t->dtype;
    p->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++) {
        p->shape[k] = (int64_t)t->ne[k];
        p->strides[k] = (int64_t)t->nb[k];
    }
    p->layout = layout;
}

/* A mask as a 4-D [B, Hq, Sq, Sk] tensor with stride 0 where it broadcasts. */
static void af_plugin_mask_from(af_plugin_tensor *p, const af_view *v) {
    memset(p, 0, sizeof *p);
    p->data = (void *)(uintptr_t)v->data;
    p->dtype = (int32_t)v->dtype;
    p->ndim = 4;
    for (int k = 0; k < 4; k++) {
        p->shape[k] = (int64_t)v->ne[k];
        p->strides[k] = (int64_t)v->nb[k];
    }
    p->layout = -1;
}

static af_status af_plugin_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    af_plugin_host *h = state;
    const af_case *c = in->c;
    af_plugin_case pc;
    memset(&pc, 0, sizeof pc);
    pc.abi_version = AF_PLUGIN_ABI_VERSION;
    pc.batch = (int32_t)c->batch, pc.q_heads = (int32_t)c->q_heads, pc.kv_heads = (int32_t)c->kv_heads;
    pc.q_len = (int32_t)c->q_len, pc.kv_len = (int32_t)c->kv_len;
    pc.head_dim = (int32_t)c->head_dim, pc.v_head_dim = (int32_t)c->v_head_dim;
    pc.dtype = (int32_t)c->dtype;
    pc.allow_tf32 = c->allow_tf32;
    pc.scale = af_case_scale(c);
    pc.scale_placement = (int32_t)c->placement;
    pc.softcap = c->softcap;
    pc.causal = c->causal;
    for (uint32_t b = 0; b < c->batch; b++) {
        h->diag[b] = af_case_diag_offset(c, b);
        h->valid[b] = (int32_t)af_case_valid_keys(c, b);
    }
    pc.diag_offset = h->diag;
    pc.kv_valid = c->key_padding ? h->valid : NULL;
    pc.window_left = c->window_left, pc.window_right = c->window_right;
    pc.dropout_p = c->dropout_p;
    pc.dropout_seed = c->dropout_seed;
    char *json = af_case_to_json(c);
    AF_RETURN_ERROR_IF(!json, err, AF_ERR_NOMEM, "out of memory");
    pc.case_json = json;

    af_plugin_inputs pi;
    memset(&pi, 0, sizeof pi);
    af_plugin_tensor_from(&pi.q, &in->q, (int32_t)c->t[AF_Q].layout);
    af_plugin_tensor_from(&pi.k, &in->k, (int32_t)c->t[AF_K].layout);
    af_plugin_tensor_from(&pi.v, &in->v, (int32_t)c->t[AF_V].layout);
    pi.has_additive_mask = c->amask.present;
    pi.has_bool_mask = c->bmask.present;
    if (c->amask.present) af_plugin_mask_from(&pi.additive_mask, &in->am);
    if (c->bmask.present) af_plugin_mask_from(&pi.bool_mask, &in->bm);
    af_plugin_tensor po;
    af_plugin_tensor_from(&po, out, -1);

    char msg[sizeof err->msg] = "";
    int rc = h->pl->run(h->state, &pc, &pi, &po, msg, sizeof msg);
    free(json);
    if (rc == AF_PLUGIN_OK) return AF_OK;
    msg[sizeof msg - 1] = 0;
    if (rc == AF_PLUGIN_UNSUPPORTED) return af_error_set(err, AF_ERR_UNSUPPORTED, "unsupported: %s", msg);
    return af_error_set(err, AF_ERR_BACKEND, "%s", msg[0] ? msg : "failed without a message");
}

static void af_plugin_destroy(void *state) {
    af_plugin_host *h = state;
    if (!h) return;
    if (h->pl && h->pl->fini) h->pl->fini(h->state);
    if (h->dl) dlclose(h->dl);
    af_free(h);
}

af_status af_plugin_open(const char *spec, af_backend **out, af_error *err) {
    /* plugin:PATH[:ARGS], PATH ending at the first ".so" followed by ':' or the end */
    const char *path = spec + strlen("plugin:");
    const char *so = strstr(path, ".so");
    while (so && so[3] != 0 && so[3] != ':') so = strstr(so + 1, ".so");
    size_t plen = so ? (size_t)(so + 3 - path) : strlen(path);
    const char *args = so && so[3] == ':' ? so + 4 : NULL;
    af_plugin_host *h = af_calloc(1, sizeof *h);
    AF_RETURN_ERROR_IF(!h, err, AF_ERR_NOMEM, "out of memory");
    char file[4096];
    snprintf(file, sizeof file, "%.*s", (int)plen, path);
    h->dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!h->dl) {
        af_error_set(err, AF_ERR_INVALID, "plugin %s: cannot load: %s", file, dlerror());
        af_plugin_destroy(h);
        return AF_ERR_INVALID;
    }
    af_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h->dl, AF_PLUGIN_ENTRY);
    h->pl = entry ? entry() : NULL;
    af_status st = AF_OK;
    if (!entry) {
        st = af_error_set(err, AF_ERR_INVALID, "plugin %s: no %s symbol", file, AF_PLUGIN_ENTRY);
    } else if (!h->pl || h->pl->abi_version != AF_PLUGIN_ABI_VERSION || !h->pl->run || !h->pl->name) {
        st = af_error_set(err, AF_ERR_INVALID, "plugin %s: ABI version %u, this attnfuzz speaks %u (or no run function)",
                          file, h->pl ? h->pl->abi_version : 0u, AF_PLUGIN_ABI_VERSION);
    } else if (h->pl->init) {
        char msg[sizeof err->msg] = "";
        if (h->pl->init(args, &h->state, msg, sizeof msg) != 0) {
            msg[sizeof msg - 1] = 0;
            st = af_error_set(err, AF_ERR_BACKEND, "plugin %s: init failed: %s", file, msg);
        }
    }
    if (st != AF_OK) {
        h->pl = st == AF_ERR_BACKEND ? NULL : h->pl; /* fini only after a successful init */
        af_plugin_destroy(h);
        return st;
    }
    snprintf(h->name, sizeof h->name, "plugin:%s", h->pl->name);
    h->vt.name = h->name;
    h->vt.version = h->pl->version ? h->pl->version : "";
    h->vt.summary = "a shared-library implementation (plugin ABI)";
    h->vt.caps = h->pl->caps & AF_CAP_FORWARD_ALL; /* the ABI is forward-only */
    h->vt.layouts = h->pl->layouts & AF_LAYOUTS_ALL;
    h->vt.out_dtype = AF_F32;
    h->vt.destroy = af_plugin_destroy;
    h->vt.run = af_plugin_run;
    st = af_backend_open_state(&h->vt, h, out, err);
    if (st != AF_OK) af_plugin_destroy(h);
    return st;
}
