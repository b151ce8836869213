/* loop.c - one campaign process (see loop.h), a sequence of stages over batches of cases:
 *
 *   draw     the next batch: seeds, a compiled structure's new values, or draws of the
 *            strategy (draw.h), each with the backends it leaves out for known bugs
 *            (known_gate.h)
 *   submit   the batch to the executor (exec.h): pipelined, the batch in flight is collected
 *   collect  first and this one sent, so the workers compute it while this process checks
 *   check    and stores the one before
 *   observe  per case checked: the counts, the structures kept for compile-aware reuse
 *            (kept.h), the feedback pool (pool.h)
 *   store    its findings (store.h: known bugs, minimizing, signing, bundles)
 *   report   the status line and the stats file (report.h, stats.h)
 *
 * Each new signature is written as a bundle at once; repeats only count. */
#include "loop.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/case_key.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/store.h"
#include "clock.h"
#include "draw.h"
#include "kept.h"
#include "known_gate.h"
#include "pool.h"
#include "report.h"

#define AF_REVALUE_TRIES 4   /* value draws of a batch's structure before a known bug's cuts it short */
#define AF_COMPILE_SHARE 0.5 /* compile time above this share of the wall: reuse structures */

/* The state of one process's loop: what the stages share. */
typedef struct af_loop {
    const af_campaign_opts *o;
    af_campaign_stats *s;
    af_exec *x;
    af_store *store;
    af_pool *pool;
    af_rng rng;
    af_known_gate gate;
    af_draw draw;
    double backward; /* share of generated cases that ask for gradients */
    /* the seeds run once as they are before any is mutated (as libFuzzer and AFL++ run
     * their input corpus first): a seed that fails fails at once, a bundle kept as a seed
     * is checked again. Where a backend compiles, each seed is a structure to compile (a
     * corpus of 8 bundles took 117 s of torch.compile), so a seed waits while compiling is
     * over its share, as any new structure does: the seeds spread over the first minutes
     * and value draws of the structures compiled run between them */
    size_t seeds, seeds_run;
    /* compile-aware scheduling: while the backends' compiling takes more than
     * AF_COMPILE_SHARE of this process's time, the next batch keeps the structure (the
     * fields of the compile key) of one of the last that compiled and draws new values */
    uint32_t key;
    af_kept *kept;
    double compiled; /* seconds, this process */
    /* batches: as many cases as every batching worker takes and --batch asks, within
     * batch_bytes of tensors; the cases of a batch share a compile key when some backend
     * compiles (a compiled structure then serves the whole batch) */
    size_t bmax, bbytes;
    /* pipelined batches (exec.h): the workers compute one batch while this process checks
     * and stores the one before and draws and generates the next; two case arrays, the
     * batch in flight's and the next one's */
    bool pipe;
    af_case *bank[2];
    bool seeded[2][AF_EXEC_MAX_BATCH]; /* per case of each bank: a seed (already in the pool) */
    size_t flying;                     /* the batch in flight: its cases, bank[fly][0 .. flying) */
    unsigned fly;
    uint32_t skips[AF_EXEC_MAX_BATCH]; /* per case: the backends left out for their known bugs */
    /* the edges distribution (--edges): its options (the draw's), each case's edge fields
     * per bank, and per check what its backend refused of them (case.h af_edge_tally) */
    af_gen_edges_opts edges;
    uint8_t edge_fields[2][AF_EXEC_MAX_BATCH];
    af_edge_tally *tally; /* ntally entries: the checks of the executor */
    size_t ntally;
    /* reporting */
    bool status, tty;
    double start, last_status, last_stats, last_time;
    bool new_sig; /* a signature not yet in the stats file a --jobs parent reads */
    char last[256];
} af_loop;

