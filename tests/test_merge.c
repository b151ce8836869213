/* test_merge.c - joining shards (merge.h), on shard directories built here by hand:
 *   - one bundle per name: of three shards holding one signature, the case with the
 *     fewest flops is kept (a tie goes to the lower shard), and names are generic (a
 *     known-<id> bundle is merged like a signature);
 *   - the merged stats are the sums of the shards' numbers computed here independently
 *     (execs, findings, the time split, hits per known bug as an array keyed by id and
 *     as an object of counts), the signature tables joined, per-shard rows, a missing
 *     shard named;
 *   - a second merge of the same sources changes nothing (idempotent), and a smaller
 *     case found later replaces the bundle with the old version still readable by a
 *     reader that opened it before, until the grace has passed;
 *   - a real directory already in OUT is never replaced, and OUT cannot be a source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/merge.h"
#include "attnfuzz/mem.h"

static char tmp[256];

/* snprintf for paths built from the paths above (this test's are short; the checked
 * truncation of snprintf proper cannot see that) */
static void pathf(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    assert_true(w >= 0 && (size_t)w < len);
}

#define SIG 0x00000000000abcdeull
#define NAME "diverge-00000000000abcde"

static void sh(const char *fmt, const char *arg) {
    char cmd[PATH_MAX + 64];
    pathf(cmd, sizeof cmd, fmt, arg);
    assert_int_equal(system(cmd), 0);
}

/* A bundle named for SIG under dir (or renamed to `rename_to`), its case q_len x kv_len
 * with head_dim 8 and the given value seed: flops grow with q_len * kv_len. */
static void write_bundle(const char *dir, uint32_t q_len, uint32_t kv_len, uint32_t seed, const char *rename_to) {
    af_case c;
    af_case_default(&c);
    c.q_len = q_len;
    c.kv_len = kv_len;
    c.head_dim = c.v_head_dim = 8;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].seed = seed + (uint32_t)t;
    af_case_repair(&c, 0);
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    af_bundle_spec spec = {.c = &c, .tensors = af_inputs_get(in), .kind = AF_KIND_DIVERGE,
                           .signature = rename_to ? SIG + seed : SIG, .who = "fused"};
    char path[PATH_MAX];
    assert_int_equal(af_bundle_write(dir, &spec, path, sizeof path, &err), AF_OK);
    af_inputs_destroy(in);
    if (rename_to) {
        char to[PATH_MAX];
        pathf(to, sizeof to, "%s/%s", dir, rename_to);
        assert_int_equal(rename(path, to), 0);
    }
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    return j;
}

static double num(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItem(j, name);
    if (!cJSON_IsNumber(v)) fail_msg("%s is not a number", name);
    return v->valuedouble;
}

/* Shard i's stats: numbers that make every sum distinct. */
static void write_stats(const char *dir, int i, int shards, bool with_known) {
    char path[PATH_MAX + 32], text[PATH_MAX + 4096];
    pathf(path, sizeof path, "%s/stats.json", dir);
    pathf(text, sizeof text,
             "{\"execs\": %d, \"skipped\": %d, \"elapsed\": %d, \"execs_per_sec\": %d, \"findings_total\": %d,"
             " \"unique_signatures\": 1, \"write_errors\": 0, \"minimize_execs\": %d, \"jobs\": 1,"
             " \"jobs_kept_dying\": %s, \"job_deaths\": [%s],"
             " \"seconds\": {\"generate\": %d.5, \"checks\": %d},"
             " \"findings_per_kind\": {\"diverge\": 1, \"crash\": 0},"
             " \"signatures\": [{\"signature\": \"00000000000abcde\", \"kind\": \"diverge\", \"who\": \"fused\","
             " \"count\": %d, \"first_exec\": %d, \"first_time\": %d.25, \"bundle\": \"%s/crashes/" NAME "\"}]"
             "%s%s%s, \"finished\": %s, \"shard\": %d, \"shards\": %d, \"seed\": 7, \"host\": \"h%d\"}",
             1000 * (i + 1), i, 10 + i, 100 * (i + 1), 3 + i, 50 + i, i == 1 ? "true" : "false",
             i == 2 ? "{\"job\": 0, \"pid\": 9, \"signal\": 9}" : "", 2 + i, 5 + i, i + 1, 10 * i, 7 - i, dir,
             with_known ? ", \"known_hits\": {\"cudnn-nan\": " : "", with_known ? (i == 0 ? "2" : "3") : "",
             with_known ? "}, \"known\": [{\"id\": \"cudnn-nan\", \"hits\": 4, \"bundle\": null}]" : "",
             i == 0 ? "true" : "false", i, shards, i);
    write_text(path, text);
}

