/* cmd_regress.c - `attnfuzz regress DIR...`: replay a corpus of bundles and compare each
 * check's verdict with the one the bundle recorded. For CI: a fixed bug shows as
 * "fixed", a bug that came back or a new failure as "REGRESSED"; --junit writes the
 * outcome as JUnit XML (one testcase per bundle), --waive lists accepted findings.
 *
 * A bundle runs on an executor opened on the backends it recorded (af_backend_open through
 * af_exec_create: built-ins, mutants, plugin:, worker: and target: alike); consecutive
 * bundles that record the same checks share it, so a corpus of one target starts its stack
 * once. A recorded failure that passes is replayed up to AF_REGRESS_REPLAYS times in all
 * before it is called fixed, or, when the known bug it records needs what this host lacks
 * (its entry's "needs", docs/known.md), "skip (needs ...)". */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "attnfuzz/mem.h"
#include "cli.h"
#include "core/clock.h"

static void af_regress_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz regress [--strict] [--junit FILE] [--waive FILE] [--budget MIB] [--known FILE]\n"
               "                        [--no-known] DIR...\n"
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
               "--known FILE, --no-known   known bugs, as for fuzz: a check failing now that is\n"
               "             one gets \"[known bug ID ...]\" on its verdict line (the verdict is the same)\n"
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

typedef struct af_junit_case {
    char name[128];      /* bundle directory name */
    char classname[512]; /* the corpus directory */
    double seconds;
    int outcome;         /* 0 passed, 1 failure, 2 error, 3 skipped (waived) */
    char *message;       /* af_malloc'd: the verdict lines (failure, skipped) or the error */
    char *out;           /* af_malloc'd: every verdict line */
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

typedef struct af_regress_counts {
    int same, fixed, regr, waived, skipped;
} af_regress_counts;

/* The executor of the last bundle, kept while the next bundle records the same checks: a
 * corpus of one target's bundles then starts its worker once, not once per bundle (a
 * Python stack takes seconds to import). */
static struct {
    af_exec *x;
    char key[4096];
} af_regress_cache;

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
}

