/* merge_stats.c - the shards' stats summed into OUT/stats.json (merge.h says how each
 * field is merged). The shards' stats are read generically: a field this file does not
 * know (another engineer's counters, e.g. hits per known bug) is merged by its JSON type,
 * numbers summed, objects member by member, arrays of objects with an "id" joined by
 * id, other arrays concatenated with the shard noted in each element. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "merge_internal.h"

/* Fields of a shard's stats that are not summed: merged by their own rule below. */
static const char *const af_ms_special[] = {
    "shard", "shards", "seed", "host", "crashes", "strategy", "finished", "started_at", "elapsed", "execs_per_sec",
    "execs_per_sec_jobs", "unique_signatures", "findings_per_kind", "signatures", "format", "version", "jobs",
    "check_share",
};

static bool af_ms_is_special(const char *name) {
    for (size_t i = 0; i < sizeof af_ms_special / sizeof af_ms_special[0]; i++)
        if (!strcmp(name, af_ms_special[i])) return true;
    return false;
}

static double af_ms_num(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItem(j, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* "<out_crashes>/<name>" when OUT holds a bundle of the last path component of path,
 * else NULL. */
static cJSON *af_ms_bundle(const char *path, const char *out_crashes) {
    if (!path) return NULL;
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    char p[PATH_MAX];
    struct stat sb;
    int w = snprintf(p, sizeof p, "%s/%s", out_crashes, name);
    if (!name[0] || name[0] == '.' || w < 0 || (size_t)w >= sizeof p || stat(p, &sb) != 0) return NULL;
    return cJSON_CreateString(p);
}

/* Adds src into dst, both of one JSON type: numbers summed, booleans or'ed, objects
 * member by member, arrays of objects keyed by "id" joined, other arrays appended with
 * "shard" set in each object. Strings: the first kept. */
static void af_ms_add(cJSON *dst, const cJSON *src, long shard, const char *out_crashes);

static cJSON *af_ms_copy(const cJSON *src, long shard, const char *out_crashes) {
    if (cJSON_IsArray(src)) {
        cJSON *a = cJSON_CreateArray();
        af_ms_add(a, src, shard, out_crashes);
        return a;
    }
    cJSON *c = cJSON_Duplicate(src, true);
    if (c && cJSON_IsObject(c) && cJSON_GetObjectItem(c, "bundle")) {
        /* a bundle path of a shard: where OUT holds that bundle now */
        const cJSON *b = cJSON_GetObjectItem(src, "bundle");
        cJSON *nb = af_ms_bundle(cJSON_IsString(b) ? b->valuestring : NULL, out_crashes);
        cJSON_ReplaceItemInObject(c, "bundle", nb ? nb : cJSON_CreateNull());
    }
    return c;
}

static bool af_ms_keyed(const cJSON *arr) {
    const cJSON *it;
    bool any = false;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsObject(it) || !cJSON_IsString(cJSON_GetObjectItem(it, "id"))) return false;
        any = true;
    }
    return any;
}

