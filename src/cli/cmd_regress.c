/* cmd_regress.c - `attnfuzz regress DIR...`: replay a corpus of bundles and compare each
 * check's verdict with the one the bundle recorded. For CI: a fixed bug shows as
 * "fixed", a bug that came back or a new failure as "REGRESSED"; --junit writes the
 * outcome as JUnit XML (one testcase per bundle), --waive lists accepted findings.
 *
 * A bundle runs on an executor (af_exec_create, the one every command uses) over the checks
 * it recorded. The executors borrow their backends from a pool (backend_pool.h) that keeps
 * one instance per backend name, so a worker (a Python process, its stack's import, a GPU
 * context: seconds) starts once for the whole corpus however its bundles interleave with
 * other backends', and restarts only after a crash or a hang (worker.c does that itself, in
 * the same backend). Why a pool, and not only bundles grouped by their set of checks: a
 * backend is shared by sets (a pair A,B and A alone, a relation on A), and grouping alone
 * would still open it once per set. The bundles are also run grouped by their checks (sorted
 * by the executor's key; the verdicts still print in the corpus's order), for two reasons:
 * consecutive bundles with the same checks reuse one executor, and a backend is closed after
 * the last bundle that names it, so a corpus of many stacks holds few processes at a time.
 *
 * A worker's start-up mostly waits (an interpreter, a stack's import, a CUDA context: ~13 s),
 * so a job starts the workers its share names side by side, on threads
 * (af_backend_pool_open_all), before its first bundle: nine GPU targets start in about the
 * time of one. Closing after the last use still makes sense beside that, and bounds it: a
 * job holds at most o->starts workers open when it starts more (max(4, 2 x CPUs), at most
 * AF_BACKEND_POOL_THREADS, shared out between the jobs), starting them in the order of their
 * first use; the rest start as the earlier ones close, and a bundle's own workers always (a
 * corpus naming 40 backends does not start 40 torch processes at once on a 2-core CI
 * machine). A worker that cannot start is remembered by the pool as before: its bundles say
 * why.
 *
 * --jobs N forks N processes, each replaying a share of that order with a pool of its own:
 * the bundles that share a worker stay in one job (so each worker starts once), and these
 * clusters are dealt out by their expected cost, the costliest first, each to the job with
 * the least so far (af_regress_assign: a recorded hang waits out --timeout, a crash costs a
 * restart, so such a cluster gets a job of its own instead of holding up a share of
 * others). Each job sends each
 * bundle's outcome back through a pipe; this process prints them in the corpus's order and
 * writes the same JUnit as one job would. A recorded failure that passes is replayed up to
 * AF_REGRESS_REPLAYS times in all before it is called fixed, or, when the known bug it records
 * needs what this host lacks (its entry's "needs", docs/known.md), "skip (needs ...)". On stderr a last line says how
 * many workers started: "attnfuzz regress: M bundles, N jobs: W workers started (R restarts
 * after a fault), ...". */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/backend_pool.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "attnfuzz/mem.h"
#include "cli.h"
#include "core/clock.h"
#include "core/parallel.h"

static void af_regress_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz regress [--strict] [--junit FILE] [--waive FILE] [--jobs N] [--budget MIB]\n"
               "                        [--timeout S] [--compile-timeout S] [--known FILE] [--no-known] DIR...\n"
               "\n"
               "Replays every bundle under each DIR (a corpus of bundles, or a directory holding\n"
               "crashes/: a shard's, or what attnfuzz merge wrote) with the checks it recorded\n"
               "and compares each verdict with the recorded one:\n"
               "  same        the verdict is unchanged (a known bug still fails, a clean case is clean)\n"
               "  fixed       it failed when recorded and passes now (in each of up to 5 replays)\n"
               "  REGRESSED   it passed when recorded, or failed otherwise, and fails now\n"
               "  waived      it would be REGRESSED, but the finding is on the --waive list\n"
               "  skip (needs X)  it would be fixed, but its known bug needs what this host lacks\n"
               "              (a CPU flag, a GPU, a library version: the entry's \"needs\")\n"
               "\n"
               "--strict     also fail on \"fixed\" (a corpus of known bugs that must stay detected;\n"
               "             a skip is no failure)\n"
               "--junit FILE write JUnit XML: one testcase per bundle, a <failure> with the verdict\n"
               "             lines when it regressed, <error> when it cannot be read or run,\n"
               "             <skipped> when waived or skipped\n"
               "--waive FILE known, accepted findings, one a line (# comments): a signature\n"
               "             (16 hex digits), a bundle name (<kind>-<signature>) or a kind\n"
               "             (diverge, nan_mismatch, ...); FILE may also be one such entry\n"
               "--timeout S, --compile-timeout S   a worker's limits, as for fuzz (hang guards: a\n"
               "             loaded machine compiles slowly)\n"
               "--known FILE, --no-known   known bugs, as for fuzz: a check failing now that is\n"
               "             one gets \"[known bug ID ...]\" on its verdict line (the verdict is the same)\n"
               "--jobs N     replay with N processes (default 1), each with its own workers; the\n"
               "             output and the JUnit are those of one job\n"
               "\n"
               "A backend (a target's worker) starts once for the whole corpus and again only\n"
               "after it crashed or hung; the workers the corpus names start side by side before\n"
               "the first bundle (max(4, 2 x CPUs), at most 16, open at a time). The last line on\n"
               "stderr counts the workers started.\n"
               "\n"
               "exit: 0 nothing regressed, 1 something regressed, 2 a bundle cannot be read\n");
}

/* --- the waive list ------------------------------------------------------------------ */

typedef struct af_waive {
    char (*entries)[64];
    size_t n, cap;
} af_waive;

static int af_waive_add(af_waive *w, const char *s) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 32;
        char(*e)[64] = af_calloc(cap, sizeof *e);
        if (!e) return -1;
        if (w->entries) memcpy(e, w->entries, w->n * sizeof *e);
        af_free(w->entries);
        w->entries = e;
        w->cap = cap;
    }
    snprintf(w->entries[w->n++], 64, "%.63s", s);
    return 0;
}

static int af_waive_load(af_waive *w, const char *arg) {
    FILE *f = fopen(arg, "r");
    if (!f) {
        if (af_kind_from_name(arg) >= 0 || strlen(arg) == 16 || strchr(arg, '-')) return af_waive_add(w, arg);
        fprintf(stderr, "attnfuzz regress: --waive %s: %s\n", arg, strerror(errno));
        return -1;
    }
    char line[512];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char *p = line, *hash = strchr(line, '#');
        if (hash) *hash = 0;
        while (*p == ' ' || *p == '\t') p++;
        size_t n = strcspn(p, " \t\r\n");
        p[n] = 0;
        if (*p) rc = af_waive_add(w, p);
    }
    fclose(f);
    return rc;
}

