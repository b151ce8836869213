/* campaign.h - `attnfuzz fuzz`: draw cases, run the checks, keep one bundle per new
 * signature and count recurrences, until a run, time or findings limit or a stop.
 *
 * A finding's signature is taken on its minimized case (minimize.h): the first time a
 * raw signature shows, the case is minimized and the bundle holds the minimized case;
 * later repeats of that raw signature map to the same stored finding. */
#ifndef ATTNFUZZ_CAMPAIGN_H
#define ATTNFUZZ_CAMPAIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "shard.h"
#include "known.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where cases come from. The baselines exist to measure the generator against. */
typedef enum af_strategy {
    AF_STRATEGY_GENERATOR, /* the structure-aware generator plus mutation of a feedback pool */
    AF_STRATEGY_GRID,      /* a parametrized test suite's grid: B {1,2} x H {1,8} x S {16,128} x
                              D 64 x {f32, f16}, BHSD, default scale, no mask then causal;
                              new value seeds each pass */
    AF_STRATEGY_BYTES,     /* uniform random bytes through the same total decoder */
    AF_STRATEGY_COUNT
} af_strategy;
extern const char *const af_strategy_names[AF_STRATEGY_COUNT];

typedef struct af_campaign_opts {
    af_strategy strategy;
    af_exec_config exec;
    uint64_t runs;            /* 0 = no limit */
    double seconds;           /* 0 = no limit */
    uint64_t seed;
    const char *crashes_dir;  /* default "crashes" */
    const char *corpus_dir;   /* optional: inputs or bundles to start from and mutate */
    unsigned jobs;            /* worker processes; 0 or 1 = this process */
    const char *stats_path;   /* optional JSON stats */
    uint64_t max_findings;    /* stop after this many unique signatures; 0 = no limit */
    double max_flops;         /* cap per generated case; 0 = default 2e7 */
    double backward;          /* share of generated cases that ask for gradients, 0..1; negative
                                 (the default): 1/3 when some backend declares the backward
                                 capability, else 0. With 0 no case asks for gradients (a
                                 corpus case or random bytes that did is run forward-only) */
    bool tiny;                /* every dimension 1 (benchmarks of per-case overhead) */
    bool quiet;               /* no status lines */
    bool no_minimize;         /* store raw findings (signature of the case as found) */
    unsigned minimize_execs;  /* budget per new finding; 0 = 400 */
    double minimize_share;    /* minimizing takes at most this share of each job's wall time so
                                 far (default 0.1; >= 1: no budget); what does not fit is stored
                                 as found and minimized at the end (store.h) */
    double minimize_grace;    /* seconds after the end for minimizing what was queued; < 0 (the
                                 default): minimize_share x --time (x the time it ran without
                                 --time), at least AF_MINIMIZE_GRACE_MIN; 0: none (left for
                                 `attnfuzz minimize DIR`) */
    double known_fault_gap;   /* a known crash or timeout bug of a backend gets at most one of its
                                 trigger cases per this many seconds, the first after one gap;
                                 0 = AF_KNOWN_FAULT_GAP (60) */
    bool no_bind;             /* do not bind each job (and its workers) to one CPU */
    unsigned batch;           /* cases per execution batch (af_exec_run_batch); 0 or 1 = one at
                                 a time. A worker that declared `batch` gets them in one frame */
    bool no_pipeline;         /* batches one after another; by default, when every check only
                                 compares, the next batch is sent to the workers before the
                                 last one is checked and stored (exec.h) */
    unsigned threads;         /* threads for a batch's inputs and references; 0 or 1 = this one.
                                 More than one: the job is not bound to one CPU */
    size_t batch_bytes;       /* a batch stops growing past this many bytes of tensors; 0 = 256 MiB */
    double serving;           /* share of generated cases in a serving form or decode shape (0..1);
                                 < 0 (the default): AF_SERVING_AUTO when some external backend
                                 (a worker or target) declares a serving capability (packed,
                                 paged, sinks, alibi), else 0: the built-ins run serving cases
                                 when asked */
    double fp8;               /* share of generated cases with FP8 inputs (0..1); < 0 (the default):
                                 AF_FP8_AUTO when some external backend declares e4m3 or e5m2,
                                 else 0: the built-ins run FP8 cases when asked */
    af_shard shard;           /* --shard I/N: the case stream of shard I (shard.h); count 0 =
                                 not sharded. The stats say which shard they are */
    const af_known *known;    /* known bugs (known.h) findings are matched against before
                                 they are minimized or stored; NULL: none (--no-known) */
} af_campaign_opts;
#define AF_SERVING_AUTO 0.25
#define AF_FP8_AUTO 0.25

void af_campaign_opts_default(af_campaign_opts *o);

#define AF_MINIMIZE_SHARE 0.1      /* the default minimize_share */
#define AF_MINIMIZE_GRACE_MIN 10.0 /* seconds: the least default end-of-campaign pass */
/* The end-of-campaign pass o gets, in seconds, for a campaign that ran `ran` seconds. */
double af_campaign_minimize_grace(const af_campaign_opts *o, double ran);

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

/* --jobs N supervision. The parent looks at its children once a second. A child that dies
 * (killed by a signal, as the OOM killer's SIGKILL, or exiting with an error) is reported
 * on stderr, on the status line and in the stats, and restarted in its slot with a new seed
 * stream and the same crashes directory. Nothing it found is lost: its bundles are on disk,
 * and the stats file it rewrote every second stays and is merged.
 * A slot "kept dying" when its child died more than AF_JOB_MAX_RESTARTS times, or when a
 * restarted child died within AF_JOB_MIN_LIFE seconds of its start (a crash loop: a
 * backend that cannot start, memory that runs out at once): it is not restarted again,
 * the other jobs go on, and the campaign ends with jobs_kept_dying set (attnfuzz fuzz
 * then exits 2). */
#define AF_JOB_MAX_RESTARTS 3
#define AF_JOB_MIN_LIFE 1.0
/* Seconds past --time and the minimization grace (af_campaign_minimize_grace) after which
 * the parent sends its children SIGINT, then SIGKILL. */
#define AF_JOB_LATE_STOP 10.0
#define AF_JOB_LATE_KILL 120.0
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

void af_campaign_stats_free(af_campaign_stats *s);
/* Writes stats as JSON (atomically); AF_ERR_IO names the path. */
af_status af_campaign_stats_write(const af_campaign_stats *s, const af_campaign_opts *o, const char *path,
                                  af_error *err);

/* Runs the campaign. Returns AF_OK whether or not something was found (see stats);
 * errors are setup or I/O problems that stop it. */
af_status af_campaign_run(const af_campaign_opts *o, af_campaign_stats *stats, af_error *err);

/* Asks a running campaign (and its job processes) to stop after the current execution.
 * Async-signal-safe: call it from a SIGINT handler. */
void af_campaign_interrupt(void);
bool af_campaign_interrupted(void);

#ifdef __cplusplus
}
#endif
#endif
