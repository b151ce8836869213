/* test_store.c - the store step (store.h) against mutant:causal_top_left, whose bug shows
 * whenever Sq != Sk under a bottom-right causal mask:
 *   - a finding is minimized and stored once under the signature of its minimized case,
 *     recomputed here from the bundle's case.json (af_signature on what was read back);
 *   - the same case again, and larger cases with other incidental features (batch, heads,
 *     f16, another layout), are counted under that signature, not stored;
 *   - without minimization the f16 case signs differently (so the check above could
 *     fail), and its bundle holds the case as found;
 *   - a NaN on a planted value that the wrong diagonal unmasks is signed on the finite
 *     twin: the plain case's diverge;
 *   - minimizing runs only the failing check: a correct backend beside the mutant (a test
 *     backend that counts its runs) runs once, for the execution that found the bug, not
 *     once per minimizing step; as one side of a pair with the mutant it runs every step;
 *   - nothing runs a case again to hold a finding: beside the mutant's finding (minimized)
 *     a backend that crashes on every case (a crash is stored as found) has its bundle
 *     written from the execution that found it - it ran once, and the executor still holds
 *     that execution (its case, both findings, one case run) after the store step;
 *   - the minimizer beside (opts.beside): a new finding is handed to the store's thread and
 *     signed later; meanwhile the executor runs other cases (its own case count grows),
 *     repeats of it are counted with it, and drained it signs as minimizing at once does
 *     (the same signature, a bundle that reads back as minimized), counted once per
 *     finding, first_exec that of the execution that found it;
 *   - the shared record: a second store on the same crashes directory (another job, a
 *     later campaign) reads the first one's alias and minimizes nothing;
 *   - a finding of a bug already minimized, with other incidental features, takes one
 *     execution: the minimized case is a pattern (all it lacks removed at once), which lands
 *     on the known signature (a fresh store spends dozens on the same finding);
 *   - the budget: with none left the finding is stored as found (case.json says so) and
 *     queued; af_store_finish minimizes it to the signature minimizing at once gives,
 *     replaces it, records the alias; a minimization the budget cuts short is queued with
 *     its progress and finished later; after the deadline nothing is minimized. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/store.h"
#include "backends/ref.h"

/* --- counting test backends: the reference, rounded to f32, and a count of runs ------- */

static unsigned count_a, count_b;

typedef struct {
    af_scratch ws;
    double *buf;
    size_t cap;
    unsigned *runs;
} counting;

static af_status counting_create(unsigned *runs, void **state) {
    counting *c = calloc(1, sizeof *c);
    c->runs = runs;
    *state = c;
    return AF_OK;
}
static af_status counting_create_a(const char *args, void **state, af_error *err) {
    (void)args;
    (void)err;
    return counting_create(&count_a, state);
}
static af_status counting_create_b(const char *args, void **state, af_error *err) {
    (void)args;
    (void)err;
    return counting_create(&count_b, state);
}
static void counting_destroy(void *state) {
    counting *c = state;
    af_scratch_release(&c->ws);
    free(c->buf);
    free(c);
}
static af_status counting_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    counting *c = state;
    (*c->runs)++;
    size_t n = af_tensor_numel(out);
    if (n > c->cap) {
        free(c->buf);
        c->buf = malloc(n * sizeof *c->buf);
        c->cap = n;
    }
    af_ref_opts opts = {0};
    af_status st = af_ref_attention(in, &in->qv, &in->kv, &in->vv, &opts, c->buf, NULL, &c->ws, err);
    float *o = out->data;
    for (size_t e = 0; e < n; e++) o[e] = (float)c->buf[e];
    return st;
}
#define COUNTING_VT(NAME, CREATE)                                                                      \
    {.name = NAME, .version = "0", .summary = "test only: the reference, counting its runs", .caps = AF_CAP_ALL, \
     .layouts = AF_LAYOUTS_ALL, .out_dtype = AF_F32, .create = CREATE, .destroy = counting_destroy,             \
     .run = counting_run}
static const af_backend_vtable counting_a_vt = COUNTING_VT("test:count_a", counting_create_a);
static const af_backend_vtable counting_b_vt = COUNTING_VT("test:count_b", counting_create_b);

