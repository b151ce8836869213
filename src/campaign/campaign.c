/* campaign.c - the campaign loop (see campaign.h).
 *
 * Cases come from the generator, or (30% of the time, once there is something to work
 * from) from mutating or crossing cases kept in a pool: seeds from --corpus, and every
 * case that showed a feature combination not seen before or came closer to its
 * tolerance than before (semantic feedback without coverage instrumentation). Each new
 * signature is written as a bundle at once; repeats only count. With --jobs N, N child
 * processes run with different seeds and the same crashes directory (bundle names are
 * signatures and writes are atomic renames, so two processes finding the same bug leave
 * one bundle); the parent aggregates their stats files once a second, and restarts a
 * child that dies (campaign.h: AF_JOB_MAX_RESTARTS). Each job is bound to one CPU with its
 * workers (cpu_bind.h) unless --no-bind. */
#include "attnfuzz/campaign.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/case_key.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/store.h"
#include "attnfuzz/rng.h"
#include "cpu_bind.h"
#include "fileio.h"
#include "clock.h"
#include "kept.h"
#include "minrec.h"

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
    o->backward = -1.0;
    o->serving = -1.0;
    o->fp8 = -1.0;
    o->minimize_share = AF_MINIMIZE_SHARE;
    o->minimize_grace = -1.0;
}

/* The share of generated cases that ask for gradients (af_campaign_opts.backward). */
static double af_campaign_backward_share(const af_campaign_opts *o, const af_exec *x) {
    if (o->backward >= 0.0) return o->backward > 1.0 ? 1.0 : o->backward;
    for (size_t k = 0; k < af_exec_backend_count(x); k++)
        if (af_backend_caps(af_exec_backend_at(x, k)) & AF_CAP_BACKWARD) return 1.0 / 3.0;
    return 0.0;
}

/* The serving share: --serving, or AF_SERVING_AUTO when a worker or target declares a
 * serving capability (the built-ins run serving cases when asked with --serving). */
static double af_campaign_serving_share(const af_campaign_opts *o, const af_exec *x) {
    if (o->serving >= 0.0) return o->serving > 1.0 ? 1.0 : o->serving;
    for (size_t k = 0; k < af_exec_backend_count(x); k++) {
        const af_backend *be = af_exec_backend_at(x, k);
        if (af_backend_ext_of(be) && (af_backend_caps(be) & AF_CAP_SERVING)) return AF_SERVING_AUTO;
    }
    return 0.0;
}

/* The FP8 share: --fp8, or AF_FP8_AUTO when a worker or target declares an FP8 format. */
static double af_campaign_fp8_share(const af_campaign_opts *o, const af_exec *x) {
    if (o->fp8 >= 0.0) return o->fp8 > 1.0 ? 1.0 : o->fp8;
    for (size_t k = 0; k < af_exec_backend_count(x); k++) {
        const af_backend *be = af_exec_backend_at(x, k);
        if (af_backend_ext_of(be) && (af_backend_caps(be) & AF_CAP_FP8)) return AF_FP8_AUTO;
    }
    return 0.0;
}

double af_campaign_minimize_grace(const af_campaign_opts *o, double ran) {
    if (o->no_minimize) return 0.0;
    if (o->minimize_grace >= 0) return o->minimize_grace;
    double share = o->minimize_share > 0 && o->minimize_share < 1 ? o->minimize_share : AF_MINIMIZE_SHARE;
    return fmax(AF_MINIMIZE_GRACE_MIN, share * (o->seconds > 0 ? o->seconds : ran));
}

void af_campaign_stats_free(af_campaign_stats *s) {
    if (!s) return;
    af_free(s->sigs);
    af_free(s->known);
    memset(s, 0, sizeof *s);
}

af_status af_campaign_stats_write(const af_campaign_stats *s, const af_campaign_opts *o, const char *path,
                                  af_error *err) {
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
        cJSON_AddNumberToObject(j, "shard", o->shard.index);
        cJSON_AddNumberToObject(j, "shards", o->shard.count);
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

/* --- the pool of cases to mutate --------------------------------------------------- */

#define AF_POOL_MAX 512
#define AF_DRAW_TRIES 64       /* draws per case while no backend would run it */
#define AF_REVALUE_TRIES 4     /* value draws of a batch's structure before a known bug's cuts it short */
#define AF_COMPILE_SHARE 0.5   /* compile time above this share of the wall: reuse structures */

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

/* Seeds from --corpus: raw inputs, or bundle directories (their input.bin). A file that
 * is not a regular file or is over AF_CASE_INPUT_MAX bytes is skipped, unread, with a
 * warning naming it: one odd file does not stop a campaign. */
static af_status af_pool_load_corpus(af_pool *p, const char *dir, size_t budget, af_rng *r, af_error *err) {
    DIR *d = opendir(dir);
    AF_RETURN_ERROR_IF(!d, err, AF_ERR_IO, "--corpus %s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/%s/input.bin", dir, e->d_name);
        if (S_ISDIR(sb.st_mode) && access(path, R_OK) != 0) continue;
        char *buf = NULL;
        size_t n = 0;
        af_error ferr;
        if (af_file_read(path, AF_CASE_INPUT_MAX, &buf, &n, &ferr) != AF_OK) {
            fprintf(stderr, "attnfuzz: --corpus: skipped %s\n", ferr.msg);
            continue;
        }
        af_case c;
        af_case_decode(&c, (const uint8_t *)buf, n, budget);
        af_free(buf);
        af_pool_add(p, &c, r);
    }
    closedir(d);
    return AF_OK;
}

/* --- status ------------------------------------------------------------------------ */

static void af_kinds_text(const af_campaign_stats *s, char *kinds, size_t cap) {
    size_t n = 0;
    kinds[0] = 0;
    for (int k = 1; k < AF_KIND_COUNT && n < cap; k++) {
        if (!s->unique_by_kind[k]) continue;
        int w = snprintf(kinds + n, cap - n, "%s%s %llu", n ? ", " : "", af_kind_names[k],
                         (unsigned long long)s->unique_by_kind[k]);
        if (w > 0) n += (size_t)w;
    }
}

