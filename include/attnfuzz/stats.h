/* stats.h - what a campaign counts: executions, where the time went, the signature table
 * (one entry per unique finding, with its bundle), known bugs met, jobs that died; and the
 * stats JSON file (docs/commands.md, `attnfuzz fuzz --stats`) that a --jobs parent and
 * `attnfuzz merge` read back.
 *
 * The campaign loop (campaign.h) and the store step (store.h) both write these counts; this
 * header sits below both of them, so that the store does not reach up into the campaign. */
#ifndef ATTNFUZZ_STATS_H
#define ATTNFUZZ_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "known.h"
#include "oracle.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct af_signature_entry {
    uint64_t signature;
    af_kind kind;
    char who[160];
    uint64_t count;          /* executions that produced it (this campaign) */
    uint64_t first_exec;     /* executions before the first one (1-based count) */
    double first_time;       /* seconds into the campaign when it was first seen */
    char bundle[512];        /* bundle directory, "" if it could not be written (yet) */
    char input_hex[2 * AF_CASE_ENCODED_MAX + 1]; /* the input, when the bundle is missing */
    bool stored_elsewhere;   /* another process had stored it already */
    bool write_failed;       /* counted in write_errors: its bundle could not be written
                                (a finding that did not fail again is not: no write error) */
    bool unminimized;        /* signed and stored as found (not minimized, or not yet) */
} af_signature_entry;

/* One known bug (known.h) as a campaign met it. */
typedef struct af_known_stat {
    char id[AF_KNOWN_ID_MAX];
    uint64_t hits;     /* findings counted against it: never minimized, never stored again */
    uint64_t skipped;  /* backend runs the generator left out: cases that trigger it (its
                          `when`) sent fewer to a backend it keeps hitting */
    char bundle[512];  /* its exemplar bundle (known-<id>), "" when none was written */
} af_known_stat;

/* One child of --jobs that died (campaign.h: job supervision). */
#define AF_JOB_MAX_DEATHS 64 /* deaths recorded one by one; more are only counted */

typedef struct af_job_death {
    unsigned job;     /* the slot, 0..jobs-1 */
    long pid;
    int signal;       /* the signal that killed it, 0 if it exited */
    int exit_code;    /* its exit status when it exited */
    double after;     /* seconds it had run */
    bool restarted;   /* false: its slot was given up */
} af_job_death;

