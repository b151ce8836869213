/* bundle.h - repro bundles on disk (docs/design.md section 6) and the .npy.zst arrays in them.
 *
 * A bundle is one directory per finding, named <kind>-<signature as 16 hex digits>,
 * under the crashes directory. It is written into a temporary directory beside its
 * final place and renamed there in one step, so a reader (or a second campaign process
 * writing the same signature) never sees half a bundle, and an existing bundle is never
 * overwritten (AF_ERR_EXISTS: the finding was already stored).
 *
 *   case.json           format, version, the case, kind, signature, who, relation,
 *                       backends with versions, metrics and verdicts, tolerance, replay
 *                       command (schema: docs/case-json.md)
 *   input.bin           the fuzz input bytes (af_case_encode), for libFuzzer and AFL++
 *   q.npy.zst k.npy.zst v.npy.zst      canonical [B, H, S, D] float32; an FP8 case's as
 *                       uint8 ('|u1'): the stored bits, format and descales in case.json
 *   mask.npy.zst        additive mask, float32, 4-D, broadcastable to [B, Hq, Sq, Sk]
 *   bool_mask.npy.zst   boolean mask (numpy bool), 4-D, broadcastable, true = attend
 *   ref.npy.zst         float64 reference [B, Hq, Sq, Dv]
 *   out.<backend>.npy.zst   each backend's output [B, Hq, Sq, Dv] (float32 or float64)
 *   do.npy.zst          a backward case's upstream gradient dO, canonical [B, Hq, Sq, Dv]
 *                       float32 like the inputs
 *   ref_<g>.npy.zst     per gradient g asked (dq, dk, dv, dmask) the float64 reference,
 *                       canonical (af_case_grad_shape: dmask at the mask's 4-D shape)
 *   <g>.<backend>.npy.zst   each backend's gradient g (float32 or float64)
 *   ref_lse.npy.zst     float64 softmax statistics [B, Hq, Sq] (natural log; a fully masked
 *                       row -inf), when some backend returned its own
 *   lse.<backend>.npy.zst   a backend's statistics as it returned them (natural log, a
 *                       base-2 worker's converted; float32 or float64)
 *   keep.<backend>.npy.zst  the dropout keep mask a backend drew itself (a worker whose
 *                       conventions say dropout "keep_mask"), numpy bool [B, Hq, Sq, Sk],
 *                       true = kept: ref.npy.zst (and ref_<g>) follow it, so they can be
 *                       computed again from the bundle (af_bundle_load_keep)
 *   expected.npy.zst    optional, from another tool: the output replay must reproduce
 *   stderr.txt          optional: the last 4 KiB of a worker's stderr (stderr.2.txt for a
 *                       second one; read back with af_bundle_load_text, at most 64 KiB)
 *
 * Bundles written by other tools (numpy + zstandard + a case.json with at least the case)
 * are read the same way; missing tensors are generated from the case. */
#ifndef ATTNFUZZ_BUNDLE_H
#define ATTNFUZZ_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "case.h"
#include "oracle.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AF_BUNDLE_FORMAT "attnfuzz-bundle"
#define AF_BUNDLE_VERSION 1

/* --- .npy.zst arrays --------------------------------------------------------------- */

/* A dense C-order array. Owned by whoever filled it (af_array_free releases data). */
typedef struct af_array {
    af_dtype dtype; /* AF_F32, AF_F64, AF_F16 or AF_BOOL on read; F32/F64/BOOL, or E4M3/E5M2
                       (written '|u1': the stored bits) on write */
    bool u8;        /* on read: the file said '|u1', and data holds its bytes as they are
                       (dtype AF_BOOL: nonzero is true); '|b1' reads as 0 and 1 */
    int ndim;       /* 0..AF_MAX_DIMS */
    size_t shape[AF_MAX_DIMS];
    void *data;
} af_array;

size_t af_array_numel(const af_array *a);
void af_array_free(af_array *a); /* frees data, leaves a zeroed; NULL does nothing */

/* Writes a NumPy .npy (format 1.0, little-endian, C order) compressed as one zstd frame,
 * atomically (temp file + rename). Errors name the path (AF_ERR_IO on a full disk). */