static void af_ms_add(cJSON *dst, const cJSON *src, long shard, const char *out_crashes) {
    const cJSON *it;
    if (cJSON_IsNumber(dst) && cJSON_IsNumber(src)) {
        cJSON_SetNumberValue(dst, dst->valuedouble + src->valuedouble);
    } else if (cJSON_IsBool(dst) && cJSON_IsBool(src)) {
        if (cJSON_IsTrue(src) && !cJSON_IsTrue(dst)) dst->type = (dst->type & ~0xff) | cJSON_True;
    } else if (cJSON_IsObject(dst) && cJSON_IsObject(src)) {
        cJSON_ArrayForEach(it, src) {
            if (!strcmp(it->string, "bundle")) continue; /* set from the first (af_ms_copy) */
            cJSON *d = cJSON_GetObjectItem(dst, it->string);
            if (!d)
                cJSON_AddItemToObject(dst, it->string, af_ms_copy(it, shard, out_crashes));
            else if (!cJSON_IsString(d))
                af_ms_add(d, it, shard, out_crashes);
        }
    } else if (cJSON_IsArray(dst) && cJSON_IsArray(src)) {
        bool keyed = af_ms_keyed(src) && (cJSON_GetArraySize(dst) == 0 || af_ms_keyed(dst));
        cJSON_ArrayForEach(it, src) {
            if (keyed) {
                const char *id = cJSON_GetObjectItem(it, "id")->valuestring;
                cJSON *d, *match = NULL;
                cJSON_ArrayForEach(d, dst) if (!strcmp(cJSON_GetObjectItem(d, "id")->valuestring, id)) match = d;
                if (match) {
                    af_ms_add(match, it, shard, out_crashes);
                    const cJSON *b = cJSON_GetObjectItem(match, "bundle"), *sb = cJSON_GetObjectItem(it, "bundle");
                    if (cJSON_IsNull(b) && cJSON_IsString(sb)) {
                        cJSON *nb = af_ms_bundle(sb->valuestring, out_crashes);
                        if (nb) cJSON_ReplaceItemInObject(match, "bundle", nb);
                    }
                    continue;
                }
            }
            cJSON *c = af_ms_copy(it, shard, out_crashes);
            if (!keyed && cJSON_IsObject(c) && shard >= 0) {
                cJSON_DeleteItemFromObject(c, "shard");
                cJSON_AddNumberToObject(c, "shard", (double)shard);
            }
            cJSON_AddItemToArray(dst, c);
        }
    }
}

/* The signature tables joined by signature: counts summed, first_time the earliest (with
 * the shard and its first_exec), found_by the shards, the bundle where OUT holds it. */
static void af_ms_signatures(cJSON *out, const af_merge_source *src, size_t n, const char *out_crashes) {
    cJSON *sigs = cJSON_AddArrayToObject(out, "signatures");
    for (size_t i = 0; i < n; i++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(src[i].st, "signatures")) {
            const cJSON *sg = cJSON_GetObjectItem(it, "signature");
            if (!cJSON_IsObject(it) || !cJSON_IsString(sg)) continue;
            cJSON *d, *m = NULL;
            cJSON_ArrayForEach(d, sigs) if (!strcmp(cJSON_GetObjectItem(d, "signature")->valuestring, sg->valuestring)) m = d;
            double count = af_ms_num(it, "count"), ft = af_ms_num(it, "first_time");
            const cJSON *bun = cJSON_GetObjectItem(it, "bundle"), *hex = cJSON_GetObjectItem(it, "input_hex");
            if (!m) {
                m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "signature", sg->valuestring);
                const cJSON *kd = cJSON_GetObjectItem(it, "kind"), *who = cJSON_GetObjectItem(it, "who");
                cJSON_AddStringToObject(m, "kind", cJSON_IsString(kd) ? kd->valuestring : "");
                cJSON_AddStringToObject(m, "who", cJSON_IsString(who) ? who->valuestring : "");
                cJSON_AddNumberToObject(m, "count", 0);
                cJSON_AddNumberToObject(m, "first_time", ft);
                cJSON_AddNumberToObject(m, "first_shard", (double)src[i].index);
                cJSON_AddNumberToObject(m, "first_exec", af_ms_num(it, "first_exec"));
                cJSON_AddArrayToObject(m, "found_by");
                cJSON_AddNullToObject(m, "bundle");
                cJSON_AddItemToArray(sigs, m);
            } else if (ft < af_ms_num(m, "first_time")) {
                cJSON_SetNumberValue(cJSON_GetObjectItem(m, "first_time"), ft);
                cJSON_SetNumberValue(cJSON_GetObjectItem(m, "first_shard"), (double)src[i].index);
                cJSON_SetNumberValue(cJSON_GetObjectItem(m, "first_exec"), af_ms_num(it, "first_exec"));
            }
            cJSON *c = cJSON_GetObjectItem(m, "count");
            cJSON_SetNumberValue(c, c->valuedouble + count);
            cJSON_AddItemToArray(cJSON_GetObjectItem(m, "found_by"), cJSON_CreateNumber((double)src[i].index));
            if (cJSON_IsNull(cJSON_GetObjectItem(m, "bundle"))) {
                cJSON *nb = af_ms_bundle(cJSON_IsString(bun) ? bun->valuestring : NULL, out_crashes);
                if (nb) {
                    cJSON_ReplaceItemInObject(m, "bundle", nb);
                    cJSON_DeleteItemFromObject(m, "input_hex");
                } else if (cJSON_IsString(hex) && !cJSON_GetObjectItem(m, "input_hex")) {
                    cJSON_AddStringToObject(m, "input_hex", hex->valuestring); /* replayable: xxd -r -p */
                }
            }
        }
    }
    /* unique counts are the merged table's: a bug two shards found is one finding */
    cJSON *kinds = cJSON_AddObjectToObject(out, "findings_per_kind");
    for (size_t i = 0; i < n; i++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(src[i].st, "findings_per_kind"))
            if (!cJSON_GetObjectItem(kinds, it->string)) cJSON_AddNumberToObject(kinds, it->string, 0);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, sigs) {
        const char *k = cJSON_GetObjectItem(it, "kind")->valuestring;
        cJSON *v = cJSON_GetObjectItem(kinds, k);
        if (!v) v = cJSON_AddNumberToObject(kinds, k, 0);
        cJSON_SetNumberValue(v, v->valuedouble + 1);
    }
    cJSON_AddNumberToObject(out, "unique_signatures", cJSON_GetArraySize(sigs));
}