typedef struct af_campaign_stats {
    uint64_t execs;
    uint64_t skipped;  /* of execs: cases no backend ran (unsupported by all of them) */
    uint64_t backward_execs; /* of execs: cases that asked for gradients */
    uint64_t batches;        /* executions of one case or one batch (execs / batches: cases a batch) */
    uint64_t grads_unjudged; /* gradients not judged (af_exec_grads_unjudged) */
    uint64_t seeds, seeds_run; /* --corpus inputs, and how many of them have run (a compiling
                                  campaign spreads them over its first minutes) */
    double jobs_rate;  /* --jobs: the sum of each job's own execs/s, from its first case (its
                          backends' start-up, e.g. a worker importing a stack, excluded) */
    double elapsed;
    uint64_t findings_total;                /* executions with a finding, counting repeats */
    uint64_t unique_by_kind[AF_KIND_COUNT];
    af_signature_entry *sigs;               /* af_free'd by af_campaign_stats_free */
    size_t n_sigs, cap_sigs;
    uint64_t write_errors;                  /* findings whose bundle could not be written */
    uint64_t minimize_execs;                /* executions spent minimizing (not in execs) */
    double minimize_seconds;                /* wall time spent minimizing, the end pass included
                                               (summed over jobs) */
    uint64_t stored_unminimized;            /* findings stored as found because minimizing did not
                                               fit then (the budget, the time limit, another
                                               process minimizing it): queued */
    uint64_t minimized_later;               /* of those, minimized since (by this campaign, or read
                                               from the shared record) */
    uint64_t aliases_read;                  /* raw signatures whose minimized signature came from
                                               the shared record (another job, an earlier run) */
    double minimize_end_seconds;            /* the end-of-campaign pass (after elapsed; summed
                                               over jobs) */
    /* --jobs only */
    uint64_t jobs_died;                     /* children that died (signal or error exit) */
    uint64_t jobs_restarted;
    bool jobs_kept_dying;                   /* some slot was given up (see AF_JOB_MAX_RESTARTS) */
    af_job_death deaths[AF_JOB_MAX_DEATHS]; /* the first jobs_died of them */
    double compile_seconds;                 /* time targets spent compiling (worker backends
                                               report it; 0 when none did) */
    /* where the time went (seconds, summed over jobs; af_exec_timing): drawing inputs, the
     * float64 references, waiting for backends (of which the targets' own reported run time,
     * the rest being the protocol and the worker kits), comparing, restarting workers */
    double generate_seconds, reference_seconds, backend_seconds, target_seconds, check_seconds;
    double relation_seconds, determinism_seconds; /* of check_seconds: the relations' runs and
                                                     comparisons, the determinism checks' second
                                                     runs and comparisons */
    uint64_t determinism_runs;                    /* second runs made by determinism checks */
    double restart_seconds;
    uint64_t worker_restarts;
    double started_at;   /* wall clock (seconds since the epoch) when the campaign started */
    bool finished;       /* the campaign has stopped: these are its final stats (the stats file
                            is rewritten every second while it runs, finished false) */
    /* known bugs (opts.known): per entry met, in the order first met (af_free'd by
     * af_campaign_stats_free); the totals over them */
    af_known_stat *known;
    size_t n_known, cap_known;
    uint64_t known_hits, known_skipped;
} af_campaign_stats;

/* Frees what s owns (sigs, known) and zeroes it; NULL does nothing. */
void af_campaign_stats_free(af_campaign_stats *s);

/* The signature table of stats: the entry for sig, or NULL. */
af_signature_entry *af_stats_find(af_campaign_stats *s, uint64_t sig);
/* Appends an entry (count 0) for sig and counts it in unique_by_kind; NULL (err set,
 * err may be NULL) when out of memory. */
af_signature_entry *af_stats_add(af_campaign_stats *s, uint64_t sig, af_kind kind, const char *who, af_error *err);
/* Moves entry `from`'s count into entry `to` (kind), which is created, or is `from`
 * renamed (its bundle name cleared), when it does not exist yet: a finding stored as found
 * is now the minimized signature's. Returns the entry of `to` (NULL when out of memory). */
af_signature_entry *af_stats_merge(af_campaign_stats *s, uint64_t from, uint64_t to, af_kind kind, const char *who);
/* The record of known bug id, added (zeroed) when missing; NULL when out of memory. */
af_known_stat *af_stats_known(af_campaign_stats *s, const char *id);

/* Who wrote a stats file: the fields of the campaign's options the file records. */
typedef struct af_stats_about {
    unsigned shard, shards; /* --shard I/N (0/0: not sharded) */
    uint64_t seed;
    unsigned jobs;          /* 1 for a single process */
    const char *crashes;
    const char *strategy;
} af_stats_about;

/* Writes s as JSON to path (atomically), "interrupted" as af_campaign_interrupted (stop.h)
 * says; about may be NULL (the campaign's fields are then left out). AF_ERR_NOMEM, AF_ERR_IO
 * (naming the path). */
af_status af_stats_write(const af_campaign_stats *s, const af_stats_about *about, const char *path, af_error *err);

/* Adds a stats file (a --jobs child's) into s: its signatures (counts summed), known bugs,
 * counters and seconds; its executions go to *execs, not s->execs. current: the file is a
 * live child's, whose execs_per_sec adds to s->jobs_rate. A file not written yet (or being
 * replaced) adds nothing. */
void af_stats_add_file(af_campaign_stats *s, const char *path, uint64_t *execs, bool current);

#ifdef __cplusplus
}
#endif
#endif