af_status af_npy_write_zst(const char *path, const af_array *a, af_error *err);
/* Reads a .npy.zst (or a plain .npy when the path ends in .npy) holding at most max_numel
 * elements. Accepts '<f4', '<f8', '<f2', '|b1', '|u1' (as BOOL, its bytes kept: u8), C order only. A
 * truncated, corrupt or unsupported file is AF_ERR_FORMAT with a message naming the path
 * and the problem; so is one that is larger than max_numel elements can make it, whose
 * .npy header declares more elements, or whose zstd frames declare or produce more bytes
 * than the header needs. The header is decompressed first: memory and time are bounded by
 * max_numel (and 4 GiB of data), never by what the file claims. */
af_status af_npy_read_zst_max(const char *path, size_t max_numel, af_array *a, af_error *err);
/* af_npy_read_zst_max bounded only by the 4 GiB of data any array may hold. */
af_status af_npy_read_zst(const char *path, af_array *a, af_error *err);

/* --- writing bundles --------------------------------------------------------------- */

typedef struct af_bundle_output {
    const char *backend;    /* name as on the command line */
    const char *version;
    const af_tensor *out;   /* [B, Hq, Sq, Dv] F32 or F64; NULL when the backend failed */
    af_result result;       /* against the reference (or, for a relation, the other run) */
    const char *error;      /* the backend's message when result.kind is error/crash/timeout */
    /* external backends (worker.h), else NULL: */
    const char *describe;    /* "name version variant" as the worker said */
    const char *conventions; /* the conventions it declared, a JSON object text */
    const char *stderr_tail; /* the last 4 KiB of its stderr: written as stderr.txt */
    const uint8_t *dropout_keep; /* the keep mask it drew itself ([B, Hq, Sq, Sk] bytes, 1 = kept),
                                    which the reference followed: written as keep.<backend>.npy.zst */
    /* a backward case: the gradients it returned (a gradient with data NULL: none), or NULL
     * when it ran no backward; each gradient's result against the reference */
    const af_grads *grads;
    af_result grad_results[AF_GRAD_COUNT];
    /* a nondeterministic finding: the second run's output and gradients (NULL: none), written
     * as out.<backend>.run2.npy.zst and <g>.<backend>.run2.npy.zst */
    const af_tensor *out_run2;
    const af_grads *grads_run2;
    /* the softmax statistics it returned (contiguous [B, Hq, Sq], F32 or F64), or NULL;
     * their result against ref_lse: written as lse.<backend>.npy.zst */
    const af_tensor *lse;
    af_result lse_result;
} af_bundle_output;

typedef struct af_bundle_spec {
    const af_case *c;
    const uint8_t *input; /* af_case_encode bytes */
    size_t input_len;
    const af_case_tensors *tensors; /* the inputs as run */
    const double *ref;              /* [B, Hq, Sq, Dv] */
    af_kind kind;
    uint64_t signature;
    const char *who;      /* "fused", "explicit,fused", "layout@fused" */
    const char *relation; /* relation name, or NULL */
    const af_bundle_output *outputs;
    size_t n_outputs;
    af_tolerance tol;
    const char *replay_cmd; /* e.g. "attnfuzz replay crashes/diverge-0123456789abcdef" */
    const char *extra_json; /* optional JSON object text merged into case.json as "extra" */
    /* a backward case: the reference gradients (canonical, af_case_grad_shape; NULL for one
     * not asked), and the tensor the finding is on ("dq", ...; NULL: the output, "out") */
    const double *ref_grads[AF_GRAD_COUNT];
    const char *tensor;
    /* the reference statistics [B, Hq, Sq] (ref_lse.npy.zst, written when an output has
     * statistics), or NULL */
    const double *ref_lse;
    const char *name;       /* optional: the directory name ([A-Za-z0-9_.-], at most 63
                               characters); NULL: <kind>-<signature> */
    const af_guard_writes *guard; /* a guard_write finding's bands (case.json "guard_writes"), or NULL */
    signed char minimized;  /* case.json "minimized": +1 true (the case was minimized, the name is
                               its signature), -1 false (stored as found: `attnfuzz minimize DIR`
                               minimizes it later), 0 not written (other tools) */
} af_bundle_spec;

/* Writes the bundle under crashes_dir (created if missing). On success path (if not
 * NULL) receives the bundle directory. AF_ERR_EXISTS when that signature is already
 * stored (nothing written). AF_ERR_IO names the file that could not be written and
 * removes the partial temporary directory. */
af_status af_bundle_write(const char *crashes_dir, const af_bundle_spec *spec, char *path, size_t path_len,
                          af_error *err);

