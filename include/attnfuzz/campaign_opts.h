/* campaign_opts.h - what a campaign is asked to do (af_campaign_opts: strategy, limits, shares,
 * minimization budget, jobs) and what the stages of `attnfuzz fuzz` read of it: the defaults,
 * the end-of-campaign minimization grace, the --jobs supervision limits and the stats file.
 * The campaign itself (af_campaign_run) is campaign.h's; the loop (loop.c) and the job
 * supervisor (jobs.c) it calls take only this. */
#ifndef ATTNFUZZ_CAMPAIGN_OPTS_H
#define ATTNFUZZ_CAMPAIGN_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "known.h"
#include "shard.h"
#include "stats.h"
#include "status.h"
#include "stop.h"

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
    double edges;             /* share of generated cases whose shape is drawn on both sides of the
                                 eligibility switches (head dims, lengths, GQA ratio, alignment;
                                 case.h af_gen_edges), 0..1; default 0. Fields a backend's
                                 refusals cluster on are drawn on an edge more often */
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
/* (af_job_death, AF_JOB_MAX_DEATHS: stats.h) */

/* Writes stats as JSON (atomically; af_stats_write with o's fields, o may be NULL); AF_ERR_IO
 * names the path. */
af_status af_campaign_stats_write(const af_campaign_stats *s, const af_campaign_opts *o, const char *path,
                                  af_error *err);

#ifdef __cplusplus
}
#endif

#endif
