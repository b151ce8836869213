/* test_known.c - known bugs as data (known.h) and their place in the store and the
 * campaign (store.h, campaign.h):
 *   - predicates: arithmetic, enums, lists, precedence; a finding matches an entry;
 *   - near misses stay findings: the same kind on another backend, the same backend with a
 *     feature outside the predicate, an error outside the fully masked rows for an entry
 *     about them, a message that is not the entry's;
 *   - loading errors name the file and the problem; a bad file leaves nothing loaded;
 *   - the store: a known bug's findings are counted, kept once as known-<id>, never
 *     minimized; without the entries the same findings are minimized and stored;
 *   - the campaign: hits per known bug in the stats (merged over --jobs), the generator
 *     leaves out part of a known bug's trigger cases but never all of them;
 *   - scope ("needs"): version specifiers compared per component, needs parsed and bad
 *     ones refused with the problem, in and out of scope on injected CPU flags and
 *     libraries, an entry out of scope never matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/campaign.h"
#include "attnfuzz/host.h"
#include "attnfuzz/known.h"
#include "attnfuzz/store.h"

static char af_tmp[256];

#define HEAD "{\"format\": \"attnfuzz-known\", \"version\": 1, \"entries\": ["
#define TAIL "]}"

static af_known *load(const char *text) {
    af_known *k = af_known_create();
    assert_non_null(k);
    af_error err = {0};
    if (af_known_load_text(k, text, strlen(text), "test.json", &err) != AF_OK) fail_msg("load: %s", err.msg);
    return k;
}

/* The load error of text, which must fail; its message must hold want. */
static void load_fails(const char *text, const char *want) {
    af_known *k = af_known_create();
    af_error err = {0};
    af_status st = af_known_load_text(k, text, strlen(text), "bad.json", &err);
    if (st != AF_ERR_FORMAT) fail_msg("loaded (%d) what should fail with \"%s\"", (int)st, want);
    if (!strstr(err.msg, "bad.json")) fail_msg("the message does not name the file: %s", err.msg);
    if (!strstr(err.msg, want)) fail_msg("the message \"%s\" does not say \"%s\"", err.msg, want);
    assert_int_equal(af_known_count(k), 0);
    af_known_destroy(k);
}

static af_case small_case(void) {
    af_case c;
    af_case_default(&c);
    c.q_len = 3;
    c.kv_len = 5;
    c.head_dim = c.v_head_dim = 8;
    return c;
}

/* A result whose n failing elements sit n_masked of them in fully masked rows. */
static af_result result_of(af_kind kind, size_t n, size_t n_masked, size_t n_nan_ref) {
    af_result r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    if (kind == AF_KIND_NAN_MISMATCH) {
        r.m.n_nan = n;
        r.m.n_nan_ref = n_nan_ref;
    } else {
        r.m.n_diverge = n;
    }
    r.m.n_fail_masked = n_masked;
    r.m.fail_score_max = n_masked == n ? -HUGE_VAL : 1.0;
    return r;
}

static long match_on(const af_known *k, af_kind kind, const char *who, const af_case *c, const af_result *r,
                     const char *msg, const char *tail, const char *tensor) {
    af_known_finding f = {kind, who, c, r, msg, tail, tensor, NULL, false};
    return af_known_match(k, &f);
}

static long match(const af_known *k, af_kind kind, const char *who, const af_case *c, const af_result *r,
                  const char *msg, const char *tail) {
    return match_on(k, kind, who, c, r, msg, tail, NULL);
}

static void test_predicates(void **state) {
    (void)state;
    af_known *k = load(HEAD
                       "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [\"diverge\"],"
                       " \"when\": [\"sq % 128 == 64\", \"dtype in [f16, bf16]\", \"!causal || diag != top_left\"]},"
                       "{\"id\": \"b\", \"class\": \"precision\", \"backends\": \"x\", \"kinds\": [\"diverge\"],"
                       " \"when\": \"-scale > 0.25 && abs(scale) < 2 * (1 + 1) || q.layout == bsd\"},"
                       "{\"id\": \"c\", \"class\": \"convention\", \"backends\": [\"x\"], \"kinds\": [\"diverge\"],"
                       " \"when\": \"v.align < 16 && v.row_stride == 15 && strided\"}" TAIL);
    assert_int_equal(af_known_count(k), 3);
    af_result r = result_of(AF_KIND_DIVERGE, 4, 0, 0);
    af_case c = small_case();
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), -1);
    c.q_len = 192, c.dtype = AF_BF16;
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), 0);
    c.causal = true, c.diag = AF_DIAG_TOP_LEFT;
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), -1);
    c.diag = AF_DIAG_BOTTOM_RIGHT;
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), 0);
    c = small_case();
    c.scale_set = true, c.scale = -0.5; /* -scale > 0.25 and |scale| < 4 */
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), 1);
    c.scale = -5.0;
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), -1);
    c.t[AF_Q].layout = AF_LAYOUT_BSD; /* the || binds loosest */
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), 1);
    /* V rows of 8 bf16 values padded by 7: a row stride of 15 elements, 30 bytes: 2-aligned */
    c = small_case();
    c.dtype = AF_BF16;
    c.t[AF_V].pad = 7;
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), 2);
    c.t[AF_V].pad = 8; /* 16 elements, 32 bytes */
    assert_int_equal(match(k, AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL), -1);
    af_known_destroy(k);
}