/* The share of generated cases that ask for gradients (af_campaign_opts.backward). */
static double af_loop_backward_share(const af_campaign_opts *o, const af_exec *x) {
    if (o->backward >= 0.0) return o->backward > 1.0 ? 1.0 : o->backward;
    for (size_t k = 0; k < af_exec_backend_count(x); k++)
        if (af_backend_caps(af_exec_backend_at(x, k)) & AF_CAP_BACKWARD) return 1.0 / 3.0;
    return 0.0;
}

/* The serving share: --serving, or AF_SERVING_AUTO when a worker or target declares a
 * serving capability (the built-ins run serving cases when asked with --serving). */
static double af_loop_serving_share(const af_campaign_opts *o, const af_exec *x) {
    if (o->serving >= 0.0) return o->serving > 1.0 ? 1.0 : o->serving;
    for (size_t k = 0; k < af_exec_backend_count(x); k++) {
        const af_backend *be = af_exec_backend_at(x, k);
        if (af_backend_ext_of(be) && (af_backend_caps(be) & AF_CAP_SERVING)) return AF_SERVING_AUTO;
    }
    return 0.0;
}

/* The FP8 share: --fp8, or AF_FP8_AUTO when a worker or target declares an FP8 format. */
static double af_loop_fp8_share(const af_campaign_opts *o, const af_exec *x) {
    if (o->fp8 >= 0.0) return o->fp8 > 1.0 ? 1.0 : o->fp8;
    for (size_t k = 0; k < af_exec_backend_count(x); k++) {
        const af_backend *be = af_exec_backend_at(x, k);
        if (af_backend_ext_of(be) && (af_backend_caps(be) & AF_CAP_FP8)) return AF_FP8_AUTO;
    }
    return 0.0;
}

/* Opens the executor, the store, the pool (with --corpus), the gate and the banks. On an
 * error what was opened stays for af_loop_close. */
static af_status af_loop_open(af_loop *L, const af_campaign_opts *o, af_campaign_stats *s, bool status,
                              af_error *err) {
    memset(L, 0, sizeof *L);
    L->o = o;
    L->s = s;
    L->x = af_exec_create(&o->exec, err);
    if (!L->x) return err ? err->code : AF_ERR_INVALID;
    L->pool = af_calloc(1, sizeof *L->pool);
    if (!L->pool) return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    af_rng_init(&L->rng, o->seed, af_shard_stream(&o->shard)); /* disjoint across shards (shard.h) */
    af_store_opts so = {.crashes_dir = o->crashes_dir, .no_minimize = o->no_minimize,
                         .minimize_execs = o->minimize_execs, .minimize_share = o->minimize_share,
                         .deadline = o->seconds > 0 ? af_now() + o->seconds : 0, .known = o->known,
                         .beside = true};
    L->store = af_store_create(&so, err);
    if (!L->store) return AF_ERR_NOMEM;
    if (o->corpus_dir) AF_TRY(af_pool_load_corpus(L->pool, o->corpus_dir, o->exec.budget, &L->rng, err));
    AF_TRY(af_known_gate_init(&L->gate, o->known, L->x, o->known_fault_gap, err));
    L->seeds = L->pool->n;
    L->backward = af_loop_backward_share(o, L->x);
    L->edges.share = o->edges;
    L->ntally = af_exec_check_count(L->x);
    L->tally = af_calloc(L->ntally + 1, sizeof *L->tally);
    if (!L->tally) return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    L->draw = (af_draw){o, L->pool, &L->rng, L->x, L->store, &L->gate, s, o->max_flops > 0 ? o->max_flops : 2e7,
                        af_loop_serving_share(o, L->x), af_loop_fp8_share(o, L->x), &L->edges};
    L->status = status;
    L->tty = status && isatty(STDERR_FILENO);
    L->key = af_exec_compile_key(L->x);
    L->kept = af_calloc(1, sizeof *L->kept);
    L->bmax = o->batch > 1 ? o->batch : 1;
    if (L->bmax > AF_EXEC_MAX_BATCH) L->bmax = AF_EXEC_MAX_BATCH;
    if (L->bmax > 1 && af_exec_batch_max(L->x) < L->bmax) L->bmax = af_exec_batch_max(L->x);
    L->bbytes = o->batch_bytes ? o->batch_bytes : (size_t)256 << 20;
    L->pipe = L->bmax > 1 && !o->no_pipeline && af_exec_checks_parallel(L->x);
    L->bank[0] = af_calloc(L->bmax, sizeof(af_case));
    L->bank[1] = af_calloc(L->bmax, sizeof(af_case));
    if (!L->bank[0] || !L->bank[1] || !L->kept) return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    return AF_OK;
}

