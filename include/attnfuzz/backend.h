/* backend.h - one small vtable for every implementation of attention.
 *
 * A backend receives the physical tensors of a case (tensor.h) and writes the output
 * in canonical contiguous [B, Hq, Sq, Dv] order, in its out_dtype (F64 for ref, F32 for
 * the others). A backend whose out_dtype is F64 may instead write F32 and say so by
 * setting out->dtype and out->nb (workers return whichever dtype they computed in).
 * Capability bits let the fuzzer send a backend only cases it can run. A backend with
 * AF_CAP_BACKWARD and a run_backward also computes the gradients a backward case asks
 * for (af_grads, docs/design.md section 2 "Backward"). */
#ifndef ATTNFUZZ_BACKEND_H
#define ATTNFUZZ_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "conventions.h"
#include "host.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capability bits (a backend without a bit is never sent such a case). */
enum {
    AF_CAP_F32 = 1u << 0,
    AF_CAP_F16 = 1u << 1,
    AF_CAP_BF16 = 1u << 2,
    AF_CAP_TF32 = 1u << 3,       /* honours allow_tf32 */
    AF_CAP_GQA = 1u << 4,        /* Hq != Hkv */
    AF_CAP_CROSS = 1u << 5,      /* Sq != Sk */
    AF_CAP_DV = 1u << 6,         /* D != Dv */
    AF_CAP_SCALE = 1u << 7,      /* a scale other than the default */
    AF_CAP_SOFTCAP = 1u << 8,
    AF_CAP_AMASK = 1u << 9,      /* additive mask */
    AF_CAP_BMASK = 1u << 10,     /* boolean mask */
    AF_CAP_CAUSAL = 1u << 11,
    AF_CAP_PADDING = 1u << 12,   /* key padding lengths */
    AF_CAP_WINDOW = 1u << 13,
    AF_CAP_DROPOUT = 1u << 14,
    AF_CAP_STRIDED = 1u << 15,   /* padded, permuted and stride-0 tensors */
    AF_CAP_MASK_DTYPE = 1u << 16,/* an additive mask whose dtype differs from the case's */
    AF_CAP_BACKWARD = 1u << 17,  /* gradients (run_backward); never a plugin's (plugin.h is forward-only) */
    /* serving forms (docs/design.md section 2, "Serving forms"): the physical tensors of the
     * worker protocol; never a plugin's (plugin.h knows dense tensors only) */
    AF_CAP_PACKED = 1u << 18,    /* THD tensors with cu_seqlens, per-segment lengths */
    AF_CAP_PAGED = 1u << 19,     /* K and V in page caches with a block table */
    AF_CAP_SINKS = 1u << 20,     /* per-head sink logits */
    AF_CAP_ALIBI = 1u << 21,     /* per-head ALiBi slopes */
    AF_CAP_SERVING = AF_CAP_PACKED | AF_CAP_PAGED | AF_CAP_SINKS | AF_CAP_ALIBI,
    /* FP8 inputs (docs/design.md section 2, "FP8"): Q, K and V stored in the format, with
     * per-tensor descales; the output in the case dtype (f16 or bf16). Never a plugin's. */
    AF_CAP_E4M3 = 1u << 22,
    AF_CAP_E5M2 = 1u << 23,
    AF_CAP_FP8 = AF_CAP_E4M3 | AF_CAP_E5M2,
    AF_CAP_FP8_KV = 1u << 24,    /* only K and V in FP8 (kv_only), Q in the case dtype */
    /* An output, not a case feature: it returns the softmax statistics (run_lse; a worker's
     * cap "lse"). No case requires it (af_case_required_caps never sets it). */
    AF_CAP_LSE = 1u << 25,
    AF_CAP_FORWARD_ALL = (1u << 17) - 1, /* every capability of a dense forward case: the plugin ABI's AF_PLUGIN_CAP_ALL */
    AF_CAP_ALL = (1u << 26) - 1
};
#define AF_CAP_COUNT 26
#define AF_LAYOUTS_ALL ((1u << AF_LAYOUT_COUNT) - 1)
extern const char *const af_cap_names[AF_CAP_COUNT]; /* bit b: af_cap_names[b] ("f32", ..., "backward") */

