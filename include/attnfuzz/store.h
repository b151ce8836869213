/* store.h - the store step every engine shares (`attnfuzz fuzz`, the libFuzzer and AFL++
 * harnesses, the replay driver), so one bug lands in one bundle whichever engine finds it.
 *
 * For each finding of an execution: the first time its raw signature shows, the case is
 * minimized (minimize.h: only the failing check runs) and the finding is signed on the
 * minimized case; later repeats of that raw signature map straight to the same signature.
 * A NaN/Inf finding whose case holds planted non-finite values is signed on its finite
 * twin (the case without them) when that fails the same check too: the planted values only
 * changed how the bug looks. A signature seen for the first time is written as a bundle
 * named <kind>-<signature> (an existing bundle of that name, stored by another process or
 * an earlier run, is left as it is); repeats are counted, not stored. A bundle that could
 * not be written (a full disk) is retried when the signature recurs at a power-of-two
 * count, and its input is kept as hex meanwhile.
 *
 * Minimizing is shared and bounded:
 *   - the shared record of the crashes directory (src/campaign/minrec.h) maps each raw
 *     signature minimized by any process (another job, an earlier campaign, a fuzz engine
 *     instance) to its minimized signature, and a claim there makes sure two processes do
 *     not minimize the same raw signature at once: what another process minimized is read,
 *     not minimized again;
 *   - with a budget (minimize_share), minimizing takes at most that share of the wall time
 *     so far. A finding that does not fit (no budget left, the deadline passed, another
 *     process minimizing it, or a minimization the budget cut short) is stored as found -
 *     its bundle says "minimized": false - and queued; it is minimized later, when it
 *     recurs with budget to spare, or by af_store_finish (the campaign's end, `attnfuzz
 *     minimize DIR`): the minimized bundle is written under its own signature, the alias
 *     recorded, and the bundle as found moved to <crashes>/.raw/.
 * Crashes and timeouts, and everything with no_minimize, are stored as found and not
 * queued (each step could cost a restart or a whole timeout).
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

#include "exec.h"
#include "stats.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct af_store_opts {
    const char *crashes_dir; /* where bundles go (created if missing) */
    bool no_minimize;        /* sign and store findings as found */
    unsigned minimize_execs; /* budget per new raw signature; 0 = 400 */
    double minimize_seconds; /* the most one minimization takes; 0 = 60, < 0 no limit. A
                                minimization this stops is used as far as it got */
    double minimize_share;   /* 0 < share < 1: minimizing takes at most this share of the
                                elapsed time af_store_findings is given; 0 or >= 1: no budget */
    double deadline;         /* CLOCK_MONOTONIC seconds; minimizing stops there and findings
                                after it are stored as found and queued (0 = none): a campaign
                                with a time limit ends on time */
    const af_known *known;   /* known bugs to match first (NULL: none); must outlive the store */
    bool beside;             /* minimize new findings on a thread beside the caller (the campaign
                                loop), on an executor with backends of its own: the caller's
                                executions go on meanwhile (below) */
} af_store_opts;

/* The events one af_store_findings (or af_store_drain) may report with opts.beside: every
 * finding of the execution and what the minimizer beside finished. Without it, one per
 * finding (AF_EXEC_MAX_CHECKS). */
#define AF_STORE_EVENTS (AF_EXEC_MAX_CHECKS + 8)

/* Where a store moves a bundle stored as found once its minimized bundle is written. */
#define AF_STORE_RAW_DIR ".raw"

typedef struct af_store af_store;

/* NULL on error (out of memory). The store keeps a copy of opts but not of crashes_dir's
 * characters: the string must outlive the store. */
af_store *af_store_create(const af_store_opts *o, af_error *err);
void af_store_destroy(af_store *st); /* NULL does nothing */

/* What af_store_findings did with one finding. */
typedef struct af_store_event {
    long known;        /* the known bug it is (index in opts.known), -1 for none; then entry
                          indexes stats->known, not stats->sigs */
    size_t entry;      /* index of its signature in stats->sigs */
    bool first;        /* the signature showed for the first time (its count is 1) */
    bool stored;       /* a bundle was written for it now */
    bool failed;       /* its bundle could not be written (the message went to stderr) */
    bool unminimized;  /* stored (or counted) as found: queued for minimizing later */
} af_store_event;