/* "known 37 (jax-xla-masked-rows-mean 20, ...)": hits per known bug, the most first */
static void af_known_text(const af_campaign_stats *s, char *buf, size_t cap) {
    buf[0] = 0;
    if (!s->known_hits) return;
    size_t n = 0;
    int w = snprintf(buf, cap, "known %llu (", (unsigned long long)s->known_hits);
    if (w > 0) n = (size_t)w;
    uint64_t above = UINT64_MAX;
    for (size_t shown = 0; shown < s->n_known && n < cap;) {
        uint64_t best = 0;
        for (size_t i = 0; i < s->n_known; i++)
            if (s->known[i].hits < above && s->known[i].hits > best) best = s->known[i].hits;
        if (!best) break;
        for (size_t i = 0; i < s->n_known && n < cap; i++) {
            if (s->known[i].hits != best) continue;
            w = snprintf(buf + n, cap - n, "%s%s %llu", shown ? ", " : "", s->known[i].id,
                         (unsigned long long)s->known[i].hits);
            if (w > 0) n += (size_t)w;
            shown++;
        }
        above = best;
    }
    if (n < cap) snprintf(buf + n, cap - n, ")");
}

static void af_clock_text(double t, char *buf, size_t cap) {
    unsigned long v = t > 0 ? (unsigned long)t : 0;
    if (v >= 3600)
        snprintf(buf, cap, "%lu:%02lu:%02lu", v / 3600, v / 60 % 60, v % 60);
    else
        snprintf(buf, cap, "%lu:%02lu", v / 60, v % 60);
}

/* Progress. For logs (stderr not a terminal) one libFuzzer-like line per call:
 *   #1234  execs/s: 410  unique: 2 (diverge 2)  elapsed: 3s  last: ...
 * On a terminal one line rewritten in place (cut to the terminal's width so it never
 * wraps), a newline only with "DONE":
 *   0:42/1:00  410 execs/s  compile 0%  2 findings (diverge 2)  last: ...
 * ("DONE 1:00/1:00 ..." at the end, then a newline; "-" for the total without --time).
 * The compile share is the time targets spent compiling (compile_seconds, summed over
 * jobs) over the time the jobs ran. */
static void af_print_status(const af_campaign_stats *s, const af_campaign_opts *o, const char *last, const char *tag,
                            bool tty) {
    char kinds[256], known[512];
    af_kinds_text(s, kinds, sizeof kinds);
    af_known_text(s, known, sizeof known);
    double elapsed = s->elapsed, rate = elapsed > 0 ? (double)s->execs / elapsed : 0.0;
    char died[64] = "";
    if (s->jobs_died)
        snprintf(died, sizeof died, "%sjobs died: %llu%s", tty ? "  " : "\t", (unsigned long long)s->jobs_died,
                 s->jobs_kept_dying ? " (kept dying)" : "");
    if (!tty) {
        fprintf(stderr, "#%llu\t%s execs/s: %.0f\tunique: %zu%s%s%s%s%s\telapsed: %.0fs%s%s%s\n",
                (unsigned long long)s->execs, tag, rate, s->n_sigs, kinds[0] ? " (" : "", kinds, kinds[0] ? ")" : "",
                known[0] ? "\t" : "", known, elapsed, died, last[0] ? "\tlast: " : "", last);
        return;
    }
    char now[32], total[32] = "-", line[1024];
    af_clock_text(elapsed, now, sizeof now);
    if (o->seconds > 0) af_clock_text(o->seconds, total, sizeof total);
    unsigned jobs = o->jobs > 1 ? o->jobs : 1;
    double share = elapsed > 0 ? 100.0 * s->compile_seconds / (elapsed * jobs) : 0.0;
    int n = snprintf(line, sizeof line, "%s%s%s/%s  %.0f execs/s  compile %.0f%%  %zu finding%s%s%s%s%s%s%s%s%s", tag,
                     tag[0] ? " " : "", now, total, rate, share, s->n_sigs, s->n_sigs == 1 ? "" : "s",
                     kinds[0] ? " (" : "", kinds, kinds[0] ? ")" : "", known[0] ? "  " : "", known, died,
                     last[0] ? "  last: " : "", last);
    struct winsize ws;
    size_t width = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? (size_t)ws.ws_col - 1 : 79;
    if (n > 0 && (size_t)n > width && width < sizeof line) line[width] = 0;
    fprintf(stderr, "\r\033[K%s%s", line, tag[0] ? "\n" : "");
    fflush(stderr);
}

/* --- one process --------------------------------------------------------------------- */

/* Every dimension 1 (--tiny): the cost of a case is then the pipeline's and the
 * backends' own overhead. */
static void af_case_tiny(af_case *c, size_t budget) {
    c->batch = c->q_heads = c->kv_heads = c->q_len = c->kv_len = c->head_dim = c->v_head_dim = 1;
    af_case_repair(c, budget);
}

/* --- known bugs: fewer of their trigger cases to a backend that keeps hitting them ---- */

/* A backend that hit known bug e h times is sent a case that triggers e (its `when`) with
 * probability 1 - AF_KNOWN_SKIP_MAX * h / (h + AF_KNOWN_SKIP_HALF): after a few hits only
 * about a tenth of such cases still reach it, so a known bug costs a bounded share of the
 * executions, and a new bug among the same features is still found (more slowly). The
 * draw is a hash of the case's seeds, so the same case is always treated alike. */
#define AF_KNOWN_SKIP_MAX 0.9
#define AF_KNOWN_SKIP_HALF 8.0
/* A known bug that crashes or hangs its worker costs a restart per hit (a new process; on a
 * GPU a new CUDA context, and spares used up by a burst of them cost seconds) where another
 * costs a case: a share of its trigger cases is no bound when thousands run a second. A
 * backend is sent at most one of its trigger cases per AF_KNOWN_FAULT_GAP seconds, hit or
 * not, the first after one gap (the corpus's seeds too): the spares a first fault starts
 * are then ready for the next, and a fault costs milliseconds. */
