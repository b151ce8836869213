/* harness.c - the fuzz target over the total decoder (see harness.h).
 *
 * One executor for the life of the process: its buffers are reused, but an execution
 * depends only on its input (the case, its values and the sampled relation all come
 * from the bytes), so nothing leaks from one input to the next. The only state kept
 * across inputs is the set of signatures already stored, which decides whether a
 * finding is written as a bundle, never what is found.
 *
 * Inputs whose case costs more than ATTNFUZZ_MAX_FLOPS are skipped (the decoder can
 * produce a 64 x 128 x 65536 x 512 case from 20 bytes; one of those would stall the
 * engine for minutes). The custom mutators cap their cases the same way. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/oracle.h"
#include "feedback.h"

#define AF_HARNESS_SEEN_CAP 16384u /* signatures remembered (power of two) */

static struct {
    bool ready;
    af_fuzz_config cfg;
    af_exec *x;
    af_harness_outcome last;
    uint64_t seen[AF_HARNESS_SEEN_CAP]; /* open addressing; 0 = empty */
    size_t nseen;
    /* counters for ATTNFUZZ_STATS */
    uint64_t inputs, skipped, with_findings;
    double flops_run, stats_written;
} af_harness;

static double af_harness_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes the counters to STATS.<pid> (temp file + rename): once a second while fuzzing,
 * since AFL++ ends its persistent targets with SIGKILL, and at exit. */
static void af_harness_write_stats(void) {
    if (!af_harness.cfg.stats) return;
    char path[1100], tmp[1200];
    snprintf(path, sizeof path, "%s.%ld", af_harness.cfg.stats, (long)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "inputs %llu\nskipped %llu\nwith_findings %llu\nflops_run %.6g\n",
            (unsigned long long)af_harness.inputs, (unsigned long long)af_harness.skipped,
            (unsigned long long)af_harness.with_findings, af_harness.flops_run);
    if (fclose(f) == 0) rename(tmp, path);
    af_harness.stats_written = af_harness_now();
}

static void af_harness_count(const af_harness_outcome *out) {
    af_harness.inputs++;
    if (out->skipped) {
        af_harness.skipped++;
    } else {
        af_harness.flops_run += out->flops;
    }
    if (out->findings) af_harness.with_findings++;
    if (af_harness.cfg.stats && af_harness_now() - af_harness.stats_written >= 1.0) af_harness_write_stats();
}

/* Notes a signature; true when it was not seen before in this process. */
static bool af_harness_note(uint64_t sig) {
    uint64_t key = sig ? sig : 1;
    if (af_harness.nseen * 4 >= AF_HARNESS_SEEN_CAP * 3) return true; /* full: the bundle writer dedups */
    size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 50) & (AF_HARNESS_SEEN_CAP - 1);
    while (af_harness.seen[i]) {
        if (af_harness.seen[i] == key) return false;
        i = (i + 1) & (AF_HARNESS_SEEN_CAP - 1);
    }
    af_harness.seen[i] = key;
    af_harness.nseen++;
    return true;
}

static void af_harness_setup(void) {
    if (af_harness.ready) return;
    af_error err = {0};
    if (af_fuzz_config_from_env(&af_harness.cfg, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz harness: %s\n", err.msg);
        exit(2);
    }
    af_harness.x = af_exec_create(&af_harness.cfg.exec, &err);
    if (!af_harness.x) {
        fprintf(stderr, "attnfuzz harness: %s\n", err.msg);
        exit(2);
    }
    af_harness.ready = true;
    if (af_harness.cfg.stats) {
        af_harness.stats_written = af_harness_now();
        atexit(af_harness_write_stats);
    }
    if (af_harness.cfg.quiet) return;
    char checks[1024] = "";
    size_t n = 0, nrel = 0;
    for (size_t i = 0; i < af_exec_check_count(af_harness.x); i++) {
        const char *name = af_exec_check_name(af_harness.x, i);
        if (strchr(name, '@')) {
            nrel++;
            continue;
        }
        int w = snprintf(checks + n, n < sizeof checks ? sizeof checks - n : 0, "%s%s", n ? "; " : "", name);
        if (w > 0) n += (size_t)w;
    }
    fprintf(stderr,
            "attnfuzz harness: checks %s + %zu relation checks%s; bundles -> %s/; max flops %.3g; "
            "feedback %s%s\n",
            n ? checks : "(none)", nrel, af_harness.cfg.exec.sample_relations ? " (one sampled per backend)" : "",
            af_harness.cfg.crashes, af_harness.cfg.max_flops, af_feedback_mode(),
            af_harness.cfg.abort_on_finding ? "; abort on finding" : "");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    af_fuzz_config_fix_blas(*argv);
    af_fuzz_config_take_flags(argc, *argv);
    af_harness_setup();
    return 0;
}

void af_harness_print_findings(const char *name) {
    af_exec *x = af_harness.x;
    for (size_t i = 0; x && i < af_harness.last.findings; i++) {
        const af_finding *f = af_exec_finding(x, i);
        fprintf(stderr, "%s: %s %s signature %016llx: max_abs %.3g, %.3g x tolerance%s%s\n", name,
                af_kind_names[f->kind], f->who, (unsigned long long)f->signature, f->result.m.max_abs,
                f->result.m.worst_ratio, f->message[0] ? ": " : "", f->message);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    af_harness_setup();
    af_harness_outcome *out = &af_harness.last;
    memset(out, 0, sizeof *out);
    af_case *c = &out->c;
    af_case_decode(c, data, size, af_harness.cfg.exec.budget);
    out->features = af_case_features(c);
    out->combo = af_feedback_combo(c);
    out->flops = af_case_flops(c);
    if (out->flops > af_harness.cfg.max_flops) {
        out->skipped = true;
        af_harness_count(out);
        return 0;
    }
    af_error err = {0};
    af_exec *x = af_harness.x;
    if (af_exec_run_case(x, c, &err) != AF_OK) {
        /* not a finding: the library failed (out of memory, a broken invariant) */
        fprintf(stderr, "attnfuzz harness: execution failed: %s\n", err.msg);
        abort();
    }
    af_feedback_record(x);
    out->findings = af_exec_finding_count(x);
    for (size_t i = 0; i < out->findings; i++) {
        const af_finding *f = af_exec_finding(x, i);
        if (!af_harness_note(f->signature)) continue;
        char path[1024] = "";
        af_error werr = {0};
        af_status st = af_exec_write_bundle(x, i, af_harness.cfg.crashes, path, sizeof path, &werr);
        if (st == AF_OK) {
            out->new_bundles++;
            if (!af_harness.cfg.quiet)
                fprintf(stderr, "attnfuzz: NEW %s %s -> %s\n", af_kind_names[f->kind], f->who, path);
        } else if (st != AF_ERR_EXISTS) { /* EXISTS: another process stored it first */
            fprintf(stderr, "attnfuzz: could not store a %s finding of %s: %s\n", af_kind_names[f->kind], f->who,
                    werr.msg);
        }
    }
    af_harness_count(out);
    if (out->findings && af_harness.cfg.abort_on_finding) {
        af_harness_print_findings("attnfuzz harness");
        fprintf(stderr, "attnfuzz harness: ATTNFUZZ_ABORT is set: aborting on the finding\n");
        abort();
    }
    return 0;
}

const af_harness_outcome *af_harness_last(void) { return &af_harness.last; }
const af_fuzz_config *af_harness_config(void) {
    af_harness_setup();
    return &af_harness.cfg;
}