/* The entry shapes of corpus/findings: a masked-rows bug, a scale bug on a glob of
 * backends, a crash by its stderr. Each match, and its near misses. */
static void test_match_and_near_misses(void **state) {
    (void)state;
    af_known *k = load(HEAD
                       "{\"id\": \"rows\", \"class\": \"real_bug\", \"backends\": [\"target:torch/cuda_sdpa_cudnn\"],"
                       " \"kinds\": [\"diverge\"], \"symptom\": \"masked_only\"},"
                       "{\"id\": \"scale\", \"class\": \"real_bug\", \"backends\": [\"target:torch/cuda_sdpa_*\"],"
                       " \"kinds\": [\"nan_mismatch\"], \"when\": \"scale <= 0\", \"symptom\": \"n_nan_ref == 0\"},"
                       "{\"id\": \"crash\", \"class\": \"real_bug\", \"backends\": [\"target:jax/xla\"],"
                       " \"kinds\": [\"crash\"], \"when\": [\"dtype == bf16\", \"d == 1\", \"sk >= 64\"],"
                       " \"message\": [\"ynn_emitter\", \"kBitcast\"]}" TAIL);
    af_case c = small_case();
    af_result masked = result_of(AF_KIND_DIVERGE, 8, 8, 0), partly = result_of(AF_KIND_DIVERGE, 9, 8, 0);
    /* a match: diverge only in fully masked rows, on cuDNN */
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:torch/cuda_sdpa_cudnn", &c, &masked, NULL, NULL), 0);
    /* ... and as a side of a pair */
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:torch/cuda_sdpa_math,target:torch/cuda_sdpa_cudnn", &c, &masked,
                           NULL, NULL),
                     0);
    /* near misses: another backend; an error in a live row too; another kind; no result */
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:torch/cuda_sdpa_flash", &c, &masked, NULL, NULL), -1);
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:torch/cuda_sdpa_cudnn", &c, &partly, NULL, NULL), -1);
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/cuda_sdpa_cudnn", &c, &masked, NULL, NULL), -1);
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:torch/cuda_sdpa_cudnn", &c, NULL, NULL, NULL), -1);

    /* the glob covers every cuda_sdpa_ kernel; a positive scale is outside the predicate;
     * NaN where the reference is NaN and the output is not is another symptom */
    af_result nan = result_of(AF_KIND_NAN_MISMATCH, 4, 0, 0), nan_ref = result_of(AF_KIND_NAN_MISMATCH, 4, 0, 4);
    c.scale_set = true, c.scale = -0.5;
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/cuda_sdpa_flash", &c, &nan, NULL, NULL), 1);
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/cuda_sdpa_efficient", &c, &nan, NULL, NULL), 1);
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/sdpa_flash", &c, &nan, NULL, NULL), -1);
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/cuda_sdpa_flash", &c, &nan_ref, NULL, NULL), -1);
    c.scale = 0.5;
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/cuda_sdpa_flash", &c, &nan, NULL, NULL), -1);
    c.scale = 0.0;
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "target:torch/cuda_sdpa_flash", &c, &nan, NULL, NULL), 1);
    /* a relation's finding on that backend counts for it */
    assert_int_equal(match(k, AF_KIND_NAN_MISMATCH, "layout@target:torch/cuda_sdpa_flash", &c, &nan, NULL, NULL), 1);

    /* a crash by its stderr tail (or message); another crash of the same case is new */
    af_case big = small_case();
    big.dtype = AF_BF16, big.head_dim = big.v_head_dim = 1, big.q_len = big.kv_len = 64;
    const char *tail = "F1123 ynn_emitter.cc:201] Check failed: instr->opcode() == HloOpcode::kBitcast";
    assert_int_equal(match(k, AF_KIND_CRASH, "target:jax/xla", &big, NULL, "the worker was killed", tail), 2);
    assert_int_equal(match(k, AF_KIND_CRASH, "target:jax/xla", &big, NULL, "... kBitcast ...", NULL), 2);
    assert_int_equal(match(k, AF_KIND_CRASH, "target:jax/xla", &big, NULL, "killed by signal 11", "Segmentation"), -1);
    big.kv_len = 32;
    assert_int_equal(match(k, AF_KIND_CRASH, "target:jax/xla", &big, NULL, NULL, tail), -1);
    af_known_info info;
    af_known_info_of(k, 2, &info);
    assert_string_equal(info.id, "crash");
    assert_int_equal(info.cls, AF_KNOWN_REAL_BUG);
    assert_true(info.kinds == 1u << AF_KIND_CRASH);
    assert_int_equal(af_known_find(k, "scale"), 1);
    assert_int_equal(af_known_find(k, "nope"), -1);
    af_known_destroy(k);
}