/* A backend that crashes on every case, counting its runs. */
static unsigned count_crash;
static af_status crashing_create(const char *args, void **state, af_error *err) {
    (void)args;
    (void)err;
    *state = NULL;
    return AF_OK;
}
static void crashing_destroy(void *state) { (void)state; }
static af_status crashing_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    (void)state;
    (void)in;
    (void)out;
    count_crash++;
    return af_error_set(err, AF_ERR_CRASH, "test: crashed");
}
static const af_backend_vtable crashing_vt = {.name = "test:crash", .version = "0",
                                              .summary = "test only: crashes on every case, counting its runs",
                                              .caps = AF_CAP_ALL, .layouts = AF_LAYOUTS_ALL, .out_dtype = AF_F32,
                                              .create = crashing_create, .destroy = crashing_destroy,
                                              .run = crashing_run};

static char af_tmp[256];

static size_t count_dirs(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static af_case diverging_case(uint32_t batch, uint32_t heads, af_dtype dt, af_layout layout) {
    af_case c;
    af_case_default(&c);
    c.batch = batch;
    c.q_heads = c.kv_heads = heads;
    c.q_len = 6;
    c.kv_len = 11;
    c.head_dim = c.v_head_dim = 16;
    c.dtype = dt;
    c.causal = true;
    c.diag = AF_DIAG_BOTTOM_RIGHT;
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        c.t[t].layout = layout;
        c.t[t].seed = 11u + (uint32_t)t;
    }
    af_case_repair(&c, 0);
    return c;
}

static af_exec *mutant_exec(void) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[0] = "mutant:causal_top_left";
    cfg.n_backends = 1;
    af_error err = {0};
    af_exec *x = af_exec_create(&cfg, &err);
    assert_non_null(x);
    return x;
}

static void run_and_store(af_exec *x, af_store *st, af_campaign_stats *s, af_case c, af_store_event *ev, size_t *nev) {
    af_error err = {0};
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    assert_true(af_exec_finding_count(x) > 0);
    s->execs++;
    assert_int_equal(af_store_findings(st, x, s, 0.0, ev, nev, &err), AF_OK);
    assert_int_equal(*nev, 1);
}

static void test_one_bug_one_bundle(void **state) {
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/min", af_tmp);
    af_store_opts o = {.crashes_dir = dir};
    af_error err = {0};
    af_store *st = af_store_create(&o, &err);
    assert_non_null(st);
    af_exec *x = mutant_exec();
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev;

    af_case first = diverging_case(1, 1, AF_F32, AF_LAYOUT_BHSD);
    run_and_store(x, st, &s, first, ev, &nev);
    assert_true(ev[0].first && ev[0].stored);
    assert_true(s.minimize_execs > 0);
    const af_signature_entry *e = &s.sigs[ev[0].entry];
    uint64_t sig = e->signature;
    af_kind kind = e->kind;
    assert_int_equal(count_dirs(dir), 1);

    /* the bundle's case, read back, signs as the store said; it is smaller than found */
    af_bundle *b;
    assert_int_equal(af_bundle_read(e->bundle, &b, &err), AF_OK);
    const af_case *m = af_bundle_case(b);
    assert_true(af_signature(kind, "mutant:causal_top_left", m) == sig);
    assert_true(af_bundle_signature(b) == sig);
    assert_true((uint64_t)m->q_len * m->kv_len * m->head_dim < 6u * 11u * 16u);
    char name[64];
    af_bundle_name(kind, sig, name, sizeof name);
    assert_non_null(strstr(e->bundle, name));
    af_bundle_free(b);

    /* repeats and larger cases of the same bug: counted, nothing new stored */
    af_case again[4] = {first, diverging_case(2, 3, AF_F32, AF_LAYOUT_BHSD), diverging_case(1, 2, AF_F16, AF_LAYOUT_BHSD),
                        diverging_case(1, 1, AF_F32, AF_LAYOUT_BSHD)};
    uint64_t raw_other = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(af_exec_run_case(x, &again[i], &err), AF_OK);
        if (i == 2) raw_other = af_exec_finding(x, 0)->signature; /* f16: another feature set */
        s.execs++;
        assert_int_equal(af_store_findings(st, x, &s, 0.0, ev, &nev, &err), AF_OK);
        assert_int_equal(nev, 1);
        assert_false(ev[0].stored);
        assert_true(s.sigs[ev[0].entry].signature == sig);
    }
    assert_int_equal(s.n_sigs, 1);
    assert_int_equal(s.sigs[0].count, 5);
    assert_int_equal(count_dirs(dir), 1);
    assert_true(raw_other != sig);

    /* without minimization: the raw signature, the raw case */
    char dir2[300];
    snprintf(dir2, sizeof dir2, "%s/raw", af_tmp);
    af_store_opts o2 = {.crashes_dir = dir2, .no_minimize = true};
    af_store *st2 = af_store_create(&o2, &err);
    af_campaign_stats s2;
    memset(&s2, 0, sizeof s2);
    run_and_store(x, st2, &s2, again[2], ev, &nev);
    assert_true(ev[0].stored);
    assert_true(s2.sigs[0].signature == raw_other);
    assert_int_equal(s2.minimize_execs, 0);
    assert_int_equal(af_bundle_read(s2.sigs[0].bundle, &b, &err), AF_OK);
    assert_int_equal(af_bundle_case(b)->dtype, AF_F16);
    assert_int_equal(af_bundle_case(b)->q_heads, 2);
    af_bundle_free(b);

    af_campaign_stats_free(&s);
    af_campaign_stats_free(&s2);
    af_store_destroy(st);
    af_store_destroy(st2);
    af_store_destroy(NULL);
    af_exec_destroy(x);
}

