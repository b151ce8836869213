/* cmd_minimize.c - `attnfuzz minimize`: shrink a failing bundle or input, or every
 * bundle of a crashes directory that was stored as found. */
#include <dirent.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/campaign.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/minimize.h"
#include "attnfuzz/store.h"
#include "cli.h"

static void af_minimize_usage(FILE *f) {
    fprintf(f,
            "usage: attnfuzz minimize [options] BUNDLE|INPUT\n"
            "       attnfuzz minimize [options] CRASHES_DIR\n"
            "\n"
            "Re-runs the bundle's checks (or, for a raw input, the default pair and relations)\n"
            "and shrinks the case while the same check keeps failing with the same kind:\n"
            "f32, BHSD, plain strides and values, masks and dropout off, default scale,\n"
            "smaller and equal shapes. Writes the result as a new bundle.\n"
            "\n"
            "Given a crashes directory (no case.json in it), minimizes every bundle there that\n"
            "was stored as found (case.json \"minimized\": false: a campaign's queue, or\n"
            "--no-minimize), each with its own check: the minimized bundle goes into the\n"
            "directory under its signature, the directory's shared record learns the alias,\n"
            "and the bundle as found moves to DIR/.raw/. Crashes and timeouts are left.\n"
            "\n"
            "  --crashes DIR     where the minimized bundle goes (default crashes/)\n"
            "  --max-execs N     executions to spend per finding (default 400)\n"
            "  --backend NAME, --pair A,B, --relation NAME, --budget MIB, --timeout S,\n"
            "  --compile-timeout S as for replay\n"
            "\n"
            "exit: 1 a minimized finding was written, 0 the input does not fail (a directory:\n"
            "nothing to minimize), 2 error\n");
}

static void af_minimize_on_signal(int sig) {
    (void)sig;
    af_campaign_interrupt();
}

/* A bundle of a crashes directory to minimize: stored as found, with its check. */
typedef struct af_min_item {
    char name[256];
    char who[160];
    af_kind kind;
    uint64_t raw;
    af_case c;
} af_min_item;

static int af_min_item_cmp(const void *a, const void *b) {
    const af_min_item *x = a, *y = b;
    int c = strcmp(x->who, y->who);
    return c ? c : strcmp(x->name, y->name);
}

/* The one check that `who` names (a backend, a pair "A,B", a relation "R@B") as a config
 * on top of base (its oracle, budget and worker options). False for checks a case cannot
 * be minimized against (a recorded expected output). */
static bool af_minimize_config(const char *who, const af_exec_config *base, af_exec_config *cfg, char *buf,
                               size_t cap) {
    *cfg = *base;
    cfg->n_backends = cfg->n_pairs = 0;
    cfg->sample_relations = false;
    cfg->determinism = 0.0;
    for (int r = 0; r < AF_REL_COUNT; r++) cfg->relations[r] = false;
    snprintf(buf, cap, "%s", who);
    if (!buf[0] || strchr(buf, '~')) return false;
    char *at = strchr(buf, '@');
    if (at) {
        *at = 0;
        int r = af_relation_from_name(buf);
        bool det = strcmp(buf, "determinism") == 0; /* every execution runs the case twice */
        if ((r < 0 && !det) || !at[1]) return false;
        if (det)
            cfg->determinism = 1.0;
        else
            cfg->relations[r] = true;
        cfg->backends[cfg->n_backends++] = at + 1;
    } else if (strchr(buf, ',')) {
        cfg->pairs[cfg->n_pairs++] = buf;
    } else {
        cfg->backends[cfg->n_backends++] = buf;
    }
    return true;
}

/* `attnfuzz minimize DIR`: every bundle stored as found, through the store's end pass
 * (store.h), grouped by check so that one executor (one worker start) serves a group. */