static void af_loop_close(af_loop *L) {
    af_free(L->bank[0]);
    af_free(L->bank[1]);
    af_free(L->kept);
    af_free(L->tally);
    af_known_gate_free(&L->gate);
    af_free(L->pool);
    af_store_destroy(L->store);
    af_exec_destroy(L->x);
}

/* --- draw ----------------------------------------------------------------------------- */

/* A new value draw of a compiled structure (the batch's first case's, or the kept
 * structure for a batch's first case); a draw that every backend leaves out for a known bug
 * is drawn again a few times (the bug may need the values it drew), so that the batch is
 * not cut short: each batch costs a round trip and, for cuDNN, a plan. A structure every
 * draw of which is left out is a known bug's: dropped from the kept ones (*reuse false);
 * returns false when the batch should end here (the next batch draws anew), else *c is
 * the case (for a first case, drawn anew in that event). */
static bool af_loop_draw_revalue(af_loop *L, const af_case *cases, size_t n, const af_case *structure, double share,
                                 bool *reuse, af_case *c, uint32_t *skip) {
    size_t why[AF_EXEC_MAX_BACKENDS];
    for (int tries = 0; tries < AF_REVALUE_TRIES; tries++) {
        *c = n == 0 ? *structure : cases[0];
        af_case_revalue(c, &L->rng, L->key, L->o->exec.budget);
        *skip = af_known_gate_skip(&L->gate, L->store, L->x, c, why);
        if (!*skip || af_known_gate_runs_unskipped(L->x, c, *skip)) break;
    }
    af_known_gate_count(&L->gate, L->s, *skip, why);
    if (*skip && !af_known_gate_runs_unskipped(L->x, c, *skip)) { /* the structure of a known bug */
        af_kept_drop(L->kept, af_case_key_hash(c, L->key));
        *reuse = false;
        if (n > 0) return false;
        af_draw_case(&L->draw, L->s->execs + L->flying, share, c, skip);
    }
    return true;
}

/* Draws the next batch into cases (L->skips, L->seeded for the bank it is in); returns its
 * size, 0 when stopping. */
static size_t af_loop_draw(af_loop *L, af_case *cases, bool stop) {
    const af_campaign_opts *o = L->o;
    af_campaign_stats *s = L->s;
    bool reuse = L->key && L->kept->n > 0 && L->compiled > AF_COMPILE_SHARE * s->elapsed;
    /* the batch's kind drawn with the backward share; with no kept structure of that
     * kind, a new structure of it (kept.h says why) */
    const af_case *structure = NULL;
    double share = L->backward;
    if (reuse) {
        bool grads = L->backward > 0.0 && af_rng_uniform(&L->rng) < L->backward;
        structure = af_kept_pick(L->kept, &L->rng, grads);
        reuse = structure != NULL;
        if (!reuse) share = grads ? 1.0 : 0.0;
    }
    size_t n = 0, bytes = 0;
    while (!stop && n < L->bmax && !(o->runs && s->execs + L->flying + n >= o->runs)) {
        af_case c;
        uint32_t skip = 0;
        uint8_t edge = 0; /* its edge fields: a generated case's */
        bool seed = L->seeds_run < L->seeds && !reuse;
        if (seed) {
            c = L->pool->cases[L->seeds_run++];
            size_t why[AF_EXEC_MAX_BACKENDS];
            skip = af_known_gate_skip(&L->gate, L->store, L->x, &c, why);
            af_known_gate_count(&L->gate, s, skip, why);
        } else if (reuse || (n > 0 && L->key)) {
            if (!af_loop_draw_revalue(L, cases, n, structure, share, &reuse, &c, &skip)) break;
        } else {
            af_draw_case(&L->draw, s->execs + L->flying + n, share, &c, &skip);
            edge = L->edges.fields;
        }
        size_t cb = af_case_tensor_bytes(&c);
        if (n > 0 && (bytes + cb > L->bbytes || (seed && L->key && af_case_key_hash(&c, L->key) !=
                                                                         af_case_key_hash(&cases[0], L->key)))) {
            if (seed) L->seeds_run--; /* the next batch runs it */
            break;
        }
        L->skips[n] = skip;
        L->seeded[L->fly ^ 1][n] = seed;
        L->edge_fields[L->fly ^ 1][n] = edge;
        cases[n++] = c;
        bytes += cb;
    }
    return n;
}

