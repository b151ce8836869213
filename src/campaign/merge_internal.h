/* merge_internal.h - what merge.c (the bundles) and merge_stats.c (the stats) share
 * (library-internal; merge.h is the interface). */
#ifndef ATTNFUZZ_MERGE_INTERNAL_H
#define ATTNFUZZ_MERGE_INTERNAL_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stddef.h>

#include "attnfuzz/merge.h"

/* One source directory of a merge. */
typedef struct af_merge_source {
    char dir[PATH_MAX];     /* as given, or ROOT/shard-I of a root */
    char real[PATH_MAX];    /* dir resolved (the same shard named twice is merged once) */
    char crashes[PATH_MAX]; /* its bundles: dir/crashes, or dir itself */
    char stats[PATH_MAX];   /* dir/stats.json, "" for a plain crashes directory */
    long index;             /* shard index: the stats' "shard", else the name's shard-I, else -1 */
    cJSON *st;              /* its stats, NULL when it has none or they did not parse */
} af_merge_source;

/* The merged stats of n sources (merge.h says how each field is merged) as JSON text
 * (cJSON_free it); a bundle path points into out_crashes when that name is there.
 * NULL when out of memory (err set). */
char *af_merge_stats_print(const af_merge_source *src, size_t n, const char *out_crashes, af_error *err);

#endif