/* A NaN found on planted non-finite values whose case fails without them too is signed
 * on that finite twin: the same signature and kind as the plain case's finding. */
static void test_finite_twin(void **state) {
    (void)state;
    af_error err = {0};
    af_exec *x = mutant_exec();
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev;
    uint64_t sigs[2];
    af_kind kinds[2];
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/twin%d", af_tmp, with_nan);
        af_store_opts o = {.crashes_dir = dir};
        af_store *st = af_store_create(&o, &err);
        assert_non_null(st);
        af_campaign_stats s;
        memset(&s, 0, sizeof s);
        af_case c = diverging_case(1, 1, AF_F32, AF_LAYOUT_BHSD);
        if (with_nan) {
            c.t[AF_K].special = AF_SPECIAL_NAN_LIVE;
            af_case_repair(&c, 0);
            assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
            assert_true(af_exec_finding_count(x) > 0);
            assert_int_not_equal(af_exec_finding(x, 0)->kind, AF_KIND_DIVERGE); /* the NaN shows first */
        }
        run_and_store(x, st, &s, c, ev, &nev);
        assert_true(ev[0].stored);
        sigs[with_nan] = s.sigs[ev[0].entry].signature;
        kinds[with_nan] = s.sigs[ev[0].entry].kind;
        af_bundle *b;
        assert_int_equal(af_bundle_read(s.sigs[ev[0].entry].bundle, &b, &err), AF_OK);
        for (int t = 0; t < AF_QKV_COUNT; t++) assert_int_equal(af_bundle_case(b)->t[t].special, AF_SPECIAL_NONE);
        af_bundle_free(b);
        af_campaign_stats_free(&s);
        af_store_destroy(st);
    }
    assert_int_equal(kinds[0], AF_KIND_DIVERGE);
    assert_int_equal(kinds[1], AF_KIND_DIVERGE);
    assert_true(sigs[0] == sigs[1]);
    af_exec_destroy(x);
}

/* Minimizing the mutant's finding runs the mutant (and the reference), never a backend of
 * another check; a pair runs both of its sides. */
