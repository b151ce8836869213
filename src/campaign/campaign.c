/* campaign.c - the campaign loop (see campaign.h).
 *
 * Cases come from the generator, or (30% of the time, once there is something to work
 * from) from mutating or crossing cases kept in a pool: seeds from --corpus, and every
 * case that showed a feature combination not seen before or came closer to its
 * tolerance than before (semantic feedback without coverage instrumentation). Each new
 * signature is written as a bundle at once; repeats only count. With --jobs N, N child
 * processes run with different seeds and the same crashes directory (bundle names are
 * signatures and writes are atomic renames, so two processes finding the same bug leave
 * one bundle); the parent aggregates their stats files once a second. */
#include "attnfuzz/campaign.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/minimize.h"
#include "attnfuzz/rng.h"
#include "fileio.h"

static volatile sig_atomic_t af_campaign_stop;

const char *const af_strategy_names[AF_STRATEGY_COUNT] = {"generator", "grid", "bytes"};
_Static_assert(sizeof(af_strategy_names) / sizeof(af_strategy_names[0]) == AF_STRATEGY_COUNT, "names");

/* Grid point i of the baseline suite: 64 points, then the same points with new seeds. */
static void af_grid_case(af_case *c, uint64_t i, af_rng *r, size_t budget) {
    uint64_t p = i % 64;
    af_case_default(c);
    c->batch = p & 1 ? 2 : 1;
    c->q_heads = c->kv_heads = p & 2 ? 8 : 1;
    c->q_len = c->kv_len = p & 4 ? 128 : 16;
    c->head_dim = c->v_head_dim = 64;
    c->dtype = p & 8 ? AF_F16 : AF_F32;
    c->causal = (p & 32) != 0; /* the unmasked half first, then causal */
    (void)(p & 16);            /* two value draws per pass */
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].seed = af_rng_u32(r);
    af_case_repair(c, budget);
}

static void af_bytes_case(af_case *c, af_rng *r, size_t budget) {
    uint8_t buf[AF_CASE_ENCODED_MAX];
    size_t n = af_rng_below(r, 257);
    for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)af_rng_u32(r);
    af_case_decode(c, buf, n, budget);
}

void af_campaign_interrupt(void) { af_campaign_stop = 1; }
bool af_campaign_interrupted(void) { return af_campaign_stop != 0; }

void af_campaign_opts_default(af_campaign_opts *o) {
    memset(o, 0, sizeof *o);
    af_exec_config_default(&o->exec);
    o->crashes_dir = "crashes";
    o->seed = 1;
    o->jobs = 1;
}

static double af_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void af_campaign_stats_free(af_campaign_stats *s) {
    if (!s) return;
    af_free(s->sigs);
    memset(s, 0, sizeof *s);
}

static af_signature_entry *af_stats_find(af_campaign_stats *s, uint64_t sig) {
    for (size_t i = 0; i < s->n_sigs; i++)
        if (s->sigs[i].signature == sig) return &s->sigs[i];
    return NULL;
}

