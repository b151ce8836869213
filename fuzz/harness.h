/* harness.h - the fuzz target: bytes in, the configured checks run through af_exec,
 * one bundle per new finding signature. The same harness.c links with libFuzzer, with
 * AFL++ (driver_afl.c) and with the plain replay main (driver_replay.c). */
#ifndef ATTNFUZZ_FUZZ_HARNESS_H
#define ATTNFUZZ_FUZZ_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/case.h"
#include "fuzz_config.h"

/* The libFuzzer entry points. Initialize re-executes the process once when OpenBLAS
 * needs OPENBLAS_CORETYPE, moves -attnfuzz_NAME=VALUE flags into the environment, reads
 * the configuration and creates the executor; a bad configuration exits with status 2
 * and a message. TestOneInput also initializes lazily (engines that do not call
 * Initialize). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the last input did, for the replay driver. */
typedef struct af_harness_outcome {
    bool skipped;       /* af_case_flops over the limit: not run */
    double flops;
    size_t findings;    /* findings of this input */
    size_t new_bundles; /* bundles written for it (new signatures) */
    uint64_t features;  /* af_case_features of the decoded case */
    uint32_t combo;     /* its feedback combination (feedback.h) */
    af_case c;          /* the decoded case */
} af_harness_outcome;

const af_harness_outcome *af_harness_last(void);
const af_fuzz_config *af_harness_config(void);
/* Prints the findings of the last input, one line each, prefixed with name. */
void af_harness_print_findings(const char *name);

#endif