static int af_minimize_dir(const char *dir, const af_exec_config *base, unsigned max_execs) {
    struct dirent **ents;
    int ne = scandir(dir, &ents, NULL, alphasort);
    if (ne < 0) {
        fprintf(stderr, "attnfuzz minimize: %s: cannot open the directory\n", dir);
        return 2;
    }
    af_min_item *items = af_calloc((size_t)ne + 1, sizeof *items);
    size_t n = 0, left_crash = 0;
    int rc = items ? 0 : 2;
    for (int e = 0; e < ne; e++) {
        const char *name = ents[e]->d_name;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s/case.json", dir, name);
        if (items && name[0] != '.' && stat(path, &sb) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            af_bundle *b = NULL;
            af_error err = {0};
            if (af_bundle_read(path, &b, &err) != AF_OK || af_bundle_check_budget(b, base->budget, &err) != AF_OK) {
                fprintf(stderr, "attnfuzz minimize: skipped %s\n", err.msg);
                rc = 2;
            } else if (af_bundle_minimized(b) < 0) {
                af_kind k = af_bundle_kind(b);
                if (k == AF_KIND_CRASH || k == AF_KIND_TIMEOUT) {
                    left_crash++; /* each step could cost a restart or a whole timeout */
                } else {
                    af_min_item *it = &items[n++];
                    snprintf(it->name, sizeof it->name, "%s", name);
                    snprintf(it->who, sizeof it->who, "%s", af_bundle_who(b));
                    it->kind = k;
                    it->raw = af_bundle_signature(b);
                    it->c = *af_bundle_case(b);
                }
            }
            af_bundle_free(b);
        }
        free(ents[e]);
    }
    free(ents);
    if (!items) {
        fprintf(stderr, "attnfuzz minimize: out of memory\n");
        return 2;
    }
    qsort(items, n, sizeof *items, af_min_item_cmp);
    af_store_opts so = {.crashes_dir = dir, .minimize_execs = max_execs, .minimize_seconds = -1};
    af_error err = {0};
    af_store *st = af_store_create(&so, &err);
    af_campaign_stats stats;
    memset(&stats, 0, sizeof stats);
    size_t done = 0;
    for (size_t g = 0; st && g < n && !af_campaign_interrupted();) {
        size_t end = g;
        while (end < n && strcmp(items[end].who, items[g].who) == 0) end++;
        af_exec_config cfg;
        char buf[sizeof items[g].who];
        af_exec *x = NULL;
        size_t check = SIZE_MAX;
        if (af_minimize_config(items[g].who, base, &cfg, buf, sizeof buf) && (x = af_exec_create(&cfg, &err)) != NULL)
            for (size_t i = 0; i < af_exec_check_count(x); i++)
                if (strcmp(af_exec_check_name(x, i), items[g].who) == 0) check = i;
        if (!x || check == SIZE_MAX) {
            fprintf(stderr, "attnfuzz minimize: cannot run the check \"%s\" of %zu bundle%s%s%s\n", items[g].who,
                    end - g, end - g == 1 ? "" : "s", x ? "" : ": ", x ? "" : err.msg);
            rc = 2;
        } else {
            af_status s = AF_OK;
            for (size_t i = g; i < end && s == AF_OK; i++) {
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", dir, items[i].name);
                s = af_store_adopt(st, &stats, check, items[i].who, items[i].kind, items[i].raw, &items[i].c, path,
                                   &err);
            }
            if (s == AF_OK) s = af_store_finish(st, x, &stats, 0, &err);
            if (s != AF_OK) {
                fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
                rc = 2;
            }
            for (size_t i = g; i < end; i++) {
                uint64_t sig = 0;
                af_kind kind = AF_KIND_OK;
                char name[64], path[4096];
                bool aliased = af_store_alias(st, items[i].raw, &sig, &kind);
                if (aliased && sig != items[i].raw) {
                    af_bundle_name(kind, sig, name, sizeof name);
                    printf("%s/%s -> %s/%s\n", dir, items[i].name, dir, name);
                    done++;
                    continue;
                }
                /* the same signature: replaced in place, or left as found */
                af_bundle *b = NULL;
                af_error rerr;
                snprintf(path, sizeof path, "%s/%s", dir, items[i].name);
                bool in_place = aliased && af_bundle_read(path, &b, &rerr) == AF_OK && af_bundle_minimized(b) > 0;
                af_bundle_free(b);
                if (in_place) {
                    printf("%s/%s: minimized (the same signature)\n", dir, items[i].name);
                    done++;
                } else {
                    printf("%s/%s: left as found (%s)\n", dir, items[i].name,
                           af_campaign_interrupted() ? "interrupted"
                                                     : "it does not fail when run again from its case's seeds");
                }
            }
        }
        af_exec_destroy(x);
        g = end;
    }
    if (!st) {
        fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
        rc = 2;
    }
    fprintf(stderr,
            "attnfuzz minimize: %zu of %zu bundle%s stored as found minimized (%llu executions, %.1fs, %llu read from "
            "the shared record)%s",
            done, n, n == 1 ? "" : "s", (unsigned long long)stats.minimize_execs, stats.minimize_seconds,
            (unsigned long long)stats.aliases_read, left_crash ? "; " : "\n");
    if (left_crash)
        fprintf(stderr, "%zu crash or timeout bundle%s left as found (minimize one by naming it)\n", left_crash,
                left_crash == 1 ? "" : "s");
    af_campaign_stats_free(&stats);
    af_store_destroy(st);
    af_free(items);
    if (rc == 2) return 2;
    return done ? 1 : 0;
}