static void test_only_the_failing_check_runs(void **state) {
    (void)state;
    af_error err = {0};
    for (int pair = 0; pair < 2; pair++) {
        af_exec_config cfg;
        memset(&cfg, 0, sizeof cfg);
        af_oracle_opts_default(&cfg.oracle);
        if (pair) {
            cfg.pairs[cfg.n_pairs++] = "mutant:causal_top_left,test:count_a";
            cfg.backends[cfg.n_backends++] = "test:count_b";
        } else {
            cfg.backends[cfg.n_backends++] = "mutant:causal_top_left";
            cfg.backends[cfg.n_backends++] = "test:count_a";
            cfg.backends[cfg.n_backends++] = "test:count_b";
        }
        af_exec *x = af_exec_create(&cfg, &err);
        assert_non_null(x);
        char dir[300];
        snprintf(dir, sizeof dir, "%s/only%d", af_tmp, pair);
        af_store_opts o = {.crashes_dir = dir};
        af_store *st = af_store_create(&o, &err);
        assert_non_null(st);
        af_campaign_stats s;
        memset(&s, 0, sizeof s);
        count_a = count_b = 0;
        af_store_event ev[AF_EXEC_MAX_CHECKS];
        size_t nev;
        run_and_store(x, st, &s, diverging_case(2, 3, AF_F32, AF_LAYOUT_BSHD), ev, &nev);
        assert_true(ev[0].stored);
        assert_string_equal(s.sigs[0].who, pair ? "mutant:causal_top_left,test:count_a" : "mutant:causal_top_left");
        assert_true(s.minimize_execs > 10);
        assert_int_equal(count_b, 1); /* the execution that found it, and nothing else */
        /* a pair's other side runs at each step of minimizing the pair */
        assert_int_equal(count_a, pair ? 1 + s.minimize_execs : 1);
        af_campaign_stats_free(&s);
        af_store_destroy(st);
        af_exec_destroy(x);
    }
}

/* A finding stored as found beside one minimized: its bundle comes from the record of the
 * execution that found it; the crashing backend runs once (the old store ran its check
 * again after minimizing the other finding, to hold the case as found). */
static void test_held_without_rerun(void **state) {
    (void)state;
    af_error err = {0};
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.backends[cfg.n_backends++] = "mutant:causal_top_left";
    cfg.backends[cfg.n_backends++] = "test:crash";
    af_exec *x = af_exec_create(&cfg, &err);
    assert_non_null(x);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/held", af_tmp);
    af_store_opts o = {.crashes_dir = dir};
    af_store *st = af_store_create(&o, &err);
    assert_non_null(st);
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    count_crash = 0;
    af_case c = diverging_case(2, 3, AF_F32, AF_LAYOUT_BSHD);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    assert_int_equal(af_exec_finding_count(x), 2);
    uint64_t raw_crash = af_exec_finding(x, 1)->signature;
    s.execs++;
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev = 0;
    assert_int_equal(af_store_findings(st, x, &s, 0.0, ev, &nev, &err), AF_OK);
    assert_int_equal(nev, 2);
    assert_true(s.minimize_execs > 0); /* the mutant's finding was minimized */
    assert_true(ev[0].stored && ev[1].stored);
    assert_int_equal(count_crash, 1);
    /* x still holds the execution that found both */
    assert_int_equal(af_exec_timing_of(x)->cases, 1);
    assert_int_equal(af_exec_finding_count(x), 2);
    assert_memory_equal(af_exec_case(x), &c, sizeof c);
    /* the crash's bundle: the case as found, under its raw signature */
    const af_signature_entry *e = &s.sigs[ev[1].entry];
    assert_int_equal(e->kind, AF_KIND_CRASH);
    assert_true(e->signature == raw_crash);
    af_bundle *b;
    assert_int_equal(af_bundle_read(e->bundle, &b, &err), AF_OK);
    assert_int_equal(af_bundle_case(b)->batch, 2);
    assert_int_equal(af_bundle_case(b)->q_heads, 3);
    af_bundle_free(b);
    /* and the mutant's: the minimized case, smaller */
    assert_int_equal(af_bundle_read(s.sigs[ev[0].entry].bundle, &b, &err), AF_OK);
    assert_true(af_bundle_case(b)->batch * af_bundle_case(b)->q_heads < 6);
    af_bundle_free(b);
    af_campaign_stats_free(&s);
    af_store_destroy(st);
    af_exec_destroy(x);
}

static uint64_t minimized_signature(af_exec *x, af_case c, const char *sub, uint64_t *execs);
static int bundle_minimized(const char *dir);

