/* stats.c - a campaign's counts, its signature table and its stats JSON file (see stats.h). */
#include "attnfuzz/stats.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/stop.h"
#include "fileio.h"

void af_campaign_stats_free(af_campaign_stats *s) {
    if (!s) return;
    af_free(s->sigs);
    af_free(s->known);
    memset(s, 0, sizeof *s);
}

af_status af_stats_write(const af_campaign_stats *s, const af_stats_about *o, const char *path, af_error *err) {
    cJSON *j = cJSON_CreateObject();
    AF_RETURN_ERROR_IF(!j, err, AF_ERR_NOMEM, "out of memory");
    cJSON_AddNumberToObject(j, "execs", (double)s->execs);
    cJSON_AddNumberToObject(j, "skipped", (double)s->skipped);
    cJSON_AddNumberToObject(j, "backward_execs", (double)s->backward_execs);
    cJSON_AddNumberToObject(j, "batches", (double)s->batches);
    cJSON_AddNumberToObject(j, "grads_unjudged", (double)s->grads_unjudged);
    cJSON_AddNumberToObject(j, "seeds", (double)s->seeds);
    cJSON_AddNumberToObject(j, "seeds_run", (double)s->seeds_run);
    cJSON_AddNumberToObject(j, "elapsed", s->elapsed);
    cJSON_AddNumberToObject(j, "execs_per_sec", s->elapsed > 0 ? (double)s->execs / s->elapsed : 0.0);
    cJSON_AddNumberToObject(j, "execs_per_sec_jobs",
                            s->jobs_rate > 0 ? s->jobs_rate : s->elapsed > 0 ? (double)s->execs / s->elapsed : 0.0);
    cJSON_AddNumberToObject(j, "findings_total", (double)s->findings_total);
    cJSON_AddNumberToObject(j, "unique_signatures", (double)s->n_sigs);
    cJSON_AddNumberToObject(j, "write_errors", (double)s->write_errors);
    cJSON_AddNumberToObject(j, "minimize_execs", (double)s->minimize_execs);
    cJSON_AddNumberToObject(j, "minimize_seconds", s->minimize_seconds);
    /* of the jobs' time: each ran elapsed, then its end pass */
    double job_time = s->elapsed * (o && o->jobs > 1 ? o->jobs : 1) + s->minimize_end_seconds;
    cJSON_AddNumberToObject(j, "minimize_share", job_time > 0 ? s->minimize_seconds / job_time : 0.0);
    cJSON_AddNumberToObject(j, "stored_unminimized", (double)s->stored_unminimized);
    cJSON_AddNumberToObject(j, "minimized_later", (double)s->minimized_later);
    cJSON_AddNumberToObject(j, "aliases_read", (double)s->aliases_read);
    cJSON_AddNumberToObject(j, "minimize_end_seconds", s->minimize_end_seconds);
    cJSON_AddNumberToObject(j, "jobs_died", (double)s->jobs_died);
    cJSON_AddNumberToObject(j, "jobs_restarted", (double)s->jobs_restarted);
    cJSON_AddBoolToObject(j, "jobs_kept_dying", s->jobs_kept_dying);
    cJSON *deaths = cJSON_AddArrayToObject(j, "job_deaths");
    for (uint64_t i = 0; i < s->jobs_died && i < AF_JOB_MAX_DEATHS; i++) {
        const af_job_death *d = &s->deaths[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "job", d->job);
        cJSON_AddNumberToObject(x, "pid", (double)d->pid);
        if (d->signal) {
            cJSON_AddNumberToObject(x, "signal", d->signal);
            cJSON_AddStringToObject(x, "signal_name", sigabbrev_np(d->signal) ? sigabbrev_np(d->signal) : "?");
        } else {
            cJSON_AddNumberToObject(x, "exit", d->exit_code);
        }
        cJSON_AddNumberToObject(x, "after", d->after);
        cJSON_AddBoolToObject(x, "restarted", d->restarted);
        cJSON_AddItemToArray(deaths, x);
    }
    cJSON_AddNumberToObject(j, "compile_seconds", s->compile_seconds);
    cJSON *tm = cJSON_AddObjectToObject(j, "seconds");
    cJSON_AddNumberToObject(tm, "generate", s->generate_seconds);
    cJSON_AddNumberToObject(tm, "reference", s->reference_seconds);
    cJSON_AddNumberToObject(tm, "backends", s->backend_seconds);
    cJSON_AddNumberToObject(tm, "target", s->target_seconds);
    cJSON_AddNumberToObject(tm, "compile", s->compile_seconds);
    cJSON_AddNumberToObject(tm, "protocol", fmax(0.0, s->backend_seconds - s->target_seconds - s->compile_seconds));
    cJSON_AddNumberToObject(tm, "checks", s->check_seconds);
    cJSON_AddNumberToObject(tm, "relations", s->relation_seconds);
    cJSON_AddNumberToObject(tm, "determinism", s->determinism_seconds);
    cJSON_AddNumberToObject(j, "determinism_runs", (double)s->determinism_runs);
    /* what each check costs, as a share of the campaign's time (every job's) */
    cJSON *cs = cJSON_AddObjectToObject(j, "check_share");
    double whole = s->elapsed * (o && o->jobs > 1 ? o->jobs : 1);
    cJSON_AddNumberToObject(cs, "compare", whole > 0 ? (s->check_seconds - s->relation_seconds) / whole : 0.0);
    cJSON_AddNumberToObject(cs, "relations", whole > 0 ? s->relation_seconds / whole : 0.0);
    cJSON_AddNumberToObject(cs, "determinism", whole > 0 ? s->determinism_seconds / whole : 0.0);
    cJSON_AddNumberToObject(tm, "restarts", s->restart_seconds);
    cJSON_AddNumberToObject(j, "worker_restarts", (double)s->worker_restarts);
    /* known bugs: hits per entry, the backend runs left out for them, the exemplars */
    cJSON_AddNumberToObject(j, "known_hits", (double)s->known_hits);
    cJSON_AddNumberToObject(j, "known_skipped", (double)s->known_skipped);
    cJSON *known = cJSON_AddArrayToObject(j, "known");
    for (size_t i = 0; i < s->n_known; i++) {
        const af_known_stat *k = &s->known[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "id", k->id);
        cJSON_AddNumberToObject(x, "hits", (double)k->hits);
        cJSON_AddNumberToObject(x, "skipped", (double)k->skipped);
        if (k->bundle[0])
            cJSON_AddStringToObject(x, "bundle", k->bundle);
        else
            cJSON_AddNullToObject(x, "bundle");
        cJSON_AddItemToArray(known, x);
    }
    cJSON *kinds = cJSON_AddObjectToObject(j, "findings_per_kind");
    for (int k = 1; k < AF_KIND_COUNT; k++) cJSON_AddNumberToObject(kinds, af_kind_names[k], (double)s->unique_by_kind[k]);
    cJSON *sigs = cJSON_AddArrayToObject(j, "signatures");
    for (size_t i = 0; i < s->n_sigs; i++) {
        const af_signature_entry *e = &s->sigs[i];
        cJSON *x = cJSON_CreateObject();
        char hex[32];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)e->signature);
        cJSON_AddStringToObject(x, "signature", hex);
        cJSON_AddStringToObject(x, "kind", af_kind_names[e->kind]);
        cJSON_AddStringToObject(x, "who", e->who);
        cJSON_AddNumberToObject(x, "count", (double)e->count);
        cJSON_AddNumberToObject(x, "first_exec", (double)e->first_exec);
        cJSON_AddNumberToObject(x, "first_time", e->first_time);
        if (e->bundle[0]) {
            cJSON_AddStringToObject(x, "bundle", e->bundle);
        } else {
            cJSON_AddNullToObject(x, "bundle");
            cJSON_AddStringToObject(x, "input_hex", e->input_hex); /* replayable: xxd -r -p */
        }
        cJSON_AddBoolToObject(x, "stored_elsewhere", e->stored_elsewhere);
        cJSON_AddBoolToObject(x, "minimized", !e->unminimized);
        cJSON_AddItemToArray(sigs, x);
    }
    cJSON_AddBoolToObject(j, "finished", s->finished);
    cJSON_AddBoolToObject(j, "interrupted", af_campaign_interrupted()); /* stopped by SIGINT/SIGTERM */
    cJSON_AddNumberToObject(j, "started_at", s->started_at);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    cJSON_AddStringToObject(j, "host", host);
    if (o) {
        /* which shard (shard.h): what attnfuzz merge sums and lists per shard */
        cJSON_AddNumberToObject(j, "shard", o->shard);
        cJSON_AddNumberToObject(j, "shards", o->shards);
        cJSON_AddNumberToObject(j, "seed", (double)o->seed);
        cJSON_AddNumberToObject(j, "jobs", o->jobs ? o->jobs : 1);
        cJSON_AddStringToObject(j, "crashes", o->crashes);
        cJSON_AddStringToObject(j, "strategy", o->strategy);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    AF_RETURN_ERROR_IF(!text, err, AF_ERR_NOMEM, "out of memory");
    af_status st = af_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}


