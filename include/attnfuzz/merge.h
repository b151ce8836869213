/* merge.h - `attnfuzz merge OUT SOURCE...`: the shards of a campaign (shard.h), or the
 * crashes directories of several machines, joined into one directory: one bundle per
 * bundle name (a signature, "<kind>-<signature>", or a known bug, "known-<id>"; names are
 * taken as they are), the smallest case kept where sources hold the same name, and the
 * shards' stats summed. It may run while the shards still run, as often as wanted and
 * as many at once as wanted (a periodic merge, `--watch`, beside a final one).
 *
 * A SOURCE is a shard directory (it holds crashes/ or stats.json), a root holding
 * shard-I directories (each of them is a source), or a plain crashes directory of
 * bundles. OUT, when it lies inside a root, is never one of its sources.
 *
 * What OUT holds:
 *   OUT/crashes/<name>               a symbolic link to the current version of the bundle:
 *                                    readers (replay, report, regress, show) use it as
 *                                    the bundle directory
 *   OUT/crashes/.v/<name>@<16 hex>   the versions: complete bundle directories, never
 *                                    changed once renamed there
 *   OUT/crashes/.lock                serializes the link updates of concurrent merges
 *   OUT/stats.json                   the merged stats (format "attnfuzz-merged-stats")
 *
 * Why a merge never loses or half-writes a bundle, whatever runs beside it:
 *   - a shard writes a bundle into a temporary directory (".tmp-...") and renames it
 *     into place (bundle.h): a merge lists only names without a leading dot, so it sees
 *     complete bundles or nothing, and a source bundle never changes after its rename;
 *   - a merge copies a bundle into OUT/crashes/.v/.tmp-<name>-<pid>-<n>, reads it back
 *     (af_bundle_read: case.json parses and every file it lists is there), and renames
 *     it to a version name no other merge can pick (64 random bits): a version is
 *     complete before it has a name anyone looks at;
 *   - a new name is published with symlink(2), which creates the link atomically and
 *     fails if the name exists; a smaller bundle replaces a bigger one by creating a
 *     link at a temporary name and rename(2)-ing it over the old link: rename replaces
 *     a non-directory atomically (POSIX), so at every moment OUT/crashes/<name> names
 *     the old complete version or the new complete one, never neither. (A directory
 *     cannot be renamed over a non-empty directory on Linux, which is why the name is a
 *     link and the versions are directories.) The same holds on NFS, where rename of a
 *     file is atomic too;
 *   - the old version stays on disk: a reader that resolved the link before the swap
 *     (af_bundle_read resolves it once per read) reads a complete bundle to the end. A
 *     version no link names is removed by a later merge only once its ctime (set when
 *     it was installed, refreshed when it was replaced) is grace seconds old;
 *   - the link updates (compare the candidate with the current bundle, swap) and the
 *     removal of old versions hold an exclusive flock on OUT/crashes/.lock, so two
 *     merges never both replace one bundle (the bigger one winning) and a version is
 *     never removed between its check and its link. Where the file system has no locks
 *     (flock fails) the merge goes on without: bundles are still never lost or partial,
 *     and a bigger bundle that won a race is replaced by the next merge, since the
 *     sources still hold the smaller one. A bundle is only ever replaced by one that is
 *     strictly smaller, so merging again changes nothing (idempotent).
 * "Smaller": fewer flops (af_case_flops), then fewer tensor bytes (af_case_tensor_bytes).
 *
 * The stats: numbers summed (execs, skipped, findings_total, write_errors, the "seconds"
 * split and any other object of counts, e.g. hits per known bug), the signature table
 * joined by signature (counts summed, first_time the earliest), objects of an array
 * keyed by "id" (known bugs) joined by id, elapsed the longest shard's with
 * shard_seconds the sum, execs_per_sec the sum of the shards' rates (they run at once),
 * check_share from the summed seconds over every shard's jobs' time,
 * unique counts (unique_signatures, findings_per_kind) those of the merged table, and one
 * row per shard (per_shard). */
#ifndef ATTNFUZZ_MERGE_H
#define ATTNFUZZ_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AF_MERGE_FORMAT "attnfuzz-merged-stats"
#define AF_MERGE_VERSION 1
/* Seconds a replaced version stays on disk for readers that resolved it before. */
#define AF_MERGE_GRACE 3600.0
#define AF_MERGE_MAX_SOURCES 4096 /* shard directories of one merge, roots expanded */

typedef struct af_merge_opts {
    const char *out;             /* OUT (created if missing) */
    const char *const *sources;  /* shard directories, roots of shard-I, crashes directories */
    size_t n_sources;
    double grace;                /* seconds an unlinked version stays: 0 = AF_MERGE_GRACE.
                                    A reader (or a merge) that holds a version longer
                                    than this may see it go: keep it above the longest
                                    report or replay of one bundle */
    bool quiet;                  /* no warnings on stderr (unreadable bundles, stats) */
} af_merge_opts;

typedef struct af_merge_result {
    size_t sources;          /* source directories, roots expanded */
    size_t stats_read;       /* of them, those whose stats.json was read */
    size_t shards_expected;  /* N of --shard I/N as the stats say (0 when none says) */
    size_t shards_finished;  /* sources whose stats say "finished" */
    size_t seen;             /* bundles in the sources */
    size_t added;            /* names new in OUT */
    size_t replaced;         /* names whose bundle a smaller one replaced */
    size_t unreadable;       /* source bundles skipped: case.json unreadable */
    size_t bundles;          /* names in OUT/crashes after the merge */
    size_t removed;          /* old versions removed (unlinked for longer than grace) */
    uint64_t execs;          /* executions, summed over the sources */
} af_merge_result;

/* One merge pass: reads every source's stats, then its bundles (a bundle a shard's stats
 * name was written before those stats, so it is seen), installs what is new or smaller
 * into OUT/crashes, removes old versions past the grace, writes OUT/stats.json
 * (atomically). Unreadable source bundles are skipped, counted and named on stderr (not
 * with quiet). Errors: AF_ERR_INVALID (no sources, too many, OUT among them),
 * AF_ERR_IO naming the path (a source that is not a directory, OUT not writable, a copy
 * that failed: its temporary directory is removed, what is in OUT stays as it was),
 * AF_ERR_NOMEM. */
af_status af_merge_run(const af_merge_opts *o, af_merge_result *r, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