int af_cmd_minimize(int argc, char **argv) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    int selected = 0;
    const char *crashes = "crashes";
    unsigned max_execs = 400;
    static const struct option longopts[] = {AF_CLI_EXEC_OPTIONS,
                                             {"crashes", required_argument, 0, 'c'},
                                             {"max-execs", required_argument, 0, 'n'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    bool crashes_given = false;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int r = af_cli_exec_option(&cfg, opt, optarg, &selected);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (opt == 'c') {
            crashes = optarg;
            crashes_given = true;
        } else if (opt == 'n') {
            max_execs = (unsigned)strtoul(optarg, NULL, 10);
        } else if (opt == 'h') {
            af_minimize_usage(stdout);
            return 0;
        } else {
            af_minimize_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        af_minimize_usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    af_error err = {0};
    af_case c;
    af_bundle *b = NULL;
    char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "attnfuzz minimize: %s: no such file or directory\n", path);
        return 2;
    }
    char cj[4096];
    struct stat cs;
    snprintf(cj, sizeof cj, "%s/case.json", path);
    if (S_ISDIR(sb.st_mode) && stat(cj, &cs) != 0) { /* a crashes directory */
        if (crashes_given || (selected & 3)) {
            fprintf(stderr, "attnfuzz minimize: %s is a directory of bundles: each is minimized with its own check, "
                            "into that directory (no --crashes, --backend, --pair or --relation)\n", path);
            return 2;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = af_minimize_on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        return af_minimize_dir(path, &cfg, max_execs);
    }
    if (S_ISDIR(sb.st_mode)) {
        if (af_bundle_read(path, &b, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
            return 2;
        }
        if (af_bundle_check_budget(b, cfg.budget, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
            af_bundle_free(b);
            return 2;
        }
        c = *af_bundle_case(b);
        if (!(selected & 1)) af_cli_config_from_bundle(b, &cfg, names);
    } else {
        uint8_t buf[1 << 16];
        size_t n = 0;
        if (af_cli_read_input(path, buf, sizeof buf, &n, &err) != 0) {
            fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
            return 2;
        }
        af_case_decode(&c, buf, n, cfg.budget);
        af_cli_default_checks(&cfg, selected);
    }
    int rc = 2;
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) goto out;
    if (af_exec_run_case(x, &c, &err) != AF_OK) goto out;
    if (af_exec_finding_count(x) == 0) {
        fprintf(stderr, "attnfuzz minimize: %s does not fail%s\n", path,
                b ? " when its case is generated from its seeds (the failure may need the bundle's arrays: "
                    "minimizing shrinks generated cases only)"
                  : "");
        rc = 0;
        goto out;
    }
    af_finding f = *af_exec_finding(x, 0);
    af_case before = c;
    af_minimize_opts mo = {.max_execs = max_execs, .tensor = f.tensor, .error_class = f.error_class};
    af_minimize_result mr;
    if (af_minimize(x, f.check, f.kind, &c, &mo, &mr, &err) != AF_OK) goto out;
    unsigned spent = mr.execs;
    const af_finding *fm = af_exec_finding_for(x, f.check);
    size_t fi = 0;
    while (fi < af_exec_finding_count(x) && af_exec_finding(x, fi) != fm) fi++;
    char out[1024];
    af_exec_bundle_opts bo = {.signature = fm->signature, .minimized = 1};
    af_status ws = af_exec_write_bundle_with(x, fi, crashes, &bo, out, sizeof out, &err);
    if (ws != AF_OK && ws != AF_ERR_EXISTS) goto out;
    printf("%s %s: [%u,%u,%u,%u] x [%u,%u,%u,%u] -> [%u,%u,%u,%u] x [%u,%u,%u,%u] in %u executions\n%s%s\n",
           af_kind_names[fm->kind], fm->who, before.batch, before.q_heads, before.q_len, before.head_dim, before.batch,
           before.kv_heads, before.kv_len, before.v_head_dim, c.batch, c.q_heads, c.q_len, c.head_dim, c.batch,
           c.kv_heads, c.kv_len, c.v_head_dim, spent, out, ws == AF_ERR_EXISTS ? " (already stored)" : "");
    rc = 1;
out:
    if (rc == 2) fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
    af_exec_destroy(x);
    af_bundle_free(b);
    return rc;
}
