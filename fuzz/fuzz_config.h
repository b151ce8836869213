/* fuzz_config.h - what the fuzz harnesses check, from the environment or from
 * -attnfuzz_NAME=VALUE flags (fuzz/README.md lists them).
 *
 * libFuzzer and AFL++ own the command line of a harness, so the harness takes its own
 * settings from ATTNFUZZ_* environment variables, which every engine passes on to its
 * workers (libFuzzer -fork/-jobs, AFL++ -M/-S) unchanged. For convenience a libFuzzer
 * command line may also carry them as -attnfuzz_backends=... flags: af_fuzz_config_take_flags
 * moves those into the environment and removes them from argv before libFuzzer parses it. */
#ifndef ATTNFUZZ_FUZZ_CONFIG_H
#define ATTNFUZZ_FUZZ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "attnfuzz/exec.h"
#include "attnfuzz/status.h"

#define AF_FUZZ_DEFAULT_MAX_FLOPS 2e7

typedef struct af_fuzz_config {
    af_exec_config exec;    /* backends, pairs, relations, oracle options, budget */
    const char *crashes;    /* bundle directory, default "crashes" */
    bool abort_on_finding;  /* ATTNFUZZ_ABORT=1: abort() so the engine keeps a crash */
    bool no_minimize;       /* ATTNFUZZ_MINIMIZE=0: sign and store findings as found */
    unsigned minimize_execs; /* ATTNFUZZ_MINIMIZE_EXECS: per new raw signature, 0 = 400 */
    double max_flops;       /* inputs costing more are skipped, default 2e7 */
    bool print_features;    /* ATTNFUZZ_PRINT_FEATURES=1 (replay driver) */
    bool quiet;             /* ATTNFUZZ_QUIET=1: no line per new bundle */
    const char *stats;      /* ATTNFUZZ_STATS: counters go to STATS.<pid> (benchmarks) */
    bool no_known;          /* ATTNFUZZ_KNOWN=0: no known bugs (default: the repository's) */
    const char *known[8];   /* ATTNFUZZ_KNOWN=FILE:FILE...: known.json files loaded besides */
    size_t n_known;
    /* storage the pointers in exec and crashes point into */
    char backends_buf[1024];
    char pairs_buf[1024];
    char crashes_buf[1024];
    char stats_buf[1024];
    char known_buf[1024];
} af_fuzz_config;

/* Reads ATTNFUZZ_BACKENDS (comma list, each compared with ref), ATTNFUZZ_PAIRS
 * (semicolon list of A,B), ATTNFUZZ_RELATIONS (comma list or "all"), ATTNFUZZ_CRASHES,
 * ATTNFUZZ_ABORT, ATTNFUZZ_MINIMIZE, ATTNFUZZ_MINIMIZE_EXECS, ATTNFUZZ_BUDGET_MIB, ATTNFUZZ_MAX_FLOPS, ATTNFUZZ_WAIVE,
 * ATTNFUZZ_SAMPLE_RELATIONS, ATTNFUZZ_PRINT_FEATURES, ATTNFUZZ_QUIET, ATTNFUZZ_STATS and
 * ATTNFUZZ_KNOWN (0, or a colon list of known.json files to load besides the repository's). With no
 * backend, pair or relation given: af_exec_config_default (the pair explicit,fused and
 * every relation). Relations are sampled (one per backend and case) unless
 * ATTNFUZZ_SAMPLE_RELATIONS=0. AF_ERR_INVALID names the variable and the bad value. */
af_status af_fuzz_config_from_env(af_fuzz_config *cfg, af_error *err);

/* Moves every argument of the form -attnfuzz_NAME=VALUE (or --attnfuzz_NAME=VALUE) into
 * the environment as ATTNFUZZ_NAME=VALUE (NAME upper-cased) and removes it from argv,
 * keeping the order of the others. argv[*argc] stays NULL. */
void af_fuzz_config_take_flags(int *argc, char **argv);

/* Applies OPENBLAS_CORETYPE when OpenBLAS fell back to generic kernels (backend.h,
 * af_blas_better_coretype) by re-executing /proc/self/exe with argv; returns only when
 * nothing was needed or the exec failed. Call first thing, before any work. */
void af_fuzz_config_fix_blas(char **argv);

#endif