/* The gradients of a backward case, canonical and contiguous, in the backend's out_dtype
 * (a backend whose out_dtype is F64 may write F32 instead and say so in dtype and nb, as
 * for the output):
 *   dq     [B, Hq, Sq, D]
 *   dk     [B, Hkv, Sk, D]   summed over each key/value head's query group
 *   dv     [B, Hkv, Sk, Dv]  likewise
 *   dmask  [B', Hq', Sq', Sk'] the additive mask's 4-D broadcast shape (1 on the dims it
 *          broadcasts, whatever its rank or expansion), summed over those dims
 * A gradient the case does not ask for has data NULL and is left alone. */
typedef struct af_grads {
    af_tensor dq, dk, dv, dmask;
} af_grads;

/* Gradient g (0..AF_GRAD_COUNT-1, the bit index of af_grad_names: dq, dk, dv, dmask). */
static inline af_tensor *af_grads_at(af_grads *gr, int g) {
    af_tensor *const t[AF_GRAD_COUNT] = {&gr->dq, &gr->dk, &gr->dv, &gr->dmask};
    return t[g];
}
static inline const af_tensor *af_grads_get(const af_grads *gr, int g) {
    const af_tensor *const t[AF_GRAD_COUNT] = {&gr->dq, &gr->dk, &gr->dv, &gr->dmask};
    return t[g];
}
/* The canonical shape of gradient g of case c (4 dims, above). */
void af_case_grad_shape(const af_case *c, int g, size_t ne[4]);

/* What a backend declares about repeating a case (docs/design.md section 4, "Determinism
 * and batch invariance"): a built-in in its table's `traits`, a worker in its hello
 * ("deterministic": {"forward", "backward"}, "batch_invariant"). 0 is the default: both
 * passes deterministic, not batch-invariant. */
enum {
    AF_TRAIT_NONDET_FORWARD = 1u << 0,  /* two runs of a case may give outputs that differ */
    AF_TRAIT_NONDET_BACKWARD = 1u << 1, /* likewise its gradients (atomics in the backward) */
    AF_TRAIT_BATCH_INVARIANT = 1u << 2  /* a batch row alone is bitwise its slice of the batch */
};

/* A guard band that changed after a run (docs/worker-protocol.md "guard_writes"): the
 * buffer ("out", a gradient's name, a cache), which margin, the element offset of the
 * first changed element within that margin and how many changed. */
typedef enum af_margin { AF_MARGIN_BEFORE, AF_MARGIN_AFTER, AF_MARGIN_NULL_PAGE, AF_MARGIN_PAGE_TAIL, AF_MARGIN_COUNT } af_margin;
extern const char *const af_margin_names[AF_MARGIN_COUNT]; /* "before", "after", "null_page", "page_tail" */
int af_margin_from_name(const char *name);                 /* -1 when unknown */
#define AF_GUARD_MAX 8 /* guard writes one run reports at most */
typedef struct af_guard_write {
    char buffer[16];
    af_margin margin;
    uint64_t offset, count;
} af_guard_write;
typedef struct af_guard_writes {
    af_guard_write w[AF_GUARD_MAX];
    size_t n; /* 0: no guard changed */
} af_guard_writes;

/* What an external backend (worker.h) declared, and its totals; in-process backends have
 * none (af_backend_ext returns NULL). What one run left behind is that run's af_run_result
 * (af_backend_execute, af_backend_batch_end), never a field here. Strings are owned by the
 * backend and valid until its close. */
typedef struct af_backend_ext {
    const char *describe;      /* one line: name, version, variant as the worker said */
    const char *conventions;   /* the conventions in effect, a JSON object text */
    bool own_dropout;          /* conventions.dropout "keep_mask": it returns its own keep mask */
    af_conventions conv;       /* what the oracle models for it (conventions.h) */
    uint32_t compile_key;      /* AF_KEY_* bits (case_key.h) */
    const af_host_libs *libs;  /* the libraries under it as its hello's "libs" names them
                                  (host.h; n 0: none named): known entries' needs */
    uint32_t traits;           /* AF_TRAIT_* its hello declared */
    /* totals */
    uint64_t runs, restarts, unsupported;
    double restart_s;          /* seconds spent restarting it after faults */
    const char *learned;       /* features it refused often enough to be left out, "" if none */
} af_backend_ext;