static af_signature_entry *af_stats_add(af_campaign_stats *s, uint64_t sig, af_kind kind, const char *who,
                                        af_error *err) {
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

af_status af_campaign_stats_write(const af_campaign_stats *s, const af_campaign_opts *o, const char *path,
                                  af_error *err) {
    cJSON *j = cJSON_CreateObject();
    AF_RETURN_ERROR_IF(!j, err, AF_ERR_NOMEM, "out of memory");
    cJSON_AddNumberToObject(j, "execs", (double)s->execs);
    cJSON_AddNumberToObject(j, "elapsed", s->elapsed);
    cJSON_AddNumberToObject(j, "execs_per_sec", s->elapsed > 0 ? (double)s->execs / s->elapsed : 0.0);
    cJSON_AddNumberToObject(j, "findings_total", (double)s->findings_total);
    cJSON_AddNumberToObject(j, "unique_signatures", (double)s->n_sigs);
    cJSON_AddNumberToObject(j, "write_errors", (double)s->write_errors);
    cJSON_AddNumberToObject(j, "minimize_execs", (double)s->minimize_execs);
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
        cJSON_AddItemToArray(sigs, x);
    }
    if (o) {
        cJSON_AddNumberToObject(j, "seed", (double)o->seed);
        cJSON_AddNumberToObject(j, "jobs", o->jobs ? o->jobs : 1);
        cJSON_AddStringToObject(j, "crashes", o->crashes_dir);
        cJSON_AddStringToObject(j, "strategy", af_strategy_names[o->strategy]);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    AF_RETURN_ERROR_IF(!text, err, AF_ERR_NOMEM, "out of memory");
    af_status st = af_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

/* --- raw signature -> minimized signature ---------------------------------------- */

/* Every new raw signature is minimized once; its repeats map straight to the signature
 * of the minimized case. Open addressing, grown at half load. */
typedef struct af_alias_map {
    uint64_t *keys, *vals; /* key 0 = empty (raw signatures are hashes; 0 is remapped) */
    size_t cap, n;
} af_alias_map;

static uint64_t af_alias_key(uint64_t k) { return k ? k : 1; }

static bool af_alias_get(const af_alias_map *m, uint64_t key, uint64_t *val) {
    if (!m->cap) return false;
    key = af_alias_key(key);
    for (size_t i = (size_t)(key % m->cap);; i = (i + 1) % m->cap) {
        if (m->keys[i] == 0) return false;
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return true;
        }
    }
}

static bool af_alias_put(af_alias_map *m, uint64_t key, uint64_t val) {
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1024;
        uint64_t *k = af_calloc(cap, sizeof *k), *v = af_calloc(cap, sizeof *v);
        if (!k || !v) {
            af_free(k);
            af_free(v);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = (size_t)(m->keys[i] % cap);
            while (k[j]) j = (j + 1) % cap;
            k[j] = m->keys[i];
            v[j] = m->vals[i];
        }
        af_free(m->keys);
        af_free(m->vals);
        m->keys = k, m->vals = v, m->cap = cap;
    }
    key = af_alias_key(key);
    size_t i = (size_t)(key % m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) % m->cap;
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return true;
}

/* --- the pool of cases to mutate --------------------------------------------------- */

#define AF_POOL_MAX 512

typedef struct af_pool {
    af_case cases[AF_POOL_MAX];
    size_t n;
    uint64_t seen[4096]; /* open-addressed set of (features, closeness bucket) */
    size_t nseen;
} af_pool;

static bool af_pool_note(af_pool *p, uint64_t key) {
    key |= 1; /* 0 marks an empty slot */
    size_t cap = sizeof p->seen / sizeof p->seen[0];
    if (p->nseen * 4 >= cap * 3) return false;
    size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 52) % cap;
    while (p->seen[i]) {
        if (p->seen[i] == key) return false;
        i = (i + 1) % cap;
    }
    p->seen[i] = key;
    p->nseen++;
    return true;
}

static void af_pool_add(af_pool *p, const af_case *c, af_rng *r) {
    if (p->n < AF_POOL_MAX) {
        p->cases[p->n++] = *c;
    } else {
        p->cases[af_rng_below(r, AF_POOL_MAX)] = *c;
    }
}

static size_t af_read_small_file(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static af_status af_pool_load_corpus(af_pool *p, const char *dir, size_t budget, af_rng *r, af_error *err) {
    DIR *d = opendir(dir);
    AF_RETURN_ERROR_IF(!d, err, AF_ERR_IO, "--corpus %s: %s", dir, strerror(errno));
    struct dirent *e;
    uint8_t buf[4096];
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/%s/input.bin", dir, e->d_name);
        if (S_ISDIR(sb.st_mode) && access(path, R_OK) != 0) continue;
        size_t n = af_read_small_file(path, buf, sizeof buf);
        af_case c;
        af_case_decode(&c, buf, n, budget);
        af_pool_add(p, &c, r);
    }
    closedir(d);
    return AF_OK;
}

/* --- status ------------------------------------------------------------------------ */

static void af_print_status(const af_campaign_stats *s, double elapsed, const char *last, const char *tag) {
    char kinds[256] = "";
    size_t n = 0;
    for (int k = 1; k < AF_KIND_COUNT && n < sizeof kinds; k++) {
        if (!s->unique_by_kind[k]) continue;
        int w = snprintf(kinds + n, sizeof kinds - n, "%s%s %llu", n ? ", " : "", af_kind_names[k],
                         (unsigned long long)s->unique_by_kind[k]);
        if (w > 0) n += (size_t)w;
    }
    fprintf(stderr, "#%llu\t%s execs/s: %.0f\tunique: %zu%s%s%s\telapsed: %.0fs%s%s\n", (unsigned long long)s->execs,
            tag, elapsed > 0 ? (double)s->execs / elapsed : 0.0, s->n_sigs, n ? " (" : "", kinds, n ? ")" : "",
            elapsed, last[0] ? "\tlast: " : "", last);
}

/* --- one process --------------------------------------------------------------------- */

