/* cmd_triage.c - attnfuzz triage: explain bundles (models, sharing, neighbours, sensitivity,
 * a draft known entry and an upstream page). The work is numpy's (python/attnfuzz/triage.py,
 * docs/triage.md): this verb runs it with the project's Python, as report runs the repro
 * writer, and tells it where this executable is ($ATTNFUZZ_EXE) for its replays. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "cli.h"
#include "core/proc.h"

extern char **environ;

static void af_triage_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz triage [--json] [--no-share] [--share-with SPEC]... [--timeout S] [--blind]\n"
               "                       [--known-without ID]... [--no-known] [--out DIR] BUNDLE...\n"
               "\n"
               "Explains each bundle: which convention or precision model reproduces its recorded output,\n"
               "which other backends share the finding (replays; --no-share skips them), the nearest known\n"
               "entries, which case fields the finding needs, and a verdict (real_bug, convention,\n"
               "precision, target_bug) with a confidence and its evidence. --out DIR writes an upstream\n"
               "page, the standalone repro and a draft known.json entry per bundle. Runs\n"
               "python -m attnfuzz.triage with the project's Python; docs/triage.md.\n");
}

int af_cmd_triage(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            af_triage_usage(stdout);
            return 0;
        }
    }
    if (argc < 2) {
        af_triage_usage(stderr);
        return 2;
    }
    af_proc_python py;
    af_error err;
    char **envp = NULL;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        setenv("ATTNFUZZ_EXE", self, 1);
    }
    if (af_proc_python_find(&py, &err) != AF_OK || af_proc_python_env(&py, &envp, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz triage: no Python to run attnfuzz.triage: %s\n", err.msg);
        return 2;
    }
    /* python -m attnfuzz.triage ARGS...: argv[0] is "triage" */
    char **args = af_malloc(((size_t)argc + 3) * sizeof(char *));
    if (!args) {
        af_free(envp);
        fprintf(stderr, "attnfuzz triage: out of memory\n");
        return 2;
    }
    args[0] = py.exe;
    args[1] = "-m";
    args[2] = "attnfuzz.triage";
    for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
    args[argc + 2] = NULL;
    fflush(NULL);
    environ = envp; /* the copy with <root>/python first on PYTHONPATH */
    execvp(py.exe, args);
    fprintf(stderr, "attnfuzz triage: cannot run %s: %s\n", py.exe, strerror(errno));
    af_free(args);
    return 2;
}
