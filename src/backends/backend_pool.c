/* backend_pool.c - backends opened once and lent to many executors (see backend_pool.h).
 *
 * A short list searched linearly: a corpus names a few dozen backends at most, and an open
 * costs a process start where a search costs microseconds.
 *
 * af_backend_pool_open_all starts workers on threads. What makes af_backend_spec_open of a
 * worker: or target: spec safe to call from several threads at once (worker.c, proc.c):
 * each af_worker owns its argv, buffers and error text (the caller's af_error per entry);
 * its pipes are made with O_CLOEXEC (pipe2), so a child that another thread spawns at the
 * same moment inherits none of them, and posix_spawn gets its own file actions and
 * attributes; the project root and its Python (af_proc_python_find) are looked up on every
 * call from /proc/self/exe, the current directory and $ATTNFUZZ_PYTHON, nothing cached;
 * environ is only read (nobody sets a variable while a pool opens); strerror gives glibc's
 * constant texts (an unknown number: a buffer of the thread's own). The one shared state on
 * that path is af_blas_single_thread's "done" flag (af_backend_open_state): it is set here
 * before the threads start. Builtin and plugin specs (in-process: cheap to open, and dlopen
 * of a plugin runs its constructors) are opened on the calling thread first. */
#include "attnfuzz/backend_pool.h"

#include <stdbool.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "parallel.h"

typedef struct af_pool_entry {
    char *spec;          /* af_malloc'd */
    af_worker_opts wopts;
    af_backend *be;      /* NULL: the open failed, err says why */
    af_error err;
} af_pool_entry;

struct af_backend_pool {
    af_pool_entry *e;
    size_t n, cap;
    af_backend_pool_stats stats; /* restarts: of the backends closed so far */
};

af_backend_pool *af_backend_pool_create(void) { return af_calloc(1, sizeof(af_backend_pool)); }

/* Closes e's backend, keeping its restarts in the pool's count. */
static void af_pool_entry_close(af_backend_pool *p, af_pool_entry *e) {
    const af_backend_ext *ext = e->be ? af_backend_ext_of(e->be) : NULL;
    if (ext) p->stats.restarts += ext->restarts;
    af_backend_close(e->be);
    af_free(e->spec);
    memset(e, 0, sizeof *e);
}

void af_backend_pool_destroy(af_backend_pool *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) af_pool_entry_close(p, &p->e[i]);
    af_free(p->e);
    af_free(p);
}

static bool af_pool_same_opts(const af_worker_opts *a, const af_worker_opts *b) {
    return a->timeout == b->timeout && a->compile_timeout == b->compile_timeout &&
           a->unsupported_learn == b->unsupported_learn && a->no_spare == b->no_spare;
}

static af_worker_opts af_pool_opts(const af_worker_opts *wopts) {
    af_worker_opts o;
    if (wopts) o = *wopts;
    else memset(&o, 0, sizeof o);
    return o;
}

/* The entry of spec opened with options o, or NULL. */
static af_pool_entry *af_pool_find(af_backend_pool *p, const char *spec, const af_worker_opts *o) {
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->e[i].spec, spec) == 0 && af_pool_same_opts(&p->e[i].wopts, o)) return &p->e[i];
    return NULL;
}

/* Room for `more` entries beyond p->n (entries do not move while they are filled). */
static af_status af_pool_reserve(af_backend_pool *p, size_t more, af_error *err) {
    if (p->n + more <= p->cap) return AF_OK;
    size_t cap = p->cap ? p->cap : 16;
    while (cap < p->n + more) cap *= 2;
    af_pool_entry *ne = af_calloc(cap, sizeof *ne);
    AF_RETURN_ERROR_IF(!ne, err, AF_ERR_NOMEM, "out of memory");
    if (p->e) memcpy(ne, p->e, p->n * sizeof *ne);
    af_free(p->e);
    p->e = ne;
    p->cap = cap;
    return AF_OK;
}

/* Opens entry e (spec and options set); its failure stays in e->err. */
static af_status af_pool_entry_open(af_pool_entry *e) {
    af_status st = af_backend_spec_open(e->spec, &e->wopts, &e->be, &e->err);
    if (st != AF_OK) {
        e->be = NULL;
        if (e->err.code == AF_OK) e->err.code = st;
    }
    return st;
}

