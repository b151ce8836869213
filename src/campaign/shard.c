/* shard.c - shard specs, their seed streams and the output root layout (see shard.h). */
#include "attnfuzz/shard.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal number that fits below limit, the whole string. */
static bool af_shard_number(const char *s, unsigned long long limit, uint32_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v >= limit) return false;
    *out = (uint32_t)v;
    return true;
}

/* The shard index the scheduler gave this process (shard.h); err says why there is none. */
static af_status af_shard_from_env(uint32_t count, uint32_t *index, af_error *err) {
    const char *slurm = getenv("SLURM_ARRAY_TASK_ID"), *k8s = getenv("JOB_COMPLETION_INDEX");
    if (slurm && *slurm) {
        uint32_t id, min = 0;
        AF_RETURN_ERROR_IF(!af_shard_number(slurm, 1ull << 32, &id), err, AF_ERR_INVALID,
                           "--shard auto: SLURM_ARRAY_TASK_ID=\"%s\" is not a task index", slurm);
        const char *m = getenv("SLURM_ARRAY_TASK_MIN");
        if (m && *m && !af_shard_number(m, 1ull << 32, &min)) min = 0;
        AF_RETURN_ERROR_IF(id < min, err, AF_ERR_INVALID,
                           "--shard auto: SLURM_ARRAY_TASK_ID=%u is below SLURM_ARRAY_TASK_MIN=%u", id, min);
        AF_RETURN_ERROR_IF(id - min >= count, err, AF_ERR_INVALID,
                           "--shard auto/%u: SLURM_ARRAY_TASK_ID=%u (minus SLURM_ARRAY_TASK_MIN=%u) is not below %u: "
                           "submit the array as --array=0-%u",
                           count, id, min, count, count - 1);
        *index = id - min;
        return AF_OK;
    }
    if (k8s && *k8s) {
        uint32_t id;
        AF_RETURN_ERROR_IF(!af_shard_number(k8s, 1ull << 32, &id), err, AF_ERR_INVALID,
                           "--shard auto: JOB_COMPLETION_INDEX=\"%s\" is not an index", k8s);
        AF_RETURN_ERROR_IF(id >= count, err, AF_ERR_INVALID,
                           "--shard auto/%u: JOB_COMPLETION_INDEX=%u is not below %u (completions must be %u)", count,
                           id, count, count);
        *index = id;
        return AF_OK;
    }
    return af_error_set(err, AF_ERR_INVALID,
                        "--shard auto/%u: neither SLURM_ARRAY_TASK_ID (a Slurm job array task) nor "
                        "JOB_COMPLETION_INDEX (a Kubernetes Indexed Job pod) is set: give the index, --shard I/%u",
                        count, count);
}

af_status af_shard_parse(const char *spec, af_shard *out, af_error *err) {
    out->index = out->count = 0;
    const char *slash = spec ? strchr(spec, '/') : NULL;
    AF_RETURN_ERROR_IF(!slash, err, AF_ERR_INVALID, "--shard \"%s\": not I/N or auto/N", spec ? spec : "");
    uint32_t count;
    AF_RETURN_ERROR_IF(!af_shard_number(slash + 1, (unsigned long long)AF_SHARD_MAX + 1, &count) || count == 0, err,
                       AF_ERR_INVALID, "--shard \"%s\": N must be a number from 1 to %u", spec, AF_SHARD_MAX);
    char first[32];
    size_t n = (size_t)(slash - spec);
    AF_RETURN_ERROR_IF(n == 0 || n >= sizeof first, err, AF_ERR_INVALID, "--shard \"%s\": not I/N or auto/N", spec);
    memcpy(first, spec, n);
    first[n] = 0;
    uint32_t index = 0;
    if (!strcmp(first, "auto")) {
        AF_TRY(af_shard_from_env(count, &index, err));
    } else {
        AF_RETURN_ERROR_IF(!af_shard_number(first, count, &index), err, AF_ERR_INVALID,
                           "--shard \"%s\": I must be a number from 0 to %u (or auto)", spec, count - 1);
    }
    out->index = index;
    out->count = count;
    return AF_OK;
}

uint32_t af_shard_stream(const af_shard *s) {
    if (!s || s->count == 0) return AF_SHARD_STREAM_UNSHARDED;
    return 0x80000000u | s->index; /* index < 2^24: the high bit tells it from "CAMP" */
}

uint64_t af_shard_job_seed(uint64_t seed, unsigned slot, unsigned gen) {
    /* the formula --jobs always used (slot k + 1 for job k), so unsharded campaigns keep
     * their seeds; injective over the slots and restarts there can be (shard.h) */
    if (slot == 0 && gen == 0) return seed;
    return seed + 0x9e3779b9ull * slot + 0xbf58476d1ce4e5b9ull * gen;
}

af_status af_shard_paths_of(const char *root, const af_shard *s, af_shard_paths *p, af_error *err) {
    memset(p, 0, sizeof *p);
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    AF_RETURN_ERROR_IF(n == 0, err, AF_ERR_INVALID, "--root: the directory name is empty");
    int w = snprintf(p->dir, sizeof p->dir, "%.*s/shard-%u", (int)n, root, s ? s->index : 0u);
    AF_RETURN_ERROR_IF(w < 0 || (size_t)w >= sizeof p->dir, err, AF_ERR_INVALID, "--root %s: path is too long", root);
    snprintf(p->crashes, sizeof p->crashes, "%s/crashes", p->dir);
    snprintf(p->stats, sizeof p->stats, "%s/stats.json", p->dir);
    snprintf(p->corpus, sizeof p->corpus, "%.*s/corpus", (int)n, root);
    snprintf(p->known, sizeof p->known, "%.*s/known.json", (int)n, root);
    return AF_OK;
}

long af_shard_dir_index(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    const char *name = path + b;
    size_t len = n - b;
    if (len < 7 || strncmp(name, "shard-", 6) != 0) return -1;
    long v = 0;
    for (size_t i = 6; i < len; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (long)AF_SHARD_MAX) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}