/* One run's outcome (af_backend_execute for a run alone, af_backend_vtable.batch_end for
 * each case of a batch: a run alone is a batch of one). Pointers are the backend's until
 * its next run or batch. */
typedef struct af_run_result {
    af_status st;                 /* AF_OK, AF_ERR_UNSUPPORTED, or a finding's status (error, crash, timeout) */
    af_error err;                 /* the message for st != AF_OK */
    const uint8_t *dropout_keep;  /* the keep mask it returned ([B, Hq, Sq, Sk] bytes), or NULL */
    double compile_s, run_s;      /* as it reported them (-1: not said; an in-process backend says neither) */
    double wall_s;                /* its share of the wall time as seen from here (0 in-process) */
    bool new_key;                 /* its compile key was new to the backend's process */
    const char *stderr_tail;      /* the last 4 KiB of the stderr of the process that ran it, NUL-terminated
                                     (a fault's: of the process it killed); NULL in-process */
    af_guard_writes guard;        /* the guard writes it reported */
    const af_tensor *lse;         /* the softmax statistics it returned (contiguous [B, Hq, Sq], natural
                                     log, F32 or F64), or NULL */
} af_run_result;

typedef struct af_backend_vtable {
    const char *name;    /* "explicit", "mutant:silent_tf32", ... */
    const char *version;
    const char *summary; /* one line for `attnfuzz backends` */
    uint32_t caps;
    uint32_t layouts;    /* bit l set: layout l accepted */
    af_dtype out_dtype;  /* F32 or F64 */
    /* Optional: build per-instance state from the text after "NAME:" (may be NULL). */
    af_status (*create)(const char *args, void **state, af_error *err);
    void (*destroy)(void *state);
    /* Required: fill out ([B, Hq, Sq, Dv] contiguous, out_dtype). */
    af_status (*run)(void *state, const af_case_tensors *in, af_tensor *out, af_error *err);
    /* Optional: may it run c, beyond caps and layouts (dtypes, limits, conventions, what
     * it learned it refuses)? why as in af_backend_supports. */
    bool (*supports)(void *state, const af_case *c, char *why, size_t why_len);
    /* Optional (external backends): see af_backend_ext. */
    const af_backend_ext *(*ext)(void *state);
    /* Optional: batches (a worker that declared `batch`). batch_max: the most cases one
     * batch may hold. batch_begin sends n cases of one compile key (the inputs stay alive
     * until batch_end); other backends may run meanwhile; batch_end fills outs[i] (as run
     * would), the gradients grads[i] of a backward case (as run_backward would; grads NULL,
     * or grads[i] NULL: that case runs forward only) and res[i] for each. Both return AF_OK
     * but for AF_ERR_NOMEM, AF_ERR_IO (the backend cannot go on) or AF_ERR_INVALID (a
     * batch over batch_max). */
    size_t (*batch_max)(void *state);
    af_status (*batch_begin)(void *state, const af_case_tensors *const *in, size_t n, af_error *err);
    af_status (*batch_end)(void *state, af_tensor *const *outs, af_grads *const *grads, af_run_result *res,
                           af_error *err);
    /* Optional, with batches: sends more of the batch begun, without waiting (a frame larger
     * than the pipe is otherwise written by batch_end, and the worker waits until then).
     * Returns the file descriptor to poll for writing while some is left, or -1 once all is
     * sent or sending failed (batch_end then finishes or reports it). */
    int (*batch_push)(void *state);
    /* Optional, with AF_CAP_BACKWARD: fill out as run does and, from in->dout, each
     * gradient of g whose data is not NULL (the ones the case asks for). A backend that
     * declares AF_CAP_BACKWARD without it is never sent a backward case. */
    af_status (*run_backward)(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g, af_error *err);
    uint32_t traits; /* AF_TRAIT_* (0: deterministic, not declared batch-invariant) */
    /* Optional, with AF_CAP_LSE: fill out as run does and lse, contiguous [B, Hq, Sq] with
     * room for F64, with the softmax statistics of each query row: the natural log of the
     * sum of exp of the scaled, soft-capped, masked scores (a sink's term included), -inf
     * for a fully masked row. It may write F32 and say so (lse->dtype, lse->nb); it sets
     * lse->ndim to 0 when it returned none this time (a worker that sent no `lse`). */
    af_status (*run_lse)(void *state, const af_case_tensors *in, af_tensor *out, af_tensor *lse, af_error *err);
    /* Optional (a backend with facts to report: timings, keep mask, stderr, guard writes):
     * one run as the three above make it (g NULL: forward; lse NULL: not asked, else as
     * run_lse fills it), its facts into res (res->st is what it returns). Where it is set,
     * af_backend_execute calls it instead of them. */
    af_status (*run_result)(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g, af_tensor *lse,
                            af_run_result *res, af_error *err);
} af_backend_vtable;