static af_status af_campaign_single(const af_campaign_opts *o, af_campaign_stats *s, bool status, af_error *err) {
    af_exec *x = af_exec_create(&o->exec, err);
    if (!x) return err ? err->code : AF_ERR_INVALID;
    af_pool *pool = af_calloc(1, sizeof *pool);
    if (!pool) {
        af_exec_destroy(x);
        return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    af_rng rng;
    af_rng_init(&rng, o->seed, 0x43414d50u);
    af_alias_map aliases = {0};
    af_status st = AF_OK;
    if (o->corpus_dir) st = af_pool_load_corpus(pool, o->corpus_dir, o->exec.budget, &rng, err);
    double max_flops = o->max_flops > 0 ? o->max_flops : 2e7;
    double start = af_now(), last_status = start, last_stats = start;
    char last[256] = "";
    double last_time = 0;

    while (st == AF_OK && !af_campaign_stop) {
        double now = af_now();
        s->elapsed = now - start;
        if (o->runs && s->execs >= o->runs) break;
        if (o->seconds > 0 && s->elapsed >= o->seconds) break;
        if (o->max_findings && s->n_sigs >= o->max_findings) break;

        af_case c;
        uint32_t pick = af_rng_below(&rng, 10);
        if (o->strategy == AF_STRATEGY_GRID) {
            af_grid_case(&c, s->execs, &rng, o->exec.budget);
        } else if (o->strategy == AF_STRATEGY_BYTES) {
            af_bytes_case(&c, &rng, o->exec.budget);
        } else if (pool->n > 0 && pick < 3) {
            c = pool->cases[af_rng_below(&rng, (uint32_t)pool->n)];
            af_case_mutate(&c, &rng, o->exec.budget);
        } else if (pool->n > 1 && pick == 3) {
            af_case_crossover(&pool->cases[af_rng_below(&rng, (uint32_t)pool->n)],
                              &pool->cases[af_rng_below(&rng, (uint32_t)pool->n)], &c, &rng, o->exec.budget);
        } else {
            af_case_generate(&c, &rng, o->exec.budget, max_flops);
        }
        if (o->strategy == AF_STRATEGY_GENERATOR) af_case_cap_flops(&c, max_flops, o->exec.budget);

        st = af_exec_run_case(x, &c, err);
        if (st != AF_OK) break;
        s->execs++;

        /* feedback: a new feature combination, or a new closeness-to-tolerance bucket */
        double worst = 0.0;
        for (size_t i = 0; i < af_exec_check_count(x); i++)
            if (af_exec_check_ran(x, i) && af_exec_check_result(x, i)->m.worst_ratio > worst)
                worst = af_exec_check_result(x, i)->m.worst_ratio;
        uint64_t bucket = worst > 0 ? (uint64_t)(fmin(log2(worst) + 40.0, 63.0)) : 0;
        if (af_pool_note(pool, af_case_features(&c) * 64 + bucket)) af_pool_add(pool, &c, &rng);

        size_t nf = af_exec_finding_count(x);
        if (nf) s->findings_total++;
        /* the findings and case of this execution: minimizing re-runs the executor */
        af_finding found[AF_EXEC_MAX_CHECKS];
        for (size_t i = 0; i < nf; i++) found[i] = *af_exec_finding(x, i);
        af_case ran = *af_exec_case(x);
        bool x_holds_ran = true;
        for (size_t i = 0; i < nf && st == AF_OK; i++) {
            const af_finding *f = &found[i];
            uint64_t sig = f->signature;
            /* a dead or hung worker is stored as found: each minimizing step could cost a
             * restart or a whole timeout */
            bool raw = o->no_minimize || f->kind == AF_KIND_CRASH || f->kind == AF_KIND_TIMEOUT;
            bool known = raw || af_alias_get(&aliases, f->signature, &sig);
            if (!known) {
                af_case small = ran;
                unsigned spent = 0;
                st = af_minimize(x, f->check, f->kind, &small, o->minimize_execs, &spent, err);
                if (st != AF_OK) break;
                s->minimize_execs += spent;
                x_holds_ran = false;
                const af_finding *fm = af_exec_finding_for(x, f->check);
                sig = fm ? fm->signature : f->signature;
                if (!af_alias_put(&aliases, f->signature, sig)) st = af_error_set(err, AF_ERR_NOMEM, "out of memory");
            }
            af_signature_entry *e = af_stats_find(s, sig);
            if (e) {
                e->count++;
                /* not stored yet (disk full?): try again now and then, space may be back */
                bool retry = !e->bundle[0] && !e->stored_elsewhere && (e->count & (e->count - 1)) == 0;
                if (!retry) continue;
            } else {
                e = af_stats_add(s, sig, f->kind, f->who, err);
                if (!e) {
                    st = AF_ERR_NOMEM;
                    break;
                }
                e->count = 1;
                e->first_exec = s->execs;
                e->first_time = af_now() - start; /* after the execution that found it */
            }
            /* x must hold the execution to store: the minimized case (just run), or the raw one */
            if (raw && !x_holds_ran) {
                st = af_exec_run_case(x, &ran, err);
                x_holds_ran = true;
                if (st != AF_OK) break;
            } else if (known && !x_holds_ran) {
                af_case small = ran; /* a retry of a known signature: store the raw case */
                st = af_exec_run_case(x, &small, err);
                x_holds_ran = true;
                if (st != AF_OK) break;
            }
            size_t fi = SIZE_MAX;
            for (size_t k = 0; k < af_exec_finding_count(x); k++)
                if (af_exec_finding(x, k)->check == f->check) fi = k;
            if (fi == SIZE_MAX) continue; /* cannot happen: the case failed this check */
            af_error werr;
            af_status ws = af_exec_write_bundle_as(x, fi, sig, o->crashes_dir, e->bundle, sizeof e->bundle, &werr);
            if (ws == AF_ERR_EXISTS) {
                e->stored_elsewhere = true;
                af_bundle_name(f->kind, sig, e->bundle, sizeof e->bundle);
            } else if (ws != AF_OK) {
                /* the finding is not lost: its input goes to stderr and to the stats, and
                 * the bundle is written when the signature recurs and the disk has room */
                s->write_errors += e->count == 1;
                e->bundle[0] = 0;
                const uint8_t *bytes;
                size_t nb = af_exec_input(x, &bytes);
                for (size_t k = 0; k < nb && 2 * k + 2 < sizeof e->input_hex; k++)
                    snprintf(e->input_hex + 2 * k, 3, "%02x", bytes[k]);
                if (e->count == 1)
                    fprintf(stderr, "attnfuzz: could not store a %s finding of %s: %s\nattnfuzz: its input (hex): %s\n",
                            af_kind_names[f->kind], f->who, werr.msg, e->input_hex);
            } else if (e->count > 1) {
                s->write_errors--; /* stored on a retry */
            }
            snprintf(last, sizeof last, "%s %s %016llx", af_kind_names[f->kind], f->who, (unsigned long long)sig);
            last_time = s->elapsed;
            if (status && e->count == 1)
                fprintf(stderr, "NEW %s %s -> %s\n", af_kind_names[f->kind], f->who, e->bundle[0] ? e->bundle : "(not stored)");
        }
        if (status && now - last_status >= 1.0) {
            char tail[300];
            snprintf(tail, sizeof tail, last[0] ? "%s %.0fs ago" : "%s", last, s->elapsed - last_time);
            af_print_status(s, s->elapsed, tail, "");
            last_status = now;
        }
        if (!status && o->stats_path && now - last_stats >= 1.0) {
            af_campaign_stats_write(s, o, o->stats_path, NULL); /* progress for the parent */
            last_stats = now;
        }
    }
    s->elapsed = af_now() - start;
    if (status) af_print_status(s, s->elapsed, last, "DONE");
    af_free(pool);
    af_free(aliases.keys);
    af_free(aliases.vals);
    af_exec_destroy(x);
    return st;
}

/* --- several processes ------------------------------------------------------------- */

/* Adds the signatures of a job's stats file into s (counts summed). */
static void af_merge_job(af_campaign_stats *s, const char *path, uint64_t *execs) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char *text = af_malloc(1 << 22);
    size_t n = text ? fread(text, 1, (1 << 22) - 1, f) : 0;
    fclose(f);
    if (!text) return;
    text[n] = 0;
    cJSON *j = cJSON_Parse(text);
    af_free(text);
    if (!j) return;
    const cJSON *e = cJSON_GetObjectItem(j, "execs");
    if (cJSON_IsNumber(e)) *execs += (uint64_t)e->valuedouble;
    const cJSON *sigs = cJSON_GetObjectItem(j, "signatures"), *it;
    cJSON_ArrayForEach(it, sigs) {
        const cJSON *sg = cJSON_GetObjectItem(it, "signature"), *kd = cJSON_GetObjectItem(it, "kind");
        const cJSON *who = cJSON_GetObjectItem(it, "who"), *cnt = cJSON_GetObjectItem(it, "count");
        const cJSON *bun = cJSON_GetObjectItem(it, "bundle");
        if (!cJSON_IsString(sg) || !cJSON_IsString(kd) || !cJSON_IsString(who)) continue;
        uint64_t sig = strtoull(sg->valuestring, NULL, 16);
        int kind = af_kind_from_name(kd->valuestring);
        if (kind < 0) continue;
        af_signature_entry *x = af_stats_find(s, sig);
        if (!x) x = af_stats_add(s, sig, (af_kind)kind, who->valuestring, NULL);
        if (!x) break;
        x->count += cJSON_IsNumber(cnt) ? (uint64_t)cnt->valuedouble : 1;
        if (cJSON_IsString(bun) && !x->bundle[0]) snprintf(x->bundle, sizeof x->bundle, "%s", bun->valuestring);
    }
    const cJSON *we = cJSON_GetObjectItem(j, "write_errors"), *ft = cJSON_GetObjectItem(j, "findings_total");
    if (cJSON_IsNumber(we)) s->write_errors += (uint64_t)we->valuedouble;
    if (cJSON_IsNumber(ft)) s->findings_total += (uint64_t)ft->valuedouble;
    cJSON_Delete(j);
}

