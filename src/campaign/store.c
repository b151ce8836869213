/* store.c - minimize, sign, count and store findings (see store.h). Shared by the
 * campaign loop and the fuzz harnesses. */
#include "attnfuzz/store.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/minimize.h"
#include "clock.h"
#include "store_known.h"

/* Minimizing one new finding takes at most this long (besides minimize_execs): a target
 * compiling every new shape for a second would spend minutes on 400 steps. */
#define AF_MINIMIZE_SECONDS 60.0

/* --- the signature table -------------------------------------------------------------- */

af_signature_entry *af_store_find(af_campaign_stats *s, uint64_t sig) {
    for (size_t i = 0; i < s->n_sigs; i++)
        if (s->sigs[i].signature == sig) return &s->sigs[i];
    return NULL;
}

af_signature_entry *af_store_add(af_campaign_stats *s, uint64_t sig, af_kind kind, const char *who, af_error *err) {
    if (s->n_sigs == s->cap_sigs) {
        size_t cap = s->cap_sigs ? 2 * s->cap_sigs : 64;
        af_signature_entry *n = af_calloc(cap, sizeof *n);
        if (!n) {
            af_error_set(err, AF_ERR_NOMEM, "out of memory");
            return NULL;
        }
        if (s->sigs) memcpy(n, s->sigs, s->n_sigs * sizeof *n);
        af_free(s->sigs);
        s->sigs = n;
        s->cap_sigs = cap;
    }
    af_signature_entry *e = &s->sigs[s->n_sigs++];
    memset(e, 0, sizeof *e);
    e->signature = sig;
    e->kind = kind;
    snprintf(e->who, sizeof e->who, "%s", who);
    s->unique_by_kind[kind]++;
    return e;
}

/* --- raw signature -> minimized signature ---------------------------------------- */

/* Every new raw signature is minimized once; its repeats map straight to the signature
 * of the minimized case. Open addressing, grown at half load. */
typedef struct af_alias_map {
    uint64_t *keys, *vals; /* key 0 = empty (raw signatures are hashes; 0 is remapped) */
    size_t cap, n;
} af_alias_map;

static uint64_t af_alias_key(uint64_t k) { return k ? k : 1; }

static bool af_alias_get(const af_alias_map *m, uint64_t key, uint64_t *val) {
    if (!m->cap) return false;
    key = af_alias_key(key);
    for (size_t i = (size_t)(key % m->cap);; i = (i + 1) % m->cap) {
        if (m->keys[i] == 0) return false;
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return true;
        }
    }
}

static bool af_alias_put(af_alias_map *m, uint64_t key, uint64_t val) {
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1024;
        uint64_t *k = af_calloc(cap, sizeof *k), *v = af_calloc(cap, sizeof *v);
        if (!k || !v) {
            af_free(k);
            af_free(v);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = (size_t)(m->keys[i] % cap);
            while (k[j]) j = (j + 1) % cap;
            k[j] = m->keys[i];
            v[j] = m->vals[i];
        }
        af_free(m->keys);
        af_free(m->vals);
        m->keys = k, m->vals = v, m->cap = cap;
    }
    key = af_alias_key(key);
    size_t i = (size_t)(key % m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) % m->cap;
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
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
 * wrong mask: one bug, one bundle). Then *c becomes the twin, minimized for its own kind,
 * and x holds its execution; otherwise *c is unchanged and x holds *c's execution again. */
static af_status af_store_finite_twin(af_exec *x, size_t check, af_kind kind, af_case *c, unsigned max_execs,
                                      double max_seconds, unsigned *spent, af_error *err) {
    bool special = false;
    for (int t = 0; t < AF_QKV_COUNT; t++) special |= c->t[t].special != AF_SPECIAL_NONE;
    if (!special || kind == AF_KIND_DIVERGE || !af_store_numeric_kind(kind)) return AF_OK;
    af_case twin = *c;
    for (int t = 0; t < AF_QKV_COUNT; t++) twin.t[t].special = AF_SPECIAL_NONE;
    af_status st = af_exec_run_case(x, &twin, err);
    if (st != AF_OK) return st;
    (*spent)++;
    const af_finding *f = af_exec_finding_for(x, check);
    if (!f || !af_store_numeric_kind(f->kind)) return af_exec_run_case(x, c, err);
    unsigned more = 0;
    st = af_minimize(x, check, f->kind, &twin, max_execs, max_seconds, &more, err);
    *spent += more;
    if (st == AF_OK) *c = twin;
    return st;
}

/* --- the store -------------------------------------------------------------------------- */

struct af_store {
    af_store_opts o;
    af_alias_map aliases;
    af_store_known *known; /* NULL: no known bugs to match */
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
    return st;
}

uint64_t af_store_known_hits(const af_store *st, size_t entry, size_t backend) {
    return af_store_known_count(st->known, entry, backend);
}

void af_store_destroy(af_store *st) {
    if (!st) return;
    af_free(st->aliases.keys);
    af_free(st->aliases.vals);
    af_store_known_destroy(st->known);
    af_free(st);
}

