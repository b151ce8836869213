/* known.h - known bugs as data (docs/known.md; docs/design.md section 5).
 *
 * Every finding triaged in docs/findings.md (a real bug, a convention, a precision class)
 * is an entry in a known.json kept beside its repro (corpus/findings/<stack>/known.json):
 * an id, the backends it applies to (names or globs), the kinds it takes, a predicate over
 * the case's features (`when`), one over the oracle's result (`symptom`: where the failing
 * elements sit, how far off they are) and text the error or the worker's stderr must hold
 * (`message`). A finding that matches an entry is that known bug: the store counts it
 * against the entry and keeps one exemplar bundle per entry, never minimizing it
 * (store.h). An entry is as narrow as its triage, so a finding that also fails elsewhere
 * is new.
 *
 * Predicates are small expressions over named variables, compiled once when a file is
 * loaded (a name that does not exist, a variable of the wrong scope or an enum compared
 * with a number is a load error naming the file, the entry and the clause), so matching
 * a finding costs microseconds:
 *     "when": ["dtype in [f16, bf16]", "scale <= 0", "sq % 128 == 64"]
 *     "symptom": ["masked_only", "n_nan_ref == 0"]
 * The variables and their meaning: docs/known.md.
 *
 * An entry may also say what it needs of the host (`"needs"`: CPU flags present and
 * absent, GPU architectures, library version ranges; docs/known.md, "Scope"): on a host
 * that lacks it the entry never matches a finding, and a bundle of it that passes there is
 * no fix: regress and replay say "skip (needs avx512f)" (af_known_scope_of,
 * af_known_bundle_scope). */
#ifndef ATTNFUZZ_KNOWN_H
#define ATTNFUZZ_KNOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "host.h"
#include "oracle.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the triage concluded. */
typedef enum af_known_class {
    AF_KNOWN_REAL_BUG,   /* the stack is wrong by its own documentation or spec */
    AF_KNOWN_CONVENTION, /* a deliberate behaviour the worker cannot declare (conventions.h) */
    AF_KNOWN_PRECISION,  /* a silent precision mode or accumulation */
    AF_KNOWN_CLASS_COUNT
} af_known_class;
extern const char *const af_known_class_names[AF_KNOWN_CLASS_COUNT]; /* "real_bug", "convention", "precision" */

#define AF_KNOWN_ID_MAX 64              /* ids: [a-z0-9-], at most 63 characters */
#define AF_KNOWN_FILE_MAX ((size_t)1 << 20) /* a known.json larger than this is refused unread */
#define AF_KNOWN_ENTRIES_MAX 1024       /* entries over all loaded files */

typedef struct af_known af_known;

af_known *af_known_create(void);       /* NULL when out of memory */
void af_known_destroy(af_known *k);    /* NULL does nothing */

/* Loads the entries of a known.json file and appends them. Errors (nothing of the file is
 * kept then), each naming the file and the problem: AF_ERR_IO (cannot be read),
 * AF_ERR_FORMAT (over AF_KNOWN_FILE_MAX bytes, not JSON, not format "attnfuzz-known"
 * version 1, an unknown or missing field, a bad value, a predicate that does not compile,
 * an id already loaded), AF_ERR_NOMEM. */
af_status af_known_load(af_known *k, const char *path, af_error *err);
/* The same from text in memory; name stands for the file in messages. */
af_status af_known_load_text(af_known *k, const char *text, size_t len, const char *name, af_error *err);
/* Loads every <root>/corpus/findings/<stack>/known.json (sorted by path); *files (may be
 * NULL) receives how many. A missing directory is no error. Errors as af_known_load. */
af_status af_known_load_root(af_known *k, const char *root, size_t *files, af_error *err);

/* Where the repository's known bugs are: the package directory when this executable was
 * installed from the wheel (which ships corpus/findings/STACK/known.json there); else the
 * project root of the running executable (the first ancestor of its directory, else of the
 * current directory, holding python/attnfuzz: where the targets come from too; else the
 * source root recorded when the build was configured, for a build out of the tree), or the
 * recorded source root when that project root holds no corpus/findings. dir gets it (len
 * bytes). AF_ERR_IO saying where it looked when none holds corpus/findings. */
af_status af_known_locate(char *dir, size_t len, af_error *err);

/* af_known_load_root on af_known_locate's directory; none found loads nothing (the CLI
 * says so). The default set of `attnfuzz fuzz`, replay, regress, report and the fuzz
 * harnesses. */
af_status af_known_load_repo(af_known *k, size_t *files, af_error *err);

size_t af_known_count(const af_known *k); /* 0 for NULL */

/* What an entry says about itself; strings owned by k ("" when not given). */
typedef struct af_known_info {
    const char *id, *title, *file, *repro, *bundle, *issue;
    af_known_class cls;
    uint32_t kinds; /* bit per af_kind; 0: documented only, never matches */
    const char *needs; /* its scope in words ("cpu avx512f; versions torch <2.12"), "" for none */
} af_known_info;
void af_known_info_of(const af_known *k, size_t i, af_known_info *info);
/* Index of the entry with this id, -1 when none. */
long af_known_find(const af_known *k, const char *id);

/* --- scope: what an entry needs of the host ------------------------------------------- */

