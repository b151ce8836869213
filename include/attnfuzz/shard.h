/* shard.h - one campaign split into static shards across machines (docs/design.md
 * section 9): `attnfuzz fuzz --shard I/N`, one shard per Slurm array task or Kubernetes
 * Indexed Job pod, every shard with the same --seed. Cases are independent given a seed
 * and a stream, so no coordinator is needed: each shard draws from its own stream and
 * stores into its own directory, and `attnfuzz merge` (merge.h) joins them.
 *
 * Seed streams. A campaign process draws its cases from the Philox blocks
 *     philox(counter = {n_lo, n_hi, stream, "STRE"}, key = job seed)       n = 0, 1, ...
 * (rng.h: af_rng_init(r, job seed, stream)). Two processes of one campaign seed never
 * share a block:
 *   - shards differ in the stream word: af_shard_stream() is 0x80000000 | I for shard I
 *     and "CAMP" (0x43414d50, high bit clear) for an unsharded campaign;
 *   - within a shard (or an unsharded campaign), the processes of --jobs and their
 *     restarts differ in the key: af_shard_job_seed(seed, slot, gen) = seed + A*slot +
 *     B*gen (mod 2^64) with slot 0 for a single process, k + 1 for job k, gen the
 *     restarts of that slot. It is injective over slot <= AF_SHARD_SLOTS_MAX and gen <=
 *     AF_SHARD_GENS_MAX: A*ds = B*dg (mod 2^64) has no solution there besides 0 (A and
 *     B are odd, |A*ds| < 2^40, B*dg is at least 2^61 away from 0 for 0 < |dg| <= 3;
 *     tests/test_shard.c checks every pair).
 * An unsharded campaign keeps the streams it always had (same seeds, same cases).
 *
 * The output root (--root ROOT) every shard of a campaign shares:
 *   ROOT/shard-I/crashes/     the bundles shard I stored (its --jobs share it)
 *   ROOT/shard-I/stats.json   its stats, rewritten every second while it runs
 *                             ("finished": true once it stopped)
 *   ROOT/corpus/              optional: seeds every shard runs first (--corpus)
 *   ROOT/known.json           the campaign's own known bugs, loaded beside the repository's
 *                             for fuzz to load beside its own; not read yet
 *   ROOT/merged/              by convention, `attnfuzz merge ROOT/merged ROOT` */
#ifndef ATTNFUZZ_SHARD_H
#define ATTNFUZZ_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AF_SHARD_MAX (1u << 24)      /* shards of one campaign, at most */
#define AF_SHARD_SLOTS_MAX 256u      /* --jobs slots (jobs.c: AF_JOBS_MAX) */
#define AF_SHARD_GENS_MAX 3u         /* restarts of one slot (campaign_opts.h: AF_JOB_MAX_RESTARTS) */
#define AF_SHARD_STREAM_UNSHARDED 0x43414d50u /* "CAMP" */

/* Shard index of count; count 0 means "not sharded" (index 0). */
typedef struct af_shard {
    uint32_t index;
    uint32_t count;
} af_shard;

/* Parses "I/N" (0 <= I < N <= AF_SHARD_MAX) or "auto/N": I from the scheduler's
 * environment, SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN when set, so an array
 * 1-8 gives shards 0-7) or else JOB_COMPLETION_INDEX (Kubernetes Indexed Jobs).
 * AF_ERR_INVALID with a message saying what is wrong: not I/N, I out of range, "auto"
 * with neither variable set or one that is not a number. */
af_status af_shard_parse(const char *spec, af_shard *out, af_error *err);

/* The Philox stream word of a shard's case stream (see above). */
uint32_t af_shard_stream(const af_shard *s);

/* The key of one campaign process's case stream: slot 0 for a single process, k + 1 for
 * --jobs slot k; gen its restarts so far (see above). */
uint64_t af_shard_job_seed(uint64_t seed, unsigned slot, unsigned gen);

/* ROOT/shard-I and the paths under it (see above) into caller buffers of len bytes.
 * AF_ERR_INVALID when a path does not fit. */
typedef struct af_shard_paths {
    char dir[1024];     /* ROOT/shard-I */
    char crashes[1100]; /* ROOT/shard-I/crashes */
    char stats[1100];   /* ROOT/shard-I/stats.json */
    char corpus[1100];  /* ROOT/corpus */
    char known[1100];   /* ROOT/known.json */
} af_shard_paths;
af_status af_shard_paths_of(const char *root, const af_shard *s, af_shard_paths *p, af_error *err);

/* Parses the index of a directory named "shard-I" (the last path component); -1 when the
 * name is not of that form. */
long af_shard_dir_index(const char *path);

#ifdef __cplusplus
}
#endif
#endif