/* The backward and serving parts of a case and the finding's tensor as predicate variables. */
static void test_backward_and_serving_vars(void **state) {
    (void)state;
    af_known *k = load(HEAD
                       "{\"id\": \"do-pad\", \"class\": \"real_bug\", \"backends\": [\"target:torch/cuda_sdpa_cudnn\"],"
                       " \"kinds\": [\"error\"], \"when\": [\"backward\", \"do.pad > 0\"]},"
                       "{\"id\": \"dv\", \"class\": \"real_bug\", \"backends\": [\"mutant:*\"],"
                       " \"kinds\": [\"diverge\"], \"symptom\": \"tensor in [dk, dv]\"},"
                       "{\"id\": \"pages\", \"class\": \"real_bug\", \"backends\": [\"target:jax/pallas_paged\"],"
                       " \"kinds\": [\"diverge\"], \"when\": [\"paged\", \"page_size < 16\", \"!sinks\"]}" TAIL);
    af_case c = small_case();
    const char *cudnn = "target:torch/cuda_sdpa_cudnn";
    assert_int_equal(match(k, AF_KIND_ERROR, cudnn, &c, NULL, "execute", NULL), -1); /* forward-only */
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DK | AF_GRAD_DV;
    af_case_repair(&c, 0);
    assert_int_equal(match(k, AF_KIND_ERROR, cudnn, &c, NULL, "execute", NULL), -1); /* a dense dO */
    c.bwd.dout.pad = 3;
    af_case_repair(&c, 0);
    assert_int_equal(match(k, AF_KIND_ERROR, cudnn, &c, NULL, "execute", NULL), 0);
    af_result r = result_of(AF_KIND_DIVERGE, 4, 0, 0);
    assert_int_equal(match_on(k, AF_KIND_DIVERGE, "mutant:bwd_gqa_no_sum", &c, &r, NULL, NULL, "dv"), 1);
    assert_int_equal(match_on(k, AF_KIND_DIVERGE, "mutant:bwd_gqa_no_sum", &c, &r, NULL, NULL, "dq"), -1);
    assert_int_equal(match_on(k, AF_KIND_DIVERGE, "mutant:bwd_gqa_no_sum", &c, &r, NULL, NULL, NULL), -1);
    af_case p = small_case();
    p.serve.forms = AF_SERVE_PAGED, p.serve.page_size = 8;
    af_case_repair(&p, 0);
    assert_true(p.serve.forms & AF_SERVE_PAGED);
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:jax/pallas_paged", &p, &r, NULL, NULL), 2);
    p.serve.forms |= AF_SERVE_SINKS;
    af_case_repair(&p, 0);
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:jax/pallas_paged", &p, &r, NULL, NULL), -1);
    assert_int_equal(match(k, AF_KIND_DIVERGE, "target:jax/pallas_paged", &c, &r, NULL, NULL), -1);
    af_known_destroy(k);
}

static void test_load_errors(void **state) {
    (void)state;
    load_fails("{\"format\": \"attnfuzz-known\", \"version\": 1, \"entries\": [", "not JSON");
    load_fails("{\"format\": \"attnfuzz-bundle\", \"version\": 1, \"entries\": []}", "not an attnfuzz-known file");
    load_fails("{\"format\": \"attnfuzz-known\", \"version\": 2, \"entries\": []}", "version 1");
    load_fails("{\"format\": \"attnfuzz-known\", \"version\": 1, \"entries\": [], \"extra\": 1}",
               "unknown field \"extra\"");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [], \"whne\": \"d\"}" TAIL,
               "unknown field \"whne\"");
    load_fails(HEAD "{\"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": []}" TAIL, "no \"id\"");
    load_fails(HEAD "{\"id\": \"A b\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": []}" TAIL,
               "may hold only a-z, 0-9 and -");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"bug\", \"backends\": [\"x\"], \"kinds\": []}" TAIL,
               "class \"bug\" is none of");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [], \"kinds\": []}" TAIL, "backends");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [\"nan\"]}" TAIL,
               "\"nan\" is no finding kind");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [], \"when\": \"sqq > 1\"}" TAIL,
               "unknown name sqq");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [],"
                    " \"when\": \"dtype == f61\"}" TAIL,
               "f61 is no value of dtype (its values: f32, f16, bf16)");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [],"
                    " \"when\": \"n_nan > 0\"}" TAIL,
               "n_nan is a symptom variable");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [], \"when\": \"(sq > 1\"}" TAIL,
               "expected )");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [], \"when\": \"sq > 1 1\"}" TAIL,
               "unexpected text");
    load_fails(HEAD "{\"id\": \"a\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": []},"
                    "{\"id\": \"a\", \"class\": \"precision\", \"backends\": [\"y\"], \"kinds\": []}" TAIL,
               "id a is also in");

    /* files: the path in the message; a file over the limit refused unread; one that is
     * not there */
    char path[400];
    snprintf(path, sizeof path, "%s/big.json", af_tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < AF_KNOWN_FILE_MAX / 64 + 1; i++) fputs("                                                               \n", f);
    fclose(f);
    af_known *k = af_known_create();
    af_error err = {0};
    assert_int_equal(af_known_load(k, path, &err), AF_ERR_FORMAT);
    assert_non_null(strstr(err.msg, path));
    snprintf(path, sizeof path, "%s/missing.json", af_tmp);
    assert_int_equal(af_known_load(k, path, &err), AF_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.json"));
    /* a root without corpus/findings loads nothing, and that is no error */
    size_t files = 9;
    assert_int_equal(af_known_load_root(k, af_tmp, &files, &err), AF_OK);
    assert_int_equal(files, 0);
    assert_int_equal(af_known_count(k), 0);
    af_known_destroy(k);
    af_known_destroy(NULL);
}

