/* backend.h - one small vtable for every implementation of attention.
 *
 * A backend receives the physical tensors of a case (tensor.h) and writes the output
 * in canonical contiguous [B, Hq, Sq, Dv] order, in its out_dtype (F64 for ref, F32 for
 * the others). A backend whose out_dtype is F64 may instead write F32 and say so by
 * setting out->dtype and out->nb (workers return whichever dtype they computed in). Capability bits let the fuzzer send a backend only cases it can run. */
#ifndef ATTNFUZZ_BACKEND_H
#define ATTNFUZZ_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "conventions.h"
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
    AF_CAP_ALL = (1u << 17) - 1
};
#define AF_LAYOUTS_ALL ((1u << AF_LAYOUT_COUNT) - 1)
extern const char *const af_cap_names[17];

/* What an external backend (worker.h) declared and what its last run left behind; in-process
 * backends have none (af_backend_ext returns NULL). Strings are owned by the backend and
 * valid until its next run or close. */
typedef struct af_backend_ext {
    const char *describe;      /* one line: name, version, variant as the worker said */
    const char *conventions;   /* the conventions in effect, a JSON object text */
    bool waive_masked_row_nan;     /* conventions.masked_rows "nan": not a finding for it */
    bool waive_masked_value_leak;  /* conventions.masked_values "ieee": likewise */
    bool own_dropout;          /* conventions.dropout "keep_mask": it returns its own keep mask */
    af_conventions conv;       /* what the oracle models for it (conventions.h; the two waivers
                                  above included) */
    uint32_t compile_key;      /* AF_KEY_* bits (case_key.h) */
    /* the last run */
    const char *stderr_tail;   /* the last 4 KiB of its stderr, NUL-terminated ("" if none) */
    const uint8_t *dropout_keep; /* [B, Hq, Sq, Sk] bytes (1 = kept) it returned, or NULL */
    double compile_s;          /* seconds it reported compiling (-1 when it did not say) */
    double run_s;              /* seconds it reported running (-1 when it did not say) */
    double wall_s;             /* seconds the run took as seen from here */
    bool new_key;              /* the run's compile key was new to this process */
    /* totals */
    uint64_t runs, restarts, unsupported;
    const char *learned;       /* features it refused often enough to be left out, "" if none */
} af_backend_ext;

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
/* What an external backend declared and its last run left behind; NULL for in-process ones. */
const af_backend_ext *af_backend_ext_of(const af_backend *be);

/* Can this backend run case c? When not, why (if not NULL) names the missing capability. */
bool af_backend_supports(const af_backend *be, const af_case *c, char *why, size_t why_len);
/* Capability bits case c needs. */
uint32_t af_case_required_caps(const af_case *c);

/* Runs the backend; out must be a contiguous [B, Hq, Sq, Dv] tensor of out_dtype. */
af_status af_backend_run(af_backend *be, const af_case_tensors *in, af_tensor *out, af_error *err);

/* Sizes out for case c and this backend's out_dtype; allocation stays with the caller. */
void af_backend_out_shape(const af_backend *be, const af_case *c, af_tensor *out);

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
