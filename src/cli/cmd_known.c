/* cmd_known.c - `attnfuzz known [BUNDLE...]`: the known bugs (known.h) a command loads,
 * and which of them each bundle's recorded finding is, without running any backend (the
 * GPU bundles can be checked on a machine without a GPU). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/known.h"
#include "cli.h"

static void af_known_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz known [--known FILE]... [--no-known] [--vars] [BUNDLE...]\n"
               "\n"
               "Without BUNDLE: lists the known bugs fuzz, replay, regress and report load (the\n"
               "repository's corpus/findings/*/known.json, and each --known FILE): id, class,\n"
               "kinds, title, file, and what an entry needs of the host (CPU flags, GPU, library\n"
               "versions: \"needs ...\", with what this host lacks of it). With BUNDLE directories:\n"
               "says which known bug each bundle's recorded finding is (its kind, backend, case,\n"
               "recorded output judged again against the reference, error and stderr.txt), or\n"
               "\"new\"; no backend runs. A bundle's entry matches whatever it needs (the bundle\n"
               "may come from another machine); \"out of scope here\" says what this host lacks.\n"
               "\n"
               "  --vars   list the variables a when/symptom clause can use (docs/known.md)\n"
               "\n"
               "exit: 0 listed, or every bundle is a known bug; 1 some bundle is none;\n"
               "2 usage error, a bad known.json or an unreadable bundle\n");
}

int af_cmd_known(int argc, char **argv) {
    af_cli_known ko = {0};
    bool vars = false;
    static const struct option longopts[] = {AF_CLI_KNOWN_OPTIONS,
                                             {"vars", no_argument, 0, 'v'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int r = af_cli_known_option(&ko, opt, optarg);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (opt == 'v') {
            vars = true;
            continue;
        }
        af_known_usage(opt == 'h' ? stdout : stderr);
        return opt == 'h' ? 0 : 2;
    }
    if (vars) {
        char buf[600];
        const char *name;
        for (size_t i = 0; (name = af_known_var(i, buf, sizeof buf)) != NULL; i++) printf("%-22s %s\n", name, buf);
        return 0;
    }
    af_known *k = NULL;
    if (af_cli_known_load(&ko, "known", false, &k) != 0) return 2;
    int rc = 0;
    if (optind >= argc) {
        for (size_t i = 0; i < af_known_count(k); i++) {
            af_known_info info;
            af_known_info_of(k, i, &info);
            char kinds[200] = "";
            size_t n = 0;
            for (int kd = 1; kd < AF_KIND_COUNT && n < sizeof kinds; kd++)
                if (info.kinds >> kd & 1u) {
                    int w = snprintf(kinds + n, sizeof kinds - n, "%s%s", n ? "," : "", af_kind_names[kd]);
                    if (w > 0) n += (size_t)w;
                }
            printf("%-48s %-10s %-36s %s  (%s)\n", info.id, af_known_class_names[info.cls], kinds[0] ? kinds : "-",
                   info.title, info.file);
            if (info.needs[0]) {
                char why[256];
                af_known_scope sc = af_known_scope_of(k, i, NULL, why, sizeof why);
                printf("%-48s needs %s%s%s%s\n", "", info.needs, sc == AF_KNOWN_SCOPE_IN ? "" : " (not here: ",
                       sc == AF_KNOWN_SCOPE_IN ? "" : why, sc == AF_KNOWN_SCOPE_IN ? "" : ")");
            }
        }
        printf("%zu known bugs\n", af_known_count(k));
    }
    for (int a = optind; a < argc; a++) {
        af_error err = {0};
        af_bundle *b = NULL;
        long e = -1;
        if (af_bundle_read(argv[a], &b, &err) != AF_OK || af_known_match_bundle(k, b, &e, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz known: %s\n", err.msg);
            if (b) af_bundle_free(b);
            rc = 2;
            continue;
        }
        if (e >= 0) {
            af_known_info info;
            af_known_info_of(k, (size_t)e, &info);
            char why[256] = "";
            if (af_known_scope_of(k, (size_t)e, NULL, why, sizeof why) == AF_KNOWN_SCOPE_IN) why[0] = 0;
            printf("%s: %s %s: known bug %s (%s): %s%s%s%s\n", argv[a], af_kind_names[af_bundle_kind(b)], af_bundle_who(b),
                   info.id, af_known_class_names[info.cls], info.title, why[0] ? " (out of scope here: " : "", why,
                   why[0] ? ")" : "");
        } else {
            printf("%s: %s %s: new\n", argv[a], af_kind_names[af_bundle_kind(b)], af_bundle_who(b));
            if (rc == 0) rc = 1;
        }
        af_bundle_free(b);
    }
    af_known_destroy(k);
    return rc;
}