/* --- the store and the campaign ------------------------------------------------------- */

/* mutant:causal_top_left is wrong wherever Sq != Sk under a bottom-right causal mask. */
static af_case diverging_case(uint32_t seed, af_dtype dt) {
    af_case c;
    af_case_default(&c);
    c.q_len = 6;
    c.kv_len = 11;
    c.head_dim = c.v_head_dim = 16;
    c.dtype = dt;
    c.causal = true;
    c.diag = AF_DIAG_BOTTOM_RIGHT;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].seed = seed + (uint32_t)t;
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

static const char *af_mutant_known = HEAD
    "{\"id\": \"top-left\", \"class\": \"real_bug\", \"backends\": [\"mutant:causal_*\"], \"kinds\": [\"diverge\"],"
    " \"when\": [\"causal\", \"diag == bottom_right\", \"dtype == f32\"]}" TAIL;

/* The same bug in every dtype and on every diagonal it misplaces (the per-row valid-length
 * one too): the campaign test compares with all its findings, so the entry's `when`, which
 * decides which cases the generator leaves out, must cover every form of it. */
static const char *af_mutant_known_any = HEAD
    "{\"id\": \"top-left\", \"class\": \"real_bug\", \"backends\": [\"mutant:causal_*\"], \"kinds\": [\"diverge\"],"
    " \"when\": [\"causal || window\"]}" TAIL;