/* --- the signature table ---------------------------------------------------------- */

af_signature_entry *af_stats_find(af_campaign_stats *s, uint64_t sig) {
    for (size_t i = 0; i < s->n_sigs; i++)
        if (s->sigs[i].signature == sig) return &s->sigs[i];
    return NULL;
}

af_signature_entry *af_stats_add(af_campaign_stats *s, uint64_t sig, af_kind kind, const char *who, af_error *err) {
    if (s->n_sigs == s->cap_sigs) {
        size_t cap = s->cap_sigs ? 2 * s->cap_sigs : 64;
        af_signature_entry *n = af_calloc(cap, sizeof *n);
        if (!n) {
            af_error_set(err, AF_ERR_NOMEM, "out of memory");
            return NULL;
        }
        if (s->sigs) memcpy(n, s->sigs, s->n_sigs * sizeof *n);
        af_free(s->sigs);
        s->sigs = n;
        s->cap_sigs = cap;
    }
    af_signature_entry *e = &s->sigs[s->n_sigs++];
    memset(e, 0, sizeof *e);
    e->signature = sig;
    e->kind = kind;
    snprintf(e->who, sizeof e->who, "%s", who);
    s->unique_by_kind[kind]++;
    return e;
}

af_signature_entry *af_stats_merge(af_campaign_stats *s, uint64_t from, uint64_t to, af_kind kind,
                                   const char *who) {
    af_signature_entry *a = af_stats_find(s, from), *b = af_stats_find(s, to);
    if (a && a != b && !b) { /* renamed */
        s->unique_by_kind[a->kind]--;
        s->unique_by_kind[kind]++;
        a->signature = to;
        a->kind = kind;
        a->bundle[0] = 0;
        a->input_hex[0] = 0;
        a->stored_elsewhere = false;
        if (a->write_failed) s->write_errors--;
        a->write_failed = false;
        return a;
    }
    if (a && b && a != b) { /* merged */
        b->count += a->count;
        if (a->first_exec < b->first_exec) b->first_exec = a->first_exec;
        if (a->first_time < b->first_time) b->first_time = a->first_time;
        if (a->write_failed) s->write_errors--;
        s->unique_by_kind[a->kind]--;
        *a = s->sigs[--s->n_sigs];
        return af_stats_find(s, to);
    }
    if (b) return b;
    return af_stats_add(s, to, kind, who, NULL);
}

