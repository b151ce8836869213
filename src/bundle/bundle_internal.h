/* bundle_internal.h - what the files of src/bundle/ share (library-internal).
 *
 *   bundle_files.c    names inside a bundle directory and the out.<backend> rule
 *   bundle_json.c     case.json: the text a bundle's spec writes, and parsing it back
 *   bundle_write.c    writing a bundle (temporary directory, then one rename)
 *   bundle_read.c     reading a bundle: case.json, accessors, the recorded outputs
 *   bundle_inputs.c   the case's inputs from q/k/v/mask arrays
 *   npy.c             the .npy.zst arrays themselves
 */
#ifndef ATTNFUZZ_BUNDLE_INTERNAL_H
#define ATTNFUZZ_BUNDLE_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "attnfuzz/bundle.h"

/* case.json is a few KiB (a dozen backends with metrics); refuse absurd ones unread. */
#define AF_BUNDLE_MAX_JSON ((size_t)1 << 20)
/* Text files a bundle may hold beside the arrays (stderr.txt: a worker's stderr tail,
 * at most 4 KiB when attnfuzz writes it): af_bundle_load_text reads at most this much. */
#define AF_BUNDLE_MAX_TEXT ((size_t)64 << 10)

struct af_bundle {
    char *dir;   /* as the caller named it (messages, af_bundle_dir) */
    char *files; /* where its files are read from: dir, or the directory a symbolic link
                    dir resolved to when the bundle was read (a merged bundle, merge.h),
                    so every file of one read comes from one version of it */
    af_case c;
    af_kind kind;
    uint64_t signature;
    char *who;
    char *relation; /* NULL when none */
    af_bundle_record *recs;
    char **rec_names; /* full backend names: records truncate them at 127 bytes */
    char **rec_files; /* the output file of each record, NULL when none */
    char **rec_grad_files; /* [n_recs * AF_GRAD_COUNT]: each record's gradient files, NULL when none */
    char **rec_lse_files;  /* [n_recs]: each record's statistics file, NULL when none */
    char *tensor;     /* the finding's tensor: "out", "dq", ... */
    size_t n_recs;
    bool has_tol;
    af_tolerance tol;
    int minimized; /* case.json "minimized": +1, -1, 0 absent */
    af_guard_writes guard; /* case.json "guard_writes" */
};

/* --- npy.c ---------------------------------------------------------------------------- */

typedef struct af_npy_bound {
    size_t max_numel; /* the most elements the file may hold */
    const char *what; /* what it must match, for the message ("the case [1, 2, 3, 4]"), or NULL */
} af_npy_bound;
/* af_npy_read_zst_max with a message that says what the shape had to match. */
af_status af_npy_read_bounded(const char *path, const af_npy_bound *bound, af_array *a, af_error *err);

/* --- bundle_files.c -------------------------------------------------------------------- */

/* buf = "dir/name"; AF_ERR_IO naming both when it does not fit. */
af_status af_bundle_join(char *buf, size_t len, const char *dir, const char *name, af_error *err);
/* dir/name exists and is a regular file. */
bool af_bundle_is_file(const char *dir, const char *name);
/* A name inside the bundle directory: no separators, no way out of it. */
bool af_bundle_plain_name(const char *s);
/* "out.<backend>.npy.zst" with the backend name made safe for a file name. */
void af_bundle_out_name(const char *backend, char *buf, size_t len);
/* The same for another array of a backend: "<prefix>.<backend>.npy.zst" ("dq", ...). */
void af_bundle_array_name(const char *prefix, const char *backend, char *buf, size_t len);
/* A second run's array: "<prefix>.<backend>.run2.npy.zst". */
void af_bundle_run2_name(const char *prefix, const char *backend, char *buf, size_t len);
/* "[2, 3, 4]" for messages. */
void af_bundle_shape_str(char *buf, size_t len, const size_t *shape, int ndim);

/* --- bundle_json.c --------------------------------------------------------------------- */

/* The text of case.json for spec (ending in a newline, NUL-terminated; cJSON_free it),
 * listing files[0..n_files) and, per output i, out_files[i], its stderr tail's file
 * err_files[i], its gradients' files grad_files[i * AF_GRAD_COUNT + g] and its statistics'
 * lse_files[i] (NULL: no file).
 * Takes ownership of extra. NULL when memory runs out. */
char *af_bundle_json_print(const af_bundle_spec *spec, char *const *files, size_t n_files, char *const *out_files,
                           char *const *err_files, char *const *grad_files, char *const *lse_files,
                           const char *bundle_path, cJSON *extra, size_t *len);
/* Parses the text of case.json (path names it in messages) into b, whose dir is set:
 * AF_ERR_FORMAT naming the file and the field for anything that is not as documented. */
af_status af_bundle_json_parse(const char *path, const char *text, size_t len, af_bundle *b, af_error *err);

/* --- bundle_read.c --------------------------------------------------------------------- */

/* Reads dir/name (path receives it, for messages) as an array the case gives the shape
 * want (or, for a mask, a broadcast of it): a file with more elements is refused, naming
 * want, before its data is decompressed (af_npy_read_bounded). */
af_status af_bundle_load_array(const af_bundle *b, const char *name, const size_t want[4], af_array *a, char *path,
                               size_t path_len, af_error *err);
bool af_bundle_same_shape(const af_array *a, const size_t *want, int nd);
af_status af_bundle_shape_error(const char *path, const af_array *a, const size_t *want, int nd, af_error *err);

#endif