static size_t count_dirs(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && !strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

static void test_store_known(void **state) {
    (void)state;
    af_known *k = load(af_mutant_known);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/store", af_tmp);
    af_store_opts o = {.crashes_dir = dir, .known = k};
    af_error err = {0};
    af_store *st = af_store_create(&o, &err);
    assert_non_null(st);
    af_exec *x = mutant_exec();
    af_campaign_stats s;
    memset(&s, 0, sizeof s);
    af_store_event ev[AF_EXEC_MAX_CHECKS];
    size_t nev = 0;
    for (uint32_t i = 0; i < 5; i++) {
        af_case c = diverging_case(100 + 7 * i, AF_F32);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
        assert_int_equal(af_exec_finding_count(x), 1);
        assert_int_equal(af_known_match_exec(k, x, 0), 0);
        s.execs++;
        assert_int_equal(af_store_findings(st, x, &s, 0.0, ev, &nev, &err), AF_OK);
        assert_int_equal(nev, 1);
        assert_int_equal(ev[0].known, 0);
        assert_true(ev[0].first == (i == 0));
        assert_true(ev[0].stored == (i == 0)); /* the exemplar, once */
    }
    /* counted against the entry, never minimized, one bundle: known-top-left */
    assert_int_equal(s.known_hits, 5);
    assert_int_equal(s.n_known, 1);
    assert_string_equal(s.known[0].id, "top-left");
    assert_int_equal(s.known[0].hits, 5);
    assert_int_equal(s.minimize_execs, 0);
    assert_int_equal(s.n_sigs, 0);
    assert_int_equal(count_dirs(dir, ""), 1);
    assert_int_equal(count_dirs(dir, "known-top-left"), 1);
    assert_non_null(strstr(s.known[0].bundle, "known-top-left"));
    assert_int_equal(af_store_known_hits(st, 0, 0), 5);
    /* the exemplar replays as the finding it is, and says so (its case: as found) */
    af_bundle *b;
    assert_int_equal(af_bundle_read(s.known[0].bundle, &b, &err), AF_OK);
    assert_int_equal(af_bundle_kind(b), AF_KIND_DIVERGE);
    assert_int_equal(af_bundle_case(b)->kv_len, 11);
    long e = -1;
    assert_int_equal(af_known_match_bundle(k, b, &e, &err), AF_OK);
    assert_int_equal(e, 0);
    af_bundle_free(b);

    /* the same bug outside the entry as found (f16): minimized, it is the entry's case (f32:
     * the dtype was incidental), so it is counted there, and so are its repeats, unminimized */
    af_case c = diverging_case(300, AF_F16);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    assert_int_equal(af_known_match_exec(k, x, 0), -1);
    s.execs++;
    assert_int_equal(af_store_findings(st, x, &s, 0.0, ev, &nev, &err), AF_OK);
    assert_int_equal(ev[0].known, 0);
    assert_false(ev[0].stored);
    uint64_t spent = s.minimize_execs;
    assert_true(spent > 0);
    assert_int_equal(s.n_sigs, 0);
    assert_int_equal(s.known[0].hits, 6);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    assert_int_equal(af_store_findings(st, x, &s, 0.0, ev, &nev, &err), AF_OK);
    assert_int_equal(ev[0].known, 0);
    assert_int_equal(s.minimize_execs, spent);
    assert_int_equal(count_dirs(dir, ""), 1);

    /* a near miss: an entry narrower than what the bug needs (two query heads), the case
     * with one: neither as found nor minimized is it the entry's, so it is a new finding,
     * minimized and stored */
    {
        af_known *k2 = load(HEAD "{\"id\": \"top-left-heads\", \"class\": \"real_bug\", \"backends\": "
                                 "[\"mutant:causal_*\"], \"kinds\": [\"diverge\"], \"when\": [\"causal\", \"hq >= 2\"]}" TAIL);
        char dirn[300];
        snprintf(dirn, sizeof dirn, "%s/store-near", af_tmp);
        af_store_opts on = {.crashes_dir = dirn, .known = k2};
        af_store *sn = af_store_create(&on, &err);
        af_campaign_stats ss;
        memset(&ss, 0, sizeof ss);
        c = diverging_case(310, AF_F32);
        assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
        assert_int_equal(af_store_findings(sn, x, &ss, 0.0, ev, &nev, &err), AF_OK);
        assert_int_equal(ev[0].known, -1);
        assert_true(ev[0].stored);
        assert_true(ss.minimize_execs > 0);
        assert_int_equal(ss.n_sigs, 1);
        assert_int_equal(ss.known_hits, 0);
        assert_int_equal(count_dirs(dirn, "diverge-"), 1);
        af_campaign_stats_free(&ss);
        af_store_destroy(sn);
        af_known_destroy(k2);
    }

    /* a second store (another job, a later run) finds the exemplar there: kept as it is */
    af_store *st2 = af_store_create(&o, &err);
    af_campaign_stats s2;
    memset(&s2, 0, sizeof s2);
    c = diverging_case(500, AF_F32);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    assert_int_equal(af_store_findings(st2, x, &s2, 0.0, ev, &nev, &err), AF_OK);
    assert_int_equal(ev[0].known, 0);
    assert_false(ev[0].stored);
    assert_false(ev[0].failed);
    assert_int_equal(s2.known_hits, 1);
    assert_non_null(strstr(s2.known[0].bundle, "known-top-left"));
    assert_int_equal(count_dirs(dir, ""), 1);

    /* no entries (--no-known): the same findings are minimized and stored */
    char dir2[300];
    snprintf(dir2, sizeof dir2, "%s/store-none", af_tmp);
    af_store_opts o2 = {.crashes_dir = dir2};
    af_store *st3 = af_store_create(&o2, &err);
    af_campaign_stats s3;
    memset(&s3, 0, sizeof s3);
    c = diverging_case(100, AF_F32);
    assert_int_equal(af_exec_run_case(x, &c, &err), AF_OK);
    assert_int_equal(af_store_findings(st3, x, &s3, 0.0, ev, &nev, &err), AF_OK);
    assert_int_equal(ev[0].known, -1);
    assert_true(ev[0].stored);
    assert_true(s3.minimize_execs > 0);
    assert_int_equal(s3.known_hits, 0);
    assert_int_equal(count_dirs(dir2, "known-"), 0);
    assert_int_equal(count_dirs(dir2, "diverge-"), 1);

    af_campaign_stats_free(&s);
    af_campaign_stats_free(&s2);
    af_campaign_stats_free(&s3);
    af_store_destroy(st);
    af_store_destroy(st2);
    af_store_destroy(st3);
    af_exec_destroy(x);
    af_known_destroy(k);
}

/* A campaign on the mutant with its bug known: hits in the stats (and in the stats file),
 * one exemplar, no bundle of that bug's own; the generator sends the mutant fewer
 * bottom-right causal f32 cases once it keeps hitting it, but still some. With --jobs 2 the
 * parent's stats sum the jobs' hits. */
static void campaign(const af_known *k, unsigned jobs, const char *name, af_campaign_stats *s) {
    af_campaign_opts o;
    af_campaign_opts_default(&o);
    o.exec.backends[0] = "mutant:causal_top_left";
    o.exec.n_backends = 1;
    o.exec.pairs[0] = NULL;
    o.exec.n_pairs = 0;
    for (int r = 0; r < AF_REL_COUNT; r++) o.exec.relations[r] = false;
    o.runs = 1500;
    o.seed = 5;
    o.quiet = true;
    o.no_bind = true;
    o.jobs = jobs;
    o.known = k;
    static char dir[300], stats[300];
    snprintf(dir, sizeof dir, "%s/%s", af_tmp, name);
    snprintf(stats, sizeof stats, "%s/%s.json", af_tmp, name);
    o.crashes_dir = dir;
    o.stats_path = stats;
    af_error err = {0};
    if (af_campaign_run(&o, s, &err) != AF_OK) fail_msg("campaign: %s", err.msg);
}

/* The mutant's findings: every one is its bug, whatever kind it showed as found (a finding
 * stored as found, when the minimizing budget is spent, keeps its raw kind). */
static uint64_t count_of_bug(const af_campaign_stats *s) {
    uint64_t n = 0;
    for (size_t i = 0; i < s->n_sigs; i++) n += s->sigs[i].count;
    return n;
}

static void test_campaign_known(void **state) {
    (void)state;
    af_known *k = load(af_mutant_known_any);
    af_campaign_stats with, without;
    campaign(k, 1, "camp-known", &with);
    campaign(NULL, 1, "camp-none", &without);
    uint64_t base = count_of_bug(&without); /* the bug's findings, all of them new */
    printf("known bug: %llu hits (%llu more as new findings) and %llu backend runs left out in %llu execs; without the entry %llu findings of it\n",
           (unsigned long long)with.known_hits, (unsigned long long)count_of_bug(&with), (unsigned long long)with.known_skipped, (unsigned long long)with.execs,
           (unsigned long long)base);
    assert_true(base > 40);
    assert_true(with.known_hits > 8);            /* it keeps being found ... */
    /* ... less often: trigger cases left out. (All its forms count: a NaN leak of the wrong
     * alignment minimizes into the entry's case and is a hit; what matches no entry even
     * minimized, a kind the entry does not list, stays a finding.) */
    assert_true(with.known_hits + count_of_bug(&with) < base * 6 / 10);
    assert_true(with.known_skipped > 0);
    assert_int_equal(with.n_known, 1);
    assert_int_equal(with.known[0].skipped, with.known_skipped);
    /* at most 90% of the trigger cases are left out (AF_KNOWN_SKIP_MAX): hits stay >= 10% of what they were */
    assert_true(with.known_hits * 10 >= base / 2);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/camp-known", af_tmp);
    assert_int_equal(count_dirs(dir, "known-top-left"), 1);
    /* the stats file holds the hits */
    char path[300], buf[1 << 16];
    snprintf(path, sizeof path, "%s/camp-known.json", af_tmp);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    assert_non_null(strstr(buf, "\"known_hits\""));
    assert_non_null(strstr(buf, "\"top-left\""));

    /* --jobs 2: the parent's stats sum the jobs' hits per known bug */
    af_campaign_stats jobs;
    campaign(k, 2, "camp-jobs", &jobs);
    assert_int_equal(jobs.n_known, 1);
    assert_true(jobs.known_hits > 0);
    assert_int_equal(jobs.known[0].hits, jobs.known_hits);
    assert_int_equal(jobs.known[0].skipped, jobs.known_skipped);
    snprintf(dir, sizeof dir, "%s/camp-jobs", af_tmp);
    assert_int_equal(count_dirs(dir, "known-top-left"), 1);

    af_campaign_stats_free(&with);
    af_campaign_stats_free(&without);
    af_campaign_stats_free(&jobs);
    af_known_destroy(k);
}

/* The repository's own entries load (corpus/findings/<stack>/known.json). */
static void test_repository_entries(void **state) {
    (void)state;
    const char *src = getenv("AF_SOURCE_DIR");
    if (!src) skip();
    af_known *k = af_known_create();
    af_error err = {0};
    size_t files = 0;
    if (af_known_load_root(k, src, &files, &err) != AF_OK) fail_msg("%s", err.msg);
    assert_true(files >= 6);
    assert_true(af_known_count(k) >= 30);
    /* a diverge of a torch CUDA kernel, checked against every entry (no match, so each
     * applicable entry is evaluated); what it costs is printed, not asserted (a wall-clock
     * bound fails on a loaded machine): microseconds where the machine is not loaded */
    af_case c = small_case();
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT, c.dtype = AF_F16;
    af_result r = result_of(AF_KIND_DIVERGE, 8, 2, 0);
    size_t n = 20000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long hits = 0;
    for (size_t i = 0; i < n; i++) hits += match(k, AF_KIND_DIVERGE, "target:torch/cuda_sdpa_cudnn", &c, &r, "", "");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / (double)n;
    printf("matching a finding against %zu entries: %.2f us\n", af_known_count(k), us);
    assert_int_equal(hits, -(long)n); /* a diverge outside the masked rows: no entry */
    af_known_destroy(k);
}

/* --- scope ---------------------------------------------------------------------------- */

/* $ATTNFUZZ_CPU_FLAGS replaces /proc/cpuinfo (read once: this runs first). */
static void test_cpu_flags(void **state) {
    (void)state;
    setenv("ATTNFUZZ_CPU_FLAGS", " fpu,avx2  fma\tf16c", 1);
    const char *f = af_host_cpu_flags();
    assert_non_null(f);
    assert_string_equal(f, "fpu avx2 fma f16c");
    assert_ptr_equal(af_host_cpu_flags(), f); /* once */
    assert_true(af_host_has_flag(f, "avx2"));
    assert_true(af_host_has_flag(f, "f16c"));
    assert_false(af_host_has_flag(f, "avx"));   /* whole names only */
    assert_false(af_host_has_flag(f, "avx512f"));
    assert_false(af_host_has_flag(NULL, "fpu"));
    assert_true(af_host_has_flag("a,b c", "b"));
}

static void test_versions(void **state) {
    (void)state;
    /* numeric per component, not as text: 2.11 is after 2.9 */
    assert_true(af_host_version_cmp("2.11.0", "2.9.1") > 0);
    assert_true(af_host_version_cmp("2.9.1", "2.11.0") < 0);
    assert_true(af_host_version_cmp("2.11", "2.11.0") == 0);
    assert_true(af_host_version_cmp("10.0", "9.99.99") > 0);
    assert_true(af_host_version_cmp("2.5.1+cu124", "2.5.1") == 0); /* the local label does not count */
    assert_true(af_host_version_cmp("v1.2", "1.2.0") == 0);
    assert_true(af_host_version_cmp("2025.1.0", "2024.6.0") > 0);
    static const struct {
        const char *spec, *version;
        bool holds;
    } t[] = {
        {">=2.11,<2.13", "2.11.0", true},  {">=2.11,<2.13", "2.12.9", true},  {">=2.11,<2.13", "2.13.0", false},
        {">=2.11,<2.13", "2.9.1", false},  {">= 2.11 , < 2.13", "2.12", true}, {"<3.8", "3.7.9", true},
        {"<3.8", "3.10.0", false},         {"==9.19.*", "9.19.0", true},       {"==9.19.*", "9.19", true},
        {"==9.19.*", "9.190.1", false},    {"==9.19.*", "9.1.9", false},       {"==9.19.*", "9.20.0", false},
        {"!=2.12.*", "2.12.3", false},     {"!=2.12.*", "2.13.0", true},       {"==2.11", "2.11.0", true},
        {"!=2.11", "2.11.0", false},       {">2.11", "2.11.1", true},          {"<=2.11", "2.11.0", true},
        {"~=2.11", "2.15.0", true},        {"~=2.11", "3.0", false},           {"~=2.11", "2.10.9", false},
        {"~=2.11.1", "2.11.5", true},      {"~=2.11.1", "2.12.0", false},      {">=2.11", "unknown", false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        af_error err = {0};
        if (af_host_spec_check(t[i].spec, &err) != AF_OK) fail_msg("%s: %s", t[i].spec, err.msg);
        if (af_host_spec_holds(t[i].spec, t[i].version) != t[i].holds)
            fail_msg("\"%s\" on %s: want %s", t[i].spec, t[i].version, t[i].holds ? "holds" : "fails");
    }
    static const struct {
        const char *spec, *why;
    } bad[] = {{"2.11", "no operator"},           {">=2.x", "numbers separated by dots"},
               {">=2.11.*", ".* after an operator"}, {"==2.*.1", "numbers separated by dots"},
               {">=2.11,", "an empty clause"},     {"", "an empty clause"},
               {"~=2", "two components"},          {"=>2.11", "no operator"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        af_error err = {0};
        if (af_host_spec_check(bad[i].spec, &err) != AF_ERR_FORMAT) fail_msg("\"%s\" accepted", bad[i].spec);
        if (!strstr(err.msg, bad[i].why)) fail_msg("\"%s\": \"%s\" does not say %s", bad[i].spec, err.msg, bad[i].why);
        assert_false(af_host_spec_holds(bad[i].spec, "2.11.0"));
    }
}

#define NEEDS_ENTRY(id, needs)                                                                                         \
    "{\"id\": \"" id "\", \"class\": \"real_bug\", \"backends\": [\"x\"], \"kinds\": [\"diverge\"], \"needs\": " needs "}"

static void test_needs_load(void **state) {
    (void)state;
    af_known *k = load(HEAD NEEDS_ENTRY("a", "{\"cpu\": [\"avx512f\", \"avx512bw\"], \"cpu_not\": [\"amx_bf16\"], "
                                             "\"sm\": [80, 90], \"versions\": {\"torch\": \">=2.11,<2.13\", "
                                             "\"cudnn\": \"==9.19.*\"}}") "," NEEDS_ENTRY("b", "{}") TAIL);
    af_known_info info;
    af_known_info_of(k, 0, &info);
    assert_string_equal(info.needs, "cpu avx512f avx512bw; cpu_not amx_bf16; sm 80|90; torch >=2.11,<2.13; cudnn ==9.19.*");
    af_known_info_of(k, 1, &info);
    assert_string_equal(info.needs, "");
    af_known_destroy(k);
    load_fails(HEAD NEEDS_ENTRY("a", "[\"avx512f\"]") TAIL, "entry a: \"needs\" must be an object");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"gpu\": [90]}") TAIL, "entry a: needs: unknown key \"gpu\"");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"cpu\": \"avx512f\"}") TAIL, "entry a: needs.cpu must be a list");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"cpu_not\": [\"AVX512F\"]}") TAIL, "needs.cpu_not: \"AVX512F\" is no CPU flag");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"cpu\": [1]}") TAIL, "needs.cpu: a non-string is no CPU flag");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"sm\": [8.6]}") TAIL, "needs.sm: a compute capability is an integer");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"sm\": 90}") TAIL, "needs.sm must be a list");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"versions\": [\"torch\"]}") TAIL, "needs.versions must be an object");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"versions\": {\"torch\": 2.11}}") TAIL,
               "needs.versions.torch must be a version specifier");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"versions\": {\"torch\": \">=2.x\"}}") TAIL,
               "entry a: needs.versions.torch: version specifier \">=2.x\"");
    load_fails(HEAD NEEDS_ENTRY("a", "{\"versions\": {\"Torch!\": \">=2\"}}") TAIL, "is no stack or library name");
}

