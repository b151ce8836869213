/* plugin.h - the plugin ABI: an attention implementation in a shared library, run
 * in-process as `--backend plugin:PATH.so[:ARGS]` (docs/design.md section 7).
 *
 * C only and self-contained (include it without the rest of attnfuzz). A plugin exports
 * one symbol, `attnfuzz_plugin`, a function returning its table. The table says which
 * ABI it was built for; attnfuzz refuses a plugin whose abi_version it does not speak.
 *
 *   #include <attnfuzz/plugin.h>
 *   static int my_run(void *state, const af_plugin_case *c, const af_plugin_inputs *in,
 *                     af_plugin_tensor *out, char *err, size_t err_len) { ... return AF_PLUGIN_OK; }
 *   static const af_plugin table = {AF_PLUGIN_ABI_VERSION, "mine", "1.0", AF_PLUGIN_CAP_F32,
 *                                   1u << AF_PLUGIN_LAYOUT_BHSD, NULL, NULL, my_run};
 *   const af_plugin *attnfuzz_plugin(void) { return &table; }
 *
 * Build: cc -shared -fPIC -I include mine.c -o mine.so; run: attnfuzz fuzz --backend plugin:./mine.so */
#ifndef ATTNFUZZ_PLUGIN_H
#define ATTNFUZZ_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AF_PLUGIN_ABI_VERSION 1u
#define AF_PLUGIN_ENTRY "attnfuzz_plugin"

/* Element types (the same numbers as af_dtype). */
enum { AF_PLUGIN_F32 = 0, AF_PLUGIN_F16 = 1, AF_PLUGIN_BF16 = 2, AF_PLUGIN_F64 = 3, AF_PLUGIN_BOOL = 4 };

/* Physical layouts of Q, K, V (the same numbers as af_layout; see docs/design.md section 3). */
enum {
    AF_PLUGIN_LAYOUT_BHSD = 0,
    AF_PLUGIN_LAYOUT_BSHD = 1,
    AF_PLUGIN_LAYOUT_SBHD = 2,
    AF_PLUGIN_LAYOUT_BSD = 3,
    AF_PLUGIN_LAYOUT_CHANNELS_FIRST = 4,
    AF_PLUGIN_LAYOUT_QKV_BS3HD = 5,
    AF_PLUGIN_LAYOUT_QKV_BSH3D = 6,
    AF_PLUGIN_LAYOUT_QKV_CHANNELS_FIRST = 7
};

/* Capability bits (the same as AF_CAP_* in backend.h): a case needing a bit the plugin
 * lacks is never sent to it. */
enum {
    AF_PLUGIN_CAP_F32 = 1u << 0,
    AF_PLUGIN_CAP_F16 = 1u << 1,
    AF_PLUGIN_CAP_BF16 = 1u << 2,
    AF_PLUGIN_CAP_TF32 = 1u << 3,
    AF_PLUGIN_CAP_GQA = 1u << 4,
    AF_PLUGIN_CAP_CROSS = 1u << 5,   /* Sq != Sk */
    AF_PLUGIN_CAP_DV = 1u << 6,      /* D != Dv */
    AF_PLUGIN_CAP_SCALE = 1u << 7,   /* a scale other than 1/sqrt(D) */
    AF_PLUGIN_CAP_SOFTCAP = 1u << 8,
    AF_PLUGIN_CAP_AMASK = 1u << 9,
    AF_PLUGIN_CAP_BMASK = 1u << 10,
    AF_PLUGIN_CAP_CAUSAL = 1u << 11,
    AF_PLUGIN_CAP_PADDING = 1u << 12,
    AF_PLUGIN_CAP_WINDOW = 1u << 13,
    AF_PLUGIN_CAP_DROPOUT = 1u << 14,
    AF_PLUGIN_CAP_STRIDED = 1u << 15,
    AF_PLUGIN_CAP_MASK_DTYPE = 1u << 16,
    AF_PLUGIN_CAP_ALL = (1u << 17) - 1
};

/* A strided tensor: element (i0, ..., i_{ndim-1}) at data + sum(i_k * strides[k]) bytes. */
typedef struct af_plugin_tensor {
    void *data; /* read-only for inputs */
    int32_t dtype;
    int32_t ndim;
    int64_t shape[5];
    int64_t strides[5]; /* bytes; 0 on broadcast dims */
    int32_t layout;     /* Q, K, V: AF_PLUGIN_LAYOUT_*; masks and output: -1 */
} af_plugin_tensor;

/* What one execution computes (docs/design.md section 2). */
typedef struct af_plugin_case {
    uint32_t abi_version;
    int32_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, v_head_dim;
    int32_t dtype;      /* of Q, K, V: f32, f16 or bf16 */
    int32_t allow_tf32;
    double scale;       /* in effect (default 1/sqrt(head_dim) already applied) */
    int32_t scale_placement; /* 0 scores, 1 q, 2 k, 3 sqrt on q and k (explicit graphs) */
    double softcap;     /* 0 = off */
    int32_t causal;
    const int32_t *diag_offset; /* per batch row: the diagonal d(b, i) = i + diag_offset[b] */
    const int32_t *kv_valid;    /* per batch row: keys j >= kv_valid[b] are masked; NULL = none */
    int32_t window_left, window_right; /* -1 = unbounded */
    double dropout_p;
    uint64_t dropout_seed; /* keep(b,h,i,j): see rng.h (Philox4x32-10, counter {j/4, i, h, b}) */
    const char *case_json; /* the whole case, as in case.json's "case" */
} af_plugin_case;

typedef struct af_plugin_inputs {
    af_plugin_tensor q, k, v; /* physical layouts; packed layouts: one buffer, three views */
    int32_t has_additive_mask, has_bool_mask;
    af_plugin_tensor additive_mask; /* 4-D, broadcastable to [B, Hq, Sq, Sk] */
    af_plugin_tensor bool_mask;     /* 4-D, one byte per element, nonzero = attend */
} af_plugin_inputs;

/* run() returns one of these. */
enum { AF_PLUGIN_OK = 0, AF_PLUGIN_UNSUPPORTED = 1, AF_PLUGIN_ERROR = -1 };

typedef struct af_plugin {
    uint32_t abi_version; /* AF_PLUGIN_ABI_VERSION the plugin was built with */
    const char *name;
    const char *version;
    uint32_t caps;        /* AF_PLUGIN_CAP_* */
    uint32_t layouts;     /* bit l: layout l accepted */
    /* Optional: state from the text after "plugin:PATH.so:"; return nonzero and fill err
     * on failure. */
    int (*init)(const char *args, void **state, char *err, size_t err_len);
    void (*fini)(void *state); /* optional */
    /* Required: fill out, a contiguous [B, Hq, Sq, Dv] f32 tensor. On failure return
     * AF_PLUGIN_ERROR with a message in err (a finding of kind error), or
     * AF_PLUGIN_UNSUPPORTED when the case is beyond the plugin after all. */
    int (*run)(void *state, const af_plugin_case *c, const af_plugin_inputs *in, af_plugin_tensor *out, char *err,
               size_t err_len);
} af_plugin;

typedef const af_plugin *(*af_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