/* --- submit, collect, check --------------------------------------------------------------- */

/* The batch drawn (cases, n) to the executor. Not pipelined: it runs whole here (a batch of
 * one as a single execution). Pipelined: it is sent, the one before having been collected. */
static af_status af_loop_submit(af_loop *L, const af_case *cases, size_t n, af_error *err) {
    if (!L->pipe && n == 1) {
        af_exec_skip_next(L->x, L->skips[0]);
        return af_exec_run_case(L->x, &cases[0], err);
    }
    if (!L->pipe) return af_exec_run_batch(L->x, cases, L->skips, n, L->o->threads, err);
    return n ? af_exec_batch_send(L->x, cases, L->skips, n, L->o->threads, err) : AF_OK;
}

/* Runs the batch drawn into *cases (*n of them): submit, collect, check. On return *cases
 * and *n are the batch checked, to observe and store: the same one, or, pipelined, the one
 * that was in flight (none the first time), this one now in flight. */
static af_status af_loop_execute(af_loop *L, af_case **cases, size_t *n, af_error *err) {
    if (!L->pipe) return af_loop_submit(L, *cases, *n, err);
    /* the batch in flight collected, this one sent, then the one collected checked and
     * stored while the workers compute this one */
    af_status st = af_exec_batch_collect(L->x, err);
    if (st == AF_OK) st = af_loop_submit(L, *cases, *n, err);
    if (st == AF_OK && L->flying) st = af_exec_batch_check(L->x, L->o->threads, err);
    size_t done = L->flying;
    L->flying = *n;
    L->fly ^= 1;
    *cases = L->bank[L->fly ^ 1]; /* the batch to store: the one checked */
    *n = done;
    return st;
}

/* --- observe ------------------------------------------------------------------------------ */

/* Case cp, the one the executor has selected, checked: its counts, the compiled structures
 * kept, the feedback pool. seed: it is a seed (in the pool already). */
static void af_loop_observe(af_loop *L, const af_case *cp, bool seed) {
    af_campaign_stats *s = L->s;
    const af_exec *x = L->x;
    s->execs++;
    s->backward_execs += cp->bwd.grads != 0;
    s->grads_unjudged = af_exec_grads_unjudged(x);
    double cs = af_exec_compile_seconds(x);
    L->compiled += cs;
    s->compile_seconds += cs;
    /* one pass over the checks: did any run, and did any crash, hang or fail (an error: its
     * build, most often)? A structure refused after all, or one that faulted, is not kept
     * for more value draws: each would cost a restart or a failed compile again for a
     * signature already counted (an H100 campaign kept one whose every draw crashed; a CPU
     * one drew a target's failing structure 519 times) */
    bool ran = false, faulted = false;
    double worst = 0.0;
    for (size_t i = 0; i < af_exec_check_count(x); i++) {
        if (!af_exec_check_ran(x, i)) continue;
        const af_result *r = af_exec_check_result(x, i);
        ran = true;
        faulted |= r->kind == AF_KIND_CRASH || r->kind == AF_KIND_TIMEOUT || r->kind == AF_KIND_ERROR;
        if (r->m.worst_ratio > worst) worst = r->m.worst_ratio;
    }
    s->skipped += !ran;
    if (L->key && (cs > 0 || !ran || faulted)) {
        uint64_t hash = af_case_key_hash(cp, L->key);
        if (cs > 0) af_kept_add(L->kept, cp, hash);
        if (!ran || faulted) af_kept_drop(L->kept, hash);
    }
    /* feedback: a new feature combination, or a new closeness-to-tolerance bucket. A seed is
     * in the pool already; a full pool replaces a random case, which must not be a seed
     * still to run */
    uint64_t bucket = worst > 0 ? (uint64_t)(fmin(log2(worst) + 40.0, 63.0)) : 0;
    if (!seed && (L->seeds_run >= L->seeds || L->pool->n < AF_POOL_MAX) &&
        af_pool_note(L->pool, af_case_features(cp) * 64 + bucket))
        af_pool_add(L->pool, cp, &L->rng);
}