/* As af_bundle_write, except where a bundle of that name exists that case.json marks as
 * stored as found ("minimized": false): the new bundle then replaces it in one step (it is
 * written beside it and exchanged with it, renameat2 RENAME_EXCHANGE; where the file system
 * lacks that, two renames), and the old one is moved to old_dir/<name> (old_dir created if
 * missing; when old_dir already holds that name, the old copy is dropped). A reader sees
 * the old bundle or the new one, never none or half of one. A minimized bundle, or one
 * that does not say, is never replaced: AF_ERR_EXISTS. */
af_status af_bundle_write_over(const char *crashes_dir, const af_bundle_spec *spec, const char *old_dir, char *path,
                               size_t path_len, af_error *err);

/* Moves crashes_dir/name to old_dir/name (as af_bundle_write_over moves the bundle it
 * replaces) when its case.json marks it as stored as found: once its minimized bundle is
 * stored under another name, it is no longer needed where reports and regress look, but
 * is kept. Nothing when it is missing, minimized or does not say. True when moved. */
bool af_bundle_retire(const char *crashes_dir, const char *name, const char *old_dir);

/* Removes the temporary directories that process pid left in crashes_dir: a writer
 * killed mid-write (the OOM killer) cannot remove its own. Stored bundles are never
 * touched. Returns how many it removed. */
size_t af_bundle_remove_partial(const char *crashes_dir, long pid);

/* The directory name a finding gets: "<kind>-<16 hex digits>". */
void af_bundle_name(af_kind kind, uint64_t signature, char *buf, size_t len);

/* --- reading bundles --------------------------------------------------------------- */

typedef struct af_bundle af_bundle;

typedef struct af_bundle_record { /* one backend as recorded in case.json */
    char backend[AF_BACKEND_NAME_MAX];
    char version[64];
    af_kind kind;
    af_metrics m;
    bool has_output; /* out.<backend>.npy.zst present */
    /* a backward case: per gradient, whether it was recorded, its verdict and metrics, and
     * whether its file is there */
    bool has_grad[AF_GRAD_COUNT];
    af_kind grad_kind[AF_GRAD_COUNT];
    af_metrics grad_m[AF_GRAD_COUNT];
    bool has_grad_output[AF_GRAD_COUNT];
    /* the gradient's tolerance in force (that of its worst element's row), where case.json
     * records it (backends[i].grads.<g>.tolerance; older bundles do not) */
    bool has_grad_tol[AF_GRAD_COUNT];
    af_tolerance grad_tol[AF_GRAD_COUNT];
    /* the softmax statistics, when it returned them: verdict, metrics, whether the file is there */
    bool has_lse;
    af_kind lse_kind;
    af_metrics lse_m;
    bool has_lse_output;
    char error[512]; /* its recorded error message (error, crash, timeout), "" if none */
    char conventions[512]; /* the conventions it declared, a compact JSON object ("" if none or
                              longer): what judging its output again must model */
} af_bundle_record;

/* Loads dir/case.json (and checks the arrays present). Errors name the file. A dir that
 * is a symbolic link (a merged bundle, merge.h) is resolved once, here: every file this
 * bundle handle reads comes from the directory case.json was read from. */
af_status af_bundle_read(const char *dir, af_bundle **out, af_error *err);
void af_bundle_free(af_bundle *b); /* NULL does nothing */

const af_case *af_bundle_case(const af_bundle *b);
const char *af_bundle_dir(const af_bundle *b);
af_kind af_bundle_kind(const af_bundle *b);        /* AF_KIND_OK if not recorded */
uint64_t af_bundle_signature(const af_bundle *b);
const char *af_bundle_who(const af_bundle *b);      /* "" if not recorded */
const char *af_bundle_relation(const af_bundle *b); /* NULL if none */
const char *af_bundle_tensor(const af_bundle *b);   /* "out" if not recorded, or "dq", "dk", "dv", "dmask" */
int af_bundle_grad(const af_bundle *b);             /* the gradient the finding is on (af_grad_names), -1 for out */
size_t af_bundle_record_count(const af_bundle *b);
const af_bundle_record *af_bundle_record_at(const af_bundle *b, size_t i);
/* A record's verdict over its output and its gradients: the first failing kind in
 * precedence (enum) order, AF_KIND_OK when all passed. */