static void shard_dir(char *buf, size_t len, int i) { pathf(buf, len, "%s/root/shard-%d", tmp, i); }

/* The version OUT/crashes/NAME points at, as read from the link. */
static void link_of(const char *out, const char *name, char *buf, size_t len) {
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/crashes/%s", out, name);
    ssize_t n = readlink(path, buf, len - 1);
    assert_true(n > 0);
    buf[n] = 0;
}

static const af_case *case_of(const char *out, const char *name, af_bundle **b) {
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/crashes/%s", out, name);
    af_error err = {0};
    assert_int_equal(af_bundle_read(path, b, &err), AF_OK);
    return af_bundle_case(*b);
}

static int setup(void **state) {
    (void)state;
    pathf(tmp, sizeof tmp, "/tmp/af_test_merge_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    /* shard 0: the signature on a big case; shard 1: a smaller one (seed 20); shard 2:
     * as small as shard 1's (seed 30, loses the tie), plus a known bug's exemplar; shard
     * 3 of 4: never started (missing) */
    char d[PATH_MAX], c[PATH_MAX + 64];
    const uint32_t q[3] = {16, 4, 4}, k[3] = {16, 8, 8}, seed[3] = {10, 20, 30};
    for (int i = 0; i < 3; i++) {
        shard_dir(d, sizeof d, i);
        pathf(c, sizeof c, "%s/crashes", d);
        write_bundle(c, q[i], k[i], seed[i], NULL);
        write_stats(d, i, 4, i != 1);
    }
    shard_dir(d, sizeof d, 2);
    pathf(c, sizeof c, "%s/crashes", d);
    write_bundle(c, 2, 2, 5, "known-cudnn-nan");
    /* a bundle being written (a temporary directory) is not seen */
    pathf(c, sizeof c, "%s/crashes/.tmp-" NAME "-1-0", d);
    sh("mkdir -p '%s'", c);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    sh("rm -rf '%s'", tmp);
    return 0;
}

static void merge(const char *out, const char *src, double grace, af_merge_result *r) {
    af_merge_opts o = {.out = out, .sources = &src, .n_sources = 1, .grace = grace, .quiet = true};
    af_error err = {0};
    if (af_merge_run(&o, r, &err) != AF_OK) fail_msg("merge: %s", err.msg);
}

static void test_smallest_kept(void **state) {
    (void)state;
    char out[PATH_MAX], root[PATH_MAX];
    pathf(out, sizeof out, "%s/root/merged", tmp); /* inside the root: not a source */
    pathf(root, sizeof root, "%s/root", tmp);
    af_merge_result r;
    merge(out, root, 0, &r);
    assert_int_equal(r.sources, 3);
    assert_int_equal(r.seen, 4);
    assert_int_equal(r.added, 2);
    assert_int_equal(r.replaced, 0);
    assert_int_equal(r.bundles, 2);
    assert_int_equal(r.shards_expected, 4);
    assert_int_equal(r.shards_finished, 1);
    assert_int_equal(r.execs, 1000 + 2000 + 3000);
    af_bundle *b;
    const af_case *c = case_of(out, NAME, &b);
    assert_int_equal(c->q_len, 4); /* shard 1's, not shard 0's 16 x 16 */
    assert_int_equal(c->t[0].seed, 20); /* and not shard 2's equal one: the lower shard wins */
    af_bundle_free(b);
    c = case_of(out, "known-cudnn-nan", &b);
    assert_int_equal(c->q_len, 2);
    af_bundle_free(b);
    char target[PATH_MAX];
    link_of(out, NAME, target, sizeof target);
    assert_int_equal(strncmp(target, ".v/" NAME "@", strlen(".v/" NAME "@")), 0);
}

static void test_stats_sums(void **state) {
    (void)state;
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/root/merged/stats.json", tmp);
    cJSON *j = read_json(path);
    assert_string_equal(cJSON_GetObjectItem(j, "format")->valuestring, AF_MERGE_FORMAT);
    /* sums, as write_stats made them: shard i has execs 1000 (i + 1), skipped i, ... */
    assert_true(num(j, "execs") == 6000);
    assert_true(num(j, "skipped") == 0 + 1 + 2);
    assert_true(num(j, "findings_total") == 3 + 4 + 5);
    assert_true(num(j, "minimize_execs") == 50 + 51 + 52);
    assert_true(num(j, "elapsed") == 12);          /* the longest shard */
    assert_true(num(j, "shard_seconds") == 10 + 11 + 12);
    assert_true(num(j, "execs_per_sec") == 100 + 200 + 300);
    assert_true(num(j, "shards") == 4);
    assert_true(num(j, "shards_finished") == 1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "jobs_kept_dying")));
    assert_false(cJSON_IsTrue(cJSON_GetObjectItem(j, "finished")));
    const cJSON *missing = cJSON_GetObjectItem(j, "shards_missing");
    assert_int_equal(cJSON_GetArraySize(missing), 1);
    assert_true(cJSON_GetArrayItem(missing, 0)->valuedouble == 3);
    const cJSON *sec = cJSON_GetObjectItem(j, "seconds");
    assert_true(num(sec, "generate") == 2.5 + 3.5 + 4.5);
    assert_true(num(sec, "checks") == 5 + 6 + 7);
    /* one signature: counts summed, the earliest first_time, every shard that found it */
    const cJSON *sigs = cJSON_GetObjectItem(j, "signatures");
    assert_int_equal(cJSON_GetArraySize(sigs), 1);
    const cJSON *s0 = cJSON_GetArrayItem(sigs, 0);
    assert_true(num(s0, "count") == 1 + 2 + 3);
    assert_true(num(s0, "first_time") == 5.25); /* shard 2's 7 - 2 */
    assert_true(num(s0, "first_shard") == 2);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(s0, "found_by")), 3);
    char want[PATH_MAX];
    pathf(want, sizeof want, "%s/root/merged/crashes/" NAME, tmp);
    assert_string_equal(cJSON_GetObjectItem(s0, "bundle")->valuestring, want);
    /* unique counts are the merged table's, not sums */
    assert_true(num(j, "unique_signatures") == 1);
    assert_true(num(cJSON_GetObjectItem(j, "findings_per_kind"), "diverge") == 1);
    assert_true(num(cJSON_GetObjectItem(j, "findings_per_kind"), "crash") == 0);
    /* known bugs, generically: an object of counts and an array keyed by id */
    assert_true(num(cJSON_GetObjectItem(j, "known_hits"), "cudnn-nan") == 2 + 3);
    const cJSON *known = cJSON_GetObjectItem(j, "known");
    assert_int_equal(cJSON_GetArraySize(known), 1);
    assert_true(num(cJSON_GetArrayItem(known, 0), "hits") == 4 + 4);
    /* other arrays concatenated, each element with its shard */
    const cJSON *deaths = cJSON_GetObjectItem(j, "job_deaths");
    assert_int_equal(cJSON_GetArraySize(deaths), 1);
    assert_true(num(cJSON_GetArrayItem(deaths, 0), "shard") == 2);
    /* one row per shard */
    const cJSON *rows = cJSON_GetObjectItem(j, "per_shard");
    assert_int_equal(cJSON_GetArraySize(rows), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *row = cJSON_GetArrayItem(rows, i);
        assert_true(num(row, "shard") == i);
        assert_true(num(row, "execs") == 1000 * (i + 1));
        assert_string_equal(cJSON_GetObjectItem(row, "host")->valuestring, i == 0 ? "h0" : i == 1 ? "h1" : "h2");
    }
    cJSON_Delete(j);
}