/* --- store ------------------------------------------------------------------------------- */

/* The findings of the case the executor has selected, stored (store.h: minimizing a new one
 * on the store's thread beside this one, signed when it is done; drain: none, the
 * minimizer's work waited for); what is new goes to the console and marks the stats file
 * for rewriting. */
static af_status af_loop_store(af_loop *L, bool drain, af_error *err) {
    af_campaign_stats *s = L->s;
    af_store_event ev[AF_STORE_EVENTS];
    size_t nev = 0;
    af_status st;
    if (drain) {
        st = af_store_drain(L->store, L->x, s, af_now() - L->start, ev, &nev, err);
    } else {
        if (af_exec_finding_count(L->x)) s->findings_total++;
        st = af_store_findings(L->store, L->x, s, af_now() - L->start, ev, &nev, err);
    }
    for (size_t i = 0; i < nev; i++) {
        if (!af_report_event(s, &ev[i], L->status, L->tty, L->last, sizeof L->last)) continue;
        L->last_time = s->elapsed;
        L->new_sig |= ev[i].first;
    }
    return st;
}

/* --- report ------------------------------------------------------------------------------ */

/* The executor's time split and its workers' restarts, into this process's stats. */
static void af_loop_note_timing(af_campaign_stats *s, const af_exec *x) {
    const af_exec_timing *t = af_exec_timing_of(x);
    s->generate_seconds = t->generate_s;
    s->reference_seconds = t->reference_s;
    s->backend_seconds = t->backends_s;
    s->target_seconds = t->target_s;
    s->check_seconds = t->checks_s;
    s->relation_seconds = t->relations_s;
    s->determinism_seconds = t->determinism_s;
    s->determinism_runs = t->determinism_runs;
    s->restart_seconds = 0;
    s->worker_restarts = 0;
    for (size_t k = 0; k < af_exec_backend_count(x); k++) {
        const af_backend_ext *e = af_backend_ext_of(af_exec_backend_at(x, k));
        if (!e) continue;
        s->restart_seconds += e->restart_s;
        s->worker_restarts += e->restarts;
    }
}

/* After a batch (at now): the timings, the status line once a second, and the stats file
 * once a second and at once after a new finding (progress for a --jobs parent or a merge of
 * shards, attnfuzz merge: a child killed next, by the OOM killer, still has it counted). */
static void af_loop_report(af_loop *L, double now) {
    af_campaign_stats *s = L->s;
    af_loop_note_timing(s, L->x);
    if (L->status && now - L->last_status >= 1.0) {
        char tail[300];
        snprintf(tail, sizeof tail, L->last[0] ? "%s %.0fs ago" : "%s", L->last, s->elapsed - L->last_time);
        af_report_status(s, L->o, tail, "", L->tty);
        L->last_status = now;
    }
    if (L->o->stats_path && (now - L->last_stats >= 1.0 || L->new_sig)) {
        L->new_sig = false;
        af_campaign_stats_write(s, L->o, L->o->stats_path, NULL); /* progress, not finished */
        L->last_stats = now;
    }
}

