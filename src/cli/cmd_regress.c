/* cmd_regress.c - `attnfuzz regress DIR...`: replay a corpus of bundles and compare each
 * check's verdict with the one the bundle recorded. For CI: a fixed bug shows as
 * "fixed", a bug that came back or a new failure as "REGRESSED". */
#include <dirent.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "cli.h"

static void af_regress_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz regress [--strict] [--budget MIB] DIR...\n"
               "\n"
               "Replays every bundle under each DIR (a corpus of bundles) with the checks it\n"
               "recorded and compares each verdict with the recorded one:\n"
               "  same        the verdict is unchanged (a known bug still fails, a clean case is clean)\n"
               "  fixed       it failed when recorded and passes now\n"
               "  REGRESSED   it passed when recorded, or failed otherwise, and fails now\n"
               "\n"
               "--strict also fails on \"fixed\" (a corpus of known bugs that must stay detected).\n"
               "\n"
               "exit: 0 nothing regressed, 1 something regressed, 2 a bundle cannot be read\n");
}

/* Recorded verdict of a check named `name` ("fused", "layout@fused" recorded as the
 * backend "fused@layout", "fused~expected"), AF_KIND_COUNT when not recorded. */
static af_kind af_recorded(const af_bundle *b, const char *name) {
    for (size_t i = 0; i < af_bundle_record_count(b); i++) {
        const af_bundle_record *r = af_bundle_record_at(b, i);
        if (!strcmp(r->backend, name)) return r->kind;
    }
    /* a relation check "rel@backend": the bundle's finding is its verdict */
    const char *rel = af_bundle_relation(b);
    if (rel && strchr(name, '@') && !strcmp(af_bundle_who(b), name)) return af_bundle_kind(b);
    if (!strcmp(af_bundle_who(b), name)) return af_bundle_kind(b);
    return AF_KIND_COUNT;
}

static int af_regress_bundle(const char *dir, af_exec_config base, bool strict, int *n_same, int *n_fixed,
                             int *n_regr) {
    af_error err = {0};
    af_bundle *b;
    if (af_bundle_read(dir, &b, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz regress: %s\n", err.msg);
        return 2;
    }
    char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
    af_cli_config_from_bundle(b, &base, names);
    af_exec *x = af_exec_create(&base, &err);
    int rc = 0;
    if (!x || af_exec_run_bundle(x, b, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz regress: %s: %s\n", dir, err.msg);
        rc = 2;
    } else {
        for (size_t i = 0; i < af_exec_check_count(x); i++) {
            if (!af_exec_check_ran(x, i)) continue;
            const char *name = af_exec_check_name(x, i);
            af_kind now = af_exec_check_result(x, i)->kind, was = af_recorded(b, name);
            if (was == AF_KIND_COUNT) was = AF_KIND_OK; /* not recorded: it was not a finding */
            const char *verdict;
            if (now == was || (now != AF_KIND_OK && was != AF_KIND_OK)) {
                verdict = "same";
                (*n_same)++;
            } else if (now == AF_KIND_OK) {
                verdict = "fixed";
                (*n_fixed)++;
                if (strict) rc = 1;
            } else {
                verdict = "REGRESSED";
                (*n_regr)++;
                rc = 1;
            }
            printf("%-9s %s: %s: recorded %s, now %s\n", verdict, dir, name, af_kind_names[was], af_kind_names[now]);
        }
    }
    af_exec_destroy(x);
    af_bundle_free(b);
    return rc;
}

int af_cmd_regress(int argc, char **argv) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    int selected = 0;
    bool strict = false;
    static const struct option longopts[] = {{"budget", required_argument, 0, AF_OPT_BUDGET},
                                             {"strict", no_argument, 0, 's'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (af_cli_exec_option(&cfg, opt, optarg, &selected) > 0) continue;
        if (opt == 's') {
            strict = true;
            continue;
        }
        af_regress_usage(opt == 'h' ? stdout : stderr);
        return opt == 'h' ? 0 : 2;
    }
    if (optind >= argc) {
        af_regress_usage(stderr);
        return 2;
    }
    int rc = 0, same = 0, fixed = 0, regr = 0, bundles = 0;
    for (int a = optind; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) {
            fprintf(stderr, "attnfuzz regress: %s: cannot open the directory\n", argv[a]);
            rc = 2;
            continue;
        }
        struct dirent *e;
        char path[4096];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s/case.json", argv[a], e->d_name);
            struct stat sb;
            if (stat(path, &sb) != 0) continue; /* not a bundle */
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            int r = af_regress_bundle(path, cfg, strict, &same, &fixed, &regr);
            bundles++;
            if (r > rc) rc = r;
        }
        closedir(d);
    }
    printf("%d bundles: %d checks same, %d fixed, %d regressed\n", bundles, same, fixed, regr);
    return rc;
}