static af_status af_campaign_jobs(const af_campaign_opts *o, af_campaign_stats *s, af_error *err) {
    char dir[] = "/tmp/attnfuzz-jobs-XXXXXX";
    AF_RETURN_ERROR_IF(!mkdtemp(dir), err, AF_ERR_IO, "/tmp: cannot create a directory for job stats: %s",
                       strerror(errno));
    unsigned n = o->jobs;
    pid_t pids[256];
    char paths[256][64];
    if (n > 256) n = 256;
    fflush(NULL);
    for (unsigned k = 0; k < n; k++) {
        snprintf(paths[k], sizeof paths[k], "%s/job-%u.json", dir, k);
        pid_t pid = fork();
        if (pid < 0) {
            for (unsigned q = 0; q < k; q++) kill(pids[q], SIGINT);
            return af_error_set(err, AF_ERR_IO, "fork: %s", strerror(errno));
        }
        if (pid == 0) {
            af_campaign_opts co = *o;
            co.jobs = 1;
            co.seed = o->seed + 0x9e3779b9ull * (k + 1);
            co.stats_path = paths[k];
            af_campaign_stats cs;
            memset(&cs, 0, sizeof cs);
            af_error cerr;
            af_status st = af_campaign_single(&co, &cs, false, &cerr);
            if (st != AF_OK) fprintf(stderr, "attnfuzz: job %u: %s\n", k, cerr.msg);
            af_campaign_stats_write(&cs, &co, paths[k], NULL);
            _exit(st == AF_OK ? 0 : 2);
        }
        pids[k] = pid;
    }
    double start = af_now();
    unsigned running = n;
    bool failed = false;
    while (running > 0) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        if (af_campaign_stop)
            for (unsigned k = 0; k < n; k++)
                if (pids[k] > 0) kill(pids[k], SIGINT);
        for (unsigned k = 0; k < n; k++) {
            int wstatus;
            if (pids[k] > 0 && waitpid(pids[k], &wstatus, WNOHANG) == pids[k]) {
                pids[k] = 0;
                running--;
                if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) failed = true;
            }
        }
        af_campaign_stats_free(s);
        uint64_t execs = 0;
        for (unsigned k = 0; k < n; k++) af_merge_job(s, paths[k], &execs);
        s->execs = execs;
        s->elapsed = af_now() - start;
        if (!o->quiet) af_print_status(s, s->elapsed, "", running ? "" : "DONE");
        if (o->max_findings && s->n_sigs >= o->max_findings)
            for (unsigned k = 0; k < n; k++)
                if (pids[k] > 0) kill(pids[k], SIGINT);
    }
    for (unsigned k = 0; k < n; k++) unlink(paths[k]);
    rmdir(dir);
    AF_RETURN_ERROR_IF(failed && s->execs == 0, err, AF_ERR_IO, "every job failed");
    return AF_OK;
}

af_status af_campaign_run(const af_campaign_opts *o, af_campaign_stats *s, af_error *err) {
    memset(s, 0, sizeof *s);
    af_status st = o->jobs > 1 ? af_campaign_jobs(o, s, err) : af_campaign_single(o, s, !o->quiet, err);
    if (o->stats_path) {
        af_error serr;
        if (af_campaign_stats_write(s, o, o->stats_path, &serr) != AF_OK && st == AF_OK) {
            if (err) *err = serr;
            st = serr.code;
        }
    }
    return st;
}