af_status af_store_findings(af_store *st, af_exec *x, af_campaign_stats *s, double elapsed, af_store_event *ev,
                            size_t *n_ev, af_error *err) {
    const af_store_opts *o = &st->o;
    if (n_ev) *n_ev = 0;
    size_t nf = af_exec_finding_count(x);
    if (nf == 0) return AF_OK;
    /* the findings and case of this execution: minimizing re-runs the executor */
    af_finding found[AF_EXEC_MAX_CHECKS];
    for (size_t i = 0; i < nf; i++) found[i] = *af_exec_finding(x, i);
    af_case ran = *af_exec_case(x);
    bool x_holds_ran = true;
    af_status st_ = AF_OK;
    size_t nev = 0;
    /* known bugs (store_known.h): matched while x holds the execution that found them */
    long known_bug[AF_EXEC_MAX_CHECKS];
    af_store_known_match(st->known, x, found, nf, known_bug);
    for (size_t i = 0; i < nf && st_ == AF_OK; i++) {
        const af_finding *f = &found[i];
        if (known_bug[i] >= 0) { /* counted against its entry, one exemplar, never minimized */
            af_store_event event;
            st_ = af_store_known_hit(st->known, x, s, f, known_bug[i], &ran, &x_holds_ran, o->crashes_dir, &event, err);
            if (ev) ev[nev] = event;
            nev++;
            continue;
        }
        uint64_t sig = f->signature;
        af_kind kind = f->kind; /* of the signed finding: a finite twin's may differ */
        /* a dead or hung worker is stored as found: each minimizing step could cost a
         * restart or a whole timeout */
        double left = o->deadline > 0 ? o->deadline - af_now() : HUGE_VAL;
        bool raw = o->no_minimize || f->kind == AF_KIND_CRASH || f->kind == AF_KIND_TIMEOUT || left <= 0;
        bool known = raw || af_alias_get(&st->aliases, f->signature, &sig);
        if (!known) {
            af_case small = ran;
            unsigned spent = 0;
            st_ = af_minimize(x, f->check, f->kind, &small, o->minimize_execs, fmin(AF_MINIMIZE_SECONDS, left), &spent, err);
            if (st_ == AF_OK)
                st_ = af_store_finite_twin(x, f->check, f->kind, &small, o->minimize_execs,
                                           fmin(AF_MINIMIZE_SECONDS, left), &spent, err);
            if (st_ != AF_OK) break;
            s->minimize_execs += spent;
            x_holds_ran = false;
            const af_finding *fm = af_exec_finding_for(x, f->check);
            sig = fm ? fm->signature : f->signature;
            if (fm) kind = fm->kind;
            if (!af_alias_put(&st->aliases, f->signature, sig)) {
                st_ = af_error_set(err, AF_ERR_NOMEM, "out of memory");
                break;
            }
        }
        af_signature_entry *e = af_store_find(s, sig);
        af_store_event event = {.known = -1};
        if (e) {
            e->count++;
            event.entry = (size_t)(e - s->sigs);
            /* not stored yet (disk full?): try again now and then, space may be back */
            bool retry = !e->bundle[0] && !e->stored_elsewhere && (e->count & (e->count - 1)) == 0;
            if (!retry) {
                if (ev) ev[nev] = event;
                nev++;
                continue;
            }
        } else {
            e = af_store_add(s, sig, kind, f->who, err);
            if (!e) {
                st_ = AF_ERR_NOMEM;
                break;
            }
            e->count = 1;
            e->first_exec = s->execs;
            e->first_time = elapsed; /* after the execution that found it */
            event.entry = (size_t)(e - s->sigs);
            event.first = true;
        }
        /* x must hold the execution to store: the minimized case (just run), or the raw one */
        if (known && !x_holds_ran) {
            af_case again = ran; /* a retry of a known signature stores the raw case */
            st_ = af_exec_run_case(x, &again, err);
            x_holds_ran = true;
            if (st_ != AF_OK) break;
        }
        size_t fi = af_store_failing(x, f->check);
        if (fi == SIZE_MAX && !x_holds_ran) {
            /* minimizing lost it (a flaky target: the first step did not fail again) */
            af_case again = ran;
            st_ = af_exec_run_case(x, &again, err);
            x_holds_ran = true;
            if (st_ != AF_OK) break;
            fi = af_store_failing(x, f->check);
        }
        af_error werr;
        af_status ws = AF_OK;
        if (fi == SIZE_MAX) {
            ws = af_error_set(&werr, AF_ERR_INVALID, "it did not fail again when re-run (a flaky target)");
        } else {
            ws = af_exec_write_bundle_as(x, fi, sig, o->crashes_dir, e->bundle, sizeof e->bundle, &werr);
        }
        if (ws == AF_ERR_EXISTS) {
            e->stored_elsewhere = true;
            af_bundle_name(e->kind, sig, e->bundle, sizeof e->bundle);
        } else if (ws != AF_OK) {
            /* the finding is not lost: its input goes to stderr and to the stats, and
             * the bundle is written when the signature recurs (and the disk has room, or
             * the target fails again) */
            if (fi != SIZE_MAX && !e->write_failed) {
                e->write_failed = true;
                s->write_errors++;
            }
            e->bundle[0] = 0;
            event.failed = true;
            const uint8_t *bytes;
            size_t nb = af_exec_input(x, &bytes);
            for (size_t k = 0; k < nb && 2 * k + 2 < sizeof e->input_hex; k++)
                snprintf(e->input_hex + 2 * k, 3, "%02x", bytes[k]);
            if (e->count == 1)
                fprintf(stderr, "attnfuzz: could not store a %s finding of %s: %s\nattnfuzz: its input (hex): %s\n",
                        af_kind_names[f->kind], f->who, werr.msg, e->input_hex);
        } else {
            event.stored = true;
            if (e->write_failed) s->write_errors--; /* stored on a retry */
            e->write_failed = false;
        }
        if (ev) ev[nev] = event;
        nev++;
    }
    if (n_ev) *n_ev = nev;
    return st_;
}
