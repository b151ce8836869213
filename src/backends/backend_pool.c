/* backend_pool.c - backends opened once and lent to many executors (see backend_pool.h).
 *
 * A short list searched linearly: a corpus names a few dozen backends at most, and an open
 * costs a process start where a search costs microseconds. */
#include "attnfuzz/backend_pool.h"

#include <stdbool.h>
#include <string.h>

#include "attnfuzz/mem.h"

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

af_status af_backend_pool_open(af_backend_pool *p, const char *spec, const af_worker_opts *wopts, af_backend **out,
                               af_error *err) {
    *out = NULL;
    af_worker_opts o;
    if (wopts) o = *wopts;
    else memset(&o, 0, sizeof o);
    for (size_t i = 0; i < p->n; i++) {
        af_pool_entry *e = &p->e[i];
        if (strcmp(e->spec, spec) != 0 || !af_pool_same_opts(&e->wopts, &o)) continue;
        if (!e->be) {
            if (err) *err = e->err;
            return e->err.code;
        }
        *out = e->be;
        return AF_OK;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        af_pool_entry *ne = af_calloc(cap, sizeof *ne);
        AF_RETURN_ERROR_IF(!ne, err, AF_ERR_NOMEM, "out of memory");
        if (p->e) memcpy(ne, p->e, p->n * sizeof *ne);
        af_free(p->e);
        p->e = ne;
        p->cap = cap;
    }
    af_pool_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    e->spec = af_strdup(spec);
    AF_RETURN_ERROR_IF(!e->spec, err, AF_ERR_NOMEM, "out of memory");
    e->wopts = o;
    af_status st = af_backend_spec_open(spec, &o, &e->be, &e->err);
    p->n++;
    if (st != AF_OK) {
        e->be = NULL;
        if (e->err.code == AF_OK) e->err.code = st;
        p->stats.failed++;
        if (err) *err = e->err;
        return st;
    }
    p->stats.opened++;
    if (af_backend_spec_kind(spec) == AF_BACKEND_WORKER) p->stats.workers++;
    *out = e->be;
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
    for (size_t i = 0; i < p->n; i++) {
        const af_backend_ext *ext = p->e[i].be ? af_backend_ext_of(p->e[i].be) : NULL;
        if (ext) s->restarts += ext->restarts;
    }
}
