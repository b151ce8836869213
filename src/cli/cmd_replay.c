/* cmd_replay.c - `attnfuzz replay PATH...`: re-run bundles (directories) or raw inputs
 * (files) and say, per check, whether it still fails. Each PATH gets an executor of its own
 * checks; they borrow their backends from one pool (backend_pool.h), as regress does, so a
 * worker named by many PATHs starts once (and restarts only after a crash or a hang). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/backend_pool.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "cli.h"

static void af_replay_usage(FILE *f) {
    fprintf(f,
            "usage: attnfuzz replay [options] PATH...\n"
            "\n"
            "PATH is a bundle directory (as written by fuzz, or by another tool: a case.json\n"
            "and optional .npy.zst arrays, with expected.npy.zst checked too) or a raw input\n"
            "file (libFuzzer/AFL++ style bytes). Bundles re-run the backends and relation\n"
            "they recorded; raw inputs the default pair explicit,fused and every relation.\n"
            "\n"
            "  --backend NAME   run NAME instead (repeatable); also --pair A,B, --relation NAME\n"
            "  --budget MIB     tensor memory per case (default 64; raise for big bundles)\n"
            "  --waive masked_row_nan, --waive masked_value_leak\n"
            "  --timeout S, --compile-timeout S   a worker's limits, as for fuzz\n"
            "  --known FILE, --no-known   known bugs, as for fuzz: a failing check that is one\n"
            "                   says which (\"[known bug ID ...]\"); it still fails. A bundle of a\n"
            "                   known bug that needs what this host lacks (a CPU flag, ...) and\n"
            "                   passes here says \"skip (needs ...)\"\n"
            "  -q, --quiet      print only failing checks\n"
            "\n"
            "exit: 0 all clean, 1 something still fails, 2 usage error or unreadable input\n");
}

static void af_print_result(const char *path, const char *check, const char *tensor, const af_result *r,
                            const char *msg, const char *known) {
    if (r->kind == AF_KIND_ERROR || r->kind == AF_KIND_CRASH || r->kind == AF_KIND_TIMEOUT) {
        printf("%s: %s: %s: %s%s\n", path, check, af_kind_names[r->kind], msg && *msg ? msg : "(no message)", known);
        return;
    }
    bool grad = r->kind != AF_KIND_OK && strcmp(tensor, "out") != 0;
    printf("%s: %s: %s%s%s  max_abs %.3g  max_rel %.3g  rel_fro %.3g  worst %.3g x tol at [%zu,%zu,%zu,%zu]"
           " (got %.9g, want %.9g)%s\n",
           path, check, af_kind_names[r->kind], grad ? " in " : "", grad ? tensor : "", r->m.max_abs, r->m.max_rel, r->m.rel_fro, r->m.worst_ratio,
           r->m.worst[0], r->m.worst[1], r->m.worst[2], r->m.worst[3], r->m.worst_out, r->m.worst_ref, known);
}

static int af_replay_one(const char *path, const af_exec_config *base, int selected, bool quiet, const af_known *known) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "attnfuzz replay: %s: no such file or directory\n", path);
        return 2;
    }
    af_error err = {0};
    af_exec_config cfg = *base;
    af_bundle *b = NULL;
    char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
    if (S_ISDIR(sb.st_mode)) {
        if (af_bundle_read(path, &b, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz replay: %s\n", err.msg);
            return 2;
        }
        if (!(selected & 1)) af_cli_config_from_bundle(b, &cfg, names);
    } else {
        af_cli_default_checks(&cfg, selected);
    }
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) {
        fprintf(stderr, "attnfuzz replay: %s: %s\n", path, err.msg);
        af_bundle_free(b);
        return 2;
    }
    af_status st;
    if (b) {
        st = af_exec_run_bundle(x, b, &err);
    } else {
        uint8_t buf[1 << 16];
        size_t n = 0;
        if (af_cli_read_input(path, buf, sizeof buf, &n, &err) != 0) {
            fprintf(stderr, "attnfuzz replay: %s\n", err.msg);
            af_exec_destroy(x);
            return 2;
        }
        st = af_exec_run_bytes(x, buf, n, &err);
    }
    int rc = 0;
    if (st != AF_OK) {
        fprintf(stderr, "attnfuzz replay: %s: %s\n", path, err.msg);
        rc = 2;
    } else {
        for (size_t i = 0; i < af_exec_check_count(x); i++) {
            const af_result *r = af_exec_check_result(x, i);
            if (!af_exec_check_ran(x, i)) {
                if (!quiet) printf("%s: %s: not run (not supported or does not apply)\n", path, af_exec_check_name(x, i));
                continue;
            }
            const char *msg = "";
            char kt[400] = "";
            for (size_t k = 0; k < af_exec_finding_count(x); k++)
                if (af_exec_finding(x, k)->check == i) {
                    msg = af_exec_finding(x, k)->message;
                    af_cli_known_text(known, af_known_match_exec(known, x, k), kt, sizeof kt);
                }
            if (r->kind != AF_KIND_OK || !quiet)
                af_print_result(path, af_exec_check_name(x, i), af_exec_check_tensor(x, i), r, msg, kt);
        }
        rc = af_exec_finding_count(x) ? 1 : 0;
        /* a recorded failure that no longer shows, of a known bug that needs what this
         * host lacks: not fixed, just not reproducible here */
        if (b && !rc && af_bundle_kind(b) != AF_KIND_OK) {
            af_known_scope scope = AF_KNOWN_SCOPE_IN;
            long entry = -1;
            char why[256], kt[400];
            if (af_known_bundle_scope(known, b, x, &scope, &entry, why, sizeof why, &err) != AF_OK)
                fprintf(stderr, "attnfuzz replay: %s: which known bug: %s\n", path, err.msg);
            else if (scope != AF_KNOWN_SCOPE_IN) {
                af_cli_known_text(known, entry, kt, sizeof kt);
                printf("%s: %s: skip (%s): its recorded %s does not show on this host%s\n", path, af_bundle_who(b), why,
                       af_kind_names[af_bundle_kind(b)], kt);
            }
        }
    }
    af_exec_destroy(x);
    af_bundle_free(b);
    return rc;
}

int af_cmd_replay(int argc, char **argv) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    int selected = 0;
    bool quiet = false;
    af_cli_known ko = {0};
    static const struct option longopts[] = {AF_CLI_EXEC_OPTIONS, AF_CLI_KNOWN_OPTIONS,
                                             {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
        int r = af_cli_exec_option(&cfg, opt, optarg, &selected);
        if (r == 0) r = af_cli_known_option(&ko, opt, optarg);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (opt == 'q') {
            quiet = true;
        } else if (opt == 'h') {
            af_replay_usage(stdout);
            return 0;
        } else {
            af_replay_usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        af_replay_usage(stderr);
        return 2;
    }
    af_known *known = NULL;
    if (af_cli_known_load(&ko, "replay", !quiet, &known) != 0) return 2;
    /* each PATH is judged on its own: a worker does not learn from the ones before it to
     * leave a feature out */
    cfg.worker.unsupported_learn = -1;
    cfg.pool = af_backend_pool_create(); /* NULL (out of memory): each executor opens its own */
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        int r = af_replay_one(argv[i], &cfg, selected, quiet, known);
        if (r > rc) rc = r;
    }
    af_backend_pool_destroy(cfg.pool);
    af_known_destroy(known);
    return rc;
}
