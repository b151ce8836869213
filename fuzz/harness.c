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
 * engine for minutes). The custom mutators cap their cases the same way.
 *
 * Findings go through the campaign's store step (store.h): a new raw signature is
 * minimized once and signed on the minimized case, so the same bug found here and by
 * `attnfuzz fuzz` lands in the same bundle; repeats are counted, not stored. The shared
 * record of the crashes directory (store.h) lets engine instances and campaigns on one
 * crashes directory read each other's minimizations instead of repeating them. With
 * ATTNFUZZ_ABORT the harness still aborts on every finding after that, so the engine
 * keeps its own crash file of the input as found. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "attnfuzz/oracle.h"
#include "attnfuzz/store.h"
#include "feedback.h"

static struct {
    bool ready;
    af_fuzz_config cfg;
    af_exec *x;
    af_harness_outcome last;
    af_finding found[AF_EXEC_MAX_CHECKS]; /* the last input's findings, as found */
    uint64_t signed_as[AF_EXEC_MAX_CHECKS]; /* and the signature each is stored under */
    af_store *store;
    af_known *known; /* the known bugs findings are matched against first (store.h) */
    af_campaign_stats sigs; /* signatures seen in this process, with counts */
    /* counters for ATTNFUZZ_STATS */
    uint64_t inputs, skipped, with_findings;
    double flops_run, stats_written, started;
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
    fprintf(f, "inputs %llu\nskipped %llu\nwith_findings %llu\nflops_run %.6g\nunique %zu\nminimize_execs %llu\n",
            (unsigned long long)af_harness.inputs, (unsigned long long)af_harness.skipped,
            (unsigned long long)af_harness.with_findings, af_harness.flops_run, af_harness.sigs.n_sigs,
            (unsigned long long)af_harness.sigs.minimize_execs);
    if (fclose(f) == 0) rename(tmp, path);
    /* the signatures with their counts, as `attnfuzz fuzz --stats` writes them (for
     * `attnfuzz report --stats`) */
    snprintf(path, sizeof path, "%s-signatures.%ld.json", af_harness.cfg.stats, (long)getpid());
    af_harness.sigs.elapsed = af_harness_now() - af_harness.started;
    af_stats_write(&af_harness.sigs, NULL, path, NULL);
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
    /* the repository's known bugs (as attnfuzz fuzz loads them), and ATTNFUZZ_KNOWN's files */
    if (!af_harness.cfg.no_known) {
        af_harness.known = af_known_create();
        af_status kst = af_harness.known ? AF_OK : af_error_set(&err, AF_ERR_NOMEM, "out of memory");
        if (kst == AF_OK) kst = af_known_load_repo(af_harness.known, NULL, &err);
        for (size_t i = 0; kst == AF_OK && i < af_harness.cfg.n_known; i++)
            kst = af_known_load(af_harness.known, af_harness.cfg.known[i], &err);
        if (kst != AF_OK) {
            fprintf(stderr, "attnfuzz harness: %s (ATTNFUZZ_KNOWN=0 runs without known bugs)\n", err.msg);
            exit(2);
        }
    }
    af_store_opts so = {.crashes_dir = af_harness.cfg.crashes, .no_minimize = af_harness.cfg.no_minimize,
                        .minimize_execs = af_harness.cfg.minimize_execs, .known = af_harness.known};
    af_harness.store = af_store_create(&so, &err);
    if (!af_harness.store) {
        fprintf(stderr, "attnfuzz harness: %s\n", err.msg);
        exit(2);
    }
    af_harness.ready = true;
    af_harness.started = af_harness_now();
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
            "feedback %s%s%s; %zu known bugs\n",
            n ? checks : "(none)", nrel, af_harness.cfg.exec.sample_relations ? " (one sampled per backend)" : "",
            af_harness.cfg.crashes, af_harness.cfg.max_flops, af_feedback_mode(),
            af_harness.cfg.no_minimize ? "; findings stored as found" : "; findings minimized",
            af_harness.cfg.abort_on_finding ? "; abort on finding" : "", af_known_count(af_harness.known));
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    af_fuzz_config_fix_blas(*argv);
    af_fuzz_config_take_flags(argc, *argv);
    af_harness_setup();
    return 0;
}

void af_harness_print_findings(const char *name) {
    for (size_t i = 0; i < af_harness.last.findings; i++) {
        const af_finding *f = &af_harness.found[i];
        char as[48] = "";
        if (af_harness.signed_as[i] && af_harness.signed_as[i] != f->signature)
            snprintf(as, sizeof as, " (minimized: %016llx)", (unsigned long long)af_harness.signed_as[i]);
        fprintf(stderr, "%s: %s %s signature %016llx%s: max_abs %.3g, %.3g x tolerance%s%s\n", name,
                af_kind_names[f->kind], f->who, (unsigned long long)f->signature, as, f->result.m.max_abs,
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
    for (size_t i = 0; i < out->findings; i++) af_harness.found[i] = *af_exec_finding(x, i);
    af_harness.sigs.execs++;
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev = 0;
    if (af_store_findings(af_harness.store, x, &af_harness.sigs, 0.0, ev, &nev, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz harness: storing a finding failed: %s\n", err.msg);
        abort();
    }
    for (size_t i = 0; i < out->findings; i++)
        af_harness.signed_as[i] = i < nev && ev[i].known < 0 ? af_harness.sigs.sigs[ev[i].entry].signature : 0;
    for (size_t i = 0; i < nev; i++) {
        if (!ev[i].stored) continue;
        if (ev[i].known >= 0) { /* a known bug's exemplar */
            const af_known_stat *k = &af_harness.sigs.known[ev[i].entry];
            if (!af_harness.cfg.quiet) fprintf(stderr, "attnfuzz: KNOWN %s -> %s\n", k->id, k->bundle);
            continue;
        }
        const af_signature_entry *e = &af_harness.sigs.sigs[ev[i].entry];
        out->new_bundles++;
        if (!af_harness.cfg.quiet)
            fprintf(stderr, "attnfuzz: NEW %s %s -> %s\n", af_kind_names[e->kind], e->who, e->bundle);
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