/* Stores the findings of x's last execution (the execution of the case `ran`, counted
 * in stats->execs already): minimizes new raw signatures, counts each finding under its
 * signature in stats (entries added with first_exec = stats->execs and first_time =
 * elapsed), writes bundles for new signatures. ev (AF_EXEC_MAX_CHECKS entries, may be
 * NULL) receives one event per finding, *n_ev their number. Minimizing runs on an
 * executor of the store's beside x (af_exec_create_beside, created at the first
 * minimization): x keeps its record of the execution, and every bundle of a finding
 * stored as found (a known bug's exemplar too) is written from that record, a minimized
 * one from the minimizing executor's; nothing runs a case again to hold it. A finding
 * whose minimizing ran its case again and saw it pass (a flaky target) is counted and
 * its input kept in stats, no bundle. Errors: an execution error while minimizing, as
 * returned; AF_ERR_NOMEM. A bundle write failure is not an error (see the event).
 *
 * With opts.beside a new raw signature to minimize is handed to the minimizer's thread
 * instead, with the record of its execution (af_exec_keep), and signed when that thread is
 * done: counted then with its repeats meanwhile (first_exec and first_time those of the
 * execution that found it), its event among a later call's (ev then holds AF_STORE_EVENTS
 * entries). The jobs run one after another, each prepared when the one before is signed,
 * so each starts from the patterns and aliases the ones before it taught, as minimizing
 * at once does; the budget and the deadline bound each as they bound minimizing at once
 * (no time left when its turn comes: stored as found, queued). Exploration goes on while
 * it works; only a queued finding's retry (when the minimizer is idle) runs here. */
af_status af_store_findings(af_store *st, af_exec *x, af_campaign_stats *stats, double elapsed, af_store_event *ev,
                            size_t *n_ev, af_error *err);

/* With opts.beside: whether the minimizer holds findings not yet signed; af_store_drain
 * waits for the one it runs, signs it and starts the next (events as af_store_findings's,
 * at most AF_STORE_EVENTS): the caller drains until not busy before af_store_finish. */
bool af_store_busy(const af_store *st);
af_status af_store_drain(af_store *st, af_exec *x, af_campaign_stats *stats, double elapsed, af_store_event *ev,
                         size_t *n_ev, af_error *err);

/* Known bugs counted by this store: findings of entry (index in opts.known) on backend
 * (index as af_exec_backend_at of the executor it stored from; a pair's finding counts
 * for both sides), what the generator learns from (known_gate.c). */
uint64_t af_store_known_hits(const af_store *st, size_t entry, size_t backend);
/* Minimizes what is queued (findings stored as found), until the queue is empty or the
 * deadline (CLOCK_MONOTONIC seconds; 0 = none) or af_campaign_interrupt (stop.h): for each, the
 * shared record first (another process may have minimized it: its alias is taken), then a
 * claim, minimizing (cut by the deadline: left as it is), the minimized bundle (replacing
 * the one as found when they share a name), the alias, and the bundle as found moved to
 * <crashes>/.raw/. Its entry in stats becomes the minimized signature's (counts merged).
 * One that another live process is minimizing is waited for (its alias comes). What is
 * left stays stored as found, marked so, for `attnfuzz minimize DIR`. x must be the
 * executor the findings came from (queued findings name its checks); minimizing runs on
 * the store's executor beside it when af_store_findings made one, else on x. Time spent goes to
 * stats->minimize_end_seconds. Errors: an execution error, AF_ERR_NOMEM. */
af_status af_store_finish(af_store *st, af_exec *x, af_campaign_stats *stats, double deadline, af_error *err);
/* Findings queued and not minimized yet. */
size_t af_store_queued(const af_store *st);
/* The signature (and kind) raw is stored under after minimizing, as this store knows it
 * (minimized here or read from the shared record); false when it does not know one. */
bool af_store_alias(const af_store *st, uint64_t raw, uint64_t *sig, af_kind *kind);

/* Queues a bundle stored as found (`attnfuzz minimize DIR`): its check `check` of x, its
 * kind, raw signature and case; it is counted in stats as a stored entry with its bundle,
 * and af_store_finish minimizes it. AF_ERR_NOMEM. */
af_status af_store_adopt(af_store *st, af_campaign_stats *stats, size_t check, const char *who, af_kind kind,
                         uint64_t raw, const af_case *c, const char *bundle, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