/* The minimizer beside: exploration goes on, the finding is signed when it is done. */
static void test_beside(void **state) {
    (void)state;
    af_error err = {0};
    af_exec *x = mutant_exec();
    af_case c = diverging_case(2, 3, AF_F32, AF_LAYOUT_BSHD);
    uint64_t want = minimized_signature(x, c, "beside-ref", NULL);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/beside", af_tmp);
    af_store_opts o = {.crashes_dir = dir, .beside = true};
    af_store *st = af_store_create(&o, &err);
    assert_non_null(st);
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    af_store_event ev[AF_STORE_EVENTS];
    size_t nev = 0;
    uint64_t cases0 = af_exec_timing_of(x)->cases;
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    s.execs = 7;
    assert_int_equal(af_store_findings(st, x, &s, 0.0, ev, &nev, &err), AF_OK);
    assert_int_equal(nev, 0); /* handed to the minimizer: no event yet */
    assert_int_equal(s.n_sigs, 0);
    assert_true(af_store_busy(st));
    /* exploration goes on: a passing case, and the same finding again */
    af_case ok = c;
    ok.causal = false;
    af_case_repair(&ok, 0);
    for (int i = 0; i < 3; i++) {
        const af_case *next = i == 1 ? &c : &ok;
        assert_int_equal(af_exec_run_case(x, next, &err), AF_OK);
        s.execs++;
        size_t n = 0;
        assert_int_equal(af_store_findings(st, x, &s, 0.0, ev + nev, &n, &err), AF_OK);
        nev += n;
    }
    assert_int_equal(af_exec_timing_of(x)->cases, cases0 + 4); /* only exploration's runs on x */
    while (af_store_busy(st)) {
        size_t n = 0;
        assert_int_equal(af_store_drain(st, x, &s, 0.0, ev + nev, &n, &err), AF_OK);
        nev += n;
    }
    assert_int_equal(nev, 1);
    assert_true(ev[0].first && ev[0].stored && !ev[0].unminimized);
    assert_int_equal(s.n_sigs, 1);
    assert_true(s.sigs[0].signature == want);
    assert_int_equal(s.sigs[0].count, 2);
    assert_int_equal(s.sigs[0].first_exec, 7);
    assert_true(s.minimize_execs > 0);
    assert_int_equal(bundle_minimized(s.sigs[0].bundle), 1);
    af_campaign_stats_free(&s);
    af_store_destroy(st);
    af_exec_destroy(x);
}

/* The signature minimizing `c` at once gives (a store of its own, no budget). */
static uint64_t minimized_signature(af_exec *x, af_case c, const char *sub, uint64_t *execs) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s", af_tmp, sub);
    af_store_opts o = {.crashes_dir = dir};
    af_error err = {0};
    af_store *st = af_store_create(&o, &err);
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev;
    run_and_store(x, st, &s, c, ev, &nev);
    assert_true(s.minimize_execs > 0 && !s.sigs[0].unminimized);
    uint64_t sig = s.sigs[0].signature;
    if (execs) *execs = s.minimize_execs;
    af_campaign_stats_free(&s);
    af_store_destroy(st);
    return sig;
}

static int bundle_minimized(const char *dir) {
    af_bundle *b = NULL;
    af_error err = {0};
    assert_int_equal(af_bundle_read(dir, &b, &err), AF_OK);
    int m = af_bundle_minimized(b);
    af_bundle_free(b);
    return m;
}

/* A second store on the same crashes directory reads the alias the first one recorded. */
static void test_shared_record(void **state) {
    (void)state;
    af_exec *x = mutant_exec();
    af_case c = diverging_case(2, 2, AF_F16, AF_LAYOUT_SBHD);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/shared", af_tmp);
    af_store_opts o = {.crashes_dir = dir};
    af_error err = {0};
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev;
    uint64_t sig[2];
    for (int k = 0; k < 2; k++) {
        af_store *st = af_store_create(&o, &err);
        af_campaign_stats s;
        memset(&s, 0, sizeof s);
        run_and_store(x, st, &s, c, ev, &nev);
        sig[k] = s.sigs[ev[0].entry].signature;
        assert_false(s.sigs[0].unminimized);
        if (k == 0) {
            assert_true(ev[0].stored && s.minimize_execs > 10 && s.aliases_read == 0);
        } else { /* nothing minimized: the alias read, the bundle there already */
            assert_false(ev[0].stored);
            assert_true(s.sigs[0].stored_elsewhere);
            assert_int_equal(s.minimize_execs, 0);
            assert_int_equal(s.aliases_read, 1);
        }
        af_campaign_stats_free(&s);
        af_store_destroy(st);
    }
    assert_true(sig[0] == sig[1]);
    assert_int_equal(count_dirs(dir), 1); /* the bundle (.minimized is hidden) */
    af_exec_destroy(x);
}