static void test_idempotent(void **state) {
    (void)state;
    char out[PATH_MAX], root[PATH_MAX], before[PATH_MAX], after[PATH_MAX], path[PATH_MAX];
    pathf(out, sizeof out, "%s/root/merged", tmp);
    pathf(root, sizeof root, "%s/root", tmp);
    link_of(out, NAME, before, sizeof before);
    pathf(path, sizeof path, "%s/stats.json", out);
    cJSON *j1 = read_json(path);
    af_merge_result r;
    merge(out, root, 0, &r);
    assert_int_equal(r.added, 0);
    assert_int_equal(r.replaced, 0);
    assert_int_equal(r.bundles, 2);
    link_of(out, NAME, after, sizeof after);
    assert_string_equal(before, after);
    cJSON *j2 = read_json(path);
    cJSON_DeleteItemFromObject(j1, "merged_at");
    cJSON_DeleteItemFromObject(j2, "merged_at");
    assert_true(cJSON_Compare(j1, j2, true));
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    /* one version per name: nothing was copied again */
    char versions[PATH_MAX + 8];
    pathf(versions, sizeof versions, "%s/crashes/.v", out);
    DIR *d = opendir(versions);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 2);
}

static void test_replaced_by_smaller(void **state) {
    (void)state;
    char out[PATH_MAX], root[PATH_MAX], old[PATH_MAX], now[PATH_MAX], path[PATH_MAX + 16], d[PATH_MAX];
    pathf(out, sizeof out, "%s/root/merged", tmp);
    pathf(root, sizeof root, "%s/root", tmp);
    link_of(out, NAME, old, sizeof old);
    /* a reader opens the bundle before the swap */
    af_bundle *reader;
    pathf(path, sizeof path, "%s/crashes/" NAME, out);
    af_error err = {0};
    assert_int_equal(af_bundle_read(path, &reader, &err), AF_OK);
    /* shard 3 starts and finds the bug on a smaller case */
    shard_dir(d, sizeof d, 3);
    pathf(path, sizeof path, "%s/crashes", d);
    write_bundle(path, 2, 4, 40, NULL);
    af_merge_result r;
    merge(out, root, 0.3, &r);
    assert_int_equal(r.sources, 4);
    assert_int_equal(r.added, 0);
    assert_int_equal(r.replaced, 1);
    link_of(out, NAME, now, sizeof now);
    assert_string_not_equal(old, now);
    af_bundle *b;
    const af_case *c = case_of(out, NAME, &b);
    assert_int_equal(c->q_len, 2);
    assert_int_equal(c->t[0].seed, 40);
    af_bundle_free(b);
    /* the reader still reads the version it opened, complete: its q.npy.zst is the
     * [1, 1, 4, 8] of its case (the new version's would be [1, 1, 2, 8]: a shape error) */
    assert_int_equal(af_bundle_case(reader)->q_len, 4);
    af_inputs *in = af_inputs_create();
    if (af_bundle_load_inputs(reader, in, &err) != AF_OK) fail_msg("%s", err.msg);
    af_inputs_destroy(in);
    af_bundle_free(reader);
    /* within the grace the old version stays; past it, the next merge removes it */
    pathf(path, sizeof path, "%s/crashes/%s", out, old);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    struct timespec pause = {0, 400000000};
    nanosleep(&pause, NULL);
    merge(out, root, 0.3, &r);
    assert_int_equal(r.removed, 1);
    assert_int_equal(r.replaced, 0);
    assert_int_not_equal(stat(path, &sb), 0);
    assert_int_equal(r.bundles, 2);
}

static void test_real_directory_and_out_as_source(void **state) {
    (void)state;
    char out[PATH_MAX], root[PATH_MAX], path[PATH_MAX + 16];
    pathf(out, sizeof out, "%s/other", tmp);
    pathf(root, sizeof root, "%s/root", tmp);
    /* OUT/crashes/NAME is a real directory (not a merge's): left alone */
    pathf(path, sizeof path, "%s/crashes", out);
    write_bundle(path, 32, 32, 99, NULL);
    af_merge_result r;
    merge(out, root, 0, &r);
    assert_int_equal(r.added, 1); /* the known bug only */
    af_bundle *b;
    assert_int_equal(case_of(out, NAME, &b)->q_len, 32);
    af_bundle_free(b);
    /* OUT given as a source */
    const char *srcs[2] = {root, out};
    af_merge_opts o = {.out = out, .sources = srcs, .n_sources = 2, .quiet = true};
    af_error err = {0};
    assert_int_equal(af_merge_run(&o, &r, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cannot be a source"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smallest_kept),
        cmocka_unit_test(test_stats_sums),
        cmocka_unit_test(test_idempotent),
        cmocka_unit_test(test_replaced_by_smaller),
        cmocka_unit_test(test_real_directory_and_out_as_source),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
