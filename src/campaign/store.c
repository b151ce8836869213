/* store.c - minimize, sign, count and store findings (see store.h). Shared by the
 * campaign loop and the fuzz harnesses. */
#include "attnfuzz/store.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/minimize.h"
#include "attnfuzz/stop.h"
#include "clock.h"
#include "beside.h"
#include "store_known.h"
#include "minrec.h"

/* Minimizing one new finding takes at most this long (besides minimize_execs): a target
 * compiling every new shape for a second would spend minutes on 400 steps. */
#define AF_MINIMIZE_SECONDS 60.0
/* Seconds between two looks at a queued finding: at the shared record (has another
 * process minimized it?) and, when it recurs, at the budget (can it be minimized now?). */
#define AF_STORE_RETRY 1.0
/* The end pass waits this long between looks for the alias of a finding another process
 * is minimizing. */
#define AF_STORE_WAIT_NS 50000000L
/* Minimized cases kept as patterns (minimize.h: af_minimize_opts.hints), most recently
 * useful first, and how many of those (of the finding's check and kind) a minimization
 * tries: each costs one execution when it does not hold. */
#define AF_STORE_HINTS 16
#define AF_STORE_HINT_TRIES 3
/* New findings waiting for the minimizer beside (opts.beside), each holding the record of
 * the execution that found it: with this many waiting, the next execution's findings are
 * stored once the minimizer has taken one more (exploration waits, as it does for
 * minimizing at once). */
#define AF_STORE_JOBS 8

/* --- raw signature -> minimized signature ---------------------------------------- */

/* Every new raw signature is minimized once; its repeats map straight to the signature
 * (and kind) of the minimized case. Open addressing, grown at half load. */
typedef struct af_alias_map {
    uint64_t *keys, *vals; /* key 0 = empty (raw signatures are hashes; 0 is remapped) */
    uint8_t *kinds;
    size_t cap, n;
} af_alias_map;

static uint64_t af_alias_key(uint64_t k) { return k ? k : 1; }

static bool af_alias_get(const af_alias_map *m, uint64_t key, uint64_t *val, af_kind *kind) {
    if (!m->cap) return false;
    key = af_alias_key(key);
    for (size_t i = (size_t)(key % m->cap);; i = (i + 1) % m->cap) {
        if (m->keys[i] == 0) return false;
        if (m->keys[i] == key) {
            *val = m->vals[i];
            *kind = (af_kind)m->kinds[i];
            return true;
        }
    }
}

static bool af_alias_put(af_alias_map *m, uint64_t key, uint64_t val, af_kind kind) {
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1024;
        uint64_t *k = af_calloc(cap, sizeof *k), *v = af_calloc(cap, sizeof *v);
        uint8_t *kd = af_calloc(cap, sizeof *kd);
        if (!k || !v || !kd) {
            af_free(k);
            af_free(v);
            af_free(kd);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = (size_t)(m->keys[i] % cap);
            while (k[j]) j = (j + 1) % cap;
            k[j] = m->keys[i];
            v[j] = m->vals[i];
            kd[j] = m->kinds[i];
        }
        af_free(m->keys);
        af_free(m->vals);
        af_free(m->kinds);
        m->keys = k, m->vals = v, m->kinds = kd, m->cap = cap;
    }
    key = af_alias_key(key);
    size_t i = (size_t)(key % m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) % m->cap;
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    m->kinds[i] = (uint8_t)kind;
    return true;
}

/* Index of x's finding for check, SIZE_MAX when that check passed. */
static size_t af_store_failing(const af_exec *x, size_t check) {
    for (size_t k = 0; k < af_exec_finding_count(x); k++)
        if (af_exec_finding(x, k)->check == check) return k;
    return SIZE_MAX;
}

/* --- the finite twin ----------------------------------------------------------------- */

static bool af_store_numeric_kind(af_kind k) {
    return k == AF_KIND_NAN_MISMATCH || k == AF_KIND_INF_MISMATCH || k == AF_KIND_MASKED_ROW_NAN ||
           k == AF_KIND_MASKED_VALUE_LEAK || k == AF_KIND_DIVERGE;
}

/* A NaN/Inf finding on a case with planted non-finite values (specials) whose finite
 * twin (the same case without them) fails the same check too is the twin's finding: the
 * bug shows without the planted values, which only change how it looks (a wrong causal
 * diagonal gives a diverge, and a NaN or an Inf wherever a planted value falls under the
 * wrong mask: one bug, one bundle). Then *c becomes the twin, minimized for its own kind
 * within o (tr says how that went), and x holds its execution; otherwise *c is unchanged
 * and x holds *c's execution again. A time limit of 0 leaves no time: cut, nothing runs. */
static af_status af_store_finite_twin(af_exec *x, size_t check, af_kind kind, af_case *c, const af_minimize_opts *o,
                                      unsigned *spent, af_minimize_result *tr, af_error *err) {
    memset(tr, 0, sizeof *tr);
    bool special = false;
    for (int t = 0; t < AF_QKV_COUNT; t++) special |= c->t[t].special != AF_SPECIAL_NONE;
    if (!special || kind == AF_KIND_DIVERGE || !af_store_numeric_kind(kind)) return AF_OK;
    if (o->max_seconds < 0) {
        tr->cut = true;
        return AF_OK;
    }
    af_case twin = *c;
    for (int t = 0; t < AF_QKV_COUNT; t++) twin.t[t].special = AF_SPECIAL_NONE;
    af_status st = af_exec_run_check(x, check, &twin, err);
    if (st != AF_OK) return st;
    (*spent)++;
    const af_finding *f = af_exec_finding_for(x, check);
    if (!f || !af_store_numeric_kind(f->kind)) return af_exec_run_check(x, check, c, err);
    st = af_minimize(x, check, f->kind, &twin, o, tr, err);
    *spent += tr->execs;
    if (st == AF_OK && !tr->cut) *c = twin;
    if (st == AF_OK && tr->cut) st = af_exec_run_check(x, check, c, err);
    return st;
}

/* --- the store -------------------------------------------------------------------------- */

/* What a smaller case must keep to be the same finding: the tensor it is on ("out", "dq",
 * ...) and, for an error, its message's class (af_error_class). "" and 0: anything (a
 * bundle adopted). */
typedef struct af_store_same {
    char tensor[8];
    uint64_t error_class;
} af_store_same;

static af_store_same af_store_same_of(const af_finding *f) {
    af_store_same w = {.error_class = f->error_class};
    snprintf(w.tensor, sizeof w.tensor, "%s", f->tensor);
    return w;
}

/* A finding stored as found, to be minimized later (store.h). Counted in stats under its
 * raw signature until then. */
typedef struct af_store_item {
    uint64_t raw;  /* its raw signature */
    af_kind kind;  /* its kind as found */
    size_t check;  /* its check (an index into the executor's checks) */
    af_store_same same; /* what minimizing it must keep */
    af_case c;     /* where minimizing (re)starts: the case as found, or as far as a
                      minimization that the budget cut short got */
    double looked; /* af_now() of the last look at the shared record for it */
} af_store_item;

typedef struct af_store_job af_store_job;

/* A minimized case: a pattern for minimizing later findings of its check and kind. */
typedef struct af_store_hint {
    af_case c;
    size_t check;
    af_kind kind;
    uint64_t sig;
} af_store_hint;

