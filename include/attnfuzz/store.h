/* store.h - the store step every engine shares (`attnfuzz fuzz`, the libFuzzer and AFL++
 * harnesses, the replay driver), so one bug lands in one bundle whichever engine finds it.
 *
 * For each finding of an execution: the first time its raw signature shows, the case is
 * minimized (minimize.h) and the finding is signed on the minimized case; later repeats
 * of that raw signature map straight to the same signature. A NaN/Inf finding whose case
 * holds planted non-finite values is signed on its finite twin (the case without them)
 * when that fails the same check too: the planted values only changed how the bug looks. A signature seen for the
 * first time is written as a bundle named <kind>-<signature> (an existing bundle of that
 * name, stored by another process or an earlier run, is left as it is); repeats are
 * counted, not stored. A bundle that could not be written (a full disk) is retried when
 * the signature recurs at a power-of-two count, and its input is kept as hex meanwhile.
 *
 * Before any of that, a finding that matches a known bug (known.h, opts.known) is counted
 * against the entry (stats->known) and is neither minimized nor signed: the first one
 * seen is written as the entry's exemplar bundle, named known-<id> (never overwritten: an
 * exemplar an earlier run or another job wrote stays), later ones are only counted. */
#ifndef ATTNFUZZ_STORE_H
#define ATTNFUZZ_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "campaign.h"
#include "exec.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct af_store_opts {
    const char *crashes_dir; /* where bundles go (created if missing) */
    bool no_minimize;        /* sign and store findings as found */
    unsigned minimize_execs; /* budget per new raw signature; 0 = 400 */
    double deadline;         /* CLOCK_MONOTONIC seconds; minimizing stops there and findings
                                after it are stored as found (0 = none): a campaign with a
                                time limit ends on time */
    const af_known *known;   /* known bugs to match first (NULL: none); must outlive the store */
} af_store_opts;

typedef struct af_store af_store;

/* NULL on error (out of memory). The store keeps a copy of opts but not of crashes_dir's
 * characters: the string must outlive the store. */
af_store *af_store_create(const af_store_opts *o, af_error *err);
void af_store_destroy(af_store *st); /* NULL does nothing */

/* What af_store_findings did with one finding. */
typedef struct af_store_event {
    long known;    /* the known bug it is (index in opts.known), -1 for none; then entry
                      indexes stats->known, not stats->sigs */
    size_t entry;  /* index of its signature in stats->sigs */
    bool first;    /* the signature showed for the first time (its count is 1) */
    bool stored;   /* a bundle was written for it now */
    bool failed;   /* its bundle could not be written (the message went to stderr) */
} af_store_event;

/* Stores the findings of x's last execution (the execution of the case `ran`, counted
 * in stats->execs already): minimizes new raw signatures, counts each finding under its
 * signature in stats (entries added with first_exec = stats->execs and first_time =
 * elapsed), writes bundles for new signatures. ev (AF_EXEC_MAX_CHECKS entries, may be
 * NULL) receives one event per finding, *n_ev their number. On return x may hold another
 * execution (a minimized case). Errors: an execution error while minimizing, as
 * returned; AF_ERR_NOMEM. A bundle write failure is not an error (see the event). */
af_status af_store_findings(af_store *st, af_exec *x, af_campaign_stats *stats, double elapsed, af_store_event *ev,
                            size_t *n_ev, af_error *err);

/* Known bugs counted by this store: findings of entry (index in opts.known) on backend
 * (index as af_exec_backend_at of the executor it stored from; a pair's finding counts
 * for both sides), what the generator learns from (campaign.c). */
uint64_t af_store_known_hits(const af_store *st, size_t entry, size_t backend);
/* The stats record of known bug id, added (zeroed) when missing; NULL when out of memory. */
af_known_stat *af_store_known_stat(af_campaign_stats *stats, const char *id);

/* The signature table of stats: the entry for sig, or NULL. */
af_signature_entry *af_store_find(af_campaign_stats *stats, uint64_t sig);
/* Appends an entry (count 0) for sig and counts it in unique_by_kind; NULL (err set,
 * err may be NULL) when out of memory. */
af_signature_entry *af_store_add(af_campaign_stats *stats, uint64_t sig, af_kind kind, const char *who,
                                 af_error *err);

#ifdef __cplusplus
}
#endif
#endif
