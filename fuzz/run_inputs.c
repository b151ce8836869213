/* run_inputs.c - replay files, directories and bundles through the harness. */
#include "run_inputs.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/oracle.h"
#include "harness.h"

#define AF_RUN_MAX_INPUT (1u << 20) /* the decoder reads at most AF_CASE_ENCODED_MAX bytes */

typedef struct af_run_totals {
    unsigned inputs, with_findings, skipped, unreadable;
    uint8_t *buf;
} af_run_totals;

static void af_run_file(const char *path, af_run_totals *t, bool quiet) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        t->unreadable++;
        return;
    }
    size_t n = fread(t->buf, 1, AF_RUN_MAX_INPUT, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        t->unreadable++;
        return;
    }
    LLVMFuzzerTestOneInput(t->buf, n);
    const af_harness_outcome *o = af_harness_last();
    t->inputs++;
    if (af_harness_config()->print_features) {
        char text[512];
        af_case_features_str(&o->c, text, sizeof text);
        printf("features 0x%016llx combo %u ran %d %s: %s\n", (unsigned long long)o->features, o->combo, !o->skipped,
               path, text);
    }
    if (o->skipped) {
        t->skipped++;
        if (!quiet) fprintf(stderr, "%s: skipped (%.3g flops > ATTNFUZZ_MAX_FLOPS)\n", path, o->flops);
    } else if (o->findings) {
        t->with_findings++;
        af_harness_print_findings(path);
    } else if (!quiet) {
        fprintf(stderr, "%s: ok\n", path);
    }
}

static bool af_run_is_bundle(const char *dir, char *input, size_t len) {
    int w = snprintf(input, len, "%s/input.bin", dir);
    if (w < 0 || (size_t)w >= len) return false;
    struct stat sb;
    return stat(input, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void af_run_path(const char *path, af_run_totals *t, bool quiet) {
    struct stat sb;
    char input[4096];
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "%s: no such file or directory\n", path);
        t->unreadable++;
        return;
    }
    if (!S_ISDIR(sb.st_mode)) {
        af_run_file(path, t, quiet);
        return;
    }
    if (af_run_is_bundle(path, input, sizeof input)) {
        af_run_file(input, t, quiet);
        return;
    }
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, alphasort); /* sorted: the same order every time */
    if (n < 0) {
        fprintf(stderr, "%s: cannot read the directory\n", path);
        t->unreadable++;
        return;
    }
    for (int i = 0; i < n; i++) {
        char child[4096];
        if (names[i]->d_name[0] != '.') {
            int w = snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
            bool ok = w > 0 && (size_t)w < sizeof child && stat(child, &sb) == 0;
            if (ok && S_ISREG(sb.st_mode)) {
                af_run_file(child, t, quiet);
            } else if (ok && S_ISDIR(sb.st_mode) && af_run_is_bundle(child, input, sizeof input)) {
                af_run_file(input, t, quiet);
            }
        }
        free(names[i]);
    }
    free(names);
}

int af_run_inputs(int argc, char **argv) {
    af_run_totals t;
    memset(&t, 0, sizeof t);
    bool any = false;
    for (int i = 1; i < argc; i++) any |= argv[i][0] != '-';
    if (!any) {
        fprintf(stderr,
                "usage: %s [FLAGS] PATH...\n"
                "Runs each file, each file of a directory and each bundle directory (its input.bin)\n"
                "through the harness, configured by ATTNFUZZ_* variables (fuzz/README.md).\n"
                "exit: 0 nothing found, 1 findings, 2 unreadable input\n",
                argc > 0 ? argv[0] : "attnfuzz_replay");
        return 2;
    }
    t.buf = af_malloc(AF_RUN_MAX_INPUT);
    if (!t.buf) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    bool quiet = af_harness_config()->quiet;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') af_run_path(argv[i], &t, quiet);
    af_free(t.buf);
    fprintf(stderr, "attnfuzz replay: %u inputs, %u with findings, %u skipped, %u unreadable\n", t.inputs,
            t.with_findings, t.skipped, t.unreadable);
    if (t.unreadable) return 2;
    return t.with_findings ? 1 : 0;
}