static void test_patterns(void **state) {
    (void)state;
    af_exec *x = mutant_exec();
    af_case first = diverging_case(1, 1, AF_F32, AF_LAYOUT_BHSD), other = diverging_case(2, 3, AF_BF16, AF_LAYOUT_BSHD);
    other.t[AF_K].perm = 1;
    other.t[AF_V].pad = 3;
    af_case_repair(&other, 0);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/patterns", af_tmp);
    af_store_opts o = {.crashes_dir = dir};
    af_error err = {0};
    af_store *st = af_store_create(&o, &err);
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev;
    run_and_store(x, st, &s, first, ev, &nev);
    uint64_t sig = s.sigs[0].signature, before = s.minimize_execs;
    run_and_store(x, st, &s, other, ev, &nev);
    assert_true(s.sigs[ev[0].entry].signature == sig);
    assert_int_equal(s.n_sigs, 1);
    assert_int_equal(s.minimize_execs - before, 1); /* the pattern, which held */
    af_campaign_stats_free(&s);
    af_store_destroy(st);
    /* the same finding in a store without that pattern: minimized step by step */
    uint64_t execs = 0, alone = minimized_signature(x, other, "patterns-alone", &execs);
    assert_true(alone == sig);
    assert_true(execs > 20);
    af_exec_destroy(x);
}