/* The entry that waives a failure of kind `now` in bundle b (or of a finding signed sig),
 * or NULL. */
static const char *af_waived(const af_waive *w, const af_bundle *b, const char *name, af_kind now, uint64_t sig) {
    char hex[32], hex_now[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)af_bundle_signature(b));
    snprintf(hex_now, sizeof hex_now, "%016llx", (unsigned long long)sig);
    for (size_t i = 0; i < w->n; i++) {
        const char *e = w->entries[i];
        if (!strcmp(e, name) || !strcmp(e, hex) || (sig && !strcmp(e, hex_now)) ||
            (now != AF_KIND_OK && !strcmp(e, af_kind_names[now])))
            return e;
    }
    return NULL;
}

/* --- JUnit XML ------------------------------------------------------------------------ */

typedef struct af_regress_counts {
    int same, fixed, regr, waived, skipped;
} af_regress_counts;

/* a += b */
static void af_regress_counts_add(af_regress_counts *a, const af_regress_counts *b) {
    a->same += b->same;
    a->fixed += b->fixed;
    a->regr += b->regr;
    a->waived += b->waived;
    a->skipped += b->skipped;
}

/* One bundle's outcome: its JUnit testcase, and what the command prints for it. */
typedef struct af_junit_case {
    char name[128];      /* bundle directory name */
    char classname[512]; /* the corpus directory */
    double seconds;
    int outcome;         /* 0 passed, 1 failure, 2 error, 3 skipped (waived) */
    char *message;       /* af_malloc'd: the verdict lines (failure, skipped) or the error */
    char *out;           /* af_malloc'd: every verdict line (stdout) */
    char *err;           /* af_malloc'd: its messages (stderr) */
    int rc;              /* the exit status it asks for: 0, 1 regressed, 2 cannot be read or run */
    af_regress_counts n; /* its checks' verdicts */
} af_junit_case;

typedef struct af_junit {
    af_junit_case *cases;
    size_t n, cap;
} af_junit;

static void af_xml_esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if (c < 0x20 && c != '\n' && c != '\t') fputc('?', f); /* not allowed in XML 1.0 */
            else fputc((char)c, f);
        }
    }
}