af_kind af_bundle_record_verdict(const af_bundle_record *r);
bool af_bundle_has_tolerance(const af_bundle *b, af_tolerance *tol);
/* case.json "minimized": +1 true, -1 false (stored as found), 0 absent. */
int af_bundle_minimized(const af_bundle *b);
/* case.json "guard_writes" (a guard_write finding's bands; n 0 when none). */
const af_guard_writes *af_bundle_guard_writes(const af_bundle *b);

/* The case in case.json is a claim like any other: AF_ERR_INVALID naming case.json when
 * its tensors need more than budget bytes (0 = AF_DEFAULT_BUDGET; --budget raises it).
 * Check it before af_bundle_load_inputs or loading outputs: the arrays are bounded by the
 * case, the case by this. */
af_status af_bundle_check_budget(const af_bundle *b, size_t budget, af_error *err);

/* Materializes the inputs: q/k/v/mask arrays when present (values rounded once to the
 * case dtype and written into the case's layout), else generated from the case.
 * Shape mismatches between arrays and case are AF_ERR_FORMAT naming the file. */
af_status af_bundle_load_inputs(const af_bundle *b, af_inputs *in, af_error *err);
/* Loads expected.npy.zst as float64 [B, Hq, Sq, Dv] into *out (af_free it); *out is NULL
 * and AF_OK when the bundle has none. */
af_status af_bundle_load_expected(const af_bundle *b, double **out, af_error *err);
/* Loads ref.npy.zst or out.<backend>.npy.zst ("ref" or a backend name) as float64. */
af_status af_bundle_load_output(const af_bundle *b, const char *name, double **out, af_error *err);
/* Loads gradient g (0..AF_GRAD_COUNT-1) of "ref" (ref_<g>.npy.zst) or of a backend (its
 * recorded file, else <g>.<backend>.npy.zst) as float64 at af_case_grad_shape; *out is NULL
 * and AF_OK when the bundle has none (a forward case, a gradient not asked or not stored). */
af_status af_bundle_load_grad(const af_bundle *b, const char *name, int g, double **out, af_error *err);
/* A nondeterministic finding's second run of backend name: its output (g -1,
 * out.<backend>.run2.npy.zst) or gradient g (<g>.<backend>.run2.npy.zst) as float64; *out
 * NULL and AF_OK when the bundle has none (af_bundle_read already refused a
 * nondeterministic bundle that lacks a recorded output's second run). */
af_status af_bundle_load_run2(const af_bundle *b, const char *name, int g, double **out, af_error *err);

/* Loads backend's own dropout keep mask (keep.<backend>.npy.zst) as [B, Hq, Sq, Sk] bytes,
 * 1 = kept, into *out (af_free it): the mask the bundle's reference followed, to compute
 * that reference again (af_case_tensors.dropout_keep). *out is NULL and AF_OK when the
 * bundle has none; a file of another shape or dtype is AF_ERR_FORMAT naming it. */
/* Loads the softmax statistics of "ref" (ref_lse.npy.zst) or of a backend (its recorded
 * file, else lse.<backend>.npy.zst) as float64 [B, Hq, Sq]; *out is NULL and AF_OK when the
 * bundle has none. AF_ERR_FORMAT naming the file for another shape or a non-float dtype. */
af_status af_bundle_load_lse(const af_bundle *b, const char *name, double **out, af_error *err);

af_status af_bundle_load_keep(const af_bundle *b, const char *backend, uint8_t **out, af_error *err);

/* Loads a text file of the bundle (name inside it, e.g. "stderr.txt": a worker's stderr
 * tail) into *out, NUL-terminated (af_free it); *out is NULL and AF_OK when there is none.
 * At most 64 KiB: a larger file, or one that is not a regular file, is AF_ERR_FORMAT
 * naming it, unread. */
af_status af_bundle_load_text(const af_bundle *b, const char *name, char **out, size_t *len, af_error *err);

/* --- pictures ---------------------------------------------------------------------- */

/* Draws |out - ref| over (query position, value dim) for one (batch, head) as a PNG:
 * one pixel block per element, black = 0 to white = max, NaN/Inf magenta, so a layout
 * bug (blocks) and a scale bug (everywhere) look different. */
af_status af_heatmap_write_png(const char *path, const double *out, const double *ref, size_t Sq, size_t Dv,
                               af_error *err);

#ifdef __cplusplus
}
#endif
#endif