struct af_store {
    af_store_opts o;
    af_store_hint hints[AF_STORE_HINTS];
    size_t n_hints;
    af_alias_map aliases;
    af_alias_map known_raw; /* raw signature -> the known bug (index in opts.known) it minimized to */
    af_store_known *known; /* NULL: no known bugs to match */
    af_minrec *rec;
    /* the executor minimizing runs on (af_store_runner): af_exec_create_beside of mx_of,
     * created at the first minimization (with opts.beside, with backends of its own) */
    af_exec *mx;
    af_exec *mx_of;
    /* the minimizer beside (opts.beside): its thread (beside.h), the job handed to it
     * (todo, until taken back) and the jobs waiting, first come first */
    af_beside *mt;
    af_store_job *todo;
    af_store_job **jobs;
    size_t njobs, capjobs;
    af_store_item *queue;
    size_t nq, capq;
    double spent;     /* seconds minimizing in af_store_findings: what the budget counts */
    double refreshed; /* af_now() of the last look at the record for the whole queue */
    char raw_dir[PATH_MAX];
};

af_store *af_store_create(const af_store_opts *o, af_error *err) {
    af_store *st = af_calloc(1, sizeof *st);
    if (!st) {
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    st->o = *o;
    if (!st->o.crashes_dir) st->o.crashes_dir = "crashes";
    st->known = af_store_known_create(o->known, err);
    if (af_known_count(o->known) && !st->known) {
        af_free(st);
        return NULL;
    }
    snprintf(st->raw_dir, sizeof st->raw_dir, "%s/%s", st->o.crashes_dir, AF_STORE_RAW_DIR);
    st->rec = af_minrec_open(st->o.crashes_dir);
    if (!st->rec) {
        af_store_known_destroy(st->known);
        af_free(st);
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return st;
}

uint64_t af_store_known_hits(const af_store *st, size_t entry, size_t backend) {
    return af_store_known_count(st->known, entry, backend);
}

static void af_store_stop(af_store *st);

void af_store_destroy(af_store *st) {
    if (!st) return;
    af_store_stop(st);
    af_exec_destroy(st->mx);
    af_minrec_close(st->rec);
    af_free(st->aliases.keys);
    af_free(st->aliases.vals);
    af_store_known_destroy(st->known);
    af_free(st->aliases.kinds);
    af_free(st->known_raw.keys);
    af_free(st->known_raw.vals);
    af_free(st->known_raw.kinds);
    af_free(st->queue);
    af_free(st);
}

size_t af_store_queued(const af_store *st) { return st->nq; }

bool af_store_alias(const af_store *st, uint64_t raw, uint64_t *sig, af_kind *kind) {
    return af_alias_get(&st->aliases, raw, sig, kind);
}

static size_t af_store_item_of(const af_store *st, uint64_t raw) {
    for (size_t i = 0; i < st->nq; i++)
        if (st->queue[i].raw == raw) return i;
    return SIZE_MAX;
}

static af_status af_store_enqueue(af_store *st, uint64_t raw, af_kind kind, size_t check, const af_store_same *same,
                                  const af_case *c, af_error *err) {
    if (af_store_item_of(st, raw) != SIZE_MAX) return AF_OK;
    if (st->nq == st->capq) {
        size_t cap = st->capq ? 2 * st->capq : 16;
        af_store_item *q = af_calloc(cap, sizeof *q);
        AF_RETURN_ERROR_IF(!q, err, AF_ERR_NOMEM, "out of memory");
        if (st->queue) memcpy(q, st->queue, st->nq * sizeof *q);
        af_free(st->queue);
        st->queue = q;
        st->capq = cap;
    }
    af_store_item *it = &st->queue[st->nq++];
    memset(it, 0, sizeof *it);
    it->raw = raw;
    it->kind = kind;
    it->check = check;
    if (same) it->same = *same;
    it->c = *c;
    it->looked = af_now();
    return AF_OK;
}

static void af_store_dequeue(af_store *st, size_t i) { st->queue[i] = st->queue[--st->nq]; }

/* The seconds the next minimization may take: the per-finding cap, the deadline, and
 * (budget) what is left of the share of `elapsed`. *bounded: the deadline or the budget
 * decides, not the cap, so a minimization cut short is not signed on (it would sign as a
 * half-way case: another bundle for the same bug) but queued. */
static double af_store_limit(const af_store *st, double elapsed, bool budget, double deadline, bool *bounded) {
    const af_store_opts *o = &st->o;
    double cap = o->minimize_seconds < 0 ? HUGE_VAL : o->minimize_seconds > 0 ? o->minimize_seconds
                                                                             : AF_MINIMIZE_SECONDS;
    double lim = deadline > 0 ? deadline - af_now() : HUGE_VAL;
    if (budget && o->minimize_share > 0 && o->minimize_share < 1)
        lim = fmin(lim, o->minimize_share * elapsed - st->spent);
    *bounded = lim < cap;
    return fmin(lim, cap);
}

/* Puts a minimized case first among the patterns (once per signature; the least recently
 * useful one goes when they are all taken). */
static void af_store_hint_add(af_store *st, size_t check, af_kind kind, uint64_t sig, const af_case *c) {
    size_t i = 0;
    while (i < st->n_hints && st->hints[i].sig != sig) i++;
    if (i == st->n_hints && st->n_hints < AF_STORE_HINTS) st->n_hints++;
    if (i == AF_STORE_HINTS) i--;
    memmove(&st->hints[1], &st->hints[0], i * sizeof st->hints[0]);
    st->hints[0] = (af_store_hint){*c, check, kind, sig};
}

/* A bug another process minimized (alias a) becomes a pattern here: its bundle's case. */
static void af_store_hint_read(af_store *st, size_t check, const af_minrec_alias *a) {
    for (size_t i = 0; i < st->n_hints; i++)
        if (st->hints[i].sig == a->sig) return;
    char name[64], dir[PATH_MAX + 80];
    af_bundle_name(a->kind, a->sig, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", st->o.crashes_dir, name);
    af_bundle *b = NULL;
    af_error err;
    if (af_bundle_read(dir, &b, &err) == AF_OK && af_bundle_minimized(b) > 0)
        af_store_hint_add(st, check, a->kind, a->sig, af_bundle_case(b));
    af_bundle_free(b);
}

/* The executor a minimization runs on, for findings of x: one beside x
 * (af_exec_create_beside: the same checks, x's backends), created the first time, so that
 * x keeps the record of the execution being stored (its bundle as found is written from
 * that record, nothing runs again). beside false (the end pass, `attnfuzz minimize DIR`: nothing of x is
 * stored after it): that one when it exists, else x itself. NULL on error (*err). */
static af_exec *af_store_runner(af_store *st, af_exec *x, bool beside, af_error *err) {
    if (st->mx && st->mx_of == x) return st->mx;
    if (!beside) return x;
    af_exec_destroy(st->mx); /* of another executor's checks */
    st->mx_of = NULL;
    st->mx = af_exec_create_beside(x, st->o.beside, err);
    if (st->mx) st->mx_of = x;
    return st->mx;
}

/* How a minimization went. */
typedef struct af_store_min {
    bool done;    /* not cut short by a bounded limit (else *c holds how far it got) */
    bool known;   /* it reached a known signature: the finding is the bug `sig` names */
    uint64_t sig; /* when known: the minimized signature and its kind */
    af_kind kind;
} af_store_min;

/* One minimization as a value: prepared and applied where the store is used
 * (af_store_mjob_prepare, _apply), run (af_store_mjob_run) on whichever thread owns the
 * executor it runs on, touching nothing of the store then but its options and its shared
 * record's directory: the patterns and the signatures known to be minimized are its own
 * copies, taken when it is prepared (nothing else changes them while a minimization runs
 * on the store's thread, so the copies are what it would have read). */
typedef struct af_store_mjob {
    const af_store *st;
    size_t check;
    af_kind kind;
    af_store_same same;
    af_case c; /* in: where it starts; out: how far it got */
    double limit;
    bool bounded, in_budget;
    af_case hints[AF_STORE_HINT_TRIES]; /* the patterns of its check and kind, most recently useful first */
    size_t from[AF_STORE_HINT_TRIES];   /* their places in st->hints */
    size_t n_hints;
    af_alias_map known;   /* raw -> minimized signatures, as the store knew them, and as read since */
    af_alias_map unmin;   /* the signatures of entries stored as found (their aliases are not minimized) */
    af_alias_map learned; /* read from the shared record while it ran: the store's aliases too */
    /* out */
    af_status r;
    af_error err;
    af_store_min m;
    unsigned spent; /* executions */
    size_t hint;    /* the pattern that held (1-based, 0: none) */
    double seconds;
    bool pattern; /* minimized to the end, not known: a pattern for later ones */
    uint64_t psig;
    af_kind pkind;
} af_store_mjob;

static void af_alias_free(af_alias_map *m) {
    af_free(m->keys);
    af_free(m->vals);
    af_free(m->kinds);
    memset(m, 0, sizeof *m);
}

static bool af_alias_copy(af_alias_map *dst, const af_alias_map *src) {
    memset(dst, 0, sizeof *dst);
    if (!src->cap) return true;
    dst->keys = af_calloc(src->cap, sizeof *dst->keys);
    dst->vals = af_calloc(src->cap, sizeof *dst->vals);
    dst->kinds = af_calloc(src->cap, sizeof *dst->kinds);
    if (!dst->keys || !dst->vals || !dst->kinds) {
        af_alias_free(dst);
        return false;
    }
    memcpy(dst->keys, src->keys, src->cap * sizeof *dst->keys);
    memcpy(dst->vals, src->vals, src->cap * sizeof *dst->vals);
    memcpy(dst->kinds, src->kinds, src->cap * sizeof *dst->kinds);
    dst->cap = src->cap;
    dst->n = src->n;
    return true;
}

/* af_minimize_opts.known: a signature the store knows the minimized signature of (its
 * own alias to a minimized entry, or the shared record's). A case of it found while
 * minimizing is a finding of that bug, as the store signs every finding: minimizing
 * stops there (a raw signature's minimization mostly reaches, once the incidental
 * features are gone, the signature of a bug already minimized). */
static bool af_store_mjob_known(void *ctx, uint64_t sig) {
    af_store_mjob *j = ctx;
    uint64_t to, unused;
    af_kind kind;
    if (af_alias_get(&j->known, sig, &to, &kind))
        return !af_alias_get(&j->unmin, to, &unused, &kind); /* not one stored as found (a flaky target's) */
    af_minrec_alias a;
    if (!af_minrec_alias_read(j->st->rec, sig, &a)) return false;
    (void)af_alias_put(&j->learned, sig, a.sig, a.kind);
    return af_alias_put(&j->known, sig, a.sig, a.kind);
}

/* Prepares j: minimizing c (check fails with kind) within limit seconds. */
static af_status af_store_mjob_prepare(const af_store *st, const af_campaign_stats *s, af_store_mjob *j, size_t check,
                                       af_kind kind, const af_store_same *same, const af_case *c, double limit, bool bounded,
                                       bool in_budget, af_error *err) {
    memset(j, 0, sizeof *j);
    j->st = st;
    j->check = check;
    j->kind = kind;
    if (same) j->same = *same;
    j->c = *c;
    j->limit = limit;
    j->bounded = bounded;
    j->in_budget = in_budget;
    for (size_t i = 0; i < st->n_hints && j->n_hints < AF_STORE_HINT_TRIES; i++)
        if (st->hints[i].check == check && st->hints[i].kind == kind) {
            j->from[j->n_hints] = i;
            j->hints[j->n_hints++] = st->hints[i].c;
        }
    bool ok = af_alias_copy(&j->known, &st->aliases);
    for (size_t i = 0; ok && i < s->n_sigs; i++)
        if (s->sigs[i].unminimized) ok = af_alias_put(&j->unmin, s->sigs[i].signature, 0, s->sigs[i].kind);
    if (ok) return AF_OK;
    af_alias_free(&j->known);
    af_alias_free(&j->unmin);
    return af_error_set(err, AF_ERR_NOMEM, "out of memory");
}

/* Runs j on x: minimizes, then the finite twin; stops at a known signature. Its result is
 * unusable (m.done false) when bounded and the limit cut it short. Unless known, x holds
 * the execution of the case it ends on (j->c) afterwards. */
static void af_store_mjob_run(af_store_mjob *j, af_exec *x) {
    double t0 = af_now();
    af_minimize_opts mo = {.max_execs = j->st->o.minimize_execs, .max_seconds = isinf(j->limit) ? 0 : j->limit,
                           .known = af_store_mjob_known, .ctx = j, .tensor = j->same.tensor[0] ? j->same.tensor : NULL,
                           .error_class = j->same.error_class,
                           .hints = j->hints, .n_hints = j->n_hints};
    af_minimize_result mr, tr;
    memset(&tr, 0, sizeof tr);
    af_case small = j->c;
    j->r = af_minimize(x, j->check, j->kind, &small, &mo, &mr, &j->err);
    j->hint = j->r == AF_OK ? mr.hint : 0;
    unsigned spent = j->r == AF_OK ? mr.execs : 0;
    if (j->r == AF_OK && !mr.known && !(mr.cut && j->bounded)) {
        double left = j->limit - (af_now() - t0);
        if (!isinf(j->limit)) mo.max_seconds = left > 0 ? left : -1; /* -1: no time left for it */
        j->r = af_store_finite_twin(x, j->check, j->kind, &small, &mo, &spent, &tr, &j->err);
    }
    af_store_min *m = &j->m;
    m->done = !((mr.cut || tr.cut) && j->bounded);
    m->known = mr.known || tr.known;
    if (m->known) {
        bool got = af_alias_get(&j->known, mr.known ? mr.signature : tr.signature, &m->sig, &m->kind);
        AF_ASSERT(got); /* af_store_mjob_known put it there */
    } else if (j->r == AF_OK && m->done) {
        const af_finding *f = af_exec_finding_for(x, j->check);
        if (f) {
            j->pattern = true;
            j->psig = f->signature;
            j->pkind = f->kind;
        }
    }
    j->spent = spent;
    j->seconds = af_now() - t0;
    if (j->r == AF_OK) j->c = small;
}

/* What j learned, into the store: the pattern that held first from now on, the minimized
 * case a pattern, the record's aliases it read; its executions and seconds counted in
 * stats (and, in_budget, in the budget). Returns j's status (err: its message). */
static af_status af_store_mjob_apply(af_store *st, af_campaign_stats *s, af_store_mjob *j, af_error *err) {
    if (j->r == AF_OK && j->hint) { /* that pattern held: first from now on */
        af_store_hint h = st->hints[j->from[j->hint - 1]];
        af_store_hint_add(st, h.check, h.kind, h.sig, &h.c);
    }
    if (j->pattern) af_store_hint_add(st, j->check, j->pkind, j->psig, &j->c);
    for (size_t i = 0; i < j->learned.cap; i++)
        if (j->learned.keys[i])
            (void)af_alias_put(&st->aliases, j->learned.keys[i], j->learned.vals[i], (af_kind)j->learned.kinds[i]);
    s->minimize_execs += j->spent;
    s->minimize_seconds += j->seconds;
    if (j->in_budget) st->spent += j->seconds;
    af_alias_free(&j->known);
    af_alias_free(&j->unmin);
    af_alias_free(&j->learned);
    if (j->r != AF_OK && err) *err = j->err;
    return j->r;
}

/* Minimizes *c (check fails with kind) within limit seconds, on x, here and now
 * (af_store_mjob_* in a row); *c becomes how far it got. */
static af_status af_store_minimize(af_store *st, af_exec *x, af_campaign_stats *s, size_t check, af_kind kind,
                                   const af_store_same *same, af_case *c, double limit, bool bounded, bool in_budget,
                                   af_store_min *m, af_error *err) {
    af_store_mjob *j = af_calloc(1, sizeof *j);
    AF_RETURN_ERROR_IF(!j, err, AF_ERR_NOMEM, "out of memory");
    af_status r = af_store_mjob_prepare(st, s, j, check, kind, same, c, limit, bounded, in_budget, err);
    if (r == AF_OK) {
        af_store_mjob_run(j, x);
        r = af_store_mjob_apply(st, s, j, err);
        *m = j->m;
        if (r == AF_OK) *c = j->c;
    }
    af_free(j);
    return r;
}

/* Writes the bundle of entry e from x's execution of check: a minimized case (replacing a
 * bundle of that name stored as found), or the case as found. A bundle that cannot be
 * written keeps the finding's input in e (the stats) and says so on stderr once; so does
 * one that is `lost`: minimizing ran the case again and it passed (a flaky target). */
static void af_store_write(af_store *st, af_exec *x, af_campaign_stats *s, af_signature_entry *e, size_t check,
                           bool minimized, bool lost, af_store_event *event) {
    size_t fi = lost ? SIZE_MAX : af_store_failing(x, check);
    af_error werr;
    af_status ws = AF_OK;
    if (fi == SIZE_MAX) {
        ws = af_error_set(&werr, AF_ERR_INVALID, "it did not fail again when re-run (a flaky target)");
    } else {
        af_exec_bundle_opts bo = {.signature = e->signature, .minimized = (signed char)(minimized ? 1 : -1),
                                  .old_dir = minimized ? st->raw_dir : NULL};
        ws = af_exec_write_bundle_with(x, fi, st->o.crashes_dir, &bo, e->bundle, sizeof e->bundle, &werr);
    }
    if (ws == AF_ERR_EXISTS) {
        e->stored_elsewhere = true;
        af_bundle_name(e->kind, e->signature, e->bundle, sizeof e->bundle);
    } else if (ws != AF_OK) {
        /* the finding is not lost: its input goes to stderr and to the stats, and the
         * bundle is written when the signature recurs (and the disk has room, or the
         * target fails again) */
        if (fi != SIZE_MAX && !e->write_failed) {
            e->write_failed = true;
            s->write_errors++;
        }
        e->bundle[0] = 0;
        event->failed = true;
        const uint8_t *bytes;
        size_t nb = af_exec_input(x, &bytes);
        for (size_t k = 0; k < nb && 2 * k + 2 < sizeof e->input_hex; k++)
            snprintf(e->input_hex + 2 * k, 3, "%02x", bytes[k]);
        if (e->count == 1)
            fprintf(stderr, "attnfuzz: could not store a %s finding of %s: %s\nattnfuzz: its input (hex): %s\n",
                    af_kind_names[e->kind], e->who, werr.msg, e->input_hex);
    } else {
        event->stored = true;
        if (e->write_failed) s->write_errors--; /* stored on a retry */
        e->write_failed = false;
    }
}

/* Records raw -> the minimized signature of entry e in the shared record (and e's own
 * signature as its own alias: a raw finding that signs as a minimized one is that one)
 * once e's bundle is there; else only drops the claim. A record that cannot be written
 * costs sharing, nothing else. */
static void af_store_publish(af_store *st, uint64_t raw, const af_signature_entry *e) {
    if (!e->bundle[0] && !e->stored_elsewhere) {
        af_minrec_release(st->rec, raw);
        return;
    }
    af_minrec_alias a = {raw, e->signature, e->kind}, self = {e->signature, e->signature, e->kind};
    af_error err;
    af_minrec_publish(st->rec, &a, &err);
    if (raw != e->signature) af_minrec_publish(st->rec, &self, &err);
    (void)af_alias_put(&st->aliases, e->signature, e->signature, e->kind);
}

/* Queued item i turned out minimized by another process (alias a): its entry becomes
 * a->sig's, its bundle as found goes to <crashes>/.raw/. *entry: the index of the entry. */
static af_status af_store_resolve_alias(af_store *st, af_campaign_stats *s, size_t i, const af_minrec_alias *a,
                                        bool from_record, size_t *entry, af_error *err) {
    af_store_item it = st->queue[i];
    af_store_dequeue(st, i);
    (void)af_alias_put(&st->aliases, it.raw, a->sig, a->kind); /* else the record is read again: no harm */
    const af_signature_entry *was = af_stats_find(s, it.raw);
    char who[sizeof was->who];
    snprintf(who, sizeof who, "%s", was ? was->who : "");
    af_signature_entry *e = af_stats_merge(s, it.raw, a->sig, a->kind, who);
    AF_RETURN_ERROR_IF(!e, err, AF_ERR_NOMEM, "out of memory");
    if (from_record) s->aliases_read++;
    s->minimized_later++;
    e->unminimized = false;
    if (!e->bundle[0]) { /* a renamed entry: the bundle is another one's */
        e->stored_elsewhere = true;
        af_bundle_name(e->kind, e->signature, e->bundle, sizeof e->bundle);
    }
    char name[64];
    af_bundle_name(it.kind, it.raw, name, sizeof name);
    if (it.raw != a->sig) af_bundle_retire(st->o.crashes_dir, name, st->raw_dir);
    if (entry) *entry = (size_t)(e - s->sigs);
    return AF_OK;
}

typedef enum { AF_STORE_RESOLVED, AF_STORE_BUSY, AF_STORE_LATER, AF_STORE_DROPPED } af_store_outcome;

/* The known bug the finding of `check` that x holds is (index in opts.known), or -1. */
static long af_store_known_after(const af_store *st, const af_exec *x, size_t check) {
    if (!st->known) return -1;
    for (size_t i = 0; i < af_exec_finding_count(x); i++)
        if (af_exec_finding(x, i)->check == check) return af_known_match_exec(st->o.known, x, i);
    return -1;
}

/* Queued item i minimized (x holds its execution, its finding fm) into known bug kb:
 * its count as found moves to the known bug's hits, its stats entry goes, its bundle as
 * found moves to <crashes>/.raw/, and its raw signature's repeats are that bug too. */
static af_status af_store_became_known(af_store *st, af_exec *x, af_campaign_stats *s, size_t i,
                                       const af_finding *fm, long kb, af_store_outcome *out, af_error *err) {
    af_store_item was = st->queue[i];
    af_store_dequeue(st, i);
    af_minrec_release(st->rec, was.raw);
    *out = AF_STORE_DROPPED;
    AF_RETURN_ERROR_IF(!af_alias_put(&st->known_raw, was.raw, (uint64_t)kb, fm->kind), err, AF_ERR_NOMEM,
                       "out of memory");
    uint64_t n = 1;
    af_signature_entry *old = af_stats_find(s, was.raw);
    if (old) {
        n = old->count ? old->count : 1;
        if (old->write_failed) s->write_errors--;
        s->unique_by_kind[old->kind]--;
        *old = s->sigs[--s->n_sigs];
    }
    af_store_event ev;
    AF_TRY(af_store_known_hit(st->known, x, s, fm, kb, st->o.crashes_dir, &ev, err));
    s->known[ev.entry].hits += n - 1;
    s->known_hits += n - 1;
    char name[64];
    af_bundle_name(was.kind, was.raw, name, sizeof name);
    af_bundle_retire(st->o.crashes_dir, name, st->raw_dir);
    return AF_OK;
}

/* One go at queued item i: the shared record, then, when limit > 0 and the claim is ours,
 * minimizing it. Resolved (minimized here or by another process: the item is gone and
 * *entry is the minimized signature's entry), busy (another process is at it), later
 * (no time, or cut short: progress kept), dropped (it no longer fails: it stays stored as
 * found; or it minimized into a known bug and is counted there). It minimizes on
 * af_store_runner(x, beside) and writes the minimized bundle from that executor's record. */
static af_status af_store_attempt(af_store *st, af_exec *x, bool beside, af_campaign_stats *s, size_t i,
                                  double limit, bool bounded, bool in_budget, af_store_outcome *out, size_t *entry,
                                  af_error *err) {
    af_store_item *it = &st->queue[i];
    uint64_t raw = it->raw;
    it->looked = af_now();
    af_minrec_alias a;
    af_minrec_state rs = limit > 0 ? af_minrec_claim(st->rec, raw, &a) : af_minrec_lookup(st->rec, raw, &a);
    *out = rs == AF_MINREC_BUSY ? AF_STORE_BUSY : AF_STORE_LATER;
    if (rs == AF_MINREC_ALIAS) {
        *out = AF_STORE_RESOLVED;
        return af_store_resolve_alias(st, s, i, &a, true, entry, err);
    }
    if (limit <= 0 || rs != AF_MINREC_MINE) return AF_OK;
    x = af_store_runner(st, x, beside, err);
    if (!x) {
        af_minrec_release(st->rec, raw);
        return err ? err->code : AF_ERR_NOMEM;
    }
    af_case c = it->c;
    af_store_min m;
    af_status r = af_store_minimize(st, x, s, it->check, it->kind, &it->same, &c, limit, bounded, in_budget, &m, err);
    it = &st->queue[i];
    if (r != AF_OK || !m.done) {
        if (r == AF_OK) it->c = c;
        af_minrec_release(st->rec, raw);
        return r;
    }
    if (m.known) { /* it reached a known bug: that bug's bundle, this alias */
        af_minrec_alias to = {raw, m.sig, m.kind};
        size_t ei;
        *out = AF_STORE_RESOLVED;
        r = af_store_resolve_alias(st, s, i, &to, false, &ei, err);
        if (r == AF_OK) af_store_publish(st, raw, &s->sigs[ei]);
        else af_minrec_release(st->rec, raw);
        if (entry) *entry = ei;
        return r;
    }
    const af_finding *fm = af_exec_finding_for(x, it->check);
    if (!fm) { /* it does not fail again (a flaky target): left as found */
        af_minrec_release(st->rec, raw);
        (void)af_alias_put(&st->aliases, raw, raw, it->kind);
        af_store_dequeue(st, i);
        *out = AF_STORE_DROPPED;
        return AF_OK;
    }
    long kb = af_store_known_after(st, x, it->check);
    if (kb >= 0) return af_store_became_known(st, x, s, i, fm, kb, out, err);
    af_store_item was = *it;
    af_store_dequeue(st, i);
    const af_signature_entry *old = af_stats_find(s, raw), *there = af_stats_find(s, fm->signature);
    /* the minimized signature's bundle is stored already (not one as found of that name) */
    bool stored = there && there != old && !there->unminimized && (there->bundle[0] || there->stored_elsewhere);
    char who[sizeof old->who];
    snprintf(who, sizeof who, "%s", old ? old->who : "");
    af_signature_entry *e = af_stats_merge(s, raw, fm->signature, fm->kind, who);
    if (!e) {
        af_minrec_release(st->rec, raw);
        return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    (void)af_alias_put(&st->aliases, raw, e->signature, e->kind);
    s->minimized_later++;
    e->unminimized = false;
    af_store_event ev = {0};
    if (!stored) af_store_write(st, x, s, e, was.check, true, false, &ev);
    af_store_publish(st, raw, e);
    char name[64];
    af_bundle_name(was.kind, raw, name, sizeof name);
    if ((e->bundle[0] || e->stored_elsewhere) && raw != e->signature)
        af_bundle_retire(st->o.crashes_dir, name, st->raw_dir); /* the minimized bundle is there */
    *out = AF_STORE_RESOLVED;
    if (entry) *entry = (size_t)(e - s->sigs);
    return AF_OK;
}

/* Resolves queued findings another process has minimized since the last look (at most
 * once every AF_STORE_RETRY seconds: one open(2) per queued finding). */
static af_status af_store_refresh(af_store *st, af_campaign_stats *s, af_error *err) {
    double now = af_now();
    if (st->nq == 0 || now - st->refreshed < AF_STORE_RETRY) return AF_OK;
    st->refreshed = now;
    for (size_t i = 0; i < st->nq;) {
        af_minrec_alias a;
        if (af_minrec_lookup(st->rec, st->queue[i].raw, &a) == AF_MINREC_ALIAS) {
            AF_TRY(af_store_resolve_alias(st, s, i, &a, true, NULL, err)); /* i now holds another item */
        } else {
            i++;
        }
    }
    return AF_OK;
}

/* How a finding is signed (af_store_sign). */
typedef struct af_store_verdict {
    uint64_t sig;   /* the signature it counts under */
    af_kind kind;   /* of the signed finding: a finite twin's may differ */
    bool mapped;    /* signed through an alias: its bundle is the minimized one's */
    bool minimized; /* minimized now: mx holds the minimized case's execution */
    bool claimed;   /* the raw signature's claim is ours: published or released here */
    bool queue;     /* stored as found and queued, minimizing restarts from `start` */
    bool lost;      /* minimizing ran it again and it passed (a flaky target) */
    af_exec *mx;    /* the executor minimizing ran on */
    af_case start;
} af_store_verdict;

/* After minimizing f's case (m, on v->mx, v->start how far it got): v's verdict; or the
 * finding minimized into a known bug, counted there (*counted, event filled). */
static af_status af_store_after_min(af_store *st, af_campaign_stats *s, const af_finding *f, const af_store_min *m,
                                    af_store_verdict *v, bool *counted, af_store_event *event, af_error *err) {
    uint64_t raw = f->signature;
    *counted = false;
    const af_finding *fm = af_exec_finding_for(v->mx, f->check);
    long kb;
    /* minimizing's last run, of the case as far as it got (the case as found when nothing
     * simpler held), passed: a flaky target, stored nowhere (as the store's write says),
     * its input kept */
    v->lost = !m->known && !fm;
    if (!m->done) {
        v->queue = true; /* the budget or the deadline cut it short: later, from here */
    } else if (m->known) { /* it reached a known bug */
        v->mapped = true;
        v->sig = m->sig;
        v->kind = m->kind;
    } else if (fm && (kb = af_store_known_after(st, v->mx, f->check)) >= 0) {
        /* it minimized to a known bug (found first in another form, e.g. a NaN leak of a
         * wrong causal alignment): counted there, its repeats too */
        af_minrec_release(st->rec, raw);
        *counted = true;
        if (!af_alias_put(&st->known_raw, raw, (uint64_t)kb, fm->kind))
            return af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return af_store_known_hit(st->known, v->mx, s, fm, kb, st->o.crashes_dir, event, err);
    } else if (fm) {
        v->minimized = true;
        v->sig = fm->signature;
        v->kind = fm->kind;
    } else { /* minimizing lost it (a flaky target: the case did not fail again) */
        af_minrec_release(st->rec, raw); /* nothing for others to read */
        v->claimed = false;
    }
    if (m->done && !af_alias_put(&st->aliases, raw, v->sig, v->kind)) {
        af_minrec_release(st->rec, raw);
        return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    if (v->queue && v->claimed) af_minrec_release(st->rec, raw);
    if (v->queue) v->claimed = false;
    return AF_OK;
}

/* Counts f under v's signature (count findings of it: itself and its repeats; a new entry
 * found at first_exec, first_time) and stores its bundle when new: a minimized case's
 * from v->mx's record, a case as found's from x's (x holds the execution that found f). */
static af_status af_store_sign(af_store *st, af_exec *x, af_campaign_stats *s, const af_finding *f,
                               af_store_verdict *v, uint64_t count, uint64_t first_exec, double first_time,
                               af_store_event *event, af_error *err) {
    const af_store_opts *o = &st->o;
    uint64_t raw = f->signature;
    bool first = false, replace = false;
    af_signature_entry *e = af_stats_find(s, v->sig);
    if (e) {
        e->count += count;
        /* its bundle holds a case as found that signs as this minimized one: replaced */
        replace = v->minimized && e->unminimized;
    } else {
        e = af_stats_add(s, v->sig, v->kind, f->who, err);
        if (!e) {
            if (v->claimed) af_minrec_release(st->rec, raw);
            return AF_ERR_NOMEM;
        }
        e->count = count;
        e->first_exec = first_exec;
        e->first_time = first_time; /* after the execution that found it */
        e->unminimized = !v->mapped && !v->minimized;
        first = event->first = true;
    }
    event->entry = (size_t)(e - s->sigs);
    if (v->queue) {
        af_store_same same = af_store_same_of(f);
        AF_TRY(af_store_enqueue(st, raw, f->kind, f->check, &same, &v->start, err));
        s->stored_unminimized++;
        event->unminimized = true;
    }
    /* a new signature is stored; one not stored yet (disk full?) is tried again now and
     * then, space may be back */
    bool retry = !first && !e->bundle[0] && !e->stored_elsewhere && (e->count & (e->count - 1)) == 0;
    if (!first && !retry && !replace) {
        if (v->claimed) af_store_publish(st, raw, e);
        return AF_OK;
    }
    if (v->mapped && first) { /* the minimized bundle is there already (the record checked) */
        char path[PATH_MAX + 80];
        struct stat sb;
        af_bundle_name(e->kind, v->sig, e->bundle, sizeof e->bundle);
        snprintf(path, sizeof path, "%s/%s", o->crashes_dir, e->bundle);
        if (stat(path, &sb) == 0) {
            e->stored_elsewhere = true;
            if (v->claimed) af_store_publish(st, raw, e);
            return AF_OK;
        }
        e->bundle[0] = 0;
        e->unminimized = true; /* gone since: the case as found goes there, and no alias */
        if (v->claimed) af_minrec_release(st->rec, raw);
        v->claimed = false;
    }
    if (replace) {
        e->unminimized = false;
        e->bundle[0] = 0;
        e->stored_elsewhere = false;
    }
    /* the minimized case's record (minimizing's last run of it), or the case as found's */
    af_store_write(st, v->minimized ? v->mx : x, s, e, f->check, v->minimized, v->lost, event);
    if (v->claimed) af_store_publish(st, raw, e);
    return AF_OK;
}

/* --- the minimizer beside (opts.beside) -------------------------------------------------- */

/* A new finding handed to the minimizer's thread: the finding and the record of the
 * execution that found it (held until it is signed), its repeats meanwhile. */
typedef struct af_store_job {
    af_finding f;
    af_exec_record *rec;
    uint64_t first_exec, repeats;
    double first_time;
    af_store_mjob mj;
} af_store_job;

/* The job of raw signature raw waiting or running, or NULL. */
static af_store_job *af_store_job_of(const af_store *st, uint64_t raw) {
    if (st->todo && st->todo->f.signature == raw) return st->todo;
    for (size_t i = 0; i < st->njobs; i++)
        if (st->jobs[i]->f.signature == raw) return st->jobs[i];
    return NULL;
}

/* The minimizer's work on its thread: job's minimization on st->mx. */
static void af_store_run_job(void *job, void *ctx) {
    af_store *st = ctx;
    af_store_mjob_run(&((af_store_job *)job)->mj, st->mx);
}

/* The minimizer's thread stopped, the jobs an error or a stop left unsigned released
 * (destroying the store). */
static void af_store_stop(af_store *st) {
    if (!st->mt) return;
    af_beside_stop(st->mt);
    st->mt = NULL;
    for (size_t i = 0; i <= st->njobs; i++) {
        af_store_job *j = i < st->njobs ? st->jobs[i] : st->todo;
        if (!j) continue;
        af_minrec_release(st->rec, j->f.signature);
        af_exec_release(st->mx_of, j->rec);
        af_free(j);
    }
    af_free(st->jobs);
}

/* Hands f (of x's selected execution, found at s->execs, elapsed) to the minimizer, its
 * claim ours: false when it cannot (its queue is full), then it is minimized here. */
static af_status af_store_hand(af_store *st, af_exec *x, af_campaign_stats *s, const af_finding *f, double elapsed,
                               bool *handed, af_error *err) {
    *handed = false;
    if (st->njobs == st->capjobs) {
        size_t cap = st->capjobs ? 2 * st->capjobs : AF_STORE_JOBS;
        af_store_job **jobs = af_calloc(cap, sizeof *jobs);
        AF_RETURN_ERROR_IF(!jobs, err, AF_ERR_NOMEM, "out of memory");
        if (st->njobs) memcpy(jobs, st->jobs, st->njobs * sizeof *jobs);
        af_free(st->jobs);
        st->jobs = jobs;
        st->capjobs = cap;
    }
    if (!st->mt) {
        if (!af_store_runner(st, x, true, err)) return err ? err->code : AF_ERR_NOMEM;
        st->mt = af_beside_start(af_store_run_job, st, err);
        if (!st->mt) return err ? err->code : AF_ERR_NOMEM;
    }
    af_store_job *j = af_calloc(1, sizeof *j);
    AF_RETURN_ERROR_IF(!j, err, AF_ERR_NOMEM, "out of memory");
    j->rec = af_exec_keep(x, err);
    if (!j->rec) {
        af_free(j);
        return err ? err->code : AF_ERR_NOMEM;
    }
    j->f = *f;
    j->first_exec = s->execs;
    j->first_time = elapsed;
    st->jobs[st->njobs++] = j;
    *handed = true;
    return AF_OK;
}

/* Drops job j and its hold on its record; *sel (the record to select again afterwards)
 * becomes NULL when that record is freed. */
static void af_store_job_free(af_exec *x, af_store_job *j, af_exec_record **sel) {
    bool selected = *sel == j->rec;
    if (af_exec_release(x, j->rec) && selected) *sel = NULL;
    af_free(j);
}

/* Signs job j's finding after its minimization (m; not run: `ran` false, then it is
 * stored as found and queued), x made to read j's record meanwhile; then drops j. */
static af_status af_store_job_sign(af_store *st, af_exec *x, af_campaign_stats *s, af_store_job *j, bool ran,
                                   af_exec_record **sel, af_store_event *event, af_error *err) {
    af_store_verdict v = {.sig = j->f.signature, .kind = j->f.kind, .claimed = true, .mx = st->mx, .start = j->mj.c};
    af_status r = AF_OK;
    bool counted = false;
    af_exec_select_record(x, j->rec);
    if (!ran) {
        af_minrec_release(st->rec, j->f.signature);
        v.claimed = false;
        v.queue = true;
        v.start = *af_exec_case(x);
    } else {
        r = af_store_after_min(st, s, &j->f, &j->mj.m, &v, &counted, event, err);
    }
    if (r == AF_OK && counted && event->known >= 0) { /* its repeats are that known bug's too */
        s->known[event->entry].hits += j->repeats;
        s->known_hits += j->repeats;
    } else if (r == AF_OK) {
        r = af_store_sign(st, x, s, &j->f, &v, 1 + j->repeats, j->first_exec, j->first_time, event, err);
    }
    af_store_job_free(x, j, sel);
    return r;
}

/* The minimizer's work, taken in (opts.beside): the job it finished signed (wait: waited
 * for), and the next one handed to it - prepared here, so that it starts from what the
 * jobs before it taught (patterns, aliases), as one after another in one thread would. A
 * job with no time left (the budget, the deadline) is stored as found and queued. At most
 * cap events go to ev (*nev). x's selected execution is left selected. */
static af_status af_store_poll(af_store *st, af_exec *x, af_campaign_stats *s, double elapsed, bool wait,
                               af_store_event *ev, size_t cap, size_t *nev, af_error *err) {
    if (!st->mt) return AF_OK;
    af_exec_record *sel = af_exec_selected(x);
    af_status r = AF_OK;
    af_store_job *done = *nev < cap ? af_beside_take(st->mt, wait) : NULL;
    if (done) {
        st->todo = NULL;
        af_store_event *e = &ev[(*nev)++];
        *e = (af_store_event){.known = -1};
        r = af_store_mjob_apply(st, s, &done->mj, err);
        if (r == AF_OK) {
            r = af_store_job_sign(st, x, s, done, true, &sel, e, err);
        } else { /* an execution error while minimizing: the campaign's error */
            af_minrec_release(st->rec, done->f.signature);
            af_store_job_free(x, done, &sel);
        }
    }
    while (r == AF_OK && !st->todo && st->njobs > 0 && *nev < cap) {
        af_store_job *j = st->jobs[0];
        memmove(&st->jobs[0], &st->jobs[1], --st->njobs * sizeof st->jobs[0]);
        bool bounded;
        double lim = af_store_limit(st, elapsed, true, st->o.deadline, &bounded);
        af_exec_select_record(x, j->rec);
        af_case c = *af_exec_case(x);
        if (lim <= 0) { /* no budget left: as found, queued */
            af_store_event *e = &ev[(*nev)++];
            *e = (af_store_event){.known = -1};
            j->mj.c = c;
            r = af_store_job_sign(st, x, s, j, false, &sel, e, err);
            continue;
        }
        af_store_same same = af_store_same_of(&j->f);
        r = af_store_mjob_prepare(st, s, &j->mj, j->f.check, j->f.kind, &same, &c, lim, bounded, true, err);
        if (r != AF_OK) break;
        st->todo = j;
        af_beside_hand(st->mt, j);
    }
    af_exec_select_record(x, sel);
    return r;
}

bool af_store_busy(const af_store *st) { return st->todo || st->njobs; }

af_status af_store_drain(af_store *st, af_exec *x, af_campaign_stats *s, double elapsed, af_store_event *ev,
                         size_t *n_ev, af_error *err) {
    *n_ev = 0;
    return af_store_poll(st, x, s, elapsed, true, ev, AF_STORE_EVENTS, n_ev, err);
}

/* One finding f of x's execution (the record the loop checked): decides its signature
 * (the minimized one, through the in-memory alias, the queue, the shared record or
 * minimizing now, on the executor beside x, or later, on the minimizer's thread; or the
 * raw one, stored as found), counts it and stores its bundle when new (af_store_sign).
 * *deferred: handed to the minimizer (or a repeat of one it holds): no event now. */
static af_status af_store_one(af_store *st, af_exec *x, af_campaign_stats *s, const af_finding *f, double elapsed,
                              af_store_event *event, bool *deferred, af_error *err) {
    const af_store_opts *o = &st->o;
    uint64_t raw = f->signature;
    af_store_verdict v = {.sig = raw, .kind = f->kind, .start = *af_exec_case(x)};
    *deferred = false;
    /* a dead or hung worker is stored as found: each minimizing step could cost a
     * restart or a whole timeout */
    bool as_found = o->no_minimize || f->kind == AF_KIND_CRASH || f->kind == AF_KIND_TIMEOUT;
    af_store_job *held = as_found ? NULL : af_store_job_of(st, raw);
    if (held) { /* the minimizer has it: signed with it */
        held->repeats++;
        *deferred = true;
        return AF_OK;
    }
    if (!as_found && !(v.mapped = af_alias_get(&st->aliases, raw, &v.sig, &v.kind))) {
        size_t qi = af_store_item_of(st, raw);
        bool bounded;
        double lim = af_store_limit(st, elapsed, true, o->deadline, &bounded);
        if (qi != SIZE_MAX) {
            /* a repeat of a finding stored as found: counted there; now and then another
             * go (here, while the minimizer beside has nothing: its executor is free) */
            if (af_now() - st->queue[qi].looked >= AF_STORE_RETRY && !af_store_busy(st)) {
                af_store_outcome out;
                AF_TRY(af_store_attempt(st, x, true, s, qi, lim, bounded, true, &out, NULL, err));
            }
            v.mapped = af_alias_get(&st->aliases, raw, &v.sig, &v.kind);
            event->unminimized = !v.mapped;
        } else {
            af_minrec_alias a;
            af_minrec_state rs = lim > 0 ? af_minrec_claim(st->rec, raw, &a) : af_minrec_lookup(st->rec, raw, &a);
            if (rs == AF_MINREC_ALIAS) { /* another process minimized it */
                s->aliases_read++;
                af_store_hint_read(st, f->check, &a);
                (void)af_alias_put(&st->aliases, raw, a.sig, a.kind);
                v.sig = a.sig;
                v.kind = a.kind;
                v.mapped = true;
            } else if (lim > 0 && rs == AF_MINREC_MINE && o->beside) {
                af_status r = af_store_hand(st, x, s, f, elapsed, deferred, err);
                if (r != AF_OK) af_minrec_release(st->rec, raw);
                return r;
            } else if (lim > 0 && rs == AF_MINREC_MINE) {
                v.claimed = true;
                af_store_min m;
                bool counted;
                af_store_same same = af_store_same_of(f);
                v.mx = af_store_runner(st, x, true, err);
                af_status r = v.mx ? af_store_minimize(st, v.mx, s, f->check, f->kind, &same, &v.start, lim,
                                                       bounded, true, &m, err)
                                   : err ? err->code : AF_ERR_NOMEM;
                if (r == AF_OK) r = af_store_after_min(st, s, f, &m, &v, &counted, event, err);
                else af_minrec_release(st->rec, raw);
                if (r != AF_OK || counted) return r;
            } else {
                v.queue = true; /* no budget left, or another process is minimizing it */
            }
        }
    }
    return af_store_sign(st, x, s, f, &v, 1, s->execs, elapsed, event, err);
}

af_status af_store_findings(af_store *st, af_exec *x, af_campaign_stats *s, double elapsed, af_store_event *ev,
                            size_t *n_ev, af_error *err) {
    if (n_ev) *n_ev = 0;
    if (st->nq) AF_TRY(af_store_refresh(st, s, err));
    size_t nf = af_exec_finding_count(x);
    af_status st_ = AF_OK;
    size_t nev = 0;
    uint64_t signed_as[AF_STORE_EVENTS];
    af_store_event own[AF_STORE_EVENTS];
    if (!ev) ev = own;
    /* the minimizer beside holding its most: its next one waited for, signed (events
     * first, room left for this execution's) */
    while (st_ == AF_OK && st->njobs >= AF_STORE_JOBS && nev + nf < AF_STORE_EVENTS)
        st_ = af_store_poll(st, x, s, elapsed, true, ev, AF_STORE_EVENTS - nf, &nev, err);
    for (size_t i = 0; i < nev; i++) signed_as[i] = ev[i].known >= 0 ? 0 : s->sigs[ev[i].entry].signature;
    /* the findings of this execution: x holds its record throughout (minimizing runs on
     * an executor of its own, af_store_runner) */
    af_finding found[AF_EXEC_MAX_CHECKS];
    for (size_t i = 0; i < nf; i++) found[i] = *af_exec_finding(x, i);
    /* known bugs (store_known.h): matched while x holds the execution that found them */
    long known_bug[AF_EXEC_MAX_CHECKS];
    af_store_known_match(st->known, x, found, nf, known_bug);
    for (size_t i = 0; i < nf; i++) { /* a raw signature minimized to a known bug before */
        uint64_t kb;
        af_kind kd;
        if (known_bug[i] < 0 && af_alias_get(&st->known_raw, found[i].signature, &kb, &kd)) known_bug[i] = (long)kb;
    }
    for (size_t i = 0; i < nf && st_ == AF_OK; i++) {
        const af_finding *f = &found[i];
        af_store_event event = {.known = -1};
        if (known_bug[i] >= 0) { /* counted against its entry, one exemplar, never minimized */
            st_ = af_store_known_hit(st->known, x, s, f, known_bug[i], st->o.crashes_dir, &event, err);
        } else {
            bool deferred;
            st_ = af_store_one(st, x, s, f, elapsed, &event, &deferred, err);
            if (deferred) continue;
        }
        if (st_ != AF_OK) break;
        signed_as[nev] = event.known >= 0 ? 0 : s->sigs[event.entry].signature;
        ev[nev++] = event;
    }
    /* the minimizer's work (opts.beside): a job finished signed, the next one started */
    size_t before = nev;
    if (st_ == AF_OK && st->o.beside) st_ = af_store_poll(st, x, s, elapsed, false, ev, AF_STORE_EVENTS, &nev, err);
    for (size_t i = before; i < nev; i++) signed_as[i] = ev[i].known >= 0 ? 0 : s->sigs[ev[i].entry].signature;
    /* a later finding may have merged entries (a queued one minimized at last): each
     * event's entry is found again by its signature, or the one that signature became */
    for (size_t i = 0; i < nev; i++) {
        if (ev[i].known >= 0) continue; /* entry indexes stats->known */
        af_signature_entry *e = af_stats_find(s, signed_as[i]);
        uint64_t sig;
        af_kind kind;
        if (!e && af_alias_get(&st->aliases, signed_as[i], &sig, &kind)) e = af_stats_find(s, sig);
        AF_ASSERT(e); /* an entry only ever becomes another one */
        ev[i].entry = (size_t)(e - s->sigs);
    }
    if (n_ev) *n_ev = nev;
    return st_;
}

af_status af_store_finish(af_store *st, af_exec *x, af_campaign_stats *s, double deadline, af_error *err) {
    double t0 = af_now();
    af_status r = AF_OK;
    while (st->nq > 0 && r == AF_OK) {
        bool busy = false, more = false;
        for (size_t i = 0; i < st->nq && r == AF_OK;) {
            if (af_campaign_interrupted() || (deadline > 0 && af_now() >= deadline)) goto out;
            bool bounded;
            double lim = af_store_limit(st, 0, false, deadline, &bounded);
            af_store_outcome out;
            r = af_store_attempt(st, x, false, s, i, lim, bounded, false, &out, NULL, err);
            busy |= out == AF_STORE_BUSY;
            more |= out == AF_STORE_RESOLVED || out == AF_STORE_DROPPED;
            if (out == AF_STORE_BUSY || out == AF_STORE_LATER) i++; /* else item i is gone */
        }
        if (!busy) break; /* what is left was cut short by the deadline */
        if (!more) {      /* only others' work left: their aliases come */
            struct timespec ts = {0, AF_STORE_WAIT_NS};
            nanosleep(&ts, NULL);
        }
    }
out:;
    double dt = af_now() - t0;
    s->minimize_end_seconds += dt;
    return r;
}

af_status af_store_adopt(af_store *st, af_campaign_stats *s, size_t check, const char *who, af_kind kind,
                         uint64_t raw, const af_case *c, const char *bundle, af_error *err) {
    af_signature_entry *e = af_stats_find(s, raw);
    if (!e) {
        e = af_stats_add(s, raw, kind, who, err);
        if (!e) return AF_ERR_NOMEM;
    }
    e->count++;
    e->unminimized = true;
    snprintf(e->bundle, sizeof e->bundle, "%s", bundle);
    AF_TRY(af_store_enqueue(st, raw, kind, check, NULL, c, err));
    st->queue[af_store_item_of(st, raw)].looked = 0;
    return AF_OK;
}