typedef struct af_backend af_backend;

/* Longest backend name kept (a worker's name is its whole command line). */
#define AF_BACKEND_NAME_MAX 256

/* --- the registry and instances (backend.c) ------------------------------------- */

/* Built-in vtables (ref, explicit, fused, the mutants), for listing. */
size_t af_backend_builtin_count(void);
const af_backend_vtable *af_backend_builtin(size_t i);

/* Registers an extra backend under vt->name (tests, embedders; the table is copied by
 * pointer, so vt must outlive its use). AF_ERR_EXISTS if the name is taken, AF_ERR_INVALID
 * when the table is full (16) or vt has no run function. Not thread-safe. */
af_status af_backend_register(const af_backend_vtable *vt, af_error *err);

/* Wraps a vtable (for test backends and plugins); state comes from vt->create(args). */
af_status af_backend_open_vtable(const af_backend_vtable *vt, const char *args, af_backend **out,
                                 af_error *err);
void af_backend_close(af_backend *be); /* NULL does nothing */

const char *af_backend_name(const af_backend *be);
const char *af_backend_version(const af_backend *be);
const af_backend_vtable *af_backend_vt(const af_backend *be);
/* What an external backend declared and its totals; NULL for in-process ones. */
const af_backend_ext *af_backend_ext_of(const af_backend *be);

/* AF_TRAIT_* in force: a worker's hello, else its table's. */
uint32_t af_backend_traits(const af_backend *be);

/* Can this backend run case c? When not, why (if not NULL) names the missing capability. */
bool af_backend_supports(const af_backend *be, const af_case *c, char *why, size_t why_len);
/* The capabilities in force: the table's, without AF_CAP_BACKWARD when it has no
 * run_backward (a worker whose kit has not learned the protocol's gradients yet). */
uint32_t af_backend_caps(const af_backend *be);
/* Capability bits case c needs. */
uint32_t af_case_required_caps(const af_case *c);

/* Runs the backend; out must be a contiguous [B, Hq, Sq, Dv] tensor of out_dtype. */
af_status af_backend_run(af_backend *be, const af_case_tensors *in, af_tensor *out, af_error *err);
/* Runs forward and backward on a case with grads != 0: out as for af_backend_run, and
 * g as af_backend_grads_shape sized it, with data for every gradient the case asks for
 * (NULL for the others). AF_ERR_UNSUPPORTED when the backend has no run_backward;
 * AF_ERR_INVALID when a tensor has the wrong shape or dtype, or an asked one no data. */
af_status af_backend_run_backward(af_backend *be, const af_case_tensors *in, af_tensor *out, af_grads *g,
                                  af_error *err);

/* Runs the backend as af_backend_run does and, where it has run_lse, its softmax
 * statistics into lse (shaped by af_backend_lse_shape, data caller-owned); lse->ndim is 0
 * afterwards when it gave none (no run_lse, or a worker that sent none). */
af_status af_backend_run_lse(af_backend *be, const af_case_tensors *in, af_tensor *out, af_tensor *lse, af_error *err);
/* One run of case in->c with its facts, for every backend: the backward pass too when g
 * is not NULL (as af_backend_run_backward), else the statistics into lse when it is not
 * NULL (as af_backend_run_lse), else as af_backend_run. res gets the run's outcome: res->st
 * (the return value) and res->err, and for a backend with run_result what it reported
 * (an in-process one reports no timings: compile_s and run_s -1, wall_s 0, stderr_tail and
 * dropout_keep NULL); res->lse is lse when statistics came back, else NULL. */
af_status af_backend_execute(af_backend *be, const af_case_tensors *in, af_tensor *out, af_grads *g, af_tensor *lse,
                             af_run_result *res, af_error *err);
/* Sizes lse for case c: contiguous F64 [B, Hq, Sq] (data set to NULL). */
void af_backend_lse_shape(const af_case *c, af_tensor *lse);