static int af_junit_write(const af_junit *j, const char *path, double seconds) {
    size_t fail = 0, err = 0, skip = 0;
    for (size_t i = 0; i < j->n; i++) {
        fail += j->cases[i].outcome == 1;
        err += j->cases[i].outcome == 2;
        skip += j->cases[i].outcome == 3;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    char stamp[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"attnfuzz regress\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" "
               "time=\"%.3f\">\n",
            j->n, fail, err, skip, seconds);
    fprintf(f, "  <testsuite name=\"attnfuzz regress\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" "
               "time=\"%.3f\" timestamp=\"%s\">\n",
            j->n, fail, err, skip, seconds, stamp);
    for (size_t i = 0; i < j->n; i++) {
        const af_junit_case *c = &j->cases[i];
        fprintf(f, "    <testcase classname=\"");
        af_xml_esc(f, c->classname);
        fprintf(f, "\" name=\"");
        af_xml_esc(f, c->name);
        fprintf(f, "\" time=\"%.3f\">\n", c->seconds);
        static const char *const tags[4] = {NULL, "failure", "error", "skipped"};
        if (c->outcome) {
            char first[512];
            snprintf(first, sizeof first, "%s", c->message ? c->message : "");
            first[strcspn(first, "\n")] = 0;
            fprintf(f, "      <%s message=\"", tags[c->outcome]);
            af_xml_esc(f, first);
            if (c->outcome == 3) {
                fprintf(f, "\"/>\n");
            } else {
                fprintf(f, "\" type=\"%s\">", c->outcome == 1 ? "REGRESSED" : "error");
                af_xml_esc(f, c->message);
                fprintf(f, "</%s>\n", tags[c->outcome]);
            }
        }
        if (c->out && c->out[0]) {
            fprintf(f, "      <system-out>");
            af_xml_esc(f, c->out);
            fprintf(f, "</system-out>\n");
        }
        fprintf(f, "    </testcase>\n");
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
    if (fclose(f) != 0) return -1;
    return rename(tmp, path) == 0 ? 0 : -1;
}

/* Appends text (a line) to *buf (af_malloc'd, grown). */
static void af_append(char **buf, const char *text) {
    size_t have = *buf ? strlen(*buf) : 0, add = strlen(text);
    char *n = af_malloc(have + add + 2);
    if (!n) return;
    if (have) memcpy(n, *buf, have);
    memcpy(n + have, text, add);
    n[have + add] = '\n';
    n[have + add + 1] = 0;
    af_free(*buf);
    *buf = n;
}

/* --- one bundle ---------------------------------------------------------------------------- */

/* Recorded verdict of a check named `name` ("fused", "layout@fused" recorded as the
 * backend "fused@layout", "fused~expected"), AF_KIND_COUNT when not recorded. */
static af_kind af_recorded(const af_bundle *b, const char *name) {
    for (size_t i = 0; i < af_bundle_record_count(b); i++) {
        const af_bundle_record *r = af_bundle_record_at(b, i);
        if (!strcmp(r->backend, name)) return af_bundle_record_verdict(r);
    }
    /* a relation check "rel@backend": the bundle's finding is its verdict */
    const char *rel = af_bundle_relation(b);
    if (rel && strchr(name, '@') && !strcmp(af_bundle_who(b), name)) return af_bundle_kind(b);
    if (!strcmp(af_bundle_who(b), name)) return af_bundle_kind(b);
    return AF_KIND_COUNT;
}

/* One job's replaying state: the backends it opened, and the executor of the last bundle,
 * kept while the next bundle records the same checks (its buffers are reused). */
typedef struct af_regress_job {
    af_backend_pool *pool;
    af_exec *x;
    char key[4096];
} af_regress_job;

static void af_regress_key(const af_exec_config *c, char *key, size_t cap) {
    size_t n = 0;
    int w = snprintf(key, cap, "%zu %d %zu %g %g %g %d %d %a|", c->budget, c->sample_relations, c->n_backends,
                     c->worker.timeout, c->worker.compile_timeout, c->worker.unsupported_learn,
                     c->oracle.waive_masked_row_nan, c->oracle.waive_masked_value_leak, c->oracle.fudge);
    n = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < AF_CASE_DTYPE_COUNT && n < cap; d++)
        n += (size_t)snprintf(key + n, cap - n, "%a %a|", c->oracle.floor_atol[d], c->oracle.floor_rtol[d]);
    for (size_t i = 0; i < c->n_backends && n < cap; i++) n += (size_t)snprintf(key + n, cap - n, "%s|", c->backends[i]);
    for (size_t i = 0; i < c->n_pairs && n < cap; i++) n += (size_t)snprintf(key + n, cap - n, "p%s|", c->pairs[i]);
    for (int r = 0; r < AF_REL_COUNT && n < cap; r++) n += (size_t)snprintf(key + n, cap - n, "%d", c->relations[r]);
    if (n < cap) snprintf(key + n, cap - n, "|d%a", c->determinism);
}

static af_exec *af_regress_exec(af_regress_job *job, const af_exec_config *cfg, af_error *err) {
    char key[sizeof job->key];
    af_regress_key(cfg, key, sizeof key);
    if (job->x && strcmp(key, job->key) == 0) return job->x;
    af_exec_destroy(job->x);
    job->x = af_exec_create(cfg, err);
    snprintf(job->key, sizeof job->key, "%s", key);
    return job->x;
}

/* Replays of a bundle whose recorded failure passes, in all, before it is called fixed: a bug
 * that shows on some runs only (an output of uninitialized memory that may happen to be right,
 * a race) is not fixed while a replay still shows it. */
#define AF_REGRESS_REPLAYS 5

/* Does some check of x's last run pass where the bundle recorded a failure? */
static bool af_regress_looks_fixed(const af_exec *x, const af_bundle *b) {
    for (size_t i = 0; i < af_exec_check_count(x); i++) {
        if (!af_exec_check_ran(x, i)) continue;
        af_kind was = af_recorded(b, af_exec_check_name(x, i));
        if (was != AF_KIND_COUNT && was != AF_KIND_OK && af_exec_check_result(x, i)->kind == AF_KIND_OK) return true;
    }
    return false;
}

/* Is a recorded failure of b that passes now a skip rather than a fix? Yes when the known
 * bug b records needs what this host lacks (af_known_bundle_scope): verdict then receives
 * "skip (needs avx512f)", and entry "  [known bug ID ...]"; a failure to tell goes to *msgs.
 * Decided once per bundle (*state: 0 not yet, 1 fix, 2 skip). */
static bool af_regress_skip(const af_known *known, const af_bundle *b, const af_exec *x, int *state,
                            char verdict[300], char entry[400], char **msgs) {
    if (*state == 0) {
        af_known_scope scope = AF_KNOWN_SCOPE_IN;
        char why[256];
        long e = -1;
        af_error err = {0};
        if (af_known_bundle_scope(known, b, x, &scope, &e, why, sizeof why, &err) != AF_OK) {
            char line[1400];
            snprintf(line, sizeof line, "attnfuzz regress: %.800s: which known bug: %.500s", af_bundle_dir(b), err.msg);
            af_append(msgs, line);
        }
        *state = scope == AF_KNOWN_SCOPE_IN ? 1 : 2;
        if (*state == 2) {
            snprintf(verdict, 300, "skip (%.280s)", why);
            af_cli_known_text(known, e, entry, 400);
        }
    }
    return *state == 2;
}

/* Replays the bundle in dir on job's backends; its verdict lines go to jc->out (never NULL),
 * its messages to jc->err. Returns the exit status it asks for. */
static int af_regress_bundle(af_regress_job *job, const char *dir, const char *name, af_exec_config base, bool strict,
                             const af_waive *waive, const af_known *known, af_regress_counts *n, af_junit_case *jc) {
    af_error err = {0};
    af_bundle *b;
    char line[2048]; /* a verdict (a skip's reasons: 280), the directory (900), the check (200), ... */
    if (af_bundle_read(dir, &b, &err) != AF_OK) {
        snprintf(line, sizeof line, "attnfuzz regress: %.1300s", err.msg);
        af_append(&jc->err, line);
        if (jc) {
            jc->outcome = 2;
            af_append(&jc->message, err.msg);
        }
        return 2;
    }
    char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
    af_cli_config_from_bundle(b, &base, names);
    af_exec *x = af_regress_exec(job, &base, &err);
    int rc = 0;
    af_status st = x ? af_exec_run_bundle(x, b, &err) : AF_ERR_INVALID;
    int replays = 1;
    /* a bundle whose known bug needs what this host lacks is a skip at once: no replays */
    int skip_state = 0;
    char skip[300] = "", skip_entry[400] = "";
    while (st == AF_OK && replays < AF_REGRESS_REPLAYS && af_regress_looks_fixed(x, b) &&
           !af_regress_skip(known, b, x, &skip_state, skip, skip_entry, &jc->err)) {
        st = af_exec_run_bundle(x, b, &err);
        replays++;
    }
    if (st != AF_OK) {
        snprintf(line, sizeof line, "attnfuzz regress: %.800s: %.500s", dir, err.msg);
        af_append(&jc->err, line);
        if (jc) {
            jc->outcome = 2;
            snprintf(line, sizeof line, "%.800s: %.500s", dir, err.msg);
            af_append(&jc->message, line);
        }
        rc = 2;
    } else {
        for (size_t i = 0; i < af_exec_check_count(x); i++) {
            if (!af_exec_check_ran(x, i)) continue;
            const char *check = af_exec_check_name(x, i);
            af_kind now = af_exec_check_result(x, i)->kind, was = af_recorded(b, check);
            if (was == AF_KIND_COUNT) was = AF_KIND_OK; /* not recorded: it was not a finding */
            const char *verdict, *by = NULL;
            bool failing = false;
            if (now == was || (now != AF_KIND_OK && was != AF_KIND_OK)) {
                verdict = "same";
                n->same++;
            } else if (now == AF_KIND_OK && af_regress_skip(known, b, x, &skip_state, skip, skip_entry, &jc->err)) {
                verdict = skip; /* its known bug needs what this host lacks: no fix */
                n->skipped++;
            } else if (now == AF_KIND_OK) {
                verdict = "fixed";
                n->fixed++;
                failing = strict;
            } else {
                uint64_t sig = 0;
                for (size_t k = 0; k < af_exec_finding_count(x); k++)
                    if (af_exec_finding(x, k)->check == i) sig = af_exec_finding(x, k)->signature;
                by = af_waived(waive, b, name, now, sig);
                if (by) {
                    verdict = "waived";
                    n->waived++;
                } else {
                    verdict = "REGRESSED";
                    n->regr++;
                    failing = true;
                }
            }
            if (strict && now == AF_KIND_OK && was != AF_KIND_OK && verdict != skip &&
                (by = af_waived(waive, b, name, was, 0))) {
                verdict = "waived"; /* a fixed finding the list accepts as gone */
                failing = false;
            }
            snprintf(line, sizeof line, "%-9.280s %.900s: %.200s: recorded %s, now %s%s%.63s", verdict, dir, check, af_kind_names[was],
                     af_kind_names[now], by ? " (waive list: " : "", by ? by : "");
            if (by) strncat(line, ")", sizeof line - strlen(line) - 1);
            if (verdict == skip) strncat(line, skip_entry, sizeof line - strlen(line) - 1);
            if (replays > 1) {
                char rp[64];
                snprintf(rp, sizeof rp, " (replay %d of at most %d)", replays, AF_REGRESS_REPLAYS);
                strncat(line, rp, sizeof line - strlen(line) - 1);
            }
            for (size_t k = 0; k < af_exec_finding_count(x) && known; k++)
                if (af_exec_finding(x, k)->check == i) {
                    char kt[400];
                    af_cli_known_text(known, af_known_match_exec(known, x, k), kt, sizeof kt);
                    strncat(line, kt, sizeof line - strlen(line) - 1);
                }
            if (failing) rc = 1;
            if (jc) {
                af_append(&jc->out, line);
                if (failing) {
                    jc->outcome = 1;
                    af_append(&jc->message, line);
                } else if ((by || verdict == skip) && jc->outcome == 0) {
                    jc->outcome = 3;
                    af_append(&jc->message, line);
                }
            }
        }
    }
    af_bundle_free(b);
    return rc;
}

/* --- the corpus and its schedule --------------------------------------------------------- */

/* A bundle of the corpus, beside its outcome (af_junit_case, same index). */
typedef struct af_regress_item {
    char *path;  /* af_malloc'd: DIR/NAME */
    char *key;   /* af_malloc'd: its checks (af_regress_key), "" when it cannot be read */
    char *specs; /* af_malloc'd: the backends its checks open, one a line */
    size_t index;
    double cost; /* seconds its replay is expected to take (af_regress_cost) */
} af_regress_item;

typedef struct af_regress_corpus {
    af_junit j; /* the outcomes, in the corpus's order */
    af_regress_item *items;
} af_regress_corpus;

/* What every bundle is replayed with. */
typedef struct af_regress_opts {
    af_exec_config cfg;
    bool strict;
    const af_waive *waive;
    const af_known *known;
    unsigned starts; /* workers a job holds open at most while it starts more (af_regress_starts) */
} af_regress_opts;

/* What replaying a bundle is expected to cost, in seconds, for sharing a corpus out between
 * jobs: a case's run, plus --timeout for a recorded hang (it hangs again: the limit is
 * waited out) and a worker's start for a recorded crash (the next case restarts it; spares
 * make later restarts cheap, the first is a start). Estimates: only their ratios matter. */
#define AF_REGRESS_CASE_S 0.5
#define AF_REGRESS_START_S 5.0
static double af_regress_cost(af_kind kind, const af_exec_config *cfg) {
    double t = AF_REGRESS_CASE_S;
    if (kind == AF_KIND_TIMEOUT) t += cfg->worker.timeout > 0 ? cfg->worker.timeout : 10.0;
    if (kind == AF_KIND_CRASH) t += AF_REGRESS_START_S;
    return t;
}

/* Appends the bundle DIR/NAME, reading it for its checks. -1 when out of memory. */
static int af_regress_corpus_add(af_regress_corpus *c, const char *dir, const char *name, const char *classname,
                                 const af_exec_config *base) {
    af_junit *j = &c->j;
    if (j->n == j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 64;
        af_junit_case *nc = af_calloc(cap, sizeof *nc);
        af_regress_item *ni = af_calloc(cap, sizeof *ni);
        if (!nc || !ni) {
            af_free(nc);
            af_free(ni);
            return -1;
        }
        if (j->cases) memcpy(nc, j->cases, j->n * sizeof *nc);
        if (c->items) memcpy(ni, c->items, j->n * sizeof *ni);
        af_free(j->cases);
        af_free(c->items);
        j->cases = nc;
        c->items = ni;
        j->cap = cap;
    }
    af_junit_case *jc = &j->cases[j->n];
    af_regress_item *it = &c->items[j->n];
    memset(jc, 0, sizeof *jc);
    memset(it, 0, sizeof *it);
    snprintf(jc->name, sizeof jc->name, "%.127s", name);
    snprintf(jc->classname, sizeof jc->classname, "attnfuzz.regress.%.480s", classname);
    char path[4096], key[4096] = "", specs[4096] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    af_bundle *b;
    af_error err;
    if (af_bundle_read(path, &b, &err) == AF_OK) { /* one that cannot be read says so when replayed */
        af_exec_config cfg = *base;
        char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
        af_cli_config_from_bundle(b, &cfg, names);
        af_regress_key(&cfg, key, sizeof key);
        size_t n = 0;
        for (size_t i = 0; i < cfg.n_backends && n < sizeof specs; i++)
            n += (size_t)snprintf(specs + n, sizeof specs - n, "%s\n", cfg.backends[i]);
        for (size_t i = 0; i < cfg.n_pairs && n < sizeof specs; i++) { /* "A,B": both */
            const char *p = cfg.pairs[i], *comma = strchr(p, ',');
            if (comma) n += (size_t)snprintf(specs + n, sizeof specs - n, "%.*s\n%s\n", (int)(comma - p), p, comma + 1);
        }
        it->cost = af_regress_cost(af_bundle_kind(b), &cfg);
        af_bundle_free(b);
    }
    it->path = af_strdup(path);
    it->key = af_strdup(key);
    it->specs = af_strdup(specs);
    it->index = j->n;
    if (!it->path || !it->key || !it->specs) {
        af_free(it->path);
        af_free(it->key);
        af_free(it->specs);
        return -1;
    }
    j->n++;
    return 0;
}

static void af_regress_corpus_free(af_regress_corpus *c) {
    for (size_t i = 0; i < c->j.n; i++) {
        af_free(c->j.cases[i].message);
        af_free(c->j.cases[i].out);
        af_free(c->j.cases[i].err);
        af_free(c->items[i].path);
        af_free(c->items[i].key);
        af_free(c->items[i].specs);
    }
    af_free(c->j.cases);
    af_free(c->items);
}

static int af_regress_item_cmp(const void *a, const void *b) {
    const af_regress_item *x = *(const af_regress_item *const *)a, *y = *(const af_regress_item *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* The order the bundles are replayed in: grouped by their checks, in the corpus's order
 * within a group. NULL when out of memory. */
static size_t *af_regress_order(const af_regress_corpus *c) {
    size_t n = c->j.n;
    const af_regress_item **by = af_calloc(n ? n : 1, sizeof *by);
    size_t *order = af_calloc(n ? n : 1, sizeof *order);
    if (!by || !order) {
        af_free(by);
        af_free(order);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) by[i] = &c->items[i];
    qsort(by, n, sizeof *by, af_regress_item_cmp);
    for (size_t i = 0; i < n; i++) order[i] = by[i]->index;
    af_free(by);
    return order;
}

/* Does the list of specs (one a line) hold spec? */
static bool af_regress_names(const char *specs, const char *spec) {
    size_t len = strlen(spec);
    for (const char *p = specs; *p;) {
        size_t n = strcspn(p, "\n");
        if (n == len && memcmp(p, spec, len) == 0) return true;
        p += n + (p[n] == '\n');
    }
    return false;
}

/* After a bundle naming specs: the backends no bundle of rest[0 .. nrest) names are closed
 * (their processes end now, not with the job). */
static void af_regress_release(af_regress_job *job, const af_regress_corpus *c, const size_t *rest, size_t nrest,
                               const char *specs) {
    for (const char *p = specs; *p;) {
        size_t n = strcspn(p, "\n");
        char spec[4096];
        snprintf(spec, sizeof spec, "%.*s", (int)n, p);
        p += n + (p[n] == '\n');
        bool later = false;
        for (size_t r = 0; r < nrest && !later; r++) later = af_regress_names(c->items[rest[r]].specs, spec);
        if (later) continue;
        af_exec_destroy(job->x); /* it borrows the backend */
        job->x = NULL;
        af_backend_pool_close(job->pool, spec);
    }
}

/* --- starting the workers ahead --------------------------------------------------------- */

/* The worker specs (worker:, target:) of a share, in the order of their first use, and where
 * that first use is: a job starts them side by side (af_backend_pool_open_all) before its
 * first bundle, as many as it may hold open, and the rest as the earlier ones close. */
typedef struct af_regress_starts {
    char **spec;   /* af_malloc'd, each af_malloc'd */
    size_t *first; /* the position in the share of the first bundle naming spec[k] */
    size_t n, next; /* next: the first not started yet */
    size_t limit;  /* workers held open at most when starting more (o->starts) */
} af_regress_starts;

static void af_regress_starts_free(af_regress_starts *s) {
    for (size_t k = 0; k < s->n; k++) af_free(s->spec[k]);
    af_free(s->spec);
    af_free(s->first);
    memset(s, 0, sizeof *s);
}

/* The worker specs that bundles order[0 .. n) name. Out of memory: none (the executors then
 * start each worker when they first need it). */
static void af_regress_starts_init(af_regress_starts *s, const af_regress_corpus *c, const size_t *order, size_t n,
                                   size_t limit) {
    memset(s, 0, sizeof *s);
    s->limit = limit;
    size_t cap = 0;
    for (size_t p = 0; p < n; p++) {
        for (const char *q = c->items[order[p]].specs; *q;) {
            size_t len = strcspn(q, "\n");
            char spec[4096];
            snprintf(spec, sizeof spec, "%.*s", (int)len, q);
            q += len + (q[len] == '\n');
            if (af_backend_spec_kind(spec) != AF_BACKEND_WORKER) continue;
            bool seen = false;
            for (size_t k = 0; k < s->n && !seen; k++) seen = strcmp(s->spec[k], spec) == 0;
            if (seen) continue;
            if (s->n == cap) {
                size_t ncap = cap ? 2 * cap : 16;
                char **ns = af_calloc(ncap, sizeof *ns);
                size_t *nf = af_calloc(ncap, sizeof *nf);
                if (!ns || !nf) {
                    af_free(ns);
                    af_free(nf);
                    af_regress_starts_free(s);
                    return;
                }
                if (s->n) {
                    memcpy(ns, s->spec, s->n * sizeof *ns);
                    memcpy(nf, s->first, s->n * sizeof *nf);
                }
                af_free(s->spec);
                af_free(s->first);
                s->spec = ns;
                s->first = nf;
                cap = ncap;
            }
            if (!(s->spec[s->n] = af_strdup(spec))) {
                af_regress_starts_free(s);
                return;
            }
            s->first[s->n++] = p;
        }
    }
}

/* Before the bundle at position p of the share: starts, side by side, the next workers in
 * the order of first use while fewer than s->limit are open, and in any case those that this
 * bundle is the first to name (past the limit when the open ones are all still needed). A
 * worker that cannot start is remembered by the pool, and its bundles say why. */
static void af_regress_starts_before(af_regress_starts *s, af_backend_pool *pool, size_t p,
                                     const af_worker_opts *wopts) {
    if (!pool || s->next == s->n) return;
    af_backend_pool_stats st;
    af_backend_pool_stats_of(pool, &st);
    size_t room = st.running < s->limit ? (size_t)(s->limit - st.running) : 0;
    size_t until = s->n - s->next < room ? s->n : s->next + room;
    while (until < s->n && s->first[until] <= p) until++;
    if (until == s->next) return;
    af_error err;
    (void)af_backend_pool_open_all(pool, (const char *const *)(s->spec + s->next), until - s->next, wopts,
                                   (unsigned)(until - s->next), &err); /* out of memory: opened when needed */
    s->next = until;
}

/* Called when a job starts replaying bundle i (done false) and when its outcome,
 * c->j.cases[i], is complete (done true). */
typedef void (*af_regress_notify)(void *ctx, size_t i, bool done);

/* One job: replays the bundles order[0 .. n) in that order on one backend pool; *stats
 * receives what the pool did. */
static void af_regress_share(af_regress_corpus *c, const size_t *order, size_t n, const af_regress_opts *o,
                             af_regress_notify notify, void *ctx, af_backend_pool_stats *stats) {
    af_regress_job job;
    memset(&job, 0, sizeof job);
    job.pool = af_backend_pool_create(); /* NULL (out of memory): each executor opens its own */
    af_exec_config base = o->cfg;
    base.pool = job.pool;
    af_regress_starts starts;
    af_regress_starts_init(&starts, c, order, n, o->starts);
    for (size_t p = 0; p < n; p++) {
        size_t i = order[p];
        af_junit_case *jc = &c->j.cases[i];
        af_regress_starts_before(&starts, job.pool, p, &o->cfg.worker);
        notify(ctx, i, false);
        double t0 = af_now();
        jc->rc = af_regress_bundle(&job, c->items[i].path, jc->name, base, o->strict, o->waive, o->known, &jc->n, jc);
        jc->seconds = af_now() - t0;
        if (job.pool) af_regress_release(&job, c, order + p + 1, n - p - 1, c->items[i].specs);
        notify(ctx, i, true);
    }
    af_regress_starts_free(&starts);
    af_exec_destroy(job.x);
    memset(stats, 0, sizeof *stats);
    if (job.pool) af_backend_pool_stats_of(job.pool, stats);
    af_backend_pool_destroy(job.pool);
}

/* --- printing in the corpus's order ---------------------------------------------------- */

typedef struct af_regress_emit {
    af_regress_corpus *c;
    bool keep;      /* --junit: the outcomes stay for the XML */
    bool *finished; /* per bundle */
    size_t next;    /* the first bundle not printed */
    int rc;
    af_regress_counts n;
} af_regress_emit;

/* Prints every finished bundle from e->next on, until one is not finished. */
static void af_regress_emit_done(void *ctx, size_t i, bool done) {
    af_regress_emit *e = ctx;
    if (!done) return;
    e->finished[i] = true;
    for (; e->next < e->c->j.n && e->finished[e->next]; e->next++) {
        af_junit_case *jc = &e->c->j.cases[e->next];
        if (jc->err) fputs(jc->err, stderr);
        if (jc->out) fputs(jc->out, stdout);
        fflush(stdout);
        af_regress_counts_add(&e->n, &jc->n);
        if (jc->rc > e->rc) e->rc = jc->rc;
        if (!e->keep) {
            af_free(jc->message);
            af_free(jc->out);
            af_free(jc->err);
            jc->message = jc->out = jc->err = NULL;
        }
    }
}

/* --- --jobs N: child processes ------------------------------------------------------------- */

/* What a job sends its parent: a bundle started or done (its outcome, then the texts), or,
 * last, what its pool did. Parent and child are one program: the struct goes as bytes. */
typedef enum af_regress_wire_type { AF_WIRE_STARTED, AF_WIRE_DONE, AF_WIRE_STATS } af_regress_wire_type;
typedef struct af_regress_wire {
    af_regress_wire_type type;
    size_t index;
    int rc, outcome;
    af_regress_counts n;
    double seconds;
    size_t len[3]; /* message, out, err (0: none) */
    af_backend_pool_stats stats;
} af_regress_wire;

static int af_regress_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 0 when all n bytes came, -1 at the end of the pipe or on an error. */
static int af_regress_read(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

typedef struct af_regress_child {
    af_regress_corpus *c;
    int fd;
} af_regress_child;

/* A child's af_regress_notify: the bundle's outcome to the parent (a write that fails ends
 * the child: its parent is gone). */
static void af_regress_child_send(void *ctx, size_t i, bool done) {
    af_regress_child *ch = ctx;
    af_regress_wire w;
    memset(&w, 0, sizeof w);
    w.type = done ? AF_WIRE_DONE : AF_WIRE_STARTED;
    w.index = i;
    const af_junit_case *jc = &ch->c->j.cases[i];
    const char *texts[3] = {jc->message, jc->out, jc->err};
    if (done) {
        w.rc = jc->rc;
        w.outcome = jc->outcome;
        w.n = jc->n;
        w.seconds = jc->seconds;
        for (int k = 0; k < 3; k++) w.len[k] = texts[k] ? strlen(texts[k]) : 0;
    }
    int bad = af_regress_write(ch->fd, &w, sizeof w);
    for (int k = 0; k < 3 && !bad; k++)
        if (w.len[k]) bad = af_regress_write(ch->fd, texts[k], w.len[k]);
    if (bad) _exit(2);
}

/* Reads one message of a job into c (a bundle done: its outcome). -1 at the end of the pipe. */
static int af_regress_receive(int fd, af_regress_corpus *c, af_regress_wire *w) {
    if (af_regress_read(fd, w, sizeof *w) != 0) return -1;
    if (w->type != AF_WIRE_DONE) return w->type == AF_WIRE_STATS || w->index < c->j.n ? 0 : -1;
    if (w->index >= c->j.n) return -1;
    af_junit_case *jc = &c->j.cases[w->index];
    jc->rc = w->rc;
    jc->outcome = w->outcome;
    jc->n = w->n;
    jc->seconds = w->seconds;
    char **texts[3] = {&jc->message, &jc->out, &jc->err};
    for (int k = 0; k < 3; k++) {
        if (!w->len[k]) continue;
        char *t = af_malloc(w->len[k] + 1);
        if (!t) return -1;
        if (af_regress_read(fd, t, w->len[k]) != 0) {
            af_free(t);
            return -1;
        }
        t[w->len[k]] = 0;
        af_free(*texts[k]);
        *texts[k] = t;
    }
    return 0;
}

#define AF_REGRESS_JOBS_MAX 64

/* Do the spec lists a and b (one a line) share a worker (worker:, target:)? In-process
 * backends cost nothing to open in each job. */
static bool af_regress_share_worker(const char *a, const char *b) {
    for (const char *p = a; *p;) {
        size_t n = strcspn(p, "\n");
        char spec[4096];
        snprintf(spec, sizeof spec, "%.*s", (int)n, p);
        p += n + (p[n] == '\n');
        if (af_backend_spec_kind(spec) == AF_BACKEND_WORKER && af_regress_names(b, spec)) return true;
    }
    return false;
}

/* The root of position p's cluster (af_regress_assign), halving the path on the way. */
static size_t af_regress_root(size_t *root, size_t p) {
    while (root[p] != p) p = root[p] = root[root[p]];
    return p;
}

/* Shares order[0 .. n) out between `jobs` jobs: job_of[p] is the job of position p. The
 * bundles that share a worker, directly or through others, stay together (a worker then
 * starts in one job), and these clusters go, the costliest first, to the job with the least
 * cost so far (longest processing time first): a cluster holding a hang (its --timeout
 * waited out) or a slow compile gets a job of its own while the others share theirs, where
 * equal counts of bundles put the slow cluster beside others and made the whole corpus wait
 * for it. Out of memory: -1. */
static int af_regress_assign(const af_regress_corpus *c, const size_t *order, size_t n, unsigned jobs,
                             unsigned *job_of) {
    size_t *root = af_calloc(n ? n : 1, sizeof *root), *by = af_calloc(n ? n : 1, sizeof *by);
    double *cost = af_calloc(n ? n : 1, sizeof *cost);
    if (!root || !by || !cost) {
        af_free(root);
        af_free(by);
        af_free(cost);
        return -1;
    }
    /* clusters, as a union-find over positions (quadratic in the bundles: a corpus of
     * thousands is still read in less time) */
    for (size_t p = 0; p < n; p++) root[p] = p;
    for (size_t p = 0; p < n; p++)
        for (size_t q = 0; q < p; q++)
            if (!strcmp(c->items[order[q]].key, c->items[order[p]].key) ||
                af_regress_share_worker(c->items[order[q]].specs, c->items[order[p]].specs)) {
                size_t a = af_regress_root(root, p), b = af_regress_root(root, q);
                root[a > b ? a : b] = a > b ? b : a;
            }
    for (size_t p = 0; p < n; p++) root[p] = af_regress_root(root, p);
    size_t nc = 0;
    for (size_t p = 0; p < n; p++) {
        cost[root[p]] += c->items[order[p]].cost;
        if (root[p] == p) by[nc++] = p;
    }
    /* the costliest cluster first (insertion sort: a few hundred clusters at most) */
    for (size_t a = 1; a < nc; a++)
        for (size_t b = a; b > 0 && cost[by[b]] > cost[by[b - 1]]; b--) {
            size_t t = by[b];
            by[b] = by[b - 1];
            by[b - 1] = t;
        }
    double load[AF_REGRESS_JOBS_MAX] = {0};
    for (size_t k = 0; k < nc; k++) {
        unsigned best = 0;
        for (unsigned m = 1; m < jobs; m++)
            if (load[m] < load[best]) best = m;
        load[best] += cost[by[k]];
        for (size_t p = 0; p < n; p++)
            if (root[p] == by[k]) job_of[p] = best;
    }
    af_free(root);
    af_free(by);
    af_free(cost);
    return 0;
}

/* Replays the corpus with `jobs` child processes, job k taking the positions of order that
 * af_regress_assign gives it, in that order; each bundle's outcome is printed (e) as soon as those before it are. A job that
 * dies leaves its bundles not done with an error outcome. */
static void af_regress_jobs(af_regress_corpus *c, const size_t *order, unsigned jobs, const af_regress_opts *o,
                            af_regress_emit *e, af_backend_pool_stats *stats) {
    size_t n = c->j.n;
    pid_t pid[AF_REGRESS_JOBS_MAX];
    int fd[AF_REGRESS_JOBS_MAX];
    size_t started[AF_REGRESS_JOBS_MAX], count[AF_REGRESS_JOBS_MAX] = {0};
    /* share[k]: job k's bundles, in order; all shares in one array, job k's from start[k] */
    unsigned *job_of = af_calloc(n ? n : 1, sizeof *job_of);
    size_t *share = af_calloc(n ? n : 1, sizeof *share), start[AF_REGRESS_JOBS_MAX + 1];
    if (!job_of || !share || af_regress_assign(c, order, n, jobs, job_of) != 0) {
        /* out of memory: one job replays them all */
        af_free(job_of);
        af_free(share);
        af_regress_share(c, order, n, o, af_regress_emit_done, e, stats);
        return;
    }
    for (size_t p = 0; p < n; p++) count[job_of[p]]++;
    start[0] = 0;
    for (unsigned k = 0; k < jobs; k++) start[k + 1] = start[k] + count[k];
    for (unsigned k = 0; k < jobs; k++) count[k] = 0;
    for (size_t p = 0; p < n; p++) share[start[job_of[p]] + count[job_of[p]]++] = order[p];
    for (unsigned k = 0; k < jobs; k++) {
        pid[k] = -1;
        fd[k] = -1;
        started[k] = SIZE_MAX;
        if (start[k + 1] == start[k]) continue; /* more jobs than clusters */
        int p[2];
        if (pipe(p) != 0) continue;
        fflush(NULL);
        pid_t child = fork();
        if (child == 0) {
            close(p[0]);
            for (unsigned m = 0; m < k; m++)
                if (fd[m] >= 0) close(fd[m]);
            af_regress_child ch = {c, p[1]};
            af_regress_wire w;
            memset(&w, 0, sizeof w);
            af_regress_share(c, share + start[k], start[k + 1] - start[k], o, af_regress_child_send, &ch, &w.stats);
            w.type = AF_WIRE_STATS;
            _exit(af_regress_write(p[1], &w, sizeof w) == 0 ? 0 : 2);
        }
        close(p[1]);
        if (child < 0) {
            close(p[0]);
            continue;
        }
        pid[k] = child;
        fd[k] = p[0];
    }
    memset(stats, 0, sizeof *stats);
    for (;;) {
        struct pollfd pf[AF_REGRESS_JOBS_MAX];
        unsigned who[AF_REGRESS_JOBS_MAX], np = 0;
        for (unsigned k = 0; k < jobs; k++)
            if (fd[k] >= 0) {
                pf[np].fd = fd[k];
                pf[np].events = POLLIN;
                pf[np].revents = 0;
                who[np++] = k;
            }
        if (np == 0) break;
        if (poll(pf, np, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (unsigned q = 0; q < np; q++) {
            if (!pf[q].revents) continue;
            unsigned k = who[q];
            af_regress_wire w;
            if (af_regress_receive(fd[k], c, &w) != 0) {
                close(fd[k]);
                fd[k] = -1;
                continue;
            }
            if (w.type == AF_WIRE_STARTED) started[k] = w.index;
            if (w.type == AF_WIRE_DONE) {
                started[k] = SIZE_MAX;
                af_regress_emit_done(e, w.index, true);
            }
            if (w.type == AF_WIRE_STATS) {
                stats->opened += w.stats.opened;
                stats->workers += w.stats.workers;
                stats->restarts += w.stats.restarts;
                stats->failed += w.stats.failed;
            }
        }
    }
    for (unsigned k = 0; k < jobs; k++) {
        char how[128] = "could not start";
        int status = 0;
        if (pid[k] > 0 && waitpid(pid[k], &status, 0) == pid[k]) {
            if (WIFSIGNALED(status)) snprintf(how, sizeof how, "died of signal %d", WTERMSIG(status));
            else snprintf(how, sizeof how, "ended with status %d", WEXITSTATUS(status));
        }
        for (size_t p = start[k]; p < start[k + 1]; p++) {
            size_t i = share[p];
            if (e->finished[i]) continue;
            af_junit_case *jc = &c->j.cases[i];
            char line[1400];
            snprintf(line, sizeof line, "attnfuzz regress: %.900s: %s the job replaying it %s", c->items[i].path,
                     i == started[k] ? "not finished:" : "not replayed:", how);
            af_append(&jc->err, line);
            jc->outcome = 2;
            af_append(&jc->message, line);
            jc->rc = 2;
            af_regress_emit_done(e, i, true);
        }
    }
    af_free(job_of);
    af_free(share);
}

int af_cmd_regress(int argc, char **argv) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    /* a bundle's verdict is its own: a worker does not learn, from the bundles replayed
     * before it (which depend on --jobs), to leave a feature out */
    cfg.worker.unsupported_learn = -1;
    int selected = 0;
    bool strict = false;
    const char *junit = NULL;
    unsigned jobs = 1;
    af_waive waive = {0};
    af_cli_known ko = {0};
    enum { O_STRICT = 's', O_JUNIT = 'j', O_WAIVE_LIST = 'w', O_JOBS = 'J' };
    static const struct option longopts[] = {{"budget", required_argument, 0, AF_OPT_BUDGET},
                                             {"timeout", required_argument, 0, AF_OPT_TIMEOUT},
                                             {"compile-timeout", required_argument, 0, AF_OPT_COMPILE_TIMEOUT},
                                             AF_CLI_KNOWN_OPTIONS,
                                             {"strict", no_argument, 0, O_STRICT},
                                             {"junit", required_argument, 0, O_JUNIT},
                                             {"waive", required_argument, 0, O_WAIVE_LIST},
                                             {"jobs", required_argument, 0, O_JOBS},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == AF_OPT_BUDGET || opt == AF_OPT_TIMEOUT || opt == AF_OPT_COMPILE_TIMEOUT) {
            if (af_cli_exec_option(&cfg, opt, optarg, &selected) > 0) continue;
            af_free(waive.entries);
            return 2;
        }
        int kr = af_cli_known_option(&ko, opt, optarg);
        if (kr < 0) {
            af_free(waive.entries);
            return 2;
        }
        if (kr > 0) continue;
        if (opt == O_STRICT) {
            strict = true;
            continue;
        }
        if (opt == O_JUNIT) {
            junit = optarg;
            continue;
        }
        if (opt == O_JOBS) {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > AF_REGRESS_JOBS_MAX) {
                fprintf(stderr, "attnfuzz regress: --jobs %s: want 1 to %d\n", optarg, AF_REGRESS_JOBS_MAX);
                af_free(waive.entries);
                return 2;
            }
            jobs = (unsigned)v;
            continue;
        }
        if (opt == O_WAIVE_LIST) {
            if (af_waive_load(&waive, optarg) != 0) {
                af_free(waive.entries);
                return 2;
            }
            continue;
        }
        af_regress_usage(opt == 'h' ? stdout : stderr);
        af_free(waive.entries);
        return opt == 'h' ? 0 : 2;
    }
    if (optind >= argc) {
        af_regress_usage(stderr);
        af_free(waive.entries);
        return 2;
    }
    af_known *known = NULL;
    if (af_cli_known_load(&ko, "regress", true, &known) != 0) {
        af_free(waive.entries);
        return 2;
    }
    int rc = 0;
    bool oom = false;
    af_regress_corpus c;
    memset(&c, 0, sizeof c);
    double start = af_now();
    for (int a = optind; a < argc && !oom; a++) {
        /* a bundle itself (a directory holding case.json): that one bundle */
        char sub[2048];
        struct stat ds;
        int w = snprintf(sub, sizeof sub, "%s/case.json", argv[a]);
        if (w > 0 && (size_t)w < sizeof sub && stat(sub, &ds) == 0 && S_ISREG(ds.st_mode)) {
            char bdir[2048];
            snprintf(bdir, sizeof bdir, "%s", argv[a]);
            size_t n = strlen(bdir);
            while (n > 1 && bdir[n - 1] == '/') bdir[--n] = '\0';
            char *slash = strrchr(bdir, '/');
            const char *name = slash ? slash + 1 : bdir, *parent = ".";
            if (slash == bdir) parent = "/";
            else if (slash) *slash = '\0', parent = bdir;
            oom = af_regress_corpus_add(&c, parent, name, argv[a], &cfg) != 0;
            continue;
        }
        /* a merged directory or a shard's (attnfuzz merge, fuzz --root): its crashes/ */
        w = snprintf(sub, sizeof sub, "%s/crashes", argv[a]);
        const char *dir = w > 0 && (size_t)w < sizeof sub && stat(sub, &ds) == 0 && S_ISDIR(ds.st_mode) ? sub : argv[a];
        struct dirent **ents;
        int ne = scandir(dir, &ents, NULL, alphasort);
        if (ne < 0) {
            fprintf(stderr, "attnfuzz regress: %s: cannot open the directory\n", dir);
            rc = 2;
            continue;
        }
        size_t before = c.j.n;
        for (int e = 0; e < ne; e++) {
            char path[4096];
            struct stat sb;
            const char *name = ents[e]->d_name;
            snprintf(path, sizeof path, "%s/%s/case.json", dir, name);
            if (!oom && name[0] != '.' && stat(path, &sb) == 0)
                oom = af_regress_corpus_add(&c, dir, name, argv[a], &cfg) != 0;
            free(ents[e]);
        }
        free(ents);
        if (c.j.n == before && !oom)
            fprintf(stderr, "attnfuzz regress: %s: no bundle in it (a bundle is a directory holding case.json)\n", dir);
    }
    size_t *order = oom ? NULL : af_regress_order(&c);
    bool *finished = order ? af_calloc(c.j.n ? c.j.n : 1, sizeof *finished) : NULL;
    if (!finished) {
        fprintf(stderr, "attnfuzz regress: out of memory\n");
        af_free(order);
        af_regress_corpus_free(&c);
        af_free(waive.entries);
        af_known_destroy(known);
        return 2;
    }
    af_regress_emit e = {&c, junit != NULL, finished, 0, 0, {0}};
    af_backend_pool_stats ps;
    if (jobs > c.j.n) jobs = c.j.n ? (unsigned)c.j.n : 1;
    /* workers held open at once, all jobs together: a few, or two per CPU (a start-up mostly
     * waits), AF_BACKEND_POOL_THREADS at most; shared out between the jobs */
    unsigned cpus = af_parallel_cpus(), held = cpus > 2 ? 2 * cpus : 4;
    if (held > AF_BACKEND_POOL_THREADS) held = AF_BACKEND_POOL_THREADS;
    af_regress_opts o = {cfg, strict, &waive, known, (held + jobs - 1) / jobs};
    if (jobs == 1) af_regress_share(&c, order, c.j.n, &o, af_regress_emit_done, &e, &ps);
    else af_regress_jobs(&c, order, jobs, &o, &e, &ps);
    if (e.rc > rc) rc = e.rc;
    af_regress_counts n = e.n;
    printf("%zu bundles: %d checks same, %d fixed, %d regressed, %d waived, %d skipped\n", c.j.n, n.same, n.fixed,
           n.regr, n.waived, n.skipped);
    fflush(stdout);
    fprintf(stderr,
            "attnfuzz regress: %zu bundles, %u job%s: %llu workers started (%llu restarts after a fault), %llu "
            "in-process backends opened, %llu could not open\n",
            c.j.n, jobs, jobs == 1 ? "" : "s", (unsigned long long)ps.workers, (unsigned long long)ps.restarts,
            (unsigned long long)(ps.opened - ps.workers), (unsigned long long)ps.failed);
    if (junit && af_junit_write(&c.j, junit, af_now() - start) != 0) {
        fprintf(stderr, "attnfuzz regress: --junit %s: cannot write: %s\n", junit, strerror(errno));
        rc = 2;
    }
    af_free(finished);
    af_free(order);
    af_regress_corpus_free(&c);
    af_free(waive.entries);
    af_known_destroy(known);
    return rc;
}