char *af_merge_stats_print(const af_merge_source *src, size_t n, const char *out_crashes, af_error *err) {
    cJSON *out = cJSON_CreateObject();
    if (!out) {
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    cJSON_AddStringToObject(out, "format", AF_MERGE_FORMAT);
    cJSON_AddNumberToObject(out, "version", AF_MERGE_VERSION);
    cJSON_AddNumberToObject(out, "merged_at", (double)time(NULL));
    cJSON_AddStringToObject(out, "crashes", out_crashes);

    /* the shards: how many there should be, which are here, which finished */
    double expected = 0, elapsed = 0, shard_seconds = 0, rate = 0, rate_jobs = 0;
    size_t with_stats = 0, finished = 0;
    const cJSON *seed = NULL;
    bool seeds_differ = false;
    for (size_t i = 0; i < n; i++) {
        const cJSON *j = src[i].st;
        if (!j) continue;
        with_stats++;
        expected = fmax(expected, af_ms_num(j, "shards"));
        if (cJSON_IsTrue(cJSON_GetObjectItem(j, "finished"))) finished++;
        elapsed = fmax(elapsed, af_ms_num(j, "elapsed"));
        shard_seconds += af_ms_num(j, "elapsed");
        rate += af_ms_num(j, "execs_per_sec");
        rate_jobs += af_ms_num(j, "execs_per_sec_jobs");
        const cJSON *s = cJSON_GetObjectItem(j, "seed");
        if (cJSON_IsNumber(s) && seed && s->valuedouble != seed->valuedouble) seeds_differ = true;
        if (cJSON_IsNumber(s) && !seed) seed = s;
    }
    cJSON_AddNumberToObject(out, "shards", expected > 0 ? expected : (double)n);
    cJSON_AddNumberToObject(out, "shards_merged", (double)n);
    cJSON_AddNumberToObject(out, "shards_with_stats", (double)with_stats);
    cJSON_AddNumberToObject(out, "shards_finished", (double)finished);
    cJSON *missing = cJSON_AddArrayToObject(out, "shards_missing");
    for (double k = 0; k < expected && cJSON_GetArraySize(missing) < 1000; k++) {
        bool have = false;
        for (size_t i = 0; i < n && !have; i++) have = src[i].st && (double)src[i].index == k;
        if (!have) cJSON_AddItemToArray(missing, cJSON_CreateNumber(k));
    }
    cJSON_AddBoolToObject(out, "finished",
                          with_stats == n && finished == n && cJSON_GetArraySize(missing) == 0 && n > 0);
    if (seed && !seeds_differ)
        cJSON_AddNumberToObject(out, "seed", seed->valuedouble);
    else
        cJSON_AddNullToObject(out, "seed"); /* none, or shards of different campaigns */
    cJSON_AddNumberToObject(out, "elapsed", elapsed);             /* the longest shard's */
    cJSON_AddNumberToObject(out, "shard_seconds", shard_seconds); /* all of them */
    cJSON_AddNumberToObject(out, "execs_per_sec", rate);          /* they run at once */
    cJSON_AddNumberToObject(out, "execs_per_sec_jobs", rate_jobs);
    double jobs = 0;
    for (size_t i = 0; i < n; i++)
        if (src[i].st) jobs += fmax(1.0, af_ms_num(src[i].st, "jobs"));
    cJSON_AddNumberToObject(out, "jobs", jobs); /* processes over all shards */

    /* every other field, generically */
    for (size_t i = 0; i < n; i++) {
        const cJSON *it;
        if (!src[i].st) continue;
        cJSON_ArrayForEach(it, src[i].st) {
            if (!it->string || af_ms_is_special(it->string)) continue;
            cJSON *d = cJSON_GetObjectItem(out, it->string);
            if (!d)
                cJSON_AddItemToObject(out, it->string, af_ms_copy(it, src[i].index, out_crashes));
            else
                af_ms_add(d, it, src[i].index, out_crashes);
        }
    }
    af_ms_signatures(out, src, n, out_crashes);

    /* each check's share of the time of every job of every shard, from the summed seconds */
    double whole = 0;
    for (size_t i = 0; i < n; i++)
        if (src[i].st) whole += af_ms_num(src[i].st, "elapsed") * fmax(1.0, af_ms_num(src[i].st, "jobs"));
    const cJSON *secs = cJSON_GetObjectItem(out, "seconds");
    double rel = af_ms_num(secs, "relations"), det = af_ms_num(secs, "determinism");
    cJSON *cs = cJSON_AddObjectToObject(out, "check_share");
    cJSON_AddNumberToObject(cs, "compare", whole > 0 ? (af_ms_num(secs, "checks") - rel) / whole : 0.0);
    cJSON_AddNumberToObject(cs, "relations", whole > 0 ? rel / whole : 0.0);
    cJSON_AddNumberToObject(cs, "determinism", whole > 0 ? det / whole : 0.0);

    /* one row per shard */
    cJSON *rows = cJSON_AddArrayToObject(out, "per_shard");
    for (size_t i = 0; i < n; i++) {
        const cJSON *j = src[i].st;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "shard", (double)src[i].index);
        cJSON_AddStringToObject(r, "dir", src[i].dir);
        cJSON_AddBoolToObject(r, "stats", j != NULL);
        if (j) {
            const cJSON *h = cJSON_GetObjectItem(j, "host");
            cJSON_AddStringToObject(r, "host", cJSON_IsString(h) ? h->valuestring : "");
            static const char *const copy[] = {"execs", "elapsed", "execs_per_sec", "findings_total",
                                               "unique_signatures", "started_at", "jobs", "jobs_died"};
            for (size_t k = 0; k < sizeof copy / sizeof copy[0]; k++)
                cJSON_AddNumberToObject(r, copy[k], af_ms_num(j, copy[k]));
            cJSON_AddBoolToObject(r, "finished", cJSON_IsTrue(cJSON_GetObjectItem(j, "finished")));
        }
        cJSON_AddItemToArray(rows, r);
    }
    char *text = cJSON_Print(out); /* NULL too when any allocation above failed: nothing half */
    cJSON_Delete(out);
    if (!text) af_error_set(err, AF_ERR_NOMEM, "out of memory");
    return text;
}