static af_exec *af_regress_exec(const af_exec_config *cfg, af_error *err) {
    char key[sizeof af_regress_cache.key];
    af_regress_key(cfg, key, sizeof key);
    if (af_regress_cache.x && strcmp(key, af_regress_cache.key) == 0) return af_regress_cache.x;
    af_exec_destroy(af_regress_cache.x);
    af_regress_cache.x = af_exec_create(cfg, err);
    snprintf(af_regress_cache.key, sizeof af_regress_cache.key, "%s", key);
    return af_regress_cache.x;
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
 * "skip (needs avx512f)", and entry "  [known bug ID ...]". Decided once per bundle
 * (*state: 0 not yet, 1 fix, 2 skip). */
static bool af_regress_skip(const af_known *known, const af_bundle *b, const af_exec *x, int *state,
                            char verdict[300], char entry[400]) {
    if (*state == 0) {
        af_known_scope scope = AF_KNOWN_SCOPE_IN;
        char why[256];
        long e = -1;
        af_error err = {0};
        if (af_known_bundle_scope(known, b, x, &scope, &e, why, sizeof why, &err) != AF_OK)
            fprintf(stderr, "attnfuzz regress: %s: which known bug: %s\n", af_bundle_dir(b), err.msg);
        *state = scope == AF_KNOWN_SCOPE_IN ? 1 : 2;
        if (*state == 2) {
            snprintf(verdict, 300, "skip (%.280s)", why);
            af_cli_known_text(known, e, entry, 400);
        }
    }
    return *state == 2;
}

static int af_regress_bundle(const char *dir, const char *name, af_exec_config base, bool strict,
                             const af_waive *waive, const af_known *known, af_regress_counts *n, af_junit_case *jc) {
    af_error err = {0};
    af_bundle *b;
    char line[1400];
    if (af_bundle_read(dir, &b, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz regress: %s\n", err.msg);
        if (jc) {
            jc->outcome = 2;
            af_append(&jc->message, err.msg);
        }
        return 2;
    }
    char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
    af_cli_config_from_bundle(b, &base, names);
    af_exec *x = af_regress_exec(&base, &err);
    int rc = 0;
    af_status st = x ? af_exec_run_bundle(x, b, &err) : AF_ERR_INVALID;
    int replays = 1;
    while (st == AF_OK && replays < AF_REGRESS_REPLAYS && af_regress_looks_fixed(x, b)) {
        st = af_exec_run_bundle(x, b, &err);
        replays++;
    }
    if (st != AF_OK) {
        fprintf(stderr, "attnfuzz regress: %s: %s\n", dir, err.msg);
        if (jc) {
            jc->outcome = 2;
            snprintf(line, sizeof line, "%.800s: %.500s", dir, err.msg);
            af_append(&jc->message, line);
        }
        rc = 2;
    } else {
        int skip_state = 0;
        char skip[300] = "", skip_entry[400] = "";
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
            } else if (now == AF_KIND_OK && af_regress_skip(known, b, x, &skip_state, skip, skip_entry)) {
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
            snprintf(line, sizeof line, "%-9s %.900s: %.200s: recorded %s, now %s%s%.63s", verdict, dir, check, af_kind_names[was],
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
            printf("%s\n", line);
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

int af_cmd_regress(int argc, char **argv) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    int selected = 0;
    bool strict = false;
    const char *junit = NULL;
    af_waive waive = {0};
    af_cli_known ko = {0};
    enum { O_STRICT = 's', O_JUNIT = 'j', O_WAIVE_LIST = 'w' };
    static const struct option longopts[] = {{"budget", required_argument, 0, AF_OPT_BUDGET},
                                             AF_CLI_KNOWN_OPTIONS,
                                             {"strict", no_argument, 0, O_STRICT},
                                             {"junit", required_argument, 0, O_JUNIT},
                                             {"waive", required_argument, 0, O_WAIVE_LIST},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == AF_OPT_BUDGET && af_cli_exec_option(&cfg, opt, optarg, &selected) > 0) continue;
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
    int rc = 0, bundles = 0;
    af_regress_counts n = {0};
    af_junit j = {0};
    double start = af_now();
    for (int a = optind; a < argc; a++) {
        /* a merged directory or a shard's (attnfuzz merge, fuzz --root): its crashes/ */
        char sub[2048];
        struct stat ds;
        int w = snprintf(sub, sizeof sub, "%s/crashes", argv[a]);
        const char *dir = w > 0 && (size_t)w < sizeof sub && stat(sub, &ds) == 0 && S_ISDIR(ds.st_mode) ? sub : argv[a];
        struct dirent **ents;
        int ne = scandir(dir, &ents, NULL, alphasort);
        if (ne < 0) {
            fprintf(stderr, "attnfuzz regress: %s: cannot open the directory\n", dir);
            rc = 2;
            continue;
        }
        for (int e = 0; e < ne; e++) {
            char path[4096];
            struct stat sb;
            const char *name = ents[e]->d_name;
            snprintf(path, sizeof path, "%s/%s/case.json", dir, name);
            bool bundle = name[0] != '.' && stat(path, &sb) == 0;
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (bundle) {
                af_junit_case *jc = NULL;
                if (junit) {
                    if (j.n == j.cap) {
                        size_t cap = j.cap ? 2 * j.cap : 64;
                        af_junit_case *nc = af_calloc(cap, sizeof *nc);
                        if (nc) {
                            if (j.cases) memcpy(nc, j.cases, j.n * sizeof *nc);
                            af_free(j.cases);
                            j.cases = nc;
                            j.cap = cap;
                        }
                    }
                    if (j.n < j.cap) {
                        jc = &j.cases[j.n++];
                        memset(jc, 0, sizeof *jc);
                        snprintf(jc->name, sizeof jc->name, "%.127s", name);
                        snprintf(jc->classname, sizeof jc->classname, "attnfuzz.regress.%s", argv[a]);
                    }
                }
                double t0 = af_now();
                int r = af_regress_bundle(path, name, cfg, strict, &waive, known, &n, jc);
                if (jc) jc->seconds = af_now() - t0;
                bundles++;
                if (r > rc) rc = r;
            }
            free(ents[e]);
        }
        free(ents);
    }
    printf("%d bundles: %d checks same, %d fixed, %d regressed, %d waived, %d skipped\n", bundles, n.same, n.fixed,
           n.regr, n.waived, n.skipped);
    if (junit) {
        if (af_junit_write(&j, junit, af_now() - start) != 0) {
            fprintf(stderr, "attnfuzz regress: --junit %s: cannot write: %s\n", junit, strerror(errno));
            rc = 2;
        }
        for (size_t i = 0; i < j.n; i++) {
            af_free(j.cases[i].message);
            af_free(j.cases[i].out);
        }
        af_free(j.cases);
    }
    af_free(waive.entries);
    af_known_destroy(known);
    af_exec_destroy(af_regress_cache.x);
    af_regress_cache.x = NULL;
    return rc;
}