/* The host facts an entry's needs are judged on. */
typedef struct af_known_host {
    const char *cpu;          /* CPU flags, space-separated; NULL: this host's (af_host_cpu_flags) */
    const af_host_libs *libs; /* the libraries the backend reports (its hello's libs); NULL: none */
} af_known_host;

typedef enum af_known_scope {
    AF_KNOWN_SCOPE_IN,      /* every need holds (or the entry has none) */
    AF_KNOWN_SCOPE_UNKNOWN, /* none fails, but some is on a fact the host does not report (a
                               library's version, the GPU, unreadable CPU flags) */
    AF_KNOWN_SCOPE_OUT,     /* some need fails on this host */
    AF_KNOWN_SCOPE_COUNT
} af_known_scope;

/* Does entry i's needs hold on host h (NULL: this host's CPU, no libraries)? why (may be
 * NULL, len bytes) receives, outside AF_KNOWN_SCOPE_IN, what is missing: "needs avx512f",
 * "needs no avx512_bf16", "needs sm 80|90, have 75", "needs torch <2.12, have 2.15.0"
 * (every failing need, "; " between them), or for an unknown fact "needs cudnn >=9.1,
 * unknown". No I/O but the one read of /proc/cpuinfo; no allocation. */
af_known_scope af_known_scope_of(const af_known *k, size_t i, const af_known_host *h, char *why, size_t len);

/* A finding as the matcher sees it. */
typedef struct af_known_finding {
    af_kind kind;
    const char *who;          /* "B" (a backend check), "A,B" (a pair: either side), "R@B" (a relation: B) */
    const af_case *c;         /* the case it was found on */
    const af_result *result;  /* the failing side's result; NULL: no symptom variables (an
                                 entry with a symptom clause then does not match) */
    const char *message;      /* the backend's error message, may be NULL */
    const char *stderr_tail;  /* the worker's stderr tail, may be NULL */
    const char *tensor;       /* "out" (or NULL), or the gradient the finding is on ("dq", ...) */
    const af_known_host *host; /* where it was found: NULL is this host, its backend reporting no
                                  libraries */
    bool any_scope;           /* match entries whatever their needs (which bug a bundle recorded,
                                 maybe on another host); false: an entry out of scope on host never
                                 matches (a version or GPU not reported counts as met) */
} af_known_finding;

/* The first entry (in load order) the finding matches, -1 for none. Cheap: no I/O, no
 * allocation. */
long af_known_match(const af_known *k, const af_known_finding *f);

/* The predicate variables, for listings (`attnfuzz known --vars`, docs/known.md): the
 * i-th's name (NULL past the last), and in buf what it is ("case"/"symptom", its type and,
 * for an enum, its values). */
const char *af_known_var(size_t i, char *buf, size_t len);

/* --- the generator's side (src/campaign/known_gate.c): which cases trigger an entry ---------------- */

#define AF_KNOWN_NVARS 128
/* The case variables of c, computed once for several af_known_when calls. */
typedef struct af_known_vars {
    double v[AF_KNOWN_NVARS];
} af_known_vars;
void af_known_vars_of_case(af_known_vars *vars, const af_case *c);
/* Does entry i name this backend (a name as af_backend_name gives it)? */
bool af_known_applies(const af_known *k, size_t i, const char *backend);
/* Does entry i's `when` hold on the case whose variables these are? */
bool af_known_when(const af_known *k, size_t i, const af_known_vars *vars);

/* --- what an executor or a bundle holds (src/campaign/known_match.c) ------------------ */

struct af_exec;
struct af_bundle;
/* The known bug finding i of the executor's last execution is (the stderr tail of its
 * failing backend included, its needs judged on this CPU and the libraries that backend's
 * hello reports), -1 for none. */
long af_known_match_exec(const af_known *k, const struct af_exec *x, size_t i);
/* The executor's backends (bit k: af_exec_backend_at) a finding of `who` names: "B",
 * both sides of "A,B", the B of "R@B". */
uint32_t af_known_exec_backends(const struct af_exec *x, const char *who);
/* The known bug a bundle's recorded finding is, without running any backend: its kind,
 * who and case, its failing backend's recorded output judged again against the reference
 * of its inputs (for where the failing elements sit), its recorded error and stderr.txt.
 * Whatever the entries need of the host (the bundle may come from another machine).
 * *entry = -1 for none. Errors: the bundle's arrays cannot be read (named). */
af_status af_known_match_bundle(const af_known *k, const struct af_bundle *b, long *entry, af_error *err);
/* regress and replay, for a bundle whose recorded failure passes now: is that a fix? The
 * known bug the bundle records (af_known_match_bundle), its needs judged on this CPU and
 * the libraries x's backend that the finding names reports (x NULL, or a backend that
 * reports none: unknown). *scope AF_KNOWN_SCOPE_IN (also: no entry, k NULL) means fixed;
 * otherwise the bundle is skipped on this host and why says so ("needs avx512f"); *entry
 * (may be NULL) the entry or -1. Errors as af_known_match_bundle. */
af_status af_known_bundle_scope(const af_known *k, const struct af_bundle *b, const struct af_exec *x,
                                af_known_scope *scope, long *entry, char *why, size_t len, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