#define AF_KNOWN_FAULT_GAP 60.0 /* the default of --known-fault-gap */

/* Per known crash or timeout bug and backend: when the next trigger case may go through. */
typedef struct af_known_gate {
    size_t nk;
    double gap;
    double *next; /* [e * AF_EXEC_MAX_BACKENDS + k]; a negative value: e is no fault bug of k */
} af_known_gate;

static af_status af_known_gate_init(af_known_gate *g, const af_known *known, const af_exec *x, double gap,
                                    af_error *err) {
    g->nk = af_known_count(known);
    g->next = NULL;
    g->gap = gap > 0 ? gap : AF_KNOWN_FAULT_GAP;
    double first = af_now() + g->gap;
    if (!g->nk) return AF_OK;
    g->next = af_calloc(g->nk * AF_EXEC_MAX_BACKENDS, sizeof *g->next);
    AF_RETURN_ERROR_IF(!g->next, err, AF_ERR_NOMEM, "out of memory");
    for (size_t e = 0; e < g->nk; e++) {
        af_known_info info;
        af_known_info_of(known, e, &info);
        bool fault = info.kinds & (1u << AF_KIND_CRASH | 1u << AF_KIND_TIMEOUT);
        for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++)
            g->next[e * AF_EXEC_MAX_BACKENDS + k] =
                fault && k < af_exec_backend_count(x) &&
                        af_known_applies(known, e, af_backend_name(af_exec_backend_at(x, k)))
                    ? first
                    : -1.0;
    }
    return AF_OK;
}

static uint64_t af_known_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The backends case c should skip (bit k: af_exec_backend_at(x, k)), and for each the
 * entry it skips for (why[k]); 0 when no known bug was hit yet and no fault bug's gate is
 * closed. A fault bug's trigger case let through closes its gate for a gap. */
static uint32_t af_campaign_known_skip(const af_campaign_opts *o, const af_store *store, const af_exec *x,
                                       af_known_gate *gate, const af_case *c, size_t why[AF_EXEC_MAX_BACKENDS]) {
    size_t nk = af_known_count(o->known), nbe = af_exec_backend_count(x);
    if (!nk || !store) return 0;
    af_known_vars vars;
    bool have = false;
    uint32_t mask = 0;
    double now = -1.0;
    uint64_t seeds = (uint64_t)c->t[AF_Q].seed ^ (uint64_t)c->t[AF_K].seed << 21 ^ (uint64_t)c->t[AF_V].seed << 42;
    for (size_t k = 0; k < nbe && k < AF_EXEC_MAX_BACKENDS; k++) {
        for (size_t e = 0; e < nk; e++) {
            double *next = gate && gate->next && e < gate->nk ? &gate->next[e * AF_EXEC_MAX_BACKENDS + k] : NULL;
            bool fault = next && *next >= 0.0;
            double h = (double)af_store_known_hits(store, e, k); /* nonzero only where e applies to k */
            if (h == 0.0 && !fault) continue;
            if (!have) {
                af_known_vars_of_case(&vars, c);
                have = true;
            }
            if (!af_known_when(o->known, e, &vars)) continue;
            bool skip;
            if (fault) {
                if (now < 0.0) now = af_now();
                skip = now < *next;
                if (!skip) *next = now + gate->gap;
            } else {
                double p = AF_KNOWN_SKIP_MAX * h / (h + AF_KNOWN_SKIP_HALF);
                uint64_t u = af_known_mix(seeds ^ af_known_mix(e * 0x9e3779b97f4a7c15ull + k + 1));
                skip = (double)(u >> 11) * 0x1p-53 < p;
            }
            if (skip) {
                mask |= 1u << k;
                why[k] = e;
                break;
            }
        }
    }
    return mask;
}

/* Counts the backend runs of mask as skipped for their known bugs. */
static void af_campaign_known_count(const af_campaign_opts *o, af_campaign_stats *s, uint32_t mask,
                                    const size_t why[AF_EXEC_MAX_BACKENDS]) {
    for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++) {
        if (!(mask >> k & 1u)) continue;
        af_known_info info;
        af_known_info_of(o->known, why[k], &info);
        af_known_stat *ks = af_store_known_stat(s, info.id);
        if (ks) ks->skipped++;
        s->known_skipped++;
    }
}

/* Would c run on some backend that mask leaves in? */
static bool af_campaign_runs_unskipped(const af_exec *x, const af_case *c, uint32_t mask) {
    for (size_t k = 0; k < af_exec_backend_count(x); k++)
        if (!(mask >> k & 1u) && af_backend_supports(af_exec_backend_at(x, k), c, NULL, 0)) return true;
    return false;
}

/* The next case of the strategy. The generator's draws are redrawn (up to
 * AF_DRAW_TRIES times) while no backend would run them: a target that declares few
 * capabilities, or refused a feature often enough to have learned it (worker.h), gets
 * cases it runs instead of skipped ones; so does one that keeps hitting a known bug
 * (*skip: the backends this case leaves out for theirs). */
static void af_campaign_draw(const af_campaign_opts *o, af_pool *pool, uint64_t n, af_rng *rng, const af_exec *x,
                             const af_store *store, af_known_gate *gate, af_campaign_stats *s, double max_flops,
                             double backward, double serving, af_case *c, uint32_t *skip) {
    *skip = 0;
    for (int tries = 0;; tries++) {
        uint32_t pick = af_rng_below(rng, 10);
        if (o->strategy == AF_STRATEGY_GRID) {
            af_grid_case(c, n, rng, o->exec.budget);
        } else if (o->strategy == AF_STRATEGY_BYTES) {
            af_bytes_case(c, rng, o->exec.budget);
        } else if (pool->n > 0 && pick < 3) {
            *c = pool->cases[af_rng_below(rng, (uint32_t)pool->n)];
            af_case_mutate(c, rng, o->exec.budget);
        } else if (pool->n > 1 && pick == 3) {
            af_case_crossover(&pool->cases[af_rng_below(rng, (uint32_t)pool->n)],
                              &pool->cases[af_rng_below(rng, (uint32_t)pool->n)], c, rng, o->exec.budget);
        } else {
            af_gen_opts go = {o->exec.budget, max_flops, backward, serving, af_campaign_fp8_share(o, x)};
            af_case_generate_opts(c, rng, &go);
        }
        if (backward <= 0.0 && c->bwd.grads) { /* forward-only campaign */
            c->bwd.grads = 0;
            af_case_repair(c, o->exec.budget);
        }
        if (o->strategy != AF_STRATEGY_GENERATOR) break;
        af_case_cap_flops(c, max_flops, o->exec.budget);
        if (o->tiny) af_case_tiny(c, o->exec.budget);
        if (tries + 1 >= AF_DRAW_TRIES) break;
        if (!af_exec_would_run(x, c)) continue;
        size_t why[AF_EXEC_MAX_BACKENDS];
        uint32_t mask = af_campaign_known_skip(o, store, x, gate, c, why);
        af_campaign_known_count(o, s, mask, why);
        if (!mask || af_campaign_runs_unskipped(x, c, mask)) {
            *skip = mask;
            break;
        }
    }
}