/* An edge case checked (fields: its edge fields; 0: not one): each check's backend refused it
 * or ran it; the field weights of the next draws raised for the fields some backend's
 * refusals cluster on (the most any backend asks). */
static void af_loop_observe_edges(af_loop *L, uint8_t fields) {
    if (!fields) return;
    memset(L->edges.weight, 0, sizeof L->edges.weight);
    for (size_t i = 0; i < af_exec_check_count(L->x) && i < L->ntally; i++) {
        af_edge_tally_note(&L->tally[i], fields, !af_exec_check_ran(L->x, i));
        af_edge_weights(&L->tally[i], L->edges.weight);
    }
}

/* --- the loop ---------------------------------------------------------------------------- */

/* Draw, submit, collect, check, observe, store, report until a limit or a stop. */
static af_status af_loop_run(af_loop *L, af_error *err) {
    const af_campaign_opts *o = L->o;
    af_campaign_stats *s = L->s;
    af_status st = AF_OK;
    while (st == AF_OK) {
        double now = af_now();
        s->elapsed = now - L->start;
        bool stop = af_campaign_interrupted() || (o->runs && s->execs + L->flying >= o->runs) ||
                    (o->seconds > 0 && s->elapsed >= o->seconds) || (o->max_findings && s->n_sigs >= o->max_findings);
        if (stop && !L->flying) break;
        af_case *cases = L->bank[L->fly ^ 1];
        size_t n = af_loop_draw(L, cases, stop);
        st = af_loop_execute(L, &cases, &n, err);
        if (st != AF_OK) break;
        const bool *seeded = L->seeded[L->fly ^ 1]; /* of the bank checked */
        s->batches += n > 0;
        s->seeds = L->seeds;
        s->seeds_run = L->seeds_run;
        for (size_t bi = 0; bi < n && st == AF_OK; bi++) {
            if (n > 1 || L->pipe) af_exec_select(L->x, bi, NULL);
            af_loop_observe(L, &cases[bi], seeded[bi]);
            af_loop_observe_edges(L, L->edge_fields[L->fly ^ 1][bi]);
            st = af_loop_store(L, false, err);
        }
        af_loop_report(L, now);
    }
    return st;
}

af_status af_campaign_loop(const af_campaign_opts *o, af_campaign_stats *s, bool status, af_error *err) {
    af_loop *L = af_calloc(1, sizeof *L);
    if (!L) return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    af_status st = af_loop_open(L, o, s, status, err);
    if (!L->x) { /* no executor: nothing ran */
        af_loop_close(L);
        af_free(L);
        return st;
    }
    L->start = L->last_status = L->last_stats = af_now();
    if (st == AF_OK) st = af_loop_run(L, err);
    /* the minimizer's findings signed (each bounded by the deadline and the budget) */
    while (af_store_busy(L->store) && st == AF_OK) st = af_loop_store(L, true, err);
    s->elapsed = af_now() - L->start;
    /* the end-of-campaign pass: what did not fit the minimization budget, within a grace
     * period (a stop or an error skips it: those findings stay stored as found) */
    if (st == AF_OK && af_store_queued(L->store) > 0 && !af_campaign_interrupted()) {
        double grace = af_campaign_minimize_grace(o, s->elapsed);
        if (status && grace > 0)
            fprintf(stderr, "%sminimizing %zu finding%s stored as found (at most %.0fs)\n", L->tty ? "\r\033[K" : "",
                    af_store_queued(L->store), af_store_queued(L->store) == 1 ? "" : "s", grace);
        if (grace > 0) st = af_store_finish(L->store, L->x, s, af_now() + grace, err);
    }
    if (status) af_report_status(s, o, L->last, "DONE", L->tty);
    af_loop_close(L);
    af_free(L);
    return st;
}