af_known_stat *af_stats_known(af_campaign_stats *s, const char *id) {
    for (size_t i = 0; i < s->n_known; i++)
        if (!strcmp(s->known[i].id, id)) return &s->known[i];
    if (s->n_known == s->cap_known) {
        size_t cap = s->cap_known ? 2 * s->cap_known : 16;
        af_known_stat *n = af_calloc(cap, sizeof *n);
        if (!n) return NULL;
        if (s->known) memcpy(n, s->known, s->n_known * sizeof *n);
        af_free(s->known);
        s->known = n;
        s->cap_known = cap;
    }
    af_known_stat *k = &s->known[s->n_known++];
    memset(k, 0, sizeof *k);
    snprintf(k->id, sizeof k->id, "%s", id);
    return k;
}

void af_stats_add_file(af_campaign_stats *s, const char *path, uint64_t *execs, bool current) {
    char *text = NULL;
    size_t len = 0;
    /* our own children's files: generous, but still bounded */
    if (af_file_read(path, (size_t)256 << 20, &text, &len, NULL) != AF_OK) return;
    cJSON *j = cJSON_ParseWithLength(text, len);
    af_free(text);
    if (!j) return;
    const cJSON *e = cJSON_GetObjectItem(j, "execs");
    if (cJSON_IsNumber(e)) *execs += (uint64_t)e->valuedouble;
    const char *const summed[] = {"skipped", "backward_execs", "grads_unjudged", "batches", "seeds", "seeds_run"};
    uint64_t *into[] = {&s->skipped, &s->backward_execs, &s->grads_unjudged, &s->batches, &s->seeds, &s->seeds_run};
    for (size_t i = 0; i < sizeof summed / sizeof summed[0]; i++) {
        const cJSON *v = cJSON_GetObjectItem(j, summed[i]);
        if (cJSON_IsNumber(v)) *into[i] += (uint64_t)v->valuedouble;
    }
    const cJSON *rate = cJSON_GetObjectItem(j, "execs_per_sec");
    if (current && cJSON_IsNumber(rate)) s->jobs_rate += rate->valuedouble; /* a live child's */
    const cJSON *sigs = cJSON_GetObjectItem(j, "signatures"), *it;
    cJSON_ArrayForEach(it, sigs) {
        const cJSON *sg = cJSON_GetObjectItem(it, "signature"), *kd = cJSON_GetObjectItem(it, "kind");
        const cJSON *who = cJSON_GetObjectItem(it, "who"), *cnt = cJSON_GetObjectItem(it, "count");
        const cJSON *bun = cJSON_GetObjectItem(it, "bundle"), *mz = cJSON_GetObjectItem(it, "minimized");
        if (!cJSON_IsString(sg) || !cJSON_IsString(kd) || !cJSON_IsString(who)) continue;
        uint64_t sig = strtoull(sg->valuestring, NULL, 16);
        int kind = af_kind_from_name(kd->valuestring);
        if (kind < 0) continue;
        af_signature_entry *x = af_stats_find(s, sig);
        bool fresh = !x;
        if (!x) x = af_stats_add(s, sig, (af_kind)kind, who->valuestring, NULL);
        if (!x) break;
        /* stored as found only while no job says it is minimized */
        bool unmin = cJSON_IsFalse(mz);
        x->unminimized = fresh ? unmin : x->unminimized && unmin;
        x->count += cJSON_IsNumber(cnt) ? (uint64_t)cnt->valuedouble : 1;
        if (cJSON_IsString(bun) && !x->bundle[0]) snprintf(x->bundle, sizeof x->bundle, "%s", bun->valuestring);
    }
    const cJSON *we = cJSON_GetObjectItem(j, "write_errors"), *ft = cJSON_GetObjectItem(j, "findings_total");
    if (cJSON_IsNumber(we)) s->write_errors += (uint64_t)we->valuedouble;
    if (cJSON_IsNumber(ft)) s->findings_total += (uint64_t)ft->valuedouble;
    const cJSON *cs = cJSON_GetObjectItem(j, "compile_seconds");
    if (cJSON_IsNumber(cs)) s->compile_seconds += cs->valuedouble;
    const cJSON *tm = cJSON_GetObjectItem(j, "seconds");
    static const char *const tnames[] = {"generate", "reference",  "backends",    "target",
                                         "checks",   "relations", "determinism", "restarts"};
    double *tvals[] = {&s->generate_seconds, &s->reference_seconds, &s->backend_seconds,     &s->target_seconds,
                       &s->check_seconds,    &s->relation_seconds,  &s->determinism_seconds, &s->restart_seconds};
    const cJSON *dr = cJSON_GetObjectItem(j, "determinism_runs");
    if (cJSON_IsNumber(dr)) s->determinism_runs += (uint64_t)dr->valuedouble;
    for (size_t i = 0; i < sizeof tnames / sizeof tnames[0]; i++) {
        const cJSON *v = cJSON_GetObjectItem(tm, tnames[i]);
        if (cJSON_IsNumber(v)) *tvals[i] += v->valuedouble;
    }
    const cJSON *wr = cJSON_GetObjectItem(j, "worker_restarts");
    if (cJSON_IsNumber(wr)) s->worker_restarts += (uint64_t)wr->valuedouble;
    const cJSON *kh = cJSON_GetObjectItem(j, "known_hits"), *ksk = cJSON_GetObjectItem(j, "known_skipped");
    if (cJSON_IsNumber(kh)) s->known_hits += (uint64_t)kh->valuedouble;
    if (cJSON_IsNumber(ksk)) s->known_skipped += (uint64_t)ksk->valuedouble;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "known")) {
        const cJSON *id = cJSON_GetObjectItem(it, "id"), *h = cJSON_GetObjectItem(it, "hits");
        const cJSON *ks = cJSON_GetObjectItem(it, "skipped"), *bun = cJSON_GetObjectItem(it, "bundle");
        if (!cJSON_IsString(id)) continue;
        af_known_stat *k = af_stats_known(s, id->valuestring);
        if (!k) break;
        if (cJSON_IsNumber(h)) k->hits += (uint64_t)h->valuedouble;
        if (cJSON_IsNumber(ks)) k->skipped += (uint64_t)ks->valuedouble;
        if (cJSON_IsString(bun) && !k->bundle[0]) snprintf(k->bundle, sizeof k->bundle, "%s", bun->valuestring);
    }
    const cJSON *me = cJSON_GetObjectItem(j, "minimize_execs"), *ms = cJSON_GetObjectItem(j, "minimize_seconds");
    if (cJSON_IsNumber(me)) s->minimize_execs += (uint64_t)me->valuedouble;
    if (cJSON_IsNumber(ms)) s->minimize_seconds += ms->valuedouble;
    const cJSON *su = cJSON_GetObjectItem(j, "stored_unminimized"), *ml = cJSON_GetObjectItem(j, "minimized_later");
    const cJSON *ar = cJSON_GetObjectItem(j, "aliases_read"), *mes = cJSON_GetObjectItem(j, "minimize_end_seconds");
    if (cJSON_IsNumber(su)) s->stored_unminimized += (uint64_t)su->valuedouble;
    if (cJSON_IsNumber(ml)) s->minimized_later += (uint64_t)ml->valuedouble;
    if (cJSON_IsNumber(ar)) s->aliases_read += (uint64_t)ar->valuedouble;
    if (cJSON_IsNumber(mes)) s->minimize_end_seconds += mes->valuedouble;
    cJSON_Delete(j);
}