/* Batches (see af_backend_vtable.batch_begin): the most cases one batch may hold (1 for a
 * backend without batches), sending a batch, and collecting its answers. */
size_t af_backend_batch_max(const af_backend *be);
af_status af_backend_batch_begin(af_backend *be, const af_case_tensors *const *in, size_t n, af_error *err);
af_status af_backend_batch_end(af_backend *be, af_tensor *const *outs, af_grads *const *grads, af_run_result *res,
                               af_error *err);
/* More of the batch begun sent without waiting (af_backend_vtable.batch_push): the
 * descriptor to poll for writing, or -1 when nothing is left to send (always for a backend
 * without batch_push). */
int af_backend_batch_push(af_backend *be);

/* Sizes out for case c and this backend's out_dtype; allocation stays with the caller. */
void af_backend_out_shape(const af_backend *be, const af_case *c, af_tensor *out);
/* Sizes the gradients case c asks for (contiguous, out_dtype, af_case_grad_shape); the
 * others get ndim 0. Every data pointer is set to NULL: allocation stays with the caller. */
void af_backend_grads_shape(const af_backend *be, const af_case *c, af_grads *g);

/* Limits OpenBLAS to one thread (one thread per process); called when a backend opens. */
void af_blas_single_thread(void);
/* OpenBLAS picks its kernels when it loads; on CPUs newer than it knows it falls back
 * to generic SSE3 ("Prescott") kernels, 4-5x slower. Returns the OPENBLAS_CORETYPE to
 * set ("SkylakeX", "Haswell") when that happened and the CPU can do better, else NULL.
 * The variable only takes effect in a new process (the CLI re-executes itself). */
const char *af_blas_better_coretype(void);

/* --- backend names (backend_spec.c) --------------------------------------------- */

/* What a command-line name opens, decided by its prefix alone. */
typedef enum af_backend_kind {
    AF_BACKEND_BUILTIN, /* no prefix of the table: a registered name (ref, explicit, fused, mutant:NAME, ...) */
    AF_BACKEND_PLUGIN,  /* plugin:PATH.so[:ARGS]: a shared library, in-process (plugin.h) */
    AF_BACKEND_WORKER,  /* worker:COMMAND, target:STACK/VARIANT: an external process (worker.h) */
    AF_BACKEND_KIND_COUNT
} af_backend_kind;
extern const char *const af_backend_kind_names[AF_BACKEND_KIND_COUNT];

struct af_worker_opts;
/* One entry of the prefix table: names starting with prefix are opened by open (wopts:
 * the worker options, NULL for defaults; a plugin ignores them). */
typedef struct af_backend_prefix {
    const char *prefix;  /* "plugin:", "worker:", "target:" */
    const char *form;    /* the name's form, for messages and listings: "plugin:PATH.so[:ARGS]" */
    const char *summary; /* one line for `attnfuzz backends` */
    af_backend_kind kind;
    af_status (*open)(const char *spec, const struct af_worker_opts *wopts, af_backend **out, af_error *err);
} af_backend_prefix;

/* The prefix table (static storage, *n entries, in matching order). */
const af_backend_prefix *af_backend_prefix_table(size_t *n);
/* The entry whose prefix spec starts with (case-sensitive), NULL for a registry name. */
const af_backend_prefix *af_backend_prefix_of(const char *spec);
/* af_backend_prefix_of(spec)'s kind, AF_BACKEND_BUILTIN when it has none. */
af_backend_kind af_backend_spec_kind(const char *spec);

/* Opens a backend by its command-line name: a name with a prefix of the table through
 * that entry (plugin:, worker:, target:), any other name from the registry ("ref",
 * "explicit", "fused", "mutant:NAME", registered ones). wopts: options of a worker (NULL:
 * defaults; ignored for other kinds). An unknown name is AF_ERR_INVALID "unknown backend"
 * listing the registered names and the prefixed forms; the errors of plugin and worker
 * opens pass through (a plugin that does not load names the file and why; a worker that
 * cannot start gives its stderr). */
af_status af_backend_spec_open(const char *spec, const struct af_worker_opts *wopts, af_backend **out, af_error *err);
/* af_backend_spec_open with default worker options. */
af_status af_backend_open(const char *spec, af_backend **out, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