/* The executor's time split and its workers' restarts, into this process's stats. */
static void af_campaign_note_timing(af_campaign_stats *s, const af_exec *x) {
    const af_exec_timing *t = af_exec_timing_of(x);
    s->generate_seconds = t->generate_s;
    s->reference_seconds = t->reference_s;
    s->backend_seconds = t->backends_s;
    s->target_seconds = t->target_s;
    s->check_seconds = t->checks_s;
    s->restart_seconds = 0;
    s->worker_restarts = 0;
    for (size_t k = 0; k < af_exec_backend_count(x); k++) {
        const af_backend_ext *e = af_backend_ext_of(af_exec_backend_at(x, k));
        if (!e) continue;
        s->restart_seconds += e->restart_s;
        s->worker_restarts += e->restarts;
    }
}

static af_status af_campaign_single(const af_campaign_opts *o, af_campaign_stats *s, bool status, af_error *err) {
    af_exec *x = af_exec_create(&o->exec, err);
    if (!x) return err ? err->code : AF_ERR_INVALID;
    af_pool *pool = af_calloc(1, sizeof *pool);
    if (!pool) {
        af_exec_destroy(x);
        return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    af_rng rng;
    af_rng_init(&rng, o->seed, af_shard_stream(&o->shard)); /* disjoint across shards (shard.h) */
    af_store_opts so = {.crashes_dir = o->crashes_dir, .no_minimize = o->no_minimize,
                         .minimize_execs = o->minimize_execs, .minimize_share = o->minimize_share,
                         .deadline = o->seconds > 0 ? af_now() + o->seconds : 0, .known = o->known};
    af_store *store = af_store_create(&so, err);
    af_status st = store ? AF_OK : AF_ERR_NOMEM;
    if (st == AF_OK && o->corpus_dir) st = af_pool_load_corpus(pool, o->corpus_dir, o->exec.budget, &rng, err);
    af_known_gate gate = {0, 0.0, NULL};
    if (st == AF_OK) st = af_known_gate_init(&gate, o->known, x, o->known_fault_gap, err);
    /* the seeds run once as they are before any is mutated (as libFuzzer and AFL++ run
     * their input corpus first): a seed that fails fails at once, a bundle kept as a seed
     * is checked again. Where a backend compiles, each seed is a structure to compile (a
     * corpus of 8 bundles took 117 s of torch.compile), so a seed waits while compiling is
     * over its share, as any new structure does: the seeds spread over the first minutes
     * and value draws of the structures compiled run between them */
    size_t seeds = pool->n, seeds_run = 0;
    double max_flops = o->max_flops > 0 ? o->max_flops : 2e7;
    double backward = af_campaign_backward_share(o, x);
    double serving = af_campaign_serving_share(o, x);
    double start = af_now(), last_status = start, last_stats = start;
    bool new_sig = false; /* a signature not yet in the stats file a --jobs parent reads */
    char last[256] = "";
    double last_time = 0;
    bool tty = status && isatty(STDERR_FILENO);
    /* compile-aware scheduling: while the backends' compiling takes more than
     * AF_COMPILE_SHARE of this process's time, the next batch keeps the structure (the
     * fields of the compile key) of one of the last that compiled and draws new values */
    uint32_t key = af_exec_compile_key(x);
    af_kept *kept = af_calloc(1, sizeof *kept);
    double compiled = 0.0; /* seconds, this process */

    /* batches: as many cases as every batching worker takes and --batch asks, within
     * batch_bytes of tensors; the cases of a batch share a compile key when some backend
     * compiles (a compiled structure then serves the whole batch) */
    size_t bmax = o->batch > 1 ? o->batch : 1;
    if (bmax > AF_EXEC_MAX_BATCH) bmax = AF_EXEC_MAX_BATCH;
    if (bmax > 1 && af_exec_batch_max(x) < bmax) bmax = af_exec_batch_max(x);
    size_t bbytes = o->batch_bytes ? o->batch_bytes : (size_t)256 << 20;
    /* pipelined batches (exec.h): the workers compute one batch while this process checks
     * and stores the one before and draws and generates the next; two case arrays, the
     * batch in flight's and the next one's */
    bool pipe = bmax > 1 && !o->no_pipeline && af_exec_checks_parallel(x);
    af_case *batch[2] = {af_calloc(bmax, sizeof(af_case)), af_calloc(bmax, sizeof(af_case))};
    bool seeded[2][AF_EXEC_MAX_BATCH]; /* per case of each bank: a seed (already in the pool) */
    size_t flying = 0, fly = 0; /* the batch in flight: its cases, batch[fly][0 .. flying) */
    uint32_t skips[AF_EXEC_MAX_BATCH]; /* per case: the backends left out for their known bugs */
    if (!batch[0] || !batch[1] || !kept) st = af_error_set(err, AF_ERR_NOMEM, "out of memory");

    while (st == AF_OK) {
        double now = af_now();
        s->elapsed = now - start;
        bool stop = af_campaign_stop || (o->runs && s->execs + flying >= o->runs) ||
                    (o->seconds > 0 && s->elapsed >= o->seconds) || (o->max_findings && s->n_sigs >= o->max_findings);
        if (stop && !flying) break;

        af_case *cases = batch[fly ^ 1];
        bool reuse = key && kept->n > 0 && compiled > AF_COMPILE_SHARE * s->elapsed;
        /* the batch's kind drawn with the backward share; with no kept structure of that
         * kind, a new structure of it (kept.h says why) */
        const af_case *structure = NULL;
        double share = backward;
        if (reuse) {
            bool grads = backward > 0.0 && af_rng_uniform(&rng) < backward;
            structure = af_kept_pick(kept, &rng, grads);
            reuse = structure != NULL;
            if (!reuse) share = grads ? 1.0 : 0.0;
        }
        size_t n = 0, bytes = 0;
        while (!stop && n < bmax && !(o->runs && s->execs + flying + n >= o->runs)) {
            af_case c;
            uint32_t skip = 0;
            bool seed = seeds_run < seeds && !reuse;
            if (seed) {
                c = pool->cases[seeds_run++];
                size_t why[AF_EXEC_MAX_BACKENDS];
                skip = af_campaign_known_skip(o, store, x, &gate, &c, why);
                af_campaign_known_count(o, s, skip, why);
            } else if (reuse || (n > 0 && key)) {
                /* a new value draw of a compiled structure (the batch's first case's); a draw
                 * that every backend leaves out for a known bug is drawn again a few times
                 * (the bug may need the values it drew), so that the batch is not cut short:
                 * each batch costs a round trip and, for cuDNN, a plan */
                size_t why[AF_EXEC_MAX_BACKENDS];
                for (int tries = 0; tries < AF_REVALUE_TRIES; tries++) {
                    c = n == 0 ? *structure : cases[0];
                    af_case_revalue(&c, &rng, key, o->exec.budget);
                    skip = af_campaign_known_skip(o, store, x, &gate, &c, why);
                    if (!skip || af_campaign_runs_unskipped(x, &c, skip)) break;
                }
                af_campaign_known_count(o, s, skip, why);
                if (skip && !af_campaign_runs_unskipped(x, &c, skip)) { /* the structure of a known bug */
                    af_kept_drop(kept, af_case_key_hash(&c, key));
                    reuse = false;
                    if (n > 0) break; /* the next batch draws anew */
                    af_campaign_draw(o, pool, s->execs + flying, &rng, x, store, &gate, s, max_flops, share, serving,
                                     &c, &skip);
                }
            } else {
                af_campaign_draw(o, pool, s->execs + flying + n, &rng, x, store, &gate, s, max_flops, share, serving,
                                 &c, &skip);
            }
            size_t cb = af_case_tensor_bytes(&c);
            if (n > 0 && (bytes + cb > bbytes || (seed && key && af_case_key_hash(&c, key) !=
                                                                      af_case_key_hash(&cases[0], key)))) {
                if (seed) seeds_run--; /* the next batch runs it */
                break;
            }
            skips[n] = skip;
            seeded[fly ^ 1][n] = seed;
            cases[n++] = c;
            bytes += cb;
        }
        if (pipe) {
            /* the batch in flight collected, this one sent, then the one collected checked
             * and stored below while the workers compute this one */
            st = af_exec_batch_collect(x, err);
            if (st == AF_OK && n) st = af_exec_batch_send(x, cases, skips, n, o->threads, err);
            if (st == AF_OK && flying) st = af_exec_batch_check(x, o->threads, err);
            size_t done = flying;
            flying = n;
            fly ^= 1;
            cases = batch[fly ^ 1]; /* the batch to store: the one checked */
            n = done;
        } else {
            st = n == 1 ? (af_exec_skip_next(x, skips[0]), af_exec_run_case(x, &cases[0], err))
                        : af_exec_run_batch(x, cases, skips, n, o->threads, err);
        }
        if (st != AF_OK) break;
        s->batches += n > 0;
        s->seeds = seeds;
        s->seeds_run = seeds_run;

        for (size_t bi = 0; bi < n && st == AF_OK; bi++) {
            const af_case *cp = &cases[bi];
            if (n > 1 || pipe) af_exec_select(x, bi, NULL);
            s->execs++;
            s->backward_execs += cp->bwd.grads != 0;
            s->grads_unjudged = af_exec_grads_unjudged(x);
            double cs = af_exec_compile_seconds(x);
            compiled += cs;
            s->compile_seconds += cs;
            /* one pass over the checks: did any run, and did any crash, hang or fail (an
             * error: its build, most often)? A structure refused after all, or one that
             * faulted, is not kept for more value draws: each would cost a restart or a failed
             * compile again for a signature already counted (an H100 campaign kept one whose
             * every draw crashed; a CPU one drew a target's failing structure 519 times) */
            bool ran = false, faulted = false;
            for (size_t i = 0; i < af_exec_check_count(x); i++) {
                if (!af_exec_check_ran(x, i)) continue;
                af_kind k = af_exec_check_result(x, i)->kind;
                ran = true;
                faulted |= k == AF_KIND_CRASH || k == AF_KIND_TIMEOUT || k == AF_KIND_ERROR;
            }
            s->skipped += !ran;
            if (key && (cs > 0 || !ran || faulted)) {
                uint64_t hash = af_case_key_hash(cp, key);
                if (cs > 0) af_kept_add(kept, cp, hash);
                if (!ran || faulted) af_kept_drop(kept, hash);
            }

            /* feedback: a new feature combination, or a new closeness-to-tolerance bucket */
            double worst = 0.0;
            for (size_t i = 0; i < af_exec_check_count(x); i++)
                if (af_exec_check_ran(x, i) && af_exec_check_result(x, i)->m.worst_ratio > worst)
                    worst = af_exec_check_result(x, i)->m.worst_ratio;
            uint64_t bucket = worst > 0 ? (uint64_t)(fmin(log2(worst) + 40.0, 63.0)) : 0;
            /* a seed is in the pool already; a full pool replaces a random case, which must
             * not be a seed still to run */
            if (!seeded[fly ^ 1][bi] && (seeds_run >= seeds || pool->n < AF_POOL_MAX) &&
                af_pool_note(pool, af_case_features(cp) * 64 + bucket))
                af_pool_add(pool, cp, &rng);

            size_t nf = af_exec_finding_count(x);
            if (nf) s->findings_total++;
            af_store_event ev[AF_EXEC_MAX_CHECKS];
            size_t nev = 0;
            st = af_store_findings(store, x, s, af_now() - start, ev, &nev, err);
            for (size_t i = 0; i < nev; i++) {
                if (ev[i].known >= 0) { /* a known bug: counted against its entry (s->known) */
                    const af_known_stat *k = &s->known[ev[i].entry];
                    if (!ev[i].first) continue;
                    snprintf(last, sizeof last, "known %s", k->id);
                    last_time = s->elapsed;
                    new_sig = true;
                    if (status) {
                        if (tty) fputs("\r\033[K", stderr);
                        fprintf(stderr, "KNOWN %s -> %s\n", k->id, k->bundle[0] ? k->bundle : "(counted)");
                    }
                    continue;
                }
                const af_signature_entry *e = &s->sigs[ev[i].entry];
                if (!ev[i].first && !ev[i].stored && !ev[i].failed) continue; /* a repeat: counted */
                snprintf(last, sizeof last, "%s %s %016llx", af_kind_names[e->kind], e->who,
                         (unsigned long long)e->signature);
                last_time = s->elapsed;
                new_sig |= ev[i].first;
                if (status && ev[i].first) {
                    if (tty) fputs("\r\033[K", stderr); /* over the updating line */
                    fprintf(stderr, "NEW %s %s -> %s%s\n", af_kind_names[e->kind], e->who,
                            e->bundle[0] ? e->bundle : "(not stored)",
                            ev[i].unminimized && e->bundle[0] ? " (as found: minimized later)" : "");
                }
            }
        }
        af_campaign_note_timing(s, x);
        if (status && now - last_status >= 1.0) {
            char tail[300];
            snprintf(tail, sizeof tail, last[0] ? "%s %.0fs ago" : "%s", last, s->elapsed - last_time);
            af_print_status(s, o, tail, "", tty);
            last_status = now;
        }
        /* progress for a --jobs parent or a merge of shards (attnfuzz merge), and at once
         * after a new finding: a child killed next (the OOM killer) still has it counted */
        if (o->stats_path && (now - last_stats >= 1.0 || new_sig)) {
            new_sig = false;
            af_campaign_stats_write(s, o, o->stats_path, NULL); /* progress, not finished */
            last_stats = now;
        }
    }
    af_free(batch[0]);
    af_free(batch[1]);
    af_free(kept);
    af_free(gate.next);
    s->elapsed = af_now() - start;
    /* the end-of-campaign pass: what did not fit the minimization budget, within a grace
     * period (a stop or an error skips it: those findings stay stored as found) */
    if (st == AF_OK && store && af_store_queued(store) > 0 && !af_campaign_stop) {
        double grace = af_campaign_minimize_grace(o, s->elapsed);
        if (status && grace > 0)
            fprintf(stderr, "%sminimizing %zu finding%s stored as found (at most %.0fs)\n", tty ? "\r\033[K" : "",
                    af_store_queued(store), af_store_queued(store) == 1 ? "" : "s", grace);
        if (grace > 0) st = af_store_finish(store, x, s, af_now() + grace, err);
    }
    if (status) af_print_status(s, o, last, "DONE", tty);
    af_free(pool);
    af_store_destroy(store);
    af_exec_destroy(x);
    return st;
}

/* --- several processes ------------------------------------------------------------- */

/* Adds the signatures of a job's stats file into s (counts summed) and its executions to
 * *execs. A file not written yet (or being replaced) adds nothing. */
static void af_merge_job(af_campaign_stats *s, const char *path, uint64_t *execs, bool current) {
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
        af_signature_entry *x = af_store_find(s, sig);
        bool fresh = !x;
        if (!x) x = af_store_add(s, sig, (af_kind)kind, who->valuestring, NULL);
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
    static const char *const tnames[] = {"generate", "reference", "backends", "target", "checks", "restarts"};
    double *tvals[] = {&s->generate_seconds, &s->reference_seconds, &s->backend_seconds, &s->target_seconds,
                       &s->check_seconds, &s->restart_seconds};
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
        af_known_stat *k = af_store_known_stat(s, id->valuestring);
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

/* One slot of --jobs: its current child and the stats files of every child it had. */
typedef struct af_job {
    pid_t pid;          /* 0 when none runs */
    unsigned gen;       /* children started in this slot so far, minus one */
    double started;     /* when the current child started */
    uint64_t execs_before; /* executions of its earlier children (a --runs budget is per slot) */
    bool gave_up;
    int cpu;            /* the CPU its children are bound to, -1 for none */
} af_job;

#define AF_JOBS_MAX 256

static void af_job_path(char *buf, size_t len, const char *dir, unsigned k, unsigned gen) {
    snprintf(buf, len, "%s/job-%u-%u.json", dir, k, gen);
}

/* Starts the child of slot k (generation job->gen). Its seed stream is new for every
 * generation: a restarted child does not replay what killed the last one; the slots and
 * generations of one shard never share a stream (shard.h). */
static af_status af_job_start(const af_campaign_opts *o, const char *dir, unsigned k, af_job *job, double start,
                              int bind_lock, af_error *err) {
    af_campaign_opts co = *o;
    co.jobs = 1;
    co.seed = af_shard_job_seed(o->seed, k + 1, job->gen);
    if (o->seconds > 0) co.seconds = fmax(o->seconds - (af_now() - start), 1e-3); /* 0 would be no limit */
    /* the campaign's end pass, not one computed from the time left */
    if (o->seconds > 0) co.minimize_grace = af_campaign_minimize_grace(o, o->seconds);
    if (o->runs) co.runs = o->runs - job->execs_before;
    char path[512];
    af_job_path(path, sizeof path, dir, k, job->gen);
    fflush(NULL);
    pid_t pid = fork();
    AF_RETURN_ERROR_IF(pid < 0, err, AF_ERR_IO, "fork: %s", strerror(errno));
    if (pid == 0) {
        af_cpu_bind_unlock(bind_lock); /* the parent's: a child holding it would hold the lock */
        af_cpu_bind(0, job->cpu);       /* before any worker starts (the parent does it too) */
        co.stats_path = path;
        af_campaign_stats cs;
        memset(&cs, 0, sizeof cs);
        af_error cerr;
        af_status st = af_campaign_single(&co, &cs, false, &cerr);
        if (st != AF_OK) fprintf(stderr, "attnfuzz: job %u: %s\n", k, cerr.msg);
        af_campaign_stats_write(&cs, &co, path, NULL);
        _exit(st == AF_OK ? 0 : 2);
    }
    af_cpu_bind(pid, job->cpu); /* seen in /proc before the binding lock is let go */
    job->pid = pid;
    job->started = af_now();
    return AF_OK;
}

/* Removes the job stats directory and what is in it (stats files, a temporary file a
 * killed child left). */
static void af_jobs_cleanup(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

/* A dead child's stats are its last checkpoint (once a second): a finding it minimized
 * after that is listed as found, its bundle already moved to <crashes>/.raw/. The shared
 * record knows what it became: such an entry is folded into its minimized signature's, as
 * the child would have done. */
static void af_jobs_reconcile(af_campaign_stats *s, const char *crashes_dir) {
    af_minrec *rec = NULL;
    for (size_t i = 0; i < s->n_sigs;) {
        af_signature_entry *e = &s->sigs[i];
        struct stat sb;
        af_minrec_alias a;
        if (!e->unminimized || !e->bundle[0] || e->stored_elsewhere || stat(e->bundle, &sb) == 0) {
            i++;
            continue;
        }
        if (!rec && !(rec = af_minrec_open(crashes_dir))) break;
        if (af_minrec_lookup(rec, e->signature, &a) != AF_MINREC_ALIAS || a.sig == e->signature) {
            i++;
            continue;
        }
        char who[sizeof e->who];
        snprintf(who, sizeof who, "%s", e->who);
        af_signature_entry *to = af_store_merge(s, e->signature, a.sig, a.kind, who);
        if (!to) break;
        to->unminimized = false;
        if (!to->bundle[0]) {
            char name[64];
            af_bundle_name(a.kind, a.sig, name, sizeof name);
            snprintf(to->bundle, sizeof to->bundle, "%s/%s", crashes_dir, name);
        } /* entry i is now another one (or the renamed one, minimized): looked at again */
    }
    af_minrec_close(rec);
}

/* Sums the stats files of every child so far into s (deaths are the parent's own), and
 * notes per slot the executions of its earlier children. */
static void af_jobs_merge(af_campaign_stats *s, const char *dir, af_job *jobs, unsigned n, const char *crashes_dir) {
    af_campaign_stats keep = *s; /* the supervision fields survive the rebuild */
    af_campaign_stats_free(s);
    uint64_t execs = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t before = 0;
        for (unsigned g = 0; g <= jobs[k].gen; g++) {
            char path[512];
            af_job_path(path, sizeof path, dir, k, g);
            uint64_t e = 0;
            af_merge_job(s, path, &e, g == jobs[k].gen);
            execs += e;
            if (g < jobs[k].gen) before += e;
        }
        jobs[k].execs_before = before;
    }
    s->execs = execs;
    s->jobs_died = keep.jobs_died;
    s->jobs_restarted = keep.jobs_restarted;
    s->jobs_kept_dying = keep.jobs_kept_dying;
    s->started_at = keep.started_at;
    memcpy(s->deaths, keep.deaths, sizeof s->deaths);
    if (s->jobs_died && crashes_dir) af_jobs_reconcile(s, crashes_dir);
}

static af_status af_campaign_jobs(const af_campaign_opts *o, af_campaign_stats *s, af_error *err) {
    char dir[] = "/tmp/attnfuzz-jobs-XXXXXX";
    AF_RETURN_ERROR_IF(!mkdtemp(dir), err, AF_ERR_IO, "/tmp: cannot create a directory for job stats: %s",
                       strerror(errno));
    unsigned n = o->jobs > AF_JOBS_MAX ? AF_JOBS_MAX : o->jobs;
    af_job jobs[AF_JOBS_MAX];
    memset(jobs, 0, sizeof jobs);
    int cpus[AF_JOBS_MAX];
    int lock = o->no_bind ? -1 : af_cpu_bind_lock();
    size_t ncpu = o->no_bind ? 0 : af_cpu_bind_choose(cpus, AF_JOBS_MAX);
    for (unsigned k = 0; k < n; k++) jobs[k].cpu = ncpu ? cpus[k % ncpu] : -1;
    double start = af_now();
    for (unsigned k = 0; k < n; k++) {
        af_status st = af_job_start(o, dir, k, &jobs[k], start, lock, err);
        if (st != AF_OK) {
            for (unsigned q = 0; q < k; q++) kill(jobs[q].pid, SIGINT);
            for (unsigned q = 0; q < k; q++) waitpid(jobs[q].pid, NULL, 0);
            af_cpu_bind_unlock(lock);
            af_jobs_cleanup(dir);
            return st;
        }
    }
    af_cpu_bind_unlock(lock); /* every child is bound, visibly to other campaigns */
    bool tty = !o->quiet && isatty(STDERR_FILENO);
    /* past --time, each job minimizes what it queued within this grace (store.h) */
    double grace = o->seconds > 0 ? af_campaign_minimize_grace(o, o->seconds) : 0.0;
    unsigned running = n;
    bool failed = false, stopping = false, stop_sent = false, kill_sent = false;
    af_status status = AF_OK;
    double last_status = start;
    while (running > 0) {
        /* a tenth of a second: a child's death is seen (and timed) within that; the stats
         * files are merged and the status printed once a second */
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        double now = af_now();
        /* no restarts once the campaign is ending: stopped, out of time or findings */
        stopping |= af_campaign_stop || (o->seconds > 0 && now - start >= o->seconds) ||
                    (o->max_findings && s->n_sigs >= o->max_findings);
        /* a child past the time limit (a long compile or hung worker in flight) is asked to
         * stop, then killed: its findings are on disk as found (bundles are atomic) */
        double late = o->seconds > 0 ? now - start - o->seconds - grace : -1.0;
        if ((af_campaign_stop || late >= AF_JOB_LATE_STOP) && !stop_sent) {
            for (unsigned k = 0; k < n; k++)
                if (jobs[k].pid > 0) kill(jobs[k].pid, SIGINT);
            stop_sent = true;
        }
        if (late >= AF_JOB_LATE_KILL && !kill_sent) {
            for (unsigned k = 0; k < n; k++)
                if (jobs[k].pid > 0) {
                    fprintf(stderr, "attnfuzz: job %u (pid %ld) still running %.0fs after the time limit: killed\n", k,
                            (long)jobs[k].pid, late + grace);
                    kill(jobs[k].pid, SIGKILL);
                }
            kill_sent = true;
        }
        for (unsigned k = 0; k < n; k++) {
            int ws;
            if (jobs[k].pid <= 0 || waitpid(jobs[k].pid, &ws, WNOHANG) != jobs[k].pid) continue;
            pid_t pid = jobs[k].pid;
            jobs[k].pid = 0;
            running--;
            bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
            if (clean || kill_sent) continue; /* killed for the time limit: not a death */
            failed = true;
            double lived = now - jobs[k].started;
            /* a bundle it was writing is a temporary directory nobody else will remove */
            size_t partial = af_bundle_remove_partial(o->crashes_dir, (long)pid);
            af_minrec_remove_partial(o->crashes_dir, (long)pid); /* its claims are stale by themselves */
            af_job_death d = {k, (long)pid, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0, WIFEXITED(ws) ? WEXITSTATUS(ws) : 0,
                              lived, false};
            /* kept dying: too many restarts, or a restarted child that could not live a second */
            bool crash_loop = jobs[k].gen > 0 && lived < AF_JOB_MIN_LIFE;
            bool give_up = jobs[k].gen >= AF_JOB_MAX_RESTARTS || crash_loop;
            const char *why = crash_loop ? "; it kept dying (within a second of its restart): not restarted"
                              : give_up  ? "; it kept dying (too many restarts): not restarted"
                                         : "";
            char serr_msg[sizeof ((af_error *)0)->msg + 32] = "";
            if (!give_up && !stopping) {
                jobs[k].gen++;
                af_jobs_merge(s, dir, jobs, n, o->crashes_dir); /* execs_before of slot k: its dead children's */
                af_error serr;
                if (o->runs && jobs[k].execs_before >= o->runs) {
                    why = "; its --runs are done";
                } else if (af_job_start(o, dir, k, &jobs[k], start, -1, &serr) != AF_OK) {
                    snprintf(serr_msg, sizeof serr_msg, "; cannot restart it: %s", serr.msg);
                    why = serr_msg;
                    give_up = true;
                } else {
                    d.restarted = true;
                    why = "; restarted it with a new seed stream";
                    s->jobs_restarted++;
                    running++;
                }
            }
            char how[64];
            if (d.signal) {
                snprintf(how, sizeof how, "was killed by signal %d (SIG%s)", d.signal,
                         sigabbrev_np(d.signal) ? sigabbrev_np(d.signal) : "?");
            } else {
                snprintf(how, sizeof how, "exited with status %d", d.exit_code);
            }
            fprintf(stderr, "attnfuzz: job %u (pid %ld) %s after %.1fs%s\n", k, d.pid, how, lived, why);
            if (partial)
                fprintf(stderr, "attnfuzz: removed %zu half-written bundle%s of job %u from %s\n", partial,
                        partial == 1 ? "" : "s", k, o->crashes_dir);
            if (s->jobs_died < AF_JOB_MAX_DEATHS) s->deaths[s->jobs_died] = d;
            s->jobs_died++;
            if (give_up) {
                jobs[k].gave_up = true;
                s->jobs_kept_dying = true;
            }
        }
        if (running > 0 && now - last_status < 1.0) continue;
        last_status = now;
        af_jobs_merge(s, dir, jobs, n, o->crashes_dir);
        /* the campaign's time, as a single process counts it: the jobs' end pass (their
         * minimize_end_seconds) comes after it */
        s->elapsed = o->seconds > 0 ? fmin(af_now() - start, o->seconds) : af_now() - start;
        if (!o->quiet) af_print_status(s, o, "", running ? "" : "DONE", tty);
        if (o->stats_path && running) af_campaign_stats_write(s, o, o->stats_path, NULL); /* progress */
        if (o->max_findings && s->n_sigs >= o->max_findings)
            for (unsigned k = 0; k < n; k++)
                if (jobs[k].pid > 0) kill(jobs[k].pid, SIGINT);
    }
    af_jobs_cleanup(dir);
    if (failed && s->execs == 0 && !s->jobs_restarted)
        status = af_error_set(err, AF_ERR_IO, "every job failed");
    return status;
}

af_status af_campaign_run(const af_campaign_opts *o, af_campaign_stats *s, af_error *err) {
    memset(s, 0, sizeof *s);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double started_at = (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec;
    s->started_at = started_at;
    if (o->jobs <= 1 && !o->no_bind) {
        int cpu, lock = af_cpu_bind_lock();
        if (af_cpu_bind_choose(&cpu, 1) == 1) af_cpu_bind(0, cpu);
        af_cpu_bind_unlock(lock);
    }
    af_status st = o->jobs > 1 ? af_campaign_jobs(o, s, err) : af_campaign_single(o, s, !o->quiet, err);
    s->started_at = started_at;
    s->finished = true;
    if (o->stats_path) {
        af_error serr;
        if (af_campaign_stats_write(s, o, o->stats_path, &serr) != AF_OK && st == AF_OK) {
            if (err) *err = serr;
            st = serr.code;
        }
    }
    return st;
}