/* Counts e's open in the pool's stats. */
static void af_pool_entry_count(af_backend_pool *p, const af_pool_entry *e) {
    if (!e->be) {
        p->stats.failed++;
        return;
    }
    p->stats.opened++;
    if (af_backend_spec_kind(e->spec) == AF_BACKEND_WORKER) p->stats.workers++;
}

af_status af_backend_pool_open(af_backend_pool *p, const char *spec, const af_worker_opts *wopts, af_backend **out,
                               af_error *err) {
    *out = NULL;
    af_worker_opts o = af_pool_opts(wopts);
    af_pool_entry *e = af_pool_find(p, spec, &o);
    if (e && !e->be) {
        if (err) *err = e->err;
        return e->err.code;
    }
    if (e) {
        *out = e->be;
        return AF_OK;
    }
    AF_TRY(af_pool_reserve(p, 1, err));
    e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    e->spec = af_strdup(spec);
    AF_RETURN_ERROR_IF(!e->spec, err, AF_ERR_NOMEM, "out of memory");
    e->wopts = o;
    af_status st = af_pool_entry_open(e);
    p->n++;
    af_pool_entry_count(p, e);
    if (st != AF_OK) {
        if (err) *err = e->err;
        return st;
    }
    *out = e->be;
    return AF_OK;
}

static void af_pool_open_one(void *ctx, size_t i) {
    af_pool_entry *e = ctx;
    (void)af_pool_entry_open(&e[i]);
}

af_status af_backend_pool_open_all(af_backend_pool *p, const char *const *specs, size_t n,
                                   const af_worker_opts *wopts, unsigned threads, af_error *err) {
    af_worker_opts o = af_pool_opts(wopts);
    AF_TRY(af_pool_reserve(p, n, err));
    /* the new entries, p->e[first .. p->n): workers first (they start on the threads), then
     * the in-process ones */
    size_t first = p->n, nworkers = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            bool worker = af_backend_spec_kind(specs[i]) == AF_BACKEND_WORKER;
            if (worker != (pass == 0) || af_pool_find(p, specs[i], &o)) continue; /* held, or twice in specs */
            af_pool_entry *e = &p->e[p->n];
            memset(e, 0, sizeof *e);
            e->spec = af_strdup(specs[i]);
            if (!e->spec) {
                for (size_t k = first; k < p->n; k++) af_free(p->e[k].spec);
                memset(p->e + first, 0, (p->n - first) * sizeof *p->e);
                p->n = first;
                return af_error_set(err, AF_ERR_NOMEM, "out of memory");
            }
            e->wopts = o;
            p->n++;
            nworkers += worker;
        }
    }
    for (size_t k = first + nworkers; k < p->n; k++) (void)af_pool_entry_open(&p->e[k]);
    if (threads > AF_BACKEND_POOL_THREADS) threads = AF_BACKEND_POOL_THREADS;
    af_blas_single_thread(); /* its flag is the one state the opens share: set before the threads */
    af_parallel_for(nworkers, threads, af_pool_open_one, p->e + first);
    for (size_t k = first; k < p->n; k++) af_pool_entry_count(p, &p->e[k]);
    return AF_OK;
}

void af_backend_pool_close(af_backend_pool *p, const char *spec) {
    for (size_t i = 0; i < p->n;) {
        if (strcmp(p->e[i].spec, spec) != 0) {
            i++;
            continue;
        }
        af_pool_entry_close(p, &p->e[i]);
        p->e[i] = p->e[--p->n];
    }
}

void af_backend_pool_stats_of(const af_backend_pool *p, af_backend_pool_stats *s) {
    *s = p->stats;
    s->running = 0;
    for (size_t i = 0; i < p->n; i++) {
        const af_backend_ext *ext = p->e[i].be ? af_backend_ext_of(p->e[i].be) : NULL;
        if (ext) s->restarts += ext->restarts;
        if (p->e[i].be && af_backend_spec_kind(p->e[i].spec) == AF_BACKEND_WORKER) s->running++;
    }
}