static void test_needs_scope(void **state) {
    (void)state;
    af_known *k = load(HEAD NEEDS_ENTRY("cpu", "{\"cpu\": [\"avx512f\", \"amx_bf16\"]}") ","
                       NEEDS_ENTRY("cpu-not", "{\"cpu_not\": [\"avx512_bf16\"]}") ","
                       NEEDS_ENTRY("sm", "{\"sm\": [80, 90]}") ","
                       NEEDS_ENTRY("ver", "{\"versions\": {\"torch\": \"<2.12\", \"cudnn\": \"==9.19.*\"}}") ","
                       NEEDS_ENTRY("none", "{}") TAIL);
    af_host_libs libs;
    memset(&libs, 0, sizeof libs);
    af_known_host avx2 = {"fpu avx2 fma", NULL}, avx512 = {"avx2 avx512f amx_bf16 avx512_bf16", &libs};
    char why[256];
    /* CPU flags: every one of cpu, none of cpu_not */
    assert_int_equal(af_known_scope_of(k, 0, &avx2, why, sizeof why), AF_KNOWN_SCOPE_OUT);
    assert_string_equal(why, "needs avx512f, amx_bf16");
    assert_int_equal(af_known_scope_of(k, 0, &avx512, why, sizeof why), AF_KNOWN_SCOPE_IN);
    assert_string_equal(why, "");
    af_known_host half = {"avx512f", NULL};
    assert_int_equal(af_known_scope_of(k, 0, &half, why, sizeof why), AF_KNOWN_SCOPE_OUT);
    assert_string_equal(why, "needs amx_bf16");
    assert_int_equal(af_known_scope_of(k, 1, &avx2, why, sizeof why), AF_KNOWN_SCOPE_IN);
    assert_int_equal(af_known_scope_of(k, 1, &avx512, why, sizeof why), AF_KNOWN_SCOPE_OUT);
    assert_string_equal(why, "needs no avx512_bf16");
    /* NULL: this host, whose flags test_cpu_flags set to "fpu avx2 fma f16c" */
    assert_int_equal(af_known_scope_of(k, 0, NULL, NULL, 0), AF_KNOWN_SCOPE_OUT);
    assert_int_equal(af_known_scope_of(k, 1, NULL, NULL, 0), AF_KNOWN_SCOPE_IN);
    /* the GPU and versions: unreported is unknown, reported is judged */
    assert_int_equal(af_known_scope_of(k, 2, &avx2, why, sizeof why), AF_KNOWN_SCOPE_UNKNOWN);
    assert_string_equal(why, "needs sm 80|90, unknown");
    assert_int_equal(af_known_scope_of(k, 3, &avx2, why, sizeof why), AF_KNOWN_SCOPE_UNKNOWN);
    assert_string_equal(why, "needs torch <2.12, unknown; needs cudnn ==9.19.*, unknown");
    libs.n = 3;
    snprintf(libs.name[0], sizeof libs.name[0], "torch");
    snprintf(libs.version[0], sizeof libs.version[0], "2.15.0");
    snprintf(libs.name[1], sizeof libs.name[1], "cudnn");
    snprintf(libs.version[1], sizeof libs.version[1], "9.19.0");
    snprintf(libs.name[2], sizeof libs.name[2], "sm");
    snprintf(libs.version[2], sizeof libs.version[2], "75");
    assert_int_equal(af_known_scope_of(k, 2, &avx512, why, sizeof why), AF_KNOWN_SCOPE_OUT);
    assert_string_equal(why, "needs sm 80|90, have 75");
    assert_int_equal(af_known_scope_of(k, 3, &avx512, why, sizeof why), AF_KNOWN_SCOPE_OUT);
    assert_string_equal(why, "needs torch <2.12, have 2.15.0");
    snprintf(libs.version[0], sizeof libs.version[0], "2.11.0");
    snprintf(libs.version[2], sizeof libs.version[2], "9.0");
    assert_int_equal(af_known_scope_of(k, 3, &avx512, why, sizeof why), AF_KNOWN_SCOPE_IN);
    assert_int_equal(af_known_scope_of(k, 2, &avx512, why, sizeof why), AF_KNOWN_SCOPE_IN);
    snprintf(libs.version[1], sizeof libs.version[1], "9.20.1"); /* one fails, torch still holds */
    assert_int_equal(af_known_scope_of(k, 3, &avx512, why, sizeof why), AF_KNOWN_SCOPE_OUT);
    assert_string_equal(why, "needs cudnn ==9.19.*, have 9.20.1");
    assert_int_equal(af_known_scope_of(k, 4, &avx2, why, sizeof why), AF_KNOWN_SCOPE_IN);

    /* matching: out of scope never matches, unknown does, any_scope (a bundle's record) always */
    af_case c = small_case();
    af_result r = result_of(AF_KIND_DIVERGE, 4, 0, 0);
    af_known_finding f = {AF_KIND_DIVERGE, "x", &c, &r, NULL, NULL, NULL, &avx2, false};
    assert_int_equal(af_known_match(k, &f), 1); /* cpu is out of scope on AVX2, cpu-not in */
    af_known_host bf16 = {"avx512_bf16", NULL};
    f.host = &bf16; /* cpu and cpu-not out; sm unknown (no GPU reported): counts as met */
    assert_int_equal(af_known_match(k, &f), 2);
    f.host = &avx512;
    assert_int_equal(af_known_match(k, &f), 0);
    f.host = &half;
    assert_int_equal(af_known_match(k, &f), 1);
    f.any_scope = true;
    assert_int_equal(af_known_match(k, &f), 0);
    af_known_destroy(k);
}

int main(void) {
    snprintf(af_tmp, sizeof af_tmp, "/tmp/attnfuzz-test-known-XXXXXX");
    if (!mkdtemp(af_tmp)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_flags),   cmocka_unit_test(test_versions),
        cmocka_unit_test(test_needs_load),  cmocka_unit_test(test_needs_scope),
        cmocka_unit_test(test_predicates),  cmocka_unit_test(test_match_and_near_misses),
        cmocka_unit_test(test_backward_and_serving_vars),
        cmocka_unit_test(test_load_errors), cmocka_unit_test(test_store_known),
        cmocka_unit_test(test_campaign_known), cmocka_unit_test(test_repository_entries),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", af_tmp);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