static void test_budget(void **state) {
    (void)state;
    af_exec *x = mutant_exec();
    af_case c = diverging_case(2, 3, AF_F16, AF_LAYOUT_BSHD);
    uint64_t want = minimized_signature(x, c, "budget-ref", NULL);
    char dir[300], path[600];
    snprintf(dir, sizeof dir, "%s/budget", af_tmp);
    af_store_opts o = {.crashes_dir = dir, .minimize_share = 0.1};
    af_error err = {0};
    af_store *st = af_store_create(&o, &err);
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev;

    /* no time has passed: no budget; stored as found, queued */
    run_and_store(x, st, &s, c, ev, &nev);
    assert_true(ev[0].first && ev[0].stored && ev[0].unminimized);
    uint64_t raw = s.sigs[0].signature;
    assert_true(raw != want);
    assert_true(s.sigs[0].unminimized);
    assert_int_equal(s.minimize_execs, 0);
    assert_int_equal(s.stored_unminimized, 1);
    assert_int_equal(af_store_queued(st), 1);
    snprintf(path, sizeof path, "%s", s.sigs[0].bundle);
    assert_int_equal(bundle_minimized(path), -1);
    /* a repeat: counted there, still no budget */
    run_and_store(x, st, &s, c, ev, &nev);
    assert_false(ev[0].first);
    assert_true(ev[0].unminimized);
    assert_int_equal(s.sigs[0].count, 2);

    /* the end pass: minimized to what minimizing at once gives, the bundle as found moved */
    assert_int_equal(af_store_finish(st, x, &s, 0, &err), AF_OK);
    assert_int_equal(af_store_queued(st), 0);
    assert_int_equal(s.n_sigs, 1);
    assert_true(s.sigs[0].signature == want);
    assert_false(s.sigs[0].unminimized);
    assert_int_equal(s.sigs[0].count, 2);
    assert_int_equal(s.minimized_later, 1);
    assert_true(s.minimize_execs > 10 && s.minimize_seconds > 0 && s.minimize_end_seconds > 0);
    assert_int_equal(bundle_minimized(s.sigs[0].bundle), 1);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    char raw_name[64], moved[700];
    af_bundle_name(AF_KIND_DIVERGE, raw, raw_name, sizeof raw_name);
    snprintf(moved, sizeof moved, "%s/.raw/%s", dir, raw_name);
    assert_int_equal(bundle_minimized(moved), -1);
    assert_int_equal(count_dirs(dir), 1); /* the minimized bundle (beside .minimized, .raw) */
    uint64_t as;
    af_kind kind;
    assert_true(af_store_alias(st, raw, &as, &kind) && as == want);
    /* after it: the same finding maps straight to the minimized signature */
    uint64_t execs = s.minimize_execs;
    run_and_store(x, st, &s, c, ev, &nev);
    assert_true(s.sigs[ev[0].entry].signature == want);
    assert_int_equal(s.sigs[0].count, 3);
    assert_int_equal(s.minimize_execs, execs);

    /* time has passed (1000 s, nothing minimized in them): the budget allows it at once */
    af_case other = diverging_case(1, 2, AF_BF16, AF_LAYOUT_BHSD);
    assert_int_equal(af_exec_run_case(x, &other, &err), AF_OK);
    s.execs++;
    assert_int_equal(af_store_findings(st, x, &s, 1000.0, ev, &nev, &err), AF_OK);
    assert_false(ev[0].unminimized);
    assert_true(s.minimize_execs > execs);
    assert_int_equal(s.stored_unminimized, 1);
    af_campaign_stats_free(&s);
    af_store_destroy(st);

    /* a budget of a microsecond cuts minimizing short: queued with its progress, which
     * the end pass finishes to the same signature */
    snprintf(dir, sizeof dir, "%s/budget-cut", af_tmp);
    af_store *cut = af_store_create(&o, &err);
    memset(&s, 0, sizeof s);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    s.execs++;
    assert_int_equal(af_store_findings(cut, x, &s, 1e-5, ev, &nev, &err), AF_OK);
    assert_true(ev[0].unminimized && s.minimize_execs > 0);
    assert_true(s.sigs[0].signature == raw);
    assert_int_equal(af_store_finish(cut, x, &s, 0, &err), AF_OK);
    assert_true(s.sigs[0].signature == want);
    af_campaign_stats_free(&s);
    af_store_destroy(cut);

    /* queued, then seen again a second later with budget to spare: minimized then, while
     * the campaign runs (the event of the repeat names the minimized signature) */
    snprintf(dir, sizeof dir, "%s/budget-recur", af_tmp);
    af_store *recur = af_store_create(&o, &err);
    memset(&s, 0, sizeof s);
    run_and_store(x, recur, &s, c, ev, &nev);
    assert_true(ev[0].unminimized);
    struct timespec pause = {1, 100000000}; /* a queued finding is looked at once a second */
    nanosleep(&pause, NULL);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    s.execs++;
    assert_int_equal(af_store_findings(recur, x, &s, 1000.0, ev, &nev, &err), AF_OK);
    assert_int_equal(nev, 1);
    assert_false(ev[0].unminimized);
    assert_true(s.sigs[ev[0].entry].signature == want);
    assert_int_equal(s.sigs[ev[0].entry].count, 2);
    assert_int_equal(s.n_sigs, 1);
    assert_int_equal(s.minimized_later, 1);
    assert_int_equal(af_store_queued(recur), 0);
    af_campaign_stats_free(&s);
    af_store_destroy(recur);

    /* past the deadline: nothing is minimized, not even at the end */
    snprintf(dir, sizeof dir, "%s/budget-late", af_tmp);
    af_store_opts late = {.crashes_dir = dir, .deadline = 1e-9};
    af_store *st3 = af_store_create(&late, &err);
    memset(&s, 0, sizeof s);
    run_and_store(x, st3, &s, c, ev, &nev);
    assert_true(ev[0].unminimized);
    assert_int_equal(s.minimize_execs, 0);
    assert_int_equal(af_store_finish(st3, x, &s, 1e-9, &err), AF_OK);
    assert_int_equal(af_store_queued(st3), 1);
    assert_true(s.sigs[0].signature == raw && s.sigs[0].unminimized);
    af_campaign_stats_free(&s);
    af_store_destroy(st3);
    af_exec_destroy(x);
}

int main(void) {
    snprintf(af_tmp, sizeof af_tmp, "/tmp/attnfuzz-test-store-XXXXXX");
    if (!mkdtemp(af_tmp)) return 1;
    af_error err;
    if (af_backend_register(&counting_a_vt, &err) != AF_OK || af_backend_register(&counting_b_vt, &err) != AF_OK ||
        af_backend_register(&crashing_vt, &err) != AF_OK)
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_bug_one_bundle), cmocka_unit_test(test_finite_twin),
                                       cmocka_unit_test(test_only_the_failing_check_runs),
                                       cmocka_unit_test(test_held_without_rerun), cmocka_unit_test(test_beside),
                                       cmocka_unit_test(test_shared_record), cmocka_unit_test(test_patterns),
                                       cmocka_unit_test(test_budget)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", af_tmp);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
